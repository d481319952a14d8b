#!/usr/bin/perl
#
# test/t/071_fence_cache_recovery.pl
#	  The fence cache (src/fence_cache.c, design.md §12) where leases change
#	  without a transaction of dlock's that opens the names' buckets: a
#	  prepared takeover committed after a restart, and WAL replay on a hot
#	  standby.  Each case first makes a 'latest' check read the old token
#	  (which a fill would keep), then makes the new token visible, and then
#	  checks that the old token is rejected (55T01) and the new one
#	  accepted.  dlock_check reads as the 'latest' trigger does.
#
# 1. COMMIT PREPARED after a restart.  A takeover is prepared; the server
#    restarts (which rebuilds the cache with every bucket's count at zero,
#    so the buckets the takeover opened are no longer open); a check of the
#    old token passes (a fill would keep it, but the version it read is
#    replaced by the prepared takeover, and a fill refuses that: case 3);
#    COMMIT PREPARED.  The ProcessUtility hook opens the global count in
#    COMMIT PREPARED's transaction, so the cache is dropped when it
#    commits, whatever it held: the old token is rejected.  Before the
#    fill's rule, the hook alone kept the cache from answering with it.
# 2. A hot standby.  A check on the standby passes with the primary's token;
#    the primary takes the lease over; after replay the standby rejects the
#    old token (the cache is neither read nor filled during recovery, since
#    replay opens no bucket), and so does the standby once promoted.
# 3. A 'live' write after a restart, under a prepared transaction that
#    released a lease and took it over itself.  After the restart the
#    release and the takeover are still in progress (prepared) and open no
#    bucket, and the old token is the committed one: a 'latest' check
#    passes with it (its read would fill the cache, but a version that a
#    live transaction replaces is never filled).  A 'live' write with the
#    old token must find the takeover in the row's chain and wait for it,
#    as without the cache; once COMMIT PREPARED has run, it is rejected.
#    Had the cache answered it, the write would have passed at once with
#    only the name lock, which the prepared takeover no longer asks for.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;

my $primary = dlock_node('dlock_cache_primary',
	preload => 1,
	init => { allows_streaming => 1 },
	conf => "max_prepared_transactions = 5\n");
my $p = sub { $primary->safe_psql('postgres', $_[0]) };

# check($node, name, token): the SQLSTATE of a 'latest' check ('00000': passed)
sub check
{
	my ($node, $name, $token) = @_;
	my ($state) = sqlstate_of($node, "SELECT dlock_check('$name', $token)");
	return $state;
}

$p->('CREATE EXTENSION dlock');

# 1. COMMIT PREPARED after a restart
my $t0 = $p->(q{SELECT dlock_acquire('prep:1', '1 millisecond')});
wait_for_expiry($primary, 'prep:1') or die 'the short lease did not expire';
my $t1 = $p->(q{BEGIN;
SELECT dlock_acquire('prep:1', '1 hour');
PREPARE TRANSACTION 'takeover';});
cmp_ok($t1, '>', $t0, 'a takeover of the ended lease was prepared');
$primary->restart;
is(check($primary, 'prep:1', $t0), '00000',
	'after the restart, before COMMIT PREPARED: the old token passes');
$p->(q{COMMIT PREPARED 'takeover'});
is(check($primary, 'prep:1', $t0), '55T01',
	'after COMMIT PREPARED: the old token is rejected');
is(check($primary, 'prep:1', $t1), '00000', 'and the prepared takeover\'s token passes');

# 2. a hot standby, and its promotion
$primary->backup('cache_backup');
my $standby = PostgreSQL::Test::Cluster->new('dlock_cache_standby');
$standby->init_from_backup($primary, 'cache_backup', has_streaming => 1);
$standby->start;
# acquired after the backup: replay has a record to reach
my $s0 = $p->(q{SELECT dlock_acquire('stby:1', '1 millisecond')});
wait_for_replay($primary, $standby);
is(check($standby, 'stby:1', $s0), '00000',
	'the standby: the primary\'s token passes a latest check');
wait_for_expiry($primary, 'stby:1') or die 'the short lease did not expire';
my $s1 = $p->(q{SELECT dlock_acquire('stby:1', '1 hour')});
cmp_ok($s1, '>', $s0, 'the primary took the lease over');
wait_for_replay($primary, $standby);
is(check($standby, 'stby:1', $s0), '55T01',
	'the standby, after replaying the takeover: the old token is rejected');
is(check($standby, 'stby:1', $s1), '00000', 'and the new one passes');
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the standby was not promoted';
is(check($standby, 'stby:1', $s0), '55T01',
	'the promoted standby rejects the old token');
is(check($standby, 'stby:1', $s1), '00000', 'and accepts the current one');

$standby->stop;

# 3. 'live' after a restart, under a prepared release-and-takeover
$p->(q{CREATE TABLE lacct (id int PRIMARY KEY, val int NOT NULL, fence_token bigint);
CREATE TRIGGER fence BEFORE UPDATE ON lacct FOR EACH ROW
  EXECUTE FUNCTION dlock_fence('live:{id}', 'fence_token', 'live');
INSERT INTO lacct VALUES (1, 0, NULL)});
my $l0 = $p->(q{SELECT dlock_acquire('live:1', '1 hour')});
my $l1 = $p->(qq{BEGIN;
SELECT dlock_release('live:1', $l0) AS released \\gset
SELECT dlock_acquire('live:1', '1 hour');
PREPARE TRANSACTION 'release_takeover';});
cmp_ok($l1, '>', $l0, 'a release and a takeover in one transaction were prepared');
$primary->restart;
is(check($primary, 'live:1', $l0), '00000',
	'after the restart, before COMMIT PREPARED: the old token passes a latest check');
my $w = bg_session($primary, 'live_writer');
bg_start($w, qq{UPDATE lacct SET val = val + 1, fence_token = $l0 WHERE id = 1;});
ok( $primary->poll_query_until(
		'postgres', qq{
SELECT count(*) = 1 FROM pg_locks
 WHERE pid = $w->{pid} AND locktype = 'transactionid' AND NOT granted}),
	"a live write with the old token waits for the prepared takeover");
$p->(q{COMMIT PREPARED 'release_takeover'});
my ($out, $state) = bg_finish($w);
is($state, '55T01', 'after COMMIT PREPARED, the waiting live write is rejected');
bg_close($w);
is( (sqlstate_of($primary,
			qq{UPDATE lacct SET val = val + 1, fence_token = $l1 WHERE id = 1}))[0],
	'00000', "and one with the takeover's token is accepted");

$primary->stop;
done_testing();
