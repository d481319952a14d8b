#!/usr/bin/perl
#
# test/t/011_token_jumps.pl
#	  Token jumps with shared_preload_libraries = 'dlock': the boot jump
#	  after every server start (src/token.c), which lets grants skip the
#	  WAL flush that 001_crash_restart.pl proves necessary without it.
#
# With preload, acquire does not flush the token sequence's WAL.  Instead,
# the first grant after every server start (crash restarts included) in
# each database moves the sequence to max(last value + 1, the server clock
# in microseconds since 2000-01-01); tokens then count up by one, much
# slower than the clock.  This file proves:
#
#   - the jump: the first token after a restart lies between the clock
#     readings taken just before and just after the acquire, and later
#     tokens count on by one;
#   - the cases 001 builds on purpose (an uncommitted acquire, and one
#     committed with synchronous_commit = off, whose nextval() wrote the
#     sequence's only WAL record, lost in the crash) still get a greater
#     token after the restart, although nothing flushed them;
#   - a session that acquires in a loop with synchronous_commit = off
#     while the server crashes: every token it was handed is smaller than
#     the first token after the restart;
#   - each database jumps on its own, once per start, and a clean restart
#     jumps too; without preload there is no jump (001 covers that path).
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;
use List::Util qw(max);
use Time::HiRes qw(usleep);


my $node = dlock_node(
	'dlock_jumps',
	preload => 1,
	conf => q{
checkpoint_timeout = '1h'
wal_writer_delay = '10s'
},
	setup => 'CREATE EXTENSION dlock');
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION dlock');

# The first tokens ever: no jump (nothing was issued before).
is(sql("SELECT dlock_acquire('e-1', '1 hour')"), '1',
	'the first token of a fresh install is 1');
is(sql("SELECT dlock_acquire('e-2', '1 hour')"), '2',
	'tokens count on by one');
is(sql("SELECT dlock_acquire('o-1', '1 hour')", 'other'), '1',
	'another database has its own tokens');

# clock_us returns the server clock in microseconds since 2000-01-01.
sub clock_us
{
	my ($db) = @_;
	return sql(
		q{SELECT (extract(epoch FROM clock_timestamp() - timestamptz '2000-01-01 00:00:00+00') * 1000000)::bigint},
		$db);
}

# jump_acquire acquires $name (in $db) and checks that the token is the
# first one of a jump above $last: between the clock readings just
# before and just after the call.  Returns the token.
sub jump_acquire
{
	my ($name, $last, $what, $db) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $before = clock_us($db);
	my $token = sql("SELECT dlock_acquire('$name', '1 hour')", $db);
	my $after = clock_us($db);
	cmp_ok($token, '>', $last, "$what: token $token is greater than the last one ($last)");
	cmp_ok($token, '>=', $before, "$what: token $token is at least the clock before the call ($before)");
	cmp_ok($token, '<=', $after, "$what: token $token is at most the clock after the call ($after)");
	return $token;
}

# A clean restart jumps too: the server cannot tell a clean start from
# one after a crash where the jump matters.
$node->restart;
my $t = jump_acquire('e-3', 2, 'first grant after a clean restart');
is(sql("SELECT dlock_acquire('e-4', '1 hour')"), $t + 1,
	'the next grant counts on by one (one jump per start)');
my $o = jump_acquire('o-2', 1, 'first grant in the other database', 'other');
is(sql("SELECT dlock_acquire('o-3', '1 hour')", 'other'), $o + 1,
	'the other database also jumps once');
# A new session does not jump again.
is(sql("SELECT dlock_acquire('e-5', '1 hour')"), $t + 2,
	'another session of the same start does not jump');

# An uncommitted acquire whose nextval() wrote the only record.
to_logging_call($node, 'open');
my $bg = $node->background_psql('postgres');
$bg->query_safe('BEGIN');
my $lost = $bg->query_safe("SELECT dlock_acquire('open', '1 hour')");
like($lost, qr/^[0-9]+$/, 'uncommitted acquire');
$node->stop('immediate');
$bg->quit;
$node->start;
my $next = jump_acquire('after-open', $lost,
	"after a crash, above the uncommitted acquire's token");

# The same with synchronous_commit = off.
to_logging_call($node, 'async');
my $async = sql(
	"SET synchronous_commit = off; SELECT dlock_acquire('async', '1 hour')");
like($async, qr/^[0-9]+$/, 'acquire committed with synchronous_commit = off');
$node->stop('immediate');
$node->start;
$next = sql("SELECT dlock_acquire('after-async', '1 hour')");
cmp_ok($next, '>', $async,
	"after a crash: token $next is greater than the async acquire's ($async)");

# A session acquiring in a loop with synchronous_commit = off while the
# server crashes.  Every token it printed was handed to a client.
my $loop = q{
DO $$
BEGIN
  FOR i IN 1..200000 LOOP
    RAISE NOTICE 'token %', dlock_acquire('loop-' || (i % 50), '1 millisecond');
    COMMIT;
  END LOOP;
END $$;
};
my ($out, $err) = ('', '');
my $h = IPC::Run::start(
	[
		'psql', '-X', '-d', $node->connstr('postgres'),
		'-c', 'SET synchronous_commit = off', '-c', $loop
	],
	'>', \$out, '2>', \$err);
# Wait until it has been handed some tokens, then crash.
my $seen = 0;
for my $i (1 .. 600)
{
	$h->pump_nb;
	$seen = () = $err =~ /token \d+/g;
	last if $seen >= 2000 || !$h->pumpable;
	usleep(50_000);
}
cmp_ok($seen, '>=', 100, "the loop was handed tokens before the crash ($seen)");
$node->stop('immediate');
eval { $h->finish; };
note "loop's last output: " . substr($err, -300);
my @handed = ($err =~ /token (\d+)/g);
my $max_handed = max(@handed);
$node->start;
$next = sql("SELECT dlock_acquire('after-loop', '1 hour')");
cmp_ok($next, '>', $max_handed,
	"after a crash under load with synchronous_commit = off: token $next is "
	  . "greater than all " . scalar(@handed) . " tokens handed out ($max_handed)");

# The first grant after a jump, lost in a crash.  The jump leaves the
# sequence "called" at the value before the new range, so the recovered
# sequence still reads as having handed out tokens, and the next start
# jumps again.  (Had the jump left it "not called", the lost first token
# would be handed out again.)
$node->restart;
$bg = $node->background_psql('postgres');
$bg->query_safe('BEGIN');
my $first_lost = $bg->query_safe("SELECT dlock_acquire('first-after-jump', '1 hour')");
like($first_lost, qr/^[0-9]+$/, 'the first grant after a restart (uncommitted)');
$node->stop('immediate');
$bg->quit;
$node->start;
$next = sql("SELECT dlock_acquire('after-first-lost', '1 hour')");
cmp_ok($next, '>', $first_lost,
	"after a crash that lost the first grant of a start: token $next is "
	  . "greater than it ($first_lost)");

# The very first token of a fresh install, committed with
# synchronous_commit = off and lost in a crash: the sequence comes back as
# never called, which proves nothing, and the next start jumps anyway.
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION dlock');
my $one = sql(
	"SET synchronous_commit = off; SELECT dlock_acquire('a', '1 hour')", 'fresh');
is($one, '1', 'a fresh install hands out 1 first');
$node->stop('immediate');
$node->start;
$next = sql("SELECT dlock_acquire('b', '1 hour')", 'fresh');
cmp_ok($next, '>', 1,
	"after a crash that may have lost token 1: token $next is greater than 1");

# A restore in place of the original (pg_restore --clean into the same
# database): the system, timeline and database are the same, but the
# token sequence is recreated, so the identity differs and the restored
# database jumps above the tokens the source issued after the dump.
my $dump = $node->basedir . '/fresh.dump';
$node->command_ok(
	[ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('fresh') ],
	'pg_dump of the database');
my @after_dump = map { sql("SELECT dlock_acquire('c$_', '1 hour')", 'fresh') } 1 .. 3;
$node->command_ok(
	[
		'pg_restore', '--clean', '--if-exists', '-d', $node->connstr('fresh'),
		$dump
	],
	'pg_restore --clean into the same database');
is(sql("SELECT count(*) FROM dlock_leases WHERE lock_name LIKE 'c%'", 'fresh'),
	'0', 'the restore brought back the state of the dump');
$next = sql("SELECT dlock_acquire('d', '1 hour')", 'fresh');
cmp_ok($next, '>', max(@after_dump),
	"after an in-place restore: token $next is greater than every token "
	  . "issued after the dump (" . join(', ', @after_dump) . ")");

$node->stop;
done_testing();
