-- The cycle of cycle-dlock.sql with session advisory locks on a random key
-- 1 .. NAMES: try to lock, unlock if locked.  Variable: names.
\set id random(1, :names)
SELECT pg_try_advisory_lock(:id) AS got \gset
\if :got
SELECT pg_advisory_unlock(:id);
\endif
