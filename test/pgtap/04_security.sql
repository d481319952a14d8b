-- test/pgtap/04_security.sql: security properties of the installation.
--
-- The SECURITY DEFINER meta-test: every SECURITY DEFINER function of the
-- extension pins a search_path that ends with pg_temp (there are none in
-- 1.0; the test enumerates them anyway, and proves at the end that it would
-- catch one).  The extension's objects belong to the superuser who
-- installed it.  The control file makes dlock untrusted, superuser-only and
-- not relocatable, and a non-superuser who may create trusted extensions
-- really cannot create it.

\ir preamble.psql
SELECT pg_catalog.current_database() AS dbname \gset

SELECT plan(18);

-- The functions of the extension, wherever they live, and the SECURITY
-- DEFINER ones among them whose search_path is not pinned.  A pinned
-- search_path is a proconfig entry "search_path=..." whose last element is
-- pg_temp (otherwise pg_temp is searched first, and any role can create
-- temporary objects there).
CREATE TEMP VIEW tap_dlock_function AS
SELECT p.oid, p.oid::regprocedure::text COLLATE "default" AS func, p.prosecdef, p.proconfig
  FROM pg_catalog.pg_depend d
  JOIN pg_catalog.pg_proc p ON d.classid = 'pg_catalog.pg_proc'::regclass AND p.oid = d.objid
 WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass
   AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'dlock')
   AND d.deptype = 'e';

CREATE TEMP VIEW tap_secdef_unpinned AS
SELECT f.func
  FROM tap_dlock_function f
 WHERE f.prosecdef
   AND NOT EXISTS (SELECT FROM pg_catalog.unnest(f.proconfig) AS c(setting)
                    WHERE c.setting ~ '^search_path=(.*,)?\s*"?pg_temp"?\s*$');

SELECT set_has(
    $$SELECT f.func FROM tap_dlock_function f$$,
    $$VALUES ('dlock_acquire(text,interval,interval,text)'), ('dlock_renew(text,bigint,interval)'),
             ('dlock_release(text,bigint)'), ('dlock_break(text)')$$,
    'the meta-test enumerates the extension''s functions (it is not vacuous)'
);
SELECT is_empty(
    $$SELECT f.func FROM tap_secdef_unpinned f$$,
    'every SECURITY DEFINER function of the extension pins search_path (ending with pg_temp)'
);

-- Owners.  Every member belongs to the extension's owner, the superuser
-- who ran CREATE EXTENSION; a member of a kind this query does not know
-- is reported too, so it cannot slip through.
SELECT ok(
    (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = :'dlock_owner'),
    'the extension''s owner (its installer) is a superuser'
);
CREATE TEMP VIEW tap_member_not_owned AS
SELECT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid) COLLATE "default" AS member
  FROM pg_catalog.pg_depend d
  JOIN pg_catalog.pg_extension e ON d.refobjid = e.oid
  LEFT JOIN pg_catalog.pg_class c ON d.classid = 'pg_catalog.pg_class'::regclass AND c.oid = d.objid
  LEFT JOIN pg_catalog.pg_proc p ON d.classid = 'pg_catalog.pg_proc'::regclass AND p.oid = d.objid
  LEFT JOIN pg_catalog.pg_type t ON d.classid = 'pg_catalog.pg_type'::regclass AND t.oid = d.objid
 WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass
   AND e.extname = 'dlock'
   AND d.deptype = 'e'
   AND COALESCE(c.relowner, p.proowner, t.typowner) IS DISTINCT FROM e.extowner;

SELECT is_empty(
    $$SELECT m.member FROM tap_member_not_owned m$$,
    'every member of the extension is owned by the extension''s owner'
);
SELECT table_owner_is(:'dlock_schema', 'dlock_lease', :'dlock_owner',
    'dlock_lease is owned by the installing superuser');
SELECT sequence_owner_is(:'dlock_schema', 'dlock_token_seq', :'dlock_owner',
    'dlock_token_seq is owned by the installing superuser');
SELECT sequence_owner_is(:'dlock_schema', 'dlock_token_origin', :'dlock_owner',
    'dlock_token_origin is owned by the installing superuser');
SELECT view_owner_is(:'dlock_schema', 'dlock_leases', :'dlock_owner',
    'dlock_leases is owned by the installing superuser');
SELECT function_owner_is(:'dlock_schema', 'dlock_acquire', ARRAY['text', 'interval', 'interval', 'text'], :'dlock_owner',
    'dlock_acquire is owned by the installing superuser');
SELECT function_owner_is(:'dlock_schema', 'dlock_renew', ARRAY['text', 'bigint', 'interval'], :'dlock_owner',
    'dlock_renew is owned by the installing superuser');
SELECT function_owner_is(:'dlock_schema', 'dlock_release', ARRAY['text', 'bigint'], :'dlock_owner',
    'dlock_release is owned by the installing superuser');
SELECT function_owner_is(:'dlock_schema', 'dlock_break', ARRAY['text'], :'dlock_owner',
    'dlock_break is owned by the installing superuser');

-- The control file.
SELECT results_eq(
    $$SELECT v.superuser, v.trusted, v.relocatable, v.requires
        FROM pg_catalog.pg_available_extension_versions v
       WHERE v.name = 'dlock' AND v.version = '1.0'$$,
    $$VALUES (true, false, false, NULL::name[])$$,
    'dlock 1.0 is available with superuser = true, trusted = false, relocatable = false and no requires'
);
SELECT is_empty(
    $$SELECT v.version FROM pg_catalog.pg_available_extension_versions v
       WHERE v.name = 'dlock' AND (v.trusted OR NOT v.superuser OR v.relocatable)$$,
    'no available version of dlock is trusted, installable without superuser, or relocatable'
);

-- The meta-test catches what it should.  Three functions are added to the
-- extension (inside this transaction, rolled back at the end): one
-- SECURITY DEFINER without a search_path, one with a search_path that does
-- not end with pg_temp, and one pinned properly.  The first two, and only
-- they, must show up.
CREATE FUNCTION :"dlock_schema".dlock_tap_secdef_bare() RETURNS int
    LANGUAGE sql SECURITY DEFINER AS 'SELECT 1';
CREATE FUNCTION :"dlock_schema".dlock_tap_secdef_temp_first() RETURNS int
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS 'SELECT 1';
CREATE FUNCTION :"dlock_schema".dlock_tap_secdef_pinned() RETURNS int
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS 'SELECT 1';
ALTER EXTENSION dlock ADD FUNCTION :"dlock_schema".dlock_tap_secdef_bare();
ALTER EXTENSION dlock ADD FUNCTION :"dlock_schema".dlock_tap_secdef_temp_first();
ALTER EXTENSION dlock ADD FUNCTION :"dlock_schema".dlock_tap_secdef_pinned();
SELECT set_eq(
    $$SELECT f.func FROM tap_secdef_unpinned f$$,
    ARRAY['dlock_tap_secdef_bare()', 'dlock_tap_secdef_temp_first()'],
    'self-check: the meta-test reports a SECURITY DEFINER member without search_path, or with pg_temp not last, and passes a pinned one'
);
CREATE ROLE dlock_tap_other;
ALTER FUNCTION :"dlock_schema".dlock_tap_secdef_pinned() OWNER TO dlock_tap_other;
SELECT set_eq(
    $$SELECT m.member FROM tap_member_not_owned m$$,
    ARRAY['function dlock_tap_secdef_pinned()'],
    'self-check: the owner test reports a member owned by another role'
);

-- trusted = false in practice: a role that holds CREATE on the database
-- (enough for a trusted extension) cannot create dlock.  The extension is
-- dropped first (the final ROLLBACK brings the original back).
CREATE ROLE dlock_tap_dbadmin;
GRANT CREATE ON DATABASE :"dbname" TO dlock_tap_dbadmin;
GRANT CREATE ON SCHEMA :"dlock_schema" TO dlock_tap_dbadmin;
DROP EXTENSION dlock;
SET ROLE dlock_tap_dbadmin;
SELECT throws_ok(
    format('CREATE EXTENSION dlock SCHEMA %I', :'dlock_schema'),
    '42501', 'permission denied to create extension "dlock"',
    'a non-superuser with CREATE on the database and the schema cannot create dlock (not trusted)'
);
RESET ROLE;
SELECT lives_ok(
    format('CREATE EXTENSION dlock SCHEMA %I', :'dlock_schema'),
    'a superuser can create it (the denial above was about trust, not a broken script)'
);

SELECT * FROM finish();
ROLLBACK;
