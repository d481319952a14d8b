--
-- leases: the dlock_leases view.
--
CREATE EXTENSION dlock;

-- the columns, in order
SELECT attname, format_type(atttypid, atttypmod) AS type
  FROM pg_attribute
 WHERE attrelid = 'dlock_leases'::regclass AND attnum > 0
 ORDER BY attnum;

SELECT dlock_acquire('view:live', '1 min', owner => 'live one') AS token;
SELECT dlock_acquire('view:released', '1 min', owner => 'released one') AS token;
SELECT dlock_release('view:released', 2);
SELECT dlock_acquire('view:expired', '10 ms', owner => 'expired one') AS token;
SELECT pg_sleep(0.05);

-- one row per name; live is judged by the server clock now
SELECT lock_name, token, owner, holder_role = current_user AS holder_is_me,
       released, live,
       acquired_at <= renewed_at AND renewed_at <= expires_at AS times_ordered
  FROM dlock_leases ORDER BY token;

-- a taken-over name keeps one row, with the newest token
SELECT dlock_acquire('view:expired', '1 min') AS token;
SELECT lock_name, token, live FROM dlock_leases WHERE lock_name = 'view:expired';

-- an ordinary role reads the view but not the table behind it
CREATE ROLE dlock_reader;
SET ROLE dlock_reader;
SELECT count(*) AS visible FROM dlock_leases;
SELECT count(*) FROM dlock_lease;
RESET ROLE;
DROP ROLE dlock_reader;

DROP EXTENSION dlock;
