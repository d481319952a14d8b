--
-- transactions: the calls take effect when the calling transaction commits;
-- a rollback undoes them and a consumed token number is skipped.
--
CREATE EXTENSION dlock;

-- a rolled-back acquire leaves the name free; its token is never reused
BEGIN;
SELECT dlock_acquire('tx:job', '1 min') AS token;
ROLLBACK;
SELECT count(*) AS rows_after_rollback FROM dlock_leases;
SELECT dlock_acquire('tx:job', '1 min') AS token;

-- a rolled-back release leaves the lease live
BEGIN;
SELECT dlock_release('tx:job', 2);
ROLLBACK;
SELECT token, released, live FROM dlock_leases WHERE lock_name = 'tx:job';

-- a rolled-back renew leaves the old expiry
SELECT expires_at AS cur FROM dlock_leases WHERE lock_name = 'tx:job' \gset
BEGIN;
SELECT dlock_renew('tx:job', 2, '20 min');
ROLLBACK;
SELECT expires_at = :'cur'::timestamptz AS expiry_unchanged FROM dlock_leases WHERE lock_name = 'tx:job';

-- a rolled-back takeover leaves the old (ended) row; the next grant skips the token
SELECT dlock_release('tx:job', 2);
BEGIN;
SELECT dlock_acquire('tx:job', '1 min') AS token;
ROLLBACK;
SELECT token, released FROM dlock_leases WHERE lock_name = 'tx:job';
SELECT dlock_acquire('tx:job', '1 min') AS token;

-- a rolled-back break leaves the lease live
BEGIN;
SELECT dlock_break('tx:job');
ROLLBACK;
SELECT token, live FROM dlock_leases WHERE lock_name = 'tx:job';

-- within one transaction the calls see each other
BEGIN;
SELECT dlock_acquire('tx:inner', '1 min') AS token;
SELECT dlock_acquire('tx:inner', '1 min') IS NULL AS held_within_tx;
SELECT dlock_release('tx:inner', 5) AS released_within_tx;
SELECT dlock_acquire('tx:inner', '1 min') AS token;
COMMIT;
SELECT token, live FROM dlock_leases WHERE lock_name = 'tx:inner';

-- a savepoint rollback undoes only what followed it
BEGIN;
SELECT dlock_acquire('tx:sp', '1 min') AS token;
SAVEPOINT s;
SELECT dlock_release('tx:sp', 7);
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT token, live FROM dlock_leases WHERE lock_name = 'tx:sp';

-- an error inside a PL/pgSQL exception block undoes the call in that block
DO $$
BEGIN
  BEGIN
    PERFORM dlock_acquire('tx:plpgsql', '1 min');
    RAISE EXCEPTION 'boom';
  EXCEPTION WHEN raise_exception THEN
    NULL;
  END;
END $$;
SELECT count(*) AS rows_for_plpgsql FROM dlock_leases WHERE lock_name = 'tx:plpgsql';

-- the calls work inside a REPEATABLE READ transaction whose snapshot is
-- older than the lease change (specs/race-uncommitted.spec and
-- race-release-takeover.spec show that they see other sessions' commits
-- made after that snapshot)
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) FROM dlock_leases;
SELECT dlock_release('tx:sp', 7);
SELECT dlock_acquire('tx:sp', '1 min') AS token;
COMMIT;

DROP EXTENSION dlock;
