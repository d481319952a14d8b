-- test/pgtap/02_privileges.sql: what PUBLIC, and so any ordinary role, may
-- do with dlock's objects.
--
-- First the grants as the catalogs record them (PUBLIC: EXECUTE on acquire,
-- renew, release, their forms for many names and check, and on the readers
-- behind the monitoring views; SELECT on dlock_leases, dlock_waiters,
-- dlock_stats and dlock_notifier; nothing else on any member of the
-- extension), then the same
-- rules exercised by an ordinary role created here: it cannot touch the
-- lease table, the marks or the token sequence (so it cannot make tokens
-- repeat or forge what a database has seen), cannot write through the view,
-- cannot break leases, purge, reset the counters or set the monitoring
-- settings, and can use the lease functions (for one name and for many)
-- and dlock_check and read dlock_leases and the monitoring views; the calls run
-- as the caller (no SECURITY DEFINER), and a refused all-or-nothing
-- attempt, undone inside the call, leaves the caller's role as it was.

\ir preamble.psql

SELECT plan(82);

-- Grants to PUBLIC, object by object.
SELECT function_privs_are(:'dlock_schema', 'dlock_acquire', ARRAY['text', 'interval', 'interval', 'text'],
    'public', ARRAY['EXECUTE'], 'PUBLIC may execute dlock_acquire');
SELECT function_privs_are(:'dlock_schema', 'dlock_renew', ARRAY['text', 'bigint', 'interval'],
    'public', ARRAY['EXECUTE'], 'PUBLIC may execute dlock_renew');
SELECT function_privs_are(:'dlock_schema', 'dlock_release', ARRAY['text', 'bigint'],
    'public', ARRAY['EXECUTE'], 'PUBLIC may execute dlock_release');
SELECT function_privs_are(:'dlock_schema', 'dlock_acquire_all', ARRAY['text[]', 'interval', 'interval', 'text'],
    'public', ARRAY['EXECUTE'], 'PUBLIC may execute dlock_acquire_all');
SELECT function_privs_are(:'dlock_schema', 'dlock_acquire_any', ARRAY['text[]', 'interval', 'interval', 'text'],
    'public', ARRAY['EXECUTE'], 'PUBLIC may execute dlock_acquire_any');
SELECT function_privs_are(:'dlock_schema', 'dlock_renew_each', ARRAY['text[]', 'bigint[]', 'interval'],
    'public', ARRAY['EXECUTE'], 'PUBLIC may execute dlock_renew_each');
SELECT function_privs_are(:'dlock_schema', 'dlock_release_each', ARRAY['text[]', 'bigint[]'],
    'public', ARRAY['EXECUTE'], 'PUBLIC may execute dlock_release_each');
SELECT function_privs_are(:'dlock_schema', 'dlock_break', ARRAY['text'],
    'public', ARRAY[]::name[], 'PUBLIC may not execute dlock_break');
SELECT function_privs_are(:'dlock_schema', 'dlock_purge', ARRAY['interval'],
    'public', ARRAY[]::name[], 'PUBLIC may not execute dlock_purge');
SELECT function_privs_are(:'dlock_schema', 'dlock_purge_marks', ARRAY['interval'],
    'public', ARRAY[]::name[], 'PUBLIC may not execute dlock_purge_marks');
SELECT function_privs_are(:'dlock_schema', 'dlock_check', ARRAY['text', 'bigint', 'text'],
    'public', ARRAY['EXECUTE'], 'PUBLIC may execute dlock_check');
SELECT function_privs_are(:'dlock_schema', 'dlock_fence', ARRAY[]::text[],
    'public', ARRAY['EXECUTE'], 'PUBLIC may execute dlock_fence (so any table owner can protect a table)');
SELECT function_privs_are(:'dlock_schema', 'dlock_waiters_read', ARRAY[]::text[],
    'public', ARRAY['EXECUTE'], 'PUBLIC may execute dlock_waiters_read (behind the view dlock_waiters)');
SELECT function_privs_are(:'dlock_schema', 'dlock_stats_read', ARRAY[]::text[],
    'public', ARRAY['EXECUTE'], 'PUBLIC may execute dlock_stats_read (behind the view dlock_stats)');
SELECT function_privs_are(:'dlock_schema', 'dlock_stats_reset', ARRAY[]::text[],
    'public', ARRAY[]::name[], 'PUBLIC may not execute dlock_stats_reset');
SELECT function_privs_are(:'dlock_schema', 'dlock_notifier_read', ARRAY[]::text[],
    'public', ARRAY['EXECUTE'], 'PUBLIC may execute dlock_notifier_read (behind the view dlock_notifier, which listeners of any role read)');
SELECT table_privs_are(:'dlock_schema', 'dlock_leases', 'public', ARRAY['SELECT'],
    'PUBLIC may SELECT from dlock_leases, and nothing else');
SELECT table_privs_are(:'dlock_schema', 'dlock_waiters', 'public', ARRAY['SELECT'],
    'PUBLIC may SELECT from dlock_waiters, and nothing else');
SELECT table_privs_are(:'dlock_schema', 'dlock_stats', 'public', ARRAY['SELECT'],
    'PUBLIC may SELECT from dlock_stats, and nothing else');
SELECT table_privs_are(:'dlock_schema', 'dlock_notifier', 'public', ARRAY['SELECT'],
    'PUBLIC may SELECT from dlock_notifier, and nothing else');
SELECT table_privs_are(:'dlock_schema', 'dlock_lease', 'public', ARRAY[]::name[],
    'PUBLIC has no privilege on table dlock_lease');
SELECT any_column_privs_are(:'dlock_schema', 'dlock_lease', 'public', ARRAY[]::name[],
    'PUBLIC has no privilege on any column of dlock_lease');
SELECT table_privs_are(:'dlock_schema', 'dlock_fence_mark', 'public', ARRAY[]::name[],
    'PUBLIC has no privilege on table dlock_fence_mark');
SELECT sequence_privs_are(:'dlock_schema', 'dlock_token_seq', 'public', ARRAY[]::name[],
    'PUBLIC has no privilege on sequence dlock_token_seq');
SELECT sequence_privs_are(:'dlock_schema', 'dlock_token_origin', 'public', ARRAY[]::name[],
    'PUBLIC has no privilege on sequence dlock_token_origin');

-- The same, for every member of the extension (so a member added later
-- without deciding its grants fails here).  Functions with a NULL ACL are
-- executable by PUBLIC by default; has_function_privilege accounts for it.
SELECT set_eq(
    $$SELECT p.proname::text COLLATE "default"
        FROM pg_catalog.pg_depend d
        JOIN pg_catalog.pg_proc p ON d.classid = 'pg_catalog.pg_proc'::regclass AND p.oid = d.objid
       WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass
         AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'dlock')
         AND d.deptype = 'e'
         AND pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE')$$,
    ARRAY['dlock_acquire', 'dlock_renew', 'dlock_release', 'dlock_acquire_all', 'dlock_acquire_any',
          'dlock_renew_each', 'dlock_release_each', 'dlock_check', 'dlock_fence',
          'dlock_waiters_read', 'dlock_stats_read', 'dlock_notifier_read'],
    'of the extension''s functions, PUBLIC may execute exactly dlock_acquire, dlock_renew, dlock_release, dlock_acquire_all, dlock_acquire_any, dlock_renew_each, dlock_release_each, dlock_check, the trigger function dlock_fence and the readers dlock_waiters_read, dlock_stats_read and dlock_notifier_read'
);
SELECT set_eq(
    $$SELECT c.relname::text COLLATE "default", NULL::text, a.privilege_type::text COLLATE "default"
        FROM pg_catalog.pg_depend d
        JOIN pg_catalog.pg_class c ON d.classid = 'pg_catalog.pg_class'::regclass AND c.oid = d.objid
        CROSS JOIN LATERAL pg_catalog.aclexplode(COALESCE(c.relacl,
            pg_catalog.acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char", c.relowner))) a
       WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass
         AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'dlock')
         AND d.deptype = 'e'
         AND a.grantee = 0
      UNION ALL
      SELECT c.relname::text COLLATE "default", att.attname::text COLLATE "default", a.privilege_type::text COLLATE "default"
        FROM pg_catalog.pg_depend d
        JOIN pg_catalog.pg_class c ON d.classid = 'pg_catalog.pg_class'::regclass AND c.oid = d.objid
        JOIN pg_catalog.pg_attribute att ON att.attrelid = c.oid AND att.attacl IS NOT NULL
        CROSS JOIN LATERAL pg_catalog.aclexplode(att.attacl) a
       WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass
         AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'dlock')
         AND d.deptype = 'e'
         AND a.grantee = 0$$,
    $$VALUES ('dlock_leases', NULL::text, 'SELECT'), ('dlock_waiters', NULL::text, 'SELECT'),
             ('dlock_stats', NULL::text, 'SELECT'), ('dlock_notifier', NULL::text, 'SELECT')$$,
    'of the extension''s relations and their columns, PUBLIC holds exactly SELECT on dlock_leases, dlock_waiters, dlock_stats and dlock_notifier'
);

-- An ordinary role.  It gets USAGE on the schema, as any role that uses
-- dlock needs, so that every denial below is about the object itself.
CREATE ROLE dlock_tap_plain;
GRANT USAGE ON SCHEMA :"dlock_schema" TO dlock_tap_plain;
-- a table the superuser fences in mode 'seen', which the role may write
CREATE TEMP TABLE tap_seen (id int PRIMARY KEY, tok bigint);
CREATE TRIGGER tap_seen_fence BEFORE INSERT OR UPDATE ON tap_seen
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('tap:priv:seen:{id}', 'tok', 'seen');
GRANT INSERT ON tap_seen TO dlock_tap_plain;
CREATE TEMP TABLE tap_token (who text PRIMARY KEY, token bigint);
GRANT ALL ON tap_token TO PUBLIC;
CREATE TEMP TABLE tap_tokens (who text PRIMARY KEY, tokens bigint[]);
GRANT ALL ON tap_tokens TO PUBLIC;

-- The functions PUBLIC may execute run as their caller: none is SECURITY
-- DEFINER (dlock switches to the table's owner only inside its C code).
SELECT is_empty(
    $$SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
       WHERE p.pronamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident(current_schema()))
         AND p.proname IN ('dlock_acquire', 'dlock_renew', 'dlock_release', 'dlock_acquire_all', 'dlock_acquire_any',
                           'dlock_renew_each', 'dlock_release_each', 'dlock_check', 'dlock_fence',
                           'dlock_waiters_read', 'dlock_stats_read', 'dlock_notifier_read')
         AND p.prosecdef$$,
    'none of the functions PUBLIC may execute is SECURITY DEFINER'
);

SET ROLE dlock_tap_plain;

-- The lease table: no statement of any kind.
SELECT throws_ok(
    $$INSERT INTO dlock_lease VALUES ('tap:priv:forged', 1, 'me', current_user::regrole, pg_catalog.now(), pg_catalog.now(), pg_catalog.now() + '1 hour', false)$$,
    '42501', 'permission denied for table dlock_lease',
    'an ordinary role cannot INSERT into dlock_lease'
);
SELECT throws_ok(
    $$UPDATE dlock_lease SET token = 1$$,
    '42501', 'permission denied for table dlock_lease',
    'an ordinary role cannot UPDATE dlock_lease'
);
SELECT throws_ok(
    $$DELETE FROM dlock_lease$$,
    '42501', 'permission denied for table dlock_lease',
    'an ordinary role cannot DELETE from dlock_lease'
);
SELECT throws_ok(
    $$TRUNCATE dlock_lease$$,
    '42501', 'permission denied for table dlock_lease',
    'an ordinary role cannot TRUNCATE dlock_lease'
);
SELECT throws_ok(
    $$SELECT * FROM dlock_lease$$,
    '42501', 'permission denied for table dlock_lease',
    'an ordinary role cannot SELECT from dlock_lease (it reads dlock_leases)'
);

-- The marks of mode 'seen': no statement of any kind, so nobody can lower a
-- mark (and let a stale token in) or raise one (and lock holders out).
SELECT throws_ok(
    $$INSERT INTO dlock_fence_mark VALUES (current_user::regrole, 'tap:priv:forged', 1, pg_catalog.now())$$,
    '42501', 'permission denied for table dlock_fence_mark',
    'an ordinary role cannot INSERT into dlock_fence_mark'
);
SELECT throws_ok(
    $$UPDATE dlock_fence_mark SET token = 1$$,
    '42501', 'permission denied for table dlock_fence_mark',
    'an ordinary role cannot UPDATE dlock_fence_mark'
);
SELECT throws_ok(
    $$DELETE FROM dlock_fence_mark$$,
    '42501', 'permission denied for table dlock_fence_mark',
    'an ordinary role cannot DELETE from dlock_fence_mark'
);
SELECT throws_ok(
    $$SELECT dlock_purge_marks('0')$$,
    '42501', 'permission denied for function dlock_purge_marks',
    'an ordinary role cannot purge marks'
);

-- The token sequence: no nextval, setval or ALTER, so tokens cannot be
-- consumed, rewound or made to repeat.
SELECT throws_ok(
    $$SELECT pg_catalog.nextval('dlock_token_seq')$$,
    '42501', 'permission denied for sequence dlock_token_seq',
    'an ordinary role cannot call nextval on dlock_token_seq'
);
SELECT throws_ok(
    $$SELECT pg_catalog.setval('dlock_token_seq', 1)$$,
    '42501', 'permission denied for sequence dlock_token_seq',
    'an ordinary role cannot setval dlock_token_seq'
);
SELECT throws_ok(
    $$ALTER SEQUENCE dlock_token_seq RESTART WITH 1$$,
    '42501', 'must be owner of sequence dlock_token_seq',
    'an ordinary role cannot ALTER SEQUENCE dlock_token_seq (not the owner)'
);
-- Nor the token origin register: overwriting it would only force a jump, but
-- ordinary roles write nothing of dlock's directly.
SELECT throws_ok(
    $$SELECT pg_catalog.setval('dlock_token_origin', 1)$$,
    '42501', 'permission denied for sequence dlock_token_origin',
    'an ordinary role cannot setval dlock_token_origin'
);

-- The view is automatically updatable; PUBLIC's SELECT must not turn into
-- a way to write leases through it.
SELECT throws_ok(
    $$INSERT INTO dlock_leases (lock_name, token, owner, acquired_at, renewed_at, expires_at, released)
      VALUES ('tap:priv:forged', 1, 'me', pg_catalog.now(), pg_catalog.now(), pg_catalog.now() + '1 hour', false)$$,
    '42501', 'permission denied for view dlock_leases',
    'an ordinary role cannot INSERT through dlock_leases'
);
SELECT throws_ok(
    $$UPDATE dlock_leases SET token = 1$$,
    '42501', 'permission denied for view dlock_leases',
    'an ordinary role cannot UPDATE through dlock_leases'
);
SELECT throws_ok(
    $$DELETE FROM dlock_leases$$,
    '42501', 'permission denied for view dlock_leases',
    'an ordinary role cannot DELETE through dlock_leases'
);

-- dlock_break is for operators.
SELECT throws_ok(
    $$SELECT dlock_break('tap:priv:plain')$$,
    '42501', 'permission denied for function dlock_break',
    'an ordinary role cannot call dlock_break'
);

SELECT throws_ok(
    $$SELECT dlock_purge('0')$$,
    '42501', 'permission denied for function dlock_purge',
    'an ordinary role cannot purge leases'
);

-- The monitoring views are for everyone (a listener of any role needs
-- dlock_notifier to tell dlock's events from others'); resetting the
-- counters is for operators.  (This cluster does not preload dlock: the
-- views have no rows here, specs/race-waiters.spec,
-- specs/stats-counters.spec and test/t/018_events.pl show them with
-- rows.)
SELECT lives_ok(
    $$SELECT * FROM dlock_waiters$$,
    'an ordinary role can read dlock_waiters'
);
SELECT lives_ok(
    $$SELECT * FROM dlock_stats$$,
    'an ordinary role can read dlock_stats'
);
SELECT lives_ok(
    $$SELECT * FROM dlock_waiters_read()$$,
    'an ordinary role can call dlock_waiters_read'
);
SELECT lives_ok(
    $$SELECT * FROM dlock_stats_read()$$,
    'an ordinary role can call dlock_stats_read'
);
SELECT lives_ok(
    $$SELECT * FROM dlock_notifier$$,
    'an ordinary role can read dlock_notifier'
);
SELECT lives_ok(
    $$SELECT * FROM dlock_notifier_read()$$,
    'an ordinary role can call dlock_notifier_read'
);
SELECT throws_ok(
    $$SELECT dlock_stats_reset()$$,
    '42501', 'permission denied for function dlock_stats_reset',
    'an ordinary role cannot reset the counters of dlock_stats'
);

-- What it can do: take, renew and release a lease, and read it.
SELECT lives_ok(
    $$INSERT INTO tap_token SELECT 'plain', dlock_acquire('tap:priv:plain', '1 hour')$$,
    'an ordinary role can call dlock_acquire'
);
SELECT isnt((SELECT t.token FROM tap_token t WHERE t.who = 'plain'), NULL,
    'an ordinary role is granted a free lease (a token, not NULL)');
SELECT is(
    dlock_renew('tap:priv:plain', (SELECT t.token FROM tap_token t WHERE t.who = 'plain'), '2 hours'),
    true,
    'an ordinary role can renew its lease'
);
SELECT results_eq(
    $$SELECT l.token, l.holder_role::text COLLATE "default", l.released, l.live
        FROM dlock_leases l WHERE l.lock_name = 'tap:priv:plain'$$,
    $$SELECT t.token, 'dlock_tap_plain'::text, false, true FROM tap_token t WHERE t.who = 'plain'$$,
    'an ordinary role can read dlock_leases: its live lease, with its token and its role as holder'
);
SELECT is(
    dlock_release('tap:priv:plain', (SELECT t.token FROM tap_token t WHERE t.who = 'plain')),
    true,
    'an ordinary role can release its lease'
);
SELECT results_eq(
    $$SELECT l.token, l.released, l.live FROM dlock_leases l WHERE l.lock_name = 'tap:priv:plain'$$,
    $$SELECT t.token, true, false FROM tap_token t WHERE t.who = 'plain'$$,
    'after the release, dlock_leases shows the lease released, not live, with its last token'
);
-- The same for many names at once: all or nothing, any of, renew and
-- release each.
SELECT lives_ok(
    $$INSERT INTO tap_tokens SELECT 'all', dlock_acquire_all(ARRAY['tap:priv:set:b', 'tap:priv:set:a'], '1 hour')$$,
    'an ordinary role can call dlock_acquire_all'
);
SELECT is(
    (SELECT t.tokens[2] < t.tokens[1] FROM tap_tokens t WHERE t.who = 'all'),
    true,
    'an ordinary role is granted a free set: one token per name, in the order given (drawn in byte order)'
);
-- tap:priv:set:0 comes first in byte order: the refused attempt took it
-- as the extension's owner, then undid it
SELECT is(
    dlock_acquire_all(ARRAY['tap:priv:set:0', 'tap:priv:set:a'], '1 hour'),
    NULL::bigint[],
    'dlock_acquire_all returns NULL to an ordinary role when one name is held'
);
SELECT is(current_user::text, 'dlock_tap_plain',
    'after a refused attempt (undone inside the call) the caller is still its own role, not the extension''s owner');
SELECT is(
    (SELECT pg_catalog.count(*) FROM dlock_leases l WHERE l.lock_name = 'tap:priv:set:0'),
    0::bigint,
    'the refused attempt left no lease on the name it had taken first'
);
SELECT throws_ok(
    $$INSERT INTO dlock_lease VALUES ('tap:priv:forged', 1, 'me', current_user::regrole, pg_catalog.now(), pg_catalog.now(), pg_catalog.now() + '1 hour', false)$$,
    '42501', 'permission denied for table dlock_lease',
    'after calling the functions for many names, an ordinary role still cannot write dlock_lease'
);
SELECT throws_ok(
    $$SELECT pg_catalog.nextval('dlock_token_seq')$$,
    '42501', 'permission denied for sequence dlock_token_seq',
    'after calling the functions for many names, an ordinary role still cannot call nextval on dlock_token_seq'
);
SELECT results_eq(
    $$SELECT a.lock_name COLLATE "default" FROM dlock_acquire_any(ARRAY['tap:priv:set:a', 'tap:priv:set:c'], '1 hour') a$$,
    ARRAY['tap:priv:set:c'],
    'an ordinary role can call dlock_acquire_any: the first free name'
);
SELECT results_eq(
    $$SELECT l.lock_name COLLATE "default", l.holder_role::text COLLATE "default", l.live
        FROM dlock_leases l WHERE l.lock_name LIKE 'tap:priv:set:%' ORDER BY l.lock_name$$,
    $$VALUES ('tap:priv:set:a', 'dlock_tap_plain', true), ('tap:priv:set:b', 'dlock_tap_plain', true),
             ('tap:priv:set:c', 'dlock_tap_plain', true)$$,
    'the leases taken for many names are the ordinary role''s (the calls ran as their caller)'
);
SELECT is(
    dlock_renew_each(ARRAY['tap:priv:set:b', 'tap:priv:set:a', 'tap:priv:set:c'],
                     (SELECT t.tokens || (SELECT l.token FROM dlock_leases l WHERE l.lock_name = 'tap:priv:set:c')
                        FROM tap_tokens t WHERE t.who = 'all'),
                     '2 hours'),
    ARRAY[true, true, true],
    'an ordinary role can renew its leases with dlock_renew_each'
);
SELECT is(
    dlock_release_each(ARRAY['tap:priv:set:b', 'tap:priv:set:a', 'tap:priv:set:c'],
                       (SELECT t.tokens || (SELECT l.token FROM dlock_leases l WHERE l.lock_name = 'tap:priv:set:c')
                          FROM tap_tokens t WHERE t.who = 'all')),
    ARRAY[true, true, true],
    'an ordinary role can release its leases with dlock_release_each'
);

-- It can protect a table of its own with dlock_fence, and the trigger then
-- reads the lease table for it (the role itself still cannot).
CREATE TEMP TABLE tap_fenced (id int PRIMARY KEY, fence_token bigint);
SELECT lives_ok(
    $$CREATE TRIGGER tap_fence BEFORE INSERT OR UPDATE ON tap_fenced
      FOR EACH ROW EXECUTE FUNCTION dlock_fence('tap:priv:fenced', 'fence_token')$$,
    'an ordinary role can create a dlock_fence trigger on its own table'
);
INSERT INTO tap_token SELECT 'fenced', dlock_acquire('tap:priv:fenced', '1 hour');
SELECT lives_ok(
    $$INSERT INTO tap_fenced SELECT 1, t.token FROM tap_token t WHERE t.who = 'fenced'$$,
    'the trigger accepts the role''s write with its current token'
);
SELECT throws_ok(
    $$INSERT INTO tap_fenced SELECT 2, t.token - 1 FROM tap_token t WHERE t.who = 'fenced'$$,
    '55T01', NULL,
    'the trigger rejects the role''s write with another token'
);
-- dlock_check in every mode, and mode 'seen' writes the marks for it
SELECT is(
    (SELECT dlock_check('tap:priv:fenced', t.token) = t.token AND dlock_check('tap:priv:fenced', t.token, 'live') = t.token
       FROM tap_token t WHERE t.who = 'fenced'),
    true,
    'an ordinary role can call dlock_check in modes latest and live'
);
-- mode 'seen' is for the writers of a table fenced by the lock in that
-- mode: the role may write tap_seen (the superuser's), whose trigger
-- fences 'tap:priv:seen:{id}'
SELECT throws_ok(
    $$SELECT dlock_check('tap:priv:other', 42, 'seen')$$,
    '42501', 'permission denied to check lock "tap:priv:other" in mode ''seen''',
    'an ordinary role that may write no table fenced by a lock cannot raise its mark with dlock_check in mode seen'
);
SELECT is(dlock_check('tap:priv:seen:1', 42, 'seen'), 42::bigint,
    'an ordinary role that may write a table fenced by the lock can call dlock_check in mode seen, which records the mark');
SELECT throws_ok(
    $$SELECT dlock_check('tap:priv:seen:1', 41, 'seen')$$,
    '55T01', 'fencing token rejected for lock "tap:priv:seen:1"',
    'a lower token than the mark is rejected for it'
);

-- The monitoring settings are for superusers (the library is loaded by
-- now: the role called dlock's functions above).
SELECT throws_ok(
    $$SET dlock.notify = on$$,
    '42501', 'permission denied to set parameter "dlock.notify"',
    'an ordinary role cannot set dlock.notify'
);
SELECT throws_ok(
    $$SET dlock.log_lease_changes = 'all'$$,
    '42501', 'permission denied to set parameter "dlock.log_lease_changes"',
    'an ordinary role cannot set dlock.log_lease_changes'
);
SELECT throws_ok(
    $$SET dlock.track_stats = off$$,
    '42501', 'permission denied to set parameter "dlock.track_stats"',
    'an ordinary role cannot set dlock.track_stats'
);

RESET ROLE;

-- The denials above changed nothing: the only lease rows are the role's own.
SELECT results_eq(
    $$SELECT l.lock_name COLLATE "default" FROM dlock_lease l WHERE l.lock_name LIKE 'tap:priv:%' ORDER BY 1$$,
    ARRAY['tap:priv:fenced', 'tap:priv:plain', 'tap:priv:set:a', 'tap:priv:set:b', 'tap:priv:set:c'],
    'no lease was forged by the denied statements'
);
SELECT results_eq(
    $$SELECT m.lock_name COLLATE "default", m.token FROM dlock_fence_mark m WHERE m.lock_name LIKE 'tap:priv:%' ORDER BY 1$$,
    $$VALUES ('tap:priv:seen:1', 42::bigint)$$,
    'the only mark is the one dlock_check recorded: the denied statements forged none'
);

SELECT * FROM finish();
ROLLBACK;
