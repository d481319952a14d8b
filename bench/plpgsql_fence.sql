-- bench/plpgsql_fence.sql: a fencing trigger written by hand in PL/pgSQL
-- for the table acct (R3 in bench/workloads/50-fence.sh), the equivalent
-- of dlock_fence('acct:{id}', 'fence_token') in its default 'latest' mode:
-- it reads the lock's current token from the view dlock_leases (no row
-- lock; each statement of a PL/pgSQL function sees what was committed
-- before it started) and rejects the write, with dlock's SQLSTATE 55T01,
-- when the write carries no token, the lock has no lease row, the token is
-- not the current one, or an UPDATE would lower the row's token.

CREATE FUNCTION bench_fence_acct()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_current bigint;
BEGIN
    SELECT l.token INTO v_current
      FROM dlock_leases l
     WHERE l.lock_name = 'acct:' || NEW.id;
    IF NEW.fence_token IS NULL
       OR v_current IS NULL
       OR NEW.fence_token <> v_current
       OR (TG_OP = 'UPDATE' AND NEW.fence_token < OLD.fence_token) THEN
        RAISE EXCEPTION 'fencing token rejected for relation "%"', TG_TABLE_NAME
            USING ERRCODE = '55T01',
                  DETAIL = format('Lock "acct:%s": token %s, current token %s.',
                                  NEW.id, NEW.fence_token, v_current);
    END IF;
    RETURN NEW;
END
$$;
