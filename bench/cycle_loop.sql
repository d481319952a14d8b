-- bench/cycle_loop.sql: a server-side loop of acquire+release cycles on
-- random existing names, each acquire and each release committed on its
-- own, as in autocommit (bench/workloads/80-scale.sh).  It times the
-- server's work per cycle without the client's round trips, whose latency
-- on a small virtual machine drifts more than the work itself.
--
-- CALL bench_cycle_loop(names, seconds, mode, NULL, NULL) runs cycles on
-- r:1 .. r:names for about that many seconds and returns how many cycles it
-- ran and the mean time per cycle in microseconds (the server clock).
-- Mode 'dlock': dlock_acquire, then dlock_release.  Mode 'update', for
-- reference: two plain UPDATEs of the row of that name in bench_ref, a
-- table shaped like dlock_lease (text key, COLLATE "C", fillfactor 70) with
-- as many rows, which shows what the table's size alone costs.  CALL it
-- outside a transaction block (it commits).

CREATE TABLE bench_ref (
    name text COLLATE "C" PRIMARY KEY,
    v    bigint NOT NULL
) WITH (fillfactor = 70);

CREATE PROCEDURE bench_cycle_loop(p_names int, p_seconds float8, p_mode text,
                                  INOUT cycles bigint, INOUT us_per_cycle float8)
LANGUAGE plpgsql
AS $$
DECLARE
    v_start timestamptz := clock_timestamp();
    v_end   timestamptz := v_start + p_seconds * interval '1 s';
    v_name  text;
    v_token bigint;
BEGIN
    IF p_mode NOT IN ('dlock', 'update') THEN
        RAISE EXCEPTION 'unknown mode %', p_mode;
    END IF;
    cycles := 0;
    WHILE clock_timestamp() < v_end LOOP
        v_name := 'r:' || (1 + floor(random() * p_names))::int;
        IF p_mode = 'dlock' THEN
            v_token := dlock_acquire(v_name, '30 s');
            COMMIT;
            IF v_token IS NOT NULL THEN
                PERFORM dlock_release(v_name, v_token);
                COMMIT;
            END IF;
        ELSE
            UPDATE bench_ref SET v = v + 1 WHERE name = v_name;
            COMMIT;
            UPDATE bench_ref SET v = v + 1 WHERE name = v_name;
            COMMIT;
        END IF;
        cycles := cycles + 1;
    END LOOP;
    us_per_cycle := extract(epoch FROM clock_timestamp() - v_start) * 1e6 / cycles;
END
$$;
