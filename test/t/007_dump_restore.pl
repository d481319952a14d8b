#!/usr/bin/perl
#
# test/t/007_dump_restore.pl
#	  Leases and fencing tokens across pg_dump and restore (tokens never
#	  repeat and never go backwards, also after pg_dump and restore: the
#	  dump carries the leases and the token state; docs/guarantees.md,
#	  "Restore"; tracker issue 7).
#
# Database appdb of cluster A has dlock installed in schema coord, leases
# in every state (live, held by a superuser and by an ordinary role,
# released, expired) and a table protected by dlock_fence ('latest' mode)
# whose rows carry their tokens.  It is dumped with pg_dump in custom and
# in plain format.  Then more leases are granted on the source, after the
# dump.  The dumps are restored (pg_restore --exit-on-error, psql with
# ON_ERROR_STOP) into:
#
#   - new databases of a new cluster B (another system identifier), where
#     the role holding a lease was created beforehand (roles are global);
#   - new databases of the same cluster A, next to the source;
#   - last, in place of the source: appdb is dropped and restored from the
#     custom dump under the same name, as when a database is brought back
#     from its last dump.
#
# In every restored database:
#   - dlock_leases shows the rows the source had when it was dumped;
#   - a live lease is still honoured: another acquire returns NULL, its
#     token renews it (also for the ordinary role's lease), and its token
#     passes dlock_fence; a token of another lock is still rejected;
#   - the next token is greater than every token the source issued before
#     the dump;
#   - in cluster B and in place of the source, the next token is also
#     greater than every token the source issued AFTER the dump: those
#     tokens were handed out by the database the restore replaces or
#     copies to another system, and the restored token state cannot know
#     them, so the token sequence must jump past them (token jumps).  With a
#     plain sequence this fails: the restored sequence resumes at the
#     dump's value.  In a new database next to a still running source,
#     source and copy are two databases and only the tokens before the
#     dump are compared.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;
use List::Util qw(max);

my $src = PostgreSQL::Test::Cluster->new('dump_source');
$src->init;
$src->start;

# Every psql session of the test sees dlock's schema.
my $path = 'SET search_path = coord, public;';


$src->safe_psql(
	'postgres', q{
CREATE ROLE dlock_app LOGIN;
CREATE ROLE other_app LOGIN;
CREATE DATABASE appdb;
});
$src->safe_psql(
	'appdb', q{
CREATE SCHEMA coord;
CREATE EXTENSION dlock SCHEMA coord;
CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL, fence_token bigint);
CREATE TRIGGER acct_fence BEFORE INSERT OR UPDATE ON acct FOR EACH ROW
  EXECUTE FUNCTION coord.dlock_fence('acct:{id}', 'fence_token');
GRANT USAGE ON SCHEMA coord TO dlock_app, other_app;
GRANT SELECT, INSERT, UPDATE ON acct TO dlock_app;
});

# Every token the source issued: [name, token] in issue order.
my @before;


my %tok;
$tok{1} = coord_acquire($src, 'appdb', 'acct:1', '1 hour');
$tok{2} = coord_acquire($src, 'appdb', 'acct:2', '1 hour', 1);
$tok{3} = coord_acquire($src, 'appdb', 'acct:3', '1 hour');
$tok{4} = coord_acquire($src, 'appdb', 'acct:4', '1 millisecond');
push @before, map { ["acct:$_", $tok{$_}] } 1 .. 4;
coord_sql($src, 'appdb', "INSERT INTO acct VALUES ($_, 100, $tok{$_})") for 1 .. 4;
is(coord_sql($src, 'appdb', "SELECT dlock_release('acct:3', $tok{3})"),
	't', 'source: acct:3 released');
for my $i (1 .. 20)
{
	my $t = coord_acquire($src, 'appdb', "job-$i", '1 hour');
	coord_sql($src, 'appdb', "SELECT dlock_release('job-$i', $t)") if $i % 2;
	push @before, ["job-$i", $t];
}
wait_for_expiry($src, 'acct:4', 'appdb', 'coord')
  or die "the short lease did not expire";
my $max_before = max(map { $_->[1] } @before);
my $source_rows = lease_rows($src, 'appdb', 'coord');

my $dir = $src->basedir;
$src->command_ok(
	[ 'pg_dump', '-Fc', '-f', "$dir/appdb.dump", '-d', 'appdb' ],
	'pg_dump in custom format');
$src->command_ok(
	[ 'pg_dump', '-Fp', '-f', "$dir/appdb.sql", '-d', 'appdb' ],
	'pg_dump in plain format');

# Tokens the source hands out after the dump: new names, takeovers and
# more than the sequence's 32 logged-ahead values.
my @after;
for my $i (1 .. 40)
{
	my $t = coord_acquire($src, 'appdb', "late-$i", '1 hour');
	coord_sql($src, 'appdb', "SELECT dlock_release('late-$i', $t)") if $i % 2;
	push @after, $t;
}
push @after, coord_acquire($src, 'appdb', 'acct:3', '1 hour');
my $max_after = max(@after);
note "source: tokens before the dump up to $max_before, after it "
  . "$after[0] .. $max_after";

my $dst = PostgreSQL::Test::Cluster->new('dump_target');
$dst->init;
$dst->start;
$dst->safe_psql('postgres', 'CREATE ROLE dlock_app LOGIN; CREATE ROLE other_app LOGIN');
my $sysid = 'SELECT system_identifier FROM pg_control_system()';
isnt($dst->safe_psql('postgres', $sysid),
	$src->safe_psql('postgres', $sysid),
	'cluster B has another system identifier than A');

# check_restored runs the checks of the header on database $db of $node,
# restored from the dump taken at $max_before; with $after_too the next
# token must also be above every token the source issued after the dump.
sub check_restored
{
	my ($node, $db, $what, $after_too) = @_;

	is(lease_rows($node, $db, 'coord'), $source_rows,
		"$what: dlock_leases shows the source's rows at the dump");
	is( coord_sql(
			$node, $db,
			q{SELECT string_agg(id || ':' || fence_token, ',' ORDER BY id) FROM acct}),
		join(',', map { "$_:$tok{$_}" } 1 .. 4),
		"$what: the protected rows carry their tokens");

	# Live leases are honoured.
	is(coord_sql($node, $db, "SELECT dlock_acquire('acct:1', '1 minute') IS NULL"),
		't', "$what: the live lease acct:1 refuses another acquirer");
	is( coord_sql(
			$node, $db,
			"SET ROLE dlock_app; SELECT dlock_acquire('acct:2', '1 minute') IS NULL"),
		't',
		"$what: the live lease acct:2 refuses its own role too");
	is(coord_sql($node, $db, "SELECT dlock_renew('acct:1', $tok{1}, '1 hour')"),
		't', "$what: acct:1 renews with its token from the source");
	is( coord_sql(
			$node, $db,
			"SET ROLE dlock_app; SELECT dlock_renew('acct:2', $tok{2}, '1 hour')"),
		't',
		"$what: the role dlock_app renews acct:2 with its token from the source"
	);
	fails_with(
		$node,
		"$path SET ROLE other_app; SELECT dlock_renew('acct:2', $tok{2}, '1 hour')",
		'42501',
		"$what: another role cannot renew acct:2",
		dbname => $db);

	# The old tokens pass the fence ('latest'): live, and expired but not
	# taken over.
	coord_sql($node, $db,
		"UPDATE acct SET balance = balance + 1, fence_token = $tok{1} WHERE id = 1"
	);
	coord_sql($node, $db,
		"SET ROLE dlock_app; UPDATE acct SET balance = balance + 1, fence_token = $tok{2} WHERE id = 2"
	);
	coord_sql($node, $db,
		"UPDATE acct SET balance = balance + 1, fence_token = $tok{4} WHERE id = 4"
	);
	is( coord_sql(
			$node, $db,
			q{SELECT string_agg(id || ':' || balance, ',' ORDER BY id) FROM acct}),
		'1:101,2:101,3:100,4:101',
		"$what: writes with the source's current tokens of acct:1, acct:2 and the expired acct:4 are accepted"
	);
	fails_with(
		$node,
		"$path UPDATE acct SET balance = 0, fence_token = $tok{1} WHERE id = 3",
		'55T01',
		"$what: a write of acct 3 with the token of acct:1",
		dbname => $db);

	# The next tokens.
	my $next = coord_acquire($node, $db, 'acct:3', '1 hour');
	cmp_ok($next, '>', $max_before,
		"$what: the next token $next is greater than every token the source issued before the dump ($max_before)"
	);
	if ($after_too)
	{
		cmp_ok($next, '>', $max_after,
			"$what: the next token $next is also greater than every token the source issued after the dump ($after[0] .. $max_after)"
		);
	}
	else
	{
		note "$what: the next token $next, the source's tokens after the dump "
		  . "$after[0] .. $max_after";
	}
	my $other = coord_acquire($node, $db, 'a-new-name', '1 hour');
	cmp_ok($other, '>', $next, "$what: tokens keep increasing ($other)");
	coord_sql($node, $db,
		"UPDATE acct SET balance = 7, fence_token = $next WHERE id = 3");
	fails_with(
		$node,
		"$path UPDATE acct SET balance = 0, fence_token = $tok{3} WHERE id = 3",
		'55T01',
		"$what: acct:3's token from the source is stale once acct:3 is acquired again",
		dbname => $db);
	return;
}

# restore_into restores the dump in $format ('custom' or 'plain') into a
# new database $db of $node.
sub restore_into
{
	my ($node, $db, $format) = @_;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	if ($format eq 'custom')
	{
		$node->command_ok(
			[ 'pg_restore', '--exit-on-error', '-d', $db, "$dir/appdb.dump" ],
			"pg_restore of the custom dump into $db on " . $node->name);
	}
	else
	{
		$node->command_ok(
			[
				'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $db,
				'-f', "$dir/appdb.sql"
			],
			"psql restores the plain dump into $db on " . $node->name);
	}
	return;
}

restore_into($dst, 'appdb_c', 'custom');
check_restored($dst, 'appdb_c', 'new cluster, custom dump', 1);
restore_into($dst, 'appdb_p', 'plain');
check_restored($dst, 'appdb_p', 'new cluster, plain dump', 1);

restore_into($src, 'appdb_c', 'custom');
check_restored($src, 'appdb_c', 'same cluster, new database, custom dump', 0);
restore_into($src, 'appdb_p', 'plain');
check_restored($src, 'appdb_p', 'same cluster, new database, plain dump', 0);

# The source itself is brought back from its dump.
$src->safe_psql('postgres', 'DROP DATABASE appdb');
restore_into($src, 'appdb', 'custom');
check_restored($src, 'appdb', 'in place of the source, custom dump', 1);

$src->stop;
$dst->stop;
done_testing();
