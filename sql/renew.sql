--
-- renew: extends a live lease, keeps the token, reports loss.
--
CREATE EXTENSION dlock;

SELECT dlock_acquire('renew:job', '30 s') AS token;
SELECT expires_at AS first_expiry FROM dlock_leases WHERE lock_name = 'renew:job' \gset

-- the holder's token renews: same token, later expiry, renewed_at moves
SELECT dlock_renew('renew:job', 1, '10 min');
SELECT token, expires_at > :'first_expiry'::timestamptz AS later,
       renewed_at > acquired_at AS renewed,
       expires_at - renewed_at AS ttl, live
  FROM dlock_leases WHERE lock_name = 'renew:job';

-- renewing can also shorten the lease: expiry is always now + ttl
SELECT dlock_renew('renew:job', 1, '5 min');
SELECT expires_at - renewed_at AS ttl FROM dlock_leases WHERE lock_name = 'renew:job';

-- a wrong token does not renew, and changes nothing
SELECT expires_at AS cur FROM dlock_leases WHERE lock_name = 'renew:job' \gset
SELECT dlock_renew('renew:job', 2, '10 min') AS wrong_token;
SELECT dlock_renew('renew:job', 0, '10 min') AS zero_token;
SELECT dlock_renew('renew:job', -1, '10 min') AS negative_token;
SELECT expires_at = :'cur'::timestamptz AS unchanged FROM dlock_leases WHERE lock_name = 'renew:job';

-- a name never acquired: false
SELECT dlock_renew('renew:never', 1, '10 min') AS never_acquired;

-- an expired lease cannot be renewed, even by its holder with its token
SELECT dlock_acquire('renew:expiring', '20 ms') AS token;
SELECT pg_sleep(0.1);
SELECT dlock_renew('renew:expiring', 2, '10 min') AS after_expiry;
SELECT live FROM dlock_leases WHERE lock_name = 'renew:expiring';

-- a released lease cannot be renewed
SELECT dlock_release('renew:job', 1);
SELECT dlock_renew('renew:job', 1, '10 min') AS after_release;

-- a superseded token cannot be renewed; the new holder's can
SELECT dlock_acquire('renew:job', '10 min') AS token;
SELECT dlock_renew('renew:job', 1, '10 min') AS old_token;
SELECT dlock_renew('renew:job', 3, '10 min') AS new_token;

DROP EXTENSION dlock;
