#!/usr/bin/perl
#
# test/t/070_live_prepared.pl
#	  The 'live' fence's name lock in a prepared transaction and across a
#	  crash (docs/guarantees.md, "Fencing": how 'live' keeps a takeover
#	  off; design.md §17, "Why a lock in memory is enough").
#
# A 'live' check holds dlock's name lock (an advisory lock of class 0xD10C,
# pg_locks objsubid -12020) in ShareLock until its transaction ends; every
# grant of the name needs it in ExclusiveLock and reports the name as held
# when it cannot have it (src/name_lock.c).  The lock lives in the lock
# manager's shared memory only, so:
#
#   1. PREPARE TRANSACTION hands it to the prepared transaction: once the
#      lease has expired, dlock_acquire of the name from another session
#      returns NULL, and so does dlock_acquire_all of a set with the name,
#      refused by its read without drawing a token (dlock_token_seq does
#      not move) or taking over the set's other name; pg_locks shows the
#      ShareLock granted to the prepared transaction (pid NULL).
#   2. A crash (stop in immediate mode) and restart restore it with the
#      prepared transaction (lock_twophase_recover): the prepared
#      transaction and its lock are back, both acquires still return NULL.
#      COMMIT PREPARED commits the fenced write and releases the lock; the
#      next acquire gets a token greater than every earlier one.
#   3. A 'live' writer that is open, not prepared, at the crash holds the
#      name while it runs (NULL before the crash), and not afterwards: its
#      transaction is gone, and the first acquire after the restart gets a
#      greater token.
#
# The leases are acquired for an hour and the 'live' checks made while
# they are live; then they are renewed to 1 ms and the test waits, by the
# server's clock (wait_for_expiry), until they are no longer live: no
# timing is assumed (CONTRIBUTING.md, "Waiting without racing").
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;
use List::Util qw(max);

# prot is fenced by the constant lock "prep" in mode 'live'.
my $node = dlock_node(
	'dlock_live_prepared',
	preload => 1,
	conf => "max_prepared_transactions = 4\n",
	setup => q{
CREATE EXTENSION dlock;
CREATE TABLE prot (id int PRIMARY KEY, fence_token bigint);
CREATE TRIGGER prot_fence BEFORE INSERT OR UPDATE ON prot
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('prep', 'fence_token', 'live');
});

# Every token handed out, in issue order.
my @issued;

# acquire($name) takes $name for an hour and returns its token, which must
# be greater than every earlier token.
sub acquire
{
	my ($name, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $t = sql("SELECT dlock_acquire('$name', '1 hour')");
	like($t, qr/^[0-9]+$/, "$what: granted");
	cmp_ok($t, '>', max(0, @issued),
		"$what: the token is greater than every earlier one");
	push @issued, $t;
	return $t;
}

# refused($name, $what): dlock_acquire of $name returns NULL.
sub refused
{
	my ($name, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	is(sql("SELECT dlock_acquire('$name', '1 hour') IS NULL"),
		't', "$what: dlock_acquire('$name') returns NULL");
	return;
}

# The name locks in ShareLock held by prepared transactions (pid NULL):
# the gids of their holders, found through the lock every transaction
# holds on its own transaction id (the same virtualtransaction: the
# preparing backend's before a restart, -1/<xid> after one).
my $prepared_locks = q{
SELECT coalesce(string_agg(p.gid, ',' ORDER BY p.gid), '')
  FROM pg_locks l
  JOIN pg_locks x ON x.locktype = 'transactionid' AND x.virtualtransaction = l.virtualtransaction
  JOIN pg_prepared_xacts p ON p.transaction = x.transactionid
 WHERE l.locktype = 'advisory' AND l.objsubid = -12020 AND l.mode = 'ShareLock'
   AND l.granted AND l.pid IS NULL AND x.pid IS NULL};

# The name locks in ShareLock held by backend $pid.
sub backend_locks
{
	my ($pid) = @_;
	return sql(
		qq{SELECT count(*) FROM pg_locks
 WHERE locktype = 'advisory' AND objsubid = -12020 AND mode = 'ShareLock'
   AND granted AND pid = $pid});
}

my $t_prep = acquire('prep', 'prep');
my $t_open = acquire('open', 'open');
my $t_spare = acquire('spare', 'spare');
is(sql("SELECT dlock_release('spare', $t_spare)"), 't', 'spare released');

# 1. The prepared writer: a 'live' check and a fenced write, prepared.
my ($state, $out, $err) = sqlstate_of(
	$node, qq{BEGIN;
SELECT dlock_check('prep', $t_prep, 'live');
INSERT INTO prot VALUES (1, $t_prep);
PREPARE TRANSACTION 'live_prep'});
is($state, '00000', "a 'live' check and write, then PREPARE TRANSACTION")
  or diag("stderr: $err");
is(sql('SELECT gid FROM pg_prepared_xacts'), 'live_prep',
	'live_prep is prepared');

# 3 (before the crash). The open writer: a 'live' check in a transaction
# that stays open.
my $w = bg_session($node, 'open');
$w->{bg}->query_safe('BEGIN');
is($w->{bg}->query_safe("SELECT dlock_check('open', $t_open, 'live')"),
	$t_open, "open writer: the 'live' check passes");

# Both leases end by the clock while their writers hold them.
is( sql(
		"SELECT dlock_renew('prep', $t_prep, '1 millisecond')"
		  . " AND dlock_renew('open', $t_open, '1 millisecond')"),
	't',
	'both leases renewed to 1 ms (renew does not wait for the writers)');
ok(wait_for_expiry($node, 'prep'), 'prep has expired');
ok(wait_for_expiry($node, 'open'), 'open has expired');

refused('prep', 'prepared writer');
refused('open', 'open writer');
is($node->safe_psql('postgres', $prepared_locks),
	'live_prep', "pg_locks: the prepared transaction holds a name lock in ShareLock (pid NULL)");
is(backend_locks($w->{pid}), '1',
	"pg_locks: the open writer's backend holds a name lock in ShareLock");

# A set with the prepared writer's name is refused by its read: no token
# drawn, the set's other name ("spare", released) not taken over.
my $seq = sql('SELECT last_value FROM dlock_token_seq');
is( sql(
		"SELECT dlock_acquire_all(ARRAY['spare', 'prep'], '1 hour') IS NULL"),
	't',
	'dlock_acquire_all of {spare, prep} returns NULL');
is(sql('SELECT last_value FROM dlock_token_seq'),
	$seq, 'the refused set drew no token');
is(sql("SELECT token = $t_spare AND released FROM dlock_leases WHERE lock_name = 'spare'"),
	't', "the refused set did not take 'spare' over");

# 2. Crash and restart.
$node->stop('immediate');
bg_close($w);
$node->start;

is(sql('SELECT gid FROM pg_prepared_xacts'), 'live_prep',
	'after the crash: live_prep is still prepared');
is($node->safe_psql('postgres', $prepared_locks),
	'live_prep', 'after the crash: the prepared transaction holds its name lock again');
is(sql("SELECT live FROM dlock_leases WHERE lock_name = 'prep'"),
	'f', 'after the crash: prep is still expired');
refused('prep', 'after the crash, prepared writer');
is( sql(
		"SELECT dlock_acquire_all(ARRAY['spare', 'prep'], '1 hour') IS NULL"),
	't',
	'after the crash: dlock_acquire_all of {spare, prep} returns NULL');
is(sql("SELECT token = $t_spare AND released FROM dlock_leases WHERE lock_name = 'spare'"),
	't', "after the crash: the refused set did not take 'spare' over");

# 3. The open writer's transaction died with the server: its name is free.
acquire('open', "after the crash, the open writer's name");

# 2. COMMIT PREPARED: the write commits, the lock goes.
sql("COMMIT PREPARED 'live_prep'");
is(sql('SELECT count(*) FROM pg_prepared_xacts'), '0',
	'COMMIT PREPARED: no prepared transaction left');
is(sql('SELECT fence_token FROM prot WHERE id = 1'),
	$t_prep, "COMMIT PREPARED: the fenced write (prep's old token) committed");
is($node->safe_psql('postgres', $prepared_locks), '',
	'COMMIT PREPARED: no name lock left');
acquire('prep', 'after COMMIT PREPARED, prep');

done_testing();
