#!/usr/bin/perl
#
# test/t/012_pg_upgrade.pl
#	  pg_upgrade from PostgreSQL 15 to the server under test (17 or 18)
#	  with dlock installed, preloaded, holding live leases and protecting
#	  tables.
#
# Runs when the server under test is newer than 15; test/run-tests builds
# dlock from the same checkout into the assertion-enabled PostgreSQL 15
# (test/pg-server) and names it in DLOCK_UPGRADE_FROM (its installation
# directory, with bin/).  Not Debian's 15.20: it stores a column option
# (pg_attver) that 17.11 and 18.6 refuse, so pg_upgrade from it to them
# fails for every table, dlock's or not.  On 15 there is nothing to
# upgrade to: the file is skipped.
#
# The old cluster (15, shared_preload_libraries = 'dlock') has:
#   - database appdb with dlock 1.2 in schema coord: leases in every state
#     (live, held by a superuser and by an ordinary role, released,
#     expired, taken over), a table fenced in 'latest' mode and one in
#     'live' mode, whose rows carry their tokens, and more grants than the
#     sequence logs ahead (32), half of them released;
#   - database legacy with dlock 1.0 and a live lease, to be updated with
#     ALTER EXTENSION dlock UPDATE after the upgrade.
# It is stopped at a moment with no waiter and no open transaction, and
# pg_upgrade (copy mode, after --check) moves it to a new cluster of the
# server under test, also preloading dlock.  Then, in the new cluster:
#   - dlock_leases shows exactly the rows it showed before;
#   - live leases are honoured: another acquire returns NULL; their tokens
#     renew them (the ordinary role's too, as that role) and pass the
#     fence in both modes; a superseded token is rejected (55T01), and so
#     is a token of another lock;
#   - the first grant, on a new name and on a taken-over name, gets a
#     token above every token issued before the upgrade (the new cluster
#     has another system identifier: the token sequence jumps);
#   - a waiter is woken by a release (preload works on the new server);
#   - legacy updates from 1.0 to the current version, keeps its lease and
#     its next token is above the old ones.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use File::Temp ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;
use List::Util qw(max);

my $new = PostgreSQL::Test::Cluster->new('upgrade_new');
my $new_major = $new->pg_version->major;
if ($new_major <= 15)
{
	plan skip_all =>
	  "pg_upgrade is tested from 15 to a newer server; this one is $new_major";
}
my $old_install = $ENV{DLOCK_UPGRADE_FROM}
  or BAIL_OUT('DLOCK_UPGRADE_FROM must name the PostgreSQL 15 installation '
	  . 'with dlock installed (test/run-tests sets it)');

my $old = PostgreSQL::Test::Cluster->new('upgrade_old',
	install_path => $old_install);
is($old->pg_version->major, '15', 'the old cluster runs PostgreSQL 15');

my $preload = "shared_preload_libraries = 'dlock'\n";
$old->init;
$old->append_conf('postgresql.conf', $preload);
$old->start;

my $path = 'SET search_path = coord, public;';


$old->safe_psql(
	'postgres', q{
CREATE ROLE dlock_app LOGIN;
CREATE DATABASE appdb;
CREATE DATABASE legacy;
});
$old->safe_psql(
	'appdb', q{
CREATE SCHEMA coord;
CREATE EXTENSION dlock SCHEMA coord;
CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL, fence_token bigint);
CREATE TRIGGER acct_fence BEFORE INSERT OR UPDATE ON acct FOR EACH ROW
  EXECUTE FUNCTION coord.dlock_fence('acct:{id}', 'fence_token');
CREATE TABLE job (name text PRIMARY KEY, state text, fence_token bigint);
CREATE TRIGGER job_fence BEFORE INSERT OR UPDATE ON job FOR EACH ROW
  EXECUTE FUNCTION coord.dlock_fence('job:{name}', 'fence_token', 'live');
GRANT USAGE ON SCHEMA coord TO dlock_app;
GRANT SELECT, INSERT, UPDATE ON acct, job TO dlock_app;
});


# Every token issued before the upgrade.
my @issued;
my %tok;
$tok{1} = coord_acquire($old, 'appdb', 'acct:1', '1 hour');
$tok{2} = coord_acquire($old, 'appdb', 'acct:2', '1 hour', 1);
$tok{3} = coord_acquire($old, 'appdb', 'acct:3', '1 hour');
$tok{4} = coord_acquire($old, 'appdb', 'acct:4', '1 millisecond');
$tok{night} = coord_acquire($old, 'appdb', 'job:nightly', '1 hour');
push @issued, values %tok;
coord_sql($old, 'appdb', "INSERT INTO acct VALUES ($_, 100, $tok{$_})") for 1 .. 4;
coord_sql($old, 'appdb', "INSERT INTO job VALUES ('nightly', 'running', $tok{night})");
is(coord_sql($old, 'appdb', "SELECT dlock_release('acct:3', $tok{3})"),
	't', 'old cluster: acct:3 released');
# acct:5: taken over by a second holder, whose token the row then carries
$tok{'5a'} = coord_acquire($old, 'appdb', 'acct:5', '1 hour');
is(coord_sql($old, 'appdb', "SELECT dlock_break('acct:5')"), 't', 'old cluster: acct:5 broken');
$tok{'5b'} = coord_acquire($old, 'appdb', 'acct:5', '1 hour');
coord_sql($old, 'appdb', "INSERT INTO acct VALUES (5, 100, $tok{'5b'})");
push @issued, $tok{'5a'}, $tok{'5b'};
for my $i (1 .. 40)
{
	my $t = coord_acquire($old, 'appdb', "batch-$i", '1 hour');
	coord_sql($old, 'appdb', "SELECT dlock_release('batch-$i', $t)") if $i % 2;
	push @issued, $t;
}
ok(wait_for_expiry($old, 'acct:4', 'appdb', 'coord'),
	'old cluster: the short lease expired');

$old->safe_psql('legacy', q{CREATE EXTENSION dlock VERSION '1.0'});
my $legacy_tok = $old->safe_psql('legacy',
	q{SELECT dlock_acquire('legacy-job', '1 hour')});
like($legacy_tok, qr/^\d+$/, 'legacy (1.0): a lease is granted');

my $max_issued = max(@issued);
my $rows_before = lease_rows($old, 'appdb', 'coord');
my $legacy_before = lease_rows($old, 'legacy');
my $acct_rows_sql =
  q{SELECT string_agg(id || ':' || fence_token, ',' ORDER BY id) FROM acct};
my $acct_before = coord_sql($old, 'appdb', $acct_rows_sql);
is( $old->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()}),
	'0',
	'old cluster: no other session (no waiter) before the upgrade');
$old->stop;

# The new cluster.  PostgreSQL 18's initdb enables data checksums by
# default; the old cluster has none, and pg_upgrade needs both alike.
my @initdb_extra = $new_major >= 18 ? ('--no-data-checksums') : ();
$new->init(extra => \@initdb_extra);
$new->append_conf('postgresql.conf', $preload);

# pg_upgrade writes its scripts into the current directory.
my $workdir = File::Temp->newdir('pg_upgrade_XXXX',
	DIR => $PostgreSQL::Test::Utils::tmp_check);
my $old_bindir = $old->config_data('--bindir');
my $new_bindir = $new->config_data('--bindir');
my @upgrade = (
	"$new_bindir/pg_upgrade", '--no-sync',
	'-d', $old->data_dir, '-D', $new->data_dir,
	'-b', $old_bindir, '-B', $new_bindir,
	'-s', $new->host, '-p', $old->port, '-P', $new->port);
{
	chdir $workdir or die "chdir $workdir: $!";
	command_ok([ @upgrade, '--check' ], 'pg_upgrade --check passes');
	command_ok(\@upgrade, 'pg_upgrade 15 -> ' . $new_major);
	chdir $PostgreSQL::Test::Utils::tmp_check;
}
$new->start;

is($new->safe_psql('appdb', 'SHOW server_version_num') >= $new_major * 10000,
	1, "the new cluster runs PostgreSQL $new_major");
is($new->safe_psql('appdb',
		q{SELECT extversion FROM pg_extension WHERE extname = 'dlock'}),
	'1.2', 'appdb: dlock 1.2 is installed');
is(lease_rows($new, 'appdb', 'coord'), $rows_before,
	'appdb: every lease is there as it was');
is(coord_sql($new, 'appdb', $acct_rows_sql), $acct_before, 'appdb: the fenced rows are there as they were');

# Live leases are honoured.
is(coord_sql($new, 'appdb', q{SELECT dlock_acquire('acct:1', '1 min') IS NULL}),
	't', 'acct:1 is still held: another acquire returns NULL');
is(coord_sql($new, 'appdb', q{SELECT dlock_acquire('job:nightly', '1 min') IS NULL}),
	't', 'job:nightly is still held');
is(coord_sql($new, 'appdb', "SELECT dlock_renew('acct:1', $tok{1}, '1 hour')"),
	't', 'the old token renews its lease');
is( coord_sql($new, 'appdb',
		"SET ROLE dlock_app; SELECT dlock_renew('acct:2', $tok{2}, '1 hour')"),
	't', "the ordinary role's old token renews its lease, as that role");
fails_with($new,
	"$path SELECT dlock_renew('acct:2', $tok{2}, '1 hour')",
	'00000', 'a superuser may renew any lease', dbname => 'appdb');

# Old tokens pass the fence; stale and foreign ones do not.
coord_sql($new, 'appdb',
	"UPDATE acct SET balance = balance + 1, fence_token = $tok{1} WHERE id = 1");
coord_sql($new, 'appdb',
	"SET ROLE dlock_app; UPDATE acct SET balance = balance + 1, fence_token = $tok{2} WHERE id = 2");
coord_sql($new, 'appdb',
	"UPDATE acct SET balance = balance + 1, fence_token = $tok{4} WHERE id = 4");
coord_sql($new, 'appdb',
	"UPDATE job SET state = 'upgraded', fence_token = $tok{night} WHERE name = 'nightly'");
is( coord_sql($new, 'appdb', 'SELECT string_agg(balance::text, \',\' ORDER BY id) FROM acct'),
	'101,101,100,101,100',
	"old tokens pass the 'latest' fence (live and merely expired leases)");
is(coord_sql($new, 'appdb', q{SELECT state FROM job WHERE name = 'nightly'}),
	'upgraded', "the live lease's old token passes the 'live' fence");
fails_with($new,
	"$path UPDATE acct SET balance = 0, fence_token = $tok{'5a'} WHERE id = 5",
	'55T01', 'a token superseded before the upgrade is rejected',
	dbname => 'appdb');
fails_with($new,
	"$path UPDATE acct SET balance = 0, fence_token = $tok{1} WHERE id = 3",
	'55T01', 'a token of another lock is rejected', dbname => 'appdb');

# New tokens are above every token issued before the upgrade.
my $fresh = coord_acquire($new, 'appdb', 'after-upgrade', '1 hour');
cmp_ok($fresh, '>', $max_issued,
	"the first grant after the upgrade ($fresh) is above every earlier token ($max_issued)");
my $takeover = coord_acquire($new, 'appdb', 'acct:3', '1 hour');
cmp_ok($takeover, '>', $fresh, 'a takeover of a released lease gets a greater token still');
coord_sql($new, 'appdb', "UPDATE acct SET balance = 7, fence_token = $takeover WHERE id = 3");
fails_with($new,
	"$path UPDATE acct SET balance = 0, fence_token = $tok{3} WHERE id = 3",
	'55T01', "acct:3's token from before the upgrade is now stale",
	dbname => 'appdb');

# Waiting with preload works on the new server: a release wakes a waiter.
my $holder_tok = coord_acquire($new, 'appdb', 'handoff', '1 hour');
my $waiter = bg_session($new, 'waiter', 'appdb');
bg_start($waiter, "SELECT coord.dlock_acquire('handoff', '1 min', '5 min') > $holder_tok;");
my $wait_event = dlock_wait_event($new);
ok(waits_in_dlock($new, $waiter->{pid}, 'appdb'),
	"a waiter sleeps in dlock on the new server (wait event $wait_event)");
is(coord_sql($new, 'appdb', "SELECT dlock_release('handoff', $holder_tok)"),
	't', 'the holder releases');
my ($out, $state) = bg_finish($waiter);
is($state, '00000', 'the waiter returns');
like($out, qr/^t$/m, 'the waiter got a greater token');
bg_close($waiter);

# The 1.0 install updates in the new cluster.
$new->safe_psql('legacy', 'ALTER EXTENSION dlock UPDATE');
is( $new->safe_psql('legacy',
		q{SELECT extversion FROM pg_extension WHERE extname = 'dlock'}),
	'1.2',
	'legacy: ALTER EXTENSION dlock UPDATE from 1.0 after pg_upgrade');
is(lease_rows($new, 'legacy'), $legacy_before, 'legacy: its lease is there');
is( $new->safe_psql('legacy',
		q{SELECT dlock_acquire('legacy-job', '1 min') IS NULL}),
	't', 'legacy: its lease is still held');
my $legacy_next = $new->safe_psql('legacy',
	q{SELECT dlock_acquire('legacy-next', '1 min')});
cmp_ok($legacy_next, '>', $legacy_tok,
	'legacy: the next token is above the one from before the upgrade');

$new->stop;
done_testing();
