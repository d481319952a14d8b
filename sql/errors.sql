--
-- errors: every bad input raises a clear error with its SQLSTATE (shown
-- after each error), and nothing is written.
--
CREATE EXTENSION dlock;
\set SHOW_CONTEXT never
\set ON_ERROR_STOP 0

SELECT dlock_acquire('errors:held', '1 min') AS token;
SELECT last_value AS tokens_before FROM dlock_token_seq \gset

-- NULL arguments: 22004
SELECT dlock_acquire(NULL, '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('errors:x', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('errors:x', '1 min', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew(NULL, 1, '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('errors:held', NULL, '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('errors:held', 1, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release('errors:held', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_break(NULL);
\echo :LAST_ERROR_SQLSTATE

-- a NULL owner is not an error: it means the default label
SELECT dlock_acquire('errors:owner', '1 min', '0', NULL) IS NOT NULL AS null_owner_ok;

-- empty and over-long names: 22023
SELECT dlock_acquire('', '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire(repeat('n', 513), '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire(repeat('é', 257), '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('', 1, '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release(repeat('n', 513), 1);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_break('');
\echo :LAST_ERROR_SQLSTATE

-- ttl not positive: 22023
SELECT dlock_acquire('errors:x', '0');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('errors:x', '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('errors:x', '1 mon -31 days');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('errors:held', 1, '0');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('errors:held', 1, '-5 min');
\echo :LAST_ERROR_SQLSTATE

-- ttl over dlock.max_ttl: 22023
SELECT dlock_acquire('errors:x', '1 day 1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('errors:x', '1 month');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('errors:x', '100000 years');
\echo :LAST_ERROR_SQLSTATE
-- the limit bounds the lease actually made: an interval that mixes months
-- and days is applied with the calendar, as the expiry is ('12 mon -359
-- days' is one day as an interval, but six or seven days from any date)
SELECT dlock_acquire('errors:x', '12 mon -359 days');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('errors:x', '1000000 mon -29999999 days');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('errors:held', 1, '12 mon -359 days');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_all(ARRAY['errors:x'], '12 mon -359 days');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dlock_acquire_any(ARRAY['errors:x'], '12 mon -359 days');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew_each(ARRAY['errors:held'], ARRAY[1], '12 mon -359 days');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('errors:held', 1, '2 days');
\echo :LAST_ERROR_SQLSTATE
SET dlock.max_ttl = '10s';
SELECT dlock_acquire('errors:x', '11 s');
\echo :LAST_ERROR_SQLSTATE
RESET dlock.max_ttl;
-- dlock.max_ttl is superuser-only, and bounded
CREATE ROLE dlock_plain;
SET ROLE dlock_plain;
SET dlock.max_ttl = '30d';
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- (only the SQLSTATE: the message's wording of the range differs by version)
\set VERBOSITY sqlstate
SET dlock.max_ttl = 0;
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE

-- negative wait: 22023
SELECT dlock_acquire('errors:x', '1 min', '-1 ms');
\echo :LAST_ERROR_SQLSTATE

-- owner over 1024 bytes: 22023
SELECT dlock_acquire('errors:x', '1 min', '0', repeat('o', 1025));
\echo :LAST_ERROR_SQLSTATE

-- read-only transaction: 25006
BEGIN READ ONLY;
SELECT dlock_acquire('errors:x', '1 min');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT dlock_release('errors:held', 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

-- renew/release of the lease's current token by a role that did not
-- acquire it: 42501; a token that is not current is simply not held
-- (false), whoever holds the lease
SET ROLE dlock_plain;
SELECT dlock_renew('errors:held', :tokens_before, '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release('errors:held', :tokens_before);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('errors:held', :tokens_before + 1000, '1 min') AS stale_renew,
       dlock_release('errors:held', :tokens_before - 1) AS stale_release;
-- but a name without a row is simply not held by the token
SELECT dlock_release('errors:nobody', 1) AS not_held;
-- and dlock_break is not for PUBLIC
SELECT dlock_break('errors:held');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE dlock_plain;

-- nothing was written by any failed call: one lease row from before plus
-- the NULL-owner one, still live, and no token consumed by the errors
SELECT lock_name, token, live FROM dlock_leases ORDER BY token;
SELECT last_value - :tokens_before AS tokens_consumed FROM dlock_token_seq;

DROP EXTENSION dlock;
