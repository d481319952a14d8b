#!/usr/bin/perl
#
# test/t/027_cli_status.pl
#	  dlock status of the dlock command-line tool (cli/status.c): the
#	  sessions waiting for leases (--waiters [NAME]) in every kind of
#	  call, the database's counters (--stats) after a scripted workload,
#	  JSON (--json) of the leases, the waiters and the counters, parsed and
#	  compared with the views, names that JSON must escape, the client
#	  encoding of JSON, a server without dlock preloaded, an extension
#	  older than 1.2, usage errors.
#
# Real processes against real servers, as in test/t/023_cli_commands.pl.
# The waiters are background psql sessions (bg_session) and one dlock
# acquire --wait, each waiting for a lease held for the whole part; every
# outcome is compared with the views themselves (dlock_waiters,
# dlock_stats, dlock_leases), not only with dlock's output.  Timings are
# not asserted (design.md §10): only the form of the durations, and
# bounds that only a broken dlock could miss.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use Encode ();
use JSON::PP ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockCli;
use DlockTest;

my $node = dlock_node('dlock_cli_status',
	preload => 1,
	setup => 'CREATE EXTENSION dlock');
my $conn = $node->connstr('postgres');
my $json = JSON::PP->new;

# dl runs dlock with -d $conn and the given arguments.
sub dl { return dlock_run([ '-d', $conn, @_ ]); }

# decode returns the JSON text $text decoded (undef, and a failed test,
# when it is not JSON).
sub decode
{
	my ($text, $what) = @_;
	my $v = eval { JSON::PP->new->utf8->decode($text) };
	ok(defined $v, "$what: the output is JSON") or diag("$@\n$text");
	return $v;
}

# A duration as dlock prints it: 750ms, 2.5s, 30s, 4m05s, 1h30m, 2d03h.
my $dur = qr/\d+ms|\d+(?:\.\d)?s|\d+m(?:\d\ds)?|\d+h(?:\d\dm)?|\d+d(?:\d\dh)?/;

# A name that JSON must escape: a quote, a backslash, a newline, a tab, a
# control character, and UTF-8 of two, three and four bytes (as bytes: it
# goes through the command line as it is).
my $odd = "we\"ird\\ \n\t\x01 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
my $odd_chars = Encode::decode('UTF-8', $odd);
# how the table shows it: control characters escaped, the rest as it is
my $odd_shown = "we\"ird\\ \\n\\t\\x01 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";

# ---------------------------------------------------------------------
# Usage errors: 64, a message and the usage; no server needed.
# ---------------------------------------------------------------------
for my $u (
	[ [ 'status', '--waiters', '--stats' ], qr/^dlock: --waiters and --stats cannot be combined$/m ],
	[ [ 'status', '--stats', 'x' ], qr/^dlock: --stats takes no NAME/m ],
	[ [ 'status', '--waiters', 'a', 'b' ], qr/^dlock: too many arguments \("b"\)/m ],
	[ [ 'status', '--stats=yes' ], qr/^dlock: option --stats takes no value$/m ],
	[ [ 'status', '--json=1' ], qr/^dlock: option --json takes no value$/m ],
	[ [ 'acquire', '--json', 'x' ], qr/^dlock: option --json does not apply to dlock acquire$/m ],
	[ [ 'release', '--waiters', 'x', '1' ], qr/^dlock: option --waiters does not apply to dlock release$/m ],
	[ [ '--stats', 'status' ], qr/^dlock: option --stats must follow the command$/m ],
	[ [ 'status', '--waiters', '' ], qr/^dlock: NAME must not be empty$/m ])
{
	my ($args, $re) = @$u;
	my $h = dlock_run([ '-d', $conn, @$args ]);
	is($h->{rc}, 64, "usage error (@$args): exit 64");
	like($h->{stderr}, $re, "usage error (@$args): the message");
	like($h->{stderr}, qr/^Usage: dlock /m, "usage error (@$args): the usage");
	is($h->{stdout}, '', "usage error (@$args): nothing on stdout");
}

# ---------------------------------------------------------------------
# The leases as JSON.
# ---------------------------------------------------------------------
my $h = dl('acquire', '--ttl', '1h', '--owner', "owner \"of\"\n$odd", $odd);
is($h->{rc}, 0, 'the odd name: acquired');
my $odd_token = $h->{stdout} =~ s/\n//r;
is(dl('acquire', '--ttl', '1h', 'q')->{rc}, 0, 'q: acquired');
my $ended = dl('acquire', '--ttl', '1h', 'ended')->{stdout} =~ s/\n//r;
is(dl('release', 'ended', $ended)->{rc}, 0, 'ended: acquired and released');

$h = dl('status', '--json');
is($h->{rc}, 0, 'status --json: exit 0');
like($h->{stdout}, qr/\A\[\n(?:\{.*\},\n)*\{.*\}\n\]\n\z/,
	'status --json: an array, one object per line');
my $leases = decode($h->{stdout}, 'status --json');
my @rows = split /\n/,
  sql(q{SELECT lock_name = 'q', token, released, live FROM dlock_leases ORDER BY lock_name});
is(scalar(@$leases), scalar(@rows), 'status --json: one object per lease');
is_deeply(
	[ sort keys %{ $leases->[0] } ],
	[
		sort qw(lock_name token owner holder_role acquired_at renewed_at expires_at
		  released live expires_in_ms)
	],
	'status --json: the columns of dlock_leases, and expires_in_ms');
my ($o) = grep { $_->{lock_name} eq $odd_chars } @$leases;
ok($o, 'status --json: the odd name comes back as it is') or diag($h->{stdout});
is($o->{token}, $odd_token, 'status --json: its token');
is($o->{owner}, Encode::decode('UTF-8', "owner \"of\"\n$odd"), 'status --json: its owner label, escaped and back');
ok(JSON::PP::is_bool($o->{live}) && $o->{live} && !$o->{released},
	'status --json: live and released are booleans');
like($h->{stdout}, qr/"token": $odd_token,/, 'status --json: the token is a number');
cmp_ok($o->{expires_in_ms}, '>', 3_000_000, 'status --json: expires_in_ms, about an hour');
like($o->{expires_at}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?[+-]\d\d:\d\d$/,
	'status --json: timestamps in ISO 8601');
like(
	$h->{stdout},
	qr/"lock_name": "we\\"ird\\\\ \\n\\t\\u0001 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"/,
	'status --json: quote, backslash, newline, tab and control character escaped, UTF-8 as it is');
my ($e) = grep { $_->{lock_name} eq 'ended' } @$leases;
ok(!$e->{live} && $e->{released} && $e->{expires_in_ms} <= 0,
	'status --json: an ended lease, with a negative expires_in_ms');

$h = dl('status', '--json', 'q');
is($h->{rc}, 0, 'status --json NAME of a live lease: exit 0');
is(scalar(@{ decode($h->{stdout}, 'status --json NAME') }), 1, 'status --json NAME: one lease');
$h = dl('status', '--json', 'ended');
is($h->{rc}, 1, 'status --json NAME of an ended lease: exit 1');
is(decode($h->{stdout}, 'status --json ended')->[0]{token}, $ended,
	'status --json NAME of an ended lease: shows it');
$h = dl('status', '--json', 'never-acquired');
is($h->{rc}, 1, 'status --json NAME never acquired: exit 1');
is($h->{stdout}, "[]\n", 'status --json NAME never acquired: an empty array');

# The table is as it was.
$h = dl('status');
is($h->{rc}, 0, 'status: exit 0');
like($h->{stdout}, qr/^NAME\s+TOKEN\s+HOLDER\s+ROLE\s+EXPIRES IN\s+LIVE\n/, 'status: the header');
like($h->{stdout}, qr/^ended\s+$ended\s+.*released $dur ago\s+no$/m, 'status: the ended lease');
like($h->{stdout}, qr/^\Q$odd_shown\E\s+$odd_token\s+owner "of"\\nwe/m,
	'status: the odd name and owner, control characters escaped');

# ---------------------------------------------------------------------
# The waiters.
# ---------------------------------------------------------------------
sql('CREATE ROLE alice');
is(dl('acquire', '--ttl', '1h', 'r')->{rc}, 0, 'r: acquired');
is(dl('acquire', '--ttl', '1h', '--slots', '2', 's')->{rc}, 0, 's:1: acquired');
is(dl('acquire', '--ttl', '1h', '--slots', '2', 's')->{rc}, 0, 's:2: acquired');

# Each waiter starts once the one before it is queued, so that the
# queue's order is known.
my %w;
my @waiters = (
	[ 'q1',  "SELECT dlock_acquire('q', '1 min', '10 min')" ],
	[ 'q2',  "SET ROLE alice; SELECT dlock_acquire('q', '1 min', '10 min')" ],
	[ 'all', "SELECT dlock_acquire_all(ARRAY['free', 'r'], '1 min', '10 min')" ],
	[ 'any', "SELECT * FROM dlock_acquire_any(ARRAY['s:1', 's:2'], '1 min', '10 min')" ]);
for my $i (0 .. $#waiters)
{
	my ($tag, $call) = @{ $waiters[$i] };
	$w{$tag} = bg_session($node, "w-$tag");
	bg_start($w{$tag}, "$call;");
	ok($node->poll_query_until('postgres', 'SELECT count(*) FROM dlock_waiters', $i + 1),
		"waiter $tag is queued");
}
# a dlock acquire --wait: the waiter of the odd name
my $cli_waiter = dlock_start(
	[ '-d', "$conn application_name=cli-waiter", 'acquire', '--wait', '10m', $odd ]);
ok($node->poll_query_until('postgres', 'SELECT count(*) FROM dlock_waiters', 5),
	'the dlock acquire --wait is queued');
my $cli_pid = sql(q{SELECT pid FROM pg_stat_activity WHERE application_name = 'cli-waiter'});
# a waiter in another database, which --waiters in this one never shows
sql('CREATE DATABASE other');
$node->safe_psql('other', q{CREATE EXTENSION dlock; SELECT dlock_acquire('q', '1 hour')});
$w{other} = bg_session($node, 'w-other', 'other');
bg_start($w{other}, "SELECT dlock_acquire('q', '1 min', '10 min');");
ok( $node->poll_query_until(
		'other', 'SELECT count(*) FROM dlock_waiters', 1),
	'the waiter in the other database is queued');

$h = dl('status', '--waiters');
is($h->{rc}, 0, 'status --waiters: exit 0');
my @lines = split /\n/, $h->{stdout};
like($lines[0], qr/^\s*PID  NAME\s+KIND\s+POSITION  WAITING\s+WAIT LEFT  ROLE$/, 'status --waiters: the header');
is(scalar(@lines), 6, 'status --waiters: a line per waiter of this database (5)');
my %expect = (
	q1 => [ $w{q1}{pid}, 'q', 'acquire', '1', 'postgres' ],
	q2 => [ $w{q2}{pid}, 'q', 'acquire', '2', 'alice' ],
	all => [ $w{all}{pid}, 'r', 'all', '1', 'postgres' ],
	any => [ $w{any}{pid}, 's:1', 'any', '-', 'postgres' ],
	cli => [ $cli_pid, $odd_shown, 'acquire', '1', 'postgres' ]);
for my $tag (sort keys %expect)
{
	my ($pid, $name, $kind, $pos, $role) = @{ $expect{$tag} };
	my ($line) = grep { /^\s*$pid  / } @lines;
	like(
		$line // '',
		qr/^\s*$pid  \Q$name\E\s+$kind\s+$pos  ($dur)\s+($dur)\s+$role$/,
		"status --waiters: $tag: pid, name, kind, position, waited, left, role");
	# the columns are aligned with the header (PID and POSITION to the right)
	my ($pid_col, $name_col) = ($line // '') =~ /^(\s*\d+)(  )/ ? ($1, "$1$2") : ('', '');
	is(length($name_col), index($lines[0], 'NAME'), "status --waiters: $tag: NAME under its header");
	is(length($pid_col), index($lines[0], 'PID') + 3,
		"status --waiters: $tag: PID right-aligned under its header");
}
my @names = map { (/^\s*\d+  (\S+)/)[0] } @lines[ 1 .. $#lines ];
is_deeply(
	[ grep { $_ eq 'q' } @names ],
	[ 'q', 'q' ],
	'status --waiters: both waiters of q');
like($h->{stdout}, qr/^\s*$w{q1}{pid}  q .*\n\s*$w{q2}{pid}  q /m, 'status --waiters: q1 before q2: queue order');
unlike($h->{stdout}, qr/^\s*$w{other}{pid} /m, 'status --waiters: not the waiter of another database');
my ($left) = $h->{stdout} =~ /^\s*$w{q1}{pid}  q\s+acquire\s+1  $dur\s+($dur)/m;
like($left, qr/^(?:9m\d\ds|10m)$/, 'status --waiters: WAIT LEFT of a 10-minute wait');

# filtered by NAME
$h = dl('status', '--waiters', 'q');
is($h->{rc}, 0, 'status --waiters q: exit 0');
@lines = split /\n/, $h->{stdout};
is(scalar(@lines), 3, 'status --waiters q: the header and the two waiters of q');
like($lines[1], qr/^\s*$w{q1}{pid}  q\s+acquire\s+1 /, 'status --waiters q: q1 first');
like($lines[2], qr/^\s*$w{q2}{pid}  q\s+acquire\s+2 /, 'status --waiters q: q2 second');
$h = dl('status', '--waiters', $odd);
like($h->{stdout}, qr/\A[^\n]*\n\s*$cli_pid  \Q$odd_shown\E\s[^\n]*\n\z/,
	'status --waiters NAME: the odd name, escaped, one line');
$h = dl('status', '--waiters', 'nobody');
is($h->{rc}, 0, 'status --waiters NAME without waiters: exit 0');
is($h->{stdout} =~ tr/\n//, 1, 'status --waiters NAME without waiters: the header only');

# as JSON, compared with the view
$h = dl('status', '--waiters', '--json');
is($h->{rc}, 0, 'status --waiters --json: exit 0');
my $ws = decode($h->{stdout}, 'status --waiters --json');
is(scalar(@$ws), 5, 'status --waiters --json: five waiters');
is_deeply(
	[ sort keys %{ $ws->[0] } ],
	[
		sort qw(pid database role lock_name kind names waiting_since wait_until position
		  waiting_ms wait_left_ms attempts)
	],
	'status --waiters --json: the columns of dlock_waiters, waiting_ms and wait_left_ms');
my $view = sql(
	q{SELECT string_agg(concat_ws('|', pid, database, role, kind, names, position,
	                              lock_name = 'q' OR lock_name = 'r' OR lock_name = 's:1'),
	                    ',' ORDER BY pid) FROM dlock_waiters});
is( join(',',
		map { join('|', @$_{qw(pid database role kind names)}, $_->{position} // (), $_->{lock_name} =~ /^(?:q|r|s:1)$/ ? 't' : 'f') }
		  sort { $a->{pid} <=> $b->{pid} } @$ws),
	$view,
	'status --waiters --json: pid, database, role, kind, names and position as in dlock_waiters');
my %by_pid = map { $_->{pid} => $_ } @$ws;
is($by_pid{$cli_pid}{lock_name}, $odd_chars, 'status --waiters --json: the odd name comes back as it is');
is($by_pid{ $w{all}{pid} }{names}, 2, 'status --waiters --json: names of the dlock_acquire_all call');
ok(!defined $by_pid{ $w{any}{pid} }{position}, 'status --waiters --json: position null for kind any');
like($h->{stdout}, qr/"position": null/, 'status --waiters --json: a JSON null');
like($h->{stdout}, qr/"pid": $w{q1}{pid}, /, 'status --waiters --json: pid is a number');
my $q1 = $by_pid{ $w{q1}{pid} };
ok( $q1->{waiting_ms} >= 0 && $q1->{waiting_ms} < 600_000
	  && $q1->{wait_left_ms} > 0 && $q1->{wait_left_ms} <= 600_000,
	'status --waiters --json: waiting_ms and wait_left_ms within the 10-minute wait');
like($q1->{wait_until}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?[+-]\d\d:\d\d$/,
	'status --waiters --json: wait_until in ISO 8601');
$h = dl('status', '--waiters', '--json', 'nobody');
is($h->{stdout}, "[]\n", 'status --waiters --json NAME without waiters: an empty array');
$h = dl('status', '--waiters', '--json', 'q');
is_deeply([ map { $_->{pid} } @{ decode($h->{stdout}, 'status --waiters --json q') } ],
	[ $w{q1}{pid}, $w{q2}{pid} ], 'status --waiters --json q: the two waiters of q, in order');

# The waiters end: the leases are released; each waiter gets its lease.
sql(q{SELECT dlock_break(lock_name) FROM dlock_leases WHERE live});
$node->safe_psql('other', q{SELECT dlock_break('q')});
is(dlock_wait($cli_waiter), 0, 'the dlock acquire --wait got its lease');
for my $tag (qw(q1 all any other))
{
	my ($out, $state) = bg_finish($w{$tag});
	is($state, '00000', "waiter $tag: done");
}
sql(q{SELECT dlock_break('q')});
my ($out, $state) = bg_finish($w{q2});
is($state, '00000', 'waiter q2: done');
bg_close($_) for values %w;
ok($node->poll_query_until('postgres', 'SELECT count(*) FROM dlock_waiters', 0), 'nobody waits');
is(dl('status', '--waiters')->{stdout} =~ tr/\n//, 1, 'status --waiters without waiters: the header only');

# ---------------------------------------------------------------------
# The counters, after a workload in a database of their own.
# ---------------------------------------------------------------------
sql('CREATE DATABASE statsdb');
$node->safe_psql('statsdb', 'CREATE EXTENSION dlock');
my $sconn = $node->connstr('statsdb');

# ds runs dlock on statsdb.
sub ds { return dlock_run([ '-d', $sconn, @_ ]); }

# before anything in it used dlock: no row yet
$h = ds('status', '--stats');
is($h->{rc}, 1, 'status --stats in a database that has not used dlock: exit 1');
is($h->{stdout}, '', 'status --stats in a database that has not used dlock: nothing on stdout');
like($h->{stderr}, qr/^dlock: no statistics for this database yet: nothing in it has used dlock since the server started$/m,
	'status --stats in a database that has not used dlock: says so');

my $ta = ds('acquire', '--ttl', '1h', 'a')->{stdout} =~ s/\n//r;
my $tb = ds('acquire', '--ttl', '1h', 'b')->{stdout} =~ s/\n//r;
my $tc = ds('acquire', '--ttl', '300ms', 'c')->{stdout} =~ s/\n//r;
ok($ta && $tb && $tc, 'workload: three acquires');
is(ds('renew', '--ttl', '1h', 'a', $ta)->{rc}, 0, 'workload: a renew');
is(ds('release', 'b', $tb)->{rc}, 0, 'workload: a release');
is(ds('renew', 'a', $ta + 1000)->{rc}, 1, 'workload: a renew that fails');
is(ds('release', 'b', $tb)->{rc}, 1, 'workload: a release that fails');
is(ds('acquire', 'a')->{rc}, 75, 'workload: a refused acquire');
is(ds('acquire', '--wait', '300ms', 'a')->{rc}, 75, 'workload: a wait that times out');
is(ds('acquire', 'b')->{rc}, 0, 'workload: an acquire after a release');
ok(wait_for_expiry($node, 'c', 'statsdb'),
	'workload: c expires');
is(ds('acquire', 'c')->{rc}, 0, 'workload: a takeover');

my %want = (
	grants_new => 3, grants_after_release => 1, takeovers => 1, refusals => 1,
	waits => 1, wait_timeouts => 1, renewals => 1, renewals_failed => 1,
	releases => 1, releases_failed => 1, breaks => 0, purged => 0,
	fence_latest_accepted => 0, fence_latest_rejected => 0,
	fence_live_accepted => 0, fence_live_rejected => 0,
	fence_seen_accepted => 0, fence_seen_rejected => 0);
my @columns = qw(datid datname grants_new grants_after_release takeovers refusals waits
  wait_timeouts renewals renewals_failed releases releases_failed breaks purged
  fence_latest_accepted fence_latest_rejected fence_live_accepted fence_live_rejected
  fence_seen_accepted fence_seen_rejected token_jumps stats_reset);

$h = ds('status', '--stats');
is($h->{rc}, 0, 'status --stats: exit 0');
@lines = split /\n/, $h->{stdout};
like($lines[0], qr/^COUNTER\s+VALUE$/, 'status --stats: the header');
is_deeply([ map { (split /\s+/)[0] } @lines[ 1 .. $#lines ] ],
	\@columns, "status --stats: a line per column of dlock_stats, in the view's order");
for my $c (sort keys %want)
{
	like($h->{stdout}, qr/^$c\s+$want{$c}$/m, "status --stats: $c is $want{$c}");
}
like($h->{stdout}, qr/^datname\s+statsdb$/m, 'status --stats: this database');
is(index($lines[1], (split /\s+/, $lines[1])[1]), index($lines[0], 'VALUE'),
	'status --stats: values under their header');

$h = ds('status', '--stats', '--json');
is($h->{rc}, 0, 'status --stats --json: exit 0');
like($h->{stdout}, qr/\A\{.*\}\n\z/, 'status --stats --json: one object, one line');
my $st = decode($h->{stdout}, 'status --stats --json');
is_deeply([ sort keys %$st ], [ sort @columns ], 'status --stats --json: every column of dlock_stats');
is_deeply({ map { $_ => $st->{$_} } keys %want }, \%want, 'status --stats --json: the counters of the workload');
is( join('|', map { $st->{$_} } grep { $_ ne 'stats_reset' } @columns),
	$node->safe_psql('statsdb',
		'SELECT ' . join(', ', grep { $_ ne 'stats_reset' } @columns)
		  . ' FROM dlock_stats WHERE datname = current_database()'),
	'status --stats --json: every value as in dlock_stats');
like($h->{stdout}, qr/\A\{"datid": \d+, "datname": "statsdb", "grants_new": 3, /,
	'status --stats --json: datid and the counters are numbers, in the view\'s order');
like($h->{stdout}, qr/"datname": "statsdb"/, 'status --stats --json: datname is a string');
like($st->{stats_reset}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?[+-]\d\d:\d\d$/,
	'status --stats --json: stats_reset in ISO 8601');

# the counters are the database's: statsdb's workload is not postgres's
my $pg = decode(dl('status', '--stats', '--json')->{stdout}, 'status --stats --json (postgres)');
is($pg->{datname}, 'postgres', "status --stats in postgres: postgres's row");
isnt($pg->{grants_new}, $st->{grants_new}, "status --stats in postgres: postgres's counters");

# after dlock_stats_reset()
$node->safe_psql('statsdb', 'SELECT dlock_stats_reset()');
$st = decode(ds('status', '--stats', '--json')->{stdout}, 'status --stats --json after a reset');
is_deeply({ map { $_ => $st->{$_} } keys %want }, { map { $_ => 0 } keys %want },
	'status --stats after dlock_stats_reset(): every counter 0');

# ---------------------------------------------------------------------
# The client encoding of JSON is UTF8, whatever PGCLIENTENCODING says; a
# byte that is not UTF-8 (a SQL_ASCII database) becomes U+FFFD.
# ---------------------------------------------------------------------
sql(q{CREATE DATABASE latin1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0});
sql(q{CREATE DATABASE bytes ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0});
$node->safe_psql($_, 'CREATE EXTENSION dlock') for qw(latin1 bytes);
$h = dlock_run([ '-d', $node->connstr('latin1'), 'acquire', "caf\xc3\xa9" ],
	env => { PGCLIENTENCODING => 'UTF8' });
is($h->{rc}, 0, 'LATIN1 database: a name with an accent, sent as UTF-8');
$h = dlock_run([ '-d', $node->connstr('latin1'), 'status' ], env => { PGCLIENTENCODING => 'LATIN1' });
like($h->{stdout}, qr/^caf\xe9 /m, 'LATIN1 database: the table is in the client encoding (LATIN1)');
$h = dlock_run([ '-d', $node->connstr('latin1') . ' client_encoding=LATIN1', 'status', '--json' ],
	env => { PGCLIENTENCODING => 'LATIN1' });
like($h->{stdout}, qr/"lock_name": "caf\xc3\xa9"/, 'LATIN1 database: JSON is UTF-8 all the same');
$h = dlock_run([ '-d', $node->connstr('bytes'), 'acquire', "bad\xff\xc3" ]);
is($h->{rc}, 0, 'SQL_ASCII database: a name that is not UTF-8');
$h = dlock_run([ '-d', $node->connstr('bytes'), 'status', '--json' ]);
like($h->{stdout}, qr/"lock_name": "bad\\ufffd\\ufffd"/, 'SQL_ASCII database: each stray byte is \ufffd in JSON');
is(decode($h->{stdout}, 'status --json of a SQL_ASCII database')->[0]{lock_name},
	"bad\x{fffd}\x{fffd}", 'SQL_ASCII database: valid JSON');

# ---------------------------------------------------------------------
# --schema: the extension in a schema off the search_path, whose name
# needs quoting (PostgreSQL refuses quotes in an extension's schema).
# ---------------------------------------------------------------------
sql('CREATE DATABASE coord');
$node->safe_psql('coord', q{CREATE SCHEMA "Co ord"; CREATE EXTENSION dlock SCHEMA "Co ord"});
my @coord = ('-d', $node->connstr('coord'), '--schema', 'Co ord');
is(dlock_run([ @coord, 'acquire', 'in-coord' ])->{rc}, 0, '--schema: acquired');
$h = dlock_run([ @coord, 'status', '--stats', '--json' ]);
is($h->{rc}, 0, '--schema: status --stats --json: exit 0');
like($h->{stdout}, qr/"datname": "coord", "grants_new": 1, /, '--schema: status --stats --json: the counters');
$h = dlock_run([ @coord, 'status', '--waiters', '--json' ]);
is($h->{stdout}, "[]\n", '--schema: status --waiters --json: nobody waits');
$h = dlock_run([ @coord, 'status', '--json' ]);
like($h->{stdout}, qr/"lock_name": "in-coord"/, '--schema: status --json: the lease');
$h = dlock_run([ '-d', $node->connstr('coord'), 'status', '--stats' ]);
is($h->{rc}, 70, 'no --schema, extension off the search_path: status --stats exits 70');
like($h->{stderr}, qr/--schema names its schema/, 'with a hint about --schema');

# ---------------------------------------------------------------------
# An extension older than 1.2: the views are missing.
# ---------------------------------------------------------------------
sql('CREATE DATABASE old_dlock');
$node->safe_psql('old_dlock', q{CREATE EXTENSION dlock VERSION '1.1'});
for my $opt ('--waiters', '--stats')
{
	$h = dlock_run([ '-d', $node->connstr('old_dlock'), 'status', $opt ]);
	is($h->{rc}, 70, "extension 1.1: status $opt exits 70");
	like($h->{stderr}, qr/in version 1\.2 or later \(--waiters and --stats need it\)/,
		"extension 1.1: status $opt: the hint names the version needed");
}
is(dlock_run([ '-d', $node->connstr('old_dlock'), 'status', '--json' ])->{stdout}, "[]\n",
	'extension 1.1: status --json works');

# ---------------------------------------------------------------------
# Without shared_preload_libraries: no queues, no counters.  The same
# cluster, restarted without dlock preloaded (the last setting in the
# file wins).
# ---------------------------------------------------------------------
$node->append_conf('postgresql.conf', "shared_preload_libraries = ''\n");
$node->restart;
my $plain = $node;
my $pconn = $plain->connstr('postgres');
is(dlock_run([ '-d', $pconn, 'acquire', '--ttl', '1h', 'p' ])->{rc}, 0, 'no preload: p acquired');
my $poller = bg_session($plain, 'poller');
bg_start($poller, q{SELECT dlock_acquire('p', '1 min', '10 min');});
ok( $plain->poll_query_until(
		'postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE 'SELECT dlock_acquire(''p''%' AND state = 'active'}),
	'no preload: a session waits (polling)');
$h = dlock_run([ '-d', $pconn, 'status', '--waiters' ]);
is($h->{rc}, 0, 'no preload: status --waiters exits 0');
is($h->{stdout} =~ tr/\n//, 1, 'no preload: status --waiters shows no waiter (they poll, unqueued)');
for my $args ([ 'status', '--stats' ], [ 'status', '--stats', '--json' ])
{
	$h = dlock_run([ '-d', $pconn, @$args ]);
	is($h->{rc}, 1, "no preload: @$args exits 1");
	is($h->{stdout}, '', "no preload: @$args prints nothing on stdout");
	like($h->{stderr}, qr/^dlock: no statistics for this database: dlock is not in shared_preload_libraries, and dlock_stats counts only with it$/m,
		"no preload: @$args says why on stderr");
}
# a role that may not read shared_preload_libraries gets both reasons
$plain->safe_psql('postgres', 'CREATE ROLE bob LOGIN');
$h = dlock_run([ '-d', "$pconn user=bob", 'status', '--stats' ]);
is($h->{rc}, 1, 'no preload, an ordinary role: status --stats exits 1');
like($h->{stderr}, qr/^dlock: no statistics for this database: dlock_stats has a row for a database only when dlock is in shared_preload_libraries and the database has used dlock since the server started$/m,
	'no preload, an ordinary role: the message names both reasons');
$plain->safe_psql('postgres', q{SELECT dlock_break('p')});
($out, $state) = bg_finish($poller);
is($state, '00000', 'no preload: the poller got its lease');
bg_close($poller);
$plain->stop;

done_testing();
