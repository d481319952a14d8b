-- One acquire+release cycle of dlock on a random name r:1 .. r:NAMES, as an
-- application does it: acquire, then (after its work) release with the
-- token, two statements, each its own transaction.  A name held by another
-- client gives NULL (0 here): no release then.  Variable: names.
\set id random(1, :names)
SELECT coalesce(dlock_acquire('r:' || :id, '30 s'), 0) AS tok \gset
\if :tok
SELECT dlock_release('r:' || :id, :tok);
\endif
