-- test/pgtap/03_holder_role.sql: the holder-role rule of dlock_renew and
-- dlock_release, and dlock_break for a role it was granted to.
--
-- Renew and release of a lease's current token are for the role that
-- acquired the lease, its members and superusers; anyone else gets 42501.
-- A token that is not current is not held, whoever asks: false, never
-- 42501, so a holder whose lease another role took over learns that it
-- lost it (and nobody learns anything from a wrong token that
-- dlock_leases does not show).  The rule follows the lease row: once
-- another role took the name over, the old holder is "anyone else" for
-- the new token.
--
-- Roles: alice acquires; bob is unrelated; carol is an INHERIT member of
-- alice; ops is an operator who is granted EXECUTE on dlock_break.  The
-- session user runs the file and is a superuser.  Every lease is taken
-- with a 1 hour ttl, so nothing here depends on timing.

\ir preamble.psql

SELECT plan(40);

CREATE ROLE dlock_tap_alice;
CREATE ROLE dlock_tap_bob;
CREATE ROLE dlock_tap_carol INHERIT IN ROLE dlock_tap_alice;
CREATE ROLE dlock_tap_ops;
GRANT USAGE ON SCHEMA :"dlock_schema" TO dlock_tap_alice, dlock_tap_bob, dlock_tap_carol, dlock_tap_ops;

-- Tokens, by (who, lock name), readable and writable by every test role.
CREATE TEMP TABLE tap_token (who text, lock_name text, token bigint, PRIMARY KEY (who, lock_name));
GRANT ALL ON tap_token TO PUBLIC;

SELECT ok((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user),
    'the file runs as a superuser (needed for the superuser cases)');
SELECT ok(NOT pg_catalog.pg_has_role('dlock_tap_bob', 'dlock_tap_alice', 'USAGE'),
    'bob has no privileges of alice');
SELECT ok(pg_catalog.pg_has_role('dlock_tap_carol', 'dlock_tap_alice', 'USAGE'),
    'carol has the privileges of alice (INHERIT member)');

-- alice takes tap:holder:a.
SET ROLE dlock_tap_alice;
INSERT INTO tap_token SELECT 'alice', 'a', dlock_acquire('tap:holder:a', '1 hour');
RESET ROLE;
SELECT results_eq(
    $$SELECT l.token, l.holder_role::text COLLATE "default", l.live FROM dlock_leases l WHERE l.lock_name = 'tap:holder:a'$$,
    $$SELECT t.token, 'dlock_tap_alice'::text, true FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'a' AND t.token IS NOT NULL$$,
    'alice holds tap:holder:a: a live lease with her token and her role as holder'
);

-- bob, with alice's token and with a wrong one.
SET ROLE dlock_tap_bob;
SELECT throws_ok(
    $$SELECT dlock_renew('tap:holder:a', (SELECT t.token FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'a'), '1 hour')$$,
    '42501', 'permission denied to renew lease',
    'bob cannot renew alice''s lease with her (correct) token: 42501'
);
SELECT is(
    dlock_renew('tap:holder:a', (SELECT t.token + 1000 FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'a'), '1 hour'),
    false,
    'bob renewing alice''s lease with a token that is not current: false, not 42501'
);
SELECT throws_ok(
    $$SELECT dlock_release('tap:holder:a', (SELECT t.token FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'a'))$$,
    '42501', 'permission denied to release lease',
    'bob cannot release alice''s lease with her (correct) token: 42501'
);
SELECT is(
    dlock_release('tap:holder:a', (SELECT t.token + 1000 FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'a')),
    false,
    'bob releasing alice''s lease with a token that is not current: false, not 42501'
);
SELECT is(
    dlock_release('tap:holder:a', 0),
    false,
    'bob releasing alice''s lease with token 0: false'
);
RESET ROLE;
SELECT results_eq(
    $$SELECT l.token, l.holder_role::text COLLATE "default", l.released, l.live FROM dlock_leases l WHERE l.lock_name = 'tap:holder:a'$$,
    $$SELECT t.token, 'dlock_tap_alice'::text, false, true FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'a'$$,
    'after bob''s attempts alice''s lease is still live, with her token'
);

-- carol, a member of alice with INHERIT, may act for her.
SET ROLE dlock_tap_carol;
SELECT is(
    dlock_renew('tap:holder:a', (SELECT t.token FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'a'), '1 hour'),
    true,
    'carol (INHERIT member of alice) can renew alice''s lease'
);
SELECT is(
    dlock_renew('tap:holder:a', (SELECT t.token + 1000 FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'a'), '1 hour'),
    false,
    'carol with a wrong token gets false (she passes the role check; the token does not hold the lease)'
);

-- alice herself, then the superuser.
SET ROLE dlock_tap_alice;
SELECT is(
    dlock_renew('tap:holder:a', (SELECT t.token FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'a'), '1 hour'),
    true,
    'alice can renew her own lease'
);
RESET ROLE;
SELECT is(
    dlock_renew('tap:holder:a', (SELECT t.token FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'a'), '1 hour'),
    true,
    'a superuser can renew alice''s lease'
);

-- Release: carol on tap:holder:a, alice on tap:holder:b, the superuser on
-- tap:holder:c.
SET ROLE dlock_tap_carol;
SELECT is(
    dlock_release('tap:holder:a', (SELECT t.token FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'a')),
    true,
    'carol (INHERIT member of alice) can release alice''s lease'
);
SET ROLE dlock_tap_alice;
SELECT is(
    dlock_release('tap:holder:a', (SELECT t.token FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'a')),
    false,
    'alice releasing the lease carol already released gets false'
);
INSERT INTO tap_token SELECT 'alice', 'b', dlock_acquire('tap:holder:b', '1 hour');
INSERT INTO tap_token SELECT 'alice', 'c', dlock_acquire('tap:holder:c', '1 hour');
SELECT is(
    (SELECT pg_catalog.count(t.token) FROM tap_token t WHERE t.who = 'alice' AND t.lock_name IN ('b', 'c')),
    2::bigint,
    'alice holds tap:holder:b and tap:holder:c'
);
SELECT is(
    dlock_release('tap:holder:b', (SELECT t.token FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'b')),
    true,
    'alice can release her own lease'
);
RESET ROLE;
SELECT is(
    dlock_release('tap:holder:c', (SELECT t.token FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'c')),
    true,
    'a superuser can release alice''s lease'
);
SELECT results_eq(
    $$SELECT l.lock_name COLLATE "default", l.released, l.live FROM dlock_leases l WHERE l.lock_name LIKE 'tap:holder:%' ORDER BY l.lock_name$$,
    $$VALUES ('tap:holder:a', true, false), ('tap:holder:b', true, false), ('tap:holder:c', true, false)$$,
    'the three releases ended the three leases'
);

-- The rule follows the row: tap:holder:b ended, bob takes it over, and
-- now alice's old token is bob's business.
SET ROLE dlock_tap_bob;
INSERT INTO tap_token SELECT 'bob', 'b', dlock_acquire('tap:holder:b', '1 hour');
RESET ROLE;
SELECT results_eq(
    $$SELECT l.token, l.holder_role::text COLLATE "default", l.live FROM dlock_leases l WHERE l.lock_name = 'tap:holder:b'$$,
    $$SELECT t.token, 'dlock_tap_bob'::text, true FROM tap_token t
       WHERE t.who = 'bob' AND t.lock_name = 'b'
         AND t.token > (SELECT a.token FROM tap_token a WHERE a.who = 'alice' AND a.lock_name = 'b')$$,
    'bob took tap:holder:b over with a greater token'
);
SET ROLE dlock_tap_alice;
SELECT is(
    dlock_release('tap:holder:b', (SELECT t.token FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'b')),
    false,
    'alice releasing tap:holder:b with her old token, after bob took it over: false (she lost it), not 42501'
);
SELECT is(
    dlock_renew('tap:holder:b', (SELECT t.token FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'b'), '1 hour'),
    false,
    'alice renewing tap:holder:b with her old token, after bob took it over: false, not 42501'
);
SELECT throws_ok(
    $$SELECT dlock_release('tap:holder:b', (SELECT t.token FROM tap_token t WHERE t.who = 'bob' AND t.lock_name = 'b'))$$,
    '42501', 'permission denied to release lease',
    'alice cannot release bob''s lease with bob''s token'
);
SET ROLE dlock_tap_carol;
SELECT throws_ok(
    $$SELECT dlock_release('tap:holder:b', (SELECT t.token FROM tap_token t WHERE t.who = 'bob' AND t.lock_name = 'b'))$$,
    '42501', 'permission denied to release lease',
    'carol (member of alice, not of bob) cannot release bob''s lease'
);
RESET ROLE;
SELECT results_eq(
    $$SELECT l.token, l.holder_role::text COLLATE "default", l.live FROM dlock_leases l WHERE l.lock_name = 'tap:holder:b'$$,
    $$SELECT t.token, 'dlock_tap_bob'::text, true FROM tap_token t WHERE t.who = 'bob' AND t.lock_name = 'b'$$,
    'bob''s lease on tap:holder:b is untouched by alice''s and carol''s attempts'
);
SET ROLE dlock_tap_bob;
SELECT is(
    dlock_release('tap:holder:b', (SELECT t.token FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'b')),
    false,
    'bob, the holder, releasing with alice''s stale token gets false (no 42501 for the holder, and no effect)'
);
SELECT is(
    dlock_release('tap:holder:b', (SELECT t.token FROM tap_token t WHERE t.who = 'bob' AND t.lock_name = 'b')),
    true,
    'bob releases his own lease'
);
RESET ROLE;

-- dlock_break: denied to ops until it is granted, then it ends anyone's
-- lease.
SET ROLE dlock_tap_alice;
INSERT INTO tap_token SELECT 'alice', 'd', dlock_acquire('tap:holder:d', '1 hour');
SET ROLE dlock_tap_ops;
SELECT throws_ok(
    $$SELECT dlock_break('tap:holder:d')$$,
    '42501', 'permission denied for function dlock_break',
    'ops cannot call dlock_break before it is granted'
);
RESET ROLE;
GRANT EXECUTE ON FUNCTION dlock_break(text) TO dlock_tap_ops;
SET ROLE dlock_tap_ops;
SELECT is(dlock_break('tap:holder:d'), true,
    'ops, granted EXECUTE on dlock_break, breaks alice''s live lease: true');
SELECT is(dlock_break('tap:holder:d'), false,
    'breaking it again finds no live lease: false');
SELECT results_eq(
    $$SELECT l.token, l.holder_role::text COLLATE "default", l.released, l.live FROM dlock_leases l WHERE l.lock_name = 'tap:holder:d'$$,
    $$SELECT t.token, 'dlock_tap_alice'::text, true, false FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'd'$$,
    'the broken lease is ended and keeps alice''s token'
);
SET ROLE dlock_tap_alice;
SELECT is(
    dlock_renew('tap:holder:d', (SELECT t.token FROM tap_token t WHERE t.who = 'alice' AND t.lock_name = 'd'), '1 hour'),
    false,
    'alice can no longer renew the broken lease: false'
);
RESET ROLE;
SELECT function_privs_are(:'dlock_schema', 'dlock_break', ARRAY['text'], 'dlock_tap_ops', ARRAY['EXECUTE'],
    'the grant is what gave ops EXECUTE on dlock_break');
SELECT function_privs_are(:'dlock_schema', 'dlock_break', ARRAY['text'], 'dlock_tap_bob', ARRAY[]::name[],
    'the grant to ops did not give bob EXECUTE on dlock_break');
SET ROLE dlock_tap_bob;
SELECT throws_ok(
    $$SELECT dlock_break('tap:holder:d')$$,
    '42501', 'permission denied for function dlock_break',
    'bob still cannot call dlock_break'
);
RESET ROLE;

-- The holder is a role, not a role name: renaming roles moves nothing.
-- dave acquires; dave is renamed and eve takes dave's old name.
CREATE ROLE dlock_tap_dave;
CREATE ROLE dlock_tap_eve;
CREATE ROLE dlock_tap_frank NOINHERIT IN ROLE dlock_tap_dave;
GRANT USAGE ON SCHEMA :"dlock_schema" TO dlock_tap_dave, dlock_tap_eve, dlock_tap_frank;
SET ROLE dlock_tap_dave;
INSERT INTO tap_token SELECT 'dave', 'e', dlock_acquire('tap:holder:e', '1 hour');
RESET ROLE;
ALTER ROLE dlock_tap_dave RENAME TO dlock_tap_dave_renamed;
ALTER ROLE dlock_tap_eve RENAME TO dlock_tap_dave;
SET ROLE dlock_tap_dave_renamed;
SELECT is(
    dlock_renew('tap:holder:e', (SELECT t.token FROM tap_token t WHERE t.who = 'dave' AND t.lock_name = 'e'), '1 hour'),
    true,
    'the role that acquired the lease can still renew it after being renamed'
);
RESET ROLE;
SET ROLE dlock_tap_dave;
SELECT throws_ok(
    $$SELECT dlock_release('tap:holder:e', (SELECT t.token FROM tap_token t WHERE t.who = 'dave' AND t.lock_name = 'e'))$$,
    '42501', 'permission denied to release lease',
    'another role renamed to the holder''s old name cannot release the lease'
);
RESET ROLE;
SELECT is(
    (SELECT l.holder_role::text FROM dlock_leases l WHERE l.lock_name = 'tap:holder:e'),
    'dlock_tap_dave_renamed',
    'dlock_leases shows the holder role''s current name'
);
-- frank is a member of dave without INHERIT: the contract says "a member
-- of it", so frank may act for dave without SET ROLE.
SET ROLE dlock_tap_frank;
SELECT is(
    dlock_release('tap:holder:e', (SELECT t.token FROM tap_token t WHERE t.who = 'dave' AND t.lock_name = 'e')),
    true,
    'frank (NOINHERIT member of the holder) can release the lease'
);
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
