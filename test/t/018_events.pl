#!/usr/bin/perl
#
# test/t/018_events.pl
#	  Lease events (src/events.c, src/notifier.c; docs/sql-reference.md,
#	  dlock.notify, the notifier and dlock.log_lease_changes): what a real
#	  LISTENing client receives on channel "dlock", from which process,
#	  when, in which order, what the server log says, and that sending
#	  never makes a lease change wait.
#
# The listener is a psql process of its own (IPC::Run, pipes) that ran
# LISTEN dlock and then polls: each round sends an empty query and reads
# what psql prints after it, including the lines
#   Asynchronous notification "dlock" with payload "..." received from
#   server process with PID N.
# whose payloads are parsed with JSON::PP (and checked against the exact
# form {"event": ..., "lock_name": ..., "token": N, "previous_token": N|null}).
#
# Every event must come from the database's notifier: its sender pid is
# the pid dlock_notifier shows for the database (read after the events
# arrived; events_are checks it for each).
#
# Absence is proved without sleeping: after the step under test, collect()
# waits until the notifier has taken every record queued so far
# (dlock_notifier.events_queued = 0; it takes them only after its own
# commit, or drops those of transactions that did not commit), then
# another session commits NOTIFY dlock, 'sentinel K'.  Notifications
# reach a listener in commit order, so once the listener has read the
# sentinel it has read every event the notifier sent for changes
# committed before it; what the step sent is exactly what came before the
# sentinel.
#
# Node "dlock_events": dlock preloaded, max_prepared_transactions = 5,
#   streaming allowed (so that commits can wait for a synchronous standby),
#   dlock.notifier_idle_timeout = 1h (notifiers stay while idle, until 14).
# Database ev (UTF8): ALTER DATABASE ev SET dlock.notify = on (superuser).
#   1. Before that setting, nothing is sent (the default is off).
#   2. One event per change: acquire of a new name (previous_token null),
#      acquire after release and after a break (previous_token: the old
#      token), takeover of an expired lease (taken_over), release,
#      dlock_break (broken), dlock_purge (one purged per deleted row, the
#      names and tokens of the rows), dlock_acquire_all of 3 names (3
#      events, the returned tokens), dlock_acquire_any, dlock_release_each.
#   3. Transactions: nothing while the writer's transaction is open, the
#      event right after its COMMIT, from the notifier, not the writer's
#      backend (the delay from COMMIT returning to receipt is printed,
#      never asserted);
#      ROLLBACK sends nothing; ROLLBACK TO SAVEPOINT drops only that
#      savepoint's events (nested savepoints, RELEASE SAVEPOINT, a PL/pgSQL
#      exception block); a refused dlock_acquire_all (one member held, with
#      and without wait) and a refused dlock_acquire send nothing.
#   4. Lock names with quotes, backslashes, newlines, tabs, control
#      characters and non-ASCII characters round-trip exactly through the
#      JSON (compared with the names as Perl strings and with the UTF-8
#      bytes of the rows).
#   5. Renewals (dlock_renew, dlock_renew_each) send nothing; with
#      dlock.notify set off in a session nothing is sent; an ordinary role
#      cannot SET dlock.notify (42501), nor ALTER ROLE ... SET it.
# Database ev2 (no database setting): ALTER ROLE evrole SET dlock.notify =
#   on: evrole's changes are sent, the superuser's are not.
#   6. PREPARE TRANSACTION with a lease change succeeds; neither it nor
#      COMMIT PREPARED sends anything; with dlock.log_lease_changes = all
#      the log line ends with "(in a prepared transaction)".
#   7. dlock.log_lease_changes (set per session by the superuser), read
#      from the server log: off: no dlock line; takeovers: a line for a
#      takeover (name, new token; detail: old token, old owner label (given,
#      or the session's default), its expiry) and one for a break (by role,
#      detail: token, owner, expiry), none for a
#      plain acquire or release; all: lines for acquired (new name, after
#      a token), released and purged too.
#   8. Order: four pgbench clients acquire and release three names, each
#      call its own transaction; every name's events alternate acquired
#      and released, with the released token that of the acquire before,
#      the acquire's previous_token that of the release before, tokens
#      growing, and the last one the lease's; nothing dropped.
#   9. Never waiting: with synchronous_standby_names naming a standby that
#      does not exist, a session commits NOTIFY and waits for it while
#      holding PostgreSQL's notification lock; the notifier waits behind
#      it (wait event Lock/object, its event queued), but a writer with
#      synchronous_commit = local acquires and releases (their commits
#      would queue behind that lock if they sent the NOTIFY themselves).
#      Once the waiting session is cancelled and the setting reset, the
#      events arrive, in order.
#  10. Database commands: in database evd with a running notifier, CREATE
#      DATABASE ... TEMPLATE evd, ALTER DATABASE evd SET TABLESPACE,
#      ALTER DATABASE evd RENAME and DROP DATABASE succeed (each stops
#      the notifier first); after the first three a lease change starts a
#      new notifier and its event arrives; after the DROP the view has no
#      row for it.  A DROP DATABASE that fails because a listener is
#      connected (after 5 s) stopped the notifier: the listener received
#      its notifier_exit event, from its pid, and the next event comes
#      from a new notifier.  Stop marks (one per backend): while a session
#      holds pg_database in SHARE mode, so that the DROP DATABASE of a
#      database waits after dlock stopped its notifier, (a) another
#      command on that database that then fails (lock_timeout) does not
#      clear the DROP's mark, and (b) a database that had no notifier slot
#      yet is covered too: a lease change there, by a session connected
#      before, starts no notifier, and once the lock is released the DROP
#      succeeds (a notifier started meanwhile would be connected and make
#      it fail).  Commands that PostgreSQL refuses do not stop the
#      notifier (062_hostile_events.pl).
#  11. Restart: the notifier terminated by a superuser is started again by
#      the next lease change with an event, with a new pid that the view
#      shows and the event comes from.
#  12. A full queue: a transaction whose events do not fit in the queue
#      (dlock.notify_queue_size, 256 kB) sends one "overflow" event with
#      the number of its changes instead, with a WARNING, and the view
#      counts them as dropped.
#  14. Idle exit (the node runs with dlock.notifier_idle_timeout = 1h, so
#      that notifiers stay through 1-12): lowered to 300ms, the idle
#      notifier of ev exits, and its last notification is notifier_exit,
#      from its pid, while the view shows no pid; a lease change starts a
#      notifier with a new pid, which sends the event and, after 300 ms
#      with nothing to send, its notifier_exit event (events_sent counts
#      the lease event only); with the timeout back at 1h, the next event
#      comes from yet another notifier, which stays.
# Node "dlock_events_small": max_worker_processes = 2 (the logical
#   replication launcher takes one), dlock.notify_queue_size = 64kB,
#   dlock.notifier_idle_timeout = 1h until 13 lowers it.
#  13. The first database's notifier takes the last worker slot; a
#      second database's lease change warns that no background worker
#      slot is free and sends nothing, and the view counts its event as
#      dropped.  Once the first notifier has exited idle (the timeout
#      lowered to 100ms), the second database's lease change starts its
#      notifier without a warning, and its event is sent.
# Without preload (sql/monitoring.sql): dlock.notify sends nothing, with
# one WARNING per session, and dlock_notifier has no rows.
#
# Every wait is bounded ($PostgreSQL::Test::Utils::timeout_default).
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;
use IPC::Run ();
use JSON::PP ();
use Time::HiRes ();

my $timeout = $PostgreSQL::Test::Utils::timeout_default;

my $node = dlock_node(
	'dlock_events',
	# max_wal_senders > 0: commits can wait for a standby (9.)
	init => { allows_streaming => 1 },
	preload => 1,
	conf => q{
max_prepared_transactions = 5
dlock.notifier_idle_timeout = '1h'
});
$node->safe_psql(
	'postgres', q{
CREATE DATABASE ev ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
CREATE DATABASE ev2 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
CREATE ROLE evapp LOGIN;
CREATE ROLE evrole LOGIN;
CREATE ROLE evops LOGIN;
});
for my $db (qw(ev ev2))
{
	$node->safe_psql(
		$db, q{
CREATE EXTENSION dlock;
GRANT EXECUTE ON FUNCTION dlock_break(text) TO evops;
});
}

# ---------------------------------------------------------------------
# The listener
# ---------------------------------------------------------------------

my $json = JSON::PP->new->utf8;

# The exact form of a payload (src/events.c, event_payload).
my $payload_form = qr/\A(?:\{"event": "(?:acquired|taken_over|released|broken|purged)", "lock_name": ".*", "token": [1-9][0-9]*, "previous_token": (?:[1-9][0-9]*|null)\}|\{"event": "overflow", "lock_name": null, "token": null, "previous_token": null, "count": [1-9][0-9]*\}|\{"event": "notifier_exit", "lock_name": null, "token": null, "previous_token": null\})\z/s;

# The payload of a notifier's last notification (src/events.c).
my $exit_payload = '{"event": "notifier_exit", "lock_name": null, "token": null, "previous_token": null}';

# listener_start($db, $name) starts a psql process on database $db that
# runs LISTEN dlock, and returns it (a hash: run, in, out, err, timer,
# pid, db, name, pending).
sub listener_start
{
	my ($db, $name) = @_;
	my $l = {
		in => '',
		out => '',
		err => '',
		db => $db,
		name => $name,
		seq => 0,
		pending => [],
	};
	$l->{timer} = IPC::Run::timer($timeout);
	local $ENV{PGCLIENTENCODING} = 'UTF8';
	$l->{run} = IPC::Run::start(
		[ $node->installed_command('psql'), '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr($db) ],
		'<' => \$l->{in},
		'>' => \$l->{out},
		'2>' => \$l->{err},
		$l->{timer});
	my ($out) = listener_command($l, "LISTEN dlock;\nSELECT pg_backend_pid();");
	$out =~ /\A([0-9]+)\n\z/ or die "listener $name: no pid in: $out";
	$l->{pid} = $1;
	return $l;
}

# listener_command($l, $sql) sends $sql to listener $l, waits until psql
# has run it, and returns its output, with the notification lines psql
# printed taken out and returned as a second value (a list of hashes:
# payload, pid).
sub listener_command
{
	my ($l, $sql) = @_;
	my $tag = "$l->{name} round " . ++$l->{seq};
	$l->{timer}->start($timeout);
	$l->{in} .= "$sql\n\\echo '$tag'\n";
	$l->{run}->pump
	  until $l->{out} =~ /^\Q$tag\E\n/m
	  || $l->{timer}->is_expired
	  || !$l->{run}->pumpable;
	$l->{out} =~ s/\A(.*?)^\Q$tag\E\n//ms
	  or die "listener $l->{name}: no answer to $sql\nstdout: $l->{out}\nstderr: $l->{err}";
	my $out = $1;
	die "listener $l->{name}: psql wrote to stderr: $l->{err}" if $l->{err} ne '';
	my @notes;
	while ($out =~
		s/^Asynchronous notification "([^"\n]*)" with payload "(.*)" received from server process with PID ([0-9]+)\.\n//m
	  )
	{
		die "listener $l->{name}: a notification on channel $1" if $1 ne 'dlock';
		push @notes, { payload => $2, pid => $3 };
	}
	return ($out, \@notes);
}

# listener_poll($l) runs one round on listener $l and returns the
# notifications it read (after those left over by collect()).
sub listener_poll
{
	my ($l) = @_;
	my ($out, $notes) = listener_command($l, 'SELECT 1 WHERE false;');
	die "listener $l->{name}: unexpected output: $out" if $out ne '';
	my @notes = (@{ $l->{pending} }, @$notes);
	$l->{pending} = [];
	return @notes;
}

# notifier_pid($db) returns the pid dlock_notifier shows for database $db
# ('' when it has none).
sub notifier_pid
{
	my ($db) = @_;
	return $node->safe_psql($db,
		'SELECT pid FROM dlock_notifier WHERE datname = current_database()');
}

# drained($db) waits until the notifier of $db has taken every record
# queued so far (events_queued = 0, or no row: nothing was ever queued).
sub drained
{
	my ($db) = @_;
	$node->poll_query_until($db,
		'SELECT coalesce((SELECT events_queued = 0 FROM dlock_notifier WHERE datname = current_database()), true)'
	) or die "the notifier of $db did not take its queued events";
	return;
}

# decode($n) adds to notification $n its decoded payload (json) and
# whether the payload has the exact documented form (form_ok).
sub decode
{
	my ($n) = @_;
	$n->{form_ok} = $n->{payload} =~ $payload_form ? 1 : 0;
	$n->{json} = eval { $json->decode($n->{payload}) };
	$n->{json} = { undecodable => $n->{payload} } unless defined $n->{json};
	return $n;
}

my $sentinel = 0;

# collect($l) waits until the notifier of $l's database has taken what
# was queued, commits NOTIFY dlock, 'sentinel K' from a new session of that
# database, reads until $l has received it, and returns the events
# received before it (decoded; see the file header), each with from_pid,
# the pid dlock_notifier shows then.
sub collect
{
	my ($l) = @_;
	my $k = ++$sentinel;
	drained($l->{db});
	$node->safe_psql($l->{db}, "SELECT pg_notify('dlock', 'sentinel $k')");
	my @events;
	my $start = time;
	while (time - $start < $timeout)
	{
		my @notes = listener_poll($l);
		while (my $n = shift @notes)
		{
			if ($n->{payload} eq "sentinel $k")
			{
				$l->{pending} = \@notes;
				my $pid = notifier_pid($l->{db});
				$_->{from_pid} = $pid for @events;
				return @events;
			}
			die "listener $l->{name}: an old sentinel: $n->{payload}"
			  if $n->{payload} =~ /^sentinel /;
			push @events, decode($n);
		}
		Time::HiRes::sleep(0.01);
	}
	die "listener $l->{name}: sentinel $k not received in $timeout s";
}

# ev($event, $name, $token, $previous) is an expected event.
sub ev
{
	my ($event, $name, $token, $previous) = @_;
	return {
		event => $event,
		lock_name => $name,
		token => $token,
		previous_token => $previous
	};
}

# events_are($got, [ev(...), ...], $what, sorted => 1) checks the events
# $got (from collect) are exactly those expected, in order (or, with
# sorted, in any order), each in the documented form.
sub events_are
{
	my ($got, $expected, $what, %opt) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my @got = map { $_->{json} } @$got;
	my @exp = @$expected;
	if ($opt{sorted})
	{
		my $key = sub { join("\0", map { $_ // '' } @{ $_[0] }{qw(lock_name event token)}) };
		@got = sort { $key->($a) cmp $key->($b) } @got;
		@exp = sort { $key->($a) cmp $key->($b) } @exp;
	}
	is_deeply(\@got, \@exp, $what)
	  or diag('payloads: ' . join("\n", map { $_->{payload} } @$got));
	my @bad = grep { !$_->{form_ok} } @$got;
	is(scalar(@bad), 0, "$what: every payload has the documented form")
	  or diag('payloads: ' . join("\n", map { $_->{payload} } @bad));
	my @foreign = grep { !defined $_->{from_pid} || $_->{pid} ne $_->{from_pid} } @$got;
	is(scalar(@foreign), 0,
		"$what: every event comes from the pid dlock_notifier shows for the database")
	  or diag(join("\n", map { "pid $_->{pid} (notifier: " . ($_->{from_pid} // '?') . "): $_->{payload}" } @foreign));
	return;
}

# nothing_sent($l, $what) checks that nothing reached $l since the last
# collect.
sub nothing_sent
{
	my ($l, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my @got = collect($l);
	is(scalar(@got), 0, "$what: nothing sent")
	  or diag('payloads: ' . join("\n", map { $_->{payload} } @got));
	return;
}

# one($db, $sql) runs $sql on $db in a new session and returns its output.
sub one
{
	my ($db, $sql) = @_;
	return $node->safe_psql($db, $sql);
}

# acquire($db, $name, $ttl, $owner) takes $name on $db and returns the token.
sub acquire
{
	my ($db, $name, $ttl, $owner) = @_;
	my $o = defined $owner ? ", '0', '$owner'" : '';
	my $t = one($db, "SELECT dlock_acquire('$name', '$ttl'$o)");
	die "acquire $name: no token ($t)" unless $t =~ /^[0-9]+$/;
	return $t;
}

# expire($db, $name) waits until the lease on $name has expired.
sub expire
{
	my ($db, $name) = @_;
	wait_for_expiry($node, $name, $db)
	  or die "lease $name did not expire";
	return;
}

# notifier_gone($db) is a query that is true once the database $db has
# no notifier: none shown in the view, and no notifier process connected
# to it (one that has left the view may still be committing its exit
# event).
sub notifier_gone
{
	my ($db) = @_;
	return "SELECT coalesce((SELECT pid IS NULL FROM dlock_notifier WHERE datname = '$db'), true)"
	  . " AND NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type = 'dlock notifier' AND datname = '$db')";
}

# set_idle_timeout($node, $value) sets dlock.notifier_idle_timeout on
# $node and waits until new sessions see it.
sub set_idle_timeout
{
	my ($n, $value) = @_;
	$n->safe_psql('postgres', "ALTER SYSTEM SET dlock.notifier_idle_timeout = '$value'");
	$n->reload;
	$n->poll_query_until('postgres',
		"SELECT current_setting('dlock.notifier_idle_timeout') = '$value'")
	  or die "dlock.notifier_idle_timeout not set to $value";
	return;
}

# ---------------------------------------------------------------------
# 1. The default is off.
# ---------------------------------------------------------------------

my $l = listener_start('ev', 'ev');
is(one('ev', 'SHOW dlock.notify'), 'off', 'dlock.notify is off by default');
is(one('ev', 'SHOW dlock.notify_queue_size'), '256kB', 'dlock.notify_queue_size is 256kB by default');
{
	my $t = acquire('ev', 'off1', '10 min');
	one('ev', "SELECT dlock_release('off1', $t)");
	nothing_sent($l, 'default off: acquire and release');
}

# ---------------------------------------------------------------------
# 2. One event per lease change.
# ---------------------------------------------------------------------

$node->safe_psql('postgres', 'ALTER DATABASE ev SET dlock.notify = on');
is(one('ev', 'SHOW dlock.notify'), 'on', 'ALTER DATABASE ev SET dlock.notify = on');

my %tok;
{
	$tok{a1} = acquire('ev', 'a', '10 min');
	events_are([ collect($l) ], [ ev('acquired', 'a', $tok{a1}, undef) ],
		'acquire of a new name: acquired, previous_token null');

	one('ev', "SELECT dlock_release('a', $tok{a1})");
	events_are([ collect($l) ], [ ev('released', 'a', $tok{a1}, undef) ],
		'release: released with its token');

	$tok{a2} = acquire('ev', 'a', '10 min');
	events_are([ collect($l) ], [ ev('acquired', 'a', $tok{a2}, $tok{a1}) ],
		'acquire after release: acquired, previous_token the released one');

	# a release that fails (old token) changes nothing and sends nothing
	is(one('ev', "SELECT dlock_release('a', $tok{a1})"), 'f', 'release with an old token fails');
	nothing_sent($l, 'failed release');

	$tok{b1} = acquire('ev', 'b', '200 ms', 'owner-b');
	collect($l);
	expire('ev', 'b');
	nothing_sent($l, 'expiry alone');
	$tok{b2} = acquire('ev', 'b', '10 min');
	events_are([ collect($l) ], [ ev('taken_over', 'b', $tok{b2}, $tok{b1}) ],
		'takeover after expiry: taken_over, previous_token the expired one');

	is(one('ev', "SELECT dlock_break('b')"), 't', 'dlock_break(b)');
	events_are([ collect($l) ], [ ev('broken', 'b', $tok{b2}, undef) ],
		'dlock_break: broken with the token it ended');
	is(one('ev', "SELECT dlock_break('b')"), 'f', 'dlock_break(b) again: nothing live');
	nothing_sent($l, 'dlock_break of an ended lease');

	$tok{b3} = acquire('ev', 'b', '10 min');
	events_are([ collect($l) ], [ ev('acquired', 'b', $tok{b3}, $tok{b2}) ],
		'acquire after a break: acquired, previous_token the broken one');

	my $all = one('ev', "SELECT dlock_acquire_all(ARRAY['s3', 's1', 's2'], '10 min')");
	my @all = $all =~ /\A\{([0-9]+),([0-9]+),([0-9]+)\}\z/ or die "acquire_all: $all";
	@tok{qw(s3 s1 s2)} = @all;
	events_are(
		[ collect($l) ],
		[ map { ev('acquired', $_, $tok{$_}, undef) } qw(s1 s2 s3) ],
		'dlock_acquire_all of 3 names: 3 acquired events, the tokens it returned',
		sorted => 1);

	my $any = one('ev', "SELECT lock_name || ' ' || token FROM dlock_acquire_any(ARRAY['s1', 'y1'], '10 min')");
	($any =~ /\Ay1 ([0-9]+)\z/) or die "acquire_any: $any";
	$tok{y1} = $1;
	events_are([ collect($l) ], [ ev('acquired', 'y1', $tok{y1}, undef) ],
		'dlock_acquire_any: one acquired event, the name it got');

	is( one('ev',
			"SELECT dlock_release_each(ARRAY['s1', 's2', 's3', 'y1'], ARRAY[$tok{s1}, $tok{s2}, 0, $tok{y1}])"
		),
		'{t,t,f,t}',
		'dlock_release_each of 4, one with a wrong token');
	events_are(
		[ collect($l) ],
		[ map { ev('released', $_, $tok{$_}, undef) } qw(s1 s2 y1) ],
		'dlock_release_each: one released event per lease it ended',
		sorted => 1);

	# purge: the rows of ended leases, one event each
	my %ended = map { my @f = split /\|/, $_; @f } split /\n/,
	  one('ev', 'SELECT lock_name, token FROM dlock_leases WHERE NOT live');
	ok(scalar(keys %ended) >= 4, 'purge: ' . scalar(keys %ended) . ' ended leases to purge');
	is(one('ev', "SELECT dlock_purge('0')"), scalar(keys %ended), 'dlock_purge deleted them');
	events_are(
		[ collect($l) ],
		[ map { ev('purged', $_, $ended{$_}, undef) } sort keys %ended ],
		'dlock_purge: one purged event per deleted row',
		sorted => 1);
	is(one('ev', "SELECT dlock_purge('0')"), '0', 'a second purge deletes nothing');
	nothing_sent($l, 'purge of nothing');

	# purged names count as new again
	$tok{a3} = acquire('ev', 'off1', '10 min');
	events_are([ collect($l) ], [ ev('acquired', 'off1', $tok{a3}, undef) ],
		'acquire of a purged name: previous_token null');
}

# ---------------------------------------------------------------------
# 3. Transactions.
# ---------------------------------------------------------------------

{
	my $w = bg_session($node, 'writer', 'ev');
	my $bg = $w->{bg};

	# Nothing while the transaction is open; the event right after COMMIT.
	my @delays;
	my %open;
	for my $round (1 .. 5)
	{
		my $name = "open$round";
		$bg->query_safe('BEGIN');
		my $t = $bg->query_safe("SELECT dlock_acquire('$name', '10 min')");
		$open{$name} = $t;
		nothing_sent($l, "open transaction $round: before COMMIT");
		my $t0 = Time::HiRes::time();
		$bg->query_safe('COMMIT');
		my $t1 = Time::HiRes::time();
		my @got;
		my $start = time;
		while (!@got && time - $start < $timeout)
		{
			push @got, map { decode($_) } listener_poll($l);
		}
		my $t2 = Time::HiRes::time();
		$_->{from_pid} = notifier_pid('ev') for @got;
		events_are(\@got, [ ev('acquired', $name, $t, undef) ],
			"open transaction $round: the event arrives after COMMIT");
		isnt($got[0]{pid}, $w->{pid}, "open transaction $round: not sent by the writer's backend")
		  if @got;
		push @delays, sprintf('%.1f', ($t2 - $t1) * 1000);
		note sprintf(
			'round %d: COMMIT took %.1f ms; received %.1f ms after COMMIT returned',
			$round, ($t1 - $t0) * 1000, ($t2 - $t1) * 1000);
	}
	note "delay from COMMIT returning to the listener reading the event (ms): @delays";
	nothing_sent($l, 'after the rounds');

	# ROLLBACK: nothing.
	$bg->query_safe('BEGIN');
	my $rb = $bg->query_safe("SELECT dlock_acquire('rb', '10 min')");
	$bg->query_safe("SELECT dlock_release('open1', $open{open1})");
	$bg->query_safe("SELECT dlock_break('open2')");
	$bg->query_safe('ROLLBACK');
	nothing_sent($l, 'ROLLBACK of an acquire and a break');
	is(one('ev', "SELECT count(*) FROM dlock_leases WHERE lock_name = 'rb'"), '0',
		'ROLLBACK: no row for rb');

	# ROLLBACK TO SAVEPOINT drops that savepoint's events only.
	$bg->query_safe('BEGIN');
	my $k1 = $bg->query_safe("SELECT dlock_acquire('k1', '10 min')");
	$bg->query_safe('SAVEPOINT s1');
	$bg->query_safe("SELECT dlock_acquire('k2', '10 min')");
	$bg->query_safe('SAVEPOINT s2');
	$bg->query_safe("SELECT dlock_acquire('k3', '10 min')");
	$bg->query_safe('RELEASE SAVEPOINT s2');
	$bg->query_safe('ROLLBACK TO SAVEPOINT s1');    # k2 and k3
	my $k4 = $bg->query_safe("SELECT dlock_acquire('k4', '10 min')");
	$bg->query_safe('SAVEPOINT s3');
	my $k5 = $bg->query_safe("SELECT dlock_acquire('k5', '10 min')");
	$bg->query_safe('RELEASE SAVEPOINT s3');    # k5 stays
	$bg->query_safe('SAVEPOINT s4');
	$bg->query_safe("SELECT dlock_release('k1', $k1)");
	$bg->query_safe('ROLLBACK TO SAVEPOINT s4');    # the release of k1
	$bg->query_safe('SAVEPOINT s5');
	my $k6 = $bg->query_safe("SELECT dlock_acquire('k6', '10 min')");
	$bg->query_safe('SAVEPOINT s6');
	$bg->query_safe("SELECT dlock_acquire('k7', '10 min')");
	$bg->query_safe('ROLLBACK TO SAVEPOINT s6');    # k7 only
	$bg->query_safe('RELEASE SAVEPOINT s5');
	nothing_sent($l, 'savepoints: before COMMIT');
	$bg->query_safe('COMMIT');
	events_are(
		[ collect($l) ],
		[
			ev('acquired', 'k1', $k1, undef),
			ev('acquired', 'k4', $k4, undef),
			ev('acquired', 'k5', $k5, undef),
			ev('acquired', 'k6', $k6, undef)
		],
		'savepoints: only the events of what was not rolled back, in order');
	is( one('ev',
			"SELECT string_agg(lock_name, ' ' ORDER BY lock_name) FROM dlock_leases WHERE lock_name LIKE 'k_' AND live"
		),
		'k1 k4 k5 k6',
		'savepoints: the committed leases are those');

	# A PL/pgSQL exception block is a subtransaction too.
	$bg->query_safe(
		q{DO $$
BEGIN
  PERFORM dlock_acquire('x1', '10 min');
  BEGIN
    PERFORM dlock_acquire('x2', '10 min');
    RAISE EXCEPTION 'undo x2';
  EXCEPTION WHEN raise_exception THEN NULL;
  END;
END $$});
	my $x1 = one('ev', "SELECT token FROM dlock_leases WHERE lock_name = 'x1'");
	events_are([ collect($l) ], [ ev('acquired', 'x1', $x1, undef) ],
		'exception block: the event of the block that raised is dropped');

	# Refused calls send nothing.
	my $held = acquire('ev', 'r2', '10 min');
	collect($l);
	is(one('ev', "SELECT dlock_acquire_all(ARRAY['r1', 'r2', 'r3'], '10 min') IS NULL"),
		't', 'dlock_acquire_all refused: r2 is held');
	nothing_sent($l, 'refused dlock_acquire_all');
	is( one('ev',
			"SELECT dlock_acquire_all(ARRAY['r1', 'r2', 'r3'], '10 min', '200 ms') IS NULL"),
		't',
		'dlock_acquire_all refused after waiting');
	nothing_sent($l, 'refused dlock_acquire_all after a wait');
	is(one('ev', "SELECT dlock_acquire('r2', '10 min') IS NULL"), 't',
		'dlock_acquire refused');
	is(one('ev', "SELECT count(*) FROM dlock_acquire_any(ARRAY['r2'], '10 min')"), '0',
		'dlock_acquire_any refused');
	nothing_sent($l, 'refused dlock_acquire and dlock_acquire_any');
	is( one('ev',
			"SELECT count(*) FROM dlock_leases WHERE lock_name IN ('r1', 'r3')"),
		'0',
		'refused: no row for r1 or r3');

	bg_close($w);
}

# ---------------------------------------------------------------------
# 4. Names round-trip through the JSON.
# ---------------------------------------------------------------------

{
	my @names = (
		q{dq"uote},
		q{sq'uote},
		q{back\slash\\\\two\"},
		"new\nline\r\ncr",
		"tab\there",
		"ctl\x01\x1f\x7f",
		"caf\x{e9} \x{20ac} \x{1F512} \x{65e5}\x{672c}",
		'{"event": "fake"}',
		'" received from server process with PID 1.',
		'x' x 200 . '"\\' x 100,
	);
	my %hex;
	for my $i (0 .. $#names)
	{
		my $bytes = $names[$i];
		utf8::encode($bytes);
		$hex{$i} = unpack('H*', $bytes);
	}
	my @sql = map {
		"SELECT dlock_acquire(convert_from('\\x$hex{$_}'::bytea, 'UTF8'), '10 min')"
	} 0 .. $#names;
	my @tokens = split /\n/, one('ev', 'BEGIN; ' . join('; ', @sql) . '; COMMIT');
	is(scalar(@tokens), scalar(@names), 'tricky names: all acquired');
	my @got = collect($l);
	events_are(\@got, [ map { ev('acquired', $names[$_], $tokens[$_], undef) } 0 .. $#names ],
		'tricky names: each lock_name decodes to the exact name');

	# and byte for byte as stored
	my @stored = split /\n/, one(
		'ev', 'SELECT encode(convert_to(lock_name, \'UTF8\'), \'hex\') FROM dlock_leases WHERE token IN ('
		  . join(', ', @tokens) . ') ORDER BY token');
	my @sent = map {
		my $b = $_->{json}{lock_name} // '';
		utf8::encode($b);
		unpack('H*', $b)
	} @got;
	is_deeply(\@sent, \@stored, 'tricky names: the JSON names are the stored names, byte for byte');

	# releases of them too
	one('ev',
		'SELECT dlock_release_each(array_agg(lock_name), array_agg(token)) FROM dlock_leases WHERE token IN ('
		  . join(', ', @tokens) . ')');
	events_are([ collect($l) ], [ map { ev('released', $names[$_], $tokens[$_], undef) } 0 .. $#names ],
		'tricky names: released events', sorted => 1);
}

# ---------------------------------------------------------------------
# 5. Renewals, dlock.notify off, and who may set it.
# ---------------------------------------------------------------------

{
	my $t = acquire('ev', 'rn', '10 min');
	collect($l);
	is(one('ev', "SELECT dlock_renew('rn', $t, '20 min')"), 't', 'renew');
	is(one('ev', "SELECT dlock_renew_each(ARRAY['rn', 'rn'], ARRAY[$t, 0], '20 min')"),
		'{t,f}', 'renew_each');
	nothing_sent($l, 'renewals');

	my $off = one('ev', "SET dlock.notify = off; SELECT dlock_acquire('nf', '10 min')");
	one('ev', "SET dlock.notify = off; SELECT dlock_release('nf', $off); SELECT dlock_break('rn')");
	nothing_sent($l, 'dlock.notify set off in the session');

	# and SET LOCAL in one transaction, on again after it
	one('ev', "BEGIN; SET LOCAL dlock.notify = off; SELECT dlock_acquire('nf', '10 min'); COMMIT");
	nothing_sent($l, 'SET LOCAL dlock.notify = off');

	my %as_app = (extra_params => [ '-U', 'evapp' ]);
	for my $sql ('SET dlock.notify = on', 'SET dlock.notify = off',
		"SELECT set_config('dlock.notify', 'on', false)",
		'ALTER ROLE evapp SET dlock.notify = on')
	{
		my ($out, $err);
		$node->psql(
			'ev', "\\set VERBOSITY verbose\n$sql;\n\\echo SQLSTATE :SQLSTATE",
			stdout => \$out,
			stderr => \$err,
			on_error_stop => 0,
			%as_app);
		like($out, qr/SQLSTATE 42501\z/, "an ordinary role: $sql fails with 42501")
		  or diag("stderr: $err");
	}
	is( one('ev', "SELECT count(*) FROM pg_db_role_setting WHERE setrole = 'evapp'::regrole"),
		'0', 'no setting recorded for evapp');
}

# ---------------------------------------------------------------------
# Role-level setting, in database ev2 (no database setting).
# ---------------------------------------------------------------------

{
	$node->safe_psql('postgres', 'ALTER ROLE evrole SET dlock.notify = on');
	my $l2 = listener_start('ev2', 'ev2');
	my %as_role = (extra_params => [ '-U', 'evrole' ]);
	is($node->safe_psql('ev2', 'SHOW dlock.notify', %as_role), 'on',
		'ALTER ROLE evrole SET dlock.notify = on: on for evrole');
	is($node->safe_psql('ev2', 'SHOW dlock.notify'), 'off', 'off for the superuser in ev2');

	my $t = $node->safe_psql('ev2', "SELECT dlock_acquire('role1', '10 min')", %as_role);
	$node->safe_psql('ev2', "SELECT dlock_release('role1', $t)", %as_role);
	events_are(
		[ collect($l2) ],
		[ ev('acquired', 'role1', $t, undef), ev('released', 'role1', $t, undef) ],
		'role setting: evrole\'s acquire and release are sent');

	my $s = $node->safe_psql('ev2', "SELECT dlock_acquire('role2', '10 min')");
	$node->safe_psql('ev2', "SELECT dlock_release('role2', $s)");
	nothing_sent($l2, 'role setting: the superuser\'s changes in ev2');

	# the events of ev2 go to ev2's listeners only
	nothing_sent($l, 'database ev: nothing from ev2');
	my $t2 = acquire('ev', 'role3', '10 min');
	events_are([ collect($l) ], [ ev('acquired', 'role3', $t2, undef) ], 'ev: its own event');
	nothing_sent($l2, 'database ev2: nothing from ev');
	$node->safe_psql('postgres', 'ALTER ROLE evrole RESET dlock.notify');
	$l2->{in} .= "\\q\n";
	$l2->{run}->finish;
}

# ---------------------------------------------------------------------
# 6. PREPARE TRANSACTION.
# ---------------------------------------------------------------------

{
	my $off = -s $node->logfile;
	my ($state, $out, $err) = sqlstate_of(
		$node, q{SET dlock.log_lease_changes = 'all';
BEGIN;
SELECT dlock_acquire('prep1', '10 min');
PREPARE TRANSACTION 'p1'},
		dbname => 'ev');
	is($state, '00000', 'PREPARE TRANSACTION with a lease change succeeds')
	  or diag("stderr: $err");
	my $t = $out =~ /^([0-9]+)$/m ? $1 : 'none';
	nothing_sent($l, 'PREPARE TRANSACTION');
	like(
		slurp_file($node->logfile, $off),
		qr/LOG:  dlock: lease "prep1" acquired with token \Q$t\E \(a new name\) \(in a prepared transaction\)\n/,
		'PREPARE: the log line says "(in a prepared transaction)"');
	is(one('ev', "SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'p1'"), '1',
		'p1 is prepared');
	one('ev', "COMMIT PREPARED 'p1'");
	nothing_sent($l, 'COMMIT PREPARED');
	is(one('ev', "SELECT token FROM dlock_leases WHERE lock_name = 'prep1' AND live"), $t,
		'the prepared acquire is committed');

	# a prepared release, rolled back
	($state, $out, $err) = sqlstate_of(
		$node, qq{BEGIN;
SELECT dlock_release('prep1', $t);
PREPARE TRANSACTION 'p2'},
		dbname => 'ev');
	is($state, '00000', 'PREPARE TRANSACTION of a release succeeds') or diag("stderr: $err");
	one('ev', "ROLLBACK PREPARED 'p2'");
	nothing_sent($l, 'PREPARE and ROLLBACK PREPARED of a release');
}

# ---------------------------------------------------------------------
# 7. dlock.log_lease_changes.
# ---------------------------------------------------------------------

# dlock_lines($off) returns the dlock lines of the log from $off, each
# LOG line joined with the DETAIL line after it, if any.
sub dlock_lines
{
	my ($off) = @_;
	my @lines = split /\n/, slurp_file($node->logfile, $off);
	my @out;
	for my $i (0 .. $#lines)
	{
		next unless $lines[$i] =~ /LOG:  (dlock: .*)/;
		my $line = $1;
		$line .= " | $1" if $i < $#lines && $lines[ $i + 1 ] =~ /DETAIL:  (.*)/;
		push @out, $line;
	}
	return @out;
}

# with_log($level, $sql) runs $sql on ev as the superuser with
# dlock.log_lease_changes = $level and returns its output.
sub with_log
{
	my ($level, $sql) = @_;
	return one('ev', "SET dlock.log_lease_changes = '$level';\n$sql");
}

is(one('ev', 'SHOW dlock.log_lease_changes'), 'off', 'dlock.log_lease_changes is off by default');

# lease_of($name) returns the token, expiry and owner label of the lease
# on $name (the owner of a call that gave none is the session's default
# label).
sub lease_of
{
	my ($name) = @_;
	return split /\|/,
	  one('ev', "SELECT token, expires_at, owner FROM dlock_leases WHERE lock_name = '$name'");
}

# off: nothing logged, whatever happens
{
	my $off = -s $node->logfile;
	my $t = with_log('off', "SELECT dlock_acquire('lo', '200 ms', '0', 'owner-lo')");
	expire('ev', 'lo');
	my $t2 = with_log('off', "SELECT dlock_acquire('lo', '10 min')");
	with_log('off', "SELECT dlock_break('lo'); SELECT dlock_purge('0')");
	my @lines = dlock_lines($off);
	is(scalar(@lines), 0, 'log_lease_changes off: no dlock line')
	  or diag(join("\n", @lines));
	collect($l);
}

# takeovers
{
	my $off = -s $node->logfile;
	my $t1 = with_log('takeovers', "SELECT dlock_acquire('lt', '200 ms', '0', 'owner \"lt\"')");
	my (undef, $exp1) = lease_of('lt');
	expire('ev', 'lt');
	my $t2 = with_log('takeovers', "SELECT dlock_acquire('lt', '200 ms')");
	my (undef, $exp2, $owner2) = lease_of('lt');
	expire('ev', 'lt');
	my $t3 = with_log('takeovers', "SELECT dlock_acquire('lt', '10 min', '0', 'owner-lt3')");
	my (undef, $exp3) = lease_of('lt');
	with_log('takeovers', "SET ROLE evops; SELECT dlock_break('lt')");
	my $p1 = with_log('takeovers', "SELECT dlock_acquire('lp', '10 min')");
	with_log('takeovers', "SELECT dlock_release('lp', $p1)");
	my $p2 = with_log('takeovers', "SELECT dlock_acquire('lp', '10 min')");
	with_log('takeovers', "SELECT dlock_release('lp', $p2); SELECT dlock_purge('0')");
	my @lines = dlock_lines($off);
	is_deeply(
		\@lines,
		[
			qq{dlock: lease "lt" taken over with token $t2 | Token $t1 of owner "owner "lt"" expired at $exp1 without a release.},
			qq{dlock: lease "lt" taken over with token $t3 | Token $t2 of owner "$owner2" expired at $exp2 without a release.},
			qq{dlock: lease "lt" broken by role "evops" | Token $t3 of owner "owner-lt3" would have expired at $exp3.},
		],
		'log_lease_changes takeovers: two takeovers and a break, nothing for acquire, release or purge'
	) or diag(join("\n", @lines));
	collect($l);
}

# all
{
	my $off = -s $node->logfile;
	my $t1 = with_log('all', "SELECT dlock_acquire('la', '10 min')");
	with_log('all', "SELECT dlock_release('la', $t1)");
	my $t2 = with_log('all', "SELECT dlock_acquire('la', '200 ms', '0', 'owner-la')");
	my (undef, $exp2) = lease_of('la');
	expire('ev', 'la');
	my $t3 = with_log('all', "SELECT dlock_acquire('la', '10 min')");
	my (undef, $exp3, $owner3) = lease_of('la');
	with_log('all', "SELECT dlock_break('la')");
	my %ended = map { my @f = split /\|/, $_; @f } split /\n/,
	  one('ev', 'SELECT lock_name, token FROM dlock_leases WHERE NOT live');
	my $n = with_log('all', "SELECT dlock_purge('0')");
	with_log('all', "BEGIN; SELECT dlock_acquire('lrb', '10 min'); ROLLBACK");
	my @lines = dlock_lines($off);
	my @purged = grep { /purged/ } @lines;
	my @rest = grep { !/purged/ } @lines;
	is_deeply(
		\@rest,
		[
			qq{dlock: lease "la" acquired with token $t1 (a new name)},
			qq{dlock: lease "la" with token $t1 released},
			qq{dlock: lease "la" acquired with token $t2 after token $t1},
			qq{dlock: lease "la" taken over with token $t3 | Token $t2 of owner "owner-la" expired at $exp2 without a release.},
			qq{dlock: lease "la" broken by role "postgres" | Token $t3 of owner "$owner3" would have expired at $exp3.},
		],
		'log_lease_changes all: acquired (new, after a token), released, taken over, broken; nothing rolled back'
	) or diag(join("\n", @lines));
	is_deeply(
		[ sort @purged ],
		[ sort map { qq{dlock: lease row "$_" with token $ended{$_} purged} } keys %ended ],
		"log_lease_changes all: one purged line per deleted row ($n)");
	is($n, scalar(keys %ended), 'the purge deleted every ended row');
	collect($l);
}

# ---------------------------------------------------------------------
# 8. One name's events arrive in the order its changes committed.
# ---------------------------------------------------------------------

{
	my $dropped0 = one('ev', "SELECT events_dropped FROM dlock_notifier WHERE datname = 'ev'");
	collect($l);
	$node->pgbench(
		'-n -c 4 -j 4 -t 150',
		0,
		[qr{number of transactions actually processed: 600/600}],
		[qr{^$}],
		'pgbench: four clients acquire and release three names',
		{
			'018_order.sql' => q{
\set n random(1, 3)
SELECT coalesce(dlock_acquire('order:' || :n, '10 min'), 0) AS tok \gset
\if :tok
SELECT dlock_release('order:' || :n, :tok);
\endif
}
		},
		'ev');
	my @got = collect($l);
	my @foreign = grep { $_->{pid} ne $_->{from_pid} } @got;
	is(scalar(@foreign), 0, 'order: every event comes from the notifier');
	my %seq;
	push @{ $seq{ $_->{json}{lock_name} // '' } }, $_->{json} for @got;
	is_deeply([ sort keys %seq ], [ 'order:1', 'order:2', 'order:3' ],
		'order: events of the three names, and of nothing else');
	for my $name (sort keys %seq)
	{
		my @bad;
		my ($last_released, $last_token) = (0, 0);
		my $expect = 'acquired';
		for my $e (@{ $seq{$name} })
		{
			my $ok;
			if ($expect eq 'acquired')
			{
				$ok = $e->{event} eq 'acquired' && $e->{token} > $last_token
				  && ($e->{previous_token} // 0) == $last_released;
				$last_token = $e->{token};
				$expect = 'released';
			}
			else
			{
				$ok = $e->{event} eq 'released' && $e->{token} == $last_token;
				$last_released = $e->{token};
				$expect = 'acquired';
			}
			push @bad, "$e->{event} $e->{token}" unless $ok;
		}
		is(scalar(@bad), 0,
			"order: $name: " . scalar(@{ $seq{$name} }) . ' events alternate acquired and released, tokens growing, each previous_token the release before')
		  or diag('out of order: ' . join(', ', @bad[ 0 .. ($#bad < 9 ? $#bad : 9) ]));
		is($seq{$name}[-1]{token}, one('ev', "SELECT token FROM dlock_leases WHERE lock_name = '$name'"),
			"order: $name: the last event has the lease's token");
		is($seq{$name}[-1]{event}, 'released', "order: $name: the last event is its last release");
	}
	is(one('ev', "SELECT events_dropped FROM dlock_notifier WHERE datname = 'ev'"), $dropped0,
		'order: nothing dropped');
}

# ---------------------------------------------------------------------
# 9. A lease change never waits for the notifier, nor for PostgreSQL's
#    notification lock.
# ---------------------------------------------------------------------

{
	my $npid = notifier_pid('ev');
	like($npid, qr/\A[0-9]+\z/, 'stall: the notifier of ev runs');
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET synchronous_standby_names = 'nosuch'; SELECT pg_reload_conf()");
	$node->poll_query_until('postgres', "SELECT current_setting('synchronous_standby_names') = 'nosuch'")
	  or die 'synchronous_standby_names not set';

	# a session holding the notification lock while its commit waits for a
	# standby that never answers
	my $x = bg_session($node, 'blocker', 'ev');
	bg_start($x, "BEGIN; CREATE TEMP TABLE blk (i int); NOTIFY evblock; COMMIT;");
	$node->poll_query_until('postgres',
		"SELECT wait_event = 'SyncRep' FROM pg_stat_activity WHERE pid = $x->{pid}")
	  or die 'the blocker does not wait for the standby';

	# the lease changes of a writer that does not wait for standbys
	my $w = bg_session($node, 'writer9', 'ev');
	$w->{bg}->query_safe('SET synchronous_commit = local');
	bg_start($w, q{SELECT dlock_acquire('stall:1', '10 min') AS tok \gset
SELECT dlock_release('stall:1', :tok);
SELECT dlock_acquire('stall:2', '10 min');});
	ok( $node->poll_query_until(
			'postgres', "SELECT state = 'idle' AND query LIKE 'SELECT dlock_acquire(''stall:2''%' FROM pg_stat_activity WHERE pid = $w->{pid}"
		),
		'stall: acquire, release and acquire commit while another session holds the notification lock');
	my ($out, $state) = bg_finish($w);
	is($state, '00000', 'stall: the writer\'s calls succeeded') or diag($out);
	my $t1 = one('ev', "SELECT token FROM dlock_leases WHERE lock_name = 'stall:1'");
	my $t2 = one('ev', "SELECT token FROM dlock_leases WHERE lock_name = 'stall:2'");
	ok( $node->poll_query_until(
			'postgres', "SELECT wait_event_type = 'Lock' AND wait_event = 'object' FROM pg_stat_activity WHERE pid = $npid"
		),
		'stall: the notifier waits for the notification lock');
	cmp_ok(one('ev', "SELECT events_queued FROM dlock_notifier WHERE datname = 'ev'"), '>=', 1,
		'stall: the events wait in the queue');

	# let go: the blocker's wait is cancelled (its commit stands)
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($x->{pid})");
	bg_finish($x);
	$node->safe_psql('postgres',
		"ALTER SYSTEM RESET synchronous_standby_names; SELECT pg_reload_conf()");
	$node->poll_query_until('postgres', "SELECT current_setting('synchronous_standby_names') = ''")
	  or die 'synchronous_standby_names not reset';
	events_are(
		[ collect($l) ],
		[
			ev('acquired', 'stall:1', $t1, undef),
			ev('released', 'stall:1', $t1, undef),
			ev('acquired', 'stall:2', $t2, undef)
		],
		'stall: the events arrive once the lock is free, in order');
	bg_close($w);
	bg_close($x);
}

# ---------------------------------------------------------------------
# 10. Database commands stop the notifier of their database.
# ---------------------------------------------------------------------

{
	$node->safe_psql('postgres', q{
CREATE DATABASE evd ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
SET allow_in_place_tablespaces = on;
CREATE TABLESPACE evtbs LOCATION '';
});
	$node->safe_psql('evd', 'CREATE EXTENSION dlock');
	$node->safe_psql('postgres', 'ALTER DATABASE evd SET dlock.notify = on');

	# start_change($db, $name) starts a listener on $db, acquires $name
	# there and checks its event comes from the notifier; returns the
	# notifier's pid, the listener closed.
	my $start_change = sub {
		my ($db, $name) = @_;
		my $ld = listener_start($db, $db);
		my $t = acquire($db, $name, '10 min');
		events_are([ collect($ld) ], [ ev('acquired', $name, $t, undef) ],
			"$db: the event of $name");
		$ld->{in} .= "\\q\n";
		$ld->{run}->finish;
		return notifier_pid($db);
	};

	my $pid1 = $start_change->('evd', 'd:1');
	like($pid1, qr/\A[0-9]+\z/, 'evd has a notifier');
	my ($state, $out, $err) = sqlstate_of($node, 'CREATE DATABASE evd2 TEMPLATE evd');
	is($state, '00000', 'CREATE DATABASE evd2 TEMPLATE evd succeeds while evd has a notifier')
	  or diag($err);
	is(notifier_pid('evd'), '', 'CREATE DATABASE ... TEMPLATE: the view shows evd\'s notifier stopped');
	my $pid2 = $start_change->('evd', 'd:2');
	like($pid2, qr/\A[0-9]+\z/, 'after CREATE DATABASE ... TEMPLATE: a lease change starts a notifier again');
	isnt($pid2, $pid1, 'a new one');

	($state, $out, $err) = sqlstate_of($node, 'ALTER DATABASE evd SET TABLESPACE evtbs');
	is($state, '00000', 'ALTER DATABASE evd SET TABLESPACE succeeds while evd has a notifier')
	  or diag($err);
	my $pid3 = $start_change->('evd', 'd:3');
	like($pid3, qr/\A[0-9]+\z/, 'after SET TABLESPACE: a notifier again');

	($state, $out, $err) = sqlstate_of($node, 'ALTER DATABASE evd RENAME TO evd3');
	is($state, '00000', 'ALTER DATABASE evd RENAME TO evd3 succeeds while evd has a notifier')
	  or diag($err);
	my $pid4 = $start_change->('evd3', 'd:4');
	like($pid4, qr/\A[0-9]+\z/, 'after RENAME: a notifier again');

	($state, $out, $err) = sqlstate_of($node, 'DROP DATABASE evd3');
	is($state, '00000', 'DROP DATABASE evd3 succeeds while it has a notifier') or diag($err);
	is( $node->safe_psql('ev',
			"SELECT count(*) FROM dlock_notifier n WHERE n.datid NOT IN (SELECT oid FROM pg_database)"),
		'0',
		'DROP DATABASE: the view has no row for the dropped database');
	($state, $out, $err) = sqlstate_of($node, 'DROP DATABASE evd2');
	is($state, '00000', 'DROP DATABASE evd2 (made from the template)') or diag($err);

	# a DROP DATABASE that fails because a listener is connected: the
	# listener hears the stopped notifier's last word
	$node->safe_psql('postgres', q{
CREATE DATABASE evl ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
ALTER DATABASE evl SET dlock.notify = on;
});
	$node->safe_psql('evl', 'CREATE EXTENSION dlock');
	my $ll = listener_start('evl', 'evl');
	my $t = acquire('evl', 'l:1', '10 min');
	events_are([ collect($ll) ], [ ev('acquired', 'l:1', $t, undef) ], 'evl: the event of l:1');
	my $lpid = notifier_pid('evl');
	($state, $out, $err) = sqlstate_of($node, 'DROP DATABASE evl');
	is($state, '55006', 'DROP DATABASE evl fails while a listener is connected');
	my @got = collect($ll);
	is_deeply([ map { "$_->{pid} $_->{payload}" } @got ], ["$lpid $exit_payload"],
		'the notifier stopped for it sent its notifier_exit event, from its pid, as its last notification');
	$t = acquire('evl', 'l:2', '10 min');
	events_are([ collect($ll) ], [ ev('acquired', 'l:2', $t, undef) ],
		'after the failed DROP DATABASE, the next event is sent');
	isnt(notifier_pid('evl'), $lpid, 'by a new notifier');
	$ll->{in} .= "\\q\n";
	$ll->{run}->finish;

	# stop marks: a DROP DATABASE waits (for pg_database, which a session
	# holds in SHARE mode) after dlock stopped the database's notifier
	my $held_drop = sub {
		my ($db, $interfere) = @_;
		my $e = bg_session($node, "e_$db", $db);
		my $c = bg_session($node, "c_$db");
		$c->{bg}->query_safe('BEGIN; LOCK TABLE pg_database IN SHARE MODE');
		my $a = bg_session($node, "a_$db");
		bg_start($a, "DROP DATABASE $db;");
		$node->poll_query_until('postgres',
			"SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $a->{pid}")
		  or die "the DROP DATABASE of $db does not wait for pg_database";
		$interfere->() if $interfere;
		# a lease change in the database, by a session connected before
		my $tok = $e->{bg}->query_safe("SELECT dlock_acquire('held', '10 min')");
		my $started = $node->safe_psql('postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'dlock notifier' AND datname = '$db'");
		bg_close($e);
		$c->{bg}->query_safe('COMMIT');
		my ($aout, $astate) = bg_finish($a);
		bg_close($a);
		bg_close($c);
		return ($astate, $tok, $started);
	};

	# (a) another command on the database ends while the DROP waits
	$node->safe_psql('postgres', q{
CREATE DATABASE evm ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
ALTER DATABASE evm SET dlock.notify = on;
});
	$node->safe_psql('evm', 'CREATE EXTENSION dlock');
	acquire('evm', 'm:1', '10 min');
	$node->poll_query_until('evm', "SELECT pid IS NOT NULL FROM dlock_notifier WHERE datname = 'evm'")
	  or die 'evm has no notifier';
	my ($astate, $tok, $started) = $held_drop->(
		'evm',
		sub {
			my ($bstate, $bout, $berr) = sqlstate_of($node,
				"SET lock_timeout = '100ms';\nALTER DATABASE evm RENAME TO evm2");
			is($bstate, '55P03', 'stop marks: a RENAME of the database times out while the DROP waits');
		});
	like($tok, qr/\A[0-9]+\z/, 'stop marks: a lease change in the database commits meanwhile');
	is($started, '0', 'stop marks: it starts no notifier: the RENAME did not clear the DROP\'s mark');
	is($astate, '00000', 'stop marks: the DROP DATABASE succeeds');

	# (b) a database without a notifier slot
	$node->safe_psql('postgres', q{
CREATE DATABASE evn ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
ALTER DATABASE evn SET dlock.notify = on;
});
	$node->safe_psql('evn', 'CREATE EXTENSION dlock');
	is($node->safe_psql('ev', "SELECT count(*) FROM dlock_notifier WHERE datname = 'evn'"), '0',
		'stop marks: evn has no notifier slot');
	($astate, $tok, $started) = $held_drop->('evn');
	like($tok, qr/\A[0-9]+\z/, 'stop marks: the first lease change of evn commits while its DROP waits');
	is($started, '0', 'stop marks: it starts no notifier');
	is($astate, '00000', 'stop marks: the DROP DATABASE of a database that had no slot succeeds');
	is( $node->safe_psql('ev',
			"SELECT count(*) FROM dlock_notifier n WHERE n.datid NOT IN (SELECT oid FROM pg_database)"),
		'0',
		'stop marks: the view has no row for the dropped databases');
}

# ---------------------------------------------------------------------
# 11. The notifier terminated by a superuser is started again.
# ---------------------------------------------------------------------

{
	my $old = notifier_pid('ev');
	like($old, qr/\A[0-9]+\z/, 'restart: ev has a notifier');
	$node->safe_psql('ev', "SELECT pg_terminate_backend($old)");
	$node->poll_query_until('ev',
		"SELECT pid IS NULL FROM dlock_notifier WHERE datname = 'ev'")
	  or die 'the notifier did not exit';
	my $t = acquire('ev', 'restart:1', '10 min');
	my @got = collect($l);
	events_are(\@got, [ ev('acquired', 'restart:1', $t, undef) ],
		'restart: the next lease change is sent');
	my $new = notifier_pid('ev');
	like($new, qr/\A[0-9]+\z/, 'restart: ev has a notifier again');
	isnt($new, $old, 'restart: with a new pid, which the view shows and the event came from');
}

# ---------------------------------------------------------------------
# 12. A transaction whose events do not fit in the queue.
# ---------------------------------------------------------------------

{
	my $dropped0 = one('ev', "SELECT events_dropped FROM dlock_notifier WHERE datname = 'ev'");
	my $n = 1000;    # 200-byte names: about 300 kB of events, the queue has 256 kB
	my ($out, $err);
	$node->psql(
		'ev',
		"SELECT cardinality(dlock_acquire_all(array_agg('full:' || i || repeat('x', 200)), '10 min')) FROM generate_series(1, $n) i",
		stdout => \$out,
		stderr => \$err);
	is($out, $n, "full queue: $n names acquired in one transaction");
	like($err, qr/WARNING:  dlock: $n lease events of this transaction not queued: the notifier's queue is full/,
		'full queue: a WARNING says so');
	my @got = collect($l);
	events_are(\@got,
		[ { event => 'overflow', lock_name => undef, token => undef, previous_token => undef, count => $n } ],
		'full queue: one overflow event with the number of changes instead');
	is(one('ev', "SELECT events_dropped FROM dlock_notifier WHERE datname = 'ev'"), $dropped0 + $n,
		'full queue: dlock_notifier counts them as dropped');

	# a transaction that fits goes through as before
	my $t = acquire('ev', 'after-full', '10 min');
	events_are([ collect($l) ], [ ev('acquired', 'after-full', $t, undef) ],
		'full queue: the next transaction\'s event is sent');
}

# ---------------------------------------------------------------------
# 14. An idle notifier exits, and says so.
# ---------------------------------------------------------------------

{
	my $old = notifier_pid('ev');
	like($old, qr/\A[0-9]+\z/, 'idle: ev has a notifier, idle (dlock.notifier_idle_timeout = 1h)');
	my $sent0 = one('ev', "SELECT events_sent FROM dlock_notifier WHERE datname = 'ev'");
	set_idle_timeout($node, '300ms');
	ok($node->poll_query_until('ev', notifier_gone('ev')),
		'idle: with the timeout lowered to 300ms, the idle notifier exits');
	my @got = collect($l);
	is_deeply([ map { "$_->{pid} $_->{payload}" } @got ], ["$old $exit_payload"],
		'idle: its last notification is notifier_exit, from its pid');
	is(scalar(grep { !$_->{form_ok} } @got), 0, 'idle: in the documented form');

	# a lease change starts a notifier, which exits 300 ms later
	my $t = acquire('ev', 'idle:1', '10 min');
	ok( $node->poll_query_until('ev',
			notifier_gone('ev') . " AND (SELECT events_sent = $sent0 + 1 FROM dlock_notifier WHERE datname = 'ev')"),
		'idle: a lease change starts a notifier, which sends its event and exits');
	@got = collect($l);
	is_deeply([ map { $_->{payload} } @got ],
		[ qq({"event": "acquired", "lock_name": "idle:1", "token": $t, "previous_token": null}), $exit_payload ],
		'idle: the event, then notifier_exit (events_sent counts the event only)');
	is(scalar(@got), 2, 'idle: two notifications');
	my $pid1 = @got == 2 && $got[0]{pid} eq $got[1]{pid} ? $got[0]{pid} : '';
	like($pid1, qr/\A[0-9]+\z/, 'idle: both from one pid');
	isnt($pid1, $old, 'idle: a new notifier\'s');

	# back to 1h: the next notifier stays
	set_idle_timeout($node, '1h');
	$t = acquire('ev', 'idle:2', '10 min');
	events_are([ collect($l) ], [ ev('acquired', 'idle:2', $t, undef) ],
		'idle: the next lease change is sent by the notifier the view shows');
	my $pid2 = notifier_pid('ev');
	ok($pid2 ne $pid1 && $pid2 ne $old, 'idle: a third notifier, with a pid of its own');
}

$l->{in} .= "\\q\n";
$l->{run}->finish;

is(scalar(crash_lines($node)), 0, 'no crash or failed assertion in the server log');

# ---------------------------------------------------------------------
# 13. No background worker slot for the notifier.  The same cluster,
# restarted with two worker slots and a small queue; what ALTER SYSTEM
# set above is reset, so that the file's settings hold.
# ---------------------------------------------------------------------

{
	my $log_from = -s $node->logfile;
	$node->safe_psql('postgres', 'ALTER SYSTEM RESET ALL');
	$node->append_conf(
		'postgresql.conf', q{
max_worker_processes = 2
dlock.notify_queue_size = 64kB
dlock.notifier_idle_timeout = '1h'
});
	$node->restart;
	my $small = $node;
	is($small->safe_psql('postgres', 'SHOW dlock.notify_queue_size'), '64kB',
		'small: dlock.notify_queue_size = 64kB');
	ok( $small->poll_query_until('postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'logical replication launcher'"),
		'small: the logical replication launcher takes one of the two worker slots');
	for my $db (qw(sa sb))
	{
		$small->safe_psql('postgres', "CREATE DATABASE $db");
		$small->safe_psql($db, 'CREATE EXTENSION dlock');
		$small->safe_psql('postgres', "ALTER DATABASE $db SET dlock.notify = on");
	}
	my ($out, $err);
	$small->psql('sa', "SELECT dlock_acquire('w', '10 min') IS NOT NULL",
		stdout => \$out, stderr => \$err);
	is($err, '', 'small: sa\'s notifier takes the last worker slot, without a warning');
	$small->poll_query_until('sa', "SELECT pid IS NOT NULL FROM dlock_notifier WHERE datname = 'sa'")
	  or die 'no notifier in sa';
	$small->psql('sb', "SELECT dlock_acquire('w', '10 min') IS NOT NULL",
		stdout => \$out, stderr => \$err);
	is($out, 't', 'small: sb\'s lease change commits');
	like($err, qr/WARNING:  dlock: 1 lease events not sent: no background worker slot is free for the notifier of database [0-9]+/,
		'small: with a WARNING that no background worker slot is free');
	is( $small->safe_psql('sb',
			"SELECT pid IS NULL, events_dropped, events_queued FROM dlock_notifier WHERE datname = 'sb'"),
		't|1|0',
		'small: sb has no notifier, and its event counts as dropped');

	# sa's notifier gives its worker back when idle
	is( $small->safe_psql('postgres',
			"SELECT boot_val FROM pg_settings WHERE name = 'dlock.notifier_idle_timeout'"),
		'10000', 'small: dlock.notifier_idle_timeout is 10 s (10000 ms) by default');
	set_idle_timeout($small, '100ms');
	ok( $small->poll_query_until('sa',
			"SELECT pid IS NULL FROM dlock_notifier WHERE datname = 'sa'"),
		'small: sa\'s notifier exits idle');

	# until the postmaster has taken the exited worker back, there is no
	# free slot: poll (each try is a lease change of its own)
	my ($tries, $start) = (0, time);
	do
	{
		$tries++;
		$small->psql('sb', "SELECT dlock_acquire('w$tries', '10 min') IS NOT NULL",
			stdout => \$out, stderr => \$err);
		Time::HiRes::sleep(0.05) if $err ne '';
	} while ($err ne '' && time - $start < $timeout);
	is($err, '', "small: a lease change of sb then starts its notifier, without a warning ($tries tries)");
	ok( $small->poll_query_until('sb',
			"SELECT events_sent = 1 FROM dlock_notifier WHERE datname = 'sb'"),
		'small: and its event is sent');
	is(scalar(crash_lines($small, $log_from)), 0,
		'small: no crash or failed assertion in the server log');
	$small->stop;
}

done_testing();
