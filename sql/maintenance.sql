--
-- maintenance: dlock changes its lease table directly (src/lease_table.c),
-- so what a DBA does to the table must not confuse it: an added index gets
-- its entries on every update that is not HOT, REINDEX CONCURRENTLY of the
-- primary key is followed, and what direct access would bypass (a
-- trigger, a CHECK constraint) stops the functions with a clear error
-- instead of being ignored.
--
CREATE EXTENSION dlock;
CREATE EXTENSION amcheck;
CREATE INDEX dlock_lease_expires ON dlock_lease (expires_at);

SELECT dlock_acquire('m:' || i, '1 hour') IS NOT NULL AS granted
  FROM generate_series(1, 5) i;

-- 300 renewals of each lease in one transaction: the old versions cannot be
-- pruned yet, the pages fill up and many updates are not HOT
DO $$
DECLARE
    t bigint;
BEGIN
    FOR i IN 1 .. 5 LOOP
        SELECT token INTO t FROM dlock_leases WHERE lock_name = 'm:' || i;
        FOR j IN 1 .. 300 LOOP
            IF NOT dlock_renew('m:' || i, t, make_interval(hours => 1, secs => j)) THEN
                RAISE EXCEPTION 'renew % of m:% failed', j, i;
            END IF;
        END LOOP;
    END LOOP;
END $$;
SELECT count(*) > 1 AS pages_used FROM (SELECT DISTINCT (ctid::text::point)[0] FROM dlock_lease) p;

-- both indexes hold exactly the live row versions
SELECT bt_index_check('dlock_lease_pkey', true), bt_index_check('dlock_lease_expires', true);
SET enable_seqscan = off;
SELECT count(*) AS via_expires_index FROM dlock_lease WHERE expires_at > '-infinity';
SELECT lock_name FROM dlock_lease WHERE lock_name = 'm:3';
RESET enable_seqscan;
-- and a live lease still refuses a second acquirer
SELECT dlock_acquire('m:3', '1 hour') IS NULL AS still_held;

-- REINDEX CONCURRENTLY replaces the primary key with a new index
REINDEX INDEX CONCURRENTLY dlock_lease_pkey;
SELECT dlock_release('m:3', (SELECT token FROM dlock_leases WHERE lock_name = 'm:3')) AS released;
SELECT dlock_acquire('m:3', '1 hour') IS NOT NULL AS taken_again;
SELECT dlock_acquire('m:3', '1 hour') IS NULL AS held_again;
SELECT bt_index_check('dlock_lease_pkey', true);
SELECT count(*) AS rows_of_m3 FROM dlock_lease WHERE lock_name = 'm:3';

-- a trigger on the lease table would not fire: the functions refuse
CREATE FUNCTION audit_lease() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN RETURN NEW; END$$;
CREATE TRIGGER audit BEFORE UPDATE ON dlock_lease
  FOR EACH ROW EXECUTE FUNCTION audit_lease();
SELECT dlock_acquire('m:1', '1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew('m:1', 1, '1 hour');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER audit ON dlock_lease;
SELECT dlock_renew('m:1', (SELECT token FROM dlock_leases WHERE lock_name = 'm:1'), '1 hour') AS renewed;

-- so would a CHECK constraint
ALTER TABLE dlock_lease ADD CONSTRAINT short_names CHECK (length(lock_name) < 100);
SELECT dlock_renew('m:1', (SELECT token FROM dlock_leases WHERE lock_name = 'm:1'), '1 hour') AS renewed;
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE dlock_lease DROP CONSTRAINT short_names;
SELECT dlock_renew('m:1', (SELECT token FROM dlock_leases WHERE lock_name = 'm:1'), '1 hour') AS renewed;

-- and so would forced row-level security
ALTER TABLE dlock_lease FORCE ROW LEVEL SECURITY;
SELECT dlock_renew('m:1', (SELECT token FROM dlock_leases WHERE lock_name = 'm:1'), '1 hour') AS renewed;
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE dlock_lease NO FORCE ROW LEVEL SECURITY;

-- a token sequence set back behind the table (a superuser's setval, or a
-- copy of the table whose sequence stayed behind): a takeover does not
-- hand out a token at or below the row's, the sequence jumps past it
-- (with a WARNING) and later grants count on from there
SELECT dlock_release('m:2', (SELECT token FROM dlock_leases WHERE lock_name = 'm:2')) AS released;
SELECT token AS m2_token FROM dlock_leases WHERE lock_name = 'm:2' \gset
SELECT setval('dlock_token_seq', 1) AS set_back;
\set VERBOSITY terse
SELECT dlock_acquire('m:2', '1 hour') AS m2_new \gset
\set VERBOSITY default
SELECT :m2_new > :m2_token AS above_the_row,
       :m2_new > extract(epoch FROM now() - timestamptz '2000-01-01 00:00:00+00') * 1000000 - 3600e6 AS near_the_clock;
SELECT dlock_acquire('m:new', '1 hour') > :m2_new AS next_grant_above;

DROP FUNCTION audit_lease();
DROP INDEX dlock_lease_expires;
DROP EXTENSION amcheck;
DROP EXTENSION dlock;
