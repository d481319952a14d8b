#!/usr/bin/perl
#
# test/t/036_cli_watchdog.pl
#	  dlock run --watchdog (cli/notify.c, cli/run.c) with a job that pings
#	  it the way it would ping systemd: systemd-notify WATCHDOG=1 on the
#	  socket named by NOTIFY_SOCKET.
#
# Every CMD is a bash script that records what it sees in files (its
# environment, its pids and its children's, the exit status of each
# systemd-notify); the test compares those files, dlock's exit status and
# stderr, the processes left in /proc and the lease rows in dlock_leases.
# dlock gets TMPDIR, a directory of this test, so that its socket's
# directory can be looked for.  Timings are not asserted; a job that must
# be stopped sleeps far longer than the bounded waits of the test.
#
#   1. CMD's environment: NOTIFY_SOCKET (a socket, in a private directory
#      under TMPDIR, while CMD runs; gone with its directory once dlock
#      has exited), WATCHDOG_USEC (3000000 for 3s), WATCHDOG_PID (CMD's
#      pid).
# Then, all at once, on different lock names:
#   2. healthy: pings every 0.3 s for longer than the watchdog: exit 0,
#      every systemd-notify exits 0 (dlock answers its BARRIER=1), the
#      lease is released.
#   3. hung: pings, then stops, with a background child that ignores
#      SIGTERM: exit 80, a message naming WATCHDOG=1, no process of the
#      job left once dlock has exited, the lease released; never pings:
#      exit 80.
#   4. WATCHDOG=trigger under a 60s watchdog: exit 80 long before the
#      watchdog could have fired, while the job sleeps 30 s.
#   5. READY=1 and STATUS=working are ignored: the job goes on and exits
#      0 (exit 0); they are no pings either (a job sending only them:
#      exit 80).  WATCHDOG_USEC=60000000 lengthens the timeout: a job
#      silent for 4 s under --watchdog 3s then exits 0 (exit 0).
#   6. dlock killed with SIGKILL: the job's processes end and the socket's
#      directory is removed (by dlock's keeper).
# And a usage error: --watchdog 0 (exit 64).
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

my $notify = '/usr/bin/systemd-notify';
plan skip_all => "$notify (package systemd) is not installed" unless -x $notify;

my $node = dlock_node('dlock_cli_watchdog',
	setup => 'CREATE EXTENSION dlock');
my $conn = $node->connstr('postgres');
my $dir  = PostgreSQL::Test::Utils::tempdir('cli_watchdog');
# short: a socket's path is at most 107 bytes
my $tmp = PostgreSQL::Test::Utils::tempdir_short();
my %env = (TMPDIR => $tmp);

# lease returns "released|live" of $name's row, '' when there is none.
sub lease
{
	my ($name) = @_;
	return sql("SELECT released, live FROM dlock_leases WHERE lock_name = '$name'");
}

# ppid returns a process's parent pid, '' when it does not exist.
sub ppid
{
	my ($pid) = @_;
	return slurp("/proc/$pid/stat") =~ /^\d+ \(.*\) \S (\d+) /s ? $1 : '';
}

# socket_dirs returns the directories dlock made under TMPDIR.
sub socket_dirs { return glob("$tmp/dlock-*"); }

# run_job(NAME, [OPTIONS], SCRIPT) starts dlock run on SCRIPT.
sub run_job
{
	my ($name, $opts, $script) = @_;
	return dlock_start([ 'run', '-d', $conn, @$opts, $name, '--', $script ],
		env => \%env);
}

# ---------------------------------------------------------------------
# 1. The environment.
# ---------------------------------------------------------------------

write_script("$dir/env.sh", qq{{
echo "\$NOTIFY_SOCKET"
echo "\$WATCHDOG_USEC"
echo "\$WATCHDOG_PID"
echo "\$\$"
[ -S "\$NOTIFY_SOCKET" ] && echo socket || echo "no socket"
stat -c %a "\$(dirname "\$NOTIFY_SOCKET")"
} > $dir/env.out
});
my $h = dlock_run([ 'run', '-d', $conn, '--watchdog', '3s', 'env-job', '--', "$dir/env.sh" ],
	env => \%env);
is($h->{rc}, 0, 'environment: exit 0');
my ($sock, $usec, $wpid, $pid, $is_sock, $mode) = split /\n/, slurp("$dir/env.out");
like($sock, qr{^\Q$tmp\E/dlock-[^/]+/notify$},
	'NOTIFY_SOCKET is a path in a directory of its own under TMPDIR');
is($is_sock, 'socket', 'NOTIFY_SOCKET is a socket while CMD runs');
is($mode, '700', 'its directory has mode 0700');
is($usec, '3000000', 'WATCHDOG_USEC is the watchdog in microseconds (3s)');
is($wpid, $pid, "WATCHDOG_PID is CMD's pid");
ok(!-e $sock, 'the socket is gone once dlock has exited');
ok(!-e ($sock =~ s{/notify$}{}r), 'and so is its directory');
is_deeply([ socket_dirs() ], [], 'nothing is left under TMPDIR');

# ---------------------------------------------------------------------
# 2-6 at once.
# ---------------------------------------------------------------------

# jobs that never ping: a watchdog of 1 s
my @wd = ('--ttl', '4s', '--watchdog', '1s', '--kill-after', '1s');
# jobs that must not be stopped: a longer watchdog, so that a loaded
# machine (each systemd-notify is a process, and waits for its barrier)
# cannot make a ping late; they still run longer than it
my @wd_ok = ('--ttl', '4s', '--watchdog', '2s', '--kill-after', '1s');
# jobs whose first ping (a process started with the job) must come in
# time, or that must outlast the watchdog's time without pinging: 3 s, as
# a loaded machine can delay a process's start by a second and more
my @wd_slow = ('--ttl', '4s', '--watchdog', '3s', '--kill-after', '1s');

# 2. healthy: 10 pings, 0.3 s apart
write_script("$dir/healthy.sh", qq{echo "\$NOTIFY_SOCKET" > $dir/healthy.sock
for i in 1 2 3 4 5 6 7 8 9 10; do
	$notify WATCHDOG=1
	echo \$? >> $dir/healthy.rcs
	sleep 0.3
done
echo done > $dir/healthy.done
});
my $healthy = run_job('healthy-job', \@wd_ok, "$dir/healthy.sh");

# 3. hung: a ping, a background child that ignores SIGTERM (its pid
# written right after the ping, with the whole watchdog left: written after
# the last ping's 0.3 s sleep, it came too late on a loaded machine), 3 more
# pings, and a long sleep
write_script("$dir/hung.sh", qq{$notify WATCHDOG=1
(trap '' TERM; while :; do sleep 0.2; done) &
echo "\$\$ \$!" > $dir/hung.pids
for i in 1 2 3; do $notify WATCHDOG=1; sleep 0.3; done
sleep 100
echo "not stopped" > $dir/hung.after
});
# (a watchdog of 2 s: its first ping must come in time)
my $hung = run_job('hung-job', [ '--ttl', '4s', '--watchdog', '2s', '--kill-after', '1s' ],
	"$dir/hung.sh");

# 3b. never pings
write_script("$dir/silent.sh", qq{echo \$\$ > $dir/silent.pid
sleep 100
echo "not stopped" > $dir/silent.after
});
my $silent = run_job('silent-job', \@wd, "$dir/silent.sh");

# 4. WATCHDOG=trigger under a 60s watchdog
write_script("$dir/trigger.sh", qq{$notify WATCHDOG=1
echo \$\$ > $dir/trigger.pid
$notify WATCHDOG=trigger
sleep 30
echo "not stopped" > $dir/trigger.after
});
my $trigger = run_job('trigger-job', [ '--ttl', '4s', '--watchdog', '60s', '--kill-after', '1s' ],
	"$dir/trigger.sh");

# 5. READY=1 and STATUS=working between pings
write_script("$dir/ready.sh", qq{for i in 1 2 3 4 5 6 7 8 9; do
	$notify READY=1
	echo \$? >> $dir/ready.rcs
	$notify STATUS=working
	echo \$? >> $dir/ready.rcs
	$notify WATCHDOG=1
	echo \$? >> $dir/ready.rcs
	sleep 0.3
done
echo done > $dir/ready.done
});
my $ready = run_job('ready-job', \@wd_ok, "$dir/ready.sh");

# 5b. READY=1 and STATUS=working, never WATCHDOG=1
write_script("$dir/status.sh", qq{for i in \$(seq 1 100); do
	$notify READY=1 STATUS=working
	sleep 0.2
done
echo "not stopped" > $dir/status.after
});
my $status = run_job('status-job', \@wd, "$dir/status.sh");

# 5c. WATCHDOG_USEC=60000000, then 4 s without a ping
write_script("$dir/usec.sh", qq{$notify WATCHDOG_USEC=60000000
echo \$? > $dir/usec.rc
sleep 4
echo done > $dir/usec.done
});
my $usec_job = run_job('usec-job', \@wd_slow, "$dir/usec.sh");

# 6. dlock killed: a pinging job with a background child
write_script("$dir/orphan.sh", qq{sleep 100 &
echo "\$\$ \$! \$NOTIFY_SOCKET" > $dir/orphan.pids
while :; do $notify WATCHDOG=1; sleep 0.3; done
});
my $orphan = run_job('orphan-job', \@wd_slow, "$dir/orphan.sh");

# 6: kill dlock once its job runs
ok(wait_for_file("$dir/orphan.pids"), 'killed dlock: CMD started');
my ($o_cmd, $o_bg, $o_sock) = split ' ', slurp("$dir/orphan.pids");
my $o_keeper = ppid($o_cmd);
is(ppid($o_keeper), $orphan->{pid}, "killed dlock: CMD's parent is dlock's child, the keeper");
ok(-S $o_sock, 'killed dlock: the socket exists while the job runs');
kill 'KILL', $orphan->{pid};
is(dlock_wait($orphan), 137, 'killed dlock: dlock was killed');
for my $p ([ 'CMD', $o_cmd ], [ 'its background child', $o_bg ], [ 'the keeper', $o_keeper ])
{
	ok(wait_until(sub { !process_alive($p->[1]) }), "killed dlock: $p->[0] ends");
}
ok(!-e $o_sock, 'killed dlock: the socket was removed');
ok(!-e ($o_sock =~ s{/notify$}{}r), 'killed dlock: and its directory');

# 2
ok(wait_for_file("$dir/healthy.sock"), 'healthy: CMD started');
my $h_sock = slurp("$dir/healthy.sock") =~ s/\n//r;
ok(-S $h_sock, 'healthy: the socket exists while the job runs');
is(dlock_wait($healthy), 0, 'healthy: exit 0');
is(slurp("$dir/healthy.done"), "done\n", 'healthy: CMD ran to the end');
is(slurp("$dir/healthy.rcs"), "0\n" x 10, 'healthy: every systemd-notify WATCHDOG=1 exited 0');
is($healthy->{stderr}, '', 'healthy: nothing on stderr');
is(lease('healthy-job'), 't|f', 'healthy: the lease was released');
ok(!-e $h_sock, 'healthy: the socket is gone');

# 3
is(dlock_wait($hung), 80, 'hung: exit 80');
like($hung->{stderr}, qr/CMD sent no WATCHDOG=1 for 2s: stopping CMD/,
	'hung: dlock says that no WATCHDOG=1 came');
like($hung->{stderr}, qr/SIGKILL/, 'hung: and that it sent SIGKILL (to the child ignoring SIGTERM)');
my ($hung_cmd, $hung_bg) = split ' ', slurp("$dir/hung.pids");
ok(defined $hung_bg, 'hung: CMD started its background child');
ok(!process_alive($hung_cmd), 'hung: CMD is gone once dlock has exited');
ok(!process_alive($hung_bg),  'hung: its background child (ignoring SIGTERM) too');
ok(!-e "$dir/hung.after", 'hung: CMD did not go on');
is(lease('hung-job'), 't|f', 'hung: the lease was released (after the job had ended)');

is(dlock_wait($silent), 80, 'never pinging: exit 80');
like($silent->{stderr}, qr/CMD sent no WATCHDOG=1 for 1s \(none since it started\)/,
	'never pinging: dlock says none came since CMD started');
ok(!process_alive(slurp("$dir/silent.pid") =~ s/\n//r), 'never pinging: CMD is gone');
is(lease('silent-job'), 't|f', 'never pinging: the lease was released');

# 4
is(dlock_wait($trigger, 20), 80,
	'WATCHDOG=trigger: exit 80, under a 60s watchdog, while CMD sleeps 30 s');
like($trigger->{stderr}, qr/CMD sent WATCHDOG=trigger: stopping CMD/,
	'WATCHDOG=trigger: dlock says so');
ok(!process_alive(slurp("$dir/trigger.pid") =~ s/\n//r), 'WATCHDOG=trigger: CMD is gone');
ok(!-e "$dir/trigger.after", 'WATCHDOG=trigger: CMD did not go on');
is(lease('trigger-job'), 't|f', 'WATCHDOG=trigger: the lease was released');

# 5
is(dlock_wait($ready), 0, 'READY=1, STATUS=working between pings: exit 0');
is(slurp("$dir/ready.done"), "done\n", 'READY=1, STATUS=working: CMD ran to the end');
is(slurp("$dir/ready.rcs"), "0\n" x 27, 'READY=1, STATUS=working: every systemd-notify exited 0');
is($ready->{stderr}, '', 'READY=1, STATUS=working: nothing on stderr');
is(lease('ready-job'), 't|f', 'READY=1, STATUS=working: the lease was released');

is(dlock_wait($status), 80, 'only READY=1 and STATUS=working, no WATCHDOG=1: exit 80');
like($status->{stderr}, qr/\(none since it started\)/,
	'only READY=1 and STATUS=working: they do not count as pings');
ok(!-e "$dir/status.after", 'only READY=1 and STATUS=working: CMD did not go on');

is(dlock_wait($usec_job), 0, 'WATCHDOG_USEC=60000000, then 4 s without a ping: exit 0');
is(slurp("$dir/usec.rc"), "0\n", 'WATCHDOG_USEC=60000000: systemd-notify exited 0');
is(slurp("$dir/usec.done"), "done\n", 'WATCHDOG_USEC=60000000: CMD ran to the end');
is(lease('usec-job'), 't|f', 'WATCHDOG_USEC=60000000: the lease was released');

# the socket directories of all the runs, the killed one's too, are gone
is_deeply([ socket_dirs() ], [], 'nothing is left under TMPDIR');

# ---------------------------------------------------------------------
# 6b. Once nothing can ping any more, the watchdog is off: CMD exited and
# left a process that takes 4 s to end on SIGTERM; dlock was told to stop
# (SIGTERM) and CMD takes 4 s to clean up.  Both longer than the 3 s
# watchdog (3 s: the first ping, a process of its own, must come in time
# on a loaded machine): dlock exits with CMD's status, not 80.
# ---------------------------------------------------------------------
write_script("$dir/left.sh", qq{$notify WATCHDOG=1
( trap 'sleep 4; exit 0' TERM; sleep 100 & wait ) &
echo started > $dir/left.started
exit 0
});
write_script("$dir/told.sh", qq{trap 'sleep 4; exit 3' TERM
echo started > $dir/told.started
while :; do $notify WATCHDOG=1; sleep 0.3; done
});
# (--kill-after 8s: the leftover and the cleanup may take their 4 s)
my $left = run_job('left-job', [ '--ttl', '4s', '--watchdog', '3s', '--kill-after', '8s' ],
	"$dir/left.sh");
my $told = run_job('told-job', [ '--ttl', '4s', '--watchdog', '3s', '--kill-after', '8s' ],
	"$dir/told.sh");
ok(wait_for_file("$dir/told.started"), 'told: CMD started');
kill 'TERM', $told->{pid};
is(dlock_wait($left), 0, "leftovers ending after the watchdog's time: CMD's status, not 80");
like($left->{stderr}, qr/leaving \d+ process/, 'leftovers: dlock stopped what CMD left');
unlike($left->{stderr}, qr/WATCHDOG/, 'leftovers: the watchdog did not fire');
is(dlock_wait($told), 3, "told to stop, a cleanup longer than the watchdog: CMD's status (3), not 80");
unlike($told->{stderr}, qr/WATCHDOG/, 'told to stop: the watchdog did not fire');
is(lease('left-job') . ' ' . lease('told-job'), 't|f t|f', 'both leases were released');

# ---------------------------------------------------------------------
# 7. Usage.
# ---------------------------------------------------------------------

write_script("$dir/touch.sh", "echo ran > $dir/touched\n");
$h = dlock_run([ 'run', '-d', $conn, '--watchdog', '0', 'u-job', '--', "$dir/touch.sh" ],
	env => \%env);
is($h->{rc}, 64, '--watchdog 0: usage error (exit 64)');
like($h->{stderr}, qr/^dlock: --watchdog must be at least 1ms$/m, '--watchdog 0: the message');
$h = dlock_run([ 'run', '-d', $conn, '--watchdog', 'soon', 'u-job', '--', "$dir/touch.sh" ],
	env => \%env);
is($h->{rc}, 64, '--watchdog soon: usage error (exit 64)');
like($h->{stderr}, qr/^dlock: invalid duration "soon" for --watchdog/m, '--watchdog soon: the message');
ok(!-e "$dir/touched", 'usage errors: CMD was not started');
is(sql("SELECT count(*) FROM dlock_leases WHERE lock_name = 'u-job'"),
	'0', 'usage errors: nothing acquired');

$node->stop;
done_testing();
