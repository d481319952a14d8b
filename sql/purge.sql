--
-- purge: dlock_purge deletes the rows of leases that ended long enough ago;
-- their names then count as never acquired, and tokens still only grow.
--
CREATE EXTENSION dlock;
\set SHOW_CONTEXT never

SELECT dlock_acquire('purge:live', '1 min') AS t_live \gset
SELECT dlock_acquire('purge:released', '1 min') AS t_rel \gset
SELECT dlock_release('purge:released', :t_rel);
SELECT dlock_acquire('purge:broken', '1 min') AS t_brk \gset
SELECT dlock_break('purge:broken');
SELECT dlock_acquire('purge:expired', '10 ms') AS t_exp \gset
SELECT pg_sleep(0.1);

-- older_than 1 hour: nothing ended that long ago
SELECT dlock_purge('1 hour') AS purged;
-- older_than 0: every ended lease (released, broken, expired), not the live one
SELECT dlock_purge('0') AS purged;
SELECT lock_name, live FROM dlock_leases ORDER BY lock_name;
-- nothing left to purge
SELECT dlock_purge('0') AS purged;

-- a purged name counts as never acquired for fencing ...
CREATE TABLE purged_rows (name text PRIMARY KEY, fence_token bigint);
CREATE TRIGGER purged_fence BEFORE INSERT OR UPDATE ON purged_rows
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('purge:{name}', 'fence_token');
INSERT INTO purged_rows VALUES ('released', :t_rel);
\echo :LAST_ERROR_SQLSTATE
-- ... and its next acquire gets a greater token than any before
SELECT dlock_acquire('purge:released', '1 min') > :t_exp AS greater_token;

-- the cutoff counts from the end of the lease: a lease released now is
-- not purged with older_than 1 minute, a live lease never is
SELECT dlock_release('purge:live', :t_live);
SELECT dlock_purge('1 minute') AS purged;
SELECT count(*) AS rows_left FROM dlock_leases;

-- batches: more rows than one batch (1000) are all purged (with
-- purge:live, released above: 2501)
SELECT count(dlock_release(n, dlock_acquire(n, '1 min')))
  FROM (SELECT 'purge:batch:' || i AS n FROM generate_series(1, 2500) i) s;
SELECT dlock_purge('0') AS purged;
SELECT count(*) AS rows_left FROM dlock_leases;

-- bad input: 22004, 22023; nothing deleted
SELECT dlock_purge(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_purge('-1 s');
\echo :LAST_ERROR_SQLSTATE
-- read-only: 25006
BEGIN READ ONLY;
SELECT dlock_purge('0');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- not for PUBLIC: 42501
CREATE ROLE dlock_purger;
SET ROLE dlock_purger;
SELECT dlock_purge('0');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- granted, it works
GRANT EXECUTE ON FUNCTION dlock_purge(interval) TO dlock_purger;
SELECT dlock_release('purge:released', (SELECT token FROM dlock_leases WHERE lock_name = 'purge:released'));
SET ROLE dlock_purger;
SELECT dlock_purge('0') AS purged_by_grantee;
RESET ROLE;
REVOKE EXECUTE ON FUNCTION dlock_purge(interval) FROM dlock_purger;
DROP ROLE dlock_purger;

-- a rolled-back purge deletes nothing
SELECT dlock_acquire('purge:rb', '10 ms') AS t_rb \gset
SELECT pg_sleep(0.05);
BEGIN;
SELECT dlock_purge('0') AS purged;
ROLLBACK;
SELECT count(*) AS rb_row_kept FROM dlock_leases WHERE lock_name = 'purge:rb';

DROP TABLE purged_rows;
DROP EXTENSION dlock;
