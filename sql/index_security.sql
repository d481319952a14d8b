--
-- index_security: dlock inserts index entries (a name's first row, an update
-- that is not HOT) as the lease table's owner, so an expression index a DBA
-- added evaluates its functions as the owner.  As in PostgreSQL's own
-- maintenance (REINDEX, VACUUM, CREATE INDEX), they run as a
-- security-restricted operation with search_path pinned to pg_catalog,
-- pg_temp: a caller's search_path must not choose which function runs as
-- the owner.
--
CREATE EXTENSION dlock;
CREATE EXTENSION amcheck;

-- the DBA's index function calls lower() without a schema
CREATE FUNCTION lease_key(name text) RETURNS text
  LANGUAGE plpgsql IMMUTABLE AS $$BEGIN RETURN lower(name); END$$;
CREATE INDEX dlock_lease_key ON dlock_lease (lease_key(lock_name));

-- every call of the shadow lower() below is logged here
CREATE TABLE shadow_log (ran_as name);
GRANT INSERT, SELECT, DELETE ON shadow_log TO PUBLIC;

-- an ordinary role shadows lower() in a schema of its own, first on its
-- search_path (before pg_catalog)
CREATE ROLE dlock_shadower;
DO $$BEGIN
  EXECUTE format('GRANT CREATE ON DATABASE %I TO dlock_shadower', current_database());
END$$;
SET ROLE dlock_shadower;
CREATE SCHEMA shadow;
CREATE FUNCTION shadow.lower(t text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.shadow_log VALUES (current_user);
    RETURN pg_catalog.lower(t);
END$$;
SET search_path = shadow, pg_catalog, public;
-- the shadow is what the role itself gets
SELECT lower('X') AS own_call;
SELECT count(*) AS own_calls FROM shadow_log;
DELETE FROM shadow_log;

-- new names: the INSERT adds index entries
SELECT dlock_acquire('ix:' || i, '1 hour') IS NOT NULL AS granted
  FROM generate_series(1, 5) i;

-- 300 renewals of each lease in one transaction: many are not HOT
DO $$
DECLARE
    t bigint;
BEGIN
    FOR i IN 1 .. 5 LOOP
        SELECT token INTO t FROM dlock_leases WHERE lock_name = 'ix:' || i;
        FOR j IN 1 .. 300 LOOP
            IF NOT dlock_renew('ix:' || i, t, make_interval(hours => 1, secs => j)) THEN
                RAISE EXCEPTION 'renew % of ix:% failed', j, i;
            END IF;
        END LOOP;
    END LOOP;
END $$;
-- and a takeover of a released lease
SELECT dlock_release('ix:1', (SELECT token FROM dlock_leases WHERE lock_name = 'ix:1')) AS released;
SELECT dlock_acquire('ix:1', '1 hour') IS NOT NULL AS taken_over;
RESET search_path;
RESET ROLE;

SELECT count(*) > 1 AS pages_used FROM (SELECT DISTINCT (ctid::text::point)[0] FROM dlock_lease) p;

-- the shadow never ran: not as the owner, not as anyone
SELECT count(*) AS shadow_calls FROM shadow_log;
SELECT DISTINCT ran_as = 'dlock_shadower' AS ran_as_caller FROM shadow_log;

-- the index holds exactly the live row versions, keyed by pg_catalog.lower
SELECT bt_index_check('dlock_lease_pkey', true), bt_index_check('dlock_lease_key', true);
SET enable_seqscan = off;
SELECT lock_name FROM dlock_lease WHERE lease_key(lock_name) = 'ix:3';
RESET enable_seqscan;

DROP INDEX dlock_lease_key;
DROP FUNCTION lease_key(text);
DROP TABLE shadow_log;
DROP SCHEMA shadow CASCADE;
DO $$BEGIN
  EXECUTE format('REVOKE CREATE ON DATABASE %I FROM dlock_shadower', current_database());
END$$;
DROP ROLE dlock_shadower;
DROP EXTENSION amcheck;
DROP EXTENSION dlock;
