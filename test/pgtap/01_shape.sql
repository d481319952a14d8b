-- test/pgtap/01_shape.sql: the catalog shape of dlock 1.2.
--
-- Every function with its exact signature (argument types, names and
-- defaults), return type (the columns of dlock_acquire_any's table, and
-- of the set-returning functions behind the monitoring views, too),
-- language, volatility, strictness and security;
-- the four views' columns in order; the two tables and the two sequences; which objects
-- are members of the extension; relocatability and the dump configuration;
-- the settings dlock.notify, dlock.log_lease_changes and dlock.track_stats.
-- Nothing here calls a dlock function (the library is LOADed, for its
-- settings).

\ir preamble.psql

SELECT plan(120);

-- dlock_acquire(lock_name text, ttl interval, wait interval DEFAULT '0', owner text DEFAULT NULL) -> bigint
SELECT has_function(:'dlock_schema', 'dlock_acquire', ARRAY['text', 'interval', 'interval', 'text'],
    'dlock_acquire(text, interval, interval, text) exists in the extension''s schema');
SELECT function_returns(:'dlock_schema', 'dlock_acquire', ARRAY['text', 'interval', 'interval', 'text'], 'bigint',
    'dlock_acquire returns bigint');
SELECT function_lang_is(:'dlock_schema', 'dlock_acquire', ARRAY['text', 'interval', 'interval', 'text'], 'c',
    'dlock_acquire is LANGUAGE C');
SELECT volatility_is(:'dlock_schema', 'dlock_acquire', ARRAY['text', 'interval', 'interval', 'text'], 'volatile',
    'dlock_acquire is VOLATILE');
SELECT isnt_strict(:'dlock_schema', 'dlock_acquire', ARRAY['text', 'interval', 'interval', 'text'],
    'dlock_acquire is not STRICT (NULL arguments are errors, not a NULL result)');
SELECT isnt_definer(:'dlock_schema', 'dlock_acquire', ARRAY['text', 'interval', 'interval', 'text'],
    'dlock_acquire is not SECURITY DEFINER');

-- dlock_renew(lock_name text, token bigint, ttl interval) -> boolean
SELECT has_function(:'dlock_schema', 'dlock_renew', ARRAY['text', 'bigint', 'interval'],
    'dlock_renew(text, bigint, interval) exists in the extension''s schema');
SELECT function_returns(:'dlock_schema', 'dlock_renew', ARRAY['text', 'bigint', 'interval'], 'boolean',
    'dlock_renew returns boolean');
SELECT function_lang_is(:'dlock_schema', 'dlock_renew', ARRAY['text', 'bigint', 'interval'], 'c',
    'dlock_renew is LANGUAGE C');
SELECT volatility_is(:'dlock_schema', 'dlock_renew', ARRAY['text', 'bigint', 'interval'], 'volatile',
    'dlock_renew is VOLATILE');
SELECT isnt_strict(:'dlock_schema', 'dlock_renew', ARRAY['text', 'bigint', 'interval'],
    'dlock_renew is not STRICT');
SELECT isnt_definer(:'dlock_schema', 'dlock_renew', ARRAY['text', 'bigint', 'interval'],
    'dlock_renew is not SECURITY DEFINER');

-- dlock_release(lock_name text, token bigint) -> boolean
SELECT has_function(:'dlock_schema', 'dlock_release', ARRAY['text', 'bigint'],
    'dlock_release(text, bigint) exists in the extension''s schema');
SELECT function_returns(:'dlock_schema', 'dlock_release', ARRAY['text', 'bigint'], 'boolean',
    'dlock_release returns boolean');
SELECT function_lang_is(:'dlock_schema', 'dlock_release', ARRAY['text', 'bigint'], 'c',
    'dlock_release is LANGUAGE C');
SELECT volatility_is(:'dlock_schema', 'dlock_release', ARRAY['text', 'bigint'], 'volatile',
    'dlock_release is VOLATILE');
SELECT isnt_strict(:'dlock_schema', 'dlock_release', ARRAY['text', 'bigint'],
    'dlock_release is not STRICT');
SELECT isnt_definer(:'dlock_schema', 'dlock_release', ARRAY['text', 'bigint'],
    'dlock_release is not SECURITY DEFINER');

-- dlock_break(lock_name text) -> boolean
SELECT has_function(:'dlock_schema', 'dlock_break', ARRAY['text'],
    'dlock_break(text) exists in the extension''s schema');
SELECT function_returns(:'dlock_schema', 'dlock_break', ARRAY['text'], 'boolean',
    'dlock_break returns boolean');
SELECT function_lang_is(:'dlock_schema', 'dlock_break', ARRAY['text'], 'c',
    'dlock_break is LANGUAGE C');
SELECT volatility_is(:'dlock_schema', 'dlock_break', ARRAY['text'], 'volatile',
    'dlock_break is VOLATILE');
SELECT isnt_strict(:'dlock_schema', 'dlock_break', ARRAY['text'],
    'dlock_break is not STRICT');
SELECT isnt_definer(:'dlock_schema', 'dlock_break', ARRAY['text'],
    'dlock_break is not SECURITY DEFINER');

-- Many names at once (1.2).  Array forms with names of their own, not
-- overloads of dlock_renew and dlock_release (see the membership test below).

-- dlock_acquire_all(lock_names text[], ttl interval, wait interval DEFAULT '0', owner text DEFAULT NULL) -> bigint[]
SELECT has_function(:'dlock_schema', 'dlock_acquire_all', ARRAY['text[]', 'interval', 'interval', 'text'],
    'dlock_acquire_all(text[], interval, interval, text) exists in the extension''s schema');
SELECT function_returns(:'dlock_schema', 'dlock_acquire_all', ARRAY['text[]', 'interval', 'interval', 'text'], 'bigint[]',
    'dlock_acquire_all returns bigint[] (one token per name)');
SELECT function_lang_is(:'dlock_schema', 'dlock_acquire_all', ARRAY['text[]', 'interval', 'interval', 'text'], 'c',
    'dlock_acquire_all is LANGUAGE C');
SELECT volatility_is(:'dlock_schema', 'dlock_acquire_all', ARRAY['text[]', 'interval', 'interval', 'text'], 'volatile',
    'dlock_acquire_all is VOLATILE');
SELECT isnt_strict(:'dlock_schema', 'dlock_acquire_all', ARRAY['text[]', 'interval', 'interval', 'text'],
    'dlock_acquire_all is not STRICT (NULL means not acquired, so NULL arguments are errors)');
SELECT isnt_definer(:'dlock_schema', 'dlock_acquire_all', ARRAY['text[]', 'interval', 'interval', 'text'],
    'dlock_acquire_all is not SECURITY DEFINER');

-- dlock_acquire_any(lock_names text[], ttl interval, wait interval DEFAULT '0', owner text DEFAULT NULL)
--   -> TABLE(lock_name text, token bigint)
SELECT has_function(:'dlock_schema', 'dlock_acquire_any', ARRAY['text[]', 'interval', 'interval', 'text'],
    'dlock_acquire_any(text[], interval, interval, text) exists in the extension''s schema');
SELECT function_returns(:'dlock_schema', 'dlock_acquire_any', ARRAY['text[]', 'interval', 'interval', 'text'], 'setof record',
    'dlock_acquire_any returns a set of records (RETURNS TABLE)');
SELECT function_lang_is(:'dlock_schema', 'dlock_acquire_any', ARRAY['text[]', 'interval', 'interval', 'text'], 'c',
    'dlock_acquire_any is LANGUAGE C');
SELECT volatility_is(:'dlock_schema', 'dlock_acquire_any', ARRAY['text[]', 'interval', 'interval', 'text'], 'volatile',
    'dlock_acquire_any is VOLATILE');
SELECT isnt_strict(:'dlock_schema', 'dlock_acquire_any', ARRAY['text[]', 'interval', 'interval', 'text'],
    'dlock_acquire_any is not STRICT (no row means not acquired, so NULL arguments are errors)');
SELECT isnt_definer(:'dlock_schema', 'dlock_acquire_any', ARRAY['text[]', 'interval', 'interval', 'text'],
    'dlock_acquire_any is not SECURITY DEFINER');

-- dlock_renew_each(lock_names text[], tokens bigint[], ttl interval) -> boolean[]
SELECT has_function(:'dlock_schema', 'dlock_renew_each', ARRAY['text[]', 'bigint[]', 'interval'],
    'dlock_renew_each(text[], bigint[], interval) exists in the extension''s schema');
SELECT function_returns(:'dlock_schema', 'dlock_renew_each', ARRAY['text[]', 'bigint[]', 'interval'], 'boolean[]',
    'dlock_renew_each returns boolean[] (one result per pair)');
SELECT function_lang_is(:'dlock_schema', 'dlock_renew_each', ARRAY['text[]', 'bigint[]', 'interval'], 'c',
    'dlock_renew_each is LANGUAGE C');
SELECT volatility_is(:'dlock_schema', 'dlock_renew_each', ARRAY['text[]', 'bigint[]', 'interval'], 'volatile',
    'dlock_renew_each is VOLATILE');
SELECT isnt_strict(:'dlock_schema', 'dlock_renew_each', ARRAY['text[]', 'bigint[]', 'interval'],
    'dlock_renew_each is not STRICT');
SELECT isnt_definer(:'dlock_schema', 'dlock_renew_each', ARRAY['text[]', 'bigint[]', 'interval'],
    'dlock_renew_each is not SECURITY DEFINER');

-- dlock_release_each(lock_names text[], tokens bigint[]) -> boolean[]
SELECT has_function(:'dlock_schema', 'dlock_release_each', ARRAY['text[]', 'bigint[]'],
    'dlock_release_each(text[], bigint[]) exists in the extension''s schema');
SELECT function_returns(:'dlock_schema', 'dlock_release_each', ARRAY['text[]', 'bigint[]'], 'boolean[]',
    'dlock_release_each returns boolean[] (one result per pair)');
SELECT function_lang_is(:'dlock_schema', 'dlock_release_each', ARRAY['text[]', 'bigint[]'], 'c',
    'dlock_release_each is LANGUAGE C');
SELECT volatility_is(:'dlock_schema', 'dlock_release_each', ARRAY['text[]', 'bigint[]'], 'volatile',
    'dlock_release_each is VOLATILE');
SELECT isnt_strict(:'dlock_schema', 'dlock_release_each', ARRAY['text[]', 'bigint[]'],
    'dlock_release_each is not STRICT');
SELECT isnt_definer(:'dlock_schema', 'dlock_release_each', ARRAY['text[]', 'bigint[]'],
    'dlock_release_each is not SECURITY DEFINER');

-- The results exactly: dlock_acquire_any is RETURNS TABLE (lock_name text,
-- token bigint), planned as one row; the others return one value.
SELECT results_eq(
    $$SELECT p.proname::text COLLATE "default", pg_catalog.pg_get_function_result(p.oid), p.proretset, p.prorows
        FROM pg_catalog.pg_proc p
       WHERE p.pronamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident(current_schema()))
         AND p.proname IN ('dlock_acquire_all', 'dlock_acquire_any', 'dlock_renew_each', 'dlock_release_each')
       ORDER BY p.proname$$,
    $$VALUES ('dlock_acquire_all', 'bigint[]', false, 0::real),
             ('dlock_acquire_any', 'TABLE(lock_name text, token bigint)', true, 1::real),
             ('dlock_release_each', 'boolean[]', false, 0::real),
             ('dlock_renew_each', 'boolean[]', false, 0::real)$$,
    'dlock_acquire_any returns TABLE(lock_name text, token bigint) planned as 1 row; dlock_acquire_all bigint[]; dlock_renew_each and dlock_release_each boolean[]'
);

-- dlock_purge(older_than interval) -> bigint
SELECT has_function(:'dlock_schema', 'dlock_purge', ARRAY['interval'],
    'dlock_purge(interval) exists in the extension''s schema');
SELECT function_returns(:'dlock_schema', 'dlock_purge', ARRAY['interval'], 'bigint',
    'dlock_purge returns bigint');
SELECT volatility_is(:'dlock_schema', 'dlock_purge', ARRAY['interval'], 'volatile',
    'dlock_purge is VOLATILE');
SELECT isnt_strict(:'dlock_schema', 'dlock_purge', ARRAY['interval'],
    'dlock_purge is not STRICT');
SELECT isnt_definer(:'dlock_schema', 'dlock_purge', ARRAY['interval'],
    'dlock_purge is not SECURITY DEFINER');

-- dlock_check(lock_name text, token bigint, mode text DEFAULT 'latest') -> bigint
SELECT has_function(:'dlock_schema', 'dlock_check', ARRAY['text', 'bigint', 'text'],
    'dlock_check(text, bigint, text) exists in the extension''s schema');
SELECT function_returns(:'dlock_schema', 'dlock_check', ARRAY['text', 'bigint', 'text'], 'bigint',
    'dlock_check returns bigint');
SELECT volatility_is(:'dlock_schema', 'dlock_check', ARRAY['text', 'bigint', 'text'], 'volatile',
    'dlock_check is VOLATILE (it locks rows and records the check)');
SELECT isnt_strict(:'dlock_schema', 'dlock_check', ARRAY['text', 'bigint', 'text'],
    'dlock_check is not STRICT (a NULL token is a rejection, not a NULL result)');
SELECT isnt_definer(:'dlock_schema', 'dlock_check', ARRAY['text', 'bigint', 'text'],
    'dlock_check is not SECURITY DEFINER');

-- dlock_purge_marks(older_than interval) -> bigint
SELECT has_function(:'dlock_schema', 'dlock_purge_marks', ARRAY['interval'],
    'dlock_purge_marks(interval) exists in the extension''s schema');
SELECT function_returns(:'dlock_schema', 'dlock_purge_marks', ARRAY['interval'], 'bigint',
    'dlock_purge_marks returns bigint');
SELECT isnt_strict(:'dlock_schema', 'dlock_purge_marks', ARRAY['interval'],
    'dlock_purge_marks is not STRICT');
SELECT isnt_definer(:'dlock_schema', 'dlock_purge_marks', ARRAY['interval'],
    'dlock_purge_marks is not SECURITY DEFINER');

-- dlock_fence() -> trigger
SELECT has_function(:'dlock_schema', 'dlock_fence', ARRAY[]::text[],
    'dlock_fence() exists in the extension''s schema');
SELECT function_returns(:'dlock_schema', 'dlock_fence', ARRAY[]::text[], 'trigger',
    'dlock_fence returns trigger');
SELECT function_lang_is(:'dlock_schema', 'dlock_fence', ARRAY[]::text[], 'c',
    'dlock_fence is LANGUAGE C');
SELECT isnt_definer(:'dlock_schema', 'dlock_fence', ARRAY[]::text[],
    'dlock_fence is not SECURITY DEFINER');

-- The monitoring functions (1.2): the set-returning functions behind the
-- views dlock_waiters, dlock_stats and dlock_notifier, and the reset of the
-- counters.  They
-- take no argument (STRICT changes nothing), and the readers are PARALLEL
-- RESTRICTED (below): they read this backend's shared memory.

-- dlock_waiters_read() -> SETOF record (the columns: below)
SELECT has_function(:'dlock_schema', 'dlock_waiters_read', ARRAY[]::text[],
    'dlock_waiters_read() exists in the extension''s schema');
SELECT function_returns(:'dlock_schema', 'dlock_waiters_read', ARRAY[]::text[], 'setof record',
    'dlock_waiters_read returns a set of records (OUT columns)');
SELECT function_lang_is(:'dlock_schema', 'dlock_waiters_read', ARRAY[]::text[], 'c',
    'dlock_waiters_read is LANGUAGE C');
SELECT volatility_is(:'dlock_schema', 'dlock_waiters_read', ARRAY[]::text[], 'volatile',
    'dlock_waiters_read is VOLATILE (it reads shared memory as it is now)');
SELECT is_strict(:'dlock_schema', 'dlock_waiters_read', ARRAY[]::text[],
    'dlock_waiters_read is STRICT (it has no argument)');
SELECT isnt_definer(:'dlock_schema', 'dlock_waiters_read', ARRAY[]::text[],
    'dlock_waiters_read is not SECURITY DEFINER');

-- dlock_stats_read() -> SETOF record (the columns: below)
SELECT has_function(:'dlock_schema', 'dlock_stats_read', ARRAY[]::text[],
    'dlock_stats_read() exists in the extension''s schema');
SELECT function_returns(:'dlock_schema', 'dlock_stats_read', ARRAY[]::text[], 'setof record',
    'dlock_stats_read returns a set of records (OUT columns)');
SELECT function_lang_is(:'dlock_schema', 'dlock_stats_read', ARRAY[]::text[], 'c',
    'dlock_stats_read is LANGUAGE C');
SELECT volatility_is(:'dlock_schema', 'dlock_stats_read', ARRAY[]::text[], 'volatile',
    'dlock_stats_read is VOLATILE (it reads shared memory as it is now)');
SELECT is_strict(:'dlock_schema', 'dlock_stats_read', ARRAY[]::text[],
    'dlock_stats_read is STRICT (it has no argument)');
SELECT isnt_definer(:'dlock_schema', 'dlock_stats_read', ARRAY[]::text[],
    'dlock_stats_read is not SECURITY DEFINER');

-- dlock_notifier_read() -> SETOF record (the columns: below)
SELECT has_function(:'dlock_schema', 'dlock_notifier_read', ARRAY[]::text[],
    'dlock_notifier_read() exists in the extension''s schema');
SELECT function_returns(:'dlock_schema', 'dlock_notifier_read', ARRAY[]::text[], 'setof record',
    'dlock_notifier_read returns a set of records (OUT columns)');
SELECT function_lang_is(:'dlock_schema', 'dlock_notifier_read', ARRAY[]::text[], 'c',
    'dlock_notifier_read is LANGUAGE C');
SELECT volatility_is(:'dlock_schema', 'dlock_notifier_read', ARRAY[]::text[], 'volatile',
    'dlock_notifier_read is VOLATILE (it reads shared memory as it is now)');
SELECT is_strict(:'dlock_schema', 'dlock_notifier_read', ARRAY[]::text[],
    'dlock_notifier_read is STRICT (it has no argument)');
SELECT isnt_definer(:'dlock_schema', 'dlock_notifier_read', ARRAY[]::text[],
    'dlock_notifier_read is not SECURITY DEFINER');

-- dlock_stats_reset() -> void
SELECT has_function(:'dlock_schema', 'dlock_stats_reset', ARRAY[]::text[],
    'dlock_stats_reset() exists in the extension''s schema');
SELECT function_returns(:'dlock_schema', 'dlock_stats_reset', ARRAY[]::text[], 'void',
    'dlock_stats_reset returns void');
SELECT function_lang_is(:'dlock_schema', 'dlock_stats_reset', ARRAY[]::text[], 'c',
    'dlock_stats_reset is LANGUAGE C');
SELECT volatility_is(:'dlock_schema', 'dlock_stats_reset', ARRAY[]::text[], 'volatile',
    'dlock_stats_reset is VOLATILE');
SELECT is_strict(:'dlock_schema', 'dlock_stats_reset', ARRAY[]::text[],
    'dlock_stats_reset is STRICT (it has no argument)');
SELECT isnt_definer(:'dlock_schema', 'dlock_stats_reset', ARRAY[]::text[],
    'dlock_stats_reset is not SECURITY DEFINER (EXECUTE is granted to operators instead)');

-- Argument names and defaults (callers use named arguments and rely on the
-- defaults), PARALLEL UNSAFE (the monitoring readers PARALLEL RESTRICTED),
-- plain functions, and the C symbol of each; the readers' OUT columns.
SELECT results_eq(
    $$SELECT p.proname::text COLLATE "default", pg_catalog.pg_get_function_arguments(p.oid),
             p.prokind::text, p.proparallel::text, p.prosrc COLLATE "default", p.probin COLLATE "default"
        FROM pg_catalog.pg_proc p
       WHERE p.pronamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident(current_schema()))
         AND p.proname LIKE 'dlock\_%'
       ORDER BY p.proname$$,
    $$VALUES
        ('dlock_acquire', 'lock_name text, ttl interval, wait interval DEFAULT ''00:00:00''::interval, owner text DEFAULT NULL::text',
         'f', 'u', 'dlock_acquire', '$libdir/dlock'),
        ('dlock_acquire_all', 'lock_names text[], ttl interval, wait interval DEFAULT ''00:00:00''::interval, owner text DEFAULT NULL::text',
         'f', 'u', 'dlock_acquire_all', '$libdir/dlock'),
        ('dlock_acquire_any', 'lock_names text[], ttl interval, wait interval DEFAULT ''00:00:00''::interval, owner text DEFAULT NULL::text',
         'f', 'u', 'dlock_acquire_any', '$libdir/dlock'),
        ('dlock_break', 'lock_name text', 'f', 'u', 'dlock_break', '$libdir/dlock'),
        ('dlock_check', 'lock_name text, token bigint, mode text DEFAULT ''latest''::text', 'f', 'u', 'dlock_check', '$libdir/dlock'),
        ('dlock_fence', '', 'f', 'u', 'dlock_fence', '$libdir/dlock'),
        ('dlock_notifier_read', 'OUT datid oid, OUT pid integer, OUT started_at timestamp with time zone, '
                                'OUT events_sent bigint, OUT events_dropped bigint, OUT events_queued bigint',
         'f', 'r', 'dlock_notifier_read', '$libdir/dlock'),
        ('dlock_purge', 'older_than interval', 'f', 'u', 'dlock_purge', '$libdir/dlock'),
        ('dlock_purge_marks', 'older_than interval', 'f', 'u', 'dlock_purge_marks', '$libdir/dlock'),
        ('dlock_release', 'lock_name text, token bigint', 'f', 'u', 'dlock_release', '$libdir/dlock'),
        ('dlock_release_each', 'lock_names text[], tokens bigint[]', 'f', 'u', 'dlock_release_each', '$libdir/dlock'),
        ('dlock_renew', 'lock_name text, token bigint, ttl interval', 'f', 'u', 'dlock_renew', '$libdir/dlock'),
        ('dlock_renew_each', 'lock_names text[], tokens bigint[], ttl interval', 'f', 'u', 'dlock_renew_each', '$libdir/dlock'),
        ('dlock_stats_read', 'OUT datid oid, OUT grants_new bigint, OUT grants_after_release bigint, OUT takeovers bigint, '
                             'OUT refusals bigint, OUT waits bigint, OUT wait_timeouts bigint, OUT renewals bigint, '
                             'OUT renewals_failed bigint, OUT releases bigint, OUT releases_failed bigint, OUT breaks bigint, '
                             'OUT purged bigint, OUT fence_latest_accepted bigint, OUT fence_latest_rejected bigint, '
                             'OUT fence_live_accepted bigint, OUT fence_live_rejected bigint, OUT fence_seen_accepted bigint, '
                             'OUT fence_seen_rejected bigint, OUT token_jumps bigint, OUT stats_reset timestamp with time zone',
         'f', 'r', 'dlock_stats_read', '$libdir/dlock'),
        ('dlock_stats_reset', '', 'f', 'u', 'dlock_stats_reset', '$libdir/dlock'),
        ('dlock_waiters_read', 'OUT pid integer, OUT datid oid, OUT roleid oid, OUT lock_name text, OUT kind text, '
                               'OUT names integer, OUT waiting_since timestamp with time zone, '
                               'OUT wait_until timestamp with time zone, OUT "position" integer, OUT attempts bigint',
         'f', 'r', 'dlock_waiters_read', '$libdir/dlock')$$,
    'the extension''s schema has exactly these dlock functions (no other overloads), with these argument names and defaults (wait ''0'', owner NULL, mode ''latest''), PARALLEL UNSAFE but for the monitoring readers (RESTRICTED), the readers'' OUT columns, and C symbols named after them'
);
SELECT is(
    (SELECT pg_catalog.count(*) FROM pg_catalog.pg_proc p
      WHERE p.proname IN ('dlock_acquire', 'dlock_renew', 'dlock_release', 'dlock_break', 'dlock_fence', 'dlock_purge',
                          'dlock_check', 'dlock_purge_marks', 'dlock_acquire_all', 'dlock_acquire_any',
                          'dlock_renew_each', 'dlock_release_each', 'dlock_waiters_read', 'dlock_stats_read',
                          'dlock_stats_reset', 'dlock_notifier_read')),
    16::bigint,
    'no schema of the database holds another overload of dlock_acquire, dlock_renew, dlock_release, dlock_break, dlock_fence, dlock_purge, dlock_check, dlock_purge_marks, dlock_acquire_all, dlock_acquire_any, dlock_renew_each, dlock_release_each, dlock_waiters_read, dlock_stats_read, dlock_stats_reset or dlock_notifier_read (an overload of dlock_renew or dlock_release would make calls with untyped arguments ambiguous)'
);

-- The views.
SELECT has_view(:'dlock_schema', 'dlock_leases', 'view dlock_leases exists in the extension''s schema');
SELECT results_eq(
    $$SELECT a.attname::text COLLATE "default", pg_catalog.format_type(a.atttypid, a.atttypmod)
        FROM pg_catalog.pg_attribute a
       WHERE a.attrelid = 'dlock_leases'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY a.attnum$$,
    $$VALUES ('lock_name', 'text'), ('token', 'bigint'), ('owner', 'text'), ('holder_role', 'name'),
             ('acquired_at', 'timestamp with time zone'), ('renewed_at', 'timestamp with time zone'),
             ('expires_at', 'timestamp with time zone'), ('released', 'boolean'), ('live', 'boolean')$$,
    'dlock_leases has exactly the columns lock_name text, token bigint, owner text, holder_role name, acquired_at/renewed_at/expires_at timestamptz, released boolean, live boolean, in that order'
);
SELECT has_view(:'dlock_schema', 'dlock_waiters', 'view dlock_waiters exists in the extension''s schema');
SELECT results_eq(
    $$SELECT a.attname::text COLLATE "default", pg_catalog.format_type(a.atttypid, a.atttypmod)
        FROM pg_catalog.pg_attribute a
       WHERE a.attrelid = 'dlock_waiters'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY a.attnum$$,
    $$VALUES ('pid', 'integer'), ('database', 'name'), ('role', 'name'), ('lock_name', 'text'), ('kind', 'text'),
             ('names', 'integer'), ('waiting_since', 'timestamp with time zone'),
             ('wait_until', 'timestamp with time zone'), ('position', 'integer'), ('attempts', 'bigint')$$,
    'dlock_waiters has exactly the columns pid integer, database name, role name, lock_name text, kind text, names integer, waiting_since/wait_until timestamptz, position integer, attempts bigint, in that order'
);
SELECT has_view(:'dlock_schema', 'dlock_stats', 'view dlock_stats exists in the extension''s schema');
SELECT results_eq(
    $$SELECT a.attname::text COLLATE "default", pg_catalog.format_type(a.atttypid, a.atttypmod)
        FROM pg_catalog.pg_attribute a
       WHERE a.attrelid = 'dlock_stats'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY a.attnum$$,
    $$VALUES ('datid', 'oid'), ('datname', 'name'),
             ('grants_new', 'bigint'), ('grants_after_release', 'bigint'), ('takeovers', 'bigint'),
             ('refusals', 'bigint'), ('waits', 'bigint'), ('wait_timeouts', 'bigint'),
             ('renewals', 'bigint'), ('renewals_failed', 'bigint'), ('releases', 'bigint'),
             ('releases_failed', 'bigint'), ('breaks', 'bigint'), ('purged', 'bigint'),
             ('fence_latest_accepted', 'bigint'), ('fence_latest_rejected', 'bigint'),
             ('fence_live_accepted', 'bigint'), ('fence_live_rejected', 'bigint'),
             ('fence_seen_accepted', 'bigint'), ('fence_seen_rejected', 'bigint'),
             ('token_jumps', 'bigint'), ('stats_reset', 'timestamp with time zone')$$,
    'dlock_stats has exactly the columns datid oid, datname name, the nineteen bigint counters, stats_reset timestamptz, in that order'
);
SELECT has_view(:'dlock_schema', 'dlock_notifier', 'view dlock_notifier exists in the extension''s schema');
SELECT results_eq(
    $$SELECT a.attname::text COLLATE "default", pg_catalog.format_type(a.atttypid, a.atttypmod)
        FROM pg_catalog.pg_attribute a
       WHERE a.attrelid = 'dlock_notifier'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY a.attnum$$,
    $$VALUES ('datid', 'oid'), ('datname', 'name'), ('pid', 'integer'),
             ('started_at', 'timestamp with time zone'), ('events_sent', 'bigint'),
             ('events_dropped', 'bigint'), ('events_queued', 'bigint')$$,
    'dlock_notifier has exactly the columns datid oid, datname name, pid integer, started_at timestamptz, events_sent, events_dropped and events_queued bigint, in that order'
);

-- The table.
SELECT has_table(:'dlock_schema', 'dlock_lease', 'table dlock_lease exists in the extension''s schema');
SELECT results_eq(
    $$SELECT a.attname::text COLLATE "default", pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull
        FROM pg_catalog.pg_attribute a
       WHERE a.attrelid = 'dlock_lease'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY a.attnum$$,
    $$VALUES ('lock_name', 'text', true), ('token', 'bigint', true), ('owner', 'text', true),
             ('holder_role', 'regrole', true), ('acquired_at', 'timestamp with time zone', true),
             ('renewed_at', 'timestamp with time zone', true), ('expires_at', 'timestamp with time zone', true),
             ('released', 'boolean', true)$$,
    'dlock_lease has the columns of a lease, all NOT NULL'
);
SELECT col_is_pk(:'dlock_schema', 'dlock_lease', ARRAY['lock_name'], 'lock_name is the primary key of dlock_lease');
SELECT is(
    (SELECT c.collname::text COLLATE "default" FROM pg_catalog.pg_attribute a
       JOIN pg_catalog.pg_collation c ON c.oid = a.attcollation
      WHERE a.attrelid = 'dlock_lease'::regclass AND a.attname = 'lock_name'),
    'C',
    'dlock_lease.lock_name uses the "C" collation (names compare bytewise, whatever the database locale)'
);

-- The marks of fencing mode 'seen'.
SELECT has_table(:'dlock_schema', 'dlock_fence_mark', 'table dlock_fence_mark exists in the extension''s schema');
SELECT results_eq(
    $$SELECT a.attname::text COLLATE "default", pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull
        FROM pg_catalog.pg_attribute a
       WHERE a.attrelid = 'dlock_fence_mark'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       ORDER BY a.attnum$$,
    $$VALUES ('table_owner', 'regrole', true), ('lock_name', 'text', true), ('token', 'bigint', true),
             ('raised_at', 'timestamp with time zone', true)$$,
    'dlock_fence_mark has the columns table_owner regrole, lock_name text, token bigint, raised_at timestamptz, all NOT NULL'
);
SELECT col_is_pk(:'dlock_schema', 'dlock_fence_mark', ARRAY['table_owner', 'lock_name'],
    '(table_owner, lock_name) is the primary key of dlock_fence_mark: marks are kept per owner of the fenced tables');

-- The sequence.
SELECT has_sequence(:'dlock_schema', 'dlock_token_seq', 'sequence dlock_token_seq exists in the extension''s schema');
SELECT results_eq(
    $$SELECT s.seqtypid::regtype::text COLLATE "default", s.seqmin, s.seqincrement, s.seqcycle
        FROM pg_catalog.pg_sequence s WHERE s.seqrelid = 'dlock_token_seq'::regclass$$,
    $$VALUES ('bigint', 1::bigint, 1::bigint, false)$$,
    'dlock_token_seq is a bigint sequence from 1, counting up by 1, that never cycles (tokens never repeat)'
);
SELECT has_sequence(:'dlock_schema', 'dlock_token_origin', 'sequence dlock_token_origin (the token origin register) exists in the extension''s schema');
SELECT results_eq(
    $$SELECT s.seqtypid::regtype::text COLLATE "default", s.seqmin, s.seqmax, s.seqcycle
        FROM pg_catalog.pg_sequence s WHERE s.seqrelid = 'dlock_token_origin'::regclass$$,
    $$VALUES ('bigint', 0::bigint, 9223372036854775807::bigint, false)$$,
    'dlock_token_origin is a bigint register from 0 to the largest bigint (it holds a 63-bit hash), never cycling'
);
SELECT results_eq(
    $$SELECT c.relname::text COLLATE "default", c.relpersistence::text FROM pg_catalog.pg_class c
       WHERE c.oid IN ('dlock_lease'::regclass, 'dlock_token_seq'::regclass, 'dlock_token_origin'::regclass,
                       'dlock_fence_mark'::regclass) ORDER BY c.relname$$,
    $$VALUES ('dlock_fence_mark', 'p'), ('dlock_lease', 'p'), ('dlock_token_origin', 'p'), ('dlock_token_seq', 'p')$$,
    'dlock_lease, dlock_token_seq, dlock_token_origin and dlock_fence_mark are permanent (logged) relations, so they survive a crash and reach standbys'
);

-- Membership.  Every object the script creates is a member of the
-- extension (pg_depend deptype 'e') and lives in its schema, and nothing
-- else is a member.  (The row types of the table and the view, and their
-- array types, are members too from PostgreSQL 17 on; they come and go
-- with their relations and are left out.)
SELECT set_eq(
    $$SELECT i.schema = pg_catalog.quote_ident(current_schema()), pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid)
        FROM pg_catalog.pg_depend d
        CROSS JOIN LATERAL pg_catalog.pg_identify_object(d.classid, d.objid, d.objsubid) i
       WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass
         AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'dlock')
         AND d.deptype = 'e'
         AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_type t
                           LEFT JOIN pg_catalog.pg_type e ON e.oid OPERATOR(pg_catalog.=) t.typelem
                          WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::regclass
                            AND t.oid OPERATOR(pg_catalog.=) d.objid
                            AND (t.typrelid OPERATOR(pg_catalog.<>) 0 OR e.typrelid OPERATOR(pg_catalog.<>) 0))$$,
    $$VALUES (true, 'table dlock_lease'), (true, 'sequence dlock_token_seq'),
             (true, 'sequence dlock_token_origin'), (true, 'view dlock_leases'),
             (true, 'function dlock_acquire(text,interval,interval,text)'),
             (true, 'function dlock_renew(text,bigint,interval)'),
             (true, 'function dlock_release(text,bigint)'),
             (true, 'function dlock_break(text)'),
             (true, 'function dlock_fence()'),
             (true, 'function dlock_purge(interval)'),
             (true, 'table dlock_fence_mark'),
             (true, 'function dlock_check(text,bigint,text)'),
             (true, 'function dlock_purge_marks(interval)'),
             (true, 'function dlock_acquire_all(text[],interval,interval,text)'),
             (true, 'function dlock_acquire_any(text[],interval,interval,text)'),
             (true, 'function dlock_renew_each(text[],bigint[],interval)'),
             (true, 'function dlock_release_each(text[],bigint[])'),
             (true, 'function dlock_waiters_read()'),
             (true, 'view dlock_waiters'),
             (true, 'function dlock_stats_read()'),
             (true, 'view dlock_stats'),
             (true, 'function dlock_stats_reset()'),
             (true, 'function dlock_notifier_read()'),
             (true, 'view dlock_notifier')$$,
    'the members of extension dlock are exactly its two tables, two sequences, four views and sixteen functions, all in the extension''s schema'
);
-- Objects that are not members themselves (the primary key index, the row
-- types) must still belong to a member, so DROP EXTENSION removes them: no
-- dlock_* relation, function or type in the schema may be outside the
-- closure of the members under internal and auto dependencies.
SELECT is_empty(
    $$WITH RECURSIVE owned(classid, objid) AS (
          SELECT d.classid, d.objid FROM pg_catalog.pg_depend d
           WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass
             AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'dlock')
             AND d.deptype = 'e'
          UNION
          SELECT d.classid, d.objid FROM pg_catalog.pg_depend d
            JOIN owned o ON d.refclassid = o.classid AND d.refobjid = o.objid
           WHERE d.deptype IN ('a', 'i')
      ), in_schema(classid, objid, descr) AS (
          SELECT 'pg_catalog.pg_class'::regclass, c.oid, pg_catalog.pg_describe_object('pg_catalog.pg_class'::regclass, c.oid, 0)
            FROM pg_catalog.pg_class c
           WHERE c.relnamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident(current_schema())) AND c.relname LIKE 'dlock%'
          UNION ALL
          SELECT 'pg_catalog.pg_proc'::regclass, p.oid, pg_catalog.pg_describe_object('pg_catalog.pg_proc'::regclass, p.oid, 0)
            FROM pg_catalog.pg_proc p
           WHERE p.pronamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident(current_schema())) AND p.proname LIKE 'dlock%'
          UNION ALL
          SELECT 'pg_catalog.pg_type'::regclass, t.oid, pg_catalog.pg_describe_object('pg_catalog.pg_type'::regclass, t.oid, 0)
            FROM pg_catalog.pg_type t
           WHERE t.typnamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident(current_schema())) AND t.typname LIKE '%dlock%'
      )
      SELECT s.descr FROM in_schema s
       WHERE NOT EXISTS (SELECT FROM owned o WHERE o.classid = s.classid AND o.objid = s.objid)$$,
    'every dlock relation, function and type in the schema is a member of the extension or belongs to one'
);

-- Installation properties.
SELECT has_extension(:'dlock_schema', 'dlock', 'extension dlock is installed in its schema');
SELECT is(
    (SELECT e.extrelocatable FROM pg_catalog.pg_extension e WHERE e.extname = 'dlock'),
    false,
    'extension dlock is not relocatable'
);
SELECT set_eq(
    $$SELECT c.relname::text COLLATE "default", c.relnamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident(current_schema())), u.cond COLLATE "default"
        FROM pg_catalog.pg_extension e
        CROSS JOIN LATERAL ROWS FROM (pg_catalog.unnest(e.extconfig), pg_catalog.unnest(e.extcondition)) u(reloid, cond)
        JOIN pg_catalog.pg_class c ON c.oid = u.reloid
       WHERE e.extname = 'dlock'$$,
    $$VALUES ('dlock_lease', true, ''), ('dlock_token_seq', true, ''), ('dlock_token_origin', true, ''),
             ('dlock_fence_mark', true, '')$$,
    'dlock_lease, dlock_token_seq, dlock_token_origin and dlock_fence_mark, and nothing else, are registered with pg_extension_config_dump, with no filter (pg_dump carries every lease, the token state and the marks)'
);
SELECT is(
    (SELECT e.extversion FROM pg_catalog.pg_extension e WHERE e.extname = 'dlock'),
    '1.2',
    'the installed version is 1.2 (this file describes 1.2)'
);

-- The settings of 1.2's monitoring.  They exist once the library is
-- loaded (LOAD runs _PG_init, which defines them; no dlock function is
-- called): their types, defaults and values (all at their defaults here),
-- the allowed values of the enum, and that only superusers may set them.
LOAD 'dlock';
SELECT results_eq(
    $$SELECT s.name COLLATE "default", s.vartype COLLATE "default", s.boot_val COLLATE "default",
             s.setting COLLATE "default", s.context COLLATE "default", s.enumvals::text COLLATE "default"
        FROM pg_catalog.pg_settings s
       WHERE s.name IN ('dlock.notify', 'dlock.log_lease_changes', 'dlock.track_stats')
       ORDER BY s.name$$,
    $$VALUES ('dlock.log_lease_changes', 'enum', 'off', 'off', 'superuser', '{off,takeovers,all}'),
             ('dlock.notify', 'bool', 'off', 'off', 'superuser', NULL),
             ('dlock.track_stats', 'bool', 'on', 'on', 'superuser', NULL)$$,
    'dlock.notify (bool, off), dlock.log_lease_changes (enum off | takeovers | all, off) and dlock.track_stats (bool, on) exist, at their defaults, settable by superusers only'
);

SELECT * FROM finish();
ROLLBACK;
