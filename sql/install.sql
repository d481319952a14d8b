--
-- install: CREATE EXTENSION in any schema, calls that do not depend on
-- search_path, DROP EXTENSION removing everything, and re-creation in the
-- same session (the backend's cached plans must follow the new schema).
--
CREATE SCHEMA "Lease Schema";
CREATE EXTENSION dlock SCHEMA "Lease Schema";

-- every member object lives in the chosen schema (the row types of its
-- table and view, and their array types, are members too from PostgreSQL
-- 17 on, but not on 15: they are left out, as they come and go with their
-- relations)
SELECT pg_describe_object(classid, objid, objsubid) AS member
  FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'dlock')
   AND deptype = 'e'
   AND NOT EXISTS (SELECT 1 FROM pg_type t LEFT JOIN pg_type e ON e.oid = t.typelem
                    WHERE classid = 'pg_type'::regclass AND t.oid = objid
                      AND (t.typrelid <> 0 OR e.typrelid <> 0))
 ORDER BY 1;

-- the table and the sequence are dumped with the database
SELECT extrelocatable, extconfig::regclass[] FROM pg_extension WHERE extname = 'dlock';

-- calls work with an empty search_path: the C code qualifies everything
SET search_path = '';
SELECT "Lease Schema".dlock_acquire('install:a', '1 min') AS token;
SELECT "Lease Schema".dlock_release('install:a', 1);
SELECT lock_name, token, released, live FROM "Lease Schema".dlock_leases;
RESET search_path;

-- a hostile search_path cannot redirect the extension's SQL
CREATE SCHEMA evil;
CREATE TABLE evil.dlock_lease (lock_name text);
CREATE FUNCTION evil.nextval(regclass) RETURNS bigint LANGUAGE sql AS 'SELECT 424242::bigint';
CREATE FUNCTION evil.always(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.always);
SET search_path = evil, pg_catalog, "Lease Schema";
SELECT 'a'::text = 'b'::text AS evil_operator_active;
SELECT dlock_acquire('install:b', '1 min') AS token;
SELECT dlock_acquire('install:b', '1 min') IS NULL AS held;
SELECT dlock_renew('install:a', 1, '1 min') AS released_lease_not_renewed;
-- the fence trigger's lookup is not redirected either: install:8 has no
-- lease, whatever an unqualified = would match
CREATE TABLE public.fenced (id int PRIMARY KEY, fence_token bigint);
CREATE TRIGGER fenced_fence BEFORE INSERT OR UPDATE ON public.fenced
  FOR EACH ROW EXECUTE FUNCTION "Lease Schema".dlock_fence('install:{id}', 'fence_token');
SELECT dlock_acquire('install:7', '1 min') AS t7 \gset
INSERT INTO public.fenced VALUES (7, :t7);
INSERT INTO public.fenced VALUES (8, :t7);
SELECT count(*) AS untouched FROM evil.dlock_lease;
RESET search_path;
DROP SCHEMA evil CASCADE;

-- DROP EXTENSION removes everything it created (the trigger depends on it)
DROP TABLE public.fenced;
DROP EXTENSION dlock;
SELECT count(*) AS leftovers FROM pg_class
 WHERE relnamespace = '"Lease Schema"'::regnamespace;
SELECT count(*) AS leftovers FROM pg_proc
 WHERE pronamespace = '"Lease Schema"'::regnamespace;
DROP SCHEMA "Lease Schema";

-- created again in this session, in another schema: the backend's cache
-- is rebuilt for the new objects
CREATE EXTENSION dlock;
SELECT dlock_acquire('install:c', '1 min') AS token;
SELECT lock_name, token FROM dlock_leases;
DROP EXTENSION dlock;
