#!/usr/bin/perl
#
# test/t/019_stats.pl
#	  The counters of dlock_stats across real processes (src/stats.c;
#	  docs/sql-reference.md, dlock_stats), and waiting queues kept apart
#	  per database (src/wait.c: a queue is a database and a name).
#
# Node "dlock_stats": dlock preloaded; databases sa and sb, each with the
# extension.  Every workload is known, so every figure is checked exactly
# (all nineteen counters of the database's row, expected 0 unless the
# workload says otherwise); %exp keeps the expected figures per database.
#
# One client's workload (a psql process of its own, ON_ERROR_STOP, on a
# name of its own; 'held' is held by a lease of an hour): a new grant, a
# renew, a renew_each of two (one with a wrong token), dlock_check in modes
# latest and live, two releases of the same token (the second fails),
# a grant after the release, a stale dlock_check (55T01, the only error),
# a release_each, three refused calls (dlock_acquire, dlock_acquire_all,
# dlock_acquire_any on 'held'), a wait of 2 s on 'held' that times out
# (long enough that the attempt before queueing never outlasts it, which
# would make it a refusal).
#
#   1. Ten such clients in sa at once, and four in sb: after they exited
#      (their backends gone from pg_stat_activity: the exit fold ran, the
#      backend blocks are free), sa's and sb's rows are the exact sums,
#      each its own; both rows are the same read from sa or from sb.
#   2. A long-lived session of sa keeps counting while the clients come and
#      go: its figures count as soon as it makes them.
#   3. dlock_stats_reset() from a third session while the long-lived one
#      is alive: sa's counters are zero, its stats_reset moved forward; sb
#      is untouched.  Then more work by the long-lived session and three
#      clients: the figures are exactly the work after the reset (the long
#      one's counts before the reset are its base); after it exits too.
#      An ordinary role may read the view but not reset (42501).
#   4. dlock.track_stats = off (superuser SET in a session): that session's
#      work after the SET is not counted, a whole client's either; an
#      ordinary role cannot SET it (42501).
#   5. The same name in two databases: in sb a session holds 'job' and
#      another waits for it (wait 60 s); then in sa a session holds 'job'
#      and another waits for it (wait 20 s).  dlock_waiters of each
#      database shows only its own waiter, at position 1.  When sa's
#      holder releases, sa's waiter gets the lease: with one queue for both
#      databases sb's waiter, the older ticket, would head it and sa's
#      waiter would sleep to its deadline and return NULL.  Then sb's.
#      The figures count the waits and grants in their own databases.
#   6. A crash (kill -9 of a backend: the postmaster rebuilds shared
#      memory) resets every counter: the view has no rows until a database
#      counts again, and then only what was counted since (a grant, and the
#      boot jump of token_jumps it takes: src/token.c); a stats_reset
#      after the crash.  The same after an immediate stop and a start.
#      Before that, token_jumps is 0 everywhere: the extensions were
#      created in this server start, which takes no boot jump.
#      (Counters live in shared memory only: a crash or restart loses them,
#      as docs/sql-reference.md says.)
#
# Every wait is bounded ($PostgreSQL::Test::Utils::timeout_default).
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;
use IPC::Run ();
use Time::HiRes ();

my $timeout = $PostgreSQL::Test::Utils::timeout_default;

my $node = dlock_node(
	'dlock_stats',
	preload => 1,
	conf => q{
# section 6: a backend killed by a signal makes the postmaster rebuild
# shared memory (PostgreSQL::Test::Cluster turns this off)
restart_after_crash = on
});
$node->safe_psql(
	'postgres', q{
CREATE DATABASE sa;
CREATE DATABASE sb;
CREATE ROLE stuser LOGIN;
});
$node->safe_psql($_, 'CREATE EXTENSION dlock') for qw(sa sb);

my @counters = qw(grants_new grants_after_release takeovers refusals waits
  wait_timeouts renewals renewals_failed releases releases_failed breaks
  purged fence_latest_accepted fence_latest_rejected fence_live_accepted
  fence_live_rejected fence_seen_accepted fence_seen_rejected token_jumps);

# stats_row($via, $db) returns the row of database $db in dlock_stats, read
# on database $via (a hash: the counters and stats_reset), or undef when
# there is none.
sub stats_row
{
	my ($via, $db) = @_;
	my $r = $node->safe_psql($via,
		    'SELECT '
		  . join(', ', @counters)
		  . ", stats_reset FROM dlock_stats WHERE datname = '$db'");
	return undef if $r eq '';
	my %row;
	@row{ @counters, 'stats_reset' } = split /\|/, $r;
	return \%row;
}

# %exp: the expected counters per database.
my %exp = (sa => {}, sb => {});

# add($db, \%work, $times) adds $times the counts %work to $db's expected
# figures.
sub add
{
	my ($db, $work, $times) = @_;
	$exp{$db}{$_} += $work->{$_} * ($times // 1) for keys %$work;
	return;
}

# counts_are($db, $what, via => $via) checks that $db's row (read on $via,
# default $db) shows exactly the expected figures.
sub counts_are
{
	my ($db, $what, %opt) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $row = stats_row($opt{via} // $db, $db);
	my %got = map { $_ => $row ? $row->{$_} : 'no row' } @counters;
	my %want = map { $_ => $exp{$db}{$_} // 0 } @counters;
	my $ok = is_deeply(\%got, \%want, "$db: $what");
	return $ok;
}

# One client's workload (see the file header) and what it counts.
my %work = (
	grants_new => 1,
	grants_after_release => 1,
	renewals => 2,
	renewals_failed => 1,
	releases => 2,
	releases_failed => 1,
	refusals => 3,
	waits => 1,
	wait_timeouts => 1,
	fence_latest_accepted => 1,
	fence_latest_rejected => 1,
	fence_live_accepted => 1);

sub workload_sql
{
	my ($n) = @_;
	return qq{SELECT pg_backend_pid();
SELECT dlock_acquire('$n', '10 min') AS t \\gset
SELECT dlock_renew('$n', :t, '10 min');
SELECT dlock_renew_each(ARRAY['$n', '$n'], ARRAY[:t, :t + 1000000], '10 min');
SELECT dlock_check('$n', :t);
SELECT dlock_check('$n', :t, 'live');
SELECT dlock_release('$n', :t);
SELECT dlock_release('$n', :t);
SELECT dlock_acquire('$n', '10 min') AS t2 \\gset
\\set ON_ERROR_STOP 0
SELECT dlock_check('$n', :t);
\\set ON_ERROR_STOP 1
SELECT dlock_release_each(ARRAY['$n'], ARRAY[:t2]);
SELECT dlock_acquire('held', '1 min') IS NULL;
SELECT dlock_acquire_all(ARRAY['$n', 'held'], '1 min') IS NULL;
SELECT count(*) FROM dlock_acquire_any(ARRAY['held'], '1 min');
SELECT dlock_acquire('held', '1 min', '2 s') IS NULL;
};
}

# The output of workload_sql: the pid, then the results (the two checks
# return the token).
my $workload_out = qr/\A([0-9]+)\nt\n\{t,f\}\n([0-9]+)\n\2\nt\nf\n\{t\}\nt\nt\n0\nt\n?\z/;

# pids_gone($what, @pids) waits until none of the backends @pids is left.
sub pids_gone
{
	my ($what, @pids) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	return ok(
		$node->poll_query_until(
			'postgres',
			'SELECT count(*) FROM pg_stat_activity WHERE pid IN ('
			  . join(', ', @pids) . ')',
			'0'),
		"$what: the backends have exited");
}

my $client_seq = 0;
my $script_dir = PostgreSQL::Test::Utils::tempdir();

# run_clients($db, $what, $n, $prefix) runs $n clients of the workload on
# database $db at once, each a psql process on a name of its own
# ($prefix$i), with extra SQL $opt{before} first; checks each ran it
# fully, then waits until their backends have exited.
sub run_clients
{
	my ($db, $what, $n, %opt) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my @c;
	for my $i (1 .. $n)
	{
		my $name = "c" . ++$client_seq;
		my $c = { out => '', err => '', name => $name };
		my $script = "$script_dir/$name.sql";
		open my $fh, '>', $script or die "cannot write $script: $!";
		print $fh ($opt{before} // ''), workload_sql($name);
		close $fh or die "cannot write $script: $!";
		# -f: the script is read by psql, not fed through a pipe that
		# IPC::Run would only fill while this process pumps that client
		$c->{h} = IPC::Run::start(
			[
				$node->installed_command('psql'), '-XAtq',
				'-v', 'ON_ERROR_STOP=1',
				'-d', $node->connstr($db), '-f', $script
			],
			'<' => '/dev/null',
			'>' => \$c->{out},
			'2>' => \$c->{err},
			IPC::Run::timeout($timeout));
		push @c, $c;
	}
	my @pids;
	my $all_ok = 1;
	for my $c (@c)
	{
		$c->{h}->finish;
		my @errors = $c->{err} =~ /ERROR: /g;
		my $ok =
		     $c->{h}->result(0) == 0
		  && $c->{out} =~ $workload_out
		  && @errors == 1
		  && $c->{err} =~ /ERROR:  fencing token rejected for lock "\Q$c->{name}\E"/;
		push @pids, $1 if $c->{out} =~ /\A([0-9]+)\n/;
		unless ($ok)
		{
			$all_ok = 0;
			diag("client $c->{name}: exit " . $c->{h}->result(0) . "\nstdout: $c->{out}\nstderr: $c->{err}");
		}
	}
	ok($all_ok, "$what: $n clients ran the workload");
	pids_gone($what, @pids) if @pids;
	return;
}

# session_work($s, @sql) runs the statements @sql in background session $s.
sub session_work
{
	my ($s, @sql) = @_;
	$s->{bg}->query_safe($_) for @sql;
	return;
}

# ---------------------------------------------------------------------
# Before anything: no rows (nothing counted since the start).
# ---------------------------------------------------------------------

is($node->safe_psql('sa', 'SELECT count(*) FROM dlock_stats'), '0',
	'no rows before any lease operation');

# 'held' in both databases, for the refusals and waits.
for my $db (qw(sa sb))
{
	$node->safe_psql($db, "SELECT dlock_acquire('held', '1 hour')");
	add($db, { grants_new => 1 });
}
is( $node->safe_psql(
		'sa',
		"SELECT abs(extract(epoch FROM stats_reset - pg_postmaster_start_time())) < 60 FROM dlock_stats WHERE datname = 'sa'"
	),
	't',
	'stats_reset is the server start before any reset');
counts_are('sa', 'the first grant');

# ---------------------------------------------------------------------
# 1, 2. Short-lived clients in two databases, a long-lived session.
# ---------------------------------------------------------------------

my $long = bg_session($node, 'long', 'sa');
session_work($long, "SELECT dlock_acquire('long1', '10 min')");
add('sa', { grants_new => 1 });
counts_are('sa', 'the long-lived session counts at once');

run_clients('sa', 'sa, ten clients', 10);
add('sa', \%work, 10);
counts_are('sa', 'ten clients exited: their counts were folded in exactly');

run_clients('sb', 'sb, four clients', 4);
add('sb', \%work, 4);

# sb also breaks and purges
{
	my $t = $node->safe_psql('sb', "SELECT dlock_acquire('bk', '10 min')");
	is($node->safe_psql('sb', "SELECT dlock_break('bk')"), 't', 'sb: dlock_break');
	is($node->safe_psql('sb', "SELECT dlock_break('bk')"), 'f', 'sb: dlock_break of nothing live');
	my $ended = $node->safe_psql('sb', 'SELECT count(*) FROM dlock_leases WHERE NOT live');
	is($node->safe_psql('sb', "SELECT dlock_purge('0')"), $ended, "sb: dlock_purge of $ended rows");
	add('sb', { grants_new => 1, breaks => 1, purged => $ended });
}
counts_are('sb', 'four clients, a break and a purge');
counts_are('sa', 'sb\'s work is not counted in sa');

session_work($long,
	"SELECT dlock_renew('long1', (SELECT token FROM dlock_leases WHERE lock_name = 'long1'), '10 min')",
	"SELECT dlock_acquire('long1', '10 min') IS NULL");
add('sa', { renewals => 1, refusals => 1 });
counts_are('sa', 'the long-lived session keeps counting');

# either database shows both rows, the same
{
	my $q = 'SELECT datname, ' . join(', ', @counters) . ', stats_reset FROM dlock_stats ORDER BY datname';
	my $from_sa = $node->safe_psql('sa', $q);
	my $from_sb = $node->safe_psql('sb', $q);
	is($from_sb, $from_sa, 'dlock_stats is the same read in sa or in sb');
	is(join(' ', map { (split /\|/)[0] } split /\n/, $from_sa), 'sa sb', 'both rows, sa and sb');
	counts_are('sb', 'read in sa', via => 'sa');
	counts_are('sa', 'read in sb', via => 'sb');
}

# ---------------------------------------------------------------------
# 3. dlock_stats_reset() with the long-lived session alive.
# ---------------------------------------------------------------------

{
	my %as_user = (extra_params => [ '-U', 'stuser' ]);
	is($node->safe_psql('sa', 'SELECT count(*) FROM dlock_stats', %as_user), '2',
		'an ordinary role reads dlock_stats');
	my ($out, $err);
	$node->psql(
		'sa', "\\set VERBOSITY verbose\nSELECT dlock_stats_reset();\n\\echo SQLSTATE :SQLSTATE",
		stdout => \$out,
		stderr => \$err,
		on_error_stop => 0,
		%as_user);
	like($out, qr/SQLSTATE 42501\z/, 'an ordinary role cannot call dlock_stats_reset (42501)')
	  or diag("stderr: $err");
	counts_are('sa', 'unchanged by the refused reset');

	my $before = stats_row('sa', 'sa');
	my $sb_before = stats_row('sb', 'sb');
	$node->safe_psql('sa', 'SELECT dlock_stats_reset()');
	$exp{sa} = {};
	counts_are('sa', 'zero after dlock_stats_reset() (the long-lived session is alive)');
	is( $node->safe_psql(
			'sa',
			"SELECT stats_reset > '$before->{stats_reset}' AND stats_reset <= now() FROM dlock_stats WHERE datname = 'sa'"
		),
		't',
		"stats_reset moved forward (from $before->{stats_reset})");
	is_deeply(stats_row('sb', 'sb'), $sb_before, 'sb\'s row (and its stats_reset) is untouched by sa\'s reset');

	session_work($long,
		"SELECT dlock_release('long1', (SELECT token FROM dlock_leases WHERE lock_name = 'long1'))",
		"SELECT dlock_acquire('long1', '10 min')",
		"SELECT dlock_renew('long1', (SELECT token FROM dlock_leases WHERE lock_name = 'long1'), '10 min')",
		"SELECT dlock_renew('long1', (SELECT token FROM dlock_leases WHERE lock_name = 'long1'), '10 min')");
	add('sa', { releases => 1, grants_after_release => 1, renewals => 2 });
	counts_are('sa', 'after the reset: exactly the long-lived session\'s new work');

	run_clients('sa', 'sa after the reset', 3);
	add('sa', \%work, 3);
	counts_are('sa', 'after the reset: and three clients\' work');

	bg_close($long);
	pids_gone('the long-lived session', $long->{pid});
	counts_are('sa', 'the long-lived session exited: only its work after the reset was folded in');
	counts_are('sb', 'sb unchanged');
}

# ---------------------------------------------------------------------
# 4. dlock.track_stats = off.
# ---------------------------------------------------------------------

{
	is($node->safe_psql('sa', 'SHOW dlock.track_stats'), 'on', 'dlock.track_stats is on by default');
	$node->safe_psql(
		'sa', q{
SELECT dlock_acquire('ts1', '10 min');
SET dlock.track_stats = off;
SELECT dlock_release('ts1', (SELECT token FROM dlock_leases WHERE lock_name = 'ts1'));
SELECT dlock_acquire('ts2', '10 min');
SELECT dlock_acquire('held', '1 min');
SELECT dlock_acquire('held', '1 min', '100 ms');
});
	add('sa', { grants_new => 1 });
	counts_are('sa', 'dlock.track_stats = off: only what came before the SET');

	run_clients('sa', 'sa, clients with dlock.track_stats = off', 2,
		before => "SET dlock.track_stats = off;\n");
	counts_are('sa', 'dlock.track_stats = off: those clients counted nothing');

	my ($out, $err);
	$node->psql(
		'sa', "\\set VERBOSITY verbose\nSET dlock.track_stats = off;\n\\echo SQLSTATE :SQLSTATE",
		stdout => \$out,
		stderr => \$err,
		on_error_stop => 0,
		extra_params => [ '-U', 'stuser' ]);
	like($out, qr/SQLSTATE 42501\z/, 'an ordinary role cannot SET dlock.track_stats (42501)')
	  or diag("stderr: $err");
}

# ---------------------------------------------------------------------
# 5. The same name waited for in two databases.
# ---------------------------------------------------------------------

{
	my $hold_b = $node->safe_psql('sb', "SELECT dlock_acquire('job', '10 min')");
	my $wb = bg_session($node, 'waiter-b', 'sb');
	bg_start($wb, "SELECT dlock_acquire('job', '10 min', '60 s');");
	ok( $node->poll_query_until(
			'sb', "SELECT count(*) FROM dlock_waiters WHERE pid = $wb->{pid}", '1'),
		'sb: its waiter for job is queued');

	my $hold_a = $node->safe_psql('sa', "SELECT dlock_acquire('job', '10 min')");
	my $wa = bg_session($node, 'waiter-a', 'sa');
	bg_start($wa, "SELECT dlock_acquire('job', '10 min', '20 s');");
	ok( $node->poll_query_until(
			'sa', "SELECT count(*) FROM dlock_waiters WHERE pid = $wa->{pid}", '1'),
		'sa: its waiter for job is queued');

	my $cols = q{pid, database, role, lock_name, kind, names, position,
  wait_until - waiting_since BETWEEN interval '10 s' AND interval '%s'};
	is( $node->safe_psql('sa', 'SELECT ' . sprintf($cols, '20 s') . ' FROM dlock_waiters'),
		"$wa->{pid}|sa|postgres|job|acquire|1|1|t",
		'dlock_waiters in sa: only sa\'s waiter, at position 1');
	is( $node->safe_psql('sb', 'SELECT ' . sprintf($cols, '60 s') . ' FROM dlock_waiters'),
		"$wb->{pid}|sb|postgres|job|acquire|1|1|t",
		'dlock_waiters in sb: only sb\'s waiter, at position 1');

	my $t0 = Time::HiRes::time();
	is($node->safe_psql('sa', "SELECT dlock_release('job', $hold_a)"), 't', 'sa: the holder releases job');
	my ($out, $state) = bg_finish($wa);
	my $elapsed = Time::HiRes::time() - $t0;
	like($out, qr/\A[0-9]+\z/, 'sa: its waiter got job, not NULL at its deadline');
	is($state, '00000', 'sa: its waiter raised nothing');
	ok($out =~ /\A[0-9]+\z/ && $out > $hold_a, 'sa: with a token greater than the released one');
	note sprintf('sa\'s waiter got the lease %.3f s after the release began (its wait was 20 s)', $elapsed);

	is( $node->safe_psql('sb', "SELECT count(*) FROM dlock_waiters WHERE pid = $wb->{pid}"),
		'1', 'sb: its waiter still waits');
	is($node->safe_psql('sb', "SELECT dlock_release('job', $hold_b)"), 't', 'sb: the holder releases job');
	($out, $state) = bg_finish($wb);
	like($out, qr/\A[0-9]+\z/, 'sb: its waiter got job');
	is($state, '00000', 'sb: its waiter raised nothing');
	bg_close($_) for ($wa, $wb);

	for my $db (qw(sa sb))
	{
		add($db, { grants_new => 1, releases => 1, waits => 1, grants_after_release => 1 });
		counts_are($db, 'the wait for job counted in its own database');
	}
}

# ---------------------------------------------------------------------
# 6. A crash resets the counters.
# ---------------------------------------------------------------------

{
	is(scalar(crash_lines($node)), 0, 'no crash so far');
	my $last_reset = stats_row('sa', 'sa')->{stats_reset};
	my $victim = bg_session($node, 'victim', 'sa');
	session_work($victim, "SELECT dlock_acquire('victim', '10 min')");
	my $off = -s $node->logfile;
	note 'crash: kill -9 of a backend; the postmaster rebuilds shared memory, '
	  . 'and the counters with it (they are kept nowhere else)';
	kill 'KILL', $victim->{pid};
	ok($node->poll_query_until('sa', 'SELECT true'), 'the server is back after the crash');
	my $off_after = -s $node->logfile;
	like(
		slurp_file($node->logfile, $off),
		qr/(?:server process|client backend) \(PID $victim->{pid}\) was terminated by signal 9/,
		'the server log shows the killed backend');
	bg_close($victim);

	is($node->safe_psql('sa', 'SELECT count(*) FROM dlock_stats'), '0',
		'after the crash: no rows until a database counts again');
	is($node->safe_psql('sb', 'SELECT count(*) FROM dlock_stats'), '0',
		'after the crash: no rows, read in sb either');

	# the first grant in a database after a (re)start takes the boot jump
	# (src/token.c): one token jump
	$node->safe_psql('sa', "SELECT dlock_acquire('after-crash', '10 min')");
	$exp{sa} = { grants_new => 1, token_jumps => 1 };
	$exp{sb} = {};
	counts_are('sa', 'after the crash: only the grant since, and its boot jump');
	is( $node->safe_psql(
			'sa',
			"SELECT stats_reset > '$last_reset' FROM dlock_stats WHERE datname = 'sa'"),
		't',
		'after the crash: stats_reset is later than the last reset');
	is($node->safe_psql('sa', "SELECT string_agg(datname, ' ') FROM dlock_stats"),
		'sa', 'after the crash: a row for sa only');

	# an immediate stop and a start
	$node->stop('immediate');
	$node->start;
	is($node->safe_psql('sa', 'SELECT count(*) FROM dlock_stats'), '0',
		'after an immediate stop and a start: no rows');
	$node->safe_psql('sb', "SELECT dlock_release('job', (SELECT token FROM dlock_leases WHERE lock_name = 'job'))");
	$exp{sb} = { releases => 1 };
	counts_are('sb', 'after the restart: only the release since (no grant: no boot jump)');
	is($node->safe_psql('sb', "SELECT string_agg(datname, ' ') FROM dlock_stats"),
		'sb', 'after the restart: a row for sb only');
	is(scalar(crash_lines($node, $off_after)), 0, 'no crash after the one caused');
}

$node->stop;
done_testing();
