#!/usr/bin/perl
#
# test/t/028_cli_wait_retry.pl
#	  A waiting acquire (dlock run --wait, dlock acquire --wait) rides
#	  through a lost connection, a server restart or outage, and a
#	  read-only server: it reconnects and waits again until --wait runs
#	  out, and only then gives up (75, or 69 when no server ever took the
#	  acquire).  Issue 16, part 1 (cli/dlock.c, DlockAcquireLease).
#
#   1. Terminated backend: a holder holds the name, dlock run --wait 30s
#      waits; its backend is terminated (pg_terminate_backend).  dlock
#      reconnects and waits again (a new backend); the holder releases;
#      dlock gets the lease and runs CMD (exit 0).
#      The same when the backend is killed (SIGKILL, a crash restart):
#      dlock also says that the lost call may have been granted.
#      The same for a set (dlock acquire --all --wait).
#   2. The same through a server restart (fast mode), and through an
#      outage of about three seconds (stop, sleep, start) during the wait.
#   3. The server stops during the wait and stays down past --wait 4s:
#      exit 75 once --wait has run out (not at once), CMD not started.
#   4. The server is down from the start: --wait 2s ends in 69 (no server
#      ever took the acquire), after --wait, not at once; and a server that
#      comes up during the wait is used (exit 0).
#   5. A read-only server: the role's sessions are read-only
#      (default_transaction_read_only), so the acquire fails with 25006, or
#      libpq's target_session_attrs=read-write refuses every host of a
#      multi-host conninfo; once the role is writable again, the waiting
#      dlock acquire and dlock run get the lease.
#
# Every wait is bounded and polled; the only time bounds asserted are
# lower bounds (dlock did not give up before --wait ran out) and generous
# upper ones.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();
use DlockCli;
use DlockTest;

# part 1b kills a backend: the server must restart (the test modules'
# default is off)
my $node = dlock_node('dlock_cli_wait_retry',
	conf => "restart_after_crash = on\n",
	setup => 'CREATE EXTENSION dlock; CREATE ROLE ro LOGIN');
my $conn = $node->connstr('postgres');
my $dir  = PostgreSQL::Test::Utils::tempdir('cli_wait_retry');

# hold($name) acquires $name for a minute in the test's own session and
# returns the token; release($name, $token) releases it.
sub hold { return sql("SELECT dlock_acquire('$_[0]', '1 min')"); }
sub release { return sql("SELECT dlock_release('$_[0]', $_[1])"); }

# waiting_pid($h, $app) waits until a session named $app runs the acquire
# of dlock $h, and returns its pid; '' if none did in time, or dlock
# exited first.  With $not, a session other than pid $not.  The server
# may be down or restarting meanwhile.
sub waiting_pid
{
	my ($h, $app, $not) = @_;
	my $cond = "application_name = '$app' AND state = 'active' AND query LIKE '%dlock_acquire%'"
	  . (defined $not ? " AND pid <> $not" : '');
	my $end = Time::HiRes::time() + $PostgreSQL::Test::Utils::timeout_default;
	while (Time::HiRes::time() < $end && process_alive($h->{pid}))
	{
		my $out = '';
		# (psql may exit before it has read the query: the server is down)
		eval {
			$node->psql('postgres', "SELECT pid FROM pg_stat_activity WHERE $cond",
				stdout => \$out);
		};
		return $out if $out =~ /^\d+$/;
		Time::HiRes::sleep(0.1);
	}
	return '';
}

# job($tag) writes a CMD that records its token in $dir/$tag.token.
sub job
{
	my ($tag) = @_;
	return write_script("$dir/$tag.sh", qq{echo "\$DLOCK_TOKEN" > $dir/$tag.token\n});
}

# 1. A terminated backend.
my $t = hold('w-term');
my $h = dlock_start([ 'run', '-d', "$conn application_name=w-term", '--wait', '30s',
	'w-term', '--', job('term') ]);
my $pid = waiting_pid($h, 'w-term');
like($pid, qr/^\d+$/, 'terminated backend: dlock waits');
sql("SELECT pg_terminate_backend($pid)");
my $pid2 = waiting_pid($h, 'w-term', $pid);
like($pid2, qr/^\d+$/, 'terminated backend: dlock reconnected and waits again');
is(release('w-term', $t), 't', 'terminated backend: the holder releases');
is(dlock_wait($h), 0, 'terminated backend: dlock got the lease and ran CMD (exit 0)');
my $tok = slurp("$dir/term.token") =~ s/\n//r;
cmp_ok($tok, '>', $t, 'terminated backend: CMD ran with a new token');
is(sql("SELECT token, released FROM dlock_leases WHERE lock_name = 'w-term'"),
	"$tok|t", 'terminated backend: its lease was released at the end');
like($h->{stderr}, qr/could not acquire "w-term": (?:lost the connection to the database: )?.*terminating connection.*; trying again until --wait runs out \(\S+ left\)/s,
	'terminated backend: dlock says it tries again');

# 1b. A backend killed (SIGKILL: the server restarts after the crash): the
#     connection is just gone, so the call may have been granted; dlock
#     says what such a grant becomes, and waits again.
$t = hold('w-kill');
$h = dlock_start([ 'run', '-d', "$conn application_name=w-kill", '--wait', '40s',
	'w-kill', '--', job('kill') ]);
$pid = waiting_pid($h, 'w-kill');
like($pid, qr/^\d+$/, 'killed backend: dlock waits');
kill 'KILL', $pid;
like(waiting_pid($h, 'w-kill', $pid), qr/^\d+$/, 'killed backend: after the crash restart, dlock waits again');
is(release('w-kill', $t), 't', "killed backend: the holder's lease survived the crash; it releases");
is(dlock_wait($h), 0, 'killed backend: dlock got the lease and ran CMD (exit 0)');
like($h->{stderr}, qr/could not acquire "w-kill": lost the connection to the database: .*; trying again until --wait runs out/s,
	'killed backend: dlock says it lost the connection and tries again');
like($h->{stderr}, qr/the lost call may have been granted the lease without dlock learning its token: it then ends when its ttl \(30s\) runs out, and the next acquire waits for it/,
	'killed backend: and what a lost grant becomes');

# 1c. The same for a set: dlock acquire --all --wait, a member held.
$t = hold('w-set-b');
$h = dlock_start([ '-d', "$conn application_name=w-set", 'acquire', '--all', '--wait', '30s',
	'w-set-a', 'w-set-b' ]);
$pid = waiting_pid($h, 'w-set');
like($pid, qr/^\d+$/, 'set: dlock acquire --all waits');
sql("SELECT pg_terminate_backend($pid)");
like(waiting_pid($h, 'w-set', $pid), qr/^\d+$/, 'set: dlock reconnected and waits again');
is(release('w-set-b', $t), 't', 'set: the holder releases');
is(dlock_wait($h), 0, 'set: dlock acquire --all got both (exit 0)');
like($h->{stdout}, qr/^\d+ w-set-a\n\d+ w-set-b\n\z/, 'set: and printed both tokens');
like($h->{stderr}, qr/the lost call may have been granted the leases without dlock learning their tokens: they then end when their ttl \(30s\) runs out, and the next acquire waits for them/,
	'set: what lost grants become');

# 2. A restart, and an outage of about three seconds, during the wait.
for my $case ('restart', 'outage')
{
	$t = hold("w-$case");
	$h = dlock_start([ 'run', '-d', "$conn application_name=w-$case", '--wait', '40s',
		"w-$case", '--', job($case) ]);
	$pid = waiting_pid($h, "w-$case");
	like($pid, qr/^\d+$/, "$case: dlock waits");
	if ($case eq 'restart')
	{
		$node->restart;
	}
	else
	{
		$node->stop('fast');
		sleep 3;
		ok(process_alive($h->{pid}), 'outage: dlock is still waiting while the server is down');
		$node->start;
	}
	like(waiting_pid($h, "w-$case"), qr/^\d+$/, "$case: dlock reconnected and waits again");
	is(release("w-$case", $t), 't', "$case: the holder's lease survived; it releases");
	is(dlock_wait($h), 0, "$case: dlock got the lease and ran CMD (exit 0)");
	$tok = slurp("$dir/$case.token") =~ s/\n//r;
	cmp_ok($tok, '>', $t, "$case: CMD ran with a new token");
}

# 3. --wait runs out while the server is down: 75, CMD not started.
$t = hold('w-down');
$h = dlock_start([ 'run', '-d', "$conn application_name=w-down", '--wait', '4s',
	'w-down', '--', job('down') ]);
like(waiting_pid($h, 'w-down'), qr/^\d+$/, 'down past --wait: dlock waits');
$node->stop('fast');
is(dlock_wait($h, 60), 75, 'down past --wait: exit 75 (the lease was held when last asked)');
cmp_ok($h->{elapsed}, '>=', 3.9, 'down past --wait: not before --wait ran out');
cmp_ok($h->{elapsed}, '<', 30, 'down past --wait: soon after it');
ok(!-e "$dir/down.token", 'down past --wait: CMD was not started');
like($h->{stderr}, qr/not acquired: --wait \(4s\) ran out while the database could not be used \(last error: .*\); "w-down" held when last asked/s,
	'down past --wait: dlock says why');

# 4. Down from the start: 69 after --wait; and a server that comes up.
$h = dlock_run([ 'run', '-d', $conn, '--wait', '2s', 'w-never', '--', job('never') ], timeout => 60);
is($h->{rc}, 69, 'down from the start: exit 69 (no server took the acquire)');
cmp_ok($h->{elapsed}, '>=', 1.9, 'down from the start: not before --wait ran out');
ok(!-e "$dir/never.token", 'down from the start: CMD was not started');
like($h->{stderr}, qr/^dlock: could not acquire "w-never": connection to server .* failed.*; trying again until --wait runs out/ms,
	"down from the start: libpq's message, and that dlock tries again");
like($h->{stderr}, qr/could not acquire "w-never": no usable database within --wait \(2s\); last error: connection to server/s,
	'down from the start: and why it gave up');
$h = dlock_run([ '-d', $conn, 'acquire', '--wait', '1s', 'w-never' ], timeout => 60);
is($h->{rc}, 69, 'down from the start: dlock acquire --wait exits 69 too');
cmp_ok($h->{elapsed}, '>=', 0.9, 'down from the start: dlock acquire tried until --wait ran out');

$h = dlock_start([ 'run', '-d', $conn, '--wait', '40s', 'w-up', '--', job('up') ]);
# the server comes up once dlock has found it down and is trying again
wait_until(sub { slurp($h->{err}) =~ /could not acquire "w-up": .*trying again/s },
	$PostgreSQL::Test::Utils::timeout_default)
  or die 'dlock run --wait did not report a failed attempt: ' . slurp($h->{err});
$node->start;
is(dlock_wait($h), 0, 'a server that comes up during the wait: dlock gets the lease (exit 0)');
like(slurp("$dir/up.token"), qr/^\d+\n\z/, 'a server that comes up during the wait: CMD ran');
is(release('w-down', $t), 't', "(the holder's lease of part 3 survived)");

# 5. A read-only server.
sql('ALTER ROLE ro SET default_transaction_read_only = on');
$t = hold('w-ro');
$h = dlock_start([ '-d', "$conn user=ro", 'acquire', '--wait', '40s', 'w-ro' ]);
my $multi = sprintf('host=%s,%s port=%s,%s dbname=postgres user=ro target_session_attrs=read-write',
	$node->host, $node->host, $node->port, $node->port);
my $h2 = dlock_start([ 'run', '-d', $multi, '--wait', '40s', 'w-ro2', '--', job('ro2') ]);
# both are refused (25006; libpq: no read-write host), then go on trying
for my $w ([ $h, 'w-ro' ], [ $h2, 'w-ro2' ])
{
	wait_until(sub { slurp($w->[0]{err}) =~ /could not acquire "$w->[1]": .*trying again/s },
		$PostgreSQL::Test::Utils::timeout_default)
	  or die "$w->[1]: no refused attempt reported: " . slurp($w->[0]{err});
}
ok(process_alive($h->{pid}) && process_alive($h2->{pid}),
	'read-only: both still trying after they were refused');
is(release('w-ro', $t), 't', 'read-only: the holder releases');
sql('ALTER ROLE ro RESET default_transaction_read_only');
is(dlock_wait($h), 0, 'read-only: dlock acquire --wait got the lease once the server was writable');
like($h->{stdout}, qr/^\d+\n\z/, 'read-only: and printed its token');
like($h->{stderr}, qr/could not acquire "w-ro": cannot execute dlock_acquire\(\) in a read-only transaction \(SQLSTATE 25006\); trying again/,
	'read-only: dlock said it tries again after 25006');
is(dlock_wait($h2), 0, 'read-only (target_session_attrs=read-write, two hosts): dlock run got the lease');
like(slurp("$dir/ro2.token"), qr/^\d+\n\z/, 'read-only (target_session_attrs): CMD ran');
like($h2->{stderr}, qr/could not acquire "w-ro2": connection to server .*read-only.*; trying again/s,
	"read-only (target_session_attrs): libpq's message, and that dlock tries again");

$node->stop;
done_testing();
