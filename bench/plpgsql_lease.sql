-- bench/plpgsql_lease.sql: the lease a careful user would write by hand in
-- PL/pgSQL, to compare dlock with (R1 in bench/workloads/40-cycle.sh).
--
-- One row per lock name, the token from a sequence.  Acquire is one
-- INSERT ... ON CONFLICT DO UPDATE that takes the row over only when the
-- lease it holds has ended, and returns the new token (NULL: held).
-- Release is an UPDATE guarded by the name and the token, so a stale
-- holder cannot end its successor's lease.  Time is the server clock at
-- the call.  Same table layout choices as dlock's own table: the name is
-- the only index (so takeovers and releases are HOT updates), COLLATE "C",
-- fillfactor 70.
--
-- What it does not do, and dlock does: waiting, holder-role checks,
-- argument checks, fencing, never blocking on another session's
-- uncommitted change of the same name (ON CONFLICT waits for it).

CREATE TABLE bench_lease (
    name        text COLLATE "C" PRIMARY KEY,
    token       bigint NOT NULL,
    owner       text,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
) WITH (fillfactor = 70);

CREATE SEQUENCE bench_lease_token_seq;

-- bench_lease_acquire: the new token, or NULL when a live lease holds p_name.
CREATE FUNCTION bench_lease_acquire(p_name text, p_ttl interval, p_owner text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_now   timestamptz := clock_timestamp();
    v_token bigint;
BEGIN
    INSERT INTO bench_lease AS l (name, token, owner, acquired_at, expires_at)
    VALUES (p_name, nextval('bench_lease_token_seq'), p_owner, v_now, v_now + p_ttl)
    ON CONFLICT (name) DO UPDATE
        SET token = excluded.token,
            owner = excluded.owner,
            acquired_at = excluded.acquired_at,
            expires_at = excluded.expires_at
        WHERE l.expires_at <= excluded.acquired_at
    RETURNING l.token INTO v_token;
    RETURN v_token;
END
$$;

-- bench_lease_release: true when (p_name, p_token) held a live lease, now ended.
CREATE FUNCTION bench_lease_release(p_name text, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    UPDATE bench_lease
       SET expires_at = v_now
     WHERE name = p_name
       AND token = p_token
       AND expires_at > v_now;
    RETURN FOUND;
END
$$;
