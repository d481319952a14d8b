#!/usr/bin/perl
#
# test/t/031_cli_unconfirmed.pl
#	  dlock run exits 79, not CMD's status, when CMD ended but no release
#	  confirmed the lease (cli/run.c, exit_status): the server serving now
#	  may never have had it (an asynchronous failover can lose a grant,
#	  and the fence then rejects CMD's writes).  Issue 16, part 3.
#
#   1. The normal path: the release returns true, dlock exits with CMD's
#      status (0, and 3).
#   2. The server turns read-only as CMD ends (the role's sessions become
#      read-only, ALTER ROLE ... SET default_transaction_read_only, and
#      dlock's backend is terminated, so that its reconnects are
#      read-only, as on the old primary after a failover): every release
#      fails with 25006 until the deadline; dlock exits 79 and names CMD's
#      status, for a CMD that exited 0 and one that exited 5, and for a
#      set (--all).
#   3. The server stops as CMD ends (immediate mode: a fast stop's
#      checkpoint can take seconds on a loaded machine, and CMD must end
#      before the keeper would stop it, 5.3 s after the last renew): no
#      release gets an answer before the deadline; exit 79.
#   4. A release that returns false (CMD released the lease itself) is
#      still a lost lease: 76.
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

my $node = dlock_node('dlock_cli_unconfirmed',
	setup => 'CREATE EXTENSION dlock; CREATE ROLE fate LOGIN');
my $conn = $node->connstr('postgres');
my $dir  = PostgreSQL::Test::Utils::tempdir('cli_unconfirmed');

# A CMD that records its token, waits for the file $dir/$tag.go (at most
# 30 s), and exits with the status given as its argument.
write_script("$dir/job.sh", qq{tag=\$1
echo "\$DLOCK_TOKENS" > $dir/\$tag.started
for i in \$(seq 300); do [ -e $dir/\$tag.go ] && break; sleep 0.1; done
exit \$2
});

# start_job($tag, $status, @names) starts dlock run as role fate (session
# named $tag) with an 8 s lease on @names (--all when several) and waits
# until CMD runs.  The test ends CMD well before the lease's deadline
# (renewed every 8/3 s) would stop it; the cases where no release is
# confirmed then last until that deadline.  (With 4 s, a loaded machine
# was seen to get no answer to any release on a new connection before the
# deadline, so no 25006 to report.)
sub start_job
{
	my ($tag, $status, @names) = @_;
	my @set = @names > 1 ? ('--all') : ();
	my $h = dlock_start([ 'run', '-d', "$conn user=fate application_name=$tag", '--ttl', '8s',
		@set, @names, '--', "$dir/job.sh", $tag, $status ]);
	ok(wait_for_file("$dir/$tag.started"), "$tag: CMD started");
	return $h;
}

# 1. The normal path.
for my $status (0, 3)
{
	my $h = start_job("ok$status", $status, "ok$status-job");
	open(my $fh, '>', "$dir/ok$status.go") or die;
	close $fh;
	is(dlock_wait($h), $status, "released: exit $status, CMD's status");
	is($h->{stderr}, '', 'released: nothing on stderr');
}

# 2. Read-only as CMD ends.
for my $case ([ 'ro0', 0, 'ro0-job' ], [ 'ro5', 5, 'ro5-job' ], [ 'roset', 0, 'set-a', 'set-b' ])
{
	my ($tag, $status, @names) = @$case;
	my $h = start_job($tag, $status, @names);
	sql('ALTER ROLE fate SET default_transaction_read_only = on');
	sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '$tag'");
	open(my $fh, '>', "$dir/$tag.go") or die;
	close $fh;
	is(dlock_wait($h), 79, "$tag: read-only at the end: exit 79, not CMD's status ($status)");
	like($h->{stderr}, qr/not released: cannot execute dlock_release(?:_each)?\(\) in a read-only transaction \(SQLSTATE 25006\); (?:it has|they have) expired by now/,
		"$tag: the releases on new connections failed with 25006 until the deadline");
	like($h->{stderr}, qr/CMD exited with status $status, but no release confirmed that the server serving now still had the lease when CMD ended .*: exiting 79 instead of CMD's status/,
		"$tag: dlock says why, with CMD's status");
	sql('ALTER ROLE fate RESET default_transaction_read_only');
	is(sql("SELECT string_agg(released::text, ',') FROM dlock_leases WHERE lock_name IN ('" . join("','", @names) . "')"),
		join(',', map { 'false' } @names), "$tag: not released (it expired)");
}

# 3. The server stops as CMD ends.
{
	my $h = start_job('down', 0, 'down-job');
	$node->stop('immediate');
	open(my $fh, '>', "$dir/down.go") or die;
	close $fh;
	is(dlock_wait($h), 79, 'server down at the end: exit 79');
	like($h->{stderr}, qr/not released: .*expired by now/s, 'server down at the end: not released');
	like($h->{stderr}, qr/CMD exited with status 0, but no release confirmed/, 'server down at the end: dlock says why');
	$node->start;
}

# 4. A release that returns false: 76, as before.
write_script("$dir/self.sh", qq{psql -X -q -d "$conn" -c "SELECT dlock_release('\$DLOCK_NAME', \$DLOCK_TOKEN)" > /dev/null
});
my $h = dlock_run([ 'run', '-d', $conn, 'self-job', '--', "$dir/self.sh" ]);
is($h->{rc}, 76, 'a release that returns false: exit 76');
like($h->{stderr}, qr/dlock_release returned false/, 'a release that returns false: says so');

$node->stop;
done_testing();
