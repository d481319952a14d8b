#!/usr/bin/perl
#
# test/t/017_async_release.pl
#	  Releases in a transaction of their own commit without waiting for the
#	  WAL flush (src/async_commit.c; docs/guarantees.md, "Releases and the
#	  WAL flush"): which commits are asynchronous, and what a crash right
#	  after such a release can leave behind.
#
# The node keeps WAL that no commit flushed in memory: the walwriter sleeps
# 10 s between rounds and flushes no earlier for volume
# (wal_writer_flush_after), nothing else writes WAL on its own (wal_level
# minimal, PostgreSQL::Test::Cluster's default, logs no standby snapshots;
# no autovacuum, no timed checkpoint), and synchronous_commit is on.  The
# tests that count on a release staying unflushed first make sure its few
# records fit in the current WAL page (room_on_page): an asynchronous
# commit that fills a page wakes the walwriter.
#
# (a) The flush, read in the same session right after each statement:
#     pg_current_wal_flush_lsn() against pg_current_wal_insert_lsn() (the
#     end of what the statement wrote, since nothing else writes; see
#     unflushed()).
#     - autocommit dlock_release, dlock_release_each, and two releases in
#       one statement: not flushed; synchronous_commit is on again for
#       the next transaction, whose write is flushed;
#     - flushed at commit: the same release in BEGIN ... COMMIT, in a
#       multi-statement query, with an INSERT in a CTE, in a DO block that
#       then writes, with a nextval() that writes the sequence's WAL
#       record (before or after the release), with a renew or an acquire
#       after it in the same statement; and alone: renew, renew_each,
#       break, acquire, acquire_all, acquire_any;
#     - with synchronous_commit already off: not flushed, and still off
#       afterwards;
#     - a nextval() in the same statement that does not write WAL (31 of
#       32 calls) leaves the commit asynchronous, as docs/guarantees.md
#       says; with dlock.async_release = off it is flushed, as is a plain
#       release;
# (b) Crash right after a release: ten rounds acquire a lease with a ttl of
#     an hour (token t), release it in autocommit (odd rounds dlock_release,
#     even rounds dlock_release_each of two names), stop the server at once
#     (immediate) and start it.  The lease is then either released (token
#     t, released) or live as before the release (token t, its original
#     expiry), never anything else, the same for both names of a set; a
#     new acquire gets NULL when it is live and a token greater than t
#     when it was released.  The rounds print how many releases the crash
#     lost; at least one must be (it proves (b) tested the asynchronous
#     path).
# (c) A grant after an asynchronous release makes the release durable: the
#     grant reads the released row, so its commit record follows the
#     release's in the WAL, and its synchronous commit flushes both.
#     Crash right after (1) another session's acquire of the released name,
#     (2) another session's acquire of one name of a dlock_release_each of
#     two: the other name must be released after the restart too, never
#     live with the grant present, (3) a waiter woken by the release (dlock
#     is preloaded: it queues).  After the restart the grant is there with
#     its token and expiry, and the release with it.
# (d) With dlock.async_release = off, a value of nextval() returned by an
#     autocommit statement that also released a lease is not handed out
#     again after a crash.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;

my $node = dlock_node(
	'dlock_async',
	preload => 1,
	conf => q{
synchronous_commit = on
wal_level = minimal
max_wal_senders = 0
wal_writer_delay = '10s'
wal_writer_flush_after = '1GB'
checkpoint_timeout = '1h'
autovacuum = off
});
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION dlock;
CREATE TABLE other (x int);
CREATE SEQUENCE seq_logging;
CREATE SEQUENCE seq_cached;
SELECT nextval('seq_cached');
});

# ---------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------

# The WAL page size (XLOG_BLCKSZ) and the greatest page header: a
# position at the start of a page is shown past its header.
my $page = $node->safe_psql('postgres', 'SHOW wal_block_size');
my $long_header = 40;

# unflushed($s) returns how many bytes of WAL session $s's server has
# inserted but not flushed (0 when everything is flushed), read right
# after the statement under test with nothing else writing: the insert
# position is then the end of that statement's commit record.  When that
# record ended exactly at a page boundary, the insert position reads past
# the next page's header while the flush position is the boundary: that
# counts as flushed.
sub unflushed
{
	my ($s) = @_;
	my ($gap, $offset) = split /\|/, $s->query_safe(
		q{
SELECT pg_wal_lsn_diff(i, pg_current_wal_flush_lsn()),
       pg_wal_lsn_diff(i, '0/0')::numeric % } . $page . q{
  FROM (SELECT pg_current_wal_insert_lsn() AS i) s});
	return 0 if $gap > 0 && $gap == $offset && $gap <= $long_header;
	return $gap;
}

# page_left($s) returns how many bytes are left in the current WAL page.
sub page_left
{
	my ($s) = @_;
	return $s->query_safe(
		qq{SELECT $page - pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::numeric % $page}
	);
}

# room_on_page($s) makes sure that the next few small records (a release:
# a HOT update and a commit record) start where the WAL is flushed and fill
# no page: an asynchronous commit whose record ends on a page after the
# flushed one wakes the walwriter, which would flush it.  When some WAL is
# not flushed, or less than 1 kB is left in the current page, it switches
# to a new WAL segment: the switch record is flushed, and the next records
# start a fresh page.
sub room_on_page
{
	my ($s) = @_;
	$s->query_safe('SELECT pg_switch_wal()')
	  if unflushed($s) > 0 || page_left($s) < 1024;
	return;
}

# session() opens a background session and runs the queries of
# unflushed() and room_on_page() once: their first run in a session reads
# catalog pages, which can prune them and so write WAL that nothing
# flushes; later runs find what they need in the session's caches and
# write nothing.  The next synchronous commit flushes that WAL.
sub session
{
	my $s = $node->background_psql('postgres');
	unflushed($s);
	page_left($s);
	return $s;
}

# acquire($s, $name) takes the lease $name for an hour in session $s and
# returns its token.
sub acquire
{
	my ($s, $name) = @_;
	my $t = $s->query_safe("SELECT dlock_acquire('$name', '1 hour')");
	die "could not acquire $name" unless $t =~ /^[0-9]+$/;
	return $t;
}

# end_all($s) ends every live lease, in a transaction block (so that its
# commit waits for the flush).
sub end_all
{
	my ($s) = @_;
	$s->query_safe(
		q{BEGIN; SELECT count(dlock_release(lock_name, token)) FROM dlock_leases WHERE live; COMMIT}
	);
	return;
}

# flush_case($s, $what, $make_sql, $expect, %opt) acquires the names 'a'
# and 'b' in session $s (synchronously), makes room on the WAL page, runs
# the statement(s) $make_sql->(token of a, token of b) and checks whether
# the WAL is flushed afterwards: $expect is 'flushed' or 'unflushed'.  An
# unflushed case is retried (up to three times) when it found everything
# flushed: the walwriter's timer may fire between the commit and the
# check, and one unflushed attempt proves that the commit did not wait.  A
# flushed case must be flushed every time: its commit waited.  Options:
# sync_off => 1 runs the statement with synchronous_commit = off (set
# after the acquires) and checks that it is still off afterwards.
sub flush_case
{
	my ($s, $what, $make_sql, $expect, %opt) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my @gaps;
	for my $attempt (1 .. ($expect eq 'unflushed' ? 3 : 1))
	{
		my $ta = acquire($s, 'a');
		my $tb = acquire($s, 'b');
		room_on_page($s);
		is(unflushed($s), 0, "$what: everything flushed before")
		  if $attempt == 1;
		$s->query_safe('SET synchronous_commit = off') if $opt{sync_off};
		$s->query_safe($make_sql->($ta, $tb));
		push @gaps, unflushed($s);

		# Every case releases 'a' (read after the flush: this query's
		# first run may write WAL, see session()).
		is( $s->query_safe(
				q{SELECT released FROM dlock_leases WHERE lock_name = 'a'}),
			't',
			"$what: the lease was released")
		  if $attempt == 1;
		if ($opt{sync_off})
		{
			is($s->query_safe('SHOW synchronous_commit'),
				'off', "$what: synchronous_commit is still off afterwards")
			  if $attempt == 1;
			$s->query_safe('RESET synchronous_commit');
		}

		# Whatever the case did, end every live lease for the next case.
		end_all($s);
		last if $gaps[-1] > 0;
	}
	if ($expect eq 'unflushed')
	{
		cmp_ok($gaps[-1], '>', 0,
			"$what: not flushed at commit (unflushed WAL: @gaps bytes)");
	}
	else
	{
		is($gaps[-1], 0, "$what: flushed at commit");
	}
	return;
}

# ---------------------------------------------------------------------
# (a) Which commits wait for the flush
# ---------------------------------------------------------------------

my $s = session();

is($s->query_safe('SHOW synchronous_commit'), 'on', 'synchronous_commit is on');

flush_case($s, 'autocommit dlock_release',
	sub { "SELECT dlock_release('a', $_[0])" }, 'unflushed');
is($s->query_safe('SHOW synchronous_commit'),
	'on', 'after an asynchronous release, synchronous_commit is on again');
$s->query_safe('INSERT INTO other VALUES (0)');
is(unflushed($s), 0, 'the next transaction\'s write is flushed at commit');

flush_case($s, 'autocommit dlock_release_each',
	sub { "SELECT dlock_release_each(ARRAY['a', 'b'], ARRAY[$_[0], $_[1]])" },
	'unflushed');
flush_case($s, 'two dlock_release in one autocommit statement',
	sub { "SELECT dlock_release('a', $_[0]), dlock_release('b', $_[1])" },
	'unflushed');

flush_case($s, 'dlock_release in BEGIN ... COMMIT',
	sub { "BEGIN; SELECT dlock_release('a', $_[0]); COMMIT" }, 'flushed');
flush_case($s, 'dlock_release_each in BEGIN ... COMMIT',
	sub { "BEGIN; SELECT dlock_release_each(ARRAY['a', 'b'], ARRAY[$_[0], $_[1]]); COMMIT" },
	'flushed');
flush_case($s, 'dlock_release in a multi-statement query',
	sub { "SELECT dlock_release('a', $_[0]) \\; SELECT 1" }, 'flushed');
flush_case($s, 'dlock_release with an INSERT in a CTE',
	sub { "WITH w AS (INSERT INTO other VALUES (1)) SELECT dlock_release('a', $_[0])" },
	'flushed');
flush_case($s, 'dlock_release_each with an INSERT in a CTE',
	sub {
		"WITH w AS (INSERT INTO other VALUES (1) RETURNING x) SELECT dlock_release_each(ARRAY['a', 'b'], ARRAY[$_[0], $_[1]]) FROM w"
	},
	'flushed');
flush_case($s, 'dlock_release in a DO block that then writes',
	sub {
		"DO \$\$ BEGIN PERFORM dlock_release('a', $_[0]); INSERT INTO other VALUES (2); END \$\$"
	},
	'flushed');
flush_case($s, 'dlock_release then dlock_renew in one statement',
	sub { "SELECT dlock_release('a', $_[0]), dlock_renew('b', $_[1], '1 hour')" },
	'flushed');
flush_case($s, 'dlock_release then dlock_acquire in one statement',
	sub {
		"SELECT dlock_release('a', $_[0]), dlock_acquire('c', '1 hour')"
	},
	'flushed');

# A nextval() that writes the sequence's WAL record (log_cnt = 0: the next
# call logs 32 values ahead), before and after the release.
for my $order ('before', 'after')
{
	$s->query_safe("SELECT setval('seq_logging', 1000)");
	is($s->query_safe(q{SELECT log_cnt FROM seq_logging}),
		'0', "nextval $order the release: the next call writes WAL");
	flush_case(
		$s,
		"dlock_release with a nextval() that writes WAL, $order it",
		sub {
			$order eq 'before'
			  ? "SELECT nextval('seq_logging'), dlock_release('a', $_[0])"
			  : "SELECT dlock_release('a', $_[0]), nextval('seq_logging')";
		},
		'flushed');
}

# Acquire, renew and break alone always commit as configured.
{
	my $ta = acquire($s, 'a');
	is(unflushed($s), 0, 'dlock_acquire: flushed at commit');
	$s->query_safe("SELECT dlock_renew('a', $ta, '2 hours')");
	is(unflushed($s), 0, 'dlock_renew: flushed at commit');
	$s->query_safe("SELECT dlock_renew_each(ARRAY['a'], ARRAY[$ta], '1 hour')");
	is(unflushed($s), 0, 'dlock_renew_each: flushed at commit');
	$s->query_safe("SELECT dlock_break('a')");
	is(unflushed($s), 0, 'dlock_break: flushed at commit');
	is($s->query_safe(q{SELECT dlock_acquire_all(ARRAY['a', 'b'], '1 hour') IS NOT NULL}),
		't', 'dlock_acquire_all granted');
	is(unflushed($s), 0, 'dlock_acquire_all: flushed at commit');
	end_all($s);
	is( $s->query_safe(q{SELECT count(*) FROM dlock_acquire_any(ARRAY['a', 'b'], '1 hour')}),
		'1', 'dlock_acquire_any granted');
	is(unflushed($s), 0, 'dlock_acquire_any: flushed at commit');
	end_all($s);
}

# synchronous_commit already off: the release stays asynchronous, and the
# setting stays off after it (flush_case checks that too).
flush_case($s, 'autocommit dlock_release with synchronous_commit = off',
	sub { "SELECT dlock_release('a', $_[0])" },
	'unflushed', sync_off => 1);

# A nextval() that writes no WAL: the value it returns is durable only
# once the WAL record of the call that logged it ahead is flushed, which a
# synchronous commit of a transaction that wrote anything does (the record
# precedes the commit record).  src/async_commit.c looks only at WAL the
# transaction wrote itself, so this commit is asynchronous, as the commit
# of a transaction that only called nextval() is in PostgreSQL itself;
# docs/guarantees.md says so and names dlock.async_release = off for
# sessions that rely on it (below, and (d) after a crash).
is($s->query_safe(q{SELECT log_cnt > 0 FROM seq_cached}),
	't', 'seq_cached: the next nextval() writes no WAL');
flush_case($s, 'dlock_release with a nextval() that writes no WAL',
	sub { "SELECT nextval('seq_cached'), dlock_release('a', $_[0])" },
	'unflushed');

# dlock.async_release = off: releases commit as configured.
$s->query_safe('SET dlock.async_release = off');
flush_case($s, 'autocommit dlock_release with dlock.async_release = off',
	sub { "SELECT dlock_release('a', $_[0])" }, 'flushed');
flush_case($s, 'dlock_release with a nextval() that writes no WAL, dlock.async_release = off',
	sub { "SELECT nextval('seq_cached'), dlock_release('a', $_[0])" },
	'flushed');
$s->query_safe('RESET dlock.async_release');
$s->quit;

# ---------------------------------------------------------------------
# (b) Crash right after a release
# ---------------------------------------------------------------------

# restart stops the node at once (no shutdown checkpoint, no WAL flush)
# and starts it, then waits for a checkpoint: the end-of-recovery
# checkpoint could otherwise still be writing pages (flushing WAL first)
# while the next round releases.
sub restart
{
	$node->stop('immediate');
	$node->start;
	$node->safe_psql('postgres', 'CHECKPOINT');
	return;
}

# row_of($name) returns the lease row of $name: token|released|expires_at|live.
sub row_of
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT token, released, expires_at, live FROM dlock_leases WHERE lock_name = '$name'"
	);
}

restart();
my $rounds = 10;
my $lost = 0;
for my $round (1 .. $rounds)
{
	my @names = $round % 2 ? ('crash-one') : ('crash-set-a', 'crash-set-b');
	my $how = @names == 1 ? 'dlock_release' : 'dlock_release_each';
	my $bg = session();
	my %tok = map { $_ => acquire($bg, $_) } @names;
	my %before = map { $_ => row_of($_) } @names;
	room_on_page($bg);
	my $rel =
	  @names == 1
	  ? "SELECT dlock_release('$names[0]', $tok{$names[0]})"
	  : "SELECT dlock_release_each(ARRAY['$names[0]', '$names[1]'], ARRAY[$tok{$names[0]}, $tok{$names[1]}])";
	my $out = $bg->query_safe($rel);
	$bg->quit;
	restart();

	my %state;
	for my $name (@names)
	{
		my $t = $tok{$name};
		my $row = row_of($name);
		my ($token, $released, $expires, $live) = split /\|/, $row;
		if ($released eq 't' && $token eq $t && $live eq 'f')
		{
			$state{$name} = 'released';
			my $next = $node->safe_psql('postgres',
				"SELECT dlock_acquire('$name', '1 hour')");
			cmp_ok($next, '>', $t,
				"round $round ($how): $name released; a new acquire gets a greater token"
			);
			$tok{$name} = $next;
		}
		elsif ($row eq $before{$name})
		{
			$state{$name} = 'live';
			is($live, 't', "round $round ($how): $name lost its release, live as before");
			is( $node->safe_psql('postgres',
					"SELECT dlock_acquire('$name', '1 hour') IS NULL"),
				't',
				"round $round ($how): $name is live: a new acquire gets NULL");
		}
		else
		{
			fail("round $round ($how): $name after the crash: $row; before the release: $before{$name}"
			);
			$state{$name} = 'wrong';
		}
	}
	is(scalar(keys %{ { map { $_ => 1 } values %state } }),
		1, "round $round ($how): every name of the release in the same state")
	  or diag(explain \%state);
	$lost++ if grep { $_ eq 'live' } values %state;

	# End the leases (synchronously) for the next round.
	$node->safe_psql('postgres',
		"BEGIN; SELECT dlock_release('$_', $tok{$_}); COMMIT") for @names;
}
diag("crash right after a release: $lost of $rounds releases were lost");
cmp_ok($lost, '>', 0,
	'at least one release was lost in the crash (it was not flushed)');

# ---------------------------------------------------------------------
# (c) A grant after an asynchronous release makes the release durable
# ---------------------------------------------------------------------

# granted_after_crash checks, after the restart, that $name's row is the
# grant $row (token|released|expires_at|live as read before the crash).
sub granted_after_crash
{
	my ($what, $name, $row) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	is(row_of($name), $row, "$what: the grant of $name survived the crash");
	return;
}

# (1) Another session takes the released name.
{
	my $what = 'grant after a release';
	my $a = session();
	my $t1 = acquire($a, 'grant-1');
	room_on_page($a);
	$a->query_safe("SELECT dlock_release('grant-1', $t1)");
	cmp_ok(unflushed($a), '>', 0, "$what: the release is not flushed");
	$a->quit;
	my $b = session();
	my $t2 = acquire($b, 'grant-1');
	cmp_ok($t2, '>', $t1, "$what: another session acquired the name");
	is(unflushed($b), 0, "$what: the grant's commit flushed the WAL");
	$b->quit;
	my $row = row_of('grant-1');
	restart();
	granted_after_crash($what, 'grant-1', $row);
	is($node->safe_psql('postgres', "SELECT dlock_release('grant-1', $t1)"),
		'f', "$what: the first token holds nothing");
	is($node->safe_psql('postgres', "SELECT dlock_release('grant-1', $t2)"),
		't', "$what: the grant's token holds the lease");
}

# (2) A set is released; another session takes one of its names.  The
# other name's release is in the same commit record as the released name's,
# which precedes the grant's.
{
	my $what = 'grant of one name after dlock_release_each of two';
	my $a = session();
	my $tx = acquire($a, 'grant-2x');
	my $ty = acquire($a, 'grant-2y');
	room_on_page($a);
	is( $a->query_safe(
			"SELECT dlock_release_each(ARRAY['grant-2x', 'grant-2y'], ARRAY[$tx, $ty])"
		),
		'{t,t}',
		"$what: released both");
	cmp_ok(unflushed($a), '>', 0, "$what: the release is not flushed");
	$a->quit;
	my $b = session();
	my $t2 = acquire($b, 'grant-2x');
	is(unflushed($b), 0, "$what: the grant's commit flushed the WAL");
	$b->quit;
	my $row = row_of('grant-2x');
	restart();
	granted_after_crash($what, 'grant-2x', $row);
	is( $node->safe_psql('postgres',
			"SELECT token, released, live FROM dlock_leases WHERE lock_name = 'grant-2y'"
		),
		"$ty|t|f",
		"$what: the other name is released too");
	is($node->safe_psql('postgres', "SELECT dlock_release('grant-2x', $t2)"),
		't', "$what: the grant's token holds the lease");
}

# (3) A waiter, queued on the name, is woken by the release and granted.
{
	my $what = 'waiter woken by a release';
	my $a = session();
	my $t1 = acquire($a, 'grant-3');
	my $w = bg_session($node, 'waiter');
	bg_start($w, "SELECT dlock_acquire('grant-3', '1 hour', '60 s');");
	ok(waits_in_dlock($node, $w->{pid}), "$what: the waiter waits");
	room_on_page($a);
	$a->query_safe("SELECT dlock_release('grant-3', $t1)");
	my ($t2, $state) = bg_finish($w);
	is($state, '00000', "$what: the waiter's acquire succeeded");
	cmp_ok($t2, '>', $t1, "$what: the waiter was granted the lease");
	is(unflushed($a), 0, "$what: the waiter's grant flushed the WAL");
	bg_close($w);
	$a->quit;
	my $row = row_of('grant-3');
	restart();
	granted_after_crash($what, 'grant-3', $row);
	is($node->safe_psql('postgres', "SELECT dlock_release('grant-3', $t1)"),
		'f', "$what: the first token holds nothing");
}

# (d) A session that relies on the values of nextval() drawn in a release
# statement sets dlock.async_release = off: a value logged ahead by a call
# in a transaction that rolled back (so its WAL record was not flushed),
# returned by an autocommit statement that also released a lease, is not
# handed out again after a crash.  (With the setting on, the commit does
# not wait and the crash may repeat the value, as for a transaction that
# only called nextval(): docs/guarantees.md.)
{
	my $what = 'nextval() in a release statement, dlock.async_release = off';
	my $b = session();
	$b->query_safe('CREATE SEQUENCE seq_crash');
	$b->query_safe('SET dlock.async_release = off');
	my $t = acquire($b, 'nextval-crash');
	room_on_page($b);
	$b->query_safe("BEGIN; SELECT nextval('seq_crash'); ROLLBACK");
	my ($v, $released) = split /\|/,
	  $b->query_safe("SELECT nextval('seq_crash'), dlock_release('nextval-crash', $t)");
	is($released, 't', "$what: released, and got value $v");
	$b->quit;
	restart();
	cmp_ok($node->safe_psql('postgres', "SELECT nextval('seq_crash')"),
		'>', $v, "$what: after the crash, the sequence does not repeat $v");
}

# The immediate stops end every process with SIGQUIT; nothing else may
# have failed.
my @bad = grep { /TRAP:|PANIC:|terminated by signal (?:4|6|7|8|11)\b/ }
  split /\n/, slurp_file($node->logfile);
is(scalar(@bad), 0, 'no failed assertion, PANIC or crash in the server log')
  or diag(join("\n", @bad));

$node->stop;
done_testing();
