--
-- sql/acquire_set.sql: many names at once - dlock_acquire_all,
-- dlock_acquire_any, dlock_renew_each and dlock_release_each.  Every bad
-- input with its SQLSTATE (shown after each error) and no write by it;
-- results and their order; tokens drawn in the byte order of the names;
-- all or nothing (a refused set keeps nothing, also after a partial
-- attempt); the limit of 10000 names; the first free name of
-- dlock_acquire_any; element-by-element renew and release; the holder-role
-- rule; the single calls still resolving with untyped arguments; savepoints.
-- Waits are '0', or short and certain to time out.
--
CREATE EXTENSION dlock;
\set SHOW_CONTEXT never
\set ON_ERROR_STOP 0

-- a live lease held by this session: a name held counts as held for
-- everyone, this session included
SELECT dlock_acquire('err:held', '1 hour') AS held_token \gset
SELECT last_value AS tokens_before FROM dlock_token_seq \gset

--
-- Input errors of dlock_acquire_all
--

-- NULL array or element: 22004, the element's index in the detail
SELECT dlock_acquire_all(NULL, '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_all(ARRAY['err:a', NULL, 'err:c'], '1 min');
\echo :LAST_ERROR_SQLSTATE
-- more than one dimension: 22023
SELECT dlock_acquire_all(ARRAY[['err:a', 'err:b'], ['err:c', 'err:d']], '1 min');
\echo :LAST_ERROR_SQLSTATE
-- no name: 22023
SELECT dlock_acquire_all('{}', '1 min');
\echo :LAST_ERROR_SQLSTATE
-- a name twice: 22023, naming both elements
SELECT dlock_acquire_all(ARRAY['err:x', 'err:y', 'err:x'], '1 min');
\echo :LAST_ERROR_SQLSTATE
-- an empty or over-long element (513 bytes): 22023, naming the element
SELECT dlock_acquire_all(ARRAY['err:a', ''], '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_all(ARRAY['err:a', 'err:b', repeat('n', 513)], '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_all(ARRAY['err:a', repeat('é', 257)], '1 min');
\echo :LAST_ERROR_SQLSTATE
-- the index is the element's position counted from 1, whatever the
-- array's lower bound (here the empty element's subscript is 2)
SELECT dlock_acquire_all('[0:2]={err:a,err:b,""}'::text[], '1 min');
\echo :LAST_ERROR_SQLSTATE
-- ttl, wait and owner as for dlock_acquire: 22004 for NULL ttl or wait,
-- 22023 for a ttl not positive or over dlock.max_ttl, a negative wait, an
-- owner over 1024 bytes
SELECT dlock_acquire_all(ARRAY['err:a'], NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_all(ARRAY['err:a'], '0');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_all(ARRAY['err:a'], '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_all(ARRAY['err:a'], '1 day 1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_all(ARRAY['err:a'], '1 min', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_all(ARRAY['err:a'], '1 min', '-1 ms');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire_all(ARRAY['err:a'], '1 min', '0', repeat('o', 1025));
\echo :LAST_ERROR_SQLSTATE
-- the names are checked before the other arguments, and all of them before
-- anything is taken: a held name does not hide a bad one
SELECT dlock_acquire_all(ARRAY['err:held', ''], NULL);
\echo :LAST_ERROR_SQLSTATE

--
-- Input errors of dlock_acquire_any: the same rules
--
SELECT * FROM dlock_acquire_any(NULL, '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dlock_acquire_any(ARRAY[NULL, 'err:b'], '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dlock_acquire_any(ARRAY[['err:a'], ['err:b']], '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dlock_acquire_any('{}', '1 min');
\echo :LAST_ERROR_SQLSTATE
-- a duplicate is refused even though the first free name comes before it
SELECT * FROM dlock_acquire_any(ARRAY['err:free', 'err:held', 'err:held'], '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dlock_acquire_any(ARRAY['err:a', ''], '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dlock_acquire_any(ARRAY['err:a', 'err:b', repeat('n', 513)], '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dlock_acquire_any(ARRAY['err:a'], NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dlock_acquire_any(ARRAY['err:a'], '0');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dlock_acquire_any(ARRAY['err:a'], '2 days');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dlock_acquire_any(ARRAY['err:a'], '1 min', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dlock_acquire_any(ARRAY['err:a'], '1 min', '-1 ms');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dlock_acquire_any(ARRAY['err:a'], '1 min', '0', repeat('o', 1025));
\echo :LAST_ERROR_SQLSTATE

--
-- Input errors of dlock_renew_each and dlock_release_each
--
SELECT dlock_renew_each(NULL, ARRAY[1], '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew_each(ARRAY['err:held'], NULL, '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew_each(ARRAY['err:held', NULL], ARRAY[1, 2], '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew_each(ARRAY['err:held', 'err:b'], ARRAY[1, NULL], '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew_each(ARRAY[['err:held'], ['err:b']], ARRAY[1, 2], '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew_each(ARRAY['err:held', 'err:b'], ARRAY[[1], [2]], '1 min');
\echo :LAST_ERROR_SQLSTATE
-- arrays of different lengths: 22023
SELECT dlock_renew_each(ARRAY['err:held', 'err:b'], ARRAY[1], '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew_each('{}', ARRAY[1], '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew_each(ARRAY['err:held', ''], ARRAY[1, 2], '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew_each(ARRAY['err:held', 'err:b', repeat('n', 513)], ARRAY[1, 2, 3], '1 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew_each(ARRAY['err:held'], ARRAY[1], NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew_each(ARRAY['err:held'], ARRAY[1], '-5 min');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_renew_each(ARRAY['err:held'], ARRAY[1], '2 days');
\echo :LAST_ERROR_SQLSTATE
-- the ttl is checked even when there is nothing to renew
SELECT dlock_renew_each('{}', '{}', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release_each(NULL, ARRAY[1]);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release_each(ARRAY['err:held'], NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release_each(ARRAY[NULL, 'err:held'], ARRAY[1, 2]);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release_each(ARRAY['err:held', 'err:b'], ARRAY[NULL, 2]);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release_each(ARRAY[['err:held', 'err:b']], ARRAY[1, 2]);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release_each(ARRAY['err:held'], ARRAY[1, 2]);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release_each(ARRAY['err:held', repeat('n', 513)], ARRAY[1, 2]);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release_each(ARRAY['', 'err:held'], ARRAY[1, 2]);
\echo :LAST_ERROR_SQLSTATE

-- read-only transaction: 25006, for each of the four
BEGIN READ ONLY;
SELECT dlock_acquire_all(ARRAY['err:a'], '1 min');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT * FROM dlock_acquire_any(ARRAY['err:a'], '1 min');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT dlock_renew_each(ARRAY['err:held'], ARRAY[:held_token], '1 min');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT dlock_release_each(ARRAY['err:held'], ARRAY[:held_token]);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

-- nothing was written by any failed call, and no token was drawn
SELECT lock_name, token, live FROM dlock_leases ORDER BY lock_name;
SELECT last_value - :tokens_before AS tokens_consumed FROM dlock_token_seq;

--
-- dlock_acquire_all: results and their order
--

-- one token per name, in the order given; the tokens are drawn in the
-- byte order of the names (set:a, set:b, set:c), so they increase along it
SELECT dlock_acquire_all(ARRAY['set:c', 'set:a', 'set:b'], '1 hour', owner => 'set owner') AS tokens;
SELECT lock_name, token, owner, holder_role = current_user AS mine, live,
       expires_at - acquired_at AS ttl
  FROM dlock_leases WHERE lock_name LIKE 'set:%' ORDER BY token;

-- byte order, not the database's collation: upper case before lower case,
-- a prefix before its extensions, multibyte characters last
SELECT dlock_acquire_all(ARRAY['ord:é', 'ord:b', 'ord:ab', 'ord:a', 'ord:B', 'ord:a b'], '1 hour') AS tokens \gset
SELECT u.name, u.token - min(u.token) OVER () + 1 AS drawn
  FROM unnest(ARRAY['ord:é', 'ord:b', 'ord:ab', 'ord:a', 'ord:B', 'ord:a b'], :'tokens'::bigint[]) u(name, token)
 ORDER BY u.token;

-- the owner label defaults as dlock_acquire's does (one label for all)
SELECT dlock_acquire_all(ARRAY['own:b', 'own:a'], '1 hour') IS NOT NULL AS granted;
SELECT dlock_acquire('own:single', '1 hour') IS NOT NULL AS granted;
SELECT count(DISTINCT owner) AS labels, count(*) AS leases
  FROM dlock_leases WHERE lock_name LIKE 'own:%';

-- a wait on free names returns at once with the tokens; named arguments
SELECT cardinality(dlock_acquire_all(lock_names => ARRAY['set:w1', 'set:w2'], ttl => '1 hour',
                                     wait => '1 min', owner => 'waiter')) AS granted;

-- one name: as dlock_acquire
SELECT dlock_acquire_all(ARRAY['set:one'], '1 hour') IS NOT NULL AS granted;
SELECT dlock_acquire_all(ARRAY['set:one'], '1 hour') IS NULL AS refused;

--
-- dlock_acquire_all: all or nothing
--

-- the names of one set: one released, one expired, one never acquired, and
-- one held by a live lease (this session's own, which counts as held).
-- The held one comes last in byte order, so the refused attempt first took
-- the other three.
SELECT dlock_acquire('all:released', '1 hour') AS released_token \gset
SELECT dlock_release('all:released', :released_token) AS released;
SELECT dlock_acquire('all:expired', '10 ms') IS NOT NULL AS granted;
SELECT pg_sleep(0.05);
SELECT dlock_acquire('all:zheld', '1 hour') AS zheld_token \gset
CREATE TEMP TABLE leases_before AS SELECT * FROM dlock_leases;
SELECT last_value AS tokens_before FROM dlock_token_seq \gset

SELECT dlock_acquire_all(ARRAY['all:new', 'all:zheld', 'all:released', 'all:expired'], '1 hour') IS NULL AS refused;
-- afterwards it holds none of them: no row was created or changed
SELECT 'changed or added' AS side, * FROM (TABLE dlock_leases EXCEPT TABLE leases_before) x
UNION ALL
SELECT 'changed or removed', * FROM (TABLE leases_before EXCEPT TABLE dlock_leases) y;
SELECT count(*) AS new_rows FROM dlock_leases WHERE lock_name = 'all:new';
-- and drew no token: a live lease among the names refuses the set before
-- anything is written (an attempt refused by a row another transaction
-- holds is undone instead: specs/race-acquire-all.spec)
SELECT last_value - :tokens_before AS tokens_drawn FROM dlock_token_seq;

-- a wait that cannot succeed returns NULL at its end
SELECT dlock_acquire_all(ARRAY['all:new', 'all:zheld'], '1 hour', '10 ms') IS NULL AS refused_after_wait;
SELECT count(*) AS new_rows FROM dlock_leases WHERE lock_name = 'all:new';

-- in a transaction block the refused attempt keeps no name lock either,
-- and the transaction carries on
BEGIN;
SELECT dlock_acquire_all(ARRAY['all:new', 'all:new2', 'all:zheld'], '1 hour') IS NULL AS refused;
SELECT count(*) AS advisory_locks FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype = 'advisory';
SELECT count(*) AS new_rows FROM dlock_leases WHERE lock_name IN ('all:new', 'all:new2');
COMMIT;

-- cancelled while waiting (statement_timeout): 57014, and nothing held
SET statement_timeout = '50ms';
SELECT dlock_acquire_all(ARRAY['all:new', 'all:zheld'], '1 hour', '1 min');
\echo :LAST_ERROR_SQLSTATE
RESET statement_timeout;
SELECT count(*) AS new_rows FROM dlock_leases WHERE lock_name = 'all:new';

-- once the held name is free, one call takes over the released and the
-- expired lease and creates the first row of the new name, with greater
-- tokens than any before
SELECT dlock_release('all:zheld', :zheld_token) AS released;
SELECT dlock_acquire_all(ARRAY['all:new', 'all:zheld', 'all:released', 'all:expired'], '1 hour') AS tokens \gset
SELECT l.lock_name, l.token = u.token AS token_returned, l.token > :tokens_before AS greater,
       l.live, l.released
  FROM unnest(ARRAY['all:new', 'all:zheld', 'all:released', 'all:expired'], :'tokens'::bigint[]) u(name, token)
  JOIN dlock_leases l ON l.lock_name = u.name
 ORDER BY l.token;

--
-- The limit: 10000 names
--
CREATE TEMP TABLE many AS
SELECT array_agg(format('many:%s', i) ORDER BY i) AS names FROM generate_series(1, 10000) i;
CREATE TEMP TABLE many_tokens AS SELECT names, dlock_acquire_all(names, '1 hour') AS tokens FROM many;
-- 10000 leases, their tokens as returned, increasing in byte order (many:10
-- before many:2), so not in array order
SELECT count(*) AS tokens, count(l.lock_name) AS live_leases,
       bool_and(l.token = u.token) AS tokens_returned
  FROM many_tokens m CROSS JOIN unnest(m.names, m.tokens) u(name, token)
  LEFT JOIN dlock_leases l ON l.lock_name = u.name AND l.live;
SELECT bool_and(token > prev) FILTER (WHERE by_name) AS increasing_in_byte_order,
       bool_and(token > prev) FILTER (WHERE NOT by_name) AS increasing_in_array_order
  FROM (SELECT true AS by_name, u.token, lag(u.token) OVER (ORDER BY u.name COLLATE "C") AS prev
          FROM many_tokens m, unnest(m.names, m.tokens) u(name, token)
        UNION ALL
        SELECT false, u.token, lag(u.token) OVER (ORDER BY u.i)
          FROM many_tokens m, unnest(m.names, m.tokens) WITH ORDINALITY u(name, token, i)) s
 WHERE prev IS NOT NULL;
-- 10001 names: 22023, for both acquire functions
SELECT dlock_acquire_all(names || 'many:10001'::text, '1 hour') FROM many;
\echo :LAST_ERROR_SQLSTATE
SELECT a.* FROM many, dlock_acquire_any(names || 'many:10001'::text, '1 hour') a;
\echo :LAST_ERROR_SQLSTATE
-- renew and release have no such limit
SELECT cardinality(array_positions(dlock_renew_each(names || 'many:none'::text, tokens || 1::bigint, '2 hours'), true)) AS renewed
  FROM many_tokens;
SELECT cardinality(array_positions(dlock_release_each(names || 'many:none'::text, tokens || 1::bigint), true)) AS released
  FROM many_tokens;
SELECT count(*) FILTER (WHERE live) AS live, count(*) AS rows FROM dlock_leases WHERE lock_name LIKE 'many:%';
-- 10000 names for dlock_acquire_any: the first free one in array order
SELECT a.lock_name, a.token > 0 AS has_token FROM many, dlock_acquire_any(names, '1 hour') a;

--
-- dlock_acquire_any
--
SELECT dlock_acquire('any:a', '1 hour') AS any_a \gset
-- the first free name in array order (any:a is held, by this session too)
SELECT lock_name, token AS any_b FROM dlock_acquire_any(ARRAY['any:a', 'any:b', 'any:c'], '1 hour') \gset
SELECT :'lock_name' AS lock_name;
SELECT token = :any_b AS token_returned, live FROM dlock_leases WHERE lock_name = 'any:b';
-- array order, not byte order
SELECT lock_name FROM dlock_acquire_any(ARRAY['any:e', 'any:d'], '1 hour');
-- then the next free one; no row when all are held, after a wait too
SELECT lock_name FROM dlock_acquire_any(ARRAY['any:a', 'any:b', 'any:c'], '1 hour', owner => 'any owner');
SELECT owner FROM dlock_leases WHERE lock_name = 'any:c';
SELECT count(*) AS rows FROM dlock_acquire_any(ARRAY['any:a', 'any:b', 'any:c'], '1 hour');
SELECT count(*) AS rows FROM dlock_acquire_any(ARRAY['any:a', 'any:b', 'any:c'], '1 hour', '10 ms');
-- cancelled while waiting: 57014
SET statement_timeout = '50ms';
SELECT * FROM dlock_acquire_any(ARRAY['any:a', 'any:b'], '1 hour', '1 min');
\echo :LAST_ERROR_SQLSTATE
RESET statement_timeout;
-- a released or expired lease is free
SELECT dlock_release('any:b', :any_b) AS released;
SELECT dlock_acquire('any:expired', '10 ms') IS NOT NULL AS granted;
SELECT pg_sleep(0.05);
SELECT lock_name, token > :any_b AS greater FROM dlock_acquire_any(ARRAY['any:a', 'any:expired', 'any:b'], '1 hour');
SELECT lock_name, token > :any_b AS greater FROM dlock_acquire_any(ARRAY['any:a', 'any:expired', 'any:b'], '1 hour');
-- in the select list: one row of type record, or none
SELECT dlock_acquire_any(ARRAY['any:a', 'any:f'], '1 hour') IS NOT NULL AS one_row;
SELECT count(*) AS rows FROM (SELECT dlock_acquire_any(ARRAY['any:a', 'any:f'], '1 hour')) s;

--
-- dlock_renew_each and dlock_release_each
--
SELECT dlock_acquire_all(ARRAY['each:a', 'each:b', 'each:c'], '1 hour') AS t \gset
SELECT :'t'::bigint[] AS tokens, (:'t'::bigint[])[1] AS ta, (:'t'::bigint[])[2] AS tb, (:'t'::bigint[])[3] AS tc \gset
SELECT dlock_acquire('each:expired', '10 ms') AS texp \gset
SELECT pg_sleep(0.05);

-- results in array order: right tokens true; a wrong token, a name
-- without a row and an expired lease false
SELECT dlock_renew_each(ARRAY['each:c', 'each:a', 'each:none', 'each:b', 'each:expired'],
                        ARRAY[:tc, :ta + 100, 1, :tb, :texp], '2 hours') AS renewed;
SELECT lock_name, round(extract(epoch FROM expires_at - renewed_at) / 3600) AS ttl_hours,
       renewed_at > acquired_at AS renewed, live
  FROM dlock_leases WHERE lock_name LIKE 'each:%' ORDER BY lock_name;
-- empty arrays: an empty result, nothing done
SELECT dlock_renew_each('{}', '{}', '1 hour') AS renewed, dlock_release_each('{}', '{}') AS released;
-- a name twice: each pair on its own (renewing twice succeeds twice; with
-- a wrong token, that pair alone is false)
SELECT dlock_renew_each(ARRAY['each:a', 'each:a'], ARRAY[:ta, :ta], '3 hours') AS renewed;
SELECT dlock_renew_each(ARRAY['each:a', 'each:a'], ARRAY[:ta + 1, :ta], '3 hours') AS renewed;
-- releasing: mixed results; a name twice is released by the first pair
-- in array order, the second finds it ended
SELECT dlock_release_each(ARRAY['each:b', 'each:a', 'each:c', 'each:none', 'each:a'],
                          ARRAY[:tb, :ta, :tc + 1, 1, :ta]) AS released;
SELECT lock_name, released, live FROM dlock_leases WHERE lock_name LIKE 'each:%' ORDER BY lock_name;
-- after the release: false, for renew and release alike
SELECT dlock_renew_each(ARRAY['each:a', 'each:b'], ARRAY[:ta, :tb], '1 hour') AS renewed;
SELECT dlock_release_each(ARRAY['each:a', 'each:b'], ARRAY[:ta, :tb]) AS released;
SELECT lock_name FROM dlock_leases WHERE lock_name LIKE 'each:%' AND live;
-- each pair answers as dlock_renew and dlock_release do for it (each:a
-- with its old token, each:b with its new one, each:c still live)
SELECT dlock_acquire_all(ARRAY['each:a', 'each:b'], '1 hour') AS t2 \gset
SELECT (:'t2'::bigint[])[1] AS ta2, (:'t2'::bigint[])[2] AS tb2 \gset
SELECT dlock_renew_each(ARRAY['each:a', 'each:b', 'each:c'], ARRAY[:ta, :tb2, :tc], '1 hour') AS each_call,
       ARRAY[dlock_renew('each:a', :ta, '1 hour'), dlock_renew('each:b', :tb2, '1 hour'),
             dlock_renew('each:c', :tc, '1 hour')] AS single_calls;
SELECT dlock_release_each(ARRAY['each:a', 'each:b', 'each:c'], ARRAY[:ta2, :tb2, :tc]) AS released;

--
-- The holder-role rule (42501): renew and release of the current token of
-- a lease acquired by another role raise and undo the whole call; a token
-- that is not current is false, whoever holds the lease
--
CREATE ROLE dlock_set_alice;
CREATE ROLE dlock_set_bob;
SET ROLE dlock_set_alice;
SELECT (dlock_acquire_all(ARRAY['role:b-alice'], '1 hour'))[1] AS alice_token \gset
SET ROLE dlock_set_bob;
SELECT (dlock_acquire_all(ARRAY['role:a-bob'], '1 hour'))[1] AS bob_token \gset
SELECT expires_at AS bob_expiry FROM dlock_leases WHERE lock_name = 'role:a-bob' \gset
SELECT expires_at AS alice_expiry FROM dlock_leases WHERE lock_name = 'role:b-alice' \gset
-- bob's own lease comes first in byte order, so it was renewed (or
-- released) before alice's raised: the error undoes it
SELECT dlock_renew_each(ARRAY['role:b-alice', 'role:a-bob'], ARRAY[:alice_token, :bob_token], '2 hours');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release_each(ARRAY['role:a-bob', 'role:b-alice'], ARRAY[:bob_token, :alice_token]);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_release_each(ARRAY['role:b-alice'], ARRAY[0]) AS stale_release;
SELECT lock_name, holder_role,
       expires_at = CASE lock_name WHEN 'role:a-bob' THEN :'bob_expiry'::timestamptz
                                   ELSE :'alice_expiry'::timestamptz END AS expiry_unchanged, live
  FROM dlock_leases WHERE lock_name LIKE 'role:%' ORDER BY lock_name;
-- bob's own lease and a token of alice's lease that is not current: bob's
-- is renewed, alice's is not held by that token
SELECT dlock_renew_each(ARRAY['role:a-bob', 'role:b-alice'], ARRAY[:bob_token, :alice_token + 100], '2 hours');
-- a name without a row is simply not held: false, no error
SELECT dlock_release_each(ARRAY['role:a-bob', 'role:none'], ARRAY[:bob_token, 1]) AS released;
-- dlock_acquire_all and dlock_acquire_any refuse alice's live lease like any held one
SELECT dlock_acquire_all(ARRAY['role:b-alice', 'role:c'], '1 hour') IS NULL AS refused;
SELECT count(*) AS rows FROM dlock_acquire_any(ARRAY['role:b-alice'], '1 hour');
RESET ROLE;
-- a superuser may renew and release any lease
SELECT dlock_release_each(ARRAY['role:b-alice'], ARRAY[:alice_token]) AS released;
DROP ROLE dlock_set_alice;
DROP ROLE dlock_set_bob;

--
-- The single calls are not overloaded by the array forms: they still
-- resolve with untyped literals and with untyped parameters
--
SELECT dlock_acquire('untyped:a', '1 hour') AS ua \gset
SELECT dlock_renew('untyped:a', :'ua', '1 hour') AS renewed;
SELECT dlock_release('untyped:a', :'ua') AS released;
SELECT dlock_acquire('untyped:a', '1 hour', '0', 'someone') IS NOT NULL AS granted;
SELECT dlock_break('untyped:a') AS broken;
-- PREPARE without parameter types, and with parameters of type unknown (as
-- drivers send them): each resolves to the single call
PREPARE acq AS SELECT dlock_acquire($1, $2) IS NOT NULL AS granted;
PREPARE acq4(unknown, unknown, unknown, unknown) AS SELECT dlock_acquire($1, $2, $3, $4) IS NOT NULL AS granted;
PREPARE ren AS SELECT dlock_renew($1, $2, $3);
PREPARE ren_u(unknown, unknown, unknown) AS SELECT dlock_renew($1, $2, $3);
PREPARE rel AS SELECT dlock_release($1, $2);
PREPARE rel_u(unknown, unknown) AS SELECT dlock_release($1, $2);
PREPARE brk AS SELECT dlock_break($1);
PREPARE brk_u(unknown) AS SELECT dlock_break($1);
-- and the array forms take untyped parameters too
PREPARE all_p AS SELECT cardinality(dlock_acquire_all($1, $2)) AS granted;
PREPARE any_p AS SELECT lock_name, token > 0 AS has_token FROM dlock_acquire_any($1, $2, $3);
PREPARE ren_each(unknown, unknown, unknown) AS SELECT dlock_renew_each($1, $2, $3);
PREPARE rel_each AS SELECT dlock_release_each($1, $2);
SELECT name, parameter_types FROM pg_prepared_statements ORDER BY name;
EXECUTE acq('untyped:b', '1 hour');
EXECUTE acq('untyped:b', '1 hour');
SELECT token AS ub FROM dlock_leases WHERE lock_name = 'untyped:b' \gset
EXECUTE ren('untyped:b', :'ub', '2 hours');
EXECUTE ren_u('untyped:b', :'ub', '2 hours');
EXECUTE rel('untyped:b', :'ub');
EXECUTE rel_u('untyped:b', :'ub');
EXECUTE acq4('untyped:b', '1 hour', '0', 'someone');
EXECUTE brk('untyped:b');
EXECUTE brk_u('untyped:b');
EXECUTE all_p('{untyped:c,untyped:d}', '1 hour');
EXECUTE any_p('{untyped:c,untyped:e}', '1 hour', '0');
SELECT token AS uc FROM dlock_leases WHERE lock_name = 'untyped:c' \gset
\set uc_tokens '{' :uc ',0}'
EXECUTE ren_each('{untyped:c,untyped:d}', :'uc_tokens', '1 hour');
EXECUTE rel_each('{untyped:c,untyped:d}', :'uc_tokens');
DEALLOCATE ALL;

--
-- In a transaction block: a call rolled back to a savepoint leaves nothing
--
BEGIN;
SAVEPOINT s;
SELECT cardinality(dlock_acquire_all(ARRAY['tx:a', 'tx:b'], '1 hour')) AS granted;
ROLLBACK TO SAVEPOINT s;
SELECT count(*) AS rows FROM dlock_leases WHERE lock_name LIKE 'tx:%';
-- so the names are free again, in the same transaction
SELECT dlock_acquire_all(ARRAY['tx:a', 'tx:b'], '1 hour') AS t \gset
SAVEPOINT s2;
SELECT lock_name FROM dlock_acquire_any(ARRAY['tx:a', 'tx:c'], '1 hour');
SELECT dlock_release_each(ARRAY['tx:a', 'tx:b'], :'t'::bigint[]) AS released;
ROLLBACK TO SAVEPOINT s2;
-- an error in a call aborts the transaction as any error does
SELECT dlock_acquire_all(ARRAY['tx:d', 'tx:d'], '1 hour');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT count(*) AS rows FROM dlock_leases WHERE lock_name LIKE 'tx:%';
-- committed: what the transaction kept after its savepoints
BEGIN;
SELECT dlock_acquire_all(ARRAY['tx:a', 'tx:b'], '1 hour') AS t \gset
SAVEPOINT s;
SELECT dlock_release_each(ARRAY['tx:a', 'tx:b'], :'t'::bigint[]) AS released;
ROLLBACK TO SAVEPOINT s;
SELECT lock_name FROM dlock_acquire_any(ARRAY['tx:a', 'tx:c'], '1 hour');
COMMIT;
SELECT lock_name, live FROM dlock_leases WHERE lock_name LIKE 'tx:%' ORDER BY lock_name;

DROP EXTENSION dlock;
