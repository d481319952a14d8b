#!/usr/bin/perl
#
# test/t/024_cli_timeout.pl
#	  --timeout of the dlock command-line tool (cli/conn.c, cli/dlock.c):
#	  a call the database does not answer (it hangs without closing the
#	  connection) is cancelled on the server, and dlock exits 69 with a
#	  message naming the call and the bound, instead of waiting for ever.
#
# The server is made to hang deterministically: the functions of schema
# "hang" (reached with --schema) first wait for advisory lock 42, which
# the test holds in another session, and then call the real ones.  Every
# command runs at once against them with --timeout 1s (each dlock names
# its session with application_name), so the part takes about a second;
# so does an acquire that is refused at once but whose look-up of the
# holder hangs (schema "hangview"): still 75, the message says why the
# holder is not named.
# While the test still holds the lock, none of their backends may be left
# on the server: only a cancel request ends a backend waiting for a lock
# (a closed client connection is noticed only when it next talks to the
# client).  After the lock is released, none of the calls may have taken
# effect (no lease for acquire and run, CMD never started, the renewed
# and released leases unchanged).
#
# Then: a cancel request that the server cannot take (the postmaster is
# stopped with SIGSTOP) is given up after its own bound, and no process of
# dlock's (the cancel request is sent by a child process) is left behind;
# SIGTERM and SIGINT during a hung call still cancel it and exit 128+S;
# with the default timeout (30s plus --wait) quick calls are unaffected.
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

my $node = dlock_node('dlock_cli_timeout');
my $conn = $node->connstr('postgres');
my $dir  = PostgreSQL::Test::Utils::tempdir('cli_timeout');

sql(q{CREATE EXTENSION dlock;
CREATE SCHEMA hang;
CREATE FUNCTION hang.gate() RETURNS boolean LANGUAGE plpgsql AS
  $$ BEGIN PERFORM pg_advisory_xact_lock(42); RETURN true; END $$;
CREATE FUNCTION hang.dlock_acquire(text, interval, interval, text) RETURNS bigint
  LANGUAGE plpgsql AS $$ BEGIN PERFORM hang.gate(); RETURN public.dlock_acquire($1, $2, $3, $4); END $$;
CREATE FUNCTION hang.dlock_renew(text, bigint, interval) RETURNS boolean
  LANGUAGE plpgsql AS $$ BEGIN PERFORM hang.gate(); RETURN public.dlock_renew($1, $2, $3); END $$;
CREATE FUNCTION hang.dlock_release(text, bigint) RETURNS boolean
  LANGUAGE plpgsql AS $$ BEGIN PERFORM hang.gate(); RETURN public.dlock_release($1, $2); END $$;
CREATE VIEW hang.dlock_leases AS SELECT * FROM public.dlock_leases WHERE (SELECT hang.gate());
CREATE SCHEMA hangview;
CREATE FUNCTION hangview.dlock_acquire(text, interval, interval, text) RETURNS bigint
  LANGUAGE sql AS $$ SELECT public.dlock_acquire($1, $2, $3, $4) $$;
CREATE VIEW hangview.dlock_leases AS SELECT * FROM hang.dlock_leases;});

# poll_sql($query, $seconds) returns true once $query returns 't', polling
# every 50 ms for at most $seconds.
sub poll_sql
{
	my ($query, $seconds) = @_;
	my $end = Time::HiRes::time() + $seconds;
	while (Time::HiRes::time() < $end)
	{
		return 1 if sql($query) eq 't';
		Time::HiRes::sleep(0.05);
	}
	return 0;
}

# backends($app) is the number of server sessions named $app.
sub backends
{
	return sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = '$_[0]'");
}

# With the default timeout, quick calls are unaffected.
my $h = dlock_run([ '-d', $conn, 'acquire', '--ttl', '1m', 'renewed' ]);
is($h->{rc}, 0, 'default timeout: a quick acquire succeeds');
my $renewed = $h->{stdout} =~ s/\n//r;
$h = dlock_run([ '-d', $conn, 'acquire', '--ttl', '1m', 'released' ]);
my $released = $h->{stdout} =~ s/\n//r;
is(dlock_run([ '-d', $conn, 'renew', '--ttl', '1m', 'renewed', $renewed ])->{rc},
	0, 'default timeout: a quick renew succeeds');
is(dlock_run([ '-d', $conn, 'status', 'renewed' ])->{rc},
	0, 'default timeout: a quick status succeeds');
$h = dlock_run([ '--timeout', '2s', '-d', $conn, 'status', '--timeout', '1s', 'released' ]);
is($h->{rc}, 0, '--timeout 1s (also accepted before the command): a quick call succeeds');
is($h->{stderr}, '', '--timeout 1s: a quick call says nothing');
$h = dlock_run([ '-d', $conn, 'acquire', '--ttl', '1m', '--timeout', '5s', '--wait', '300ms', 'renewed' ]);
is($h->{rc}, 75, '--timeout longer than --wait: a held lease is still "not acquired" (75)');

# Usage and help
$h = dlock_run([ 'status', '--timeout', '0' ]);
is($h->{rc}, 64, '--timeout 0: usage error');
like($h->{stderr}, qr/^dlock: --timeout must be at least 1ms$/m, '--timeout 0: says so');
is(dlock_run([ 'status', '--timeout', '5x' ])->{rc}, 64, '--timeout 5x: usage error');
$h = dlock_run(['--help']);
like($h->{stdout}, qr/^      --timeout=DUR /m, '--help documents --timeout');
like($h->{stdout}, qr/^  69 .*\n(?:    .*\n)*.*--timeout/m, '--help: exit status 69 covers --timeout');

# Every command against a hung server, at once.
my $lock = $node->background_psql('postgres');
$lock->query_safe('SELECT pg_advisory_lock(42)');
write_script("$dir/touch.sh", "touch $dir/touched\n");

sub hung
{
	my ($app, @args) = @_;
	return dlock_start([ '-d', "$conn application_name=$app", '--schema', 'hang', @args ]);
}
my %calls = (
	acquire => hung('to-acquire', 'acquire', '--timeout', '1s', 'never'),
	run     => hung('to-run', 'run', '--timeout', '1s', 'never-run', '--', "$dir/touch.sh"),
	renew   => hung('to-renew', 'renew', '--ttl', '2h', '--timeout', '1s', 'renewed', $renewed),
	release => hung('to-release', 'release', '--timeout', '1s', 'released', $released),
	status  => hung('to-status', 'status', '--timeout', '1s'),);
# an acquire refused at once, whose look-up of the holder hangs
my $describe = dlock_start([ '-d', "$conn application_name=to-describe", '--schema', 'hangview',
	'acquire', '--timeout', '1s', 'renewed' ]);
my %what = (
	acquire => qr/could not acquire "never"/,
	run     => qr/could not acquire "never-run"/,
	renew   => qr/could not renew "renewed"/,
	release => qr/could not release "released"/,
	status  => qr/could not read the leases/,);
my %unknown = (
	acquire => qr/; the lease may have been granted all the same, without dlock learning its token: it then ends when its ttl \(30s\) runs out$/,
	run     => qr/; the lease may have been granted all the same, without dlock learning its token: it then ends when its ttl \(30s\) runs out$/,
	renew   => qr/; the lease may or may not have been renewed$/,
	release => qr/; the lease may or may not have been released \(if not, it ends when its ttl runs out\)$/,
	status  => qr/the call was cancelled on the server$/,);
for my $c (sort keys %calls)
{
	my $w = $calls{$c};
	is(dlock_wait($w, 20), 69, "$c, no answer within --timeout 1s: exit 69");
	cmp_ok($w->{elapsed}, '<', 10, "$c: exits within 10 s");
	cmp_ok($w->{elapsed}, '>=', 0.9, "$c: not before the timeout");
	like($w->{stderr},
		qr/^dlock: $what{$c}: no answer from the database within 1s \(--timeout\); the call was cancelled on the server/,
		"$c: the message names the call and the bound, and the cancel");
	like($w->{stderr}, $unknown{$c}, "$c: the message says what the call may have done");
	is($w->{stderr} =~ tr/\n//, 1, "$c: one line");
	is($w->{stdout}, '', "$c: nothing on stdout");
}
is(dlock_wait($describe, 20), 75, 'a refused acquire whose holder cannot be read in time: still 75');
cmp_ok($describe->{elapsed}, '<', 10, 'refused acquire: exits within 10 s');
like($describe->{stderr},
	qr/^dlock: not acquired: "renewed" is held \(its holder could not be read: no answer from the database within 1s \(--timeout\); the call was cancelled on the server\)\n\z/,
	'refused acquire: says so, on one line');
ok( poll_sql(
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name LIKE 'to-%'", 3),
	'the hung calls were cancelled on the server: no backend of theirs is left, with the lock still held')
  or diag(sql("SELECT application_name, state, wait_event_type, query FROM pg_stat_activity"));

# A cancel request the server cannot take: the postmaster is stopped.
my $marker = "dlock-024-$$";
my $pm_pid = (split /\n/, slurp($node->data_dir . '/postmaster.pid'))[0];
$h = dlock_start([ '-d', "$conn application_name=to-stopped", '--schema', 'hang',
	'status', '--timeout', '1s' ], env => { DLOCK_TEST_MARK => $marker });
ok( poll_sql(
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'to-stopped' AND wait_event_type = 'Lock'", 5),
	'stopped postmaster: the call waits on the server');
kill 'STOP', $pm_pid;
my $rc = dlock_wait($h, 20);
# (looked for before the postmaster is resumed, which would let a cancel
# request still in flight end)
my @left = grep {
	my $env = slurp("/proc/$_/environ");
	index($env, "DLOCK_TEST_MARK=$marker\0") >= 0 && process_alive($_)
} map { m{/proc/(\d+)$} ? $1 : () } glob('/proc/[0-9]*');
kill 'CONT', $pm_pid;
is($rc, 69, 'stopped postmaster: exit 69');
cmp_ok($h->{elapsed}, '<', 10, 'stopped postmaster: exits within 10 s (the cancel request has its own bound)');
like($h->{stderr},
	qr/^dlock: could not read the leases: no answer from the database within 1s \(--timeout\); the server did not take the cancel request within 1s: the call may still be running there$/,
	'stopped postmaster: says the cancel request was not taken');
is_deeply(\@left, [], 'stopped postmaster: no process of dlock\'s is left behind');
# (the postmaster, resumed, still takes the queued cancel request)
ok(poll_sql("SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'to-stopped'", 5),
	'stopped postmaster: its backend goes away once the postmaster is resumed');

# SIGTERM and SIGINT during a hung call: cancelled, exit 128+S.
my %sig = (TERM => [ 143, 'acquire', 'sig-acquire' ], INT => [ 130, 'release', 'released', $released ]);
for my $s (sort keys %sig)
{
	my ($want, @args) = @{ $sig{$s} };
	my $w = hung("to-sig$s", @args);
	ok( poll_sql(
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'to-sig$s' AND wait_event_type = 'Lock'", 5),
		"SIG$s: the call waits on the server");
	kill $s, $w->{pid};
	is(dlock_wait($w, 20), $want, "SIG$s during a hung $args[0]: exit $want");
	cmp_ok($w->{elapsed}, '<', 10, "SIG$s: exits at once");
	like($w->{stderr}, $s eq 'TERM'
		? qr/^dlock: interrupted by SIGTERM while acquiring "sig-acquire"$/
		: qr/^dlock: interrupted by SIGINT while trying to release "released"$/,
		"SIG$s: says so");
	ok(poll_sql("SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'to-sig$s'", 3),
		"SIG$s: the call was cancelled on the server");
}

# Let the wrappers through: none of the cancelled calls may take effect.
$lock->query_safe('SELECT pg_advisory_unlock(42)');
$lock->quit;
Time::HiRes::sleep(0.3);
is(sql("SELECT count(*) FROM dlock_leases WHERE lock_name IN ('never', 'never-run', 'sig-acquire')"),
	'0', 'the cancelled acquires granted no lease');
ok(!-e "$dir/touched", 'run: CMD was never started');
is(sql("SELECT token, live, expires_at - renewed_at FROM dlock_leases WHERE lock_name = 'renewed'"),
	"$renewed|t|00:01:00", 'the cancelled renew did not renew (ttl still 1m, not 2h)');
is(sql("SELECT token, live FROM dlock_leases WHERE lock_name = 'released'"),
	"$released|t", 'the cancelled releases did not release');

$node->stop;
done_testing();
