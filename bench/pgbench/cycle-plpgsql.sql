-- The cycle of cycle-dlock.sql with the hand-written PL/pgSQL lease of
-- bench/plpgsql_lease.sql.  Variable: names.
\set id random(1, :names)
SELECT coalesce(bench_lease_acquire('r:' || :id, '30 s'), 0) AS tok \gset
\if :tok
SELECT bench_lease_release('r:' || :id, :tok);
\endif
