#!/usr/bin/perl
#
# test/t/062_hostile_events.pl
#	  Issue 22, item 8: forged lease events.  An ordinary role can NOTIFY on
#	  channel "dlock" with any payload; a listener must be able to tell
#	  dlock's own events from such forgeries, by the rule that
#	  docs/sql-reference.md ("Lease events") gives: accept a notification
#	  on channel dlock only when its sender pid is the notifier's pid the
#	  listener keeps, reading dlock_notifier again on a pid it does not
#	  know, and forget the pid at the notifier's "notifier_exit" event.
#
# The listener is a psql process of its own, logged in as the ordinary
# role "watcher", that ran LISTEN dlock and applies that rule in
# rule_accepts(): it reads the view through its own session (and counts
# its reads).  Where the view does not exist (dlock before the notifier)
# the rule cannot accept anything, so every check below, each of which
# needs the rule to accept dlock's own event as well as to reject the
# forgery, fails there (which is the point: a listener could not tell
# them apart).
#
# The attacker is the ordinary role "mallory" (LOGIN, CREATEDB, no other
# privilege), in database "app", whose lease changes are sent
# (ALTER DATABASE app SET dlock.notify = on).  Notifiers stay while idle
# (dlock.notifier_idle_timeout = 1h) except in check 7.  Checks:
#   1. mallory's NOTIFY dlock with a forged "broken" event: the rule
#      rejects it, and accepts the real event of a lease change made after
#      it.
#   2. mallory's pg_notify('dlock', ...) with a forged "taken_over" event
#      in the same transaction as a real lease change of its own: the rule
#      accepts the real event and rejects the forgery, although both come
#      from one transaction of mallory's.
#   3. mallory replays the exact payload of a real event it received: the
#      rule rejects the replay.
#   4. mallory cannot stop the notifier to make room for a forger:
#      pg_terminate_backend and pg_cancel_backend of it fail with 42501,
#      and its DROP DATABASE app, ALTER DATABASE app RENAME, ALTER DATABASE
#      app SET TABLESPACE and CREATE DATABASE ... TEMPLATE app fail
#      without stopping it (same pid, still running, nothing dropped).
#   5. After a superuser terminated the notifier, the next real event
#      comes from a new pid, which the rule learns from the view, and a
#      forgery after that is still rejected.
#   6. mallory's commit that holds PostgreSQL's notification lock (its
#      NOTIFY's commit waits for a synchronous standby that does not
#      answer) does not hold up another session's lease changes with
#      events (synchronous_commit = local), which commit while it waits.
#   7. Across an exit and a restart: with dlock.notifier_idle_timeout
#      lowered, the notifier exits idle and its last notification is a
#      "notifier_exit" event, which the rule accepts and after which it
#      keeps no pid; a notification from that pid after the exit event
#      (what a process that reused the pid could send: a pid cannot be
#      forced, so the notification is given to the rule as received from
#      it) is not accepted, and the rule reads the view for it; the next
#      real event comes from a new notifier and is accepted; after a
#      superuser terminated that one, the next real event is accepted
#      from a third pid, and mallory's forgery is rejected.
#   8. The owner's commands that PostgreSQL refuses before it looks for
#      other sessions do not stop the notifier of the owner's database
#      ("mdb", owned by mallory): DROP DATABASE in a transaction block, in
#      a function, in a read-only transaction and from the database
#      itself; ALTER DATABASE ... RENAME to a name in use and without
#      CREATEDB; ALTER DATABASE ... SET TABLESPACE in a transaction block
#      and to pg_global; CREATE DATABASE ... TEMPLATE mdb in a transaction
#      block, under a name in use, for an owner mallory cannot become,
#      and without CREATEDB.  Each fails with PostgreSQL's SQLSTATE, and
#      the notifier keeps its pid.
#   9. A role with CREATEDB that owns nothing copies template1 (CREATE
#      DATABASE without TEMPLATE) while template1 has a notifier (after a
#      lease change there): the copy succeeds (the notifier of a template
#      it may copy is stopped for it, not left to make the copy fail with
#      "being accessed by other users").
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
	'dlock_hostile_events',
	init => { allows_streaming => 1 },    # commits can wait for a standby (6.)
	preload => 1,
	conf => "dlock.notifier_idle_timeout = '1h'\n");
$node->safe_psql(
	'postgres', q{
CREATE DATABASE app;
CREATE ROLE mallory LOGIN CREATEDB;
CREATE ROLE watcher LOGIN;
SET allow_in_place_tablespaces = on;
CREATE TABLESPACE hostile_tbs LOCATION '';
GRANT CREATE ON TABLESPACE hostile_tbs TO mallory;
});
$node->safe_psql('app', 'CREATE EXTENSION dlock');
$node->safe_psql('postgres', 'ALTER DATABASE app SET dlock.notify = on');

my %as_mallory = (extra_params => [ '-U', 'mallory' ]);
my $json = JSON::PP->new->utf8;

# The payload of the notifier's last notification (src/events.c).
my $exit_payload = '{"event": "notifier_exit", "lock_name": null, "token": null, "previous_token": null}';

# ---------------------------------------------------------------------
# The listener
# ---------------------------------------------------------------------

# listener_start() starts a psql process on app, logged in as watcher,
# that runs LISTEN dlock; returns it (a hash: run, in, out, err, timer,
# seq, notes, known: the notifier's pid it keeps, reads: its reads of the
# view).
sub listener_start
{
	my $l = { in => '', out => '', err => '', seq => 0, notes => [], known => undef, reads => 0 };
	$l->{timer} = IPC::Run::timer($timeout);
	$l->{run} = IPC::Run::start(
		[ $node->installed_command('psql'), '-XAtq', '-U', 'watcher', '-d', $node->connstr('app') ],
		'<' => \$l->{in},
		'>' => \$l->{out},
		'2>' => \$l->{err},
		$l->{timer});
	listener_command($l, 'LISTEN dlock;');
	return $l;
}

# listener_command($l, $sql) runs $sql in the listener's session and
# returns its output and its error output (an error does not stop psql);
# the notifications psql printed are kept in $l->{notes} (payload, pid).
sub listener_command
{
	my ($l, $sql) = @_;
	my $tag = 'round ' . ++$l->{seq};
	$l->{timer}->start($timeout);
	$l->{in} .= "$sql\n\\echo '$tag'\n";
	$l->{run}->pump
	  until $l->{out} =~ /^\Q$tag\E\n/m
	  || $l->{timer}->is_expired
	  || !$l->{run}->pumpable;
	$l->{out} =~ s/\A(.*?)^\Q$tag\E\n//ms
	  or die "listener: no answer to $sql\nstdout: $l->{out}\nstderr: $l->{err}";
	my $out = $1;
	my $err = $l->{err};
	$l->{err} = '';
	while ($out =~
		s/^Asynchronous notification "([^"\n]*)" with payload "(.*)" received from server process with PID ([0-9]+)\.\n//m
	  )
	{
		push @{ $l->{notes} }, { channel => $1, payload => $2, pid => $3 };
	}
	return ($out, $err);
}

# notes_until($l, $want) polls the listener until $want->($notes) is true
# for the notifications received so far (bounded), and returns them, then
# forgets them.
sub notes_until
{
	my ($l, $want) = @_;
	my $start = time;
	while (!$want->($l->{notes}) && time - $start < $timeout)
	{
		listener_command($l, 'SELECT 1 WHERE false;');
		Time::HiRes::sleep(0.01) unless $want->($l->{notes});
	}
	my @notes = @{ $l->{notes} };
	$l->{notes} = [];
	return @notes;
}

# rule_accepts($l, $n) is the listener's rule (docs/sql-reference.md,
# "Lease events"): accept a notification on channel dlock only when its
# sender pid is the notifier's pid the listener keeps; on a pid it does
# not keep, it reads the view again and keeps the pid the view shows
# (none when it shows none); an accepted "notifier_exit" event makes it
# keep no pid.  The view is read in the listener's own session (counted
# in $l->{reads}); if that fails, nothing is accepted.
sub rule_accepts
{
	my ($l, $n) = @_;
	return 0 unless $n->{channel} eq 'dlock';
	if (!defined $l->{known} || $n->{pid} ne $l->{known})
	{
		my ($out, $err) = listener_command($l,
			'SELECT pid FROM dlock_notifier WHERE datname = current_database();');
		$l->{reads}++;
		note "the listener could not read dlock_notifier: $err" if $err ne '';
		$l->{known} = ($err eq '' && $out =~ /\A([0-9]+)\n\z/) ? $1 : undef;
	}
	return 0 unless defined $l->{known} && $n->{pid} eq $l->{known};
	$l->{known} = undef if $n->{payload} eq $exit_payload;
	return 1;
}

# payload_of($event, $name, $token, $prev) is the payload dlock sends.
sub payload_of
{
	my ($event, $name, $token, $prev) = @_;
	return qq({"event": "$event", "lock_name": "$name", "token": $token, "previous_token": )
	  . ($prev // 'null') . '}';
}

# find($notes, $payload) returns the notification with that payload.
sub find
{
	my ($notes, $payload) = @_;
	my @n = grep { $_->{payload} eq $payload } @$notes;
	return $n[0];
}

# notifier_pid($db) returns the pid dlock_notifier shows for database $db
# (default app; '' when none; undef when the view cannot be read).
sub notifier_pid
{
	my ($db) = @_;
	$db //= 'app';
	my ($ret, $out, $err) = $node->psql($db,
		"SELECT pid FROM dlock_notifier WHERE datname = current_database()");
	return $ret == 0 ? $out : undef;
}

# set_idle_timeout($value) sets dlock.notifier_idle_timeout for the server
# and waits until new sessions see it; false when it cannot be set (a
# dlock without the setting).
sub set_idle_timeout
{
	my ($value) = @_;
	my ($ret) = $node->psql('postgres',
		"ALTER SYSTEM SET dlock.notifier_idle_timeout = '$value'");
	return 0 if $ret != 0;
	$node->reload;
	return $node->poll_query_until('postgres',
		"SELECT current_setting('dlock.notifier_idle_timeout') = '$value'");
}

my $l = listener_start();

# ---------------------------------------------------------------------
# 1. A forged NOTIFY dlock.
# ---------------------------------------------------------------------

{
	my $forged = payload_of('broken', 'job:nightly', 1764600000000123, undef);
	$node->safe_psql('app', "NOTIFY dlock, '$forged'", %as_mallory);
	my $t = $node->safe_psql('app', "SELECT dlock_acquire('job:real', '10 min')");
	my $real = payload_of('acquired', 'job:real', $t, undef);
	my @notes = notes_until($l, sub { find($_[0], $forged) && find($_[0], $real) });
	my $f = find(\@notes, $forged);
	my $r = find(\@notes, $real);
	ok( $f && $r && !rule_accepts($l, $f) && rule_accepts($l, $r),
		'1. mallory\'s NOTIFY dlock with a forged "broken" event: the listener\'s rule rejects it and accepts dlock\'s own event'
	) or diag(explain(\@notes));
}

# ---------------------------------------------------------------------
# 2. A forgery in the same transaction as a real change.
# ---------------------------------------------------------------------

{
	my $forged = payload_of('taken_over', 'job:nightly', 1764600000000999, 1764600000000123);
	my $t = $node->safe_psql('app',
		"BEGIN; SELECT pg_notify('dlock', '$forged') IS NULL; SELECT dlock_acquire('m:own', '10 min'); COMMIT;",
		%as_mallory);
	$t = (split /\n/, $t)[-1];
	my $real = payload_of('acquired', 'm:own', $t, undef);
	my @notes = notes_until($l, sub { find($_[0], $forged) && find($_[0], $real) });
	my $f = find(\@notes, $forged);
	my $r = find(\@notes, $real);
	ok( $f && $r && !rule_accepts($l, $f) && rule_accepts($l, $r),
		'2. pg_notify(\'dlock\', ...) in the transaction of mallory\'s own lease change: the rule accepts the real event and rejects the forgery'
	) or diag(explain(\@notes));
}

# ---------------------------------------------------------------------
# 3. A replay of a real event.
# ---------------------------------------------------------------------

{
	my $t = $node->safe_psql('app', "SELECT dlock_acquire('job:replayed', '10 min')");
	my $real = payload_of('acquired', 'job:replayed', $t, undef);
	my @first = notes_until($l, sub { find($_[0], $real) });
	my $r = find(\@first, $real);
	$node->safe_psql('app', "SELECT pg_notify('dlock', '$real')", %as_mallory);
	my @again = notes_until($l, sub { find($_[0], $real) });
	my $replay = find(\@again, $real);
	ok( $r && $replay && rule_accepts($l, $r) && !rule_accepts($l, $replay),
		'3. mallory replays the exact payload of a real event: the rule accepts the original and rejects the replay'
	) or diag(explain([ @first, @again ]));
}

# ---------------------------------------------------------------------
# 4. mallory cannot stop the notifier.
# ---------------------------------------------------------------------

{
	my $before = notifier_pid();
	my $pid = defined $before && $before =~ /\A[0-9]+\z/ ? $before : 0;
	my @states;
	for my $sql (
		"SELECT pg_terminate_backend($pid)",
		"SELECT pg_cancel_backend($pid)",
		'DROP DATABASE app',
		'ALTER DATABASE app RENAME TO app2',
		'ALTER DATABASE app SET TABLESPACE hostile_tbs',
		'CREATE DATABASE app_copy TEMPLATE app')
	{
		# from database postgres, as mallory
		my ($state, $out, $err) = sqlstate_of($node, "SET ROLE mallory;\n$sql");
		push @states, "$state: $sql";
	}
	my $after = notifier_pid();
	my (undef, $dropped) = $node->psql('app',
		"SELECT events_dropped FROM dlock_notifier WHERE datname = 'app'");
	ok( defined $before
		  && $before =~ /\A[0-9]+\z/
		  && defined $after
		  && $after eq $before
		  && $dropped eq '0'
		  && (grep { /\A42501: / } @states) == 6,
		'4. mallory\'s pg_terminate_backend, pg_cancel_backend, DROP DATABASE, ALTER DATABASE RENAME and SET TABLESPACE, and CREATE DATABASE ... TEMPLATE of app fail with 42501 and leave the notifier running with the same pid'
	) or diag("notifier before: " . ($before // 'no view') . ", after: " . ($after // 'no view') . "\n" . join("\n", @states));
}

# ---------------------------------------------------------------------
# 5. A restarted notifier.
# ---------------------------------------------------------------------

{
	my $old = notifier_pid();
	my $ok = defined $old && $old =~ /\A[0-9]+\z/;
	if ($ok)
	{
		$node->safe_psql('app', "SELECT pg_terminate_backend($old)");
		$ok = $node->poll_query_until('app',
			"SELECT pid IS NULL FROM dlock_notifier WHERE datname = 'app'");
	}
	my $t = $node->safe_psql('app', "SELECT dlock_acquire('job:after-restart', '10 min')");
	my $real = payload_of('acquired', 'job:after-restart', $t, undef);
	my @notes = notes_until($l, sub { find($_[0], $real) });
	my $r = find(\@notes, $real);
	my $forged = payload_of('broken', 'job:after-restart', $t, undef);
	$node->safe_psql('app', "NOTIFY dlock, '$forged'", %as_mallory);
	my @more = notes_until($l, sub { find($_[0], $forged) });
	my $f = find(\@more, $forged);
	ok( $ok && $r && $r->{pid} ne $old && rule_accepts($l, $r) && $f && !rule_accepts($l, $f),
		'5. after the notifier was terminated, the rule accepts the real event of its successor (a new pid, read from the view) and still rejects a forgery'
	) or diag(explain([ @notes, @more ]));
}

# ---------------------------------------------------------------------
# 6. mallory holding the notification lock does not hold up lease changes.
# ---------------------------------------------------------------------

{
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET synchronous_standby_names = 'nosuch'; SELECT pg_reload_conf()");
	$node->poll_query_until('postgres', "SELECT current_setting('synchronous_standby_names') = 'nosuch'")
	  or die 'synchronous_standby_names not set';
	my $m = bg_session($node, 'mallory', 'app');
	$m->{bg}->query_safe('SET ROLE mallory');
	bg_start($m, "BEGIN; NOTIFY dlock, 'hold'; CREATE TEMP TABLE hold (i int); COMMIT;");
	$node->poll_query_until('postgres',
		"SELECT wait_event = 'SyncRep' FROM pg_stat_activity WHERE pid = $m->{pid}")
	  or die 'mallory\'s commit does not wait for the standby';

	my $w = bg_session($node, 'writer', 'app');
	$w->{bg}->query_safe('SET synchronous_commit = local');
	bg_start($w, q{SELECT dlock_acquire('held:1', '10 min') AS tok \gset
SELECT dlock_release('held:1', :tok);});
	# bounded wait for the writer to be done (it would wait for mallory's
	# commit if it took the notification lock itself)
	my $done = 0;
	my $start = time;
	while (!$done && time - $start < $timeout)
	{
		$done = $node->safe_psql('postgres',
			"SELECT state = 'idle' AND query LIKE 'SELECT dlock_release(%' FROM pg_stat_activity WHERE pid = $w->{pid}"
		) eq 't';
		Time::HiRes::sleep(0.05) unless $done;
	}
	ok($done,
		'6. while mallory\'s commit holds the notification lock, another session\'s acquire and release with events commit'
	);

	# let go, so that a run that failed ends too
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($m->{pid})");
	bg_finish($m);
	bg_finish($w);
	$node->safe_psql('postgres',
		"ALTER SYSTEM RESET synchronous_standby_names; SELECT pg_reload_conf()");
	bg_close($m);
	bg_close($w);
}

# ---------------------------------------------------------------------
# 7. Across an exit and a restart.
# ---------------------------------------------------------------------

{
	my @why;

	# a real event, from the notifier the rule learns from the view
	my $t1 = $node->safe_psql('app', "SELECT dlock_acquire('exit:1', '10 min')");
	my $real1 = payload_of('acquired', 'exit:1', $t1, undef);
	my $r1 = find([ notes_until($l, sub { find($_[0], $real1) }) ], $real1);
	push @why, 'the first real event was not accepted' unless $r1 && rule_accepts($l, $r1);
	my $p1 = $r1 ? $r1->{pid} : 0;

	# the notifier exits idle; its last word is the exit event
	my $exited = set_idle_timeout('100ms')
	  && $node->poll_query_until('app',
		"SELECT pid IS NULL FROM dlock_notifier WHERE datname = 'app'");
	push @why, 'the notifier did not exit idle' unless $exited;
	my @notes = $exited ? notes_until($l, sub { grep { $_->{payload} eq $exit_payload } @{ $_[0] } }) : ();
	my ($x) = grep { $_->{payload} eq $exit_payload } @notes;
	push @why, 'no exit event' unless $x;
	push @why, 'the exit event came from another pid, or was not its last notification'
	  unless $x && $x->{pid} eq $p1 && $notes[-1] == $x;
	push @why, 'the rule did not accept the exit event, or still keeps its pid'
	  unless $x && rule_accepts($l, $x) && !defined $l->{known};

	# a notification from that pid after its exit event: read the view, reject
	my $reads = $l->{reads};
	my $late = { channel => 'dlock', pid => $p1, payload => payload_of('broken', 'exit:1', $t1, undef) };
	push @why, 'a notification from the exited pid was accepted' if rule_accepts($l, $late);
	push @why, 'the rule did not read the view for the exited pid' unless $l->{reads} == $reads + 1;

	# the next real event comes from a new notifier
	push @why, 'the idle timeout was not set back' unless set_idle_timeout('1h');
	my $t2 = $node->safe_psql('app', "SELECT dlock_acquire('exit:2', '10 min')");
	my $real2 = payload_of('acquired', 'exit:2', $t2, undef);
	my $r2 = find([ notes_until($l, sub { find($_[0], $real2) }) ], $real2);
	push @why, 'the event after the exit was not accepted, or came from the exited pid'
	  unless $r2 && $r2->{pid} ne $p1 && rule_accepts($l, $r2);
	my $p2 = $r2 ? $r2->{pid} : 0;

	# a restart: terminated by a superuser, no exit event; the next notifier
	$node->safe_psql('app', "SELECT pg_terminate_backend($p2)") if $p2;
	push @why, 'the notifier did not go'
	  unless $p2 && $node->poll_query_until('app',
		"SELECT pid IS NULL FROM dlock_notifier WHERE datname = 'app'");
	my $t3 = $node->safe_psql('app', "SELECT dlock_acquire('exit:3', '10 min')");
	my $real3 = payload_of('acquired', 'exit:3', $t3, undef);
	my $r3 = find([ notes_until($l, sub { find($_[0], $real3) }) ], $real3);
	push @why, 'the event after the restart was not accepted'
	  unless $r3 && $r3->{pid} ne $p2 && rule_accepts($l, $r3);

	# and a forgery is still rejected
	my $forged = payload_of('broken', 'exit:3', $t3, undef);
	$node->safe_psql('app', "NOTIFY dlock, '$forged'", %as_mallory);
	my $f = find([ notes_until($l, sub { find($_[0], $forged) }) ], $forged);
	push @why, 'the forgery after the restart was not rejected' unless $f && !rule_accepts($l, $f);

	ok(!@why,
		'7. across an idle exit and a restart the rule accepts every real event, the exit event is the notifier\'s last and ends its pid, a notification from that pid after it is rejected after reading the view, and forgeries are rejected'
	) or diag(join("\n", @why));
}

# ---------------------------------------------------------------------
# 8. The owner's refused commands do not stop its notifier.
# ---------------------------------------------------------------------

{
	$node->safe_psql('postgres', 'CREATE DATABASE mdb OWNER mallory');
	$node->safe_psql('mdb', 'CREATE EXTENSION dlock');
	$node->safe_psql('postgres', 'ALTER DATABASE mdb SET dlock.notify = on');
	$node->safe_psql('mdb', "SELECT dlock_acquire('m', '10 min')", %as_mallory);
	$node->poll_query_until('mdb', "SELECT pid IS NOT NULL FROM dlock_notifier WHERE datname = 'mdb'")
	  or diag('mdb has no notifier');
	my $before = notifier_pid('mdb');

	my @bad;
	my $try = sub {
		my ($sql, $want, %opt) = @_;
		my ($state, $out, $err) = sqlstate_of($node, $sql, role => 'mallory', %opt);
		push @bad, "$sql: SQLSTATE $state, not $want: $err" if $state ne $want;
	};
	$try->("BEGIN;\nDROP DATABASE mdb", '25001');
	$try->(q{DO $$BEGIN EXECUTE 'DROP DATABASE mdb'; END$$}, '25001');
	$try->("SET default_transaction_read_only = on;\nDROP DATABASE mdb", '25006');
	$try->('DROP DATABASE mdb', '55006', dbname => 'mdb');
	$try->('ALTER DATABASE mdb RENAME TO app', '42P04');
	$try->("BEGIN;\nALTER DATABASE mdb SET TABLESPACE hostile_tbs", '25001');
	$try->('ALTER DATABASE mdb SET TABLESPACE pg_global', '42501');
	$try->("BEGIN;\nCREATE DATABASE mcopy TEMPLATE mdb", '25001');
	$try->('CREATE DATABASE app TEMPLATE mdb', '42P04');
	$try->('CREATE DATABASE mcopy TEMPLATE mdb OWNER watcher', '42501');
	$node->safe_psql('postgres', 'ALTER ROLE mallory NOCREATEDB');
	$try->('ALTER DATABASE mdb RENAME TO mdb2', '42501');
	$try->('CREATE DATABASE mcopy TEMPLATE mdb', '42501');
	$node->safe_psql('postgres', 'ALTER ROLE mallory CREATEDB');

	my $after = notifier_pid('mdb');
	ok( !@bad
		  && defined $before
		  && $before =~ /\A[0-9]+\z/
		  && defined $after
		  && $after eq $before,
		'8. the owner\'s DROP DATABASE in a transaction block, a function, a read-only transaction and from the database, RENAME to a name in use and without CREATEDB, SET TABLESPACE in a transaction block and to pg_global, CREATE DATABASE ... TEMPLATE in a transaction block, under a used name, for another owner and without CREATEDB fail as PostgreSQL fails them, and leave the notifier running with the same pid'
	) or diag("notifier before: " . ($before // 'no view') . ", after: " . ($after // 'no view') . "\n" . join("\n", @bad));
}

# ---------------------------------------------------------------------
# 9. A CREATEDB role copies template1 while template1 has a notifier.
# ---------------------------------------------------------------------

{
	$node->safe_psql('template1', 'CREATE EXTENSION dlock');
	$node->safe_psql('postgres', 'ALTER DATABASE template1 SET dlock.notify = on');
	$node->safe_psql('template1', "SELECT dlock_acquire('t', '10 min')");
	my $running = $node->poll_query_until('template1',
		"SELECT pid IS NOT NULL FROM dlock_notifier WHERE datname = 'template1'");
	my ($state, $out, $err) = sqlstate_of($node, 'CREATE DATABASE mallory_db', role => 'mallory');
	ok($running && $state eq '00000',
		'9. a role with CREATEDB that owns nothing copies template1 while template1\'s notifier runs'
	) or diag("notifier ran: " . ($running ? 'yes' : 'no') . "; CREATE DATABASE: $state $err");
}

$l->{in} .= "\\q\n";
$l->{run}->finish;

is(scalar(crash_lines($node)), 0, 'no crash or failed assertion in the server log');
$node->stop;
done_testing();
