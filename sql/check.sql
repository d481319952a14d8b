--
-- check: dlock_check (the fence as a call) in every mode, what the
-- transaction remembers of it, and the fenced DELETE, TRUNCATE and the
-- write without a token that rely on it; mode 'seen' and its marks.
-- Every acceptance and rejection, and every error with its SQLSTATE.
--
CREATE EXTENSION dlock;
\set SHOW_CONTEXT never

CREATE TABLE acct (id int PRIMARY KEY, bal int NOT NULL, tok bigint);
INSERT INTO acct VALUES (1, 100, NULL), (2, 100, NULL), (3, 100, NULL);
-- the rows exist before the fence: DELETE and UPDATE now need the fence
CREATE TRIGGER acct_fence BEFORE INSERT OR UPDATE OR DELETE ON acct
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('acct:{id}', 'tok');
CREATE TRIGGER acct_fence_truncate BEFORE TRUNCATE ON acct
  EXECUTE FUNCTION dlock_fence('acct:all', 'tok');

-- tokens, in the order issued: 1 acct:1, 2 acct:2
SELECT dlock_acquire('acct:1', '1 hour') AS t1 \gset
SELECT dlock_acquire('acct:2', '1 hour') AS t2 \gset

--
-- dlock_check: returns the token when it passes, raises 55T01 otherwise
--
SELECT dlock_check('acct:1', :t1) AS latest, dlock_check('acct:1', :t1, 'live') AS live;
-- a superseded token, a token of another lock, a name without a lease
SELECT dlock_break('acct:1');
SELECT dlock_acquire('acct:1', '1 hour') AS t1b \gset
SELECT dlock_check('acct:1', :t1);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_check('acct:1', :t2);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_check('acct:404', :t1b);
\echo :LAST_ERROR_SQLSTATE
-- 'live': a released or expired lease is rejected, 'latest' still passes
SELECT dlock_acquire('acct:short', '1 hour') AS ts \gset
SELECT dlock_release('acct:short', :ts);
-- (the details name the time of the release or expiry)
\set VERBOSITY terse
SELECT dlock_check('acct:short', :ts, 'live');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_check('acct:short', :ts) = :ts AS latest_passes;
SELECT dlock_acquire('acct:short', '10 ms') AS ts \gset
SELECT pg_sleep(0.05);
SELECT dlock_check('acct:short', :ts, 'live');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
-- bad input: 22004, 22023; a NULL token is a rejection (55T01)
SELECT dlock_check(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_check('', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_check(repeat('x', 513), 1);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_check('acct:1', :t1b, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_check('acct:1', :t1b, 'LATEST');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_check('acct:1', NULL);
\echo :LAST_ERROR_SQLSTATE

--
-- DELETE: only under a lock the transaction checked
--
DELETE FROM acct WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT dlock_check('acct:1', :t1b) = :t1b AS checked;
DELETE FROM acct WHERE id = 1;
-- row 2's lock was not checked: rejected, the whole statement
DELETE FROM acct WHERE id IN (2, 3);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT id, bal, tok FROM acct ORDER BY id;
-- a check made, then superseded within the transaction: rejected
BEGIN;
SELECT dlock_check('acct:2', :t2) = :t2 AS checked;
SELECT dlock_break('acct:2');
SELECT dlock_acquire('acct:2', '1 hour') AS t2b \gset
DELETE FROM acct WHERE id = 2;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT token = :t2 AS acct_2_not_taken_over FROM dlock_leases WHERE lock_name = 'acct:2';
-- a row that carries a higher token than the one checked (written while
-- the trigger was disabled): its DELETE is rejected
ALTER TABLE acct DISABLE TRIGGER acct_fence;
UPDATE acct SET tok = 1000000 WHERE id = 3;
ALTER TABLE acct ENABLE TRIGGER acct_fence;
SELECT dlock_acquire('acct:3', '1 hour') AS t3 \gset
BEGIN;
SELECT dlock_check('acct:3', :t3) = :t3 AS checked;
DELETE FROM acct WHERE id = 3;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- the newest check of a name counts
BEGIN;
SELECT dlock_check('acct:1', :t1b, 'live') = :t1b AS checked;
DELETE FROM acct WHERE id = 1 RETURNING id;
ROLLBACK;

--
-- what the transaction remembers: a rolled-back savepoint forgets its
-- checks, a released one keeps them, the next transaction starts empty
--
BEGIN;
SAVEPOINT s1;
SELECT dlock_check('acct:1', :t1b) = :t1b AS checked;
ROLLBACK TO s1;
DELETE FROM acct WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SAVEPOINT s1;
SAVEPOINT s2;
SELECT dlock_check('acct:1', :t1b) = :t1b AS checked;
RELEASE SAVEPOINT s2;
RELEASE SAVEPOINT s1;
SAVEPOINT s3;
SELECT dlock_check('acct:2', :t2) = :t2 AS checked;
ROLLBACK TO s3;
DELETE FROM acct WHERE id = 1 RETURNING id;
DELETE FROM acct WHERE id = 2;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- a check that failed inside an exception block records nothing
BEGIN;
DO $$
BEGIN
  PERFORM dlock_check('acct:1', 1);
EXCEPTION WHEN SQLSTATE '55T01' THEN
  RAISE NOTICE 'rejected: %', SQLERRM;
END $$;
DELETE FROM acct WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- a committed check is gone in the next transaction
SELECT dlock_check('acct:1', :t1b) = :t1b AS checked;
DELETE FROM acct WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE

--
-- writes without a token of their own take the checked one
--
BEGIN;
SELECT dlock_check('acct:1', :t1b) = :t1b AS checked;
UPDATE acct SET bal = bal - 10 WHERE id = 1;
COMMIT;
SELECT id, bal, tok = :t1b AS carries_checked_token FROM acct WHERE id = 1;
-- with nothing checked, an unchanged token is checked as it is (current:
-- accepted) and a NULL one rejected
UPDATE acct SET bal = bal - 10 WHERE id = 1;
UPDATE acct SET bal = bal - 10 WHERE id = 2;
\echo :LAST_ERROR_SQLSTATE
-- an explicit token wins over the checked one
BEGIN;
SELECT dlock_check('acct:2', :t2) = :t2 AS checked;
UPDATE acct SET bal = 0, tok = :t1b WHERE id = 2;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- INSERT with a NULL token: only under a checked lock
BEGIN;
SELECT dlock_check('acct:1', :t1b) = :t1b AS checked;
INSERT INTO acct VALUES (1001, 0, NULL);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT dlock_acquire('acct:4', '1 hour') AS t4 \gset
BEGIN;
SELECT dlock_check('acct:4', :t4) = :t4 AS checked;
INSERT INTO acct VALUES (4, 40, NULL);
COMMIT;
SELECT id, bal, tok = :t4 AS carries_checked_token FROM acct WHERE id = 4;
-- a stale check does not make an unchanged token pass: the holder of
-- acct:4 checked, then lost the lease before its UPDATE
BEGIN;
SELECT dlock_check('acct:4', :t4) = :t4 AS checked;
SELECT dlock_break('acct:4');
SELECT dlock_acquire('acct:4', '1 hour') IS NOT NULL AS taken_over;
UPDATE acct SET bal = 0 WHERE id = 4;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

--
-- TRUNCATE: only after the template's lock was checked
--
TRUNCATE acct;
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('acct:all', '1 hour') AS tall \gset
BEGIN;
SELECT dlock_check('acct:1', :t1b) = :t1b AS other_lock_checked;
TRUNCATE acct;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT dlock_check('acct:all', :tall) = :tall AS checked;
TRUNCATE acct;
SELECT count(*) AS rows_left FROM acct;
ROLLBACK;
SELECT count(*) AS rows_kept FROM acct;

--
-- mode 'seen': the highest token this database accepted, per lock name
--
CREATE TABLE shard (id int PRIMARY KEY, note text, tok bigint);
CREATE TRIGGER shard_fence BEFORE INSERT OR UPDATE OR DELETE ON shard
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('order:{id}', 'tok', 'seen');
-- no lease here: the first token seen is accepted and marked
INSERT INTO shard VALUES (1, 'first', 50);
SELECT lock_name, token FROM dlock_fence_mark ORDER BY lock_name;
-- the same or a higher token: accepted, a higher one raises the mark
UPDATE shard SET note = 'same' WHERE id = 1;
UPDATE shard SET note = 'newer', tok = 70 WHERE id = 1;
SELECT lock_name, token FROM dlock_fence_mark ORDER BY lock_name;
-- a lower one: rejected, also on a new row of the same lock name
UPDATE shard SET note = 'stale', tok = 60 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_check('order:1', 69, 'seen');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM shard;
-- DELETE under 'seen': after a check of a token not lower than the mark
DELETE FROM shard WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT dlock_check('order:1', 70, 'seen') AS checked;
-- checked again at the same token: free, the mark stays locked
SELECT dlock_check('order:1', 70, 'seen') AS checked_again;
DELETE FROM shard WHERE id = 1 RETURNING id;
ROLLBACK;
-- a transaction that checked a token and then raised the mark itself: its
-- checks with the old (now lower) token are rejected
BEGIN;
SELECT dlock_check('order:1', 70, 'seen') AS checked;
UPDATE shard SET note = 'raised', tok = 80 WHERE id = 1;
SELECT dlock_check('order:1', 70, 'seen');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- a rejected write leaves the mark where it was; a rolled-back raise too
BEGIN;
UPDATE shard SET tok = 90 WHERE id = 1;
ROLLBACK;
SELECT lock_name, token FROM dlock_fence_mark ORDER BY lock_name;
-- marks are private: ordinary roles cannot write them
CREATE ROLE check_user;
GRANT SELECT, INSERT, UPDATE, DELETE ON shard TO check_user;
SET ROLE check_user;
UPDATE dlock_fence_mark SET token = 0;
\echo :LAST_ERROR_SQLSTATE
-- but its writers fence through the trigger and dlock_check
UPDATE shard SET note = 'by check_user', tok = 71 WHERE id = 1;
SELECT dlock_check('order:1', 71, 'seen') AS checked;
SELECT dlock_purge_marks('0');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- only the writers of a table fenced by the lock may raise or hold its
-- mark: a role that may write no such table cannot brick the lock with a
-- huge token (42501), and a table of its own, fenced with the same
-- template, raises marks of its own only (marks are kept per owner of the
-- fenced tables)
CREATE ROLE check_other;
SET ROLE check_other;
SELECT dlock_check('order:1', 9223372036854775807, 'seen');
\echo :LAST_ERROR_SQLSTATE
CREATE TEMP TABLE own_shard (id int PRIMARY KEY, tok bigint);
CREATE TRIGGER own_shard_fence BEFORE INSERT ON own_shard
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('order:{id}', 'tok', 'seen');
INSERT INTO own_shard VALUES (1, 9223372036854775807);
SELECT dlock_check('order:1', 9223372036854775807, 'seen') AS own_mark;
DROP TABLE own_shard;
RESET ROLE;
SELECT table_owner, lock_name, token FROM dlock_fence_mark ORDER BY token;
-- shard's writers are not bricked
UPDATE shard SET note = 'still writable', tok = 72 WHERE id = 1;
SELECT note, tok FROM shard WHERE id = 1;
-- a name longer than a lock name may be is refused, as everywhere (22023)
SELECT dlock_check(repeat('x', 513), 1, 'seen');
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE long_shard (name text PRIMARY KEY, tok bigint);
CREATE TRIGGER long_shard_fence BEFORE INSERT ON long_shard
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('{name}', 'tok', 'seen');
\set VERBOSITY terse
INSERT INTO long_shard VALUES (repeat('x', 513), 1);
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE
INSERT INTO long_shard VALUES (repeat('x', 512), 1);
SELECT count(*) AS long_marks FROM dlock_fence_mark WHERE length(lock_name) > 512;
DROP TABLE long_shard;
DROP ROLE check_other;

--
-- dlock_purge_marks: marks not raised for older_than
--
SELECT dlock_purge_marks('1 hour') AS purged_recent;
SELECT dlock_purge_marks('0') AS purged_all;
SELECT count(*) AS marks_left FROM dlock_fence_mark;
-- a purged mark forgets: the next token is accepted whatever it is (the
-- row's own history still holds on UPDATE)
UPDATE shard SET tok = 5 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_check('order:1', 5, 'seen') AS accepted_after_purge;
SELECT lock_name, token FROM dlock_fence_mark ORDER BY lock_name;
SELECT dlock_purge_marks(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_purge_marks('-1 s');
\echo :LAST_ERROR_SQLSTATE
-- in a read-only transaction: 25006
BEGIN READ ONLY;
SELECT dlock_purge_marks('0');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT dlock_check('order:1', 5, 'seen');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT dlock_check('acct:1', :t1b, 'live');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- 'latest' only reads: it works in a read-only transaction
BEGIN READ ONLY;
SELECT dlock_check('acct:1', :t1b) = :t1b AS checked;
ROLLBACK;

--
-- partitions: a row moved to another partition by an UPDATE changes its
-- lock, and is deleted from its old partition: both need a check of its
-- old lock
--
CREATE TABLE parted (id int, region text, tok bigint, PRIMARY KEY (id, region))
  PARTITION BY LIST (region);
CREATE TABLE parted_eu PARTITION OF parted FOR VALUES IN ('eu');
CREATE TABLE parted_us PARTITION OF parted FOR VALUES IN ('us');
CREATE TRIGGER parted_fence BEFORE INSERT OR UPDATE OR DELETE ON parted
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('parted:{region}:{id}', 'tok');
SELECT dlock_acquire('parted:eu:1', '1 hour') AS peu \gset
SELECT dlock_acquire('parted:us:1', '1 hour') AS pus \gset
INSERT INTO parted VALUES (1, 'eu', :peu);
-- with the new lock's token only: the UPDATE that leaves parted:eu:1 is
-- rejected
UPDATE parted SET region = 'us', tok = :pus WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT dlock_check('parted:eu:1', :peu) = :peu AS old_lock_checked;
UPDATE parted SET region = 'us', tok = :pus WHERE id = 1;
COMMIT;
SELECT tableoid::regclass, id, region, tok = :pus AS new_token FROM parted;
DROP TABLE parted;

--
-- the documented patterns: a procedure, a row-level security policy, an
-- UPDATE ... WHERE
--
CREATE PROCEDURE debit(p_id int, p_token bigint, p_amount int) LANGUAGE plpgsql AS $$
BEGIN
  PERFORM dlock_check('acct:' || p_id, p_token);
  UPDATE acct SET bal = bal - p_amount WHERE id = p_id;
END $$;
SELECT token AS t4now FROM dlock_leases WHERE lock_name = 'acct:4' \gset
CALL debit(4, :t4now, 5);
SELECT id, bal, tok = :t4now AS carries_token FROM acct WHERE id = 4;
CALL debit(4, :t4now - 1, 5);
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE notes (id int PRIMARY KEY, body text);
INSERT INTO notes VALUES (4, 'first');
ALTER TABLE notes ENABLE ROW LEVEL SECURITY;
CREATE POLICY fenced ON notes
  USING (dlock_check('acct:' || id, current_setting('app.token')::bigint) IS NOT NULL);
GRANT SELECT, UPDATE ON notes TO check_user;
SET ROLE check_user;
SET app.token = :t4now;
UPDATE notes SET body = 'by the holder' WHERE id = 4;
SET app.token = 1;
UPDATE notes SET body = 'by a stale holder' WHERE id = 4;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT * FROM notes;
UPDATE acct SET bal = 0 WHERE id = 4 AND dlock_check('acct:4', :t4now - 1) IS NOT NULL;
\echo :LAST_ERROR_SQLSTATE
UPDATE acct SET bal = 0 WHERE id = 4 AND dlock_check('acct:4', :t4now) IS NOT NULL;
SELECT id, bal FROM acct WHERE id = 4;
DROP TABLE notes;
DROP PROCEDURE debit;

--
-- mode 'live' keeps the lease from being taken over until the transaction
-- ends, which only the lease's holder role, its members and superusers may
-- do: anyone else naming the current token gets 42501 (and locks nothing),
-- a token that is not current is stale as for anyone (55T01); 'latest'
-- locks nothing and is anyone's
--
CREATE ROLE check_holder;
SET ROLE check_holder;
SELECT dlock_acquire('live:1', '1 hour') AS tl \gset
SELECT dlock_acquire('live:2', '1 hour') AS tl2 \gset
RESET ROLE;
SET ROLE check_user;
BEGIN;
SELECT dlock_check('live:1', :tl, 'live');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT dlock_check('live:1', :tl - 1, 'live');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_check('live:1', :tl) = :tl AS latest_checked;
RESET ROLE;
CREATE TABLE live_acct (id int PRIMARY KEY, tok bigint);
CREATE TRIGGER live_acct_fence BEFORE INSERT OR UPDATE ON live_acct
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('live:{id}', 'tok', 'live');
GRANT INSERT ON live_acct TO check_user;
SET ROLE check_user;
INSERT INTO live_acct VALUES (1, :tl);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- a member of the holder role may: it acts for the holder
GRANT check_holder TO check_user;
SET ROLE check_user;
BEGIN;
SELECT dlock_check('live:1', :tl, 'live') = :tl AS member_checked;
INSERT INTO live_acct VALUES (1, :tl), (2, :tl2);
COMMIT;
RESET ROLE;
SELECT id, tok IN (:tl, :tl2) AS holders_token FROM live_acct ORDER BY id;
DROP TABLE live_acct;
REVOKE check_holder FROM check_user;
DROP ROLE check_holder;

--
-- where this backend last found a mark is only a place to look first: a
-- table truncated since (the place is past its end), another name's mark
-- in that place, a rewritten table: the mark is looked up again
--
TRUNCATE dlock_fence_mark;
SELECT dlock_check('order:1', 6, 'seen') AS made;
SELECT dlock_check('order:1', 6, 'seen') AS found_and_remembered;
SELECT ctid, lock_name, token FROM dlock_fence_mark;
TRUNCATE dlock_fence_mark;
SELECT pg_relation_size('dlock_fence_mark') AS size_after_truncate;
SELECT dlock_check('order:1', 4, 'seen') AS past_the_end;
TRUNCATE dlock_fence_mark;
SELECT dlock_check('order:2', 9, 'seen') AS other_name_made;
SELECT ctid, lock_name, token FROM dlock_fence_mark;
-- order:2's mark (9) is where order:1's was: order:1 has none, 3 is accepted
SELECT dlock_check('order:1', 3, 'seen') AS other_name_there;
VACUUM FULL dlock_fence_mark;
SELECT dlock_check('order:1', 2, 'seen');
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_check('order:2', 10, 'seen') AS after_rewrite;
SELECT dlock_check('order:1', 3, 'seen') AS again;
SELECT lock_name, token FROM dlock_fence_mark ORDER BY lock_name;
-- 600 names from one backend, many sharing a set of places; every answer
-- is the mark's: tokens one lower rejected, the same accepted, one higher
-- accepted and raising each mark (the counts are of rejections)
CREATE TABLE many (id int PRIMARY KEY, tok bigint);
CREATE TRIGGER many_fence BEFORE INSERT ON many
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('many:{id}', 'tok', 'seen');
INSERT INTO many SELECT g, 100 + g FROM generate_series(1, 600) g;
CREATE FUNCTION many_rejected(delta bigint) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
  n int := 0;
BEGIN
  FOR i IN 1..600 LOOP
    BEGIN
      PERFORM dlock_check('many:' || i, 100 + i + delta, 'seen');
    EXCEPTION WHEN SQLSTATE '55T01' THEN
      n := n + 1;
    END;
  END LOOP;
  RETURN n;
END $$;
SELECT many_rejected(-1) AS lower_rejected, many_rejected(0) AS same_rejected,
       many_rejected(1) AS higher_rejected;
SELECT count(*) FILTER (WHERE token = 101 + substr(lock_name, 6)::int) AS raised,
       count(*) AS marks
  FROM dlock_fence_mark WHERE lock_name LIKE 'many:%';
SELECT many_rejected(0) AS now_lower_rejected;
-- the primary key made again on (lock_name, table_owner): no longer the key
-- the direct lookup reads, so the statement decides, with the same answers
ALTER TABLE dlock_fence_mark DROP CONSTRAINT dlock_fence_mark_pkey,
  ADD CONSTRAINT dlock_fence_mark_pkey PRIMARY KEY (lock_name, table_owner);
SELECT many_rejected(0) AS rejected_by_statement, many_rejected(1) AS same_rejected;
ALTER TABLE dlock_fence_mark DROP CONSTRAINT dlock_fence_mark_pkey,
  ADD CONSTRAINT dlock_fence_mark_pkey PRIMARY KEY (table_owner, lock_name);
SELECT many_rejected(0) AS rejected_again, many_rejected(2) AS higher_rejected;
SELECT count(*) FILTER (WHERE token = 102 + substr(lock_name, 6)::int) AS raised
  FROM dlock_fence_mark WHERE lock_name LIKE 'many:%';
-- a mark found where it was last locks the mark table but not its primary
-- key (the key's columns were checked since the table's last relcache
-- invalidation, which autovacuum's statistics would also send: off here);
-- many:7's first check checks the key again and puts its hint first
ALTER TABLE dlock_fence_mark SET (autovacuum_enabled = false);
SELECT dlock_check('many:7', 109, 'seen') AS key_checked_again;
BEGIN;
SELECT dlock_check('many:7', 109, 'seen') AS found_there;
SELECT relation::regclass AS locked, mode FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype = 'relation'
   AND relation IN ('dlock_fence_mark'::regclass, 'dlock_fence_mark_pkey'::regclass);
ROLLBACK;
ALTER TABLE dlock_fence_mark RESET (autovacuum_enabled);
-- the mark table's columns are looked up again when it changes (its
-- pg_class row changes with it): its token column dropped and added back
-- has a new number (every mark now 0)
ALTER TABLE dlock_fence_mark DROP COLUMN token;
ALTER TABLE dlock_fence_mark ADD COLUMN token int8 NOT NULL DEFAULT 0;
SELECT dlock_check('many:7', 3, 'seen') AS raised_from_0;
SELECT dlock_check('many:7', 2, 'seen');
\echo :LAST_ERROR_SQLSTATE
SELECT token FROM dlock_fence_mark WHERE lock_name = 'many:7';
DROP FUNCTION many_rejected(bigint);
DROP TABLE many;

DROP TABLE acct, shard;
DROP ROLE check_user;
DROP EXTENSION dlock;
