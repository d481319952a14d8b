#!/usr/bin/perl
#
# test/t/002_standby.pl
#	  Leases on a streaming hot standby, and after its promotion
#	  (every function that changes leases fails early on a standby with
#	  25006 and the hint "Connect to the primary server."; dlock_leases
#	  stays readable: docs/guarantees.md, "Standby").
#
# The extension is created and leases are acquired on the primary after the
# standby was made, so all of it reaches the standby through WAL.  On the
# standby dlock_leases shows the primary's rows, and every function that
# changes leases fails early with SQLSTATE 25006 and the hint "Connect to
# the primary server." without changing anything anywhere.  Once promoted,
# the standby grants leases with tokens above every token the primary
# issued, and honours the leases it inherited.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;
use List::Util qw(max);

my $primary = PostgreSQL::Test::Cluster->new('dlock_primary');
$primary->init(allows_streaming => 1);
$primary->start;
$primary->backup('dlock_backup');

my $standby = PostgreSQL::Test::Cluster->new('dlock_standby');
$standby->init_from_backup($primary, 'dlock_backup', has_streaming => 1);
$standby->start;

$primary->safe_psql('postgres', 'CREATE EXTENSION dlock');

my %tok;
for my $name (qw(held-a held-b released expired))
{
	my $ttl = $name eq 'expired' ? '1 millisecond' : '1 hour';
	$tok{$name} = $primary->safe_psql('postgres',
		"SELECT dlock_acquire('$name', '$ttl', '0', 'primary-$name')");
	like($tok{$name}, qr/^[0-9]+$/, "primary: acquired $name");
}
is( $primary->safe_psql(
		'postgres', "SELECT dlock_release('released', $tok{released})"),
	't',
	'primary: released one lease');
wait_for_expiry($primary, 'expired')
  or die "the short lease did not expire";

my $max_primary_token = max(values %tok);

# The release committed without waiting for its WAL flush (an
# asynchronous commit, docs/guarantees.md): wait_for_replay waits for the
# primary's insert LSN, which covers its commit record (the write LSN
# need not).
wait_for_replay($primary, $standby);

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'the standby is in recovery');

my $rows_query = q{
SELECT lock_name, token, owner, holder_role, acquired_at, renewed_at,
       expires_at, released
  FROM dlock_leases ORDER BY lock_name};
my $primary_rows = $primary->safe_psql('postgres', $rows_query);

is($standby->safe_psql('postgres', $rows_query),
	$primary_rows, 'standby: dlock_leases shows the primary\'s rows');
is( $standby->safe_psql(
		'postgres',
		'SELECT lock_name, live FROM dlock_leases ORDER BY lock_name'),
	"expired|f\nheld-a|t\nheld-b|t\nreleased|f",
	'standby: live flags are judged as on the primary');

# standby_fails runs $sql on the standby and checks it fails with 25006
# and the hint to go to the primary.  The SQLSTATE is read both from the
# verbose error text and from psql's LAST_ERROR_SQLSTATE.
sub standby_fails
{
	my ($sql, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;

	my ($stdout, $stderr) = psql_error($standby, $sql);
	is($stdout, 'true 25006', "standby: $what fails with SQLSTATE 25006");
	like($stderr, qr/ERROR:  25006: leases cannot be changed during recovery/,
		"standby: $what reports 25006 in the error");
	like(
		$stderr,
		qr/^HINT:  Connect to the primary server\.$/m,
		"standby: $what hints to connect to the primary");
	return;
}

standby_fails("SELECT dlock_acquire('new-name', '1 minute')",
	'dlock_acquire of a new name');
standby_fails("SELECT dlock_acquire('released', '1 minute')",
	'dlock_acquire of a released name');
standby_fails("SELECT dlock_acquire('expired', '1 minute', '1 second')",
	'dlock_acquire with a wait');
standby_fails("SELECT dlock_acquire(NULL, NULL)",
	'dlock_acquire with NULL arguments (checked before the arguments)');
standby_fails("SELECT dlock_renew('held-a', $tok{'held-a'}, '1 hour')",
	'dlock_renew with the holding token');
standby_fails("SELECT dlock_renew('held-a', $tok{'held-a'} + 100, '1 hour')",
	'dlock_renew with a wrong token');
standby_fails("SELECT dlock_release('held-b', $tok{'held-b'})",
	'dlock_release with the holding token');
standby_fails("SELECT dlock_release('released', $tok{released})",
	'dlock_release of a released lease');
standby_fails("SELECT dlock_break('held-a')", 'dlock_break of a live lease');
standby_fails("SELECT dlock_break('no-such-name')",
	'dlock_break of an unknown name');

# Nothing changed, on either side.
is($standby->safe_psql('postgres', $rows_query),
	$primary_rows, 'standby: the failed calls changed nothing');
is($primary->safe_psql('postgres', $rows_query),
	$primary_rows, 'primary: the calls on the standby changed nothing');
is( $primary->safe_psql(
		'postgres',
		"SELECT count(*) FROM dlock_leases WHERE lock_name IN ('new-name', 'no-such-name')"
	),
	'0',
	'primary: no row for the names tried on the standby');

# Failover.  We waited for the standby to replay everything the primary
# did, so it has every lease and every token; the primary stops like a
# crashed server.  The async case, where the standby missed the primary's
# last acquisitions and a plain sequence would hand their tokens out again,
# is 006_failover.pl's (token jumps, src/token.c).
$primary->stop('immediate');
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die "the standby was not promoted";

my $new = $standby->safe_psql('postgres',
	"SELECT dlock_acquire('after-failover', '1 hour')");
like($new, qr/^[0-9]+$/, 'promoted: acquire of a new name works');
cmp_ok($new, '>', $max_primary_token,
	"promoted: new token $new is greater than every token of the primary ($max_primary_token)"
);

my $again = $standby->safe_psql('postgres',
	"SELECT dlock_acquire('released', '1 hour')");
like($again, qr/^[0-9]+$/, 'promoted: acquire of a released name works');
cmp_ok($again, '>', $new, "promoted: tokens keep increasing ($again)");

my $takeover = $standby->safe_psql('postgres',
	"SELECT dlock_acquire('expired', '1 hour')");
like($takeover, qr/^[0-9]+$/, 'promoted: takeover of an expired lease works');
cmp_ok($takeover, '>', $again, "promoted: tokens keep increasing ($takeover)");

is( $standby->safe_psql(
		'postgres', "SELECT dlock_acquire('held-a', '1 hour') IS NULL"),
	't',
	'promoted: a live lease from the primary still refuses acquirers');
is( $standby->safe_psql(
		'postgres', "SELECT dlock_renew('held-a', $tok{'held-a'}, '1 hour')"),
	't',
	'promoted: renew with the token the primary issued');
is( $standby->safe_psql(
		'postgres', "SELECT dlock_release('held-b', $tok{'held-b'})"),
	't',
	'promoted: release with the token the primary issued');
is( $standby->safe_psql(
		'postgres',
		"SELECT token, released, live FROM dlock_leases WHERE lock_name = 'held-b'"
	),
	"$tok{'held-b'}|t|f",
	'promoted: the released lease keeps the primary\'s token');
is($standby->safe_psql('postgres', "SELECT dlock_break('held-a')"),
	't', 'promoted: dlock_break works');

$standby->stop;
done_testing();
