--
-- fence_trigger: dlock_fence accepts a write only with the current token of
-- its lock.  Every acceptance and rejection, the modes, templates,
-- partitioned tables, and every misuse error, each with its SQLSTATE.
--
CREATE EXTENSION dlock;
\set SHOW_CONTEXT never

CREATE TABLE accounts (id int PRIMARY KEY, balance int, fence_token bigint);
CREATE TRIGGER accounts_fence BEFORE INSERT OR UPDATE ON accounts
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('account:{id}', 'fence_token');

-- tokens, in the order issued: 1 account:5 (used at the end), 2 account:1,
-- 3 account:9
SELECT dlock_acquire('account:5', '1 min') AS t5 \gset
SELECT dlock_acquire('account:1', '1 min') AS t1 \gset
SELECT dlock_acquire('account:9', '1 min') AS t9 \gset

-- the holder writes with its token: accepted, on INSERT and on UPDATE
INSERT INTO accounts VALUES (1, 100, :t1);
UPDATE accounts SET balance = 90, fence_token = :t1 WHERE id = 1;
SELECT * FROM accounts;

-- a NULL token is rejected
INSERT INTO accounts VALUES (2, 100, NULL);
\echo :LAST_ERROR_SQLSTATE
-- a lock that was never acquired: rejected, whatever the token
INSERT INTO accounts VALUES (2, 100, :t1);
\echo :LAST_ERROR_SQLSTATE
-- a token of another lock: rejected
UPDATE accounts SET balance = 80, fence_token = :t9 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
UPDATE accounts SET balance = 80, fence_token = :t5 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
-- a token never issued: rejected
UPDATE accounts SET balance = 80, fence_token = 1000 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE

-- the pause scenario: A (token 2) loses the lease, B takes over (token 4)
SELECT dlock_break('account:1');
SELECT dlock_acquire('account:1', '1 min') AS t1b \gset
UPDATE accounts SET balance = 50, fence_token = :t1b WHERE id = 1;
-- A comes back with its old token: rejected, the row keeps B's write
UPDATE accounts SET balance = 0, fence_token = :t1 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
-- an UPDATE that does not set the token carries the row's token along; it
-- is current here, so it is accepted
UPDATE accounts SET balance = balance + 1 WHERE id = 1;
SELECT * FROM accounts;

-- an UPDATE that changes the row's lock is a DELETE under the old lock and
-- an INSERT under the new one: moving row 1 (lock account:1) to account:5
-- with a token of account:5 only is rejected (the writer does not hold
-- account:1)
UPDATE accounts SET id = 5, fence_token = :t5 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
-- a writer holding both moves it: account:1 checked in the transaction,
-- account:5's token on the row (lower than the row's token 4: its history
-- under account:1 does not bind account:5)
BEGIN;
SELECT dlock_check('account:1', :t1b) = :t1b AS old_lock_checked;
UPDATE accounts SET id = 5, fence_token = :t5 WHERE id = 1;
COMMIT;
SELECT * FROM accounts;
-- under one lock, a token lower than the row's own is rejected even when
-- the lease table would accept it (here the row got token 1000 while the
-- trigger did not fire)
SET session_replication_role = replica;
UPDATE accounts SET fence_token = 1000 WHERE id = 5;
RESET session_replication_role;
UPDATE accounts SET balance = 52, fence_token = :t5 WHERE id = 5;
\echo :LAST_ERROR_SQLSTATE
SET session_replication_role = replica;
UPDATE accounts SET fence_token = :t5 WHERE id = 5;
RESET session_replication_role;

-- rejected rows are not written: several rows in one statement, one stale
SELECT dlock_acquire('account:6', '1 min') AS t6 \gset
INSERT INTO accounts VALUES (6, 1, :t6), (7, 1, :t6);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS rows_6_or_7 FROM accounts WHERE id IN (6, 7);

-- INSERT ... ON CONFLICT DO UPDATE and COPY are fenced too
INSERT INTO accounts VALUES (6, 1, :t6);
INSERT INTO accounts VALUES (6, 2, :t6) ON CONFLICT (id) DO UPDATE SET balance = excluded.balance, fence_token = excluded.fence_token;
INSERT INTO accounts VALUES (6, 3, :t1) ON CONFLICT (id) DO UPDATE SET balance = excluded.balance, fence_token = excluded.fence_token;
\echo :LAST_ERROR_SQLSTATE
COPY accounts FROM stdin;
8	1	7
\.
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM accounts ORDER BY id;

--
-- latest vs live: a lease that merely ended, with nobody after it
--
CREATE TABLE ledger (id int PRIMARY KEY, amount int, fence_token bigint);
CREATE TRIGGER ledger_fence BEFORE INSERT OR UPDATE ON ledger
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('ledger:{id}', 'fence_token', 'live');
-- (and 'latest' spelled out is the default)
CREATE TABLE journal (id int PRIMARY KEY, amount int, fence_token bigint);
CREATE TRIGGER journal_fence BEFORE INSERT OR UPDATE ON journal
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('ledger:{id}', 'fence_token', 'latest');

-- live lease: both modes accept
SELECT dlock_acquire('ledger:1', '1 min') AS l1 \gset
INSERT INTO ledger VALUES (1, 10, :l1);
INSERT INTO journal VALUES (1, 10, :l1);
-- released: latest accepts (no newer token exists), live rejects (terse:
-- the detail shows the release time)
SELECT dlock_release('ledger:1', :l1);
UPDATE journal SET amount = 11 WHERE id = 1;
\set VERBOSITY terse
UPDATE ledger SET amount = 11 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
SELECT dlock_acquire('ledger:2', '1 min') AS l2 \gset
-- expired: latest accepts, live rejects (the lease ends by the clock: a
-- renew for 1 microsecond, then a sleep; no race with a short ttl)
INSERT INTO ledger VALUES (2, 20, :l2);
SELECT dlock_renew('ledger:2', :l2, '1 microsecond') AS renewed_to_expire;
SELECT pg_sleep(0.01);
INSERT INTO journal VALUES (2, 20, :l2);
UPDATE ledger SET amount = 21 WHERE id = 2;
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
-- live mode rejects stale and foreign tokens like latest does
SELECT dlock_acquire('ledger:1', '1 min') AS l1b \gset
UPDATE ledger SET amount = 12, fence_token = :l1 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
UPDATE ledger SET amount = 12, fence_token = :l1b WHERE id = 1;
SELECT * FROM ledger ORDER BY id;
SELECT * FROM journal ORDER BY id;
-- in live mode the write takes dlock's name lock in the lock manager
-- (pg_locks: advisory, ShareLock, objsubid -12020) until the transaction
-- ends and locks no row (takeover is blocked meanwhile; specs/race-fence-*.spec
-- show the interleavings); latest mode locks nothing
CREATE EXTENSION pgrowlocks;
CREATE VIEW my_name_locks AS
  SELECT mode, granted FROM pg_locks
   WHERE locktype = 'advisory' AND objsubid = -12020
     AND pid = pg_backend_pid();
BEGIN;
UPDATE journal SET amount = 13, fence_token = :l1b WHERE id = 1;
SELECT count(*) AS locked_by_latest FROM pgrowlocks('dlock_lease');
SELECT count(*) AS name_locks_by_latest FROM my_name_locks;
UPDATE ledger SET amount = 13 WHERE id = 1;
SELECT * FROM my_name_locks;
SELECT count(*) AS rows_locked_by_live FROM pgrowlocks('dlock_lease');
COMMIT;
SELECT count(*) AS locked_after_commit FROM pgrowlocks('dlock_lease');
SELECT count(*) AS name_locks_after_commit FROM my_name_locks;
-- a 'live' check writes nothing: the transaction gets no transaction id
BEGIN;
SELECT dlock_check('ledger:1', :l1b, 'live') = :l1b AS checked_live;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid,
       (SELECT count(*) FROM my_name_locks) AS name_locks;
COMMIT;
-- the lock belongs to the transaction, not to the cursor that checked: a
-- later fetch that fails inside a savepoint does not take it away
BEGIN;
DECLARE c CURSOR FOR
  SELECT dlock_check(v.n, v.t, 'live') = :l1b AS checked
    FROM (VALUES (1, 'ledger:1', :l1b), (2, 'ledger:1', 0)) v(i, n, t) ORDER BY v.i;
FETCH 1 FROM c;
SAVEPOINT s;
\set VERBOSITY terse
FETCH 1 FROM c;
\set VERBOSITY default
ROLLBACK TO s;
SELECT * FROM my_name_locks;
COMMIT;
-- a SERIALIZABLE transaction locks the lease row FOR KEY SHARE instead (its
-- 40001 on a concurrent takeover: specs/race-snapshot.spec)
BEGIN ISOLATION LEVEL SERIALIZABLE;
UPDATE ledger SET amount = 14 WHERE id = 1;
SELECT l.lock_name, r.modes FROM pgrowlocks('dlock_lease') r
  JOIN dlock_lease l ON l.ctid = r.locked_row;
SELECT count(*) AS name_locks_serializable FROM my_name_locks;
COMMIT;
DROP VIEW my_name_locks;
DROP EXTENSION pgrowlocks;

--
-- templates
--
CREATE TABLE tenant_accounts (tenant text, id bigint, note text, fence_token bigint,
                              PRIMARY KEY (tenant, id));
CREATE TRIGGER tenant_fence BEFORE INSERT OR UPDATE ON tenant_accounts
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('{tenant}/acct:{id} {{v{{2}}}}', 'fence_token');
-- several columns and literal braces: the lock name is "acme/acct:7 {v{2}}"
SELECT dlock_acquire('acme/acct:7 {v{2}}', '1 min') AS ta \gset
INSERT INTO tenant_accounts VALUES ('acme', 7, 'ok', :ta);
-- the same token for another tenant's row: a different lock, rejected
INSERT INTO tenant_accounts VALUES ('umbrella', 7, 'no', :ta);
\echo :LAST_ERROR_SQLSTATE
-- column text: any type's output, UTF-8 included
SELECT dlock_acquire('счёт/acct:8 {v{2}}', '1 min') AS tb \gset
INSERT INTO tenant_accounts VALUES ('счёт', 8, 'utf8', :tb);
-- a NULL template column is misuse: 22004
INSERT INTO tenant_accounts (tenant, id, note, fence_token) VALUES (NULL, 9, 'null tenant', :tb);
\echo :LAST_ERROR_SQLSTATE
SELECT tenant, id, note FROM tenant_accounts ORDER BY id;

-- a template without {…} is one constant lock for the whole table
CREATE TABLE singleton (k int PRIMARY KEY, v text, fence_token bigint);
CREATE TRIGGER singleton_fence BEFORE INSERT OR UPDATE ON singleton
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('nightly-report', 'fence_token');
SELECT dlock_acquire('nightly-report', '1 min') AS tn \gset
INSERT INTO singleton VALUES (1, 'a', :tn), (2, 'b', :tn);
SELECT count(*) AS singleton_rows FROM singleton;

-- a domain over bigint is a bigint token column
CREATE DOMAIN fence_t AS bigint CHECK (VALUE > 0);
CREATE TABLE domained (id int PRIMARY KEY, fence_token fence_t);
CREATE TRIGGER domained_fence BEFORE INSERT OR UPDATE ON domained
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('account:{id}', 'fence_token');
INSERT INTO domained VALUES (6, :t6);

--
-- partitioned tables: the trigger is cloned to every partition, and each
-- partition's own column order is used
--
CREATE TABLE orders (region text, id int, qty int, fence_token bigint) PARTITION BY LIST (region);
CREATE TABLE orders_eu PARTITION OF orders FOR VALUES IN ('eu');
-- a partition whose columns are in another order
CREATE TABLE orders_us (fence_token bigint, qty int, id int, region text);
ALTER TABLE orders ATTACH PARTITION orders_us FOR VALUES IN ('us');
CREATE TRIGGER orders_fence BEFORE INSERT OR UPDATE ON orders
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('order:{region}:{id}', 'fence_token');
SELECT tgrelid::regclass AS partition_trigger FROM pg_trigger WHERE tgname = 'orders_fence' ORDER BY 1;
SELECT dlock_acquire('order:eu:1', '1 min') AS oe \gset
SELECT dlock_acquire('order:us:1', '1 min') AS ou \gset
INSERT INTO orders VALUES ('eu', 1, 5, :oe), ('us', 1, 5, :ou);
INSERT INTO orders VALUES ('us', 1, 6, :oe);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO orders_us (region, id, qty, fence_token) VALUES ('us', 2, 1, :ou);
\echo :LAST_ERROR_SQLSTATE
UPDATE orders SET qty = 7, fence_token = :ou WHERE region = 'us' AND id = 1;
-- moving a row to another partition changes its lock: it needs its old
-- lock checked in the transaction, and the token of its new lock
UPDATE orders SET region = 'us', fence_token = :oe WHERE region = 'eu' AND id = 1;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT dlock_check('order:eu:1', :oe) = :oe AS old_lock_checked;
UPDATE orders SET region = 'us', fence_token = :oe WHERE region = 'eu' AND id = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT dlock_acquire('order:us:3', '1 min') AS ou3 \gset
BEGIN;
SELECT dlock_check('order:eu:1', :oe) = :oe AS old_lock_checked;
UPDATE orders SET region = 'us', id = 3, fence_token = :ou3 WHERE region = 'eu' AND id = 1;
COMMIT;
SELECT tableoid::regclass AS part, region, id, qty FROM orders ORDER BY region, id;

--
-- replica mode skips the trigger, like any ordinary trigger
--
SET session_replication_role = replica;
UPDATE accounts SET balance = -1, fence_token = :t1 WHERE id = 5;
RESET session_replication_role;
SELECT id, balance, fence_token FROM accounts WHERE id = 5;

--
-- misuse: every one fails on the first write, with its SQLSTATE
--
CREATE TABLE misuse (id int PRIMARY KEY, small_token int, fence_token bigint, note text);
-- AFTER trigger: 39P01
CREATE TRIGGER m AFTER INSERT ON misuse FOR EACH ROW EXECUTE FUNCTION dlock_fence('m:{id}', 'fence_token');
INSERT INTO misuse VALUES (1, 1, :t6, 'x');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER m ON misuse;
-- statement-level: 39P01
CREATE TRIGGER m BEFORE INSERT ON misuse FOR EACH STATEMENT EXECUTE FUNCTION dlock_fence('m:{id}', 'fence_token');
INSERT INTO misuse VALUES (1, 1, :t6, 'x');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER m ON misuse;
-- AFTER DELETE: 39P01 (BEFORE DELETE is the fenced DELETE: sql/check.sql)
CREATE TRIGGER m AFTER DELETE ON accounts FOR EACH ROW EXECUTE FUNCTION dlock_fence('account:{id}', 'fence_token');
DELETE FROM accounts WHERE id = 6;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER m ON accounts;
-- AFTER TRUNCATE: 39P01
CREATE TRIGGER m AFTER TRUNCATE ON misuse EXECUTE FUNCTION dlock_fence('m:all', 'fence_token');
TRUNCATE misuse;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER m ON misuse;
-- a TRUNCATE trigger whose template names a column: 22023
CREATE TRIGGER m BEFORE TRUNCATE ON misuse EXECUTE FUNCTION dlock_fence('m:{id}', 'fence_token');
TRUNCATE misuse;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER m ON misuse;
-- wrong number of arguments: 39P01
CREATE TRIGGER m BEFORE INSERT ON misuse FOR EACH ROW EXECUTE FUNCTION dlock_fence();
INSERT INTO misuse VALUES (1, 1, :t6, 'x');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER m ON misuse;
CREATE TRIGGER m BEFORE INSERT ON misuse FOR EACH ROW EXECUTE FUNCTION dlock_fence('m:{id}');
INSERT INTO misuse VALUES (1, 1, :t6, 'x');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER m ON misuse;
CREATE TRIGGER m BEFORE INSERT ON misuse FOR EACH ROW EXECUTE FUNCTION dlock_fence('m:{id}', 'fence_token', 'live', 'extra');
INSERT INTO misuse VALUES (1, 1, :t6, 'x');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER m ON misuse;
-- unknown mode: 22023
CREATE TRIGGER m BEFORE INSERT ON misuse FOR EACH ROW EXECUTE FUNCTION dlock_fence('m:{id}', 'fence_token', 'LIVE');
INSERT INTO misuse VALUES (1, 1, :t6, 'x');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER m ON misuse;
-- missing token column: 22023
CREATE TRIGGER m BEFORE INSERT ON misuse FOR EACH ROW EXECUTE FUNCTION dlock_fence('m:{id}', 'token');
INSERT INTO misuse VALUES (1, 1, :t6, 'x');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER m ON misuse;
-- token column not bigint: 22023
CREATE TRIGGER m BEFORE INSERT ON misuse FOR EACH ROW EXECUTE FUNCTION dlock_fence('m:{id}', 'small_token');
INSERT INTO misuse VALUES (1, 1, :t6, 'x');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER m ON misuse;
-- a system column is not a column the template can use: 22023
CREATE TRIGGER m BEFORE INSERT ON misuse FOR EACH ROW EXECUTE FUNCTION dlock_fence('m:{ctid}', 'fence_token');
INSERT INTO misuse VALUES (1, 1, :t6, 'x');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER m ON misuse;
-- template column missing, unclosed, empty, stray brace, empty template: 22023
CREATE TRIGGER m BEFORE INSERT ON misuse FOR EACH ROW EXECUTE FUNCTION dlock_fence('m:{nope}', 'fence_token');
INSERT INTO misuse VALUES (1, 1, :t6, 'x');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER m ON misuse;
CREATE TRIGGER m BEFORE INSERT ON misuse FOR EACH ROW EXECUTE FUNCTION dlock_fence('m:{id', 'fence_token');
INSERT INTO misuse VALUES (1, 1, :t6, 'x');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER m ON misuse;
CREATE TRIGGER m BEFORE INSERT ON misuse FOR EACH ROW EXECUTE FUNCTION dlock_fence('m:{}', 'fence_token');
INSERT INTO misuse VALUES (1, 1, :t6, 'x');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER m ON misuse;
CREATE TRIGGER m BEFORE INSERT ON misuse FOR EACH ROW EXECUTE FUNCTION dlock_fence('m:id}', 'fence_token');
INSERT INTO misuse VALUES (1, 1, :t6, 'x');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER m ON misuse;
CREATE TRIGGER m BEFORE INSERT ON misuse FOR EACH ROW EXECUTE FUNCTION dlock_fence('', 'fence_token');
INSERT INTO misuse VALUES (1, 1, :t6, 'x');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER m ON misuse;
-- INSTEAD OF on a view: 39P01
CREATE VIEW misuse_v AS SELECT * FROM misuse;
CREATE TRIGGER m INSTEAD OF INSERT ON misuse_v FOR EACH ROW EXECUTE FUNCTION dlock_fence('m:{id}', 'fence_token');
INSERT INTO misuse_v VALUES (1, 1, :t6, 'x');
\echo :LAST_ERROR_SQLSTATE
DROP VIEW misuse_v;
-- called as a plain function: 39P01
SELECT dlock_fence();
\echo :LAST_ERROR_SQLSTATE
-- nothing was written by any misuse
SELECT count(*) AS misuse_rows FROM misuse;

--
-- one check per lock in a statement: a row whose lock and token already
-- passed in the statement is not checked again, but every row's own
-- history still is, and another lock or token is checked afresh
--
CREATE TABLE grouped (id int PRIMARY KEY, grp int, fence_token bigint);
CREATE TRIGGER grouped_fence BEFORE INSERT OR UPDATE OR DELETE ON grouped
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('grp:{grp}', 'fence_token');
SELECT dlock_acquire('grp:1', '1 min') AS g1 \gset
SELECT dlock_acquire('grp:2', '1 min') AS g2 \gset
INSERT INTO grouped SELECT i, 1 + i % 2, CASE i % 2 WHEN 0 THEN :g1 ELSE :g2 END
  FROM generate_series(1, 200) i;
UPDATE grouped SET fence_token = :g1 WHERE grp = 1;
SELECT grp, count(*), min(fence_token) = max(fence_token) AS one_token
  FROM grouped GROUP BY grp ORDER BY grp;
-- one stale token among the rows of one lock: rejected, nothing written
UPDATE grouped SET fence_token = CASE id WHEN 150 THEN :g1 - 1 ELSE :g1 END WHERE grp = 1;
\echo :LAST_ERROR_SQLSTATE
-- the same token for rows of another lock: rejected when that lock is reached
UPDATE grouped SET fence_token = :g1;
\echo :LAST_ERROR_SQLSTATE
-- a row carrying a higher token of its own (set while the trigger did not
-- fire) is rejected although earlier rows passed with the same token
SET session_replication_role = replica;
UPDATE grouped SET fence_token = :g1 + 1000 WHERE id = 180;
RESET session_replication_role;
UPDATE grouped SET fence_token = :g1 WHERE grp = 1;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FILTER (WHERE fence_token = :g1 + 1000) AS kept_higher FROM grouped;
-- the lease taken over between two statements: the next statement checks
-- again, and its first row is rejected
SELECT dlock_break('grp:2') AS broken;
SELECT dlock_acquire('grp:2', '1 min') > :g2 AS taken_over;
UPDATE grouped SET fence_token = :g2 WHERE grp = 2;
\echo :LAST_ERROR_SQLSTATE
-- a DELETE of many rows checks the token its transaction checked, once
BEGIN;
SELECT dlock_check('grp:1', :g1) = :g1 AS checked;
DELETE FROM grouped WHERE grp = 1 AND id <> 180;
SELECT count(*) AS grp_1_left FROM grouped WHERE grp = 1;
ROLLBACK;
BEGIN;
SELECT dlock_check('grp:1', :g1) = :g1 AS checked;
DELETE FROM grouped WHERE grp = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT grp, count(*) FROM grouped GROUP BY grp ORDER BY grp;
DROP TABLE grouped;
-- a row takes the lock name of the row before it only when the template's
-- columns hold the same bytes: text values, one lock's name a prefix of
-- the other's
CREATE TABLE tagged (id int PRIMARY KEY, tag text, fence_token bigint);
CREATE TRIGGER tagged_fence BEFORE INSERT OR UPDATE ON tagged
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('tag:{tag}', 'fence_token');
SELECT dlock_acquire('tag:a', '1 min') AS ta \gset
SELECT dlock_acquire('tag:ab', '1 min') AS tab \gset
INSERT INTO tagged VALUES (1, 'a', :ta), (2, 'a', :ta), (3, 'ab', :tab), (4, 'a', :ta);
UPDATE tagged SET fence_token = CASE tag WHEN 'a' THEN :ta ELSE :tab END;
-- 'tag:a''s token on the third row, under 'tag:ab': rejected
UPDATE tagged SET fence_token = :ta;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FILTER (WHERE fence_token = CASE tag WHEN 'a' THEN :ta ELSE :tab END)
       AS rows_kept FROM tagged;
DROP TABLE tagged;
-- a column whose text depends on a setting is printed for every row: the
-- second row's SET changes DateStyle before its trigger fires, so its lock
-- is 'day:07.12.2026', which nobody acquired
CREATE TABLE dated (id int PRIMARY KEY, d date, fence_token bigint);
CREATE TRIGGER dated_fence BEFORE UPDATE ON dated
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('day:{d}', 'fence_token');
SET datestyle = 'ISO, YMD';
SELECT dlock_acquire('day:2026-12-07', '1 min') AS td \gset
INSERT INTO dated VALUES (1, '2026-12-07', :td), (2, '2026-12-07', :td);
UPDATE dated SET fence_token = :td;
UPDATE dated SET fence_token = CASE WHEN id = 2 AND
  set_config('datestyle', 'German', true) IS NOT NULL THEN :td ELSE :td END;
RESET datestyle;
DROP TABLE dated;

--
-- the budget of 'live' name locks
--
CREATE EXTENSION pgrowlocks;
CREATE VIEW my_name_locks AS
  SELECT mode, granted FROM pg_locks
   WHERE locktype = 'advisory' AND objsubid = -12020
     AND pid = pg_backend_pid();
-- a transaction takes at most max_locks_per_transaction / 2 name locks in
-- 'live' mode (the lock manager's shared table is for every session); past
-- that it locks lease rows, and a name it holds already costs nothing
SELECT current_setting('max_locks_per_transaction')::int / 2 AS budget \gset
SELECT count(dlock_acquire('budget:' || i, '1 min')) = :budget + 8
       AS budget_leases
  FROM generate_series(1, :budget + 8) i;
BEGIN;
SELECT count(dlock_check(l.lock_name, l.token, 'live')) = :budget + 8
       AS checked
  FROM (SELECT lock_name, token FROM dlock_lease
         WHERE lock_name LIKE 'budget:%' ORDER BY lock_name) l;
SELECT count(*) = :budget AS name_locks_at_budget FROM my_name_locks;
SELECT count(*) AS rows_locked_past_budget FROM pgrowlocks('dlock_lease');
SELECT count(dlock_check(lock_name, token, 'live')) = :budget + 8
       AS checked_again
  FROM dlock_lease WHERE lock_name LIKE 'budget:%';
SELECT count(*) AS rows_locked_still FROM pgrowlocks('dlock_lease');
SELECT count(*) = :budget AS name_locks_still FROM my_name_locks;
COMMIT;
SELECT count(dlock_release(lock_name, token)) = :budget + 8 AS released
  FROM dlock_lease WHERE lock_name LIKE 'budget:%';
-- a takeover keeps the name lock only until it has written the row: a set
-- that takes the ended names over holds no lock-table entry per name
BEGIN;
SELECT cardinality(dlock_acquire_all(
         ARRAY(SELECT lock_name FROM dlock_lease
                WHERE lock_name LIKE 'budget:%' ORDER BY lock_name),
         '1 min')) = :budget + 8 AS set_taken_over;
SELECT count(*) AS name_locks_after_set FROM my_name_locks;
COMMIT;
SELECT count(dlock_release(lock_name, token)) = :budget + 8 AS set_released
  FROM dlock_lease WHERE lock_name LIKE 'budget:%';
--
-- a trigger's parsed arguments are kept across statements, and follow the
-- table's changes: a renamed template column makes the next statement
-- fail (22023); a template column dropped and added again is read at its
-- new place
--
CREATE TABLE cfg (id int PRIMARY KEY, k text, fence_token bigint);
SELECT dlock_acquire('cfg:a', '1 hour') AS tcfg \gset
CREATE TRIGGER f BEFORE INSERT OR UPDATE ON cfg FOR EACH ROW
  EXECUTE FUNCTION dlock_fence('cfg:{k}', 'fence_token');
INSERT INTO cfg VALUES (1, 'a', :tcfg);
PREPARE cfg_upd AS UPDATE cfg SET fence_token = fence_token WHERE id = 1;
EXECUTE cfg_upd;
EXECUTE cfg_upd;
ALTER TABLE cfg RENAME COLUMN k TO k2;
EXECUTE cfg_upd;
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE cfg RENAME COLUMN k2 TO k;
EXECUTE cfg_upd;
ALTER TABLE cfg DROP COLUMN k;
ALTER TABLE cfg ADD COLUMN k text;
INSERT INTO cfg (id, k, fence_token) VALUES (2, 'a', :tcfg);
INSERT INTO cfg (id, k, fence_token) VALUES (3, 'b', :tcfg);
\echo :LAST_ERROR_SQLSTATE
SELECT id, k FROM cfg ORDER BY id;
DEALLOCATE cfg_upd;
DROP TABLE cfg;
DROP VIEW my_name_locks;
DROP EXTENSION pgrowlocks;

DROP TABLE accounts, ledger, journal, tenant_accounts, singleton, domained, orders, misuse;
DROP DOMAIN fence_t;
DROP EXTENSION dlock;
