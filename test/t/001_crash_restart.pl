#!/usr/bin/perl
#
# test/t/001_crash_restart.pl
#	  Leases and fencing tokens across crash-restart (committed leases
#	  survive, and tokens keep increasing: docs/guarantees.md, "Crash and
#	  restart").
#
# Each round builds committed leases in every state (live with a long ttl,
# released, expired), opens a transaction that acquires, takes over, renews
# and releases and leaves it uncommitted, crashes the server with
# stop('immediate') and starts it again.  Then:
#
#   - every committed lease row is back unchanged (token, owner,
#     holder_role, times, released) and the uncommitted changes are gone;
#   - the next token is strictly greater than every token issued before
#     the crash, the uncommitted transaction's tokens included;
#   - a live lease still refuses other acquirers, and renew/release with
#     its pre-crash token work (also for a lease held by a non-superuser).
#
# Three rounds, so tokens are checked to keep increasing over several
# crashes with acquisitions in between; leases of earlier rounds stay in
# the table and must survive the later crashes too.
#
# The last part makes the token of an uncommitted acquire, and then of an
# acquire committed with synchronous_commit = off, the one whose nextval()
# writes the sequence's WAL record.  Nothing else would flush that record
# before the crash, so a plain sequence would hand the same token out again
# after the restart; acquire flushes it before returning the token
# (src/store.c), which is what these checks prove.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;
use List::Util qw(max);

# No timed checkpoint during the rounds: a checkpoint between the last
# committed acquire and the uncommitted one is exactly the case at the
# end, which is tested there on purpose.  The long walwriter delay
# keeps WAL that no commit flushed in memory until the crash, which makes
# that case reproducible; it changes nothing for synchronous commits.
my $node = dlock_node(
	'dlock_crash',
	conf => q{
checkpoint_timeout = '1h'
wal_writer_delay = '10s'
},
	setup => q{
CREATE EXTENSION dlock;
CREATE ROLE dlock_app;
});

# Every token any session was handed, committed or not, in issue order.
my @issued;

# The columns that must survive a crash exactly.  "live" is left out: it
# is judged by the clock at read time and is checked separately.
my $rows_query = q{
SELECT lock_name, token, owner, holder_role, acquired_at, renewed_at,
       expires_at, released
  FROM dlock_leases ORDER BY lock_name};

# sql() runs SQL as the superuser; prefixed with $as_app, as role
# dlock_app.
my $as_app = "SET ROLE dlock_app;\n";

# fresh_token checks that $token (returned by an acquire of $name) is a
# real token, strictly greater than every token issued before, and records
# it.
sub fresh_token
{
	my ($token, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;

	my $prev = max(0, @issued);
	like($token, qr/^[0-9]+$/, "$what: got a token");
	cmp_ok($token, '>', $prev,
		"$what: token $token is greater than every earlier token ($prev)");
	push @issued, $token;
	return $token;
}

# acquire takes the lease on $name for $ttl and checks the token is new.
sub acquire
{
	my ($name, $ttl, %opt) = @_;
	my $owner = defined $opt{owner} ? "'$opt{owner}'" : 'NULL';
	my $token =
	  sql(($opt{as_app} ? $as_app : '')
		  . "SELECT dlock_acquire('$name', '$ttl', '0', $owner)");
	return fresh_token($token, $opt{what} // "acquire $name");
}

# live_of returns the live flag ('t'/'f') of $name, '' when it has no row.
sub live_of
{
	my ($name) = @_;
	return sql("SELECT live FROM dlock_leases WHERE lock_name = '$name'");
}

# token_of returns the token in the row of $name.
sub token_of
{
	my ($name) = @_;
	return sql("SELECT token FROM dlock_leases WHERE lock_name = '$name'");
}

for my $round (1 .. 3)
{
	my $p = "r$round";
	note "round $round";

	# Committed leases in every state.
	my %tok;
	$tok{live_a} = acquire("$p-live-a", '1 hour', owner => "worker-a-$round");
	$tok{live_b} = acquire("$p-live-b", '1 hour', as_app => 1);
	$tok{live_c} = acquire("$p-live-c", '1 hour', owner => 'worker-c');
	$tok{live_d} = acquire("$p-live-d", '1 hour', owner => 'worker-d');
	$tok{released} = acquire("$p-released", '1 hour', owner => 'worker-r');
	is(sql("SELECT dlock_release('$p-released', $tok{released})"),
		't', "round $round: release before the crash");
	$tok{expired_a} = acquire("$p-expired-a", '1 millisecond');
	$tok{expired_b} = acquire("$p-expired-b", '1 millisecond');
	$node->poll_query_until(
		'postgres', qq{
SELECT count(*) = 0 FROM dlock_leases
 WHERE lock_name IN ('$p-expired-a', '$p-expired-b') AND live})
	  or die "short leases did not expire";

	# A name released in an earlier round is acquired again.
	if ($round > 1)
	{
		my $q = 'r' . ($round - 1);
		$tok{reacquired} = acquire("$q-released", '1 hour',
			what => "round $round: acquire $q-released again");
	}

	# The transaction that is open when the server crashes: a new name, a
	# takeover of an expired lease, a release and a renewal.
	my $bg = $node->background_psql('postgres');
	$bg->query_safe('BEGIN');
	my $pending =
	  $bg->query_safe("SELECT dlock_acquire('$p-pending', '1 hour')");
	fresh_token($pending, "round $round: uncommitted acquire of a new name");
	my $takeover =
	  $bg->query_safe("SELECT dlock_acquire('$p-expired-b', '1 hour')");
	fresh_token($takeover,
		"round $round: uncommitted takeover of an expired lease");
	is($bg->query_safe("SELECT dlock_release('$p-live-c', $tok{live_c})"),
		't', "round $round: uncommitted release");
	is( $bg->query_safe(
			"SELECT dlock_renew('$p-live-d', $tok{live_d}, '2 hours')"),
		't',
		"round $round: uncommitted renewal");

	my $before = sql($rows_query);
	my $max_before = max(@issued);

	$node->stop('immediate');
	$bg->quit;
	$node->start;

	# Committed rows are back exactly; the uncommitted changes are not.
	is(sql($rows_query), $before,
		"round $round: every committed lease row survived the crash unchanged"
	);
	is(sql("SELECT count(*) FROM dlock_leases WHERE lock_name = '$p-pending'"),
		'0', "round $round: the uncommitted new name has no row");
	is(token_of("$p-expired-b"), $tok{expired_b},
		"round $round: the uncommitted takeover is undone");
	is(live_of("$p-expired-b"), 'f',
		"round $round: the expired lease is still expired");
	is(live_of("$p-expired-a"), 'f',
		"round $round: the other expired lease is still expired");
	is(live_of("$p-released"), 'f',
		"round $round: the released lease is still released");
	is(live_of("$p-live-c"), 't',
		"round $round: the uncommitted release is undone");
	for my $k (qw(live-a live-b live-d))
	{
		is(live_of("$p-$k"), 't', "round $round: $p-$k is still live");
	}
	for my $q (1 .. $round - 1)
	{
		is(live_of("r$q-live-a"), 't',
			"round $round: r$q-live-a of round $q is still live");
	}

	# The first token after the restart, on the name the crash freed.
	my $first = acquire("$p-pending", '1 hour',
		what => "round $round: first acquire after the crash");
	cmp_ok($first, '>', $max_before,
		"round $round: first token after the crash ($first) is greater than "
		  . "every token issued before it ($max_before)");

	# A live lease still refuses others; its pre-crash token still works.
	is(sql("SELECT dlock_acquire('$p-live-a', '1 minute') IS NULL"),
		't', "round $round: a live lease refuses another acquirer");
	is(sql($as_app . "SELECT dlock_acquire('$p-live-b', '1 minute') IS NULL"),
		't', "round $round: a live lease refuses its own role too");
	is(sql("SELECT dlock_renew('$p-live-a', $tok{live_a}, '1 hour')"),
		't', "round $round: renew with the pre-crash token");
	is(token_of("$p-live-a"), $tok{live_a},
		"round $round: renewal kept the token");
	is(sql($as_app . "SELECT dlock_renew('$p-live-b', $tok{live_b}, '1 hour')"),
		't', "round $round: the holder role renews with the pre-crash token");
	is(sql($as_app . "SELECT dlock_release('$p-live-b', $tok{live_b})"),
		't', "round $round: the holder role releases with the pre-crash token");
	is(sql("SELECT dlock_release('$p-live-c', $tok{live_c})"),
		't', "round $round: release with the pre-crash token");
	is( sql(
			"SELECT token, released, live FROM dlock_leases WHERE lock_name = '$p-live-c'"
		),
		"$tok{live_c}|t|f",
		"round $round: the released row keeps its token");
	is(sql("SELECT dlock_release('$p-live-d', $takeover)"),
		'f', "round $round: the uncommitted transaction's token holds nothing");
	is(sql("SELECT dlock_release('$p-live-d', $tok{live_d} + 1)"),
		'f', "round $round: release with a wrong token is refused");
	is(live_of("$p-live-d"), 't',
		"round $round: the refused release left the lease live");

	# Ended leases can be taken again, with new tokens.
	acquire("$p-expired-b", '1 hour',
		what => "round $round: take over the expired lease after the crash");
	acquire("$p-live-c", '1 hour',
		what => "round $round: acquire the released name after the crash");
}

my %seen;
my @dups = grep { $seen{$_}++ } @issued;
is_deeply(\@dups, [], 'no token was ever handed out twice');

# The token's WAL record would not be flushed before the crash.
#
# nextval() WAL-logs the sequence only on every 33rd call (it logs 32
# values ahead) and on the first call after a checkpoint, and that record
# is flushed to disk only by the commit of the transaction that made it.
# When that transaction does not commit, or commits with
# synchronous_commit = off, and the server crashes before anything else
# flushes the WAL, recovery puts the sequence back and the same token is
# handed out again: tokens must never repeat, not after a crash either.
# Without dlock preloaded (this file), dlock_acquire
# flushes WAL up to the sequence page's LSN before it returns a token
# (with preload, 011 proves the boot jump instead).  The rounds above
# never make the logging call in the open transaction; these cases do so
# on purpose, with to_logging_call (DlockTest.pm).

# An uncommitted acquire whose nextval() is the one that writes WAL.
to_logging_call($node, 'todo-open');
my $bg = $node->background_psql('postgres');
$bg->query_safe('BEGIN');
my $lost = $bg->query_safe("SELECT dlock_acquire('todo-open', '1 hour')");
like($lost, qr/^[0-9]+$/, 'uncommitted acquire after the consumed tokens');
$node->stop('immediate');
$bg->quit;
$node->start;
my $next = sql("SELECT dlock_acquire('todo-after-open', '1 hour')");
cmp_ok($next, '>', $lost,
	"token after the crash ($next) is greater than the token of an "
	  . "uncommitted acquire that made the sequence's WAL record ($lost)");

# The same with an acquire committed under synchronous_commit = off.
# Losing the lease itself is what synchronous_commit = off allows; handing
# its token out again is not.  (The walwriter flushes such commits within
# wal_writer_delay, 10s here; should it get there before the crash, this
# passes without showing anything.)
to_logging_call($node, 'todo-async');
my $async = sql(
	"SET synchronous_commit = off; SELECT dlock_acquire('todo-async', '1 hour')");
like($async, qr/^[0-9]+$/, 'acquire committed with synchronous_commit = off');
$node->stop('immediate');
$node->start;
$next = sql("SELECT dlock_acquire('todo-after-async', '1 hour')");
cmp_ok($next, '>', $async,
	"token after the crash ($next) is greater than the token of an "
	  . "acquire committed with synchronous_commit = off ($async)");

$node->stop;
done_testing();
