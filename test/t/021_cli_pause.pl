#!/usr/bin/perl
#
# test/t/021_cli_pause.pl
#	  The pause scenario of dlock run (cli/run.c): the dlock process itself
#	  is stopped with SIGSTOP past its lease's ttl while another client
#	  takes the lease over, then resumed.
#
# The keeper (cli/keeper.c), which is not stopped, keeps the deadline
# too: it stops the job (SIGTERM, recorded by the child's trap) before the
# lease can expire, while dlock is still stopped.  Resumed, dlock must
# notice at once, from its monotonic clock, that the lease's deadline
# passed, and exit 76 -- without sending any renew or release, so the new
# holder's lease is untouched.  The server logs every statement with the session's
# application_name, so the test can prove that nothing from the paused
# dlock reached the server after SIGCONT; the new holder's lease row is
# compared column by column, and the new holder can still renew and
# release it.
#
# Three runs at once, on different names:
#   1. CMD still running as the deadline nears: the keeper sends it
#      SIGTERM before the lease expires, dlock is stopped; exit 76.
#   2. CMD exits while dlock is stopped (at once, told by the test): dlock
#      cannot tell whether it finished before the lease ran out, so it
#      exits 76 too, and does not release.
#   3. A pause shorter than the lease's margin: dlock resumes, renews, and
#      the run ends normally (exit 0, lease released).  No false alarm.
# Then, alone:
#   4. dlock stopped with a renew in flight, which the server answers (true)
#      while dlock is stopped; resumed past the deadline: exit 76, and
#      neither renew nor release, which the server would accept here (the
#      keeper stopped CMD meanwhile).
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

my $node = dlock_node(
	'dlock_cli_pause',
	conf => q{
log_statement = 'all'
log_line_prefix = '%m [%p] app=%a '
},
	setup => 'CREATE EXTENSION dlock');
my $dir = PostgreSQL::Test::Utils::tempdir('cli_pause');

# conn returns a connection string whose sessions are named $app.
sub conn { return $node->connstr('postgres') . " application_name=$_[0]"; }

# row returns every column of $name's lease row.
sub row
{
	return sql(
		"SELECT lock_name, token, owner, holder_role, acquired_at, renewed_at, expires_at, released, live FROM dlock_leases WHERE lock_name = '$_[0]'"
	);
}

# 1. still running
write_script("$dir/long.sh", qq{trap 'echo TERM > $dir/long.term; exit 9' TERM
echo "\$DLOCK_TOKEN" > $dir/long.started
sleep 60 & wait \$!
});
# 2. exits during the pause, as soon as the test says so
write_script("$dir/short.sh", qq{trap 'echo TERM > $dir/short.term; exit 9' TERM
echo "\$DLOCK_TOKEN" > $dir/short.started
while [ ! -e $dir/short.go ]; do sleep 0.01; done
echo done > $dir/short.done
});
# 3. a short pause
write_script("$dir/brief.sh", qq{trap 'echo TERM > $dir/brief.term; exit 9' TERM
echo "\$DLOCK_TOKEN" > $dir/brief.started
sleep 6
echo done > $dir/brief.done
});

# (ttl 3 s: each renew has 1 s before the keeper stops CMD, and the
# keeper's SIGTERM leaves the trap 900 ms before its SIGKILL, which a
# loaded machine needs)
my $long = dlock_start(
	[ 'run', '-d', conn('paused-long'), '--ttl', '3s', 'long-job', '--', "$dir/long.sh" ]);
# (ttl 4 s: the keeper's SIGTERM comes 2.7 s after the last renew, at least
# 1.3 s after the pause, which leaves CMD time to exit when told)
my $short = dlock_start(
	[ 'run', '-d', conn('paused-short'), '--ttl', '4s', 'short-job', '--', "$dir/short.sh" ]);
# (ttl 9 s: the renew after the pause has at least 2 s; CMD runs 6 s, past
# the first renew at 3 s, the pause and the renew after it)
my $brief = dlock_start(
	[ 'run', '-d', conn('paused-brief'), '--ttl', '9s', 'brief-job', '--', "$dir/brief.sh" ]);
for my $f (qw(long short brief))
{
	ok(wait_for_file("$dir/$f.started"), "$f-job: CMD started");
}
my %old = map { $_ => slurp("$dir/$_.started") =~ s/\n//r } qw(long short brief);

# Each has renewed its lease at least once before the pause.
$node->poll_query_until('postgres',
	"SELECT count(*) = 3 FROM dlock_leases WHERE lock_name LIKE '%-job' AND renewed_at > acquired_at AND live"
) or die 'the leases were not renewed';

# Stop all three dlock processes (not their children).
kill 'STOP', $long->{pid}, $short->{pid}, $brief->{pid};
my $t_stop = Time::HiRes::time();
open(my $go, '>', "$dir/short.go") or die "cannot write $dir/short.go: $!";
close($go);

# The brief pause: 1 s, well inside the 9 s lease renewed every 3 s.
Time::HiRes::sleep(1);
kill 'CONT', $brief->{pid};

# The leases of the stopped dlock processes expire on the server (within
# 3 s and 4 s); another client takes both over.
$node->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM dlock_leases WHERE lock_name IN ('long-job', 'short-job') AND live"
) or die 'the leases of the stopped dlock processes did not expire';
ok(wait_for_file("$dir/short.done"), 'short-job: CMD finished while dlock was stopped');
my %new;
for my $n (qw(long short))
{
	$new{$n} = sql("SELECT dlock_acquire('$n-job', '1 minute', owner => 'new holder')");
	cmp_ok($new{$n}, '>', $old{$n}, "$n-job: another client took the lease over");
}
my %row_before = map { $_ => row("$_-job") } qw(long short);
is(slurp("$dir/long.term"), "TERM\n",
	'long-job: the keeper sent CMD SIGTERM while dlock was stopped, before the lease expired');

# Resume, and remember where the server log was.
my $log_offset = -s $node->logfile;
my $t_cont = Time::HiRes::time();
kill 'CONT', $long->{pid}, $short->{pid};

is(dlock_wait($long), 76, 'long-job: dlock exits 76 after the pause');
my $noticed = Time::HiRes::time() - $t_cont;
cmp_ok($noticed, '<', 10,
	'long-job: it noticed at once (well before --kill-after would matter)');
like($long->{stderr}, qr/not renewed in time.*\n(.*\n)*.*not released: .*expired by now/,
	'long-job: dlock says it was not renewed in time, and not released');

is(dlock_wait($short), 76, 'short-job: dlock exits 76 although CMD exited with 0');
# the SIGSTOP may land while a renew is in flight (more often on a loaded
# machine, where its round trip is longer): then dlock, resumed, reports
# that renew unanswered at the deadline instead of its own lateness
like($short->{stderr},
	qr/lost: (dlock could not renew it in time, its deadline passed .*|the database did not answer the renew before the lease expired); CMD exited with status 0/,
	"short-job: dlock reports the loss and CMD's status");
ok(!-e "$dir/short.term", 'short-job: CMD had exited, no SIGTERM');

for my $n (qw(long short))
{
	is(row("$n-job"), $row_before{$n},
		"$n-job: the new holder's lease row is exactly as it was");
	is(sql("SELECT token, owner, live FROM dlock_leases WHERE lock_name = '$n-job'"),
		"$new{$n}|new holder|t", "$n-job: the new holder's lease is live");
}

# Nothing from the resumed dlock processes reached the server: no renew,
# no release.
my $log = slurp($node->logfile);
$log = substr($log, $log_offset);
my @sent = grep { /app=paused-(long|short) .*dlock_(renew|release|acquire)/ } split /\n/, $log;
is_deeply(\@sent, [], 'no renew or release was sent after SIGCONT');
my @before = grep { /app=paused-long .*dlock_renew/ } split /\n/, substr(slurp($node->logfile), 0, $log_offset);
cmp_ok(scalar(@before), '>', 0, '(and the log does record their renewals before the pause)');

# The new holders can renew and release their leases.
for my $n (qw(long short))
{
	my $h = dlock_run([ 'renew', '-d', conn('new-holder'), "$n-job", $new{$n} ]);
	is($h->{rc}, 0, "$n-job: the new holder renews its lease");
	$h = dlock_run([ 'release', '-d', conn('new-holder'), "$n-job", $new{$n} ]);
	is($h->{rc}, 0, "$n-job: the new holder releases its lease");
}

# 3. The brief pause was harmless.
is(dlock_wait($brief), 0, 'brief-job: a pause within the lease: exit 0');
is(slurp("$dir/brief.done"), "done\n", 'brief-job: CMD ran to the end');
ok(!-e "$dir/brief.term", 'brief-job: CMD got no SIGTERM');
is(sql("SELECT token, released FROM dlock_leases WHERE lock_name = 'brief-job'"),
	"$old{brief}|t", 'brief-job: same token, released at the end');
is($brief->{stderr}, '', 'brief-job: nothing to report');

# 4. A renew in flight when dlock is stopped.  The server renews the lease
#    and answers while dlock is stopped; dlock is resumed after the
#    deadline counted from the acquire (sent 3 s, a third of the ttl,
#    before the renew) but before the deadline the renew's answer would
#    give.  (A ttl of 9 s and --kill-after 1s: the renew waits at the gate,
#    and dlock abandons it after half the time left to the deadline less the
#    grace, 2.5 s in which the test must see it and stop dlock; with a ttl
#    of 3 s, a loaded machine's polls missed the time it had.)  An answer
#    read after the deadline must not be trusted: dlock exits 76, CMD gets
#    SIGTERM, and the lease is neither renewed again nor released.  The renew goes through a wrapper in schema "slow"
#    (--schema) that waits while slow.gate has a row, so the test decides
#    when the server answers: after dlock is stopped.
$node->safe_psql('postgres', q{CREATE SCHEMA slow;
CREATE TABLE slow.gate (closed bool);
INSERT INTO slow.gate VALUES (true);
CREATE FUNCTION slow.dlock_acquire(text, interval, interval, text) RETURNS bigint
  LANGUAGE sql AS $$ SELECT public.dlock_acquire($1, $2, $3, $4) $$;
CREATE FUNCTION slow.dlock_renew(n text, t bigint, ttl interval) RETURNS boolean
  LANGUAGE plpgsql AS $$
BEGIN
  WHILE EXISTS (SELECT 1 FROM slow.gate) LOOP PERFORM pg_sleep(0.01); END LOOP;
  RETURN public.dlock_renew(n, t, ttl);
END $$;
CREATE FUNCTION slow.dlock_release(text, bigint) RETURNS boolean
  LANGUAGE sql AS $$ SELECT public.dlock_release($1, $2) $$;});
write_script("$dir/inflight.sh", qq{trap 'echo TERM > $dir/inflight.term; exit 9' TERM
echo "\$DLOCK_TOKEN" > $dir/inflight.started
sleep 60 & wait \$!
});
my $inflight = dlock_start([
	'run', '-d', conn('paused-inflight'), '--schema', 'slow', '--ttl', '9s',
	'--kill-after', '1s', 'inflight-job', '--', "$dir/inflight.sh"
]);
ok(wait_for_file("$dir/inflight.started"), 'inflight-job: CMD started');
my $renewing =
  "FROM pg_stat_activity WHERE application_name = 'paused-inflight' AND state = 'active' AND query LIKE '%dlock_renew%'";
$node->poll_query_until('postgres', "SELECT count(*) = 1 $renewing")
  or die 'inflight-job: no renew started';
my $renew_start = sql("SELECT extract(epoch FROM query_start) $renewing");
kill 'STOP', $inflight->{pid};
sql('DELETE FROM slow.gate');
$node->poll_query_until('postgres', "SELECT count(*) = 0 $renewing")
  or die 'inflight-job: the renew did not finish';
like(sql("SELECT renewed_at > acquired_at AND live FROM dlock_leases WHERE lock_name = 'inflight-job'"),
	qr/^t$/, 'inflight-job: the server renewed the lease while dlock was stopped');
# the deadline from the acquire is at most 6 s after the renew was sent,
# the one from the renew 9 s: resume half way.
my $resume_in = $renew_start + 7.5 - Time::HiRes::time();
Time::HiRes::sleep($resume_in) if $resume_in > 0;
$log_offset = -s $node->logfile;
kill 'CONT', $inflight->{pid};
is(dlock_wait($inflight), 76, 'inflight-job: resumed past its deadline with the answer of a renew waiting: exit 76');
is(slurp("$dir/inflight.term"), "TERM\n", 'inflight-job: its CMD got SIGTERM');
like($inflight->{stderr}, qr/not renewed in time/, 'inflight-job: dlock says the lease was not renewed in time');
is(sql("SELECT released FROM dlock_leases WHERE lock_name = 'inflight-job'"),
	'f', 'inflight-job: dlock did not release the lease');
@sent = grep { /app=paused-inflight .*dlock_(renew|release)/ }
  split /\n/, substr(slurp($node->logfile), $log_offset);
is_deeply(\@sent, [], 'inflight-job: no renew or release was sent after SIGCONT');

$node->stop;
done_testing();
