#!/usr/bin/perl
#
# test/t/005_wait.pl
#	  Event-driven waiting (docs/sql-reference.md, "Waiting"; src/wait.c's
#	  header):
#	  FIFO queues, cancellation and termination leave no trace, restart,
#	  no CPU while waiting, and the polling fallback without preload.
#
# Node "dlock_wait" has shared_preload_libraries = 'dlock'.  Every waiter is
# a background psql session whose backend pid is known; a waiter counts as
# queued once pg_stat_activity shows it in dlock's wait event (wait.c
# sleeps on its latch only after joining the queue): wait_event_type
# 'Extension' and wait_event 'DlockLeaseWait' from PostgreSQL 17 on,
# 'Extension' before (dlock_wait_event in DlockTest.pm).  So every step
# below also checks the wait event's name, and step 1 checks it alone.  Waiters are started one at a time, each only once the
# one before it is seen waiting, so their arrival order is known.
#
#   1. FIFO: ten waiters queue on one held name (wait '60 s').  The holder
#      releases; each waiter, once granted, records its token in a table
#      and releases in turn.  Tokens are issued at the grant, and the lease
#      is exclusive, so token order is grant order: the tokens must be
#      strictly increasing in arrival order.
#   2. statement_timeout: a waiter alone in the queue ('300ms') fails with
#      57014 and leaves nobody waiting; a waiter queued after it is served
#      at the next release.  Then a waiter at the head of a queue times out
#      while another waits behind it: the one behind is served at the next
#      release.  A slot left behind by a timed-out waiter would head the
#      queue for ever (it has the lowest ticket), so the waiter behind it
#      would never attempt and would return NULL at its deadline.
#   3. pg_terminate_backend of the middle waiter of three: it disappears,
#      the other two are served in order, and a later waiter is served.
#   4. Restart (pg_ctl's default fast mode) with two waiters queued: their
#      sessions are terminated; the held lease survives with its token;
#      new waiters queue and are served FIFO at its release.
#   5. CPU: ten waiters that wait 2 s on a held name use less than 0.2 s
#      of CPU between them (utime + stime from /proc/<pid>/stat).  A sanity
#      bound against busy loops, not a benchmark.
#   6. A waiter whose attempt raced with another session's acquire keeps
#      no row lock on the lease row: the holder's release does not wait for
#      it, and it is served at the release.  The interleaving is forced
#      with a table lock queued between them.  store.c runs each attempt
#      in a subtransaction that a failed attempt rolls back, which releases
#      that lock (see the comment of that part).
#   7. Node "dlock_nopreload" has no preload: waiting polls.  A waiter with
#      wait '10 s' gets a token after the holder releases and shows the
#      same wait event while it sleeps; a waiter with wait
#      '300 ms' on a held lease returns NULL.
#   8. A waiter behind the head whose wait (30 days) is longer than one
#      WaitLatch sleep can last is cancelled (57014); the head is served.
#
# Every wait is bounded: poll_query_until gives up after
# $PostgreSQL::Test::Utils::timeout_default seconds, and each background
# session has the same timeout, so a broken build fails instead of hanging.
# No duration is asserted.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;
use POSIX ();

# A waiter blocking a release shows in the log, with its pid.
my $node = dlock_node(
	'dlock_wait',
	preload => 1,
	conf => "log_lock_waits = on\n",
	setup => 'CREATE EXTENSION dlock');
is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'dlock', 'dlock is preloaded');

# Background sessions: bg_session, bg_start, bg_finish, bg_close
# (DlockTest.pm).

# waiting_sql is a query counting the backends among @pids that wait in
# dlock (all of them when @pids is empty).
my $wait_event = dlock_wait_event($node);

sub waiting_sql
{
	my @pids = @_;
	my $sql = qq{SELECT count(*) FROM pg_stat_activity
 WHERE wait_event_type = 'Extension' AND wait_event = '$wait_event'};
	$sql .= ' AND pid IN (' . join(', ', @pids) . ')' if @pids;
	return $sql;
}

# wait_for_waiters polls $n until exactly $count of the backends @pids
# (of all backends when @pids is empty) wait in dlock.
sub wait_for_waiters
{
	my ($n, $count, $what, @pids) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	ok($n->poll_query_until('postgres', waiting_sql(@pids), $count), $what);
	return;
}

# acquire takes the lease $name on $n for $ttl without waiting and returns
# its token.
sub acquire
{
	my ($n, $name, $ttl) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $token =
	  $n->safe_psql('postgres', "SELECT dlock_acquire('$name', '$ttl')");
	like($token, qr/^[0-9]+$/, "acquired $name (token $token)");
	return $token;
}

# release ends the lease ($name, $token) on $n and checks it was live.
sub release
{
	my ($n, $name, $token) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	is($n->safe_psql('postgres', "SELECT dlock_release('$name', $token)"),
		't', "released $name (token $token)");
	return;
}

# queue_waiters starts, on the sessions @s in order, the statements
# $make_sql->($session), each once the one before it is seen waiting.
sub queue_waiters
{
	my ($n, $what, $make_sql, @s) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	for my $s (@s)
	{
		bg_start($s, $make_sql->($s));
		wait_for_waiters($n, 1, "$what: $s->{name} is waiting", $s->{pid});
	}
	return;
}

# take_and_release returns a function giving the statements of a waiter
# (session) that takes lease $name with wait '60 s', records its token in
# table grants under its session's name, and releases the lease.
sub take_and_release
{
	my ($name) = @_;
	return sub {
		my ($s) = @_;
		return qq{INSERT INTO grants (lock_name, waiter, token)
  SELECT '$name', '$s->{name}', dlock_acquire('$name', '1 min', '60 s')
  RETURNING token;
SELECT dlock_release(lock_name, token) FROM grants
 WHERE lock_name = '$name' AND waiter = '$s->{name}' AND token IS NOT NULL;};
	};
}

# check_served collects the waiters @s started with take_and_release
# and checks each got a token, released it, and that the tokens are
# strictly increasing in the order of @s and greater than $after.
# Returns the tokens.
sub check_served
{
	my ($what, $after, @s) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my @tokens;
	for my $i (0 .. $#s)
	{
		my ($out, $state) = bg_finish($s[$i]);
		my $ok = like(
			$out,
			qr/\A[0-9]+\nt\z/,
			"$what: waiter " . ($i + 1) . ' got a token and released it');
		is($state, '00000', "$what: waiter " . ($i + 1) . ' raised nothing');
		push @tokens, ($ok && $out =~ /\A([0-9]+)/ ? $1 : -1);
	}
	my $prev = $after;
	my $increasing = 1;
	for my $t (@tokens)
	{
		$increasing = 0 unless $t > $prev;
		$prev = $t;
	}
	ok($increasing,
		"$what: tokens increase in arrival order (after $after: @tokens)");
	return @tokens;
}

$node->safe_psql('postgres',
	'CREATE TABLE grants (lock_name text, waiter text, token bigint)');

# 1. FIFO: ten waiters, served in arrival order.
{
	my @w = map { bg_session($node, "fifo$_") } 1 .. 10;
	my $held = acquire($node, 'fifo', '10 min');

	queue_waiters($node, 'fifo', take_and_release('fifo'), @w);
	wait_for_waiters($node, 10, 'fifo: all ten are waiting at once',
		map { $_->{pid} } @w);
	is( $node->safe_psql(
			'postgres',
			"SELECT DISTINCT wait_event_type || '/' || wait_event FROM pg_stat_activity WHERE pid = $w[0]->{pid}"
		),
		"Extension/$wait_event",
		'fifo: a waiter shows wait event Extension/' . $wait_event
		  . ' (PostgreSQL ' . $node->pg_version->major . ')');
	is( $node->safe_psql(
			'postgres', "SELECT token FROM dlock_leases WHERE lock_name = 'fifo'"),
		$held,
		'fifo: the holder still holds the lease');

	release($node, 'fifo', $held);
	my @tokens = check_served('fifo', $held, @w);

	is( $node->safe_psql(
			'postgres',
			"SELECT string_agg(token::text, ' ' ORDER BY substr(waiter, 5)::int) FROM grants WHERE lock_name = 'fifo'"
		),
		"@tokens",
		'fifo: table grants has the ten tokens by waiter');
	is( $node->safe_psql(
			'postgres',
			"SELECT token, released, live FROM dlock_leases WHERE lock_name = 'fifo'"
		),
		"$tokens[-1]|t|f",
		'fifo: the last waiter released the lease');
	wait_for_waiters($node, 0, 'fifo: nobody waits any more');
	bg_close($_) for @w;
}

# 2. statement_timeout.
{
	my $held = acquire($node, 'st', '10 min');

	# A waiter alone in the queue times out.
	my ($stdout, $stderr) = psql_error($node,
		"SET statement_timeout = '300ms';\nSELECT dlock_acquire('st', '1 min', '60 s')"
	);
	is($stdout, 'true 57014', 'statement_timeout: the waiter fails with 57014');
	like(
		$stderr,
		qr/ERROR:  57014: canceling statement due to statement timeout/,
		'statement_timeout: the error is the statement timeout');
	wait_for_waiters($node, 0,
		'statement_timeout: nobody waits after the timeout');

	# A waiter that comes afterwards is served at the release.
	my $after = bg_session($node, 'st-after');
	bg_start($after, take_and_release('st')->($after));
	wait_for_waiters($node, 1, 'statement_timeout: the next waiter waits',
		$after->{pid});
	release($node, 'st', $held);
	check_served('statement_timeout: next waiter', $held, $after);
	wait_for_waiters($node, 0,
		'statement_timeout: nobody waits after the next waiter');

	# The head of a queue times out with a waiter behind it.  Its timeout
	# leaves time to queue the second waiter behind it (the check that both
	# wait at once fails otherwise).
	$held = acquire($node, 'st', '10 min');
	my $head = bg_session($node, 'st-head');
	my $behind = bg_session($node, 'st-behind');
	$head->{bg}->query_safe("SET statement_timeout = '3s'");
	bg_start($head, "SELECT dlock_acquire('st', '1 min', '60 s');");
	wait_for_waiters($node, 1, 'statement_timeout: the head waits',
		$head->{pid});
	bg_start($behind, take_and_release('st')->($behind));
	wait_for_waiters(
		$node, 2,
		'statement_timeout: a second waiter waits behind the head',
		$head->{pid}, $behind->{pid});
	my ($out, $state) = bg_finish($head);
	is($state, '57014', 'statement_timeout: the head fails with 57014');
	is($out, '', 'statement_timeout: the head returned nothing');
	wait_for_waiters($node, 1,
		'statement_timeout: the waiter behind still waits',
		$behind->{pid});
	release($node, 'st', $held);
	check_served('statement_timeout: waiter behind the timed-out head',
		$held, $behind);
	wait_for_waiters($node, 0, 'statement_timeout: nobody waits at the end');
	bg_close($_) for ($after, $head, $behind);
}

# 3. pg_terminate_backend of the middle waiter of three.
{
	my $held = acquire($node, 'term', '10 min');
	my @w = map { bg_session($node, "term$_") } 1 .. 3;
	queue_waiters($node, 'terminate', take_and_release('term'), @w);

	is( $node->safe_psql(
			'postgres', "SELECT pg_terminate_backend($w[1]{pid})"),
		't',
		'terminate: terminated the middle waiter');
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE pid = $w[1]{pid}",
			'0'),
		'terminate: its backend is gone');
	ok( $node->log_contains(
			qr/\[$w[1]{pid}\] \S* ?FATAL:  terminating connection due to administrator command/
		),
		'terminate: it ended with the termination error');
	wait_for_waiters($node, 2, 'terminate: the two others still wait',
		$w[0]{pid}, $w[2]{pid});

	release($node, 'term', $held);
	my @tokens = check_served('terminate: first and third waiter',
		$held, $w[0], $w[2]);

	# A later waiter is served normally.
	$held = acquire($node, 'term', '10 min');
	cmp_ok($held, '>', $tokens[-1], 'terminate: a new holder');
	my $later = bg_session($node, 'term-later');
	bg_start($later, take_and_release('term')->($later));
	wait_for_waiters($node, 1, 'terminate: a later waiter waits',
		$later->{pid});
	release($node, 'term', $held);
	check_served('terminate: later waiter', $held, $later);
	wait_for_waiters($node, 0, 'terminate: nobody waits at the end');
	bg_close($_) for (@w, $later);
}

# 4. Restart with waiters queued.
{
	my $held = acquire($node, 'restart', '10 min');
	my @w = map { bg_session($node, "restart$_") } 1 .. 2;
	queue_waiters($node, 'restart', take_and_release('restart'), @w);

	# pg_ctl restart shuts down in fast mode: backends are terminated.
	$node->restart;
	for my $s (@w)
	{
		ok( $node->log_contains(
				qr/\[$s->{pid}\] \S* ?FATAL:  terminating connection due to administrator command/
			),
			"restart: waiter $s->{name} (pid $s->{pid}) was terminated");
		bg_close($s);
	}
	wait_for_waiters($node, 0, 'restart: nobody waits after the restart');
	is( $node->safe_psql(
			'postgres',
			"SELECT count(*) FROM grants WHERE lock_name = 'restart'"),
		'0',
		'restart: no waiter was granted the lease');
	is( $node->safe_psql(
			'postgres',
			"SELECT token, released, live FROM dlock_leases WHERE lock_name = 'restart'"
		),
		"$held|f|t",
		'restart: the held lease survived with its token');
	is( $node->safe_psql(
			'postgres', "SELECT dlock_acquire('restart', '1 min') IS NULL"),
		't',
		'restart: the held lease still refuses others');

	# New waiters are served FIFO at the release.
	my @v = map { bg_session($node, "restart-new$_") } 1 .. 3;
	queue_waiters($node, 'restart: new', take_and_release('restart'),
		@v);
	release($node, 'restart', $held);
	check_served('restart: new waiters', $held, @v);

	# A plain acquire, wait and release after the restart.
	my $tok = acquire($node, 'restart-plain', '1 min');
	is( $node->safe_psql(
			'postgres',
			"SELECT dlock_acquire('restart-plain', '1 min', '200 ms') IS NULL"),
		't',
		'restart: a waiter on a held lease runs out of wait');
	release($node, 'restart-plain', $tok);
	like(
		$node->safe_psql(
			'postgres', "SELECT dlock_acquire('restart-plain', '1 min', '1 s')"),
		qr/^[0-9]+$/,
		'restart: a waiter on a free lease gets a token');
	wait_for_waiters($node, 0, 'restart: nobody waits at the end');
	bg_close($_) for @v;
}

# 5. Waiting uses no CPU.
{
	my $held = acquire($node, 'cpu', '10 min');
	my @w = map { bg_session($node, "cpu$_") } 1 .. 10;

	# Warm up each backend (catalog caches, dlock's saved plans), so that
	# the measure covers the wait itself.
	for my $s (@w)
	{
		is($s->{bg}->query_safe("SELECT dlock_acquire('cpu', '1 min') IS NULL"),
			't', "cpu: $s->{name} finds the lease held");
	}

	# cpu_ticks returns the user + system CPU time of process $pid, in
	# clock ticks (fields 14 and 15 of /proc/<pid>/stat; the command name
	# in field 2 may contain spaces, so count after its closing paren).
	my $cpu_ticks = sub {
		my ($pid) = @_;
		my $stat = slurp_file("/proc/$pid/stat");
		$stat =~ s/\A.*\)\s+//s;
		my @f = split ' ', $stat;
		return $f[11] + $f[12];
	};

	my %before = map { $_->{pid} => $cpu_ticks->($_->{pid}) } @w;
	bg_start($_, "SELECT dlock_acquire('cpu', '1 min', '2 s');") for @w;
	wait_for_waiters($node, 10, 'cpu: all ten are waiting at once',
		map { $_->{pid} } @w);
	for my $s (@w)
	{
		my ($out, $state) = bg_finish($s);
		is("$out $state", ' 00000',
			"cpu: $s->{name} ran out of wait and returned NULL");
	}
	my $used = 0;
	$used += $cpu_ticks->($_->{pid}) - $before{ $_->{pid} } for @w;
	my $hz = POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100;
	note "cpu: ten waiters used $used ticks ($hz per second) in 2 s";
	cmp_ok($used, '<', 0.2 * $hz,
		'cpu: ten waiters used less than 0.2 s of CPU between them');

	# The measure itself: a backend that runs a busy loop for 300 ms of
	# wall-clock time uses a tick or more.
	my $busy = $cpu_ticks->($w[0]{pid});
	$w[0]{bg}->query_safe(q{
DO $$
DECLARE t timestamptz := clock_timestamp();
BEGIN
  WHILE clock_timestamp() < t + interval '300 ms' LOOP END LOOP;
END $$;});
	$busy = $cpu_ticks->($w[0]{pid}) - $busy;
	note "cpu: a busy loop of 300 ms used $busy ticks";
	cmp_ok($busy, '>', 0, 'cpu: the measure sees a busy backend');

	release($node, 'cpu', $held);
	bg_close($_) for @w;
}

# 6. A waiter's failed attempt keeps no row lock (wait.c: "each attempt
# keeps no lock when it fails"; a waiting acquire holds no row lock that
# blocks others).  The interleaving: the waiter's attempt takes
# its snapshot while another transaction's acquire of the name is still
# open, and locks the row only after that acquire committed.  The
# takeover's FOR UPDATE SKIP LOCKED then finds the row updated, locks its
# newest version (the new, live lease) and rechecks it under READ
# COMMITTED rules; the recheck fails, but PostgreSQL keeps the row lock
# until the waiter's transaction ends, which is the whole wait.  The
# holder's release (an UPDATE of that row) is then blocked until the
# waiter gives up, and the waiter, never woken, returns NULL -- unless the
# failed attempt is rolled back, as store.c's subtransaction does.  To make the
# interleaving certain, a session queues for an EXCLUSIVE lock on the
# lease table behind the open acquire, so the waiter's statement, which
# takes its snapshot before its table lock, waits behind it; the open
# acquire commits, then the EXCLUSIVE lock is granted and released.
# In the free-running queues of parts 1-4 the same race strikes now and
# then, and a hand-over then stalls until the waiter's deadline.
{
	my $held = acquire($node, 'rowlock', '1 min');
	release($node, 'rowlock', $held);
	my $holder = bg_session($node, 'rowlock-holder');
	my $locker = bg_session($node, 'rowlock-locker');
	my $waiter = bg_session($node, 'rowlock-waiter');

	# The waiter's statements are prepared in an earlier transaction, so
	# that its attempt's snapshot comes before its table lock.
	is( $waiter->{bg}->query_safe(
			"SELECT dlock_acquire('rowlock-warm', '1 s') IS NOT NULL"),
		't',
		'row lock: the waiter is warmed up');

	$holder->{bg}->query_safe('BEGIN');
	my $tok = $holder->{bg}
	  ->query_safe("SELECT dlock_acquire('rowlock', '1 min')");
	like($tok, qr/^[0-9]+$/, 'row lock: an open transaction acquires');
	$locker->{bg}->query_safe('BEGIN');
	bg_start($locker, 'LOCK TABLE dlock_lease IN EXCLUSIVE MODE;');
	ok( $node->poll_query_until(
			'postgres',
			"SELECT wait_event_type FROM pg_stat_activity WHERE pid = $locker->{pid}",
			'Lock'),
		'row lock: a table lock request queues behind the open acquire');
	bg_start($waiter, "SELECT dlock_acquire('rowlock', '1 min', '5 s');");
	ok( $node->poll_query_until(
			'postgres',
			"SELECT wait_event_type || ' ' || wait_event FROM pg_stat_activity WHERE pid = $waiter->{pid}",
			'Lock relation'),
		'row lock: the waiter attempts and waits for the table lock');
	$holder->{bg}->query_safe('COMMIT');
	my ($out, $state) = bg_finish($locker);
	is($state, '00000', 'row lock: the table lock is granted');
	$locker->{bg}->query_safe('COMMIT');
	wait_for_waiters($node, 1, 'row lock: the waiter waits in dlock',
		$waiter->{pid});

	# lock_timeout only ends a wait for a lock; a release that waits for
	# nobody never reaches it.
	my ($stdout, $stderr) = psql_error($node,
		"SET lock_timeout = '2s';\nSELECT dlock_release('rowlock', $tok)");
	($out, $state) = bg_finish($waiter);
	is($stdout, "t\nfalse 00000",
		'row lock: the holder releases without waiting for the waiter');
	like($out, qr/\A[0-9]+\z/,
		'row lock: the waiter gets the lease after the release');
	note "row lock: release said: $stdout $stderr";
	bg_close($_) for ($holder, $locker, $waiter);
}

# 8. Waits longer than one sleep can last (WaitLatch takes at most INT_MAX
#    ms, 24.8 days): a waiter queued behind the head with wait '30 days'
#    sleeps towards its deadline in bounded steps.  Cancelling it ends it
#    with 57014, and the head is still served at the release.  (An
#    unbounded sleep fails an assertion in PostgreSQL 15's WaitLatch.)
{
	my $held = acquire($node, 'long', '10 min');
	my @w = map { bg_session($node, "long$_") } 1 .. 2;
	queue_waiters($node, 'long wait',
		sub { "SELECT dlock_acquire('long', '1 min', '30 days') IS NOT NULL;" },
		@w);
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($w[1]->{pid})");
	my ($out, $state) = bg_finish($w[1]);
	is($state, '57014',
		'long wait: the waiter behind the head (30 days) is cancelled');
	release($node, 'long', $held);
	($out, $state) = bg_finish($w[0]);
	is($out, 't', 'long wait: the head (30 days) gets the lease at the release');
	bg_close($_) for @w;
}

# 7. Without preload, waiting polls: the same cluster, restarted without
# dlock in shared_preload_libraries (the last setting in the file wins).
$node->append_conf('postgresql.conf', "shared_preload_libraries = ''\n");
$node->restart;
my $plain = $node;
is($plain->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'', 'no preload: dlock is not preloaded');
{
	my $held = acquire($plain, 'poll', '10 min');
	my $w = bg_session($plain, 'poll');
	bg_start($w, "SELECT dlock_acquire('poll', '1 min', '10 s');");
	wait_for_waiters($plain, 1,
		"no preload: the waiter shows the $wait_event wait event", $w->{pid});
	release($plain, 'poll', $held);
	my ($out, $state) = bg_finish($w);
	like($out, qr/\A[0-9]+\z/,
		'no preload: the waiter got a token after the release');
	is($state, '00000', 'no preload: the waiter raised nothing');
	cmp_ok($out, '>', $held, 'no preload: its token is newer');
	is( $plain->safe_psql(
			'postgres',
			"SELECT dlock_acquire('poll', '1 min', '300 ms') IS NULL"),
		't',
		'no preload: a waiter on a held lease runs out of wait and gets NULL');
	bg_close($w);
}
$plain->stop;

done_testing();
