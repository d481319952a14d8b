--
-- acquire: granting, refusing, tokens, names, owners.
--
CREATE EXTENSION dlock;

-- a never-acquired name is granted with token 1 (fresh sequence)
SELECT dlock_acquire('acquire:job', '1 min') AS token;

-- held: another acquire (from anyone, this session included) gets NULL;
-- it is not reentrant
SELECT dlock_acquire('acquire:job', '1 min') IS NULL AS refused;
SELECT dlock_acquire('acquire:job', '1 min', '0 s', 'someone else') IS NULL AS refused;

-- tokens grow across names
SELECT dlock_acquire('acquire:other', '1 min') AS token;
SELECT dlock_acquire('acquire:third', '1 min') AS token;

-- a refused acquire changes nothing
SELECT lock_name, token, released FROM dlock_leases ORDER BY lock_name;

-- wait: a held name is still refused after the wait, and the call did wait
SELECT clock_timestamp() AS before_wait \gset
SELECT dlock_acquire('acquire:job', '1 min', '150 ms') IS NULL AS refused_after_wait;
SELECT clock_timestamp() - :'before_wait'::timestamptz >= '150 ms' AS waited;

-- wait on a free name returns at once with a token
SELECT dlock_acquire('acquire:free', '1 min', '10 s') AS token;

-- a waiting acquire obeys statement_timeout
SET statement_timeout = '200ms';
SELECT dlock_acquire('acquire:job', '1 min', '1 min');
RESET statement_timeout;

-- named arguments and the owner label
SELECT dlock_acquire(lock_name => 'acquire:named', ttl => '30 s', owner => 'batch #7') AS token;
SELECT owner FROM dlock_leases WHERE lock_name = 'acquire:named';

-- without an owner, the label names the session: application_name, pid, address
SELECT owner LIKE current_setting('application_name') || ' pid ' || pg_backend_pid() || ' %' AS default_owner
  FROM dlock_leases WHERE lock_name = 'acquire:job';

-- lock names are opaque UTF-8 text: case, spaces and symbols all count
SELECT dlock_acquire('Acquire:Job', '1 min') IS NOT NULL AS case_matters;
SELECT dlock_acquire('acquire:job ', '1 min') IS NOT NULL AS trailing_space_matters;
SELECT dlock_acquire('счёт:42 🔒 {x}', '1 min') IS NOT NULL AS utf8;
SELECT dlock_acquire('счёт:42 🔒 {x}', '1 min') IS NULL AS utf8_held;

-- the longest name is 512 bytes (multibyte characters count in bytes)
SELECT dlock_acquire(repeat('n', 512), '1 min') IS NOT NULL AS max_ascii;
SELECT dlock_acquire(repeat('é', 256), '1 min') IS NOT NULL AS max_multibyte;

-- the holder role is the calling role
SELECT DISTINCT holder_role = current_user AS holder_is_me FROM dlock_leases;

-- ttl of an instant (but positive) is allowed; the longest is dlock.max_ttl
SELECT dlock_acquire('acquire:short', '1 microsecond') IS NOT NULL AS tiny_ttl;
SELECT dlock_acquire('acquire:long', '1 day') IS NOT NULL AS max_ttl_default;
SET dlock.max_ttl = '2d';
SELECT dlock_acquire('acquire:longer', '2 days') IS NOT NULL AS max_ttl_raised;
RESET dlock.max_ttl;

-- expires_at = acquired_at + ttl, and renewed_at starts at acquired_at
SELECT expires_at - acquired_at AS ttl, renewed_at = acquired_at AS fresh
  FROM dlock_leases WHERE lock_name = 'acquire:named';

DROP EXTENSION dlock;
