-- The acquire+release cycle of cycle-dlock.sql, each change's event sent
-- by the committing session, as dlock 1.2's first design sent it: a
-- NOTIFY on channel dlock with the same JSON payload, queued in the
-- transaction of the change (run with dlock.notify = off, so that dlock
-- sends nothing itself).  Variable: names.
\set id random(1, :names)
SELECT t AS tok,
       CASE WHEN t > 0 THEN pg_notify('dlock', '{"event": "acquired", "lock_name": "r:' || :id || '", "token": ' || t || ', "previous_token": null}') END AS sent
  FROM (SELECT coalesce(dlock_acquire('r:' || :id, '30 s'), 0) AS t) s \gset
\if :tok
SELECT dlock_release('r:' || :id, :tok),
       pg_notify('dlock', '{"event": "released", "lock_name": "r:' || :id || '", "token": ' || :tok || ', "previous_token": null}');
\endif
