#!/usr/bin/perl
#
# test/t/032_cli_tree.pl
#	  dlock run ends the job's whole process tree (cli/keeper.c): every
#	  process CMD started, when the lease is lost, when dlock is told to
#	  stop, when CMD exits and leaves processes behind, when dlock itself
#	  is killed with SIGKILL, and when the keeper is; for one lease, a set
#	  (--all) and a permit (--slots).
#
# Each job is a bash script whose every process appends its pid to a file
# before it settles down, so the test knows the whole tree: the shapes are
# a script with background children, a grandchild (and its sleeps) that
# ignores SIGTERM, a pipeline, and a daemon that double-forks and calls
# setsid (setsid -f).  The test waits until every pid is written, makes
# the event happen, and checks that none of the processes is left: at the
# moment dlock has exited (dlock releases and exits only once the tree is
# empty), or, after a SIGKILL of dlock, before the lease could have
# expired (ttl 60 s: the row is still live when the last process is
# gone; how long it took is printed, not asserted).  The cases run at the
# same time on different lock names.
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

my $node = dlock_node('dlock_cli_tree',
	setup => 'CREATE EXTENSION dlock');
my $conn = $node->connstr('postgres');
my $dir  = PostgreSQL::Test::Utils::tempdir('cli_tree');

# The shapes: bash bodies that write every pid of the job to $PIDS, and
# the number of pids each writes.
my %shapes = (
	# two background children; the script waits for them
	background => [
		q{echo $$ >> "$PIDS"
( echo $BASHPID >> "$PIDS"; exec sleep 300 ) &
( echo $BASHPID >> "$PIDS"; while :; do sleep 0.2; done ) &
wait
}, 3
	],
	# a grandchild that ignores SIGTERM, as do the sleeps it starts
	stubborn => [
		q{echo $$ >> "$PIDS"
( trap '' TERM
  ( echo $BASHPID >> "$PIDS"; trap '' TERM; exec sleep 300 ) &
  echo $BASHPID >> "$PIDS"; while :; do sleep 0.2; done ) &
wait
}, 3
	],
	# a pipeline of three
	pipeline => [
		q{echo $$ >> "$PIDS"
( echo $BASHPID >> "$PIDS"; while :; do echo x; sleep 0.1; done ) |
( echo $BASHPID >> "$PIDS"; exec cat ) |
( echo $BASHPID >> "$PIDS"; while read -r l; do :; done )
}, 4
	],
	# a daemon: double fork and setsid, it ignores SIGTERM too
	daemon => [
		q{echo $$ >> "$PIDS"
setsid -f bash -c 'trap "" TERM; echo $$ >> "$PIDS"; while :; do sleep 0.2; done' < /dev/null > /dev/null 2>&1
while :; do sleep 0.2; done
}, 2
	],
);

# script($case, $shape) writes the job script of a case.
sub script
{
	my ($case, $shape) = @_;
	return write_script("$dir/$case.sh",
		qq{export PIDS=$dir/$case.pids\n} . $shapes{$shape}[0]);
}

# pids($case) returns the pids a case's job wrote.
sub pids
{
	my ($case) = @_;
	return grep { /^\d+$/ } split /\n/, slurp("$dir/$case.pids");
}

# wait_pids($case, $n) waits until the job wrote $n pids.
sub wait_pids
{
	my ($case, $n) = @_;
	my $deadline = Time::HiRes::time() + $PostgreSQL::Test::Utils::timeout_default;
	while (Time::HiRes::time() < $deadline)
	{
		return 1 if scalar(pids($case)) >= $n;
		Time::HiRes::sleep(0.05);
	}
	return 0;
}

# alive(@pids) returns those of @pids that still run.
sub alive { return grep { process_alive($_) } @_; }

# lease($name) returns "released|live" of $name's row.
sub lease
{
	return sql("SELECT released, live FROM dlock_leases WHERE lock_name = '$_[0]'");
}

# ---------------------------------------------------------------------
# The lease is lost (dlock_break), the stop signal, CMD leaving processes
# behind: each shape; none of the job's processes outlives dlock.
# ---------------------------------------------------------------------
my @cases;
for my $shape (sort keys %shapes)
{
	for my $event (qw(lost stop))
	{
		my $case = "$event-$shape";
		script($case, $shape);
		push @cases,
		  {
			case  => $case,
			shape => $shape,
			event => $event,
			h     => dlock_start(
				[
					'run', '-d', $conn,
					# a lost lease is noticed at the next renew, ttl/3
					'--ttl', $event eq 'lost' ? '3s' : '60s',
					'--kill-after', '1s', $case, '--', "$dir/$case.sh"
				])
		  };
	}
}

# CMD exits at once, leaving its children: they are ended (SIGTERM,
# SIGKILL --kill-after later) before the release.
write_script("$dir/leftover.sh", qq{export PIDS=$dir/leftover.pids
echo \$\$ >> "\$PIDS"
( echo \$BASHPID >> "\$PIDS"; exec sleep 300 ) &
( trap '' TERM; echo \$BASHPID >> "\$PIDS"; while :; do sleep 0.2; done ) &
setsid -f bash -c 'echo \$\$ >> "\$PIDS"; exec sleep 300' < /dev/null > /dev/null 2>&1
while [ \$(wc -l < "\$PIDS") -lt 4 ]; do sleep 0.05; done
exit 4
});
my $leftover = dlock_start(
	[ 'run', '-d', $conn, '--ttl', '60s', '--kill-after', '1s', 'leftover', '--', "$dir/leftover.sh" ]);

for my $c (@cases)
{
	ok(wait_pids($c->{case}, $shapes{ $c->{shape} }[1]),
		"$c->{case}: every process of the job started");
}
for my $c (@cases)
{
	if ($c->{event} eq 'lost')
	{
		sql("SELECT dlock_break('$c->{case}')");
	}
	else
	{
		kill 'TERM', $c->{h}{pid};
	}
}
for my $c (@cases)
{
	my $rc = dlock_wait($c->{h});
	my @left = alive(pids($c->{case}));
	if ($c->{event} eq 'lost')
	{
		is($rc, 76, "$c->{case}: the lease was broken: exit 76");
		like($c->{h}{stderr}, qr/every process it started/,
			"$c->{case}: stderr says the whole tree is stopped");
	}
	else
	{
		# the job's status: killed by SIGTERM or SIGKILL; the lease was
		# held and is released
		like($rc, qr/^(143|137)$/,
			"$c->{case}: told to stop: exit with CMD's status ($rc)");
		is(lease($c->{case}), 't|f', "$c->{case}: released after the job ended");
	}
	is("@left", '', "$c->{case}: no process of the job is left when dlock exits");
}
is(dlock_wait($leftover), 4, "leftover: dlock exits with CMD's status");
like($leftover->{stderr}, qr/exited, leaving \d+ processes running/,
	'leftover: stderr names the processes CMD left behind');
is(join(' ', alive(pids('leftover'))), '',
	'leftover: the processes CMD left behind (one ignoring SIGTERM, one a setsid daemon) are gone when dlock exits');
is(lease('leftover'), 't|f', 'leftover: the lease is released');

# ---------------------------------------------------------------------
# SIGKILL of dlock: the keeper ends the tree, long before the lease could
# expire; one lease, a set, a permit.
# ---------------------------------------------------------------------
my @killed;
for my $shape (sort keys %shapes)
{
	my $case = "kill-$shape";
	script($case, $shape);
	my @how = ($case);
	@how = ('--all', "$case-a", "$case-b") if $shape eq 'pipeline';
	@how = ('--slots', '2', $case) if $shape eq 'stubborn';
	push @killed,
	  {
		case  => $case,
		shape => $shape,
		h     => dlock_start(
			[ 'run', '-d', $conn, '--ttl', '60s', @how, '--', "$dir/$case.sh" ])
	  };
}
for my $c (@killed)
{
	ok(wait_pids($c->{case}, $shapes{ $c->{shape} }[1]),
		"$c->{case}: every process of the job started");
}
for my $c (@killed)
{
	my @pids = pids($c->{case});
	my $t0   = Time::HiRes::time();
	kill 'KILL', $c->{h}{pid};
	my $deadline = $t0 + $PostgreSQL::Test::Utils::timeout_default;
	my @left = @pids;
	while (@left && Time::HiRes::time() < $deadline)
	{
		Time::HiRes::sleep(0.01);
		@left = alive(@pids);
	}
	my $took = Time::HiRes::time() - $t0;
	is("@left", '', "$c->{case}: SIGKILL of dlock: no process of the job is left");
	my $name = $c->{case};
	$name .= '-a' if $c->{shape} eq 'pipeline';
	$name .= ':1' if $c->{shape} eq 'stubborn';
	is(sql("SELECT bool_and(live) FROM dlock_leases WHERE lock_name = '$name'"),
		't', "$c->{case}: ... while the lease (ttl 60 s) is still live");
	note(sprintf("%s: the tree was gone %.3f s after the SIGKILL of dlock",
			$c->{case}, $took));
	dlock_wait($c->{h});
}

# ---------------------------------------------------------------------
# The keeper is killed: dlock, a subreaper too, ends the tree itself and
# exits 70; the lease is released.
# ---------------------------------------------------------------------
script('keeper', 'stubborn');
my $k = dlock_start(
	[ 'run', '-d', $conn, '--ttl', '60s', 'keeper-job', '--', "$dir/keeper.sh" ]);
ok(wait_pids('keeper', 3), 'keeper: every process of the job started');
my ($keeper) = grep { /^\d+$/ } split /\s+/,
  slurp("/proc/$k->{pid}/task/$k->{pid}/children");
ok(defined $keeper && $keeper > 0, 'keeper: dlock has one child, the keeper');
kill 'KILL', $keeper;
is(dlock_wait($k), 70, 'keeper killed: exit 70');
like($k->{stderr}, qr/keeper .* was killed by SIGKILL/, 'keeper killed: stderr says so');
is(join(' ', alive(pids('keeper'))), '',
	'keeper killed: no process of the job is left when dlock exits');
is(lease('keeper-job'), 't|f', 'keeper killed: the lease is released');

# ---------------------------------------------------------------------
# dlock and CMD stopped, as a Ctrl-Z stops them (SIGTSTP to the group; the
# keeper ignores it, 035 shows it on a terminal): the keeper goes on
# keeping the deadline and ends the job, the daemon outside the group
# too, although nobody continues dlock and CMD.
# ---------------------------------------------------------------------
write_script("$dir/group.sh", qq{export PIDS=$dir/group.pids
echo \$\$ >> "\$PIDS"
setsid -f bash -c 'echo \$\$ >> "\$PIDS"; while :; do sleep 0.2; done' < /dev/null > /dev/null 2>&1
while :; do sleep 0.2; done
});
my $g = dlock_start([ 'run', '-d', $conn, '--ttl', '2s', 'group-job', '--', "$dir/group.sh" ]);
ok(wait_pids('group', 2), 'group: every process of the job started');
my ($gcmd, $daemon) = pids('group');
kill 'STOP', $g->{pid}, $gcmd;
# (the ttl is 2 s: by 20 s they are gone, or the keeper did nothing)
ok(wait_until(sub { !process_alive($daemon) && !process_alive($gcmd) }, 20),
	'group: the keeper ended the job, the daemon too, while dlock was stopped');
like(slurp("/proc/$g->{pid}/stat"), qr/^\d+ \(.*\) T /s, '... (dlock was still stopped)');
kill 'CONT', $g->{pid};
is(dlock_wait($g), 76, 'group: resumed past its deadline, dlock exits 76');
is(join(' ', alive(pids('group'))), '', 'group: no process of the job is left');

done_testing();
