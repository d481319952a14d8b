-- A transaction that only checks its lease in mode 'live' (keeping it from
-- being taken over until the transaction ends) and writes nothing
-- (bench/workloads/53-live-wal.sh).  Variable: tok, the lease's token.
SELECT dlock_check('grp:1', :tok, 'live');
