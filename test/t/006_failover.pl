#!/usr/bin/perl
#
# test/t/006_failover.pl
#	  Fencing tokens and leases across failover to a streaming standby
#	  (tokens never repeat and never go backwards, also after promoting a
#	  standby, even an asynchronous one that missed the primary's last
#	  acquisitions; docs/guarantees.md, "Failover"; tracker issue 7).
#
# Four scenarios: an asynchronous and a synchronous standby, each with and
# without shared_preload_libraries = 'dlock'.  Each scenario:
#
#   1. A primary and a hot standby.  On the primary: the extension, a
#      table protected by dlock_fence ('latest' mode), leases in every
#      state (live, released, expired), protected rows written with their
#      tokens.  Once the standby has replayed all of it, the hot standby
#      answers dlock_leases with the primary's rows, and every function
#      that changes leases fails there with 25006 (002_standby.pl checks
#      messages and hints; here only the SQLSTATEs).
#   2. Async: the standby is stopped, so that it misses what follows.
#      Sync: it stays connected with synchronous_standby_names = '*' and
#      synchronous_commit = on, so every commit waits for it.
#      On the primary: forty more leases (a third of them released), then
#      the holder of acct:1 releases it and acquires it again (token B1,
#      the last token handed out) and writes its protected row with B1;
#      more than 32 tokens, so that the sequence's WAL record (logged 32
#      values ahead) that the standby has does not already cover them.
#      Last, a transaction acquires a lease and stays open.
#   3. The primary crashes (stop 'immediate'); the standby is started
#      (async) and promoted.
#   4. On the promoted standby:
#      - the first token is strictly greater than every token the old
#        primary ever handed out, including those that never reached the
#        standby and the open transaction's (the async case fails with a
#        plain sequence: the promoted standby resumes where its copy of
#        the sequence was; the tokens are printed in the test output);
#      - async: the promoted standby really missed the last acquisitions;
#        a new holder of acct:1 takes tokens until it has one >= B1, and
#        the old primary's holder of acct:1, which still believes it holds
#        it with B1, cannot write the protected row (55T01).  With a plain
#        sequence the new holder gets exactly B1, and the stale write lands;
#      - sync: every lease committed on the primary is there with the same
#        token and times (dlock_leases rows are equal), and every live one
#        is honoured: another acquire returns NULL, renew with its token
#        returns true, and its holder's fenced write is accepted;
#      - everything works: acquire, renew, release, break, purge, fenced
#        writes (a stale token rejected with 55T01, the current accepted),
#        a waiting acquire served at a release;
#      - after a restart of the promoted server, tokens are still greater.
#
# Then two failovers in a row, with and without preload, the second to a
# standby that never followed the first promoted one (see
# second_failover): its tokens must be greater than the first promoted
# standby's.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;
use List::Util qw(max);

# The extension, a table protected by dlock_fence, and burn_until(p_name,
# p_target, p_max), which takes lease p_name again and again (releasing it
# in between) until its token is at least p_target, p_max times at most,
# and returns the last token; the lease stays held.
my $setup_sql = q{
CREATE EXTENSION dlock;
CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL, fence_token bigint);
CREATE TRIGGER acct_fence BEFORE INSERT OR UPDATE ON acct FOR EACH ROW
  EXECUTE FUNCTION dlock_fence('acct:{id}', 'fence_token');
CREATE FUNCTION burn_until(p_name text, p_target bigint, p_max int)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  t bigint;
BEGIN
  FOR i IN 1 .. p_max LOOP
    t := dlock_acquire(p_name, '1 hour');
    IF t IS NULL THEN
      RAISE EXCEPTION 'lease % is held', p_name;
    END IF;
    EXIT WHEN t >= p_target OR i = p_max;
    PERFORM dlock_release(p_name, t);
  END LOOP;
  RETURN t;
END
$$;
};

# scenario runs the whole sequence above for $mode ('async' or 'sync'),
# with dlock preloaded when $preload.
sub scenario
{
	my ($mode, $preload) = @_;
	my $tag = "$mode" . ($preload ? ', preload' : ', no preload');
	my $id = $mode . ($preload ? '_preload' : '_plain');
	note "scenario: $tag";

	my $primary = PostgreSQL::Test::Cluster->new("${id}_primary");
	$primary->init(allows_streaming => 1);
	$primary->append_conf(
		'postgresql.conf', qq{
max_connections = 20
checkpoint_timeout = '1h'
@{[ $preload ? "shared_preload_libraries = 'dlock'" : '' ]}
});
	$primary->start;
	$primary->backup('b');
	my $standby = PostgreSQL::Test::Cluster->new("${id}_standby");
	$standby->init_from_backup($primary, 'b', has_streaming => 1);
	$standby->start;

	if ($mode eq 'sync')
	{
		$primary->safe_psql(
			'postgres', q{
ALTER SYSTEM SET synchronous_standby_names = '*';
ALTER SYSTEM SET synchronous_commit = on;
SELECT pg_reload_conf();
});
		$primary->poll_query_until('postgres',
			q{SELECT count(*) = 1 FROM pg_stat_replication WHERE sync_state = 'sync'})
		  or die "the standby did not become synchronous";
	}

	# Every token the primary hands out, committed or not: name => [tokens].
	my %issued;
	my $acquire = sub {
		my ($name, $ttl) = @_;
		my $t = $primary->safe_psql('postgres',
			"SELECT dlock_acquire('$name', '$ttl', '0', 'holder of $name')");
		die "acquire $name on the primary returned '$t'" unless $t =~ /^\d+$/;
		push @{ $issued{$name} }, $t;
		return $t;
	};

	# 1. The extension, a protected table and leases in every state.
	$primary->safe_psql('postgres', $setup_sql);
	my %tok;
	for my $i (1 .. 3)
	{
		$tok{"acct:$i"} = $acquire->("acct:$i", '1 hour');
		$primary->safe_psql('postgres',
			"INSERT INTO acct VALUES ($i, 100, $tok{\"acct:$i\"})");
	}
	$tok{released} = $acquire->('early-released', '1 hour');
	$primary->safe_psql('postgres',
		"SELECT dlock_release('early-released', $tok{released})");
	$tok{expired} = $acquire->('early-expired', '1 millisecond');
	wait_for_replay($primary, $standby);

	# The hot standby.
	is(lease_rows($standby), lease_rows($primary),
		"$tag: the hot standby's dlock_leases shows the primary's rows");
	for my $call (
		"dlock_acquire('new-name', '1 minute')",
		"dlock_acquire('early-released', '1 minute')",
		"dlock_renew('acct:1', $tok{'acct:1'}, '1 hour')",
		"dlock_release('acct:2', $tok{'acct:2'})",
		"dlock_break('acct:3')",
		"dlock_purge('0')")
	{
		fails_with($standby, "SELECT $call", '25006',
			"$tag: on the hot standby, $call");
	}
	fails_with(
		$standby,
		"UPDATE acct SET balance = 0, fence_token = $tok{'acct:1'} WHERE id = 1",
		'25006',
		"$tag: a fenced write on the hot standby");

	# 2. What the standby may miss.
	$standby->stop if $mode eq 'async';

	my @late;
	for my $i (1 .. 40)
	{
		my $t = $acquire->("late-$i", '1 hour');
		if ($i % 3 == 0)
		{
			$primary->safe_psql('postgres',
				"SELECT dlock_release('late-$i', $t)");
		}
		push @late, $t;
	}
	is( $primary->safe_psql(
			'postgres', "SELECT dlock_release('acct:1', $tok{'acct:1'})"),
		't',
		"$tag: the holder of acct:1 releases it");
	my $b1 = $acquire->('acct:1', '1 hour');
	$primary->safe_psql('postgres',
		"UPDATE acct SET balance = balance - 10, fence_token = $b1 WHERE id = 1"
	);
	my $open = $primary->background_psql('postgres');
	$open->query_safe('BEGIN');
	my $pending = $open->query_safe("SELECT dlock_acquire('pending', '1 hour')");
	push @{ $issued{pending} }, $pending;

	my $committed_rows = lease_rows($primary);
	my $max_old = max(map { @$_ } values %issued);
	note "$tag: tokens the old primary issued (name: tokens): "
	  . join(', ',
		map { "$_: @{$issued{$_}}" } sort { $issued{$a}[0] <=> $issued{$b}[0] }
		  keys %issued);

	# 3. Crash and failover.
	$primary->stop('immediate');
	$open->quit;
	$standby->start if $mode eq 'async';
	$standby->promote;
	$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die "the standby was not promoted";

	# 4. The promoted standby.
	if ($mode eq 'async')
	{
		is( $standby->safe_psql(
				'postgres',
				q{SELECT count(*) FROM dlock_leases WHERE lock_name LIKE 'late-%'}),
			'0',
			"$tag: the promoted standby missed the primary's last acquisitions");
	}
	else
	{
		is(lease_rows($standby), $committed_rows,
			"$tag: every lease committed on the primary is on the promoted standby, unchanged"
		);
	}

	my $first = $standby->safe_psql('postgres',
		"SELECT dlock_acquire('after-failover', '1 hour')");
	like($first, qr/^\d+$/, "$tag: promoted: acquire of a new name works");
	my @standby_tokens = ($first);
	cmp_ok($first, '>', $max_old,
		"$tag: promoted: first token $first is greater than every token the old primary issued (max $max_old, of which "
		  . "the last acquisitions $late[0]..$b1 and the uncommitted $pending)"
	) or diag("$tag: old primary's last tokens: @late $b1 $pending; "
		  . "first token of the promoted standby: $first");

	if ($mode eq 'async')
	{
		# The old primary's holder of acct:1 still believes it holds the
		# lease with token B1.  A new holder takes acct:1 on the promoted
		# standby, with as many tokens as it takes to reach B1.
		is($standby->safe_psql('postgres', "SELECT dlock_break('acct:1')"),
			't', "$tag: promoted: break acct:1 (live as of the standby's copy)");
		my $new1 = $standby->safe_psql('postgres',
			"SELECT burn_until('acct:1', $b1, 1000)");
		push @standby_tokens, $new1;
		cmp_ok($new1, '>=', $b1,
			"$tag: promoted: a new holder of acct:1 has token $new1 (>= $b1)");
		my ($state, $out, $err) = sqlstate_of($standby,
			"UPDATE acct SET balance = balance - 10, fence_token = $b1 WHERE id = 1"
		);
		is($state, '55T01',
			"$tag: promoted: the old primary's holder of acct:1 (token $b1) cannot write its row "
			  . "while the new holder has token $new1")
		  or diag("the stale write: $state $err");
		is( $standby->safe_psql(
				'postgres', 'SELECT balance, fence_token FROM acct WHERE id = 1'),
			"100|$tok{'acct:1'}",
			"$tag: promoted: the protected row is as the standby had it");
		$standby->safe_psql('postgres',
			"UPDATE acct SET balance = 1, fence_token = $new1 WHERE id = 1");
		is( $standby->safe_psql(
				'postgres', 'SELECT balance, fence_token FROM acct WHERE id = 1'),
			"1|$new1",
			"$tag: promoted: the new holder of acct:1 writes with its token");
	}
	else
	{
		# Every committed live lease is honoured.
		my @live = split /\n/,
		  $standby->safe_psql('postgres',
			q{SELECT lock_name, token FROM dlock_leases
   WHERE live AND lock_name <> 'after-failover' ORDER BY lock_name});
		my ($refused, $renewed) = (0, 0);
		for my $row (@live)
		{
			my ($name, $t) = split /\|/, $row;
			$refused++
			  if $standby->safe_psql('postgres',
				"SELECT dlock_acquire('$name', '1 minute') IS NULL") eq 't';
			$renewed++
			  if $standby->safe_psql('postgres',
				"SELECT dlock_renew('$name', $t, '1 hour')") eq 't';
		}
		is(scalar(@live), 3 + 40 - 13,
			"$tag: promoted: the live leases are acct:1..3 and the unreleased late-*");
		is($refused, scalar(@live),
			"$tag: promoted: every committed live lease refuses another acquirer");
		is($renewed, scalar(@live),
			"$tag: promoted: every committed live lease renews with its token");
		is( $standby->safe_psql(
				'postgres', "SELECT token FROM dlock_leases WHERE lock_name = 'acct:1'"),
			$b1,
			"$tag: promoted: acct:1 has the token B1 = $b1 acquired just before the crash"
		);
		$standby->safe_psql('postgres',
			"UPDATE acct SET balance = balance + 1, fence_token = $b1 WHERE id = 1"
		);
		is( $standby->safe_psql(
				'postgres', 'SELECT balance, fence_token FROM acct WHERE id = 1'),
			"91|$b1",
			"$tag: promoted: the holder of acct:1 keeps writing with token $b1");
		is( $standby->safe_psql(
				'postgres', "SELECT count(*) FROM dlock_leases WHERE lock_name = 'pending'"
			),
			'0',
			"$tag: promoted: the uncommitted acquire did not happen");
	}

	# Everything works on the promoted standby.  acct:2 is live with the
	# token the primary issued before the standby stopped.
	is( $standby->safe_psql(
			'postgres', "SELECT dlock_renew('acct:2', $tok{'acct:2'}, '1 hour')"),
		't',
		"$tag: promoted: renew acct:2 with the primary's token");
	$standby->safe_psql('postgres',
		"UPDATE acct SET balance = 50, fence_token = $tok{'acct:2'} WHERE id = 2"
	);
	is( $standby->safe_psql(
			'postgres', "SELECT dlock_release('acct:2', $tok{'acct:2'})"),
		't',
		"$tag: promoted: release acct:2");
	my $new2 = $standby->safe_psql('postgres',
		"SELECT dlock_acquire('acct:2', '1 hour')");
	push @standby_tokens, $new2;
	cmp_ok($new2, '>', $first, "$tag: promoted: acquire acct:2 again ($new2)");
	fails_with(
		$standby,
		"UPDATE acct SET balance = 0, fence_token = $tok{'acct:2'} WHERE id = 2",
		'55T01',
		"$tag: promoted: a write of acct 2 with the superseded token");
	$standby->safe_psql('postgres',
		"UPDATE acct SET balance = 60, fence_token = $new2 WHERE id = 2");
	is( $standby->safe_psql(
			'postgres', 'SELECT balance, fence_token FROM acct WHERE id = 2'),
		"60|$new2",
		"$tag: promoted: the write with the new token is accepted, the stale one changed nothing"
	);
	is($standby->safe_psql('postgres', "SELECT dlock_break('acct:3')"),
		't', "$tag: promoted: dlock_break of a lease the primary granted");
	cmp_ok($standby->safe_psql('postgres', "SELECT dlock_purge('0')"),
		'>=', 2, "$tag: promoted: dlock_purge deletes ended leases");
	is( $standby->safe_psql(
			'postgres',
			"SELECT count(*) FROM dlock_leases WHERE lock_name IN ('early-released', 'early-expired')"
		),
		'0',
		"$tag: promoted: the purged rows are gone");

	# A waiter is served at a release.
	my $held = $standby->safe_psql('postgres',
		"SELECT dlock_acquire('wait-here', '1 hour')");
	push @standby_tokens, $held;
	my $w = bg_session($standby, 'waiter');
	bg_start($w, "SELECT dlock_acquire('wait-here', '1 hour', '10 s');");
	ok( $standby->poll_query_until(
			'postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE pid = $w->{pid} AND wait_event_type = 'Extension'"
		),
		"$tag: promoted: a waiting acquire waits");
	is( $standby->safe_psql(
			'postgres', "SELECT dlock_release('wait-here', $held)"),
		't',
		"$tag: promoted: the holder releases");
	my ($got, $state) = bg_finish($w);
	bg_close($w);
	is($state, '00000', "$tag: promoted: the waiter's acquire succeeded");
	cmp_ok($got, '>', $held,
		"$tag: promoted: the waiter got a new token ($got) at the release");
	push @standby_tokens, $got;

	# A restart of the promoted server.
	$standby->restart;
	my $after = $standby->safe_psql('postgres',
		"SELECT dlock_acquire('after-restart', '1 hour')");
	cmp_ok($after, '>', max(@standby_tokens, $max_old),
		"$tag: after a restart of the promoted server, token $after is greater than all before"
	);

	$standby->stop;
	return;
}

# second_failover: two failovers in a row, the second to a standby that
# never followed the first promoted one.  Standbys S1 and S2 follow primary
# P.  P crashes; S1 is promoted and grants leases (one holder writes its
# protected row); S1 crashes too, before S2 followed it.  S2, which has
# only P's WAL, is promoted.  Without a WAL archive both promotions pick
# timeline 2, so S1 and S2 have the same system identifier, timeline and
# database: tokens that depend only on those repeat S1's.  S2's tokens
# must be greater than every token S1 issued, and S1's holder, which still
# believes it holds its lease, cannot write once S2 granted it again.
sub second_failover
{
	my ($preload) = @_;
	my $tag = 'second failover' . ($preload ? ', preload' : ', no preload');
	my $id = 'second' . ($preload ? '_preload' : '_plain');
	note "scenario: $tag";

	my $p = PostgreSQL::Test::Cluster->new("${id}_p");
	$p->init(allows_streaming => 1);
	$p->append_conf('postgresql.conf',
		$preload ? "shared_preload_libraries = 'dlock'\n" : "\n");
	$p->start;
	$p->safe_psql('postgres', $setup_sql);
	my $t0 =
	  $p->safe_psql('postgres', "SELECT dlock_acquire('acct:1', '1 second')");
	$p->safe_psql('postgres', "INSERT INTO acct VALUES (1, 100, $t0)");
	$p->backup('b');
	my @s;
	for my $i (1, 2)
	{
		$s[$i] = PostgreSQL::Test::Cluster->new("${id}_s$i");
		$s[$i]->init_from_backup($p, 'b', has_streaming => 1);
		$s[$i]->start;
	}
	$p->stop('immediate');

	# S2 is down while S1 takes over, so it never follows S1.
	$s[2]->stop;
	$s[1]->promote;
	$s[1]->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die "S1 was not promoted";
	wait_for_expiry($s[1], 'acct:1')
	  or die "the lease of acct:1 did not expire";
	my @s1 = map {
		$s[1]->safe_psql('postgres',
			"SELECT dlock_acquire('s1-$_', '1 hour')")
	} 1 .. 3;
	my $s1_acct =
	  $s[1]->safe_psql('postgres', "SELECT dlock_acquire('acct:1', '1 hour')");
	push @s1, $s1_acct;
	$s[1]->safe_psql('postgres',
		"UPDATE acct SET balance = 90, fence_token = $s1_acct WHERE id = 1");
	my $tli1 = $s[1]->safe_psql('postgres',
		'SELECT timeline_id FROM pg_control_checkpoint()');
	$s[1]->stop('immediate');

	$s[2]->start;
	$s[2]->promote;
	$s[2]->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die "S2 was not promoted";
	note "$tag: timelines: S1 $tli1, S2 "
	  . $s[2]->safe_psql('postgres',
		'SELECT timeline_id FROM pg_control_checkpoint()');
	my $first = $s[2]->safe_psql('postgres',
		"SELECT dlock_acquire('s2-1', '1 hour')");
	cmp_ok($first, '>', max(@s1),
		"$tag: S2's first token $first is greater than every token S1 issued (@s1)"
	);

	# S1's holder of acct:1 writes with its token once S2 has granted
	# acct:1 as many times as it takes to reach that token.
	my $s2_acct = $s[2]->safe_psql('postgres',
		"SELECT burn_until('acct:1', $s1_acct, 1000)");
	fails_with(
		$s[2],
		"UPDATE acct SET balance = 80, fence_token = $s1_acct WHERE id = 1",
		'55T01',
		"$tag: S1's holder of acct:1 (token $s1_acct) cannot write on S2, whose holder has token $s2_acct"
	);
	$s[2]->stop;
	return;
}

scenario('async', 0);
scenario('async', 1);
scenario('sync', 0);
scenario('sync', 1);
second_failover(0);
second_failover(1);

done_testing();
