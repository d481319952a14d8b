#!/usr/bin/perl
#
# test/t/029_cli_retry_deadline.pl
#	  The retries of dlock run's renew get denser as their target nears
#	  (cli/run.c, retry_pause): a database that can be used again shortly
#	  before it is asked in time, and the lease survives.  Issue 16, part 2.
#	  The target is the moment the keeper would stop CMD if no renew came,
#	  the deadline less the grace, min(--kill-after, ttl/3): 1 s here.
#
# dlock runs CMD under a 6 s lease as role "runner", renewing every 2 s,
# with --kill-after 1s.  Right after a renew (its time R is the lease
# row's renewed_at; dlock's local deadline is at most R + 6 s, and its
# target D at most R + 5 s) the test makes the database
# unusable for dlock: its backend is terminated and the role may not log
# in (ALTER ROLE ... NOLOGIN), so every connection attempt fails at once
# and is logged by the server ("role ... is not permitted to log in").
# From R + 2 s on dlock retries; by then its backoff has grown to 1 s.
# The test watches the server log, and at the first refused attempt less
# than 0.95 s before D it lets the role log in again.  With the backoff
# alone (50 ms doubling to 1 s) the next attempt would come 1 s later,
# after D: the lease would be lost (exit 76).  Capped at a quarter of the
# time left, it comes within 0.24 s, and dlock renews in time: CMD runs to
# its end and dlock exits 0.  The test asserts no timing of dlock's
# beyond that, but it does need time: in the last 0.95 s before D the
# test must see the refusal and let the role in, and dlock must then
# connect and renew.  A machine that starves either for most of that
# fails the test (hence 0.95 s, not less, and the file runs alone:
# test/serial.list).
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

my $ttl = 6;

my $node = dlock_node('dlock_cli_retry_deadline',
	setup => 'CREATE EXTENSION dlock; CREATE ROLE runner LOGIN');
my $conn = $node->connstr('postgres');
my $dir  = PostgreSQL::Test::Utils::tempdir('cli_retry_deadline');

# refusals($offset) counts the refused logins of "runner" in the server
# log after byte $offset.
sub refusals
{
	my ($offset) = @_;
	my $log = slurp($node->logfile);
	my $n = () = substr($log, $offset) =~ /role "runner" is not permitted to log in/g;
	return $n;
}

# CMD runs until the test lets it end (the file job.go) once the renew
# near the target has landed, or dlock has exited (at most 30 s).
write_script("$dir/job.sh", qq{trap 'echo TERM > $dir/job.term; exit 9' TERM
echo "\$DLOCK_TOKEN" > $dir/job.started
for i in \$(seq 300); do [ -e $dir/job.go ] && break; sleep 0.1 & wait \$!; done
echo done > $dir/job.done
});
my $h = dlock_start([ 'run', '-d', "$conn user=runner application_name=near",
	'--ttl', "${ttl}s", '--kill-after', '1s', 'near-job', '--', "$dir/job.sh" ]);
ok(wait_for_file("$dir/job.started"), 'CMD started');
my $token = slurp("$dir/job.started") =~ s/\n//r;

# After the first renew: cut dlock off.
ok( $node->poll_query_until(
		'postgres', "SELECT renewed_at > acquired_at FROM dlock_leases WHERE lock_name = 'near-job'"),
	'dlock renewed the lease');
my $bg = $node->background_psql('postgres');
my $offset = -s $node->logfile;
$bg->query_safe('ALTER ROLE runner NOLOGIN');
$bg->query_safe("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'near'");
my $r = $bg->query_safe("SELECT extract(epoch FROM renewed_at) FROM dlock_leases WHERE lock_name = 'near-job'");
my $deadline = $r + $ttl - 1;    # the target: the deadline less the grace
cmp_ok($deadline - Time::HiRes::time(), ">", $ttl - 3,
	'cut off well before the next renew (the test is not late)');

# Logins again right after the first refused attempt < 0.95 s before D.
my ($seen, $left) = (0, undef);
while (Time::HiRes::time() < $deadline)
{
	my $n = refusals($offset);
	if ($n > $seen)
	{
		$seen = $n;
		my $l = $deadline - Time::HiRes::time();
		if ($l <= 0.95)
		{
			$bg->query_safe('ALTER ROLE runner LOGIN');
			$left = $l;
			last;
		}
	}
	Time::HiRes::sleep(0.01);
}
note(sprintf('refused attempts seen: %d; logins allowed again %.3f s before the target',
	$seen, $left // -1));
$bg->query_safe('ALTER ROLE runner LOGIN') unless defined $left;

# CMD ends once a renew has landed after the cut (or dlock is gone).
wait_until(
	sub {
		!process_alive($h->{pid})
		  || $bg->query_safe(
			"SELECT renewed_at > to_timestamp($r) FROM dlock_leases WHERE lock_name = 'near-job'"
		  ) eq 't';
	},
	$PostgreSQL::Test::Utils::timeout_default);
append_to_file("$dir/job.go", "go\n");
cmp_ok($seen, '>=', 5, 'dlock kept retrying while it could not log in');
ok(defined $left, 'a refused attempt came less than 0.95 s before the target');

is(dlock_wait($h), 0, 'dlock renewed in time: exit 0');
is(slurp("$dir/job.done"), "done\n", 'CMD ran to its end');
ok(!-e "$dir/job.term", 'CMD got no SIGTERM');
like($h->{stderr}, qr/could not renew it, retrying for up to \S+: /, 'dlock reported the failed renew');
like($h->{stderr}, qr/renewed again/, 'and the renew that came in time');
is(sql("SELECT token, released FROM dlock_leases WHERE lock_name = 'near-job'"),
	"$token|t", 'the same lease, released at the end');
my $after = $bg->query_safe(
	"SELECT extract(epoch FROM renewed_at) > $r + 3.5 FROM dlock_leases WHERE lock_name = 'near-job'");
is($after, 't', 'a renew landed shortly before the target');

$bg->quit;
$node->stop;
done_testing();
