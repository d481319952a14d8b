#!/usr/bin/perl
#
# test/t/023_cli_commands.pl
#	  The one-shot commands of the dlock command-line tool (cli/dlock.c):
#	  acquire, renew, release and status, their exit statuses and
#	  messages; durations; the connection (-d, the PG* environment,
#	  --schema); --help and --version; an interrupted waiting acquire.
#
# Every outcome is checked against the lease rows the server keeps
# (dlock_leases), not only against dlock's output.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use File::Basename qw(dirname);
use Time::HiRes ();
use DlockCli;
use DlockTest;

my $node = dlock_node('dlock_cli_commands',
	setup => 'CREATE EXTENSION dlock');
my $conn = $node->connstr('postgres');

# dl runs dlock with -d $conn and the given arguments.
sub dl { return dlock_run([ '-d', $conn, @_ ]); }

# acquire / renew / release / status
my $h = dl('acquire', '--ttl', '1m', 'deploy');
is($h->{rc}, 0, 'acquire: exit 0');
like($h->{stdout}, qr/^[1-9][0-9]*\n\z/, 'acquire: prints the token and nothing else');
my $token = $h->{stdout} =~ s/\n//r;
is( sql(
		"SELECT token, live, expires_at - acquired_at, owner FROM dlock_leases WHERE lock_name = 'deploy'"
	),
	"$token|t|00:01:00|dlock acquire " . `hostname` =~ s/\n//r . " ppid $$",
	'acquire: the lease row has the token, the ttl and the default owner (the caller\'s pid)');

$h = dl('acquire', 'deploy');
is($h->{rc}, 75, 'acquire of a held name: exit 75');
is($h->{stdout}, '', 'acquire of a held name: prints no token');
like($h->{stderr}, qr/^dlock: not acquired: "deploy" is held by "dlock acquire .*" \(token $token, role postgres, expires in \d/,
	'acquire of a held name: says who holds it');

$h = dl('acquire', '--wait', '400ms', 'deploy');
is($h->{rc}, 75, 'acquire --wait 400ms of a held name: exit 75');
cmp_ok($h->{elapsed}, '>=', 0.4, 'acquire --wait 400ms: waited');
like($h->{stderr}, qr/still held after waiting 400ms/, 'acquire --wait: says it waited');

$h = dl('status');
is($h->{rc}, 0, 'status: exit 0');
my @lines = split /\n/, $h->{stdout};
like($lines[0], qr/^NAME\s+TOKEN\s+HOLDER\s+ROLE\s+EXPIRES IN\s+LIVE$/, 'status: the header');
like($lines[1], qr/^deploy\s+$token\s+dlock acquire .* ppid $$\s+postgres\s+[0-9.]+s\s+yes$/,
	'status: the lease, with the seconds left');
is(index($lines[1], $token) + length($token), index($lines[0], 'TOKEN') + length('TOKEN'),
	'status: the token column is aligned under its header');

$h = dl('status', 'deploy');
is($h->{rc}, 0, 'status NAME of a live lease: exit 0');

$h = dl('renew', '--ttl', '2h', 'deploy', $token);
is($h->{rc}, 0, 'renew: exit 0');
is($h->{stdout} . $h->{stderr}, '', 'renew: silent');
is(sql("SELECT expires_at - renewed_at, token FROM dlock_leases WHERE lock_name = 'deploy'"),
	"02:00:00|$token", 'renew: the lease now expires 2h after the renewal, same token');

$h = dl('renew', 'deploy', $token + 1);
is($h->{rc}, 1, 'renew with a token that does not hold the lease: exit 1');
like($h->{stderr}, qr/^dlock: token \d+ does not hold a live lease on "deploy"/,
	'renew with a wrong token: says so');
is(sql("SELECT expires_at - renewed_at FROM dlock_leases WHERE lock_name = 'deploy'"),
	'02:00:00', 'renew with a wrong token: the lease is unchanged');

$h = dl('release', 'deploy', $token);
is($h->{rc}, 0, 'release: exit 0');
is(sql("SELECT token, released, live FROM dlock_leases WHERE lock_name = 'deploy'"),
	"$token|t|f", 'release: the lease ended, the row keeps the token');
$h = dl('release', 'deploy', $token);
is($h->{rc}, 1, 'release again: exit 1 (the token no longer holds it)');
like($h->{stderr}, qr/does not hold a live lease on "deploy"/, 'release again: says so');
$h = dl('renew', 'deploy', $token);
is($h->{rc}, 1, 'renew after release: exit 1');

$h = dl('status', 'deploy');
is($h->{rc}, 1, 'status NAME of a released lease: exit 1');
like($h->{stdout}, qr/^deploy\s+$token\s+.*released \d.* ago\s+no$/m,
	'status NAME of a released lease: shows when it ended');
$h = dl('status', 'never-acquired');
is($h->{rc}, 1, 'status NAME of a name never acquired: exit 1');
is($h->{stdout} =~ tr/\n//, 1, 'status NAME of a name never acquired: the header only');

# A token that cannot be written is given back.  stdout is a pipe whose
# reader is gone: dlock must not die of SIGPIPE with the lease held.
$h = dlock_run(
	[
		'-e',
		'pipe(my $r, my $w) or die; close $r; open(STDOUT, ">&", $w) or die; close $w; exec @ARGV or exit 251',
		dlock_path(), '-d', $conn, 'acquire', 'no-reader'
	],
	program => $^X);
is($h->{rc}, 70, 'acquire, stdout without a reader: exit 70');
like($h->{stderr}, qr/^dlock: could not write the token: Broken pipe$/m,
	'acquire, stdout without a reader: says so');
is(sql("SELECT released, live FROM dlock_leases WHERE lock_name = 'no-reader'"),
	't|f', 'acquire, stdout without a reader: the lease was released');
# stdout closed: the token must not land on whatever dlock opens next (its
# database connection).
$h = dlock_run([ '-c', 'exec "$0" "$@" >&-', dlock_path(), '-d', $conn, 'acquire', 'closed-stdout' ],
	program => '/bin/bash');
is($h->{rc}, 70, 'acquire, stdout closed: exit 70');
like($h->{stderr}, qr/^dlock: could not write the token: Bad file descriptor$/m,
	'acquire, stdout closed: says so');
is(sql("SELECT released, live FROM dlock_leases WHERE lock_name = 'closed-stdout'"),
	't|f', 'acquire, stdout closed: the lease was released');

# Durations
for my $d (
	[ '1m30s', '00:01:30' ], [ '500ms', '00:00:00.5' ], [ '2h', '02:00:00' ],
	[ '1.5s', '00:00:01.5' ], [ '45', '00:00:45' ], [ '1d', '1 day' ])
{
	my ($text, $interval) = @$d;
	$h = dl('acquire', '--ttl', $text, "dur-$text");
	is($h->{rc}, 0, "duration $text accepted");
	is(sql("SELECT expires_at - acquired_at FROM dlock_leases WHERE lock_name = 'dur-$text'"),
		$interval, "duration $text is $interval");
}
for my $bad ('', '10x', '-1s', '1 s', 's', '1.s5', '5ms3', '99999999999s', '1e99s',
	'999999999999d', '99999999999999999999ms', '0.0001s', '24855d1d')
{
	$h = dl('acquire', '--ttl', $bad, 'dur-bad');
	is($h->{rc}, 64, "duration \"$bad\" rejected: exit 64");
}
is(sql("SELECT count(*) FROM dlock_leases WHERE lock_name = 'dur-bad'"), '0',
	'rejected durations acquired nothing');

# The server's own checks: a ttl above dlock.max_ttl is the server's
# error (22023), exit 70.
$h = dl('acquire', '--ttl', '2d', 'too-long');
is($h->{rc}, 70, 'ttl above dlock.max_ttl: exit 70');
like($h->{stderr}, qr/\(SQLSTATE 22023\)/, "ttl above dlock.max_ttl: the server's error");

# Names are passed as parameters: quotes and control characters are just
# text; status shows one line per lease.
my $odd = "it's \"odd\"; DROP TABLE x; --\nline2";
$h = dl('acquire', $odd);
is($h->{rc}, 0, 'a name with quotes, a semicolon and a newline: acquired');
my $odd_token = $h->{stdout} =~ s/\n//r;
is(sql("SELECT token FROM dlock_leases WHERE lock_name = E'it''s \"odd\"; DROP TABLE x; --\\nline2'"),
	$odd_token, 'the odd name is stored as given');
$h = dl('status', $odd);
is($h->{rc}, 0, 'status of the odd name: exit 0');
like($h->{stdout}, qr/^it's "odd"; DROP TABLE x; --\\nline2\s+$odd_token\s/m,
	'status escapes the newline: one line per lease');
is(dl('release', $odd, $odd_token)->{rc}, 0, 'release of the odd name');

# Usage errors of the one-shot commands: 64.
for my $u (
	[ [ 'renew', 'x', 'abc' ],        qr/invalid TOKEN "abc"/ ],
	[ [ 'release', 'x', '0' ],        qr/invalid TOKEN "0"/ ],
	[ [ 'release', 'x' ],             qr/missing TOKEN/ ],
	[ [ 'acquire' ],                  qr/missing NAME/ ],
	[ [ 'acquire', 'a', 'b' ],        qr/too many arguments/ ],
	[ [ 'status', '--ttl', '1s' ],    qr/option --ttl does not apply to dlock status/ ],
	[ [ 'release', '--kill-after=1s', 'x', '1' ], qr/option --kill-after does not apply/ ],
	[ [ 'frobnicate' ],               qr/unknown command "frobnicate"/ ],
	[ [],                             qr/no command given/ ])
{
	my ($args, $re) = @$u;
	$h = dlock_run($args);
	is($h->{rc}, 64, "usage error (@$args): exit 64");
	like($h->{stderr}, qr/^dlock: .*$re/, "usage error (@$args): one-line message");
	like($h->{stderr}, qr/^Usage: |^Usage: dlock/m, "usage error (@$args): the usage");
}

# --help and --version
$h = dlock_run(['--help']);
is($h->{rc}, 0, '--help: exit 0');
for my $word (
	'dlock run', 'dlock acquire', 'dlock renew', 'dlock release', 'dlock status',
	'--ttl', '--wait', '--owner', '--kill-after', '--dbname', '--schema',
	'DLOCK_NAME', 'DLOCK_TOKEN', 'PGHOST', 'PGCONNECT_TIMEOUT', '500ms', '1h')
{
	ok(index($h->{stdout}, $word) >= 0, "--help mentions $word");
}
for my $status (0, 1, 64, 69, 70, 75, 76, 79, '128+S')
{
	like($h->{stdout}, qr/^  \Q$status\E\s/m, "--help documents exit status $status");
}
is(dlock_run([ 'run', '--help' ])->{stdout}, $h->{stdout}, 'dlock run --help: the same help');
$h = dlock_run(['--version']);
my ($release) =
  slurp(dirname(dirname(dlock_path())) . '/VERSION') =~ /^(\S+)$/m;
like($h->{stdout}, qr/^dlock \Q$release\E \(libpq \d+\.\d+\)\n\z/,
	"--version: one line, with the release of VERSION ($release)");
is($h->{rc}, 0, '--version: exit 0');

# The connection from the environment (no -d): PGHOST, PGPORT.
$h = dlock_run([ 'acquire', 'env-conn' ],
	env => { PGHOST => $node->host, PGPORT => $node->port, PGDATABASE => 'postgres' });
is($h->{rc}, 0, 'connection from PGHOST/PGPORT/PGDATABASE');
is(sql("SELECT token FROM dlock_leases WHERE lock_name = 'env-conn'"),
	$h->{stdout} =~ s/\n//r, 'the lease is in that database');
# -d with a database name only: host and port from the environment.
sql('CREATE DATABASE other');
$node->safe_psql('other', 'CREATE SCHEMA coord; CREATE EXTENSION dlock SCHEMA coord');
$h = dlock_run([ '-d', 'other', 'acquire', 'in-other' ],
	env => { PGHOST => $node->host, PGPORT => $node->port });
is($h->{rc}, 70, 'extension in a schema off the search_path: exit 70');
like($h->{stderr}, qr/--schema names its schema/, 'with a hint about --schema');
$h = dlock_run([ '-d', 'other', '--schema', 'coord', 'acquire', 'in-other' ],
	env => { PGHOST => $node->host, PGPORT => $node->port });
is($h->{rc}, 0, '-d DBNAME --schema SCHEMA: acquired');
is( $node->safe_psql('other', "SELECT token FROM coord.dlock_leases WHERE lock_name = 'in-other'"),
	$h->{stdout} =~ s/\n//r,
	'the lease is in that database and schema');
$h = dlock_run([ 'status', '-d', 'postgresql:///other?host=' . $node->host . '&port=' . $node->port,
	'--schema', 'coord', 'in-other' ]);
is($h->{rc}, 0, '-d URI: status of the lease in the other database');
like($h->{stdout}, qr/^in-other\s/m, '-d URI: shows it');

# An interrupted waiting acquire: SIGTERM cancels the wait on the server,
# dlock exits 143, and leaves no waiter behind that could take the lease
# later.
my $held = dl('acquire', '--ttl', '3s', 'busy')->{stdout} =~ s/\n//r;
my $w = dlock_start([ '-d', "$conn application_name=waiter", 'acquire', '--wait', '30s', 'busy' ]);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'waiter' AND state = 'active'"),
	'the waiting acquire is waiting on the server');
kill 'TERM', $w->{pid};
is(dlock_wait($w), 143, 'SIGTERM during a waiting acquire: exit 143');
like($w->{stderr}, qr/interrupted by SIGTERM while acquiring "busy"/, 'and says so');
is($w->{stdout}, '', 'no token printed');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'waiter'"),
	'the waiter left the server');
ok(wait_for_expiry($node, 'busy'),
	'the held lease expires');
Time::HiRes::sleep(0.2);
is(sql("SELECT token FROM dlock_leases WHERE lock_name = 'busy'"),
	$held, 'nobody took the lease after the interrupted waiter gave up');

$node->stop;
done_testing();
