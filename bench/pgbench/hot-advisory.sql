-- The cycle of hot-dlock.sql with a session advisory lock on one key.
SELECT pg_advisory_lock(1);
SELECT pg_advisory_unlock(1);
