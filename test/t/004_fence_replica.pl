#!/usr/bin/perl
#
# test/t/004_fence_replica.pl
#	  The fencing trigger does not fire where ordinary triggers do not
#	  (logical replication apply and session_replication_role = replica
#	  skip it, like any ordinary trigger: docs/sql-reference.md, "What the
#	  trigger covers, and what it does not").
#
# Part 1, one node: with session_replication_role = origin (the default)
# a stale write to a protected table is rejected with 55T01; with replica
# it is accepted, and so is a row with no token for a lock never acquired.
# ALTER TABLE ... ENABLE ALWAYS TRIGGER makes the trigger fire in replica
# mode too.
#
# Part 2, logical replication: the protected table, with the same trigger,
# exists on a publisher and a subscriber, each with its own leases (the
# lease table is not published).  The subscriber has issued many more
# tokens than the publisher and holds the lease of one of the locks, so
# every row the publisher writes carries a token that is stale (or has no
# lease at all) on the subscriber, and a local write of such a row there
# is rejected.  The initial table sync and the apply of later changes run
# with session_replication_role = replica and apply those rows all the
# same, with no 55T01 in the subscriber's log.  With the subscriber's
# trigger set to ENABLE ALWAYS, the apply worker is rejected (55T01 in its
# log) and the change is not applied; once the subscription is disabled,
# the trigger set back to the default and the subscription enabled again,
# the held change is applied.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;

my $pub = PostgreSQL::Test::Cluster->new('dlock_publisher');
$pub->init(allows_streaming => 'logical');
$pub->start;

my $sub = PostgreSQL::Test::Cluster->new('dlock_subscriber');
$sub->init;

# The SQLSTATE in the log lines, and a quick restart of a failed apply
# worker (the default is 5s).
$sub->append_conf(
	'postgresql.conf', q{
log_error_verbosity = verbose
wal_retrieve_retry_interval = '200ms'
});
$sub->start;

# rejected runs $sql on $node and checks that it fails with 55T01 for
# relation $rel.  The SQLSTATE is read from psql's LAST_ERROR_SQLSTATE and
# from the verbose error text.
sub rejected
{
	my ($node, $sql, $rel, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;

	my ($stdout, $stderr) = psql_error($node, $sql);
	is($stdout, 'true 55T01', "$what: fails with SQLSTATE 55T01");
	like(
		$stderr,
		qr/ERROR:  55T01: fencing token rejected for relation "$rel"/,
		"$what: reports the fencing rejection");
	return;
}

# ---------------------------------------------------------------------
# Part 1: session_replication_role on one node.
# ---------------------------------------------------------------------

$pub->safe_psql(
	'postgres', q{
CREATE EXTENSION dlock;
CREATE TABLE solo (id int PRIMARY KEY, val text, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE ON solo FOR EACH ROW
  EXECUTE FUNCTION dlock_fence('solo:{id}', 'fence_token');
});

my $t1 = $pub->safe_psql('postgres',
	"SELECT dlock_acquire('solo:1', '1 hour')");
$pub->safe_psql(
	'postgres', qq{
INSERT INTO solo VALUES (1, 'first', $t1);
SELECT dlock_release('solo:1', $t1);
});
my $t2 = $pub->safe_psql('postgres',
	"SELECT dlock_acquire('solo:1', '1 hour')");
cmp_ok($t2, '>', $t1, "the lease of solo:1 was taken over ($t1 -> $t2)");
$pub->safe_psql('postgres',
	"UPDATE solo SET val = 'second', fence_token = $t2 WHERE id = 1");

is($pub->safe_psql('postgres', 'SHOW session_replication_role'),
	'origin', 'the default session_replication_role is origin');
rejected($pub,
	"UPDATE solo SET val = 'stale', fence_token = $t1 WHERE id = 1",
	'solo', 'origin: a write with the stale token');
rejected($pub, "INSERT INTO solo VALUES (2, 'no token', NULL)",
	'solo', 'origin: a row with no token for a lock never acquired');
is($pub->safe_psql('postgres', 'SELECT * FROM solo ORDER BY id'),
	"1|second|$t2", 'origin: the rejected writes changed nothing');

$pub->safe_psql(
	'postgres', qq{
SET session_replication_role = replica;
UPDATE solo SET val = 'stale', fence_token = $t1 WHERE id = 1;
INSERT INTO solo VALUES (2, 'no token', NULL);
});
is( $pub->safe_psql('postgres', 'SELECT * FROM solo ORDER BY id'),
	"1|stale|$t1\n2|no token|",
	'replica: the stale write and the row with no token are accepted (the trigger does not fire)'
);

rejected(
	$pub,
	"UPDATE solo SET val = 'touched' WHERE id = 2",
	'solo',
	'origin again, in a new session: a write of the row with no token');

$pub->safe_psql('postgres',
	'ALTER TABLE solo ENABLE ALWAYS TRIGGER fence');
rejected(
	$pub, qq{SET session_replication_role = replica;
UPDATE solo SET val = 'stale again', fence_token = $t1 WHERE id = 1},
	'solo',
	'replica with ENABLE ALWAYS TRIGGER: a write with the stale token');
$pub->safe_psql('postgres', 'ALTER TABLE solo ENABLE TRIGGER fence');
is( $pub->safe_psql('postgres', 'SELECT * FROM solo ORDER BY id'),
	"1|stale|$t1\n2|no token|",
	'the writes rejected in origin and ALWAYS modes changed nothing');

# ---------------------------------------------------------------------
# Part 2: logical replication.
# ---------------------------------------------------------------------

my $prot_ddl = q{
CREATE TABLE prot (id int PRIMARY KEY, val text, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE ON prot FOR EACH ROW
  EXECUTE FUNCTION dlock_fence('prot:{id}', 'fence_token');
};

# acquire returns a new token for $name on $node.
sub acquire
{
	my ($node, $name) = @_;
	my $token = $node->safe_psql('postgres',
		"SELECT dlock_acquire('$name', '1 hour')");
	like($token, qr/^[0-9]+$/, $node->name . ": acquired $name");
	return $token;
}

# The publisher: rows 1 and 2 before the subscription exists.
$pub->safe_psql('postgres', $prot_ddl);
my %ptok;
$ptok{1} = acquire($pub, 'prot:1');
$ptok{2} = acquire($pub, 'prot:2');
$pub->safe_psql(
	'postgres', qq{
INSERT INTO prot VALUES (1, 'pub-1', $ptok{1}), (2, 'pub-2', $ptok{2});
CREATE PUBLICATION dlock_pub FOR TABLE prot;
});

# The subscriber: many more tokens issued than on the publisher, and a
# live lease on prot:1.  prot:2 and prot:3 were never acquired there.
$sub->safe_psql(
	'postgres', qq{
CREATE EXTENSION dlock;
$prot_ddl
SELECT count(dlock_acquire('burn:' || i, '1 hour')) FROM generate_series(1, 100) i;
});
my $stok = acquire($sub, 'prot:1');

# A local write of the publisher's rows is rejected on the subscriber.
rejected($sub, "INSERT INTO prot VALUES (1, 'local', $ptok{1})",
	'prot', 'subscriber, locally: row 1 with the publisher\'s token');
rejected($sub, "INSERT INTO prot VALUES (2, 'local', $ptok{2})",
	'prot', 'subscriber, locally: row 2 (lock never acquired here)');

my $log_offset = -s $sub->logfile;

my $pub_connstr = $pub->connstr . ' dbname=postgres';
$sub->safe_psql('postgres',
	"CREATE SUBSCRIPTION dlock_sub CONNECTION '$pub_connstr' PUBLICATION dlock_pub"
);
$sub->wait_for_subscription_sync($pub, 'dlock_sub');

my $rows_query = 'SELECT * FROM prot ORDER BY id';
is( $sub->safe_psql('postgres', $rows_query),
	"1|pub-1|$ptok{1}\n2|pub-2|$ptok{2}",
	'subscriber: the initial sync copied the publisher\'s rows');

# Changes after the initial sync: a takeover and update of row 1, a new
# row 3.
$pub->safe_psql('postgres', "SELECT dlock_release('prot:1', $ptok{1})");
$ptok{1} = acquire($pub, 'prot:1');
$ptok{3} = acquire($pub, 'prot:3');
$pub->safe_psql(
	'postgres', qq{
UPDATE prot SET val = 'pub-1b', fence_token = $ptok{1} WHERE id = 1;
INSERT INTO prot VALUES (3, 'pub-3', $ptok{3});
});
cmp_ok($ptok{1}, '<', $stok,
	"the publisher's token for prot:1 ($ptok{1}) is older than the subscriber's ($stok)"
);
$pub->wait_for_catchup('dlock_sub');

my $pub_rows = $pub->safe_psql('postgres', $rows_query);
is($pub_rows, "1|pub-1b|$ptok{1}\n2|pub-2|$ptok{2}\n3|pub-3|$ptok{3}",
	'publisher: rows written');
is($sub->safe_psql('postgres', $rows_query),
	$pub_rows, 'subscriber: the update and the insert were applied');

my $log = slurp_file($sub->logfile, $log_offset);
unlike($log, qr/55T01|fencing token rejected/,
	'subscriber: no fencing rejection in the log while syncing and applying');
is( $sub->safe_psql(
		'postgres',
		"SELECT apply_error_count, sync_error_count FROM pg_stat_subscription_stats WHERE subname = 'dlock_sub'"
	),
	'0|0',
	'subscriber: no apply or sync error counted');

# The trigger is still there and enabled: the same write made locally is
# rejected.
rejected(
	$sub,
	"UPDATE prot SET val = 'local' WHERE id = 1",
	'prot', 'subscriber, locally: an update of the applied row 1');
rejected($sub, "UPDATE prot SET val = 'local' WHERE id = 3",
	'prot', 'subscriber, locally: an update of the applied row 3');

# ENABLE ALWAYS TRIGGER: the trigger fires in the apply worker too.
$sub->safe_psql('postgres', 'ALTER TABLE prot ENABLE ALWAYS TRIGGER fence');
$log_offset = -s $sub->logfile;

$pub->safe_psql("postgres", "SELECT dlock_release('prot:1', $ptok{1})");
$ptok{1} = acquire($pub, 'prot:1');
cmp_ok($ptok{1}, '<', $stok,
	"the publisher's new token for prot:1 ($ptok{1}) is still older than the subscriber's ($stok)"
);
$pub->safe_psql('postgres',
	"UPDATE prot SET val = 'pub-1c', fence_token = $ptok{1} WHERE id = 1");

$sub->wait_for_log(
	qr/ERROR:  55T01: fencing token rejected for relation "prot"/,
	$log_offset);
$log = slurp_file($sub->logfile, $log_offset);
my $stale = $ptok{1};
like(
	$log,
	qr/DETAIL:  Lock "prot:1": token $stale is not current; the current token is $stok\./,
	'subscriber, ALWAYS: the apply worker\'s write was rejected as stale');
like(
	$log,
	qr/CONTEXT:  processing remote data for replication origin/,
	'subscriber, ALWAYS: the rejection happened in the apply worker');
is($sub->safe_psql('postgres', $rows_query),
	$pub_rows, 'subscriber, ALWAYS: the rejected change was not applied');

# Clean up: disable the subscription (its worker keeps failing and
# restarting meanwhile), set the trigger back to the default, and enable
# the subscription again.  The held change is applied then.
$sub->safe_psql('postgres', 'ALTER SUBSCRIPTION dlock_sub DISABLE');
$sub->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM pg_stat_subscription WHERE subname = 'dlock_sub' AND pid IS NOT NULL"
) or die "the apply worker did not stop";
$sub->safe_psql('postgres', 'ALTER TABLE prot ENABLE TRIGGER fence');
$sub->safe_psql('postgres', 'ALTER SUBSCRIPTION dlock_sub ENABLE');
$pub->wait_for_catchup('dlock_sub');
is( $sub->safe_psql('postgres', $rows_query),
	$pub->safe_psql('postgres', $rows_query),
	'subscriber, trigger back to ENABLE: the held change was applied');
is( $sub->safe_psql('postgres', 'SELECT val, fence_token FROM prot WHERE id = 1'),
	"pub-1c|$ptok{1}",
	'subscriber: row 1 has the publisher\'s last write');

$sub->safe_psql('postgres', 'ALTER SUBSCRIPTION dlock_sub DISABLE');
$pub->stop;
$sub->stop;
done_testing();
