#!/usr/bin/perl
#
# test/t/003_fence_stress.pl
#	  The fencing trigger under concurrent writers with short leases
#	  (accepted tokens on a row never go backwards; stale writes are
#	  rejected with 55T01 and write nothing: src/fence.c's header).
#
# Four rows, each protected by its own lock 'stress:{id}', in two tables of
# the same shape: acct_latest (dlock_fence in 'latest' mode) and acct_live
# ('live' mode).  Eight pgbench clients run this transaction script:
#
#   1. pick a row, acquire its lock in autocommit with a ttl of 30-80 ms
#      (and a wait of 0-40 ms), or get 0 when it is held;
#   2. sleep 0-150 ms, often past the ttl, so that another client takes
#      the lease over and the first one's token becomes stale;
#   3. write the row of acct_latest, then the row of acct_live, with that
#      token, each in its own autocommit transaction, through
#      fenced_write(), which catches only 55T01 and records every outcome
#      (accepted, rejected with the kind of rejection, not acquired) in
#      table outcome;
#   4. release the lease half of the time.
#
# An AFTER UPDATE row trigger logs every accepted write with a number from
# sequence write_log_seq.  Why that number orders the accepted writes of a
# row by commit: the trigger runs inside the writing transaction, after
# the UPDATE locked the row, and the row stays locked until that
# transaction ends.  The next write of the same row can lock it, and so
# reach its own trigger, only after this transaction has committed (or
# aborted, taking its log row with it).  nextval() is not transactional
# and, with the sequence's default cache of 1, a later call in any session
# returns a greater number; so for each row, log order = commit order of
# its accepted writes.
#
# Checked afterwards:
#   - pgbench exited 0 and processed every transaction (fenced_write lets
#     every error but 55T01 through, which aborts the client);
#   - per row, the tokens of accepted writes in commit order never
#     decrease (lag() over the log);
#   - both tables accepted and rejected writes; rejections of the kind
#     "stale" (token older than the lease's token at the time, read from
#     the error's detail) happened, each with a token lower than the
#     current one; no rejection of a kind that cannot happen here;
#   - every accepted write is logged, and nothing else is; each row's final
#     token is that of its last logged write, and its value counts exactly
#     its accepted writes (rejected writes changed nothing);
#   - 'live' mode: an accepted write still saw its own token as the
#     lease's token in the AFTER trigger (no takeover could commit while it
#     was uncommitted), and a token 'live' accepted was also accepted by
#     'latest' in the same pgbench transaction.
#
# No timing or throughput is asserted; which writes are accepted depends on
# the scheduling of each run.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;

my $clients = 8;
my $per_client = 60;
my $transactions = $clients * $per_client;
my $rows = 4;

my $node = dlock_node('dlock_stress', conf => "max_connections = 30\n");

$node->safe_psql(
	'postgres', qq{
CREATE EXTENSION dlock;

CREATE TABLE acct_latest (id int PRIMARY KEY, val int NOT NULL, fence_token bigint);
CREATE TABLE acct_live (LIKE acct_latest INCLUDING ALL);

CREATE TRIGGER fence BEFORE INSERT OR UPDATE ON acct_latest FOR EACH ROW
  EXECUTE FUNCTION dlock_fence('stress:{id}', 'fence_token', 'latest');
CREATE TRIGGER fence BEFORE INSERT OR UPDATE ON acct_live FOR EACH ROW
  EXECUTE FUNCTION dlock_fence('stress:{id}', 'fence_token', 'live');

-- Every accepted write, numbered in commit order per row (see the header).
-- lease_token is the lease's token as the writing transaction sees it
-- after its UPDATE.
CREATE SEQUENCE write_log_seq;
CREATE TABLE write_log (
  seq bigint PRIMARY KEY,
  tab text NOT NULL,
  id int NOT NULL,
  token bigint NOT NULL,
  lease_token bigint
);
CREATE FUNCTION log_write() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
  INSERT INTO write_log (seq, tab, id, token, lease_token)
  VALUES (nextval('write_log_seq'), TG_TABLE_NAME, NEW.id, NEW.fence_token,
          (SELECT token FROM dlock_leases WHERE lock_name = 'stress:' || NEW.id));
  RETURN NULL;
END
\$\$;
CREATE TRIGGER log_write AFTER UPDATE ON acct_latest FOR EACH ROW
  EXECUTE FUNCTION log_write();
CREATE TRIGGER log_write AFTER UPDATE ON acct_live FOR EACH ROW
  EXECUTE FUNCTION log_write();

-- Every attempted write.  kind and current_token come from the 55T01
-- detail of a rejection.
CREATE TABLE outcome (
  n bigserial PRIMARY KEY,
  tab text NOT NULL,
  id int NOT NULL,
  token bigint,
  outcome text NOT NULL,
  kind text,
  current_token bigint,
  detail text
);

-- fenced_write adds 1 to val of row p_id of p_tab with token p_token and
-- records the outcome.  Token 0 means the lease was not acquired: nothing
-- is written.  Only 55T01 is caught; any other error (or an UPDATE that
-- finds no row) aborts the pgbench client and fails the run.
CREATE FUNCTION fenced_write(p_tab regclass, p_id int, p_token bigint)
RETURNS text LANGUAGE plpgsql AS \$\$
DECLARE
  v_rows bigint;
  v_detail text;
BEGIN
  IF p_token = 0 THEN
    INSERT INTO outcome (tab, id, outcome)
    VALUES (p_tab::text, p_id, 'not acquired');
    RETURN 'not acquired';
  END IF;
  BEGIN
    EXECUTE format('UPDATE %s SET val = val + 1, fence_token = \$2 WHERE id = \$1', p_tab)
      USING p_id, p_token;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    IF v_rows <> 1 THEN
      RAISE EXCEPTION 'updated % rows of %, not 1', v_rows, p_tab;
    END IF;
    INSERT INTO outcome (tab, id, token, outcome)
    VALUES (p_tab::text, p_id, p_token, 'accepted');
    RETURN 'accepted';
  EXCEPTION WHEN SQLSTATE '55T01' THEN
    GET STACKED DIAGNOSTICS v_detail = PG_EXCEPTION_DETAIL;
    INSERT INTO outcome (tab, id, token, outcome, kind, current_token, detail)
    VALUES (p_tab::text, p_id, p_token, 'rejected',
            CASE
              WHEN v_detail ~ 'token \\d+ is not current; the current token is \\d+\\.\$' THEN 'stale'
              WHEN v_detail ~ 'lower than token \\d+ it already had' THEN 'row'
              WHEN v_detail ~ 'is current, but its lease expired at' THEN 'expired'
              WHEN v_detail ~ 'is current, but its lease was released at' THEN 'released'
              ELSE 'other'
            END,
            substring(v_detail from 'the current token is (\\d+)')::bigint,
            v_detail);
    RETURN 'rejected';
  END;
END
\$\$;

-- The rows start with a token of their lock, whose lease is then released.
SELECT dlock_acquire('stress:' || i, '1 hour') FROM generate_series(1, $rows) i;
INSERT INTO acct_latest
  SELECT i, 0, token FROM generate_series(1, $rows) i
    JOIN dlock_leases ON lock_name = 'stress:' || i;
INSERT INTO acct_live SELECT * FROM acct_latest;
SELECT dlock_release(lock_name, token) FROM dlock_leases;
});

is($node->safe_psql('postgres', 'SELECT count(*) FROM write_log'),
	'0', 'the initial inserts are not logged');

# The transaction script.  Each SQL line is its own autocommit transaction.
$node->pgbench(
	"-n -c $clients -j $clients -t $per_client",
	0,
	[
		qr{number of transactions actually processed: $transactions/$transactions},
		qr{number of failed transactions: 0 }
	],
	[qr{^$}],
	'pgbench: concurrent fenced writers with short leases',
	{
		'003_fence_stress.sql' => qq{
\\set id random(1, $rows)
\\set ttl random(30, 80)
\\set wait random(0, 40)
\\set pause random(0, 150)
SELECT coalesce(dlock_acquire('stress:' || :id, :ttl * interval '1 millisecond', :wait * interval '1 millisecond', 'pgbench client ' || :client_id), 0) AS tok \\gset
\\sleep :pause ms
SELECT fenced_write('acct_latest', :id, :tok);
SELECT fenced_write('acct_live', :id, :tok);
\\set rel random(0, 1)
\\if :tok > 0 and :rel = 1
SELECT dlock_release('stress:' || :id, :tok);
\\endif
}
	},
	'postgres');

note(
	"outcomes (table, outcome, kind, count):\n",
	sql(q{
SELECT tab, outcome, coalesce(kind, '-'), count(*)
  FROM outcome GROUP BY 1, 2, 3 ORDER BY 1, 2, 3}));

is(sql('SELECT count(*) FROM outcome'),
	2 * $transactions, 'every transaction made its two writes');
is( sql(
		q{SELECT count(*) FROM outcome WHERE tab = 'acct_latest' AND outcome = 'not acquired'}
	),
	sql(
		q{SELECT count(*) FROM outcome WHERE tab = 'acct_live' AND outcome = 'not acquired'}
	),
	'both tables saw the same acquire failures');

for my $tab (qw(acct_latest acct_live))
{
	cmp_ok(
		sql(
			qq{SELECT count(*) FROM outcome WHERE tab = '$tab' AND outcome = 'accepted'}
		),
		'>', 0,
		"$tab: some writes were accepted");
	cmp_ok(
		sql(
			qq{SELECT count(*) FROM outcome WHERE tab = '$tab' AND outcome = 'rejected'}
		),
		'>', 0,
		"$tab: some writes were rejected");

	# The point of the test: commit order of accepted writes per row.
	is( sql(
			qq{
SELECT count(*) FROM (
  SELECT token < lag(token) OVER (PARTITION BY id ORDER BY seq) AS backwards
    FROM write_log WHERE tab = '$tab') s
 WHERE backwards}),
		'0',
		"$tab: per row, accepted tokens in commit order never decrease");

	# A stale writer was really fenced off: the lease's token at the time
	# of the write, named in the error detail, was newer than its token.
	cmp_ok(
		sql(
			qq{SELECT count(*) FROM outcome WHERE tab = '$tab' AND kind = 'stale' AND token < current_token}
		),
		'>', 0,
		"$tab: writes with a token older than the lease's token were rejected");
	is( sql(
			qq{SELECT count(*) FROM outcome WHERE tab = '$tab' AND kind = 'stale' AND NOT token < current_token}
		),
		'0',
		"$tab: every stale rejection names a newer current token");

	is( sql(
			qq{SELECT count(*) FROM outcome WHERE tab = '$tab' AND outcome = 'accepted'}
		),
		sql(qq{SELECT count(*) FROM write_log WHERE tab = '$tab'}),
		"$tab: every accepted write is logged, and nothing else");
	is( sql(
			qq{
SELECT count(*)
  FROM $tab a
  LEFT JOIN LATERAL (SELECT token FROM write_log l
                      WHERE l.tab = '$tab' AND l.id = a.id
                      ORDER BY seq DESC LIMIT 1) l ON true
 WHERE l.token IS DISTINCT FROM a.fence_token}),
		'0',
		"$tab: each row carries the token of its last logged write");
	is( sql(
			qq{
SELECT count(*)
  FROM $tab a
 WHERE a.val <> (SELECT count(*) FROM outcome o
                  WHERE o.tab = '$tab' AND o.id = a.id AND o.outcome = 'accepted')}
		),
		'0',
		"$tab: each row's value counts its accepted writes (rejected writes changed nothing)"
	);
	is( sql(
			qq{SELECT count(*) FROM write_log WHERE tab = '$tab' AND NOT lease_token >= token}
		),
		'0',
		"$tab: the lease's token is never older than an accepted token");
}

# Rejections that cannot happen in this run: the lock always has a lease
# and the tokens are its own; 'latest' ignores expiry and release.
is( sql(
		q{SELECT string_agg(DISTINCT detail, ' / ') FROM outcome WHERE kind = 'other'}
	),
	'',
	'no rejection other than stale token, lower than the row\'s, or ended lease'
);
is( sql(
		q{SELECT count(*) FROM outcome WHERE tab = 'acct_latest' AND kind IN ('expired', 'released')}
	),
	'0',
	'acct_latest: no rejection for an expired or released lease');

# 'live' holds the lease row until the write commits: the AFTER trigger
# still sees its own token as the lease's token.
is( sql(
		q{SELECT count(*) FROM write_log WHERE tab = 'acct_live' AND lease_token IS DISTINCT FROM token}
	),
	'0',
	'acct_live: no takeover between the check of an accepted write and its commit'
);

# 'live' is stricter than 'latest': the acct_live write comes after the
# acct_latest write of the same transaction (a token is handed to one
# pgbench transaction only), so if 'live' found the token current, 'latest'
# did too.
is( sql(
		q{
SELECT count(*)
  FROM outcome v JOIN outcome l USING (token)
 WHERE v.tab = 'acct_live' AND v.outcome = 'accepted'
   AND l.tab = 'acct_latest' AND l.outcome <> 'accepted'}),
	'0',
	'a token accepted by acct_live was also accepted by acct_latest');

$node->stop;
done_testing();
