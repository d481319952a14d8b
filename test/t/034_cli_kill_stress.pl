#!/usr/bin/perl
#
# test/t/034_cli_kill_stress.pl
#	  dlock run processes killed at random while others wait: no two jobs
#	  of one name ever run at the same time, counting every process of
#	  every job.
#
# Three dlock runs wait at all times for one name (--wait); each job
# (DLOCK_TOKEN tells them apart) writes "start", then it and a background
# child write a heartbeat every 50 ms, and it exits after a random 0.3 to
# 1.2 s.  Meanwhile the test sends SIGKILL to a random dlock whose job
# runs, every 0.5 to 1.1 s (its lease then ends only when its ttl of 4 s
# runs out, and the keeper must end the job long before; a ttl of 4 s
# gives each waited acquire's first renew 1.3 s, which a loaded machine
# needs, where 2 s gave it 667 ms), and replaces
# every dlock that exited.  Afterwards every job's lines are one interval
# [first line, last line] per token; sorted by start, each must end
# before the next begins.  How many jobs ran and how many dlocks were
# killed is checked and printed.  DLOCK_STRESS_SEED repeats the choices.
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

my $seed = $ENV{DLOCK_STRESS_SEED} // 20261202;
srand($seed);
note("stress seed $seed (DLOCK_STRESS_SEED=$seed repeats the choices)");

my $node = dlock_node('dlock_cli_kill_stress',
	preload => 1,
	setup => 'CREATE EXTENSION dlock');
my $conn = $node->connstr('postgres');
my $dir  = PostgreSQL::Test::Utils::tempdir('cli_kill_stress');
my $log  = "$dir/jobs.log";

write_script("$dir/job.sh", qq{log=$log
echo "start \$DLOCK_TOKEN \$EPOCHREALTIME" >> "\$log"
( while :; do echo "beat \$DLOCK_TOKEN \$EPOCHREALTIME" >> "\$log"; sleep 0.05; done ) &
end=\$(awk -v t="\$EPOCHREALTIME" -v d="\$1" 'BEGIN { printf "%.3f", t + d }')
while awk -v t="\$EPOCHREALTIME" -v e="\$end" 'BEGIN { exit !(t < e) }'; do
  echo "beat \$DLOCK_TOKEN \$EPOCHREALTIME" >> "\$log"
  sleep 0.05
done
});

my $seconds = $ENV{DLOCK_KILL_STRESS_SECONDS} // 10;
my @running;
my ($started, $killed, $exited) = (0, 0, 0);
my %rc;

# start_one starts a waiting dlock run.
sub start_one
{
	my $len = sprintf('%.2f', 0.3 + rand(0.9));
	push @running,
	  dlock_start(
		[
			'run', '-d', $conn, '--ttl', '4s', '--kill-after', '0.5s', '--wait',
			'60s', 'stress', '--', "$dir/job.sh", $len
		]);
	$started++;
}

# job_runs($h) reports whether dlock $h has a job running (a keeper).
sub job_runs
{
	my ($h) = @_;
	my $children = slurp("/proc/$h->{pid}/task/$h->{pid}/children");
	return $children =~ /\d/;
}

# jobs_begun: how many jobs wrote "start" so far.
sub jobs_begun
{
	return 0 unless -e $log;
	return scalar(() = slurp($log) =~ /^start /mg);
}

# The run lasts $seconds, and on a machine so loaded that fewer than 5 jobs
# began or fewer than 3 dlocks were killed by then, until they have (at
# most 50 s more): the checks below count them.
start_one() for 1 .. 3;
my $end       = Time::HiRes::time() + $seconds;
my $next_kill = Time::HiRes::time() + 0.5 + rand(0.6);
while (Time::HiRes::time() < $end
	|| (($killed < 3 || jobs_begun() < 5) && Time::HiRes::time() < $end + 50))
{
	Time::HiRes::sleep(0.02);
	# reap and replace those that exited
	for my $h (@running)
	{
		next if waitpid($h->{pid}, POSIX::WNOHANG()) != $h->{pid};
		$h->{done} = 1;
		my $st = $?;
		my $rc = ($st & 127) ? 128 + ($st & 127) : $st >> 8;
		$rc{$rc}++;
		$exited++;
	}
	my $gone = grep { $_->{done} } @running;
	@running = grep { !$_->{done} } @running;
	start_one() for 1 .. $gone;
	next if Time::HiRes::time() < $next_kill;
	my @victims = grep { job_runs($_) } @running;
	next unless @victims;
	my $v = $victims[ int(rand(@victims)) ];
	kill 'KILL', $v->{pid};
	$killed++;
	$next_kill = Time::HiRes::time() + 0.5 + rand(0.6);
}

# let the last ones finish (each job takes at most 1.2 s; a killed one's
# lease ends 4 s later)
for my $h (@running)
{
	my $rc = dlock_wait($h, 60);
	$rc{$rc}++;
	$exited++;
}
note("dlock exit statuses: "
	  . join(', ', map { "$_: $rc{$_}" } sort { $a <=> $b } keys %rc));

# Every job: [first line, last line].
my %iv;
for my $line (split /\n/, slurp($log))
{
	my ($what, $token, $t) = split / /, $line;
	next unless defined $t && $token =~ /^\d+$/;
	$iv{$token}[0] = $t if !defined $iv{$token}[0] || $t < $iv{$token}[0];
	$iv{$token}[1] = $t if !defined $iv{$token}[1] || $t > $iv{$token}[1];
}
my @jobs = sort { $iv{$a}[0] <=> $iv{$b}[0] } keys %iv;
my @overlaps;
for my $i (1 .. $#jobs)
{
	my ($p, $c) = @jobs[ $i - 1, $i ];
	push @overlaps,
	  sprintf('job %s ran until %.3f, job %s started at %.3f',
		$p, $iv{$p}[1], $c, $iv{$c}[0])
	  if $iv{$p}[1] >= $iv{$c}[0];
}
is(scalar(@overlaps), 0, 'no two jobs of one name ran at the same time')
  or diag(join("\n", @overlaps));
cmp_ok(scalar(@jobs), '>=', 5, 'jobs ran (' . scalar(@jobs) . ')');
cmp_ok($killed, '>=', 3, "dlocks were killed while their jobs ran ($killed)");
is($rc{0} // 0, $exited - $killed,
	'every dlock that was not killed exited 0 (its job ran to its end)');
note(sprintf('%d dlock runs started, %d jobs ran, %d killed', $started, scalar(@jobs), $killed));

done_testing();
