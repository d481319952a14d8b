#!/usr/bin/perl
#
# test/t/016_sets_stress.pl
#	  Sets of leases under load (issue 14): eight processes take random
#	  overlapping sets of 1-5 of 20 names with dlock_acquire_all (and
#	  single names out of lists with dlock_acquire_any), write under them
#	  through the fence with random pauses, some past the ttl, renew with
#	  dlock_renew_each and release with dlock_release_each; a ninth samples
#	  the lease table.  At every moment no name has two holders, and the
#	  fenced writes of a name never go backwards.
#
# The load: six workers call dlock_acquire_all on a random set of 1-5 of
# the names n01 ... n20, in random order, with a ttl of 2 s and a wait of
# 500 ms (one call in five: no wait); two workers call dlock_acquire_any on
# a random list of 1-5 names.  On success a worker writes each row it
# holds of table fenced (one row per name, dlock_fence('{lock_name}',
# 'token'), mode latest), pausing before a write most often not at all or
# up to 200 ms, and about once in twelve writes 2.0-2.6 s: past the ttl,
# so that another worker takes the lease over and the late write is
# rejected with 55T01.  One holder in five renews its leases
# (dlock_renew_each) before its last write.  Then it releases them in
# autocommit (dlock_release_each, or dlock_release for a name from any),
# which is what src/async_commit.c commits without waiting for the flush.
# The workers are psql scripts generated from a seed (DLOCK_STRESS_SEED,
# printed), each statement its own transaction, ON_ERROR_STOP: any error
# but the 55T01 that fenced_write() catches ends the worker and fails the
# test (a deadlock, 40P01, included).  They stop at a deadline read from
# the server clock: DLOCK_STRESS_SECONDS of load (default 35, which keeps
# make test under 4 minutes; set it higher for a longer run, e.g. with
# make test-stress FILES=test/t/016_sets_stress.pl).
#
# What the workers know, recorded in the database so that the checks are
# SQL over the server clock:
#   - grants: every lease granted, with its token, acquired_at and
#     expires_at as read in the granting transaction (acq_all and acq_any
#     wrap the calls, so a grant and its record commit together) and
#     returned_at, the clock when the call returned; and attempts, every
#     call with its outcome;
#   - renewals: each renewal's outcome and new expiry, read likewise;
#   - releases: each release's outcome and r0, the server clock read in
#     the release's own statement just before the call (the log row is
#     written by a later statement, so the release stays a transaction of
#     its own);
#   - outcomes and write_log: every fenced write's outcome (with the
#     rejection's detail), and every accepted write in commit order per
#     row (the AFTER trigger's sequence number; why that is commit order:
#     003_fence_stress.pl's header);
#   - samples: the sampler copies the lease rows of the names, and the
#     fenced rows, every 50 ms, each row with the clock when read.
#
# A worker believes it holds a lease from the moment its call returned
# until the lease's expiry (the last successful renewal's) or until it
# starts releasing it (r0), whichever comes first: a holder must stop at
# its expiry, and writes after that are the fence's business.  (Not from
# acquired_at: that is the clock when the granting attempt began, which
# may be before the attempt read the previous holder's release; the note
# "acquired_at before the previous holder's end" counts how often, and by
# how much.)  Checked afterwards:
#   - every worker and the sampler ran to the deadline without an error;
#   - per name, the belief intervals of its grants never overlap (sorted by
#     start, each starts no earlier than the one before ends), and tokens
#     increase from grant to grant; at each sampled moment at most one
#     grant of each name is believed held;
#   - every sampled lease row matches the grant of its token (acquired_at,
#     owner, and an expiry that grant or one of its renewals set); a
#     released row's release was recorded as successful; a name's token
#     never decreases from sample to sample; no sampled row belongs to an
#     attempt that returned NULL (all or nothing); an acquire_all grant
#     covers its whole set, with tokens increasing in the byte order of the
#     names;
#   - the fenced writes: per row, accepted tokens in commit order never
#     decrease, and neither do the tokens the sampler saw; each accepted
#     token was granted for that row's name; each row's final token and
#     write count match its log; writes were rejected (stale) and each
#     rejection had a newer grant of the name, acquired before the write
#     ended; no rejection of another kind;
#   - the server log has no ERROR, FATAL, PANIC or failed assertion.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;
use IPC::Run;
use List::Util qw(shuffle);
use Time::HiRes qw(time);

my $seed = $ENV{DLOCK_STRESS_SEED} || 20261201;
die "DLOCK_STRESS_SEED must be a number" unless $seed =~ /^\d+$/;
my $seconds = $ENV{DLOCK_STRESS_SECONDS} || 35;
die "DLOCK_STRESS_SECONDS must be a number" unless $seconds =~ /^\d+$/;
srand($seed);
diag("stress seed $seed (DLOCK_STRESS_SEED=$seed repeats the choices), "
	  . "$seconds s of load (DLOCK_STRESS_SECONDS)");

my $n_names = 20;
my @names = map { sprintf('n%02d', $_) } 1 .. $n_names;
my $all_workers = 6;
my $any_workers = 2;
my $ttl = '2 s';

my $node = dlock_node(
	'dlock_sets',
	preload => 1,
	conf => q{
log_error_verbosity = verbose
log_statement = none
max_connections = 30
});

$node->safe_psql(
	'postgres', q{
CREATE EXTENSION dlock;

CREATE TABLE fenced (
  lock_name text PRIMARY KEY,
  token bigint,
  writes int NOT NULL DEFAULT 0
);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE ON fenced FOR EACH ROW
  EXECUTE FUNCTION dlock_fence('{lock_name}', 'token');

-- Every accepted write, numbered in commit order per row.
CREATE SEQUENCE write_seq;
CREATE TABLE write_log (
  seq bigint PRIMARY KEY,
  lock_name text NOT NULL,
  token bigint NOT NULL,
  at timestamptz NOT NULL
);
CREATE FUNCTION log_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO write_log VALUES (nextval('write_seq'), NEW.lock_name, NEW.token, clock_timestamp());
  RETURN NULL;
END
$$;
CREATE TRIGGER log_write AFTER UPDATE ON fenced FOR EACH ROW
  EXECUTE FUNCTION log_write();

CREATE TABLE attempts (
  worker int, iter int, kind text NOT NULL, names text[] NOT NULL,
  ok boolean NOT NULL, t0 timestamptz NOT NULL, t1 timestamptz NOT NULL,
  PRIMARY KEY (worker, iter)
);
CREATE TABLE grants (
  token bigint PRIMARY KEY,
  lock_name text NOT NULL,
  worker int NOT NULL, iter int NOT NULL,
  owner text NOT NULL,
  acquired_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  returned_at timestamptz NOT NULL
);
CREATE TABLE renewals (
  worker int, iter int, lock_name text, token bigint, ok boolean,
  at timestamptz, expires_at timestamptz
);
CREATE TABLE releases (
  worker int, iter int, lock_name text, token bigint, ok boolean,
  r0 timestamptz, r1 timestamptz
);
CREATE TABLE outcomes (
  worker int, iter int, lock_name text, token bigint,
  outcome text, kind text, current_token bigint, detail text,
  w0 timestamptz, w1 timestamptz
);
CREATE SEQUENCE sample_seq;
CREATE TABLE samples (
  n bigint, at timestamptz, lock_name text, token bigint, owner text,
  acquired_at timestamptz, expires_at timestamptz, released boolean
);
CREATE TABLE fenced_samples (n bigint, at timestamptz, lock_name text, token bigint);

-- acq_all: dlock_acquire_all with owner 'w<worker> i<iter>', recording the
-- attempt and, in the same transaction, each lease granted as its row
-- reads now, and when the call returned.
CREATE FUNCTION acq_all(p_w int, p_i int, p_names text[], p_ttl interval, p_wait interval)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
  v_t0 timestamptz := clock_timestamp();
  v_ret timestamptz;
  v_toks bigint[];
  v_n bigint;
BEGIN
  v_toks := dlock_acquire_all(p_names, p_ttl, p_wait, format('w%s i%s', p_w, p_i));
  v_ret := clock_timestamp();
  INSERT INTO attempts VALUES (p_w, p_i, 'all', p_names, v_toks IS NOT NULL, v_t0, clock_timestamp());
  IF v_toks IS NOT NULL THEN
    INSERT INTO grants
      SELECT l.token, l.lock_name, p_w, p_i, l.owner, l.acquired_at, l.expires_at, v_ret
        FROM unnest(p_names, v_toks) AS u(name, tok)
        JOIN dlock_leases l ON l.lock_name = u.name AND l.token = u.tok;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n <> cardinality(p_names) THEN
      RAISE EXCEPTION 'acq_all: % of % granted leases found', v_n, cardinality(p_names);
    END IF;
  END IF;
  RETURN v_toks;
END
$$;

-- acq_any: dlock_acquire_any likewise; one row, NULLs when none granted.
CREATE FUNCTION acq_any(p_w int, p_i int, p_names text[], p_ttl interval, p_wait interval,
                        OUT o_name text, OUT o_tok bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v_t0 timestamptz := clock_timestamp();
  v_ret timestamptz;
  v_n bigint;
BEGIN
  SELECT a.lock_name, a.token INTO o_name, o_tok
    FROM dlock_acquire_any(p_names, p_ttl, p_wait, format('w%s i%s', p_w, p_i)) a;
  v_ret := clock_timestamp();
  INSERT INTO attempts VALUES (p_w, p_i, 'any', p_names, o_tok IS NOT NULL, v_t0, clock_timestamp());
  IF o_tok IS NOT NULL THEN
    IF NOT o_name = ANY (p_names) THEN
      RAISE EXCEPTION 'acq_any: granted % not in %', o_name, p_names;
    END IF;
    INSERT INTO grants
      SELECT l.token, l.lock_name, p_w, p_i, l.owner, l.acquired_at, l.expires_at, v_ret
        FROM dlock_leases l WHERE l.lock_name = o_name AND l.token = o_tok;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n <> 1 THEN
      RAISE EXCEPTION 'acq_any: granted lease % % not found', o_name, o_tok;
    END IF;
  END IF;
END
$$;

-- renew_logged: dlock_renew_each, recording each outcome and new expiry.
CREATE FUNCTION renew_logged(p_w int, p_i int, p_names text[], p_toks bigint[], p_ttl interval)
RETURNS boolean[] LANGUAGE plpgsql AS $$
DECLARE
  v_ok boolean[];
BEGIN
  v_ok := dlock_renew_each(p_names, p_toks, p_ttl);
  INSERT INTO renewals
    SELECT p_w, p_i, u.name, u.tok, u.ok, clock_timestamp(),
           CASE WHEN u.ok THEN l.expires_at END
      FROM unnest(p_names, p_toks, v_ok) AS u(name, tok, ok)
      LEFT JOIN dlock_leases l ON l.lock_name = u.name AND l.token = u.tok;
  RETURN v_ok;
END
$$;

-- fenced_write: one write of row p_name with token p_tok, recording its
-- outcome.  Only 55T01 is caught; any other error ends the worker.
CREATE FUNCTION fenced_write(p_w int, p_i int, p_name text, p_tok bigint)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  v_w0 timestamptz := clock_timestamp();
  v_rows bigint;
  v_detail text;
BEGIN
  BEGIN
    UPDATE fenced SET token = p_tok, writes = writes + 1 WHERE lock_name = p_name;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    IF v_rows <> 1 THEN
      RAISE EXCEPTION 'updated % rows of %, not 1', v_rows, p_name;
    END IF;
    INSERT INTO outcomes (worker, iter, lock_name, token, outcome, w0, w1)
      VALUES (p_w, p_i, p_name, p_tok, 'accepted', v_w0, clock_timestamp());
    RETURN 'accepted';
  EXCEPTION WHEN SQLSTATE '55T01' THEN
    GET STACKED DIAGNOSTICS v_detail = PG_EXCEPTION_DETAIL;
    INSERT INTO outcomes
      VALUES (p_w, p_i, p_name, p_tok, 'rejected',
              CASE
                WHEN v_detail ~ 'token \d+ is not current; the current token is \d+\.$' THEN 'stale'
                WHEN v_detail ~ 'lower than token \d+ it already had' THEN 'row'
                ELSE 'other'
              END,
              substring(v_detail from 'the current token is (\d+)')::bigint,
              v_detail, v_w0, clock_timestamp());
    RETURN 'rejected';
  END;
END
$$;
});

# The rows start with a token of their name, from a set acquired by
# "worker 0" and released at once, recorded like every other grant.
my $all = join(', ', map { "'$_'" } @names);
$node->safe_psql(
	'postgres', qq{
SELECT acq_all(0, 0, ARRAY[$all], '1 hour', '0') IS NOT NULL;
INSERT INTO fenced (lock_name, token) SELECT lock_name, token FROM grants;
WITH r AS (
  SELECT clock_timestamp() AS r0,
         dlock_release_each(array_agg(lock_name ORDER BY lock_name), array_agg(token ORDER BY lock_name)) AS ok,
         array_agg(lock_name ORDER BY lock_name) AS n, array_agg(token ORDER BY lock_name) AS t
    FROM grants)
INSERT INTO releases
  SELECT 0, 0, u.n, u.t, u.ok, r.r0, clock_timestamp() FROM r, unnest(r.n, r.t, r.ok) AS u(n, t, ok);
});
is($node->safe_psql('postgres', 'SELECT count(*) FROM releases WHERE ok'),
	$n_names, "the $n_names rows have their first token, whose lease is released");
my $log_start = -s $node->logfile;

# ---------------------------------------------------------------------
# The scripts
# ---------------------------------------------------------------------

# pause returns the SQL of a pause before a write, or '' (none): most
# often none or short, past the ttl once in twelve when $long_ok.
sub pause
{
	my ($long_ok) = @_;
	my $r = rand();
	return '' if $r < 0.55;
	return sprintf("SELECT pg_sleep(%.3f);\n", 0.01 + rand(0.19))
	  if $r < 0.92 || !$long_ok;
	return sprintf("SELECT pg_sleep(%.3f);\n", 2.0 + rand(0.6));
}

# The check at the top of every iteration: stop at the deadline.
my $stop_check = q{SELECT clock_timestamp() >= :'deadline' AS stop \gset
\if :stop
\echo DONE
\q
\endif
};

# The iterations of a script: enough for the deadline to come first (an
# iteration takes at least a few milliseconds).
my $iterations = 100 + 60 * $seconds;

# all_iteration($w, $i) returns the SQL of one iteration of an
# acquire_all worker.
sub all_iteration
{
	my ($w, $i) = @_;
	my $k = 1 + int(rand(5));
	my @set = (shuffle(@names))[ 0 .. $k - 1 ];
	my $arr = 'ARRAY[' . join(', ', map { "'$_'" } @set) . ']';
	my $wait = rand() < 0.8 ? '500 ms' : '0';
	my $toks = 'ARRAY[' . join(', ', map { ":t$_" } 1 .. $k) . ']::bigint[]';
	my $sql = $stop_check;
	$sql .= "SELECT toks IS NOT NULL AS got, "
	  . join(', ', map { "coalesce(toks[$_], 0) AS t$_" } 1 .. $k)
	  . " FROM acq_all($w, $i, $arr, '$ttl', '$wait') AS toks \\gset\n";
	$sql .= "\\if :got\n";
	my $long_ok = 1;
	my $renew_at = rand() < 0.2 ? int(rand($k)) : -1;
	for my $j (1 .. $k)
	{
		my $p = pause($long_ok);
		$long_ok = 0 if $p =~ /pg_sleep\(2/;
		$sql .= $p;
		$sql .= "SELECT renew_logged($w, $i, $arr, $toks, '$ttl');\n"
		  if $j - 1 == $renew_at;
		$sql .= "SELECT fenced_write($w, $i, '$set[$j - 1]', :t$j);\n";
	}
	$sql .= "SELECT clock_timestamp() AS r0, dlock_release_each($arr, $toks) AS rel \\gset\n";
	$sql .= "INSERT INTO releases SELECT $w, $i, u.n, u.t, u.ok, :'r0', clock_timestamp()"
	  . " FROM unnest($arr, $toks, :'rel'::boolean[]) AS u(n, t, ok);\n";
	$sql .= "\\endif\n";
	return $sql;
}

# any_iteration($w, $i) returns the SQL of one iteration of an
# acquire_any worker: one name out of a list, written once or twice.
sub any_iteration
{
	my ($w, $i) = @_;
	my $k = 1 + int(rand(5));
	my @list = (shuffle(@names))[ 0 .. $k - 1 ];
	my $arr = 'ARRAY[' . join(', ', map { "'$_'" } @list) . ']';
	my $wait = rand() < 0.8 ? '500 ms' : '0';
	my $sql = $stop_check;
	$sql .= "SELECT o_tok IS NOT NULL AS got, coalesce(o_name, '') AS n, coalesce(o_tok, 0) AS t"
	  . " FROM acq_any($w, $i, $arr, '$ttl', '$wait') \\gset\n";
	$sql .= "\\if :got\n";
	my $writes = 1 + int(rand(2));
	my $long_ok = 1;
	for my $j (1 .. $writes)
	{
		my $p = pause($long_ok);
		$long_ok = 0 if $p =~ /pg_sleep\(2/;
		$sql .= $p;
		$sql .= "SELECT renew_logged($w, $i, ARRAY[:'n'], ARRAY[:t]::bigint[], '$ttl');\n"
		  if $j == $writes && rand() < 0.2;
		$sql .= "SELECT fenced_write($w, $i, :'n', :t);\n";
	}
	$sql .= "SELECT clock_timestamp() AS r0, dlock_release(:'n', :t) AS rel \\gset\n";
	$sql .= "INSERT INTO releases VALUES ($w, $i, :'n', :t, :'rel', :'r0', clock_timestamp());\n";
	$sql .= "\\endif\n";
	return $sql;
}

my $dir = $node->basedir;
my @procs;
for my $w (1 .. $all_workers + $any_workers)
{
	my $script = '';
	for my $i (1 .. $iterations)
	{
		$script .=
		  $w <= $all_workers ? all_iteration($w, $i) : any_iteration($w, $i);
	}
	$script .= "\\echo OUT OF ITERATIONS\n";
	push @procs, { name => "worker $w", file => "$dir/worker_$w.sql", sql => $script };
}

# The sampler: the lease rows of the names and the fenced rows, each with
# the clock when read, every 50 ms.
{
	my $script = '';
	for my $i (1 .. 20 * $seconds + 100)
	{
		$script .= $stop_check . q{SELECT nextval('sample_seq') AS n \gset
INSERT INTO samples
  SELECT :n, clock_timestamp(), lock_name, token, owner, acquired_at, expires_at, released
    FROM dlock_leases WHERE lock_name ~ '^n[0-9]+$';
INSERT INTO fenced_samples SELECT :n, clock_timestamp(), lock_name, token FROM fenced;
SELECT pg_sleep(0.05);
};
	}
	$script .= "\\echo OUT OF ITERATIONS\n";
	push @procs, { name => 'sampler', file => "$dir/sampler.sql", sql => $script };
}

# ---------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------

my $deadline = $node->safe_psql('postgres',
	"SELECT clock_timestamp() + interval '$seconds s' + interval '1 s'");
my $started = time();
for my $p (@procs)
{
	PostgreSQL::Test::Utils::append_to_file($p->{file}, $p->{sql});
	$p->{out} = '';
	$p->{err} = '';
	$p->{h} = IPC::Run::start(
		[
			'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1',
			'-v', "deadline=$deadline",
			'-d', $node->connstr('postgres'),
			'-f', $p->{file}
		],
		'>', \$p->{out}, '2>', \$p->{err},
		IPC::Run::timeout($seconds + $PostgreSQL::Test::Utils::timeout_default));
}
for my $p (@procs)
{
	$p->{h}->finish;
	$p->{rc} = $p->{h}->result(0);
}
my $load = time() - $started;
note sprintf('load ran %.1f s', $load);

for my $p (@procs)
{
	PostgreSQL::Test::Utils::append_to_file("$p->{file}.out", $p->{out});
	PostgreSQL::Test::Utils::append_to_file("$p->{file}.err", $p->{err});
	ok($p->{rc} == 0 && $p->{out} =~ /^DONE$/m && $p->{err} eq '',
		"$p->{name} ran to the deadline without an error")
	  or diag("$p->{name}: exit code $p->{rc}, stderr:\n$p->{err}");
}

# ---------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------

# A grant's belief interval: from the return of the call that granted it
# until its last successful renewal's expiry (or its own), or until its
# release started, whichever is first.
sql(q{
CREATE TABLE beliefs AS
SELECT g.*,
       coalesce(rn.expires_at, g.expires_at) AS final_expiry,
       least(coalesce(rn.expires_at, g.expires_at), coalesce(rl.r0, 'infinity')) AS believed_end
  FROM grants g
  LEFT JOIN LATERAL (SELECT r.expires_at FROM renewals r
                      WHERE r.lock_name = g.lock_name AND r.token = g.token AND r.ok
                      ORDER BY r.at DESC LIMIT 1) rn ON true
  LEFT JOIN releases rl ON rl.lock_name = g.lock_name AND rl.token = g.token AND rl.ok;
CREATE INDEX ON beliefs (lock_name, returned_at);
ANALYZE beliefs;
ANALYZE samples;
});

note(
	"attempts (kind, granted, count):\n",
	sql(q{SELECT kind, ok, count(*) FROM attempts WHERE worker > 0 GROUP BY 1, 2 ORDER BY 1, 2}));
note("grants, names per grant of acquire_all:\n",
	sql(q{
SELECT count(*), (SELECT round(avg(cardinality(names)), 2) FROM attempts WHERE kind = 'all' AND ok AND worker > 0)
  FROM grants WHERE worker > 0}));
note("releases (ok, count):\n",
	sql(q{SELECT ok, count(*) FROM releases WHERE worker > 0 GROUP BY 1 ORDER BY 1}));
note("renewals (ok, count):\n",
	sql(q{SELECT ok, count(*) FROM renewals GROUP BY 1 ORDER BY 1}));
note("fenced writes (outcome, kind, count):\n",
	sql(q{SELECT outcome, coalesce(kind, '-'), count(*) FROM outcomes GROUP BY 1, 2 ORDER BY 1, 2}));
# How far acquired_at (the clock when the granting attempt began) can
# precede the end of the previous lease of the name as its holder saw it:
# the attempt read the release only later.  Not a failure: the lease is
# only shorter than its ttl by as much.
my $early = sql(q{
SELECT count(*), coalesce(round(max(extract(epoch FROM prev_end - acquired_at)) * 1000, 1), 0)
  FROM (SELECT acquired_at, lag(believed_end) OVER (PARTITION BY lock_name ORDER BY token) AS prev_end
          FROM beliefs) s
 WHERE acquired_at < prev_end});
note("acquired_at before the previous holder's end (grants, max ms): $early");
note("samples, sampled lease rows live at their reading:\n",
	sql(q{SELECT count(DISTINCT n), count(*) FILTER (WHERE NOT released AND expires_at > at) FROM samples}));

cmp_ok(sql(q{SELECT count(*) FROM attempts WHERE kind = 'all' AND ok AND worker > 0}),
	'>', 50, 'dlock_acquire_all granted many sets');
cmp_ok(sql(q{SELECT count(*) FROM attempts WHERE kind = 'any' AND ok}),
	'>', 10, 'dlock_acquire_any granted many names');
cmp_ok(sql(q{SELECT count(*) FROM attempts WHERE NOT ok}),
	'>', 0, 'some attempts found their names held');
cmp_ok(sql(q{SELECT count(DISTINCT n) FROM samples}),
	'>', 10 * $seconds, 'the sampler read the lease table often');

# No two holders at once.
is( sql(q{
SELECT count(*) FROM (
  SELECT returned_at < lag(believed_end) OVER w AS overlap,
         token <= lag(token) OVER w AS backwards
    FROM beliefs WINDOW w AS (PARTITION BY lock_name ORDER BY returned_at, token)) s
 WHERE overlap OR backwards}),
	'0',
	'per name, no two grants are believed held at once, and tokens increase with the grants'
) or diag(sql(q{
SELECT * FROM (
  SELECT lock_name, token, worker, iter, acquired_at, returned_at, believed_end,
         lag(token) OVER w AS prev_token, lag(worker) OVER w AS prev_worker,
         lag(believed_end) OVER w AS prev_end
    FROM beliefs WINDOW w AS (PARTITION BY lock_name ORDER BY returned_at, token)) s
 WHERE returned_at < prev_end OR token <= prev_token LIMIT 10}));
is( sql(q{
SELECT count(*) FROM beliefs
 WHERE NOT (believed_end > returned_at AND returned_at >= acquired_at)}),
	'0', 'every belief interval ends after it starts, and starts after acquired_at');
is( sql(q{
SELECT count(*) FROM (
  SELECT s.n, s.lock_name
    FROM samples s JOIN beliefs b
      ON b.lock_name = s.lock_name AND b.returned_at <= s.at AND s.at < b.believed_end
   GROUP BY 1, 2 HAVING count(*) > 1) x}),
	'0',
	'at every sampled moment, each name has at most one holder');

# The lease table, as sampled, against what the workers recorded.
is( sql(q{
SELECT count(*) FROM samples s
 WHERE NOT EXISTS (
   SELECT FROM beliefs b
    WHERE b.lock_name = s.lock_name AND b.token = s.token
      AND b.acquired_at = s.acquired_at AND b.owner = s.owner
      AND (s.released OR s.expires_at = b.expires_at
           OR EXISTS (SELECT FROM renewals r WHERE r.lock_name = s.lock_name AND r.token = s.token
                       AND r.ok AND r.expires_at = s.expires_at)))}),
	'0',
	'every sampled lease row is a recorded grant, with its acquired_at, owner and expiry'
);
is( sql(q{
SELECT count(*) FROM samples s
 WHERE s.released
   AND NOT EXISTS (SELECT FROM releases r
                    WHERE r.lock_name = s.lock_name AND r.token = s.token AND r.ok)}),
	'0',
	'every sampled released row was released by its holder');
is( sql(q{
SELECT count(*) FROM (
  SELECT token < lag(token) OVER (PARTITION BY lock_name ORDER BY n) AS backwards
    FROM samples) s WHERE backwards}),
	'0',
	'per name, the sampled token never decreases');
is( sql(q{
SELECT count(*) FROM samples s JOIN attempts a ON s.owner = format('w%s i%s', a.worker, a.iter)
 WHERE NOT a.ok}),
	'0',
	'no sampled lease belongs to an attempt that returned NULL (all or nothing)');
is( sql(q{
SELECT count(*) FROM attempts a
 WHERE a.ok AND a.kind = 'all'
   AND (SELECT count(*) FROM grants g WHERE g.worker = a.worker AND g.iter = a.iter)
       <> cardinality(a.names)}),
	'0',
	'every granted set has a grant for each of its names');
is( sql(q{
SELECT count(*) FROM (
  SELECT token < lag(token) OVER (PARTITION BY worker, iter ORDER BY lock_name COLLATE "C") AS backwards
    FROM grants) s WHERE backwards}),
	'0',
	'within a granted set, tokens increase in the byte order of the names');

# The fenced writes.
is( sql(q{
SELECT count(*) FROM (
  SELECT token < lag(token) OVER (PARTITION BY lock_name ORDER BY seq) AS backwards
    FROM write_log) s WHERE backwards}),
	'0',
	'per row, accepted tokens in commit order never decrease');
is( sql(q{
SELECT count(*) FROM (
  SELECT token < lag(token) OVER (PARTITION BY lock_name ORDER BY n) AS backwards
    FROM fenced_samples) s WHERE backwards}),
	'0',
	'per row, the sampled token never decreases');
is( sql(q{
SELECT count(*) FROM write_log w
 WHERE NOT EXISTS (SELECT FROM grants g WHERE g.lock_name = w.lock_name AND g.token = w.token)}),
	'0',
	'every accepted token was granted for the row\'s name');
is( sql(q{
SELECT count(*) FROM fenced f
 WHERE f.token IS DISTINCT FROM (SELECT token FROM write_log w WHERE w.lock_name = f.lock_name
                                  ORDER BY seq DESC LIMIT 1)
    OR f.writes <> (SELECT count(*) FROM outcomes o
                     WHERE o.lock_name = f.lock_name AND o.outcome = 'accepted')}),
	'0',
	'each row carries the token of its last logged write, and counts its accepted writes');
cmp_ok(sql(q{SELECT count(*) FROM outcomes WHERE outcome = 'accepted'}),
	'>', 100, 'many writes were accepted');
my $rejected = sql(q{SELECT count(*) FROM outcomes WHERE outcome = 'rejected'});
cmp_ok($rejected, '>', 0,
	'late writes were rejected with 55T01 (the lease had been taken over)');
is( sql(q{
SELECT count(*) FROM outcomes o
 WHERE o.outcome = 'rejected'
   AND NOT EXISTS (SELECT FROM grants g
                    WHERE g.lock_name = o.lock_name AND g.token > o.token AND g.acquired_at <= o.w1)}),
	'0',
	'each rejected write had a newer grant of its name, acquired before the write ended'
);
is( sql(q{
SELECT count(*) FROM outcomes
 WHERE outcome = 'rejected'
   AND (kind NOT IN ('stale', 'row') OR (kind = 'stale' AND NOT current_token > token))}),
	'0',
	'every rejection is of a token older than the current one (or the row\'s)')
  or diag(sql(q{SELECT DISTINCT detail FROM outcomes WHERE kind = 'other' LIMIT 5}));

my @bad = grep { /\b(?:ERROR|FATAL|PANIC):|TRAP:|terminated by signal/ }
  split /\n/, slurp_file($node->logfile, $log_start);
is(scalar(@bad), 0,
	'the server log has no error (no deadlock), PANIC or failed assertion')
  or diag(join("\n", @bad[ 0 .. ($#bad > 19 ? 19 : $#bad) ]));

diag(
	sprintf(
		'%.0f s of load: %s sets and %s names (any) granted, %s attempts refused, %s samples, %s writes accepted, %s stale writes rejected; %s grants with acquired_at before the previous holder\'s end (by %s ms at most)',
		$load,
		sql(q{SELECT count(*) FROM attempts WHERE kind = 'all' AND ok AND worker > 0}),
		sql(q{SELECT count(*) FROM attempts WHERE kind = 'any' AND ok}),
		sql(q{SELECT count(*) FROM attempts WHERE NOT ok}),
		sql(q{SELECT count(DISTINCT n) FROM samples}),
		sql(q{SELECT count(*) FROM outcomes WHERE outcome = 'accepted'}),
		$rejected, split(/\|/, $early)));

$node->stop;
done_testing();
