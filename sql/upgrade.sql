--
-- upgrade: install the oldest version, take leases, update through every
-- hop, and check that the updated extension equals a fresh install and
-- that tokens only grow across the update.
--
CREATE EXTENSION dlock VERSION '1.0';
SELECT extversion FROM pg_extension WHERE extname = 'dlock';
SELECT dlock_acquire('upgrade:a', '1 hour') AS a_token \gset
SELECT dlock_acquire('upgrade:b', '1 hour') AS b_token \gset
SELECT :a_token AS a_token, :b_token AS b_token;

ALTER EXTENSION dlock UPDATE TO '1.1';
SELECT (extract(epoch FROM clock_timestamp() - timestamptz '2000-01-01 00:00:00+00') * 1000000)::bigint AS before_us \gset
SELECT extversion FROM pg_extension WHERE extname = 'dlock';

-- the leases survive the update and are still honoured
SELECT lock_name, token, released, live FROM dlock_leases ORDER BY lock_name;
SELECT dlock_acquire('upgrade:a', '1 hour') IS NULL AS a_still_held;
SELECT dlock_renew('upgrade:a', :a_token, '1 hour') AS a_renewed;

-- 1.0 did not record who issued its tokens, so the first acquire after the
-- update (the refused one above) made the sequence jump: to the server
-- clock in microseconds since 2000-01-01, above anything 1.0 issued
SELECT dlock_acquire('upgrade:c', '1 hour') AS c_token \gset
SELECT (extract(epoch FROM clock_timestamp() - timestamptz '2000-01-01 00:00:00+00') * 1000000)::bigint AS after_us \gset
SELECT :c_token > :b_token AS greater,
       :c_token BETWEEN :before_us AND :after_us AS clock_reading;
-- and later tokens count on from there
SELECT dlock_acquire('upgrade:d', '1 hour') - :c_token AS next_is_one_more;
SELECT dlock_release('upgrade:b', :b_token) AS b_released;

-- 1.1 has no fencing marks: mode 'seen' asks for the update (the trigger
-- function is there, dlock_check is not yet)
CREATE TABLE upgrade_seen (id int PRIMARY KEY, tok bigint);
CREATE TRIGGER upgrade_seen_fence BEFORE INSERT ON upgrade_seen
    FOR EACH ROW EXECUTE FUNCTION dlock_fence('upgrade:seen', 'tok', 'seen');
INSERT INTO upgrade_seen VALUES (1, 5);
SELECT count(*) AS dlock_check_exists FROM pg_proc WHERE proname = 'dlock_check';

-- 1.2: this session, whose cache knew the 1.1 objects, finds the marks at
-- once; the leases and tokens carry on
ALTER EXTENSION dlock UPDATE TO '1.2';
SELECT extversion FROM pg_extension WHERE extname = 'dlock';
INSERT INTO upgrade_seen VALUES (1, 5);
INSERT INTO upgrade_seen VALUES (2, 4);
SELECT lock_name, token FROM dlock_fence_mark;
SELECT dlock_check('upgrade:a', :a_token) = :a_token AS a_checks;
SELECT dlock_acquire('upgrade:e', '1 hour') - :c_token AS tokens_carry_on;
-- the calls for many names at once, new in 1.2, see the leases of 1.0 and 1.1
SELECT dlock_acquire_all(ARRAY['upgrade:f', 'upgrade:a'], '1 hour') IS NULL AS a_held_for_sets;
SELECT dlock_renew_each(ARRAY['upgrade:a', 'upgrade:c'], ARRAY[:a_token, :c_token], '1 hour') AS renewed;
DROP TABLE upgrade_seen;

-- the updated extension has exactly the objects, grants and dump
-- configuration of a fresh install
-- (the members with their grants and comments, the functions' arguments
-- with names and defaults, results and properties, and the dump
-- configuration, of whatever dlock is installed when they are read;
-- relation row types, members only from PostgreSQL 17 on, are left out as
-- in install.sql)
CREATE TEMP VIEW ext_members AS
SELECT pg_describe_object(d.classid, d.objid, d.objsubid) AS member,
       COALESCE(c.relacl::text, p.proacl::text) AS acl,
       COALESCE(obj_description(d.objid, d.classid::regclass::text), '') AS comment,
       CASE WHEN p.oid IS NOT NULL THEN
           format('(%s) -> %s; %s %s strict=%s secdef=%s parallel=%s rows=%s cost=%s %s %s config=%s',
                  pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
                  p.prokind, p.provolatile, p.proisstrict, p.prosecdef, p.proparallel,
                  p.prorows, p.procost, p.prosrc, p.probin, p.proconfig)
       END AS function
  FROM pg_depend d
  LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
  LEFT JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
 WHERE d.refclassid = 'pg_extension'::regclass
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'dlock')
   AND d.deptype = 'e'
   AND NOT EXISTS (SELECT 1 FROM pg_type t LEFT JOIN pg_type e ON e.oid = t.typelem
                    WHERE d.classid = 'pg_type'::regclass AND t.oid = d.objid
                      AND (t.typrelid <> 0 OR e.typrelid <> 0));
CREATE TEMP VIEW ext_config AS
SELECT u.relid::regclass::text AS rel, u.cond
  FROM pg_extension e, unnest(e.extconfig, e.extcondition) u(relid, cond)
 WHERE e.extname = 'dlock';
CREATE TEMP TABLE upgraded AS TABLE ext_members;
CREATE TEMP TABLE upgraded_config AS TABLE ext_config;

DROP EXTENSION dlock;
CREATE EXTENSION dlock;
SELECT extversion FROM pg_extension WHERE extname = 'dlock';
CREATE TEMP TABLE fresh AS TABLE ext_members;
CREATE TEMP TABLE fresh_config AS TABLE ext_config;

SELECT 'only after update' AS side, * FROM (TABLE upgraded EXCEPT TABLE fresh) x
UNION ALL
SELECT 'only in fresh install', * FROM (TABLE fresh EXCEPT TABLE upgraded) y;
SELECT 'only after update' AS side, * FROM (TABLE upgraded_config EXCEPT TABLE fresh_config) x
UNION ALL
SELECT 'only in fresh install', * FROM (TABLE fresh_config EXCEPT TABLE upgraded_config) y;
SELECT count(*) AS members, count(function) AS functions FROM fresh;

-- a fresh install issues tokens from 1 (nothing was issued before it)
SELECT dlock_acquire('upgrade:fresh', '1 hour') AS fresh_token;
DROP EXTENSION dlock;
