--
-- pages: where new lease row versions go (src/lease_table.c, design.md
-- §4).  A version that does not fit on its row's page, and a name's first
-- row, go to a page with room that dlock picks in a small table, adding
-- pages itself (left new, recorded in the free space map); no lease is lost
-- or changed by that, the heap and its index stay sound, and once the old
-- versions can be pruned the table reuses its pages instead of growing.
--
CREATE EXTENSION dlock;
CREATE EXTENSION amcheck;

-- 100 first rows into an empty table: a few pages, not one per row
CREATE TEMP TABLE tok AS
  SELECT i, dlock_acquire('p:' || i, '1 hour') AS t FROM generate_series(1, 100) i;
SELECT count(t) AS granted FROM tok;
SELECT pg_relation_size('dlock_lease') / 8192 BETWEEN 2 AND 4 AS few_pages;

-- 15 renewals of each lease in one transaction: no old version can be
-- pruned before it ends, the pages fill up and versions move to others
DO $$
DECLARE
    r record;
BEGIN
    FOR j IN 1 .. 15 LOOP
        FOR r IN SELECT i, t FROM tok ORDER BY i LOOP
            IF NOT dlock_renew('p:' || r.i, r.t, make_interval(hours => 1, secs => j)) THEN
                RAISE EXCEPTION 'renew % of p:% failed', j, r.i;
            END IF;
        END LOOP;
    END LOOP;
END $$;
SELECT count(*) > 1 AS pages_used FROM (SELECT DISTINCT (ctid::text::point)[0] FROM dlock_lease) p;
SELECT pg_relation_size('dlock_lease') / 8192 BETWEEN 5 AND 32 AS grown_within_limit;

-- every lease kept its token and is live; heap and index are sound
SELECT count(*) AS live_with_token
  FROM dlock_leases l JOIN tok ON l.lock_name = 'p:' || tok.i AND l.token = tok.t
 WHERE l.live;
SELECT count(*) AS heap_problems FROM verify_heapam('dlock_lease');
SELECT bt_index_check('dlock_lease_pkey', true);

-- now each renewal and release commits on its own: the old versions can be
-- pruned, and the new ones find room on the table's pages
SELECT pg_relation_size('dlock_lease') AS size_before \gset
DO $$
DECLARE
    r record;
BEGIN
    FOR j IN 1 .. 10 LOOP
        FOR r IN SELECT i, t FROM tok ORDER BY i LOOP
            IF NOT dlock_renew('p:' || r.i, r.t, make_interval(hours => 2, secs => j)) THEN
                RAISE EXCEPTION 'renew % of p:% failed', j, r.i;
            END IF;
            COMMIT;
        END LOOP;
    END LOOP;
    FOR r IN SELECT i, t FROM tok ORDER BY i LOOP
        IF NOT dlock_release('p:' || r.i, r.t) THEN
            RAISE EXCEPTION 'release of p:% failed', r.i;
        END IF;
        COMMIT;
    END LOOP;
END $$;
SELECT pg_relation_size('dlock_lease') <= :size_before AS no_growth;
SELECT count(*) AS released FROM dlock_leases WHERE lock_name LIKE 'p:%' AND NOT live;
SELECT count(*) AS heap_problems FROM verify_heapam('dlock_lease');
SELECT bt_index_check('dlock_lease_pkey', true);

-- a takeover of each (a new token) still finds its row
SELECT count(*) AS taken_over
  FROM tok WHERE dlock_acquire('p:' || i, '1 hour') > t;

DROP TABLE tok;
DROP EXTENSION amcheck;
DROP EXTENSION dlock;
