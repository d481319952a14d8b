#!/usr/bin/perl
#
# test/t/008_crash_load.pl
#	  Crash under load (a token is strictly greater than every token the
#	  database issued before, for any name, also across crash-restart, and
#	  committed leases survive crash-restart: docs/guarantees.md, "Crash
#	  and restart").
#
# Six pgbench clients take and release leases on 200 names as fast as they
# can; the server is killed (stop 'immediate') while they run, and started
# again.  Three rounds on one node:
#
#   1. synchronous_commit = on, dlock not preloaded (each grant flushes the
#      token sequence's WAL itself, src/store.c);
#   2. synchronous_commit = off, not preloaded: the crash can lose the WAL
#      of committed grants;
#   3. synchronous_commit = off, dlock preloaded: grants skip that flush and
#      the first grant after every start jumps ahead (src/token.c).
#
# Each pgbench transaction: BEGIN; acquire a random name with a ttl of
# 20-300 ms; if granted, the client appends "S client name token" to the
# round's file with pgbench's \shell (the token was seen by a client,
# outside the database; one short line per echo, appended atomically) and
# inserts (round, name, token) into table granted; COMMIT; once COMMIT
# returned, "C client name token" goes to the file (the client knows the
# grant committed);
# then half of the time it releases the lease.  The grant and its granted
# row commit together or not at all.
#
# After each restart:
#   - granted has no token twice, and no token appears twice among all
#     the tokens clients saw (committed or not, all rounds);
#   - every granted row was seen by its client; with synchronous_commit =
#     on, every grant a client saw committed is in granted (none lost);
#   - for every name, its dlock_leases row carries exactly the greatest
#     token granted for it (so >= every recorded token), and no lease row
#     exists that no granted row accounts for;
#   - each client saw its tokens strictly increasing;
#   - the tokens granted after the restart (the next round, then a final
#     acquire) are greater than every token any client saw before the crash,
#     including grants that were lost with synchronous_commit = off.
# The number of grants committed and lost per round is printed, not
# asserted (it depends on timing).
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;
use IPC::Run;
use List::Util qw(max min);

my $clients = 6;
my $names = 200;

# A long walwriter delay keeps the WAL of asynchronous commits in memory
# longer, so that the crash is more likely to lose some.
my $node = dlock_node(
	'crash_load',
	conf => q{
max_connections = 30
checkpoint_timeout = '1h'
wal_writer_delay = '10s'
});
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION dlock;
CREATE TABLE granted (round int NOT NULL, name text NOT NULL, token bigint NOT NULL);
});

my $dir = $node->basedir;

# Every token a client saw, over all rounds: token => "round/client".
my %seen_by;
my @dup_seen;

# The greatest token any client saw before the last crash.
my $max_seen = 0;

# The tokens granted in each round (committed), for the next round's check.
my %granted_min;

# run_round runs the pgbench clients of round $round with $pgoptions and
# crashes the server while they run.
sub run_round
{
	my ($round, $pgoptions) = @_;
	my $script = "$dir/round$round.sql";
	my $out = "$dir/r$round";
	PostgreSQL::Test::Utils::append_to_file(
		$script, qq{
\\set n random(1, $names)
\\set ttl random(20, 300)
BEGIN;
SELECT coalesce(dlock_acquire('load:' || :n, :ttl * interval '1 millisecond', '0', 'client ' || :client_id), 0) AS tok \\gset
\\if :tok > 0
\\shell echo S :client_id :n :tok >> $out
INSERT INTO granted (round, name, token) VALUES ($round, 'load:' || :n, :tok);
\\endif
COMMIT;
\\if :tok > 0
\\shell echo C :client_id :n :tok >> $out
\\set rel random(0, 1)
\\if :rel = 1
SELECT dlock_release('load:' || :n, :tok);
\\endif
\\endif
});
	my ($stdout, $stderr) = ('', '');
	local $ENV{PGOPTIONS} = $pgoptions;
	my $h = IPC::Run::start(
		[
			'pgbench', '-n', '-c', $clients, '-j', 3, '-T', 30,
			'-f', $script, '-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', \$stdout, '2>', \$stderr,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));

	# Crash once the clients have committed a few hundred grants.
	$node->poll_query_until('postgres',
		"SELECT count(*) >= 300 FROM granted WHERE round = $round")
	  or die "round $round: the clients did not get going: $stderr";
	$node->stop('immediate');
	$h->finish;
	note "round $round: pgbench exit code " . ($? >> 8);
	like($stderr, qr/aborted|connection|terminat/i,
		"round $round: the crash cut the pgbench clients off");
	$node->start;
	return;
}

# client_files returns, for round $round, the tokens clients saw (list of
# [client, name, token] in each client's order) and those they saw
# committed (token => name).
sub client_files
{
	my ($round) = @_;
	my (@seen, %committed);
	my $f = "$dir/r$round";
	for my $line (split /\n/, PostgreSQL::Test::Utils::slurp_file($f))
	{
		my ($kind, $c, $n, $t) = split / /, $line;
		die "bad line in $f: $line" unless defined $t && $t =~ /^\d+$/;
		push @seen, [ $c, "load:$n", $t ] if $kind eq 'S';
		$committed{$t} = "load:$n" if $kind eq 'C';
	}
	return (\@seen, \%committed);
}

# check_round checks the state after the crash of round $round.
# $committed_kept says whether every grant a client saw committed must
# have survived (synchronous_commit = on).
sub check_round
{
	my ($round, $committed_kept) = @_;
	my ($seen, $committed) = client_files($round);
	my %granted = map { my ($n, $t) = split /\|/; ($t => $n) }
	  split /\n/,
	  $node->safe_psql('postgres',
		"SELECT name, token FROM granted WHERE round = $round");

	# Tokens the clients saw are unique over all rounds.
	for my $s (@$seen)
	{
		my $t = $s->[2];
		push @dup_seen, "$t ($seen_by{$t} and $round/$s->[0])"
		  if exists $seen_by{$t};
		$seen_by{$t} = "$round/$s->[0]";
	}
	is(scalar(@dup_seen), 0,
		"round $round: no token was handed out twice (clients saw "
		  . scalar(@$seen)
		  . " grants this round)")
	  or diag("tokens seen twice: @dup_seen");
	is( $node->safe_psql(
			'postgres',
			'SELECT count(*) FROM (SELECT token FROM granted GROUP BY token HAVING count(*) > 1) d'
		),
		'0',
		"round $round: table granted has no token twice");

	# Each client saw increasing tokens.
	my %last;
	my $backwards = 0;
	for my $s (@$seen)
	{
		$backwards++ if defined $last{ $s->[0] } && $s->[2] <= $last{ $s->[0] };
		$last{ $s->[0] } = $s->[2];
	}
	is($backwards, 0, "round $round: each client saw its tokens strictly increasing");

	# Committed grants against what the clients saw.
	my %seen_tok = map { ($_->[2] => $_->[1]) } @$seen;
	my @unseen = grep { !exists $seen_tok{$_} || $seen_tok{$_} ne $granted{$_} }
	  keys %granted;
	is(scalar(@unseen), 0,
		"round $round: every committed grant was seen by its client with its name");
	my @lost = grep { !exists $granted{$_} } keys %$committed;
	note "round $round: "
	  . scalar(@$seen)
	  . " grants seen, "
	  . scalar(keys %$committed)
	  . " seen committed, "
	  . scalar(keys %granted)
	  . " in table granted after the crash, "
	  . scalar(@lost)
	  . " committed grants lost";
	if ($committed_kept)
	{
		is(scalar(@lost), 0,
			"round $round: every grant whose COMMIT returned survived the crash")
		  or diag("lost: @lost[0 .. min(9, $#lost)]");
	}
	cmp_ok(scalar(keys %granted), '>=', 300,
		"round $round: at least 300 committed grants (the crash came under load)")
	  if $committed_kept;

	# The lease rows agree with the grants, over all rounds.
	is( $node->safe_psql(
			'postgres', q{
SELECT count(*)
  FROM (SELECT name, max(token) AS token FROM granted GROUP BY name) g
  FULL JOIN (SELECT lock_name, token FROM dlock_leases WHERE lock_name LIKE 'load:%') l
    ON l.lock_name = g.name
 WHERE l.token IS DISTINCT FROM g.token}),
		'0',
		"round $round: every name's lease row carries the greatest token granted for it, and no lease row is unaccounted for"
	);
	is( $node->safe_psql(
			'postgres', q{
SELECT count(*) FROM granted g JOIN dlock_leases l ON l.lock_name = g.name
 WHERE l.token < g.token}),
		'0',
		"round $round: no recorded grant has a greater token than its lease row");

	# Tokens after the restart: the next round's, compared there.
	$max_seen = max($max_seen, map { $_->[2] } @$seen);
	$max_seen = max($max_seen, keys %granted);
	return;
}

# first_tokens_above checks that the first tokens of round $round (read
# from the clients' files and table granted) are greater than every token
# seen before.
sub first_tokens_above
{
	my ($round) = @_;
	my ($seen) = client_files($round);
	my $first = min(map { $_->[2] } @$seen);
	cmp_ok($first, '>', $max_seen,
		"round $round: the smallest token after the restart ($first) is greater than every token a client saw before the crash ($max_seen)"
	);
	return;
}

run_round(1, '-c synchronous_commit=on');
check_round(1, 1);

run_round(2, '-c synchronous_commit=off');
first_tokens_above(2);
check_round(2, 0);

$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
$node->restart;
is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'dlock', 'round 3 runs with dlock preloaded');
run_round(3, '-c synchronous_commit=off');
first_tokens_above(3);
check_round(3, 0);

my $last = $node->safe_psql('postgres',
	"SELECT dlock_acquire('after-the-last-crash', '1 hour')");
cmp_ok($last, '>', $max_seen,
	"the token after the last crash ($last) is greater than every token a client saw before it ($max_seen)"
);

my @crashes = crash_lines($node);
is(scalar(@crashes), 0, 'no server process crashed')
  or diag(join("\n", @crashes));

$node->stop;
done_testing();
