--
-- monitoring: the views dlock_waiters, dlock_stats and dlock_notifier, the
-- functions behind them, dlock_stats_reset(), and the settings
-- dlock.notify, dlock.log_lease_changes and dlock.track_stats.  This suite
-- runs without shared_preload_libraries, so there is no shared memory:
-- the views have no rows whatever happens, dlock_stats_reset() does
-- nothing, and dlock.notify sends nothing, with one WARNING per session
-- (their rows are tested by specs/race-waiters.spec,
-- specs/stats-counters.spec and test/t/018_events.pl, with preload).
-- Every error is shown with its SQLSTATE.
--
CREATE EXTENSION dlock;
\set SHOW_CONTEXT never

-- the views' columns, in order
SELECT attname, format_type(atttypid, atttypmod) AS type
  FROM pg_attribute
 WHERE attrelid = 'dlock_waiters'::regclass AND attnum > 0
 ORDER BY attnum;
SELECT attname, format_type(atttypid, atttypmod) AS type
  FROM pg_attribute
 WHERE attrelid = 'dlock_stats'::regclass AND attnum > 0
 ORDER BY attnum;
SELECT attname, format_type(atttypid, atttypmod) AS type
  FROM pg_attribute
 WHERE attrelid = 'dlock_notifier'::regclass AND attnum > 0
 ORDER BY attnum;

-- the functions: the views' set-returning functions and the reset
SELECT p.oid::regprocedure AS function, pg_get_function_result(p.oid) AS result,
       p.provolatile AS volatile, p.proisstrict AS strict, p.proparallel AS parallel,
       p.prosecdef AS definer
  FROM pg_proc p
 WHERE p.proname IN ('dlock_waiters_read', 'dlock_stats_read', 'dlock_stats_reset', 'dlock_notifier_read')
 ORDER BY p.proname;

-- no preload: no rows, before and after lease operations and a wait (which
-- polls, in no queue)
SELECT count(*) AS waiters FROM dlock_waiters;
SELECT count(*) AS databases FROM dlock_stats;
SELECT dlock_acquire('monitoring:a', '1 min') IS NOT NULL AS granted;
SELECT dlock_acquire('monitoring:a', '1 min', '20 ms') IS NULL AS timed_out;
SELECT count(*) AS waiters FROM dlock_waiters;
SELECT count(*) AS databases FROM dlock_stats;
SELECT count(*) AS waiter_rows FROM dlock_waiters_read();
SELECT count(*) AS stats_rows FROM dlock_stats_read();

-- lease events need the notifier, which needs preload: dlock.notify sends
-- nothing, and says so once per session (at the first commit with
-- something to send); the notifier view has no rows
SET dlock.notify = on;
SELECT dlock_acquire('monitoring:n', '1 min') IS NOT NULL AS granted;
SELECT dlock_release('monitoring:n', token) AS released
  FROM dlock_leases WHERE lock_name = 'monitoring:n';
BEGIN;
SELECT dlock_acquire('monitoring:n', '1 min') IS NOT NULL AS granted;
ROLLBACK;
RESET dlock.notify;
SELECT count(*) AS notifier_rows FROM dlock_notifier;
SELECT count(*) AS notifier_read_rows FROM dlock_notifier_read();

-- dlock_stats_reset() returns void, and is for operators: a superuser may
-- call it, PUBLIC may not
SELECT dlock_stats_reset();
SELECT pg_typeof(dlock_stats_reset()) AS result_type;
CREATE ROLE dlock_monitor_plain;
SET ROLE dlock_monitor_plain;
SELECT dlock_stats_reset();
\echo :LAST_ERROR_SQLSTATE
-- an ordinary role reads both views and calls the functions behind them
SELECT count(*) AS waiters FROM dlock_waiters;
SELECT count(*) AS databases FROM dlock_stats;
SELECT count(*) AS waiter_rows FROM dlock_waiters_read();
SELECT count(*) AS stats_rows FROM dlock_stats_read();
SELECT count(*) AS notifier_rows FROM dlock_notifier;
SELECT count(*) AS notifier_read_rows FROM dlock_notifier_read();
RESET ROLE;
-- once granted EXECUTE, it may reset
GRANT EXECUTE ON FUNCTION dlock_stats_reset() TO dlock_monitor_plain;
SET ROLE dlock_monitor_plain;
SELECT dlock_stats_reset();
RESET ROLE;
REVOKE EXECUTE ON FUNCTION dlock_stats_reset() FROM dlock_monitor_plain;

--
-- the settings
--
-- defaults
SHOW dlock.notify;
SHOW dlock.log_lease_changes;
SHOW dlock.track_stats;
SELECT name, setting, boot_val, vartype, context, enumvals
  FROM pg_settings
 WHERE name IN ('dlock.notify', 'dlock.log_lease_changes', 'dlock.track_stats')
 ORDER BY name;
-- a superuser sets them, also per role and per database
SET dlock.notify = on;
SET dlock.log_lease_changes = takeovers;
SET dlock.track_stats = off;
SHOW dlock.notify;
SHOW dlock.log_lease_changes;
SHOW dlock.track_stats;
RESET dlock.notify;
RESET dlock.log_lease_changes;
RESET dlock.track_stats;
ALTER ROLE dlock_monitor_plain SET dlock.notify = on;
ALTER ROLE dlock_monitor_plain SET dlock.log_lease_changes = 'all';
SELECT unnest(setconfig) AS role_setting
  FROM pg_db_role_setting
 WHERE setrole = 'dlock_monitor_plain'::regrole AND setdatabase = 0
 ORDER BY 1;
ALTER ROLE dlock_monitor_plain RESET ALL;
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET dlock.log_lease_changes = takeovers', current_database());
END
$$;
SELECT c AS database_setting
  FROM pg_db_role_setting, unnest(setconfig) AS c
 WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database()) AND setrole = 0
   AND c LIKE 'dlock.%'
 ORDER BY 1;
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I RESET dlock.log_lease_changes', current_database());
END
$$;
-- an invalid value: 22023, with the values allowed
SET dlock.log_lease_changes = 'some';
\echo :LAST_ERROR_SQLSTATE
SET dlock.log_lease_changes = on;
\echo :LAST_ERROR_SQLSTATE
SET dlock.notify = 'sometimes';
\echo :LAST_ERROR_SQLSTATE
SHOW dlock.log_lease_changes;
-- an ordinary role can set none of them (42501), for its session or for
-- itself, and they stay as they were
SET ROLE dlock_monitor_plain;
SET dlock.notify = on;
\echo :LAST_ERROR_SQLSTATE
SET dlock.log_lease_changes = 'all';
\echo :LAST_ERROR_SQLSTATE
SET dlock.track_stats = off;
\echo :LAST_ERROR_SQLSTATE
ALTER ROLE dlock_monitor_plain SET dlock.notify = on;
\echo :LAST_ERROR_SQLSTATE
SHOW dlock.notify;
SHOW dlock.log_lease_changes;
SHOW dlock.track_stats;
RESET ROLE;

DROP ROLE dlock_monitor_plain;
DROP EXTENSION dlock;
