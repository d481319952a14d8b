# test/perl/DlockCli.pm: helpers for the Perl TAP tests of the dlock
# command-line tool (test/t/0[23]*_cli_*.pl).
#
# The tests drive the checkout's binary, never an installed one: the path
# comes from DLOCK_CLI (test/run-tests sets it to cli/dlock of the
# checkout) or, when it is not set, from this file's place in the checkout.
# Each dlock runs as a real process, forked here, with stdout and stderr in
# files, so that a test can signal it (SIGTERM, SIGSTOP, SIGCONT) while it
# runs and read its exit status afterwards.  Every wait is bounded.

package DlockCli;

use strict;
use warnings;

use Exporter 'import';
use File::Basename qw(dirname);
use File::Spec;
use POSIX ();
use Time::HiRes ();
use Test::More;
use PostgreSQL::Test::Utils;

our @EXPORT =
  qw(dlock_path dlock_start dlock_wait dlock_run wait_for_file wait_until slurp
  write_script process_alive);

my $counter = 0;
my $outdir;

# dlock_path returns the dlock binary of the checkout.
sub dlock_path
{
	my $path = $ENV{DLOCK_CLI};
	if (!defined $path || $path eq '')
	{
		my $top = File::Spec->rel2abs(dirname(__FILE__) . '/../..');
		$path = "$top/cli/dlock";
	}
	BAIL_OUT("the dlock command-line tool is not built: no executable $path "
		  . "(run make, or make cli/dlock)")
	  unless -x $path;
	return $path;
}

# dlock_start(\@args, env => {NAME => value}) starts dlock with @args and
# returns a handle: {pid, out, err, t0}.  With program => PATH it starts
# that program instead, the same way (for comparisons).  stdin is /dev/null; stdout and
# stderr go to files.  The signals the tests send are reset to their
# default disposition and unblocked, whatever the test harness inherited,
# since dlock leaves a signal that it finds ignored ignored.
sub dlock_start
{
	my ($args, %opt) = @_;
	my $bin = $opt{program} // dlock_path();
	$outdir //= PostgreSQL::Test::Utils::tempdir('dlock_out');
	$counter++;
	my $h = {
		out  => "$outdir/dlock.$counter.out",
		err  => "$outdir/dlock.$counter.err",
		args => join(' ', @$args),
	};
	my $pid = fork();
	die "fork failed: $!" unless defined $pid;
	if ($pid == 0)
	{
		open(STDIN,  '<', '/dev/null') or POSIX::_exit(250);
		open(STDOUT, '>', $h->{out})   or POSIX::_exit(250);
		open(STDERR, '>', $h->{err})   or POSIX::_exit(250);
		$SIG{$_} = 'DEFAULT' for qw(HUP INT QUIT TERM USR1 USR2 CHLD PIPE ALRM);
		POSIX::sigprocmask(POSIX::SIG_SETMASK(), POSIX::SigSet->new());
		my $env = $opt{env} // {};
		for my $k (keys %$env)
		{
			if (defined $env->{$k}) { $ENV{$k} = $env->{$k}; }
			else { delete $ENV{$k}; }
		}
		exec($bin, @$args) or POSIX::_exit(251);
	}
	$h->{pid} = $pid;
	$h->{t0} = Time::HiRes::time();
	return $h;
}

# dlock_wait($h [, $timeout]) waits for dlock to exit (at most $timeout
# seconds, default the suite's timeout; then it is killed and the test
# fails) and returns its exit status, shell-style (128+N when killed by
# signal N).  Sets $h->{rc}, {stdout}, {stderr} and {elapsed} (seconds
# from the start).
sub dlock_wait
{
	my ($h, $timeout) = @_;
	$timeout //= $PostgreSQL::Test::Utils::timeout_default;
	return $h->{rc} if defined $h->{rc};
	my $deadline = Time::HiRes::time() + $timeout;
	my $status;
	while (1)
	{
		my $r = waitpid($h->{pid}, POSIX::WNOHANG());
		if ($r == $h->{pid})
		{
			$status = $?;
			last;
		}
		if (Time::HiRes::time() > $deadline)
		{
			kill 'KILL', $h->{pid};
			waitpid($h->{pid}, 0);
			fail("dlock $h->{args} did not exit within $timeout s");
			$status = $?;
			last;
		}
		Time::HiRes::sleep(0.02);
	}
	$h->{elapsed} = Time::HiRes::time() - $h->{t0};
	$h->{rc} = ($status & 127) ? 128 + ($status & 127) : $status >> 8;
	$h->{stdout} = slurp($h->{out});
	$h->{stderr} = slurp($h->{err});
	note("dlock $h->{args}: exit $h->{rc} after "
		  . sprintf('%.2f', $h->{elapsed})
		  . " s; stderr: $h->{stderr}")
	  if $h->{stderr} ne '';
	return $h->{rc};
}

# dlock_run(\@args, %opt) runs dlock to the end; returns the handle (see
# dlock_wait), with rc, stdout, stderr and elapsed.
sub dlock_run
{
	my ($args, %opt) = @_;
	my $h = dlock_start($args, %opt);
	dlock_wait($h, $opt{timeout});
	return $h;
}

# wait_for_file($path [, $timeout]) waits until $path exists and is not
# empty; returns true if it does in time.
sub wait_for_file
{
	my ($path, $timeout) = @_;
	$timeout //= $PostgreSQL::Test::Utils::timeout_default;
	my $deadline = Time::HiRes::time() + $timeout;
	while (Time::HiRes::time() < $deadline)
	{
		return 1 if -s $path;
		Time::HiRes::sleep(0.02);
	}
	return 0;
}

# wait_until($code [, $timeout]) polls $code every 20 ms until it returns
# true (at most $timeout seconds, default 10); returns whether it did.
sub wait_until
{
	my ($code, $timeout) = @_;
	my $deadline = Time::HiRes::time() + ($timeout // 10);
	while (Time::HiRes::time() < $deadline)
	{
		return 1 if $code->();
		Time::HiRes::sleep(0.02);
	}
	return $code->() ? 1 : 0;
}

# slurp($path) returns the file's content, '' when it does not exist.
sub slurp
{
	my ($path) = @_;
	open(my $fh, '<', $path) or return '';
	local $/;
	my $text = <$fh>;
	close($fh);
	return $text // '';
}

# write_script($path, $body) writes an executable bash script.
sub write_script
{
	my ($path, $body) = @_;
	open(my $fh, '>', $path) or die "cannot write $path: $!";
	print $fh "#!/bin/bash\n$body";
	close($fh);
	chmod(0755, $path) or die "cannot chmod $path: $!";
	return $path;
}

# process_alive($pid) reports whether a process with that pid exists (and
# is not a zombie).
sub process_alive
{
	my ($pid) = @_;
	my $stat = slurp("/proc/$pid/stat");
	return 0 if $stat eq '';
	return ($stat =~ /^\d+ \(.*\) (\S)/ && $1 ne 'Z') ? 1 : 0;
}

1;
