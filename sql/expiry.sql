--
-- expiry: leases end by the server clock at the call; an expired lease is
-- taken over with a greater token, and the old holder learns it lost.
--
CREATE EXTENSION dlock;

SELECT dlock_acquire('expiry:job', '500 ms', owner => 'A') AS token;
SELECT dlock_acquire('expiry:job', '1 min', owner => 'B') IS NULL AS refused_while_live;
SELECT pg_sleep(0.6);

-- expired: the view says not live, though it was never released
SELECT token, released, live FROM dlock_leases WHERE lock_name = 'expiry:job';

-- takeover: B gets a greater token; the row now names B
SELECT dlock_acquire('expiry:job', '1 min', owner => 'B') AS token;
SELECT token, owner, live FROM dlock_leases WHERE lock_name = 'expiry:job';

-- A comes back after its pause: renew and release say it lost the lease,
-- and B's lease is untouched
SELECT dlock_renew('expiry:job', 1, '1 min') AS a_renews;
SELECT dlock_release('expiry:job', 1) AS a_releases;
SELECT token, owner, live FROM dlock_leases WHERE lock_name = 'expiry:job';

-- "now" is the server clock at the call, not the transaction start: in a
-- transaction that began 300 ms earlier, acquired_at and expires_at count
-- from the call
BEGIN;
SELECT now() AS tx_start \gset
SELECT pg_sleep(0.3);
SELECT dlock_acquire('expiry:clock', '200 ms') AS token;
SELECT acquired_at > :'tx_start'::timestamptz + interval '250 ms' AS acquired_at_is_call_time,
       expires_at > now() + interval '250 ms' AS expiry_from_call_time
  FROM dlock_leases WHERE lock_name = 'expiry:clock';
COMMIT;

-- the same holds for expiry checks: inside one transaction, a lease that
-- expires during the transaction can be taken over by a later call
BEGIN;
SELECT dlock_acquire('expiry:in-tx', '500 ms') AS token;
SELECT dlock_acquire('expiry:in-tx', '1 min') IS NULL AS refused_before_expiry;
SELECT pg_sleep(0.6);
SELECT dlock_acquire('expiry:in-tx', '1 min') AS token_after_expiry;
COMMIT;

DROP EXTENSION dlock;
