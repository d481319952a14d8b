#!/usr/bin/perl
#
# test/t/061_hostile_wait.pl
#	  Issue 22, items 6 and 7: wait queues and name locks that no ordinary
#	  role can make collide, and any-of waiters that no other database and
#	  no unrelated name can slow down (src/name_hash.c, src/wait.c;
#	  docs/sql-reference.md, "Waiting" and dlock_waiters).
#
# Node "dlock_hostile_wait" has shared_preload_libraries = 'dlock', the
# databases da and db (each with dlock) and the ordinary roles victim and
# attacker; sessions take a role with SET SESSION AUTHORIZATION.  Node
# "dlock_other_cluster" is a second cluster (no preload).
#
# The names X = kd2c563948cfd8172 and Y = kde711f4de8a79002 have equal
# hash_bytes_extended(name, len, 0), the unkeyed 64-bit hash that 1.2
# keyed its queues and its name lock on before issue 22: found by
# tools/hash-collide.c (Pollard's rho with distinguished points, 46 s on
# one core; its header says how to repeat it).  SQL's hashtextextended(t,
# 0) is that hash of t's bytes, which check 0.2 uses to show they collide.
#
#   0. The name hash is keyed.
#      0.1 tools/name-hash-cost.c, built here against the server's
#          headers, finds dlock's SipHash-2-4 (src/name_hash.h) equal to
#          the 64 test vectors of the SipHash paper.
#      0.2 X and Y collide under the old hash (the pair is real).
#      0.3 An open transaction of attacker that creates X's first row holds
#          dlock's name lock (pg_locks: advisory, field4 0xD10C); its key
#          (classid << 32 | objid) is not hashtextextended(X, 0), which
#          anyone can compute.
#      0.4 The key of X's name lock is the same after a restart (nothing
#          relies on it, but a prepared transaction keeps its locks), and
#          another cluster's is different: the key is the cluster's own.
#   1. Collisions (item 7).
#      1.1 While attacker's open transaction creates X's first row, the
#          victim's first dlock_acquire of Y (no wait) gets a token.  With
#          the old hash, the name lock of Y was X's: it returned NULL.
#      1.2 attacker holds X and one of its sessions waits for X; victim
#          holds Y and another victim session waits for Y.  dlock_waiters
#          shows each at position 1 of its own queue (with the old hash
#          both stood in one queue, the victim's waiter second), and when
#          the victim releases Y its waiter gets Y.  With the old hash the
#          release woke the head of the shared queue, attacker's waiter,
#          which found X held and slept on: the victim's waiter, not the
#          head, never tried, and returned NULL at its deadline.
#   2. Any-of waiters (item 6).  10,000 names p:1 .. p:10000 of da are held
#      for an hour; four victim sessions wait in dlock_acquire_any on all
#      of them (wait 150 s).  Each tried every name twice (before waiting
#      and after joining): dlock_waiters.attempts is 20000 for each.
#      2.1 400 acquire/release transactions in db, on names p:1 .. p:400
#          (the same names, in another database), change no waiter's
#          attempts;
#      2.2 400 acquire/release transactions in da on names u:1 .. u:400,
#          and a dlock_release_each of 1000 names v:* in one transaction,
#          none of them waited for, change no waiter's attempts;
#      2.3 the release of p:5000 grants p:5000 to one waiter; each of the
#          three others tried at least once and far fewer than its 10,000
#          names (at most 1000: p:5000 once for the release, once for the
#          grant's commit, and while the grant was uncommitted, polls of
#          its locked row);
#      2.4 the release of p:10 and p:9000 in one transaction grants them to
#          two waiters (each tries the changed names in array order: the
#          first takes p:10, the second finds it taken and takes p:9000);
#          the last one tried at least twice and at most 1000 times;
#      2.5 the release of every other name of the pool in one transaction
#          grants p:1, the first in array order, to the last waiter.
#      With the old code every release in any database that fell into a
#      bucket of those names (all of them, for 10,000 names) woke the four
#      waiters and made each try its 10,000 names: 400 transactions in db
#      cost them 16 million attempts.  dlock_waiters had no attempts
#      column then, so 2.1 to 2.4 fail there on the column.
#
# The server log shows no crash.  Every wait is bounded (poll_query_until
# and the background sessions give up after
# $PostgreSQL::Test::Utils::timeout_default seconds); no duration is
# asserted.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;

my $top = abs_path(dirname(abs_path($0)) . '/../..');

my $X = 'kd2c563948cfd8172';
my $Y = 'kde711f4de8a79002';

my $node = dlock_node('dlock_hostile_wait',
	preload => 1,
	conf => "max_connections = 30\n");
for my $db (qw(da db))
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION dlock');
}
$node->safe_psql('postgres', q{
CREATE ROLE victim LOGIN;
CREATE ROLE attacker LOGIN;
});

# as_role returns $sql run as $role (SET SESSION AUTHORIZATION first).
sub as_role
{
	my ($role, $sql) = @_;
	return "SET SESSION AUTHORIZATION $role;\n$sql";
}

# name_lock_key returns the 64-bit key of dlock's name lock held on $n's
# database $db (advisory, field4 0xD10C, which pg_locks shows as the int2
# objsubid -12020), as a signed bigint, or '' when none is held.
sub name_lock_key
{
	my ($n, $db) = @_;
	return $n->safe_psql($db, q{
SELECT (classid::int8 << 32) | objid::int8 FROM pg_locks
 WHERE locktype = 'advisory' AND (objsubid::int4 & 65535) = 53516});
}

# ---- 0. The name hash is keyed ------------------------------------------

# 0.1 the SipHash-2-4 of src/name_hash.h against the paper's vectors
{
	# libpgcommon.a is in --pkglibdir in Debian's packages, in --libdir in
	# a build from source
	my ($incdir, $pkglibdir, $libdir) =
	  $node->config_data(qw(--includedir-server --pkglibdir --libdir));
	my $tmp = PostgreSQL::Test::Utils::tempdir;
	my ($cc) = $node->config_data('--cc');
	$cc = 'cc' if !defined $cc || $cc eq '';
	my ($ok, $out, $err) = (0, '', '');
	if (-e "$top/tools/name-hash-cost.c")
	{
		($out, $err) = run_command(
			[
				split(' ', $cc), '-O2',
				"-I$incdir", "$top/tools/name-hash-cost.c",
				"-L$pkglibdir", "-L$libdir", '-lpgcommon',
				'-lpgport', '-o',
				"$tmp/name-hash-cost"
			]);
		($out, $err) = run_command([ "$tmp/name-hash-cost", '1' ])
		  if -x "$tmp/name-hash-cost";
	}
	like($out, qr/^vectors ok$/m,
		'0.1 dlock\'s SipHash-2-4 gives the 64 test vectors of the SipHash paper')
	  or diag("stdout: $out\nstderr: $err");
}

# 0.2 the pair collides under the old, unkeyed hash
is( $node->safe_psql(
		'da', "SELECT hashtextextended('$X', 0) = hashtextextended('$Y', 0)"),
	't',
	'0.2 X and Y have equal hash_bytes_extended(name, len, 0)');

# 0.3 and 1.1: attacker creates X's first row in an open transaction
my $y_token;
my ($key_x, $old_x);
{
	my $att = bg_session($node, 'attacker_x', 'da');
	$att->{bg}->query_safe('SET SESSION AUTHORIZATION attacker');
	$att->{bg}->query_safe('BEGIN');
	is($att->{bg}->query_safe("SELECT dlock_acquire('$X', '1 hour') > 0"),
		't', 'attacker creates X\'s first row in an open transaction');

	$key_x = name_lock_key($node, 'da');
	$old_x = $node->safe_psql('da', "SELECT hashtextextended('$X', 0)");
	like($key_x, qr/^-?[0-9]+$/, '0.3 the name lock of X is in pg_locks');
	isnt($key_x, $old_x,
		'0.3 the name lock\'s key of X is not the public hash of X');

	# 1.1
	$y_token = $node->safe_psql('da',
		as_role('victim', "SELECT dlock_acquire('$Y', '1 hour')"));
	like($y_token, qr/^[0-9]+$/,
		'1.1 the victim\'s first acquire of Y gets a token while X\'s first row is being created'
	);

	$att->{bg}->query_safe('ROLLBACK');
	bg_close($att);
}

# 0.4 the key is the cluster's own: the same after a restart, another
# cluster's differs
{
	my $key_of = sub {
		my ($n, $db) = @_;
		my $s = bg_session($n, 'key', $db);
		$s->{bg}->query_safe('BEGIN');
		$s->{bg}->query_safe("SELECT dlock_acquire('$X', '1 hour')");
		my $k = name_lock_key($n, $db);
		$s->{bg}->query_safe('ROLLBACK');
		bg_close($s);
		return $k;
	};
	$node->restart;
	is($key_of->($node, 'da'), $key_x,
		'0.4 the name lock\'s key of X is the same after a restart');

	my $other = dlock_node('dlock_other_cluster', setup => 'CREATE EXTENSION dlock');
	my $key_other = $key_of->($other, 'postgres');
	like($key_other, qr/^-?[0-9]+$/,
		'0.4 another cluster takes a name lock for X too');
	isnt($key_other, $key_x,
		'0.4 another cluster keys the name lock of X differently');
	$other->stop;
}

# ---- 1.2 a waiter of Y stands in Y's queue, not X's ---------------------
{
	# 1.1 may have failed (the old hash): the victim holds Y either way
	$y_token = $node->safe_psql('da',
		as_role('victim', "SELECT dlock_acquire('$Y', '1 hour')"))
	  unless $y_token =~ /^[0-9]+$/;
	my $x_token = $node->safe_psql('da',
		as_role('attacker', "SELECT dlock_acquire('$X', '1 hour')"));
	like($x_token, qr/^[0-9]+$/, '1.2 attacker holds X');

	my $ax = bg_session($node, 'attacker_wait', 'da');
	$ax->{bg}->query_safe('SET SESSION AUTHORIZATION attacker');
	bg_start($ax, "SELECT dlock_acquire('$X', '1 hour', wait => '90 s');");
	ok( $node->poll_query_until(
			'da',
			"SELECT count(*) FROM dlock_waiters WHERE pid = $ax->{pid}", '1'),
		'1.2 attacker waits for X');

	my $vy = bg_session($node, 'victim_wait', 'da');
	$vy->{bg}->query_safe('SET SESSION AUTHORIZATION victim');
	bg_start($vy, "SELECT dlock_acquire('$Y', '1 hour', wait => '30 s');");
	ok( $node->poll_query_until(
			'da',
			"SELECT count(*) FROM dlock_waiters WHERE pid = $vy->{pid}", '1'),
		'1.2 victim waits for Y');

	is( $node->safe_psql(
			'da', qq{SELECT lock_name, "position" FROM dlock_waiters
 WHERE pid IN ($ax->{pid}, $vy->{pid}) ORDER BY lock_name}),
		"$X|1\n$Y|1",
		'1.2 dlock_waiters: each waiter heads its own name\'s queue');

	is( $node->safe_psql(
			'da', as_role('victim', "SELECT dlock_release('$Y', $y_token)")),
		't', '1.2 victim releases Y');
	my ($out, $state) = bg_finish($vy);
	like($out, qr/^[0-9]+$/,
		'1.2 the victim\'s waiter gets Y at its release');

	is( $node->safe_psql(
			'da', as_role('attacker', "SELECT dlock_release('$X', $x_token)")),
		't', '1.2 attacker releases X');
	($out, $state) = bg_finish($ax);
	like($out, qr/^[0-9]+$/, '1.2 attacker\'s waiter gets X at its release');
	bg_close($_) for ($ax, $vy);
}

# ---- 2. any-of waiters --------------------------------------------------

my $pool_sql =
  q{ARRAY(SELECT 'p:' || g FROM generate_series(1, 10000) g)};

# the pool: 10,000 names held for an hour, created 1000 per transaction
# (each new name takes a lock-table entry until its transaction ends)
$node->safe_psql('da', 'CREATE TABLE pool (name text PRIMARY KEY, token bigint)');
for my $k (0 .. 9)
{
	my ($lo, $hi) = (1000 * $k + 1, 1000 * ($k + 1));
	$node->safe_psql('da', qq{INSERT INTO pool
SELECT 'p:' || g, dlock_acquire('p:' || g, '1 hour')
  FROM generate_series($lo, $hi) g});
}
is($node->safe_psql('da', 'SELECT count(token) FROM pool'),
	'10000', '2 the pool\'s 10,000 names are held');

my $has_attempts = $node->safe_psql(
	'da', q{SELECT count(*) FROM pg_attribute
 WHERE attrelid = 'dlock_waiters'::regclass AND attname = 'attempts'});
diag('dlock_waiters has no attempts column (before issue 22)')
  unless $has_attempts eq '1';

my @waiters = map { bg_session($node, "any$_", 'da') } 1 .. 4;
for my $w (@waiters)
{
	$w->{bg}->query_safe('SET SESSION AUTHORIZATION victim');
	bg_start($w,
		"SELECT lock_name, token FROM dlock_acquire_any($pool_sql, '1 hour', wait => '150 s');"
	);
}
ok( $node->poll_query_until(
		'da', "SELECT count(*) FROM dlock_waiters WHERE kind = 'any'", '4'),
	'2 four victim sessions wait for any of the 10,000 names');

# attempts_of returns the attempts of the waiters still waiting (pid =>
# attempts), once each is asleep (dlock's wait event) and has tried every
# name twice or more; {} without the column.
my $wait_event = dlock_wait_event($node);

sub attempts_of
{
	my ($what) = @_;
	return {} unless $has_attempts eq '1';
	my $asleep = qq{SELECT count(*) = count(a.pid) FROM dlock_waiters w
  LEFT JOIN pg_stat_activity a ON a.pid = w.pid
   AND a.wait_event_type = 'Extension' AND a.wait_event = '$wait_event'
 WHERE w.kind = 'any' AND w.attempts >= 20000};
	$node->poll_query_until('da', $asleep, 't')
	  or diag("$what: the waiters are not all asleep");
	my %a = map { split /\|/ } split /\n/,
	  $node->safe_psql('da',
		"SELECT pid, attempts FROM dlock_waiters WHERE kind = 'any'");
	return \%a;
}

# same_attempts checks that the waiters' attempts are those of $before.
sub same_attempts
{
	my ($before, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $after = attempts_of($what);
	my $ok = $has_attempts eq '1' && %$before && keys %$after == keys %$before;
	for my $pid (keys %$before)
	{
		$ok = 0 unless defined $after->{$pid} && $after->{$pid} == $before->{$pid};
	}
	ok($ok, "$what: no waiter tried a name")
	  or diag(explain({ before => $before, after => $after }));
	return;
}

my $att = attempts_of('2');
ok( $has_attempts eq '1'
	  && keys %$att == 4
	  && !(grep { $_ != 20000 } values %$att),
	'2 each waiter tried each name twice: 20000 attempts')
  or diag(explain($att));

# 2.1 another database
$node->safe_psql('db',
	join("\n",
		map { "SELECT dlock_release('p:$_', dlock_acquire('p:$_', '1 hour'));" }
		  1 .. 400));
same_attempts($att, '2.1 400 acquire/release transactions in db on p:1 .. p:400');

# 2.2 unrelated names of the same database
$node->safe_psql('da',
	join("\n",
		map { "SELECT dlock_release('u:$_', dlock_acquire('u:$_', '1 hour'));" }
		  1 .. 400));
$node->safe_psql('da', q{CREATE TABLE v AS
SELECT ARRAY(SELECT 'v:' || g FROM generate_series(1, 1000) g) AS names});
$node->safe_psql('da', q{
SELECT dlock_release_each(names, dlock_acquire_all(names, '1 hour')) FROM v});
same_attempts($att,
	'2.2 400 acquire/release transactions and a release of 1000 names in da, none waited for'
);

# finish_gone waits until $left waiters remain, and returns the results of
# those that finished, sorted (their sessions removed from @waiters).
sub finish_gone
{
	my ($left, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	ok( $node->poll_query_until(
			'da', "SELECT count(*) FROM dlock_waiters WHERE kind = 'any'",
			$left),
		"$what: $left waiters left");
	my %still = map { $_ => 1 } split /\n/,
	  $node->safe_psql('da',
		"SELECT pid FROM dlock_waiters WHERE kind = 'any'");
	my (@done, @kept);
	for my $w (@waiters)
	{
		if ($still{ $w->{pid} }) { push @kept, $w; next; }
		my ($out, $state) = bg_finish($w);
		push @done, $out;
		bg_close($w);
	}
	@waiters = @kept;
	return sort @done;
}

# bounded checks that each waiter left tried between $min and 1000 more
# names than in $before.
sub bounded
{
	my ($before, $min, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $after = attempts_of($what);
	my $ok = $has_attempts eq '1' && %$after;
	my @d;
	for my $pid (keys %$after)
	{
		my $d = $after->{$pid} - ($before->{$pid} // 0);
		push @d, $d;
		$ok = 0 unless $d >= $min && $d <= 1000;
	}
	ok($ok, "$what: each waiter left tried between $min and 1000 names (@d)");
	return $after;
}

# 2.3 one of their names
$node->safe_psql('da',
	q{SELECT dlock_release('p:5000', token) FROM pool WHERE name = 'p:5000'});
my @got = finish_gone(3, '2.3 release of p:5000');
like(join(',', @got), qr/^p:5000\|[0-9]+$/, '2.3 one waiter got p:5000');
$att = bounded($att, 1, '2.3 release of p:5000');

# 2.4 two of them at once
$node->safe_psql('da', q{
SELECT dlock_release_each(array_agg(name), array_agg(token)) FROM pool
 WHERE name IN ('p:10', 'p:9000')});
@got = finish_gone(1, '2.4 release of p:10 and p:9000');
like(join(',', @got), qr/^p:10\|[0-9]+,p:9000\|[0-9]+$/,
	'2.4 two waiters got p:10 and p:9000');
$att = bounded($att, 2, '2.4 release of p:10 and p:9000');

# 2.5 all the others: the first in array order
$node->safe_psql('da', q{
SELECT dlock_release_each(array_agg(name), array_agg(token)) FROM pool
 WHERE name NOT IN ('p:10', 'p:5000', 'p:9000')});
@got = finish_gone(0, '2.5 release of the rest of the pool');
like(join(',', @got), qr/^p:1\|[0-9]+$/,
	'2.5 the last waiter got p:1, the first free name in array order');

is(join("\n", crash_lines($node)), '', 'the server log shows no crash');
$node->stop;
done_testing();
