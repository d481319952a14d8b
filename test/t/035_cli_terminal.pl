#!/usr/bin/perl
#
# test/t/035_cli_terminal.pl
#	  dlock run started from an interactive shell on a terminal: CMD can
#	  read the terminal, Ctrl-Z stops the whole job and gives the shell
#	  its prompt back, fg resumes it, and Ctrl-C reaches CMD once (its
#	  trap runs; without a trap it dies of it), after which dlock exits
#	  with CMD's status and releases the lease.
#
# An interactive bash (--norc --noprofile -i, no line editing) runs on a
# pseudo-terminal (IO::Pty) in a session of its own, with the terminal as
# its controlling terminal, so it does job control as for a user; the
# test types command lines and the control characters ^Z and ^C into the
# terminal and reads what the terminal shows, each read bounded.  Every
# CMD is a bash script that prints markers (never part of a typed
# command line, so the terminal's echo cannot match them) and records its
# pids in a file; from /proc the test finds dlock's keeper (CMD's parent)
# and dlock (the keeper's parent), their process group and their states.
# Then it checks the lease rows in dlock_leases.
#
#   1. CMD reads a line typed on the terminal and prints it.
#   2. ^Z: the shell reports the job stopped and prompts; dlock and CMD
#      are stopped (state T), the keeper is not (it ignores SIGTSTP, to go
#      on keeping the deadline); all three in one process group, the
#      terminal's foreground group while the job ran; fg: the job goes on
#      (new ticks).
#   3. ^C: CMD's INT trap runs, once (dlock does not pass the terminal's
#      SIGINT on a second time), CMD exits 5; dlock exits 5; the lease
#      is released; no process of the job is left.
#   4. ^C to a CMD without a trap, with a background child (which ignores
#      SIGINT, as in any non-interactive shell): dlock exits 130, the
#      background child is stopped too, the lease is released.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();
use POSIX ();
use IO::Pty;
use DlockCli;
use DlockTest;

my $node = dlock_node('dlock_cli_terminal',
	setup => 'CREATE EXTENSION dlock');
my $conn  = $node->connstr('postgres');
my $dir   = PostgreSQL::Test::Utils::tempdir('cli_terminal');
my $dlock = dlock_path();

# lease returns "released|live" of $name's row, '' when there is none.
sub lease
{
	my ($name) = @_;
	return sql("SELECT released, live FROM dlock_leases WHERE lock_name = '$name'");
}

# proc_stat returns (state, ppid, pgrp, tpgid) of a process from /proc, () when
# it does not exist.
sub proc_stat
{
	my ($pid) = @_;
	my $s = slurp("/proc/$pid/stat");
	return () unless $s =~ /^\d+ \(.*\) (\S) (\d+) (\d+) \d+ \d+ (-?\d+) /s;
	return ($1, $2, $3, $4);
}

# ---------------------------------------------------------------------
# The interactive shell on a pseudo-terminal.
# ---------------------------------------------------------------------

my $prompt = 'dlock-tty-test> ';
my $pty    = IO::Pty->new;
my $shell  = fork();
die "fork failed: $!" unless defined $shell;
if ($shell == 0)
{
	# setsid, and the slave becomes the controlling terminal
	$pty->make_slave_controlling_terminal() or POSIX::_exit(250);
	my $slave = $pty->slave;
	close($pty);
	open(STDIN,  '<&', $slave) or POSIX::_exit(250);
	open(STDOUT, '>&', $slave) or POSIX::_exit(250);
	open(STDERR, '>&', $slave) or POSIX::_exit(250);
	close($slave);
	$SIG{$_} = 'DEFAULT'
	  for qw(HUP INT QUIT TERM TSTP TTIN TTOU USR1 USR2 CHLD PIPE ALRM);
	POSIX::sigprocmask(POSIX::SIG_SETMASK(), POSIX::SigSet->new());
	$ENV{PS1}      = $prompt;
	$ENV{TERM}     = 'dumb';
	$ENV{HISTFILE} = '/dev/null';
	delete $ENV{PROMPT_COMMAND};
	system('stty', 'sane', 'echo', 'isig', 'icanon', 'cols', '500');
	exec('/bin/bash', '--norc', '--noprofile', '--noediting', '-i')
	  or POSIX::_exit(251);
}
$pty->close_slave;

# the shell is killed however the test ends
END
{
	if ($shell && kill(0, $shell))
	{
		kill "KILL", $shell;
		waitpid($shell, 0);
	}
}

my $buf = '';      # what the terminal showed, not yet matched
my $all = '';      # everything it showed

# expect($re, $what [, $timeout]) reads the terminal until $re matches
# what it showed since the last match; consumes that output up to the end
# of the match and returns the match's groups (or 1), or () after
# $timeout seconds (default 15) without a match.
sub expect
{
	my ($re, $what, $timeout) = @_;
	my $deadline = Time::HiRes::time() + ($timeout // 15);
	while (1)
	{
		if ($buf =~ $re)
		{
			my @groups = defined $1 ? ($1, $2, $3) : (1);
			$buf = substr($buf, $+[0]);
			return @groups;
		}
		my $left = $deadline - Time::HiRes::time();
		last if $left <= 0;
		my $rin = '';
		vec($rin, fileno($pty), 1) = 1;
		my $n = select(my $rout = $rin, undef, undef, $left);
		next if $n <= 0;
		my $r = sysread($pty, my $chunk, 65536);
		last unless $r;    # EOF: the shell is gone
		$buf .= $chunk;
		$all .= $chunk;
	}
	diag("the terminal did not show $what; it showed, since the last match:\n$buf");
	return ();
}

# type($text) types $text on the terminal.
sub type
{
	my ($text) = @_;
	my $w = syswrite($pty, $text);
	die "cannot write to the terminal: $!" unless defined $w && $w == length $text;
}

# the shell is ready (the prompt is printed again after a line)
type("echo shell-\$((40+2))\n");
ok(expect(qr/shell-42\r?\n\Q$prompt\E/, 'the shell\'s first prompt'),
	'an interactive shell runs on the pseudo-terminal');

# ---------------------------------------------------------------------
# 1-3: read the terminal, ^Z and fg, ^C with a trap.
# ---------------------------------------------------------------------

write_script("$dir/term.sh", qq{echo \$\$ > $dir/term.pid
n=0
trap 'n=\$((n+1)); echo "caught-INT \$n"' INT
echo "cmd ready"
read l
echo "got:\$l"
i=0
while :; do
	echo "tick \$((i++))"
	sleep 0.1
	# after the first SIGINT, 5 more ticks (time for a second one) and exit 5
	if [ \$n -gt 0 ]; then [ \$((k++)) -ge 5 ] && exit 5; fi
done
});
type("$dlock run -d '$conn' --ttl 10s term-job -- $dir/term.sh\n");
ok(expect(qr/^cmd ready\r?$/m, 'CMD\'s "cmd ready"'), 'CMD started');
type("hello\n");
ok(expect(qr/^got:hello\r?$/m, 'CMD\'s "got:hello"'),
	'CMD read the line typed on the terminal');
my ($tick1) = expect(qr/^tick (\d+)\r?$/m, 'a tick');
ok(defined $tick1, 'CMD is running (ticks)');

my $cmd_pid = slurp("$dir/term.pid") =~ s/\n//r;
my (undef, $keeper_pid) = proc_stat($cmd_pid);
my (undef, $dlock_pid, $pgrp, $tpgid) = proc_stat($keeper_pid // 0);
my (undef, $dlock_ppid) = proc_stat($dlock_pid // 0);
is($dlock_ppid, $shell, "CMD's parent's parent is dlock, the shell's child");
is(slurp("/proc/$dlock_pid/comm"), "dlock\n", "that process is dlock");
is( join(' ', map { (proc_stat($_))[2] } $dlock_pid, $keeper_pid, $cmd_pid),
	"$dlock_pid $dlock_pid $dlock_pid",
	'dlock, its keeper and CMD are in one process group, dlock\'s');
is($tpgid, $dlock_pid, "that process group is the terminal's foreground group");
is(lease('term-job'), 'f|t', 'the lease is held while CMD runs');

# ^Z: the job stops, the shell gets the terminal back
type("\x1a");
ok(expect(qr/Stopped[^\n]*\n.*?\Q$prompt\E/s, 'the job reported stopped, then the prompt'),
	'^Z: the shell reports the job stopped and prompts again');
my $max_tick = $tick1;
$max_tick = $_ > $max_tick ? $_ : $max_tick for $all =~ /^tick (\d+)\r?$/mg;
for my $p ([ 'dlock', $dlock_pid ], [ 'CMD', $cmd_pid ])
{
	ok(wait_until(sub { ((proc_stat($p->[1]))[0] // '') eq 'T' }),
		"^Z: $p->[0] is stopped (state T)")
	  or diag("state of $p->[0]: " . ((proc_stat($p->[1]))[0] // 'gone'));
}
like((proc_stat($keeper_pid))[0] // 'gone', qr/^[SR]$/,
	'^Z: the keeper is not stopped (it ignores SIGTSTP: it keeps the deadline)');
type("echo after-stop-\$((6*7))\n");
ok(expect(qr/after-stop-42\r?\n\Q$prompt\E/, 'the echo while the job is stopped'),
	'the terminal is usable while the job is stopped');
ok(((proc_stat($cmd_pid))[0] // '') eq 'T', 'CMD stays stopped meanwhile');

# fg: the job goes on
type("fg\n");
my $resumed = 0;
while (my ($t) = expect(qr/^tick (\d+)\r?$/m, 'a tick after fg'))
{
	if ($t > $max_tick) { $resumed = 1; last; }
}
ok($resumed, 'fg: the job goes on (new ticks)');
ok( wait_until(
		sub {
			!grep { ((proc_stat($_))[0] // 'T') eq 'T' } $dlock_pid, $keeper_pid, $cmd_pid;
		}),
	'fg: dlock, its keeper and CMD run again');
is(lease('term-job'), 'f|t', 'the lease is still held');

# ^C: CMD's trap runs, dlock exits with its status
type("\x03");
ok(expect(qr/^(?:\^C)?caught-INT 1\r?$/m, 'CMD\'s trap output'), '^C: CMD\'s INT trap ran');
ok(expect(qr/\Q$prompt\E/, 'the prompt after the job'), '^C: the job ended, the shell prompts');
type("echo rc=\$?\n");
my ($rc) = expect(qr/^rc=(\d+)\r?$/m, 'the exit status');
is($rc, 5, "^C: dlock exits with CMD's status (5)");
is(lease('term-job'), 't|f', '^C: the lease was released');
ok(!process_alive($_), "^C: process $_ of the job is gone")
  for $dlock_pid, $keeper_pid, $cmd_pid;
unlike($all, qr/caught-INT 2/, 'CMD got SIGINT once (dlock did not pass the ^C on a second time)');

# ---------------------------------------------------------------------
# 4: ^C without a trap; a background child that ignores SIGINT.
# ---------------------------------------------------------------------

write_script("$dir/plain.sh", qq{sleep 100 &
echo "\$\$ \$!" > $dir/plain.pids
echo "plain ready"
sleep 100
echo "after the sleep"
});
type("$dlock run -d '$conn' --ttl 10s plain-job -- $dir/plain.sh\n");
ok(expect(qr/^plain ready\r?$/m, 'the second CMD\'s "plain ready"'), 'plain: CMD started');
my ($plain_cmd, $plain_bg) = split ' ', slurp("$dir/plain.pids");
my (undef, $plain_keeper) = proc_stat($plain_cmd);
my (undef, $plain_dlock) = proc_stat($plain_keeper // 0);
ok(process_alive($plain_bg), 'plain: the background child runs');
is(lease('plain-job'), 'f|t', 'plain: the lease is held');
type("\x03");
ok(expect(qr/\Q$prompt\E/, 'the prompt after the second job'),
	'plain: ^C ended the job, the shell prompts');
type("echo rc=\$?\n");
($rc) = expect(qr/^rc=(\d+)\r?$/m, 'the second exit status');
is($rc, 130, 'plain: dlock exits 130 (CMD killed by SIGINT)');
unlike($all, qr/^after the sleep/m, 'plain: CMD did not go on after ^C');
for my $p ([ 'dlock', $plain_dlock ], [ 'the keeper', $plain_keeper ],
	[ 'CMD', $plain_cmd ], [ 'the background child', $plain_bg ])
{
	ok(!process_alive($p->[1]), "plain: $p->[0] is gone once dlock has exited");
}
is(lease('plain-job'), 't|f', 'plain: the lease was released');

# the end of the shell
type("exit\n");
my $gone = wait_until(sub { waitpid($shell, POSIX::WNOHANG()) == $shell }, 10);
ok($gone, 'the shell exits');
if (!$gone)
{
	kill 'KILL', $shell;
	waitpid($shell, 0);
}
note("the terminal showed:\n$all");

$node->stop;
done_testing();
