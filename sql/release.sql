--
-- release and break: ending leases, keeping the last token.
--
CREATE EXTENSION dlock;

SELECT dlock_acquire('release:job', '1 min') AS token;

-- a wrong token never ends another token's lease
SELECT dlock_release('release:job', 2) AS wrong_token;
SELECT live FROM dlock_leases WHERE lock_name = 'release:job';

-- the holder releases: the row stays, with its token, released and not live;
-- expires_at becomes the release time
SELECT dlock_release('release:job', 1) AS released;
SELECT token, released, live, expires_at <= clock_timestamp() AS ended
  FROM dlock_leases WHERE lock_name = 'release:job';

-- releasing twice: false
SELECT dlock_release('release:job', 1) AS again;

-- never acquired: false
SELECT dlock_release('release:never', 1) AS never_acquired;

-- after release, the next acquire gets a greater token
SELECT dlock_acquire('release:job', '1 min') AS token;

-- an expired lease cannot be released (it already ended)
SELECT dlock_acquire('release:expiring', '20 ms') AS token;
SELECT pg_sleep(0.1);
SELECT dlock_release('release:expiring', 3) AS after_expiry;
SELECT released, live FROM dlock_leases WHERE lock_name = 'release:expiring';

-- break ends whatever live lease holds the name
SELECT dlock_break('release:job') AS broken;
SELECT token, released, live FROM dlock_leases WHERE lock_name = 'release:job';
-- the broken holder learns it on its next renew or release
SELECT dlock_renew('release:job', 2, '1 min') AS renew_after_break;
SELECT dlock_release('release:job', 2) AS release_after_break;
-- nothing live to break: false (ended, expired, never acquired)
SELECT dlock_break('release:job') AS again;
SELECT dlock_break('release:expiring') AS expired;
SELECT dlock_break('release:never') AS never_acquired;
-- a broken name can be acquired again, with a greater token
SELECT dlock_acquire('release:job', '1 min') AS token;

DROP EXTENSION dlock;
