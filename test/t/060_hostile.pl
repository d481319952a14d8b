# test/t/060_hostile.pl: what ordinary roles cannot do to other roles'
# leases and fenced rows (docs/guarantees.md, "Threat model").
#
# Every attack runs as an ordinary LOGIN role with no grants beyond what a
# holder or a writer of a fenced table needs, on a server with dlock
# preloaded.  Roles: alice and bob hold leases and write fenced tables;
# mallory has no privilege on any fenced table; ops was granted
# dlock_break.  The classes, with the rule each checks:
#
#   1. A write under a lock the writer does not hold: a row that changes
#      lock in one statement (UPDATE of a template column, INSERT ... ON
#      CONFLICT DO UPDATE, MERGE, a move between partitions whose DELETE
#      is not fenced, a cascaded foreign key, a move without a token of its
#      own) is a DELETE under
#      the old lock (checked in the transaction) and an INSERT under the
#      new one, in modes latest, live and seen.  Bob, holding only the new
#      lock, moves none of alice's rows; alice, holding both, moves hers.
#   2. dlock.max_ttl bounds the expiry actually written: intervals that mix
#      months and days cannot pass a lease longer than the limit, in
#      acquire, renew and the set functions, and for a per-role setting.
#   3. Pinning: a role that is not the lease's holder (nor a member of its
#      role) cannot keep it from being taken over, with dlock_check in
#      mode live nor with a live fence on a table of its own (42501), nor
#      by locking rows of dlock_leases or the view itself.
#   4. Bricking mode seen: mallory cannot raise (a huge token) or hold (an
#      open transaction) a mark of a lock whose tables it may not write,
#      and a table of its own fenced with the same template moves marks of
#      its own only; names over 512 bytes are refused by the trigger.
#   5. A stale holder learns it lost the lease: a token that is not current
#      gives false, whoever holds the lease now; 42501 only for the current
#      token of a lease the caller may not act for.
#
# Classes 6-8 (waiting queues, events) are in 061_hostile_wait.pl and
# 062_hostile_events.pl.  Nothing here depends on timing: leases last an
# hour, and a blocked write is detected by lock_timeout (a waiting
# statement fails with 55P03).
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;

my $node = dlock_node(
	'hostile',
	preload => 1,
	setup => q{
CREATE EXTENSION dlock;
CREATE ROLE alice LOGIN;
CREATE ROLE bob LOGIN;
CREATE ROLE mallory LOGIN;
CREATE ROLE ops LOGIN;
GRANT EXECUTE ON FUNCTION dlock_break(text) TO ops;
});

# as($role, $sql): $sql's output, run as $role (dies on an error).
sub as
{
	my ($role, $sql) = @_;
	return $node->safe_psql('postgres', $sql,
		extra_params => [ '-U', $role ]);
}

# state_as($role, $sql): the SQLSTATE of $sql's last statement as $role.
sub state_as
{
	my ($role, $sql) = @_;
	my ($state) = sqlstate_of($node, $sql, role => $role);
	return $state;
}

# acquire($role, $name): a new token of $name for $role (1 hour).
sub acquire
{
	my ($role, $name) = @_;
	my $t = as($role, "SELECT dlock_acquire('$name', '1 hour')");
	die "$role could not acquire $name" unless $t =~ /^\d+$/;
	return $t;
}

#
# 1. Moving a row out of a lock the writer does not hold.
#
for my $mode (qw(latest live seen))
{
	my $t = "mv_$mode";
	$node->safe_psql(
		'postgres', qq{
CREATE TABLE $t (id int PRIMARY KEY, bal int, tok bigint);
CREATE TRIGGER ${t}_fence BEFORE INSERT OR UPDATE OR DELETE ON $t
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('$t:{id}', 'tok', '$mode');
CREATE TABLE ${t}_p (region text, id int, tok bigint, PRIMARY KEY (region, id))
  PARTITION BY LIST (region);
CREATE TABLE ${t}_p_eu PARTITION OF ${t}_p FOR VALUES IN ('eu');
CREATE TABLE ${t}_p_us PARTITION OF ${t}_p FOR VALUES IN ('us');
CREATE TRIGGER ${t}_p_fence BEFORE INSERT OR UPDATE ON ${t}_p
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('${t}_p:{region}:{id}', 'tok', '$mode');
CREATE TABLE ${t}_parent (id int PRIMARY KEY);
CREATE TABLE ${t}_child (pid int PRIMARY KEY REFERENCES ${t}_parent ON UPDATE CASCADE,
                         tok bigint);
CREATE TRIGGER ${t}_child_fence BEFORE INSERT OR UPDATE OR DELETE ON ${t}_child
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('${t}_c:{pid}', 'tok', '$mode');
INSERT INTO ${t}_parent VALUES (1);
GRANT SELECT, INSERT, UPDATE, DELETE ON $t, ${t}_p, ${t}_child, ${t}_parent TO alice, bob;
});
	my %a = map { $_ => acquire('alice', $_) } ("$t:1", "$t:2", "${t}_p:eu:1", "${t}_c:1");
	my %b = map { $_ => acquire('bob', $_) } ("$t:9", "${t}_p:us:1", "${t}_c:9");
	as('alice', qq{
INSERT INTO $t VALUES (1, 100, $a{"$t:1"});
INSERT INTO ${t}_p VALUES ('eu', 1, $a{"${t}_p:eu:1"});
INSERT INTO ${t}_child VALUES (1, $a{"${t}_c:1"});
});
	my $check9 = "SELECT dlock_check('$t:9', $b{\"$t:9\"}, '$mode')";
	my %attack = (
		'UPDATE of the template column' =>
		  "UPDATE $t SET id = 9, tok = $b{\"$t:9\"} WHERE id = 1",
		'INSERT ... ON CONFLICT DO UPDATE' =>
		  "INSERT INTO $t SELECT 1, 0, token FROM dlock_leases WHERE lock_name = '$t:1' ON CONFLICT (id) DO UPDATE SET id = 9, tok = $b{\"$t:9\"}",
		'MERGE' =>
		  "MERGE INTO $t USING (VALUES (1)) v(id) ON $t.id = v.id WHEN MATCHED THEN UPDATE SET id = 9, tok = $b{\"$t:9\"}",
		'a move without a token of its own, the new lock checked' =>
		  "BEGIN; $check9; UPDATE $t SET id = 9 WHERE id = 1",
		'a move between partitions' =>
		  "UPDATE ${t}_p SET region = 'us', tok = $b{\"${t}_p:us:1\"} WHERE region = 'eu' AND id = 1",
		'a cascaded foreign key, the new lock checked' =>
		  "BEGIN; SELECT dlock_check('${t}_c:9', $b{\"${t}_c:9\"}, '$mode'); UPDATE ${t}_parent SET id = 9 WHERE id = 1",
	);
	for my $form (sort keys %attack)
	{
		# The proposed row of INSERT ... ON CONFLICT passes its INSERT
		# fence with alice's current token, which bob reads from
		# dlock_leases; in mode live that token is alice's to use (42501).
		my $want =
		  ($form =~ /ON CONFLICT/ && $mode eq 'live') ? '42501' : '55T01';
		is(state_as('bob', $attack{$form}), $want,
			"1 ($mode): bob, holding only the new lock, cannot move alice's row by $form ($want)");
	}
	is( $node->safe_psql(
			'postgres', qq{
SELECT (SELECT string_agg(id || ':' || tok, ',') FROM $t),
       (SELECT string_agg(region || ':' || id || ':' || tok, ',') FROM ${t}_p),
       (SELECT string_agg(pid || ':' || tok, ',') FROM ${t}_child)}),
		"1:$a{\"$t:1\"}|eu:1:$a{\"${t}_p:eu:1\"}|1:$a{\"${t}_c:1\"}",
		"1 ($mode): alice's rows are where she wrote them, with her tokens");
	# alice holds both locks: she may move her row
	state_as('alice',
		"BEGIN; SELECT dlock_check('$t:1', $a{\"$t:1\"}, '$mode'); UPDATE $t SET id = 2, tok = $a{\"$t:2\"} WHERE id = 1; COMMIT"
	);
	is($node->safe_psql('postgres', "SELECT id || ':' || tok FROM $t"),
		"2:$a{\"$t:2\"}",
		"1 ($mode): alice, holding both locks, moved her row, with the new lock's token");
}

#
# 2. dlock.max_ttl bounds the lease actually written.
#
my $mt = acquire('mallory', 'ttl:own');
for my $call (
	"dlock_acquire('ttl:a', '12 mon -359 days')",
	"dlock_acquire('ttl:b', '1000000 mon -29999999 days')",
	"dlock_acquire_all(ARRAY['ttl:c'], '12 mon -359 days')",
	"(SELECT token FROM dlock_acquire_any(ARRAY['ttl:d'], '12 mon -359 days'))",
	"dlock_renew('ttl:own', $mt, '12 mon -359 days')",
	"dlock_renew_each(ARRAY['ttl:own'], ARRAY[$mt], '12 mon -359 days')")
{
	is(state_as('mallory', "SELECT $call"),
		'22023', "2: $call is refused under dlock.max_ttl = 1d (22023)");
}
$node->safe_psql('postgres', "ALTER ROLE mallory SET dlock.max_ttl = '1h'");
is(state_as('mallory', "SELECT dlock_acquire('ttl:e', '12 mon -360 days 1 minute')"),
	'22023',
	"2: a ttl of 1 minute as an interval but 5 or 6 days by the calendar is refused under mallory's dlock.max_ttl = 1h"
);
is(state_as('mallory', "SELECT dlock_renew('ttl:own', $mt, '2 hours')"),
	'22023', "2: a renew for 2 hours is refused under mallory's dlock.max_ttl = 1h");
is(as('mallory', "SELECT dlock_acquire('ttl:f', '59 min') IS NOT NULL"),
	't', '2: a lease of 59 minutes is granted under dlock.max_ttl = 1h');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM dlock_leases
 WHERE holder_role = 'mallory' AND expires_at - renewed_at > interval '1 day'}),
	'0',
	"2: none of mallory's leases ends more than a day after it was granted or renewed");
$node->safe_psql('postgres', 'ALTER ROLE mallory RESET dlock.max_ttl');

#
# 3. Pinning a lease one does not hold.
#
# pinned($name, $open_sql, $what): mallory runs $open_sql in an open
# transaction with alice's current token of $name, alice then releases,
# bob asks for the name: granted unless mallory's transaction keeps the
# lease row locked.
sub pinned
{
	my ($name, $open_sql, $what) = @_;
	my $tok = acquire('alice', $name);
	my $s = bg_session($node, 'mallory', 'postgres', 'mallory');
	$open_sql =~ s/TOKEN/$tok/g;
	bg_start($s, "BEGIN;\n$open_sql;");
	my (undef, $state) = bg_finish($s);
	is($state, '42501', "3: mallory's $what with alice's current token: 42501");
	is(as('alice', "SELECT dlock_release('$name', $tok)"),
		't', "3: alice releases $name while mallory's transaction is open");
	like(as('bob', "SELECT dlock_acquire('$name', '1 hour')"),
		qr/^\d+$/,
		"3: bob gets $name at once: mallory's $what kept nothing locked");
	bg_start($s, 'ROLLBACK;');
	bg_finish($s);
	bg_close($s);
	return;
}
pinned('pin:a', "SELECT dlock_check('pin:a', TOKEN, 'live')",
	"dlock_check in mode live");
pinned(
	'pin:b', q{
CREATE TEMP TABLE mine (id int, tok bigint);
CREATE TRIGGER mine_fence BEFORE INSERT ON mine
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('pin:b', 'tok', 'live');
INSERT INTO mine VALUES (1, TOKEN)},
	'live fence on a table of its own');
# A foreign key's cascade writes the referencing table as its owner; the
# holder-role rule judges the session's role.  pinc_child is alice's, and
# fenced in mode live: mallory, who may delete from the parent, cannot pin
# alice's lease through the cascade; alice's own cascade into a table that
# another role owns is hers (it used to fail with 42501).
$node->safe_psql(
	'postgres', q{
CREATE TABLE pinc_parent (id int PRIMARY KEY);
CREATE TABLE pinc_child (pid int PRIMARY KEY REFERENCES pinc_parent ON DELETE CASCADE, tok bigint);
CREATE TRIGGER pinc_child_fence BEFORE INSERT OR UPDATE OR DELETE ON pinc_child
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('pinc:{pid}', 'tok', 'live');
ALTER TABLE pinc_child OWNER TO alice;
INSERT INTO pinc_parent VALUES (1), (2);
GRANT SELECT, DELETE ON pinc_parent TO mallory, alice;
CREATE TABLE pinc_child2 (pid int PRIMARY KEY REFERENCES pinc_parent ON DELETE CASCADE, tok bigint);
CREATE TRIGGER pinc_child2_fence BEFORE INSERT OR UPDATE OR DELETE ON pinc_child2
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('pinc2:{pid}', 'tok', 'live');
ALTER TABLE pinc_child2 OWNER TO ops;
GRANT INSERT ON pinc_child2 TO alice;
});
{
	my $tok = acquire('alice', 'pinc:1');
	as('alice', "INSERT INTO pinc_child VALUES (1, $tok)");
	my $s = bg_session($node, 'mallory', 'postgres', 'mallory');
	bg_start($s,
		"BEGIN;
SELECT dlock_check('pinc:1', $tok);
DELETE FROM pinc_parent WHERE id = 1;");
	my (undef, $state) = bg_finish($s);
	is($state, '42501',
		"3: mallory's DELETE that cascades into alice's live-fenced table: 42501 (the session's role is judged, not the table's owner)"
	);
	is(as('alice', "SELECT dlock_release('pinc:1', $tok)"),
		't', "3: alice releases pinc:1 while mallory's transaction is open");
	like(as('bob', "SELECT dlock_acquire('pinc:1', '1 hour')"),
		qr/^\d+\z/, '3: bob gets pinc:1 at once: the cascade kept nothing locked');
	bg_start($s, 'ROLLBACK;');
	bg_finish($s);
	bg_close($s);
	my $tok2 = acquire('alice', 'pinc2:2');
	as('alice', "INSERT INTO pinc_child2 VALUES (2, $tok2)");
	is( state_as(
			'alice',
			"BEGIN; SELECT dlock_check('pinc2:2', $tok2, 'live'); DELETE FROM pinc_parent WHERE id = 2; COMMIT"
		),
		'00000',
		"3: alice's own DELETE that cascades into ops's live-fenced table under her lease is accepted"
	);
}
# From PostgreSQL 16 on a membership may give neither the role's
# privileges nor SET ROLE: it does not let a role act for the holder.
SKIP:
{
	skip 'memberships WITH INHERIT FALSE, SET FALSE exist from PostgreSQL 16 on', 2
	  if $node->pg_version < 16;
	$node->safe_psql('postgres',
		'CREATE ROLE auditor LOGIN; GRANT alice TO auditor WITH INHERIT FALSE, SET FALSE');
	my $tok = acquire('alice', 'aud:1');
	is(state_as('auditor', "SELECT dlock_release('aud:1', $tok)"),
		'42501',
		"3: a member of alice WITH INHERIT FALSE, SET FALSE cannot release alice's lease (42501)");
	is(state_as('auditor', "BEGIN; SELECT dlock_check('aud:1', $tok, 'live')"),
		'42501', "3: nor keep it from being taken over (42501)");
}
is(state_as('mallory', 'BEGIN; SELECT * FROM dlock_leases FOR KEY SHARE'),
	'42501', '3: mallory cannot lock rows of dlock_leases (42501)');
is(state_as('mallory', 'BEGIN; LOCK TABLE dlock_leases IN SHARE ROW EXCLUSIVE MODE'),
	'42501', '3: mallory cannot lock the view dlock_leases beyond reading (42501)');

#
# 4. Bricking a lock in mode seen.
#
$node->safe_psql(
	'postgres', q{
CREATE TABLE shard (id int PRIMARY KEY, tok bigint);
CREATE TRIGGER shard_fence BEFORE INSERT OR UPDATE ON shard
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('ord:{id}', 'tok', 'seen');
GRANT SELECT, INSERT, UPDATE ON shard TO alice;
CREATE TABLE names (name text PRIMARY KEY, tok bigint);
CREATE TRIGGER names_fence BEFORE INSERT ON names
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('{name}', 'tok', 'seen');
GRANT INSERT ON names TO alice;
});
as('alice', 'INSERT INTO shard VALUES (1, 100), (2, 100)');
is(state_as('mallory', "SELECT dlock_check('ord:1', 9223372036854775807, 'seen')"),
	'42501',
	"4: mallory, who may write no table fenced by ord:1, cannot raise its mark (42501)");
is( state_as(
		'mallory', q{
CREATE TEMP TABLE own (id int PRIMARY KEY, tok bigint);
CREATE TRIGGER own_fence BEFORE INSERT ON own
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('ord:{id}', 'tok', 'seen');
INSERT INTO own VALUES (1, 9223372036854775807);
SELECT dlock_check('ord:1', 9223372036854775807, 'seen')}),
	'00000',
	'4: mallory may fence a table of her own with the same template and write a huge token there'
);
is(state_as('alice', 'UPDATE shard SET tok = 101 WHERE id = 1'),
	'00000',
	"4: alice's next write under ord:1 is accepted: mallory's table moved marks of its own only"
);
{
	my $s = bg_session($node, 'mallory', 'postgres', 'mallory');
	bg_start($s, "BEGIN;\nSELECT dlock_check('ord:2', 100, 'seen');");
	my (undef, $state) = bg_finish($s);
	is($state, '42501', "4: mallory cannot hold ord:2's mark in an open transaction (42501)");
	is( state_as(
			'alice', "SET lock_timeout = '5s'; UPDATE shard SET tok = 101 WHERE id = 2"),
		'00000',
		"4: alice's write under ord:2 does not wait for mallory's open transaction");
	bg_start($s, 'ROLLBACK;');
	bg_finish($s);
	bg_close($s);
}
# A dlock_check in mode seen that is interrupted while it reads the
# catalog (here a lock timeout on pg_trigger) does not leave the session
# without the list of fenced tables: the next check reads it again.
{
	my $lock = bg_session($node, 'locker');
	bg_start($lock, "BEGIN;
LOCK TABLE pg_trigger IN ACCESS EXCLUSIVE MODE;");
	bg_finish($lock);
	# a relcache invalidation first, so that alice's session must read pg_trigger
	$node->safe_psql('postgres', 'CREATE TABLE inval_me (id int)');
	my $s = bg_session($node, 'alice', 'postgres', 'alice');
	bg_start($s,
		"SET lock_timeout = '200ms';
SELECT dlock_check('ord:1', 200, 'seen');");
	my (undef, $state) = bg_finish($s);
	is($state, '55P03', '4: a seen check that waits for pg_trigger times out (55P03)');
	bg_start($lock, 'COMMIT;');
	bg_finish($lock);
	bg_close($lock);
	bg_start($s, "SELECT dlock_check('ord:1', 200, 'seen');");
	my ($out, $state2) = bg_finish($s);
	is("$state2 $out", '00000 200',
		"4: the same session's next seen check reads the fenced tables again and passes");
	bg_close($s);
}
is(state_as('alice', "INSERT INTO names VALUES (repeat('n', 513), 1)"),
	'22023', '4: a lock name of 513 bytes built by a seen trigger is refused (22023)');
is( $node->safe_psql(
		'postgres', 'SELECT count(*) FROM dlock_fence_mark WHERE octet_length(lock_name) > 512'),
	'0',
	'4: no mark has a name over 512 bytes');

#
# 5. A stale holder gets false, not an error.
#
my $old = acquire('alice', 'st:1');
is(as('ops', "SELECT dlock_break('st:1')"), 't', '5: ops breaks alice\'s lease');
my $new = acquire('bob', 'st:1');
for my $call (
	"dlock_renew('st:1', $old, '1 hour')",
	"dlock_release('st:1', $old)",
	"dlock_renew_each(ARRAY['st:1'], ARRAY[${old}::bigint], '1 hour')",
	"dlock_release_each(ARRAY['st:1'], ARRAY[${old}::bigint])")
{
	my ($state, $out) = sqlstate_of($node, "SELECT $call", role => 'alice');
	is("$state $out", ($call =~ /each/ ? '00000 {f}' : '00000 f'),
		"5: alice, whose lease bob now holds, gets false from $call");
}
is(state_as('mallory', "SELECT dlock_release('st:1', $new)"),
	'42501', "5: mallory naming bob's current token gets 42501");
{
	my ($state, $out) =
	  sqlstate_of($node, "SELECT dlock_release('st:1', $new - 1)", role => 'mallory');
	is("$state $out", '00000 f',
		'5: mallory naming a token that is not current gets false');
}
is($node->safe_psql('postgres', "SELECT token, live FROM dlock_leases WHERE lock_name = 'st:1'"),
	"$new|t", "5: bob's lease is untouched");

ok(!crash_lines($node), 'no server process crashed');
$node->stop;
done_testing();
