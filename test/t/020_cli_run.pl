#!/usr/bin/perl
#
# test/t/020_cli_run.pl
#	  dlock run (cli/run.c) against a real server, with real child
#	  processes: the child's environment, exit statuses, renewal, release,
#	  a second runner, dlock_break during a run, signal forwarding, and
#	  the SIGKILL escalation of --kill-after.
#
# Every CMD is a bash script that records what it sees in files (its
# DLOCK_NAME and DLOCK_TOKEN, that it started, the SIGTERM it received);
# the test compares those files, dlock's exit status and the lease rows
# in dlock_leases.  The long scenarios (part 2) run at the same time on
# different lock names, under 6 s leases (a renew has 2 s to answer, which
# a loaded machine needs), so the whole file takes about fifteen seconds.
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

my $node = dlock_node('dlock_cli_run',
	setup => 'CREATE EXTENSION dlock');
my $conn = $node->connstr('postgres');
my $dir  = PostgreSQL::Test::Utils::tempdir('cli_run');

# lease returns "token|released|live" of $name's row, '' when there is none.
sub lease
{
	my ($name) = @_;
	return sql(
		"SELECT token, released, live FROM dlock_leases WHERE lock_name = '$name'"
	);
}

# ---------------------------------------------------------------------
# Part 1: short runs, one at a time.
# ---------------------------------------------------------------------

# The child's environment, its exit status, release at the end, the
# default owner label.
write_script("$dir/env.sh", qq{printf '%s|%s\\n' "\$DLOCK_NAME" "\$DLOCK_TOKEN" > $dir/env.out
exit 3
});
my $h = dlock_run([ 'run', '-d', $conn, '--ttl', '2s', 'env-job', '--', "$dir/env.sh" ]);
is($h->{rc}, 3, "run exits with CMD's exit status (3)");
my ($env_name, $env_token) = split /\|/, (slurp("$dir/env.out") =~ s/\n//r);
is($env_name, 'env-job', 'DLOCK_NAME in the child environment is NAME');
like($env_token, qr/^[1-9][0-9]*$/, 'DLOCK_TOKEN in the child environment is a token');
is(lease('env-job'), "$env_token|t|f",
	"the lease row carries the child's token and was released when CMD exited");
like(
	sql("SELECT owner FROM dlock_leases WHERE lock_name = 'env-job'"),
	qr/^dlock run \S+ pid $h->{pid}$/,
	'default owner label: "dlock run HOST pid PID" with dlock\'s pid');
is($h->{stderr}, '', 'a successful run prints nothing');

# CMD starts with the signal dispositions and mask it would have without
# dlock (dlock catches, blocks and ignores signals itself, SIGPIPE among
# them): the ignored and blocked signals of grep reading its own
# /proc/self/status are the same when dlock runs it as when it is started
# directly, the same way.
my @grep = ('grep', '-E', '^Sig(Ign|Blk):', '/proc/self/status');
my $direct = dlock_run([ @grep[1..3] ], program => '/bin/grep');
$h = dlock_run([ 'run', '-d', $conn, 'sigs-job', '--', @grep ]);
is($h->{rc}, 0, 'signal state: exit 0');
like($direct->{stdout}, qr/^SigIgn:\s+\S+\nSigBlk:\s+\S+\n\z|^SigBlk:\s+\S+\nSigIgn:\s+\S+\n\z/,
	'signal state: read from /proc');
is($h->{stdout}, $direct->{stdout},
	"CMD's ignored and blocked signals are the same as without dlock");

# CMD inherits no file descriptor of dlock's (its database socket, the
# self-pipe of its signal handlers): it has the same kinds of descriptors
# open, under the same numbers, as when started directly.
my @fds = ('/bin/bash', '-c',
	'for f in /proc/$$/fd/*; do l=$(readlink "$f"); case $l in socket:*|pipe:*|anon_inode:*) l=${l%%:*};; *) l=file;; esac; echo "${f##*/} $l"; done'
);
$direct = dlock_run([ @fds[1..2] ], program => $fds[0]);
like($direct->{stdout}, qr/^0 file\n/, 'descriptors: listed');
$h = dlock_run([ 'run', '-d', $conn, 'fds-job', '--', @fds ]);
is($h->{rc}, 0, 'descriptors: exit 0');
is($h->{stdout}, $direct->{stdout},
	"CMD has the open descriptors it has without dlock (no socket or pipe of dlock's)");

# Started with SIGCHLD and SIGALRM blocked (a signal mask is inherited),
# dlock still needs them: it must notice at once that CMD exited, not at
# its next renew (10 s into the default 30 s ttl); CMD still gets the
# blocked mask it would have without dlock.
my @block = ('-MPOSIX', '-e',
	'POSIX::sigprocmask(POSIX::SIG_BLOCK(), POSIX::SigSet->new(POSIX::SIGCHLD(), POSIX::SIGALRM())) or die; exec @ARGV or POSIX::_exit(251)'
);
$direct = dlock_run([ @block, @grep ], program => $^X);
like($direct->{stdout}, qr/^SigBlk:\s+0*12000$/m,
	'blocked SIGCHLD and SIGALRM: the mask CMD has without dlock');
$h = dlock_run([ @block, dlock_path(), 'run', '-d', $conn, 'sigs-blocked-job', '--', @grep ],
	program => $^X);
is($h->{rc}, 0, 'blocked SIGCHLD and SIGALRM: exit 0');
is($h->{stdout}, $direct->{stdout},
	'blocked SIGCHLD and SIGALRM: CMD gets the blocked mask it has without dlock');
cmp_ok($h->{elapsed}, '<', 5,
	'blocked SIGCHLD and SIGALRM: dlock noticed at once that CMD exited');

# --owner, and arguments of CMD that look like dlock's options.
write_script("$dir/args.sh", qq{printf '%s\\n' "\$@" > $dir/args.out\n});
$h = dlock_run([
	'run', '-d', $conn, '--owner', 'nightly report', 'args-job',
	"$dir/args.sh", '--ttl', '-d', '--', 'x y'
]);
is($h->{rc}, 0, 'run without "--": CMD starts at the argument after NAME');
is(slurp("$dir/args.out"), "--ttl\n-d\n--\nx y\n",
	"CMD's own arguments are passed on untouched, also ones like dlock's options");
is(sql("SELECT owner FROM dlock_leases WHERE lock_name = 'args-job'"),
	'nightly report', '--owner sets the owner label');

# A child killed by a signal: 128 + signal, like a shell; lease released.
write_script("$dir/killself.sh", "kill -KILL \$\$\n");
$h = dlock_run([ 'run', '-d', $conn, 'kill-job', '--', "$dir/killself.sh" ]);
is($h->{rc}, 128 + 9, 'CMD killed by SIGKILL: run exits 137');
like(lease('kill-job'), qr/^\d+\|t\|f$/, 'and the lease was released');

# CMD that cannot be executed: 127, like a shell; lease released.
$h = dlock_run([ 'run', '-d', $conn, 'missing-job', '--', "$dir/no-such-command" ]);
is($h->{rc}, 127, 'CMD not found: exit 127');
like($h->{stderr}, qr/could not execute "\Q$dir\E\/no-such-command": No such file/,
	'with a message naming CMD');
like(lease('missing-job'), qr/^\d+\|t\|f$/, 'and the lease was released');

# Usage errors: 64, a one-line message and the usage, nothing acquired,
# CMD not started.
write_script("$dir/touch.sh", "echo ran > $dir/touched\n");
my @usage = (
	[ [ 'run', '-d', $conn, 'u-job' ], qr/^dlock: missing CMD after NAME$/m, 'no CMD' ],
	[ [ 'run', '-d', $conn ], qr/^dlock: missing NAME$/m, 'no NAME' ],
	[
		[ 'run', '-d', $conn, '--ttl', '5 s', 'u-job', '--', "$dir/touch.sh" ],
		qr/^dlock: invalid duration "5 s" for --ttl/m,
		'bad duration'
	],
	[
		[ 'run', '-d', $conn, '--ttl', '0s', 'u-job', '--', "$dir/touch.sh" ],
		qr/^dlock: --ttl must be at least 1ms$/m,
		'ttl 0'
	],
	[
		[ 'run', '-d', $conn, '--frobnicate', 'u-job', '--', "$dir/touch.sh" ],
		qr/^dlock: unknown option "--frobnicate"$/m,
		'unknown option'
	],
	[
		[ 'run', '-d', $conn, '--kill-after', 'soon', 'u-job', '--', "$dir/touch.sh" ],
		qr/^dlock: invalid duration "soon" for --kill-after/m,
		'bad --kill-after'
	],
	[
		[ 'run', '-d', $conn, '', '--', "$dir/touch.sh" ],
		qr/^dlock: NAME must not be empty$/m,
		'empty NAME'
	],
	[ [ 'run', '--wait' ], qr/^dlock: option --wait needs a value$/m, 'option without value' ],
);
for my $u (@usage)
{
	my ($args, $re, $what) = @$u;
	$h = dlock_run($args);
	is($h->{rc}, 64, "usage error ($what): exit 64");
	like($h->{stderr}, $re, "usage error ($what): the message");
	like($h->{stderr}, qr/^Usage: dlock run /m, "usage error ($what): the usage");
}
ok(!-e "$dir/touched", 'no CMD was started by a usage error');
is(sql("SELECT count(*) FROM dlock_leases WHERE lock_name = 'u-job'"),
	'0', 'no lease was acquired by a usage error');

# An unreachable database: non-zero (69) with libpq's message, CMD never
# started.
my $free_port = PostgreSQL::Test::Cluster::get_free_port();
$h = dlock_run([
	'run', '-d', "host=127.0.0.1 port=$free_port dbname=postgres",
	'u-job', '--', "$dir/touch.sh"
]);
is($h->{rc}, 69, 'unreachable database: exit 69');
like($h->{stderr}, qr/^dlock: connection to server at "127\.0\.0\.1", port $free_port failed/m,
	"unreachable database: libpq's message");
ok(!-e "$dir/touched", 'unreachable database: CMD was not started');

# A database without the extension: 70, with a hint, CMD never started.
sql('CREATE DATABASE no_dlock');
$h = dlock_run([
	'run', '-d', $node->connstr('no_dlock'), 'u-job', '--', "$dir/touch.sh"
]);
is($h->{rc}, 70, 'extension not installed: exit 70');
like($h->{stderr}, qr/function dlock_acquire\(.*\) does not exist \(SQLSTATE 42883\)/,
	"extension not installed: the server's error");
like($h->{stderr}, qr/is the dlock extension installed in database "no_dlock"\?/,
	'extension not installed: a hint');
ok(!-e "$dir/touched", 'extension not installed: CMD was not started');

# A database that answers every call in more than a third of the ttl, but
# in time: the acquire leaves too little of the lease to start CMD, and
# so does every renew dlock sends first.  dlock must give up (75, CMD not
# started) instead of renewing forever.  The wrappers in schema "slow"
# (--schema) make acquire and renew take 0.15 s under a 400 ms ttl.
sql(q{CREATE SCHEMA slow;
CREATE FUNCTION slow.dlock_acquire(text, interval, interval, text) RETURNS bigint
  LANGUAGE sql AS $$ SELECT pg_sleep(0.15); SELECT public.dlock_acquire($1, $2, $3, $4) $$;
CREATE FUNCTION slow.dlock_renew(text, bigint, interval) RETURNS boolean
  LANGUAGE sql AS $$ SELECT pg_sleep(0.15); SELECT public.dlock_renew($1, $2, $3) $$;
CREATE FUNCTION slow.dlock_release(text, bigint) RETURNS boolean
  LANGUAGE sql AS $$ SELECT public.dlock_release($1, $2) $$;});
$h = dlock_run(
	[ 'run', '-d', $conn, '--schema', 'slow', '--ttl', '400ms', 'slow-job', '--', "$dir/touch.sh" ],
	timeout => 20);
is($h->{rc}, 75, 'database too slow for the ttl: exit 75 (no endless renewing)');
ok(!-e "$dir/touched", 'database too slow for the ttl: CMD was not started');
# (a renew slower than 200 ms, on a busy machine, is abandoned instead:
# the lease is then lost before CMD could start, also 75)
like($h->{stderr}, qr/answers too slowly for a ttl of 400ms|lost before CMD could start/,
	'database too slow for the ttl: dlock says why');

# ---------------------------------------------------------------------
# Part 2: long runs, all at once, on different names.
# ---------------------------------------------------------------------

# A: a 10 s job under a 6 s lease.  Renewal must keep it live throughout;
# it is released at the end.
write_script("$dir/renew.sh", qq{echo "\$DLOCK_TOKEN" > $dir/renew.started
sleep 10
echo done > $dir/renew.done
});
# B: breaks its lease (dlock_break) during the run; the child records
# the SIGTERM it gets.
write_script("$dir/break.sh", qq{trap 'echo TERM > $dir/break.term; exit 9' TERM
echo "\$DLOCK_TOKEN" > $dir/break.started
sleep 60 & wait \$!
echo "no SIGTERM" > $dir/break.term
});
# C: SIGTERM sent to dlock is passed on; the child exits 7 on it.
write_script("$dir/fwd.sh", qq{trap 'echo TERM > $dir/fwd.term; exit 7' TERM
echo "\$DLOCK_TOKEN" > $dir/fwd.started
sleep 60 & wait \$!
});
# D: SIGINT, likewise; the child exits 5 on it.
write_script("$dir/int.sh", qq{trap 'echo INT > $dir/int.sig; exit 5' INT
echo "\$DLOCK_TOKEN" > $dir/int.started
sleep 60 & wait \$!
});
# E: a child that ignores SIGTERM after its lease is broken: SIGKILL
# after --kill-after.
write_script("$dir/stubborn.sh", qq{trap 'echo TERM >> $dir/stubborn.term' TERM
echo \$\$ > $dir/stubborn.started
while :; do sleep 0.1; done
});
# F: the second runner on A's name, waiting for it: it must start only
# after A's CMD finished.
write_script("$dir/second.sh", qq{if [ -e $dir/renew.done ]; then echo after; else echo during; fi > $dir/second.out
echo "\$DLOCK_TOKEN" >> $dir/second.out
});

my $a = dlock_start([ 'run', '-d', $conn, '--ttl', '6s', 'renew-job', '--', "$dir/renew.sh" ]);
my $b = dlock_start([ 'run', '-d', $conn, '--ttl', '6s', 'break-job', '--', "$dir/break.sh" ]);
my $c = dlock_start([ 'run', '-d', $conn, '--ttl', '6s', 'fwd-job', '--', "$dir/fwd.sh" ]);
my $d = dlock_start([ 'run', '-d', $conn, '--ttl', '6s', 'int-job', '--', "$dir/int.sh" ]);
my $e = dlock_start([
	'run', '-d', $conn, '--ttl', '6s', '--kill-after', '1s', 'stubborn-job',
	'--', "$dir/stubborn.sh"
]);
for my $f (qw(renew break fwd int stubborn))
{
	ok(wait_for_file("$dir/$f.started"), "$f-job: CMD started");
}
my $t_started = Time::HiRes::time();
my $a_token = slurp("$dir/renew.started") =~ s/\n//r;

# The second runner, with --wait: it queues behind A.  (A ttl of 6 s too:
# after a waited acquire CMD starts only if a renew answers within 2 s.)
my $f = dlock_start([ 'run', '-d', $conn, '--ttl', '6s', '--wait', '30s', 'renew-job', '--', "$dir/second.sh" ]);

# A second runner without --wait: 75, CMD never started.
$h = dlock_run([ 'run', '-d', $conn, 'renew-job', '--', "$dir/touch.sh" ]);
is($h->{rc}, 75, 'second runner on a held name: exit 75');
like($h->{stderr},
	qr/^dlock: not acquired: "renew-job" is held by "dlock run \S+ pid $a->{pid}" \(token $a_token, /m,
	'second runner: the message names the holder and its token');
ok(!-e "$dir/touched", 'second runner: CMD was not started');
is(lease('renew-job'), "$a_token|f|t", "second runner: the holder's lease is untouched");
$h = dlock_run([ 'run', '-d', $conn, '--wait', '300ms', 'renew-job', '--', "$dir/touch.sh" ]);
is($h->{rc}, 75, 'second runner with --wait 300ms: exit 75');
cmp_ok($h->{elapsed}, '>=', 0.3, 'second runner with --wait 300ms: it waited');
ok(!-e "$dir/touched", 'second runner with --wait 300ms: CMD was not started');

# A: a second past its first ttl (6 s) the lease is still live, with the
# same token, because it was renewed; and the job is still running.
my $wait_more = 7 - (Time::HiRes::time() - $t_started);
Time::HiRes::sleep($wait_more) if $wait_more > 0;
is( sql(
		"SELECT token, live, renewed_at > acquired_at + interval '1 s' FROM dlock_leases WHERE lock_name = 'renew-job'"
	),
	"$a_token|t|t",
	'renew-job: 7 s into a 10 s job, its 6 s lease is live, same token, renewed');
ok(!-e "$dir/renew.done", 'renew-job: (the job was still running then)');

# B: break the lease; the child gets SIGTERM, dlock exits 76.
my $b_token = slurp("$dir/break.started") =~ s/\n//r;
my $t_b = Time::HiRes::time();
is(sql("SELECT dlock_break('break-job')"), 't', 'break-job: dlock_break during the run');
is(dlock_wait($b), 76, 'break-job: dlock exits 76 after its lease was broken');
my $b_noticed = Time::HiRes::time() - $t_b;
is(slurp("$dir/break.term"), "TERM\n", 'break-job: the child got SIGTERM');
like($b->{stderr}, qr/lost: dlock_renew returned false/, 'break-job: dlock says why');
cmp_ok($b_noticed, '<', 10, 'break-job: noticed within a renew interval (2 s) or so');
is(lease('break-job'), "$b_token|t|f",
	'break-job: nobody took the lease again (dlock does not reacquire)');

# E: break; the child ignores SIGTERM and is killed --kill-after later.
my $e_pid = slurp("$dir/stubborn.started") =~ s/\n//r;
my $t_break = Time::HiRes::time();
is(sql("SELECT dlock_break('stubborn-job')"), 't', 'stubborn-job: dlock_break');
is(dlock_wait($e), 76, 'stubborn-job: dlock exits 76');
my $t_e = Time::HiRes::time() - $t_break;
ok(wait_for_file("$dir/stubborn.term", 1), 'stubborn-job: the child got SIGTERM');
# SIGKILL comes --kill-after after SIGTERM, or at the lease's deadline if
# that comes first (docs/cli.md): a loaded machine can delay the renew
# that notices the break until the deadline is nearer than 1 s.  SIGTERM
# came after the break, so the kill came no earlier than the delay dlock
# announced.
my ($kill_in, $unit, $at_deadline) =
  $e->{stderr} =~ /SIGKILL in ([0-9.]+)(ms|s)(, at the lease's deadline)?/;
my $announced = defined $kill_in ? ($unit eq 'ms' ? $kill_in / 1000 : $kill_in) : 1;
cmp_ok($announced, $at_deadline ? '<' : '==', 1,
	'stubborn-job: dlock announced SIGKILL after --kill-after (1s), or sooner at the deadline');
cmp_ok($t_e, '>=', $announced,
	'stubborn-job: SIGKILL came no earlier than it announced');
# 1 process (bash) or 2 (bash and its sleep), as the SIGKILL finds them
like($e->{stderr}, qr/[0-9]+ process(?:es)? of CMD still running: sent SIGKILL/,
	'stubborn-job: dlock says it sent SIGKILL');
like($e->{stderr}, qr/CMD was killed by SIGKILL \(status 137\) after the lease was lost/,
	'stubborn-job: dlock reports how CMD ended');
ok(!process_alive($e_pid), 'stubborn-job: the child is gone');

# C and D: signals to dlock are passed on; the lease is released after
# CMD exits, and dlock exits with CMD's status.
my $c_token = slurp("$dir/fwd.started") =~ s/\n//r;
my $d_token = slurp("$dir/int.started") =~ s/\n//r;
is(lease('fwd-job'), "$c_token|f|t", 'fwd-job: live before the signal');
kill 'TERM', $c->{pid};
kill 'INT',  $d->{pid};
is(dlock_wait($c), 7, "SIGTERM to dlock: passed on to CMD; dlock exits with CMD's status 7");
is(slurp("$dir/fwd.term"), "TERM\n", 'SIGTERM to dlock: CMD got SIGTERM');
is(lease('fwd-job'), "$c_token|t|f", 'SIGTERM to dlock: the lease was released after CMD exited');
is(dlock_wait($d), 5, "SIGINT to dlock: passed on to CMD; dlock exits with CMD's status 5");
is(slurp("$dir/int.sig"), "INT\n", 'SIGINT to dlock: CMD got SIGINT');
is(lease('int-job'), "$d_token|t|f", 'SIGINT to dlock: the lease was released after CMD exited');

is(dlock_wait($a), 0, 'renew-job: exit 0');
is(slurp("$dir/renew.done"), "done\n", 'renew-job: CMD ran to the end');

# F: the waiting runner got the lease after A released it.
is(dlock_wait($f), 0, 'waiting second runner: exit 0');
my ($when, $f_token) = split /\n/, slurp("$dir/second.out");
is($when, 'after', "waiting second runner: its CMD started after the first runner's CMD ended");
cmp_ok($f_token, '>', $a_token, 'waiting second runner: a greater token');
is(lease('renew-job'), "$f_token|t|f", 'waiting second runner: released at the end');

$node->stop;
done_testing();
