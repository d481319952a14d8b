#!/usr/bin/perl
#
# test/t/022_cli_restart.pl
#	  dlock run (cli/run.c) when the database goes away during a run.
#
#   1. The server restarts during a run (pg_ctl restart, fast mode: every
#      connection is terminated).  dlock's connection is gone; it
#      reconnects and renews with the same token before its local deadline,
#      the lease survives (leases are WAL-logged), CMD runs to the end
#      untouched, and the lease is released at the end.
#   2. The server stops during a run and stays down past the lease's ttl.
#      dlock keeps retrying by its monotonic clock; a third of the ttl
#      before the deadline (the grace, min(--kill-after, ttl/3)) the
#      keeper stops CMD: it gets SIGTERM, and dlock exits 76 once the
#      deadline has passed without a renew, while the server is still
#      down.  After the server is back, the lease row
#      shows the lease expired, not released (dlock did not touch it).
#   3. While the server is down, a new dlock run exits 69 with libpq's
#      message, and CMD is never started.
#   0. First, a database that hangs without closing the connection: the
#      backend serving dlock is stopped with SIGSTOP.  Its renew gets no
#      answer; dlock abandons the attempt in time, renews on a new
#      connection, and the run ends normally.
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

my $node = dlock_node('dlock_cli_restart',
	setup => 'CREATE EXTENSION dlock');
my $conn = $node->connstr('postgres');
my $dir  = PostgreSQL::Test::Utils::tempdir('cli_restart');

# 0. A hung backend.  With a ttl of 6 s the renew is sent 2 s after the
# last one, abandoned after half the 2 s left before the keeper would stop
# CMD, and the new connection has the last second to renew: a ttl of
# 1.5 s left it 250 ms, which a loaded assert-enabled server (CI's
# 15-assert run, 4 servers side by side) did not always meet.  CMD runs
# long enough for a renew to hang wherever the backend is stopped.
write_script("$dir/hang.sh", qq{echo "\$DLOCK_TOKEN" > $dir/hang.started
sleep 8
echo done > $dir/hang.done
});
my $h = dlock_start([
	'run', '-d', "$conn application_name=hung", '--ttl', '6s', 'hang-job',
	'--', "$dir/hang.sh"
]);
ok(wait_for_file("$dir/hang.started"), 'hung backend: CMD started');
my $backend = sql("SELECT pid FROM pg_stat_activity WHERE application_name = 'hung'");
like($backend, qr/^\d+$/, "hung backend: dlock's backend");
# Stop it between two renewals, outside any transaction (it holds no lock
# at all then, not even its virtual transaction id): a backend stopped
# inside a renew would keep the lease row locked, and the lease could not
# be renewed by anyone, which is not what this part is about.
for my $try (1 .. 100)
{
	kill 'STOP', $backend;
	last if sql("SELECT count(*) FROM pg_locks WHERE pid = $backend") eq '0';
	kill 'CONT', $backend;
	Time::HiRes::sleep(0.05);
}
is(dlock_wait($h), 0, 'hung backend: exit 0, the lease was kept');
kill 'CONT', $backend;
is(slurp("$dir/hang.done"), "done\n", 'hung backend: CMD ran to the end');
like($h->{stderr}, qr/could not renew it, retrying for up to \S+: the database did not answer in time/,
	'hung backend: dlock gave up on the hung connection');
like($h->{stderr}, qr/renewed again/, 'hung backend: and renewed on a new one');
is(sql("SELECT token, released FROM dlock_leases WHERE lock_name = 'hang-job'"),
	slurp("$dir/hang.started") =~ s/\n//r . '|t',
	'hung backend: same token, released at the end');

# 1. Restart during a run.  With a ttl of 12 s the restart, the new
# connection and its renew have until 8 s after the last renew (a ttl of
# 4 s left about 2.2 s, too little for a loaded machine's pg_ctl restart);
# CMD runs 9 s, past the renew that follows the restart however late.
write_script("$dir/job.sh", qq{trap 'echo TERM > $dir/job.term; exit 9' TERM
echo "\$DLOCK_TOKEN" > $dir/job.started
sleep 9 & wait \$!
echo done > $dir/job.done
});
$h = dlock_start([ 'run', '-d', $conn, '--ttl', '12s', 'restart-job', '--', "$dir/job.sh" ]);
ok(wait_for_file("$dir/job.started"), 'restart: CMD started');
my $token = slurp("$dir/job.started") =~ s/\n//r;
$node->restart;    # fast mode: terminates dlock's connection
my $t_up = sql('SELECT clock_timestamp()');
ok( $node->poll_query_until(
		'postgres', qq{
SELECT token = $token AND live AND NOT released AND renewed_at > '$t_up'
  FROM dlock_leases WHERE lock_name = 'restart-job'}),
	'restart: dlock reconnected and renewed the same lease after the restart');
is(dlock_wait($h), 0, 'restart: exit 0');
is(slurp("$dir/job.done"), "done\n", 'restart: CMD ran to the end');
ok(!-e "$dir/job.term", 'restart: CMD got no SIGTERM');
is(sql("SELECT token, released FROM dlock_leases WHERE lock_name = 'restart-job'"),
	"$token|t", 'restart: the lease was released at the end');
like($h->{stderr}, qr/could not renew it, retrying for up to/,
	'restart: dlock reported the failed renewal');
like($h->{stderr}, qr/renewed again/, 'restart: and the recovery');

# 2. The server stays down past the ttl.
unlink "$dir/job.started", "$dir/job.term", "$dir/job.done";
$h = dlock_start([ 'run', '-d', $conn, '--ttl', '1500ms', 'down-job', '--', "$dir/job.sh" ]);
ok(wait_for_file("$dir/job.started"), 'down: CMD started');
$token = slurp("$dir/job.started") =~ s/\n//r;
$node->stop('fast');
my $t_down = Time::HiRes::time();
is(dlock_wait($h), 76, 'down: dlock exits 76 when the database stays unreachable past the ttl');
my $after = Time::HiRes::time() - $t_down;
cmp_ok($after, '<=', 10, 'down: within about the ttl after the server went away');
is(slurp("$dir/job.term"), "TERM\n", 'down: CMD got SIGTERM');
ok(!-e "$dir/job.done", 'down: CMD did not run to the end');
like($h->{stderr}, qr/not renewed in time .*stopping CMD/,
	'down: dlock says why: no renew by the deadline less the grace');
like($h->{stderr}, qr/last error: connection to server .* failed/, "down: with libpq's last error");

# 3. A new run while the server is down: 69, CMD never started.
write_script("$dir/touch.sh", "echo ran > $dir/touched\n");
$h = dlock_run([ 'run', '-d', $conn, 'down-job', '--', "$dir/touch.sh" ]);
is($h->{rc}, 69, 'database down: a new run exits 69');
like($h->{stderr}, qr/^dlock: connection to server on socket .* failed/m,
	"database down: libpq's message");
ok(!-e "$dir/touched", 'database down: CMD was not started');

$node->start;
is(sql("SELECT token, released, live FROM dlock_leases WHERE lock_name = 'down-job'"),
	"$token|f|f", 'down: the lease expired on its own; dlock did not release it');

$node->stop;
done_testing();
