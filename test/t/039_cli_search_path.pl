#!/usr/bin/perl
#
# test/t/039_cli_search_path.pl
#	  The dlock command-line tool runs no code of another role's through
#	  the search_path (cli/conn.c, design.md §9): every session pins its
#	  search_path first, as PostgreSQL's client programs do, and every
#	  statement names its objects' schemas, the extension's found through
#	  pg_extension.
#
# The extension is in schema "dl" of database "app", whose search_path is
# "public, pg_catalog, dl": dlock finds the extension there, as it did by
# the functions' bare names.  A role that may create objects in public,
# mallory, has put there what an unqualified statement would find first:
# functions and views named like every one dlock calls or reads
# (dlock_acquire, ..., dlock_leases, dlock_waiters, dlock_stats), and
# objects that shadow pg_catalog's (the = operator on text, unnest,
# clock_timestamp, date_part, to_json, current_database).  Each records
# the call in public.loot and then does what the real one does, so that
# a tool that called it would still seem to work.  Every command (acquire,
# also --slots and --all and refused, renew, release, run, also --all and
# across a lost connection, status, --waiters, --stats, --json) must
# work, act on the extension's leases, and leave public.loot empty.
#
# Then, through wrappers in schema "probe" (--schema), that each session
# has an empty search_path when it calls, the first one and one opened
# again by dlock run after its connection was terminated; and --schema
# still names a schema that needs quoting.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockCli;

my $node = PostgreSQL::Test::Cluster->new('dlock_cli_search_path');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
my $conn = $node->connstr('app') . ' application_name=dlock-sp';
my $dir = PostgreSQL::Test::Utils::tempdir('cli_search_path');

sub sql { return $node->safe_psql('app', $_[0]); }

# dl runs dlock with -d $conn and the given arguments.
sub dl { return dlock_run([ '-d', $conn, @_ ]); }

sql(q{CREATE SCHEMA dl;
CREATE EXTENSION dlock SCHEMA dl;
GRANT USAGE ON SCHEMA dl TO PUBLIC;
ALTER DATABASE app SET search_path = public, pg_catalog, dl;
CREATE ROLE mallory LOGIN;
GRANT CREATE ON SCHEMA public TO mallory;
CREATE TABLE public.loot (who text, what text);
GRANT INSERT ON public.loot TO PUBLIC;});

# mallory's objects, each recording its call before doing the real work
sql(q{SET ROLE mallory;
CREATE FUNCTION public.steal(what text) RETURNS boolean LANGUAGE sql
  AS $$ INSERT INTO public.loot VALUES (current_user, what) RETURNING true $$;
CREATE FUNCTION public.dlock_acquire(text, interval, interval, text) RETURNS bigint
  LANGUAGE sql AS $$ SELECT public.steal('dlock_acquire'); SELECT dl.dlock_acquire($1, $2, $3, $4) $$;
CREATE FUNCTION public.dlock_renew(text, bigint, interval) RETURNS boolean
  LANGUAGE sql AS $$ SELECT public.steal('dlock_renew'); SELECT dl.dlock_renew($1, $2, $3) $$;
CREATE FUNCTION public.dlock_release(text, bigint) RETURNS boolean
  LANGUAGE sql AS $$ SELECT public.steal('dlock_release'); SELECT dl.dlock_release($1, $2) $$;
CREATE FUNCTION public.dlock_acquire_all(text[], interval, interval, text) RETURNS bigint[]
  LANGUAGE sql AS $$ SELECT public.steal('dlock_acquire_all'); SELECT dl.dlock_acquire_all($1, $2, $3, $4) $$;
CREATE FUNCTION public.dlock_acquire_any(text[], interval, interval, text)
  RETURNS TABLE (lock_name text, token bigint)
  LANGUAGE sql AS $$ SELECT public.steal('dlock_acquire_any'); SELECT * FROM dl.dlock_acquire_any($1, $2, $3, $4) $$;
CREATE FUNCTION public.dlock_renew_each(text[], bigint[], interval) RETURNS boolean[]
  LANGUAGE sql AS $$ SELECT public.steal('dlock_renew_each'); SELECT dl.dlock_renew_each($1, $2, $3) $$;
CREATE FUNCTION public.dlock_release_each(text[], bigint[]) RETURNS boolean[]
  LANGUAGE sql AS $$ SELECT public.steal('dlock_release_each'); SELECT dl.dlock_release_each($1, $2) $$;
CREATE FUNCTION public.stolen_leases() RETURNS SETOF dl.dlock_leases
  LANGUAGE sql AS $$ SELECT public.steal('dlock_leases'); SELECT * FROM dl.dlock_leases $$;
CREATE VIEW public.dlock_leases AS SELECT * FROM public.stolen_leases();
CREATE FUNCTION public.stolen_waiters() RETURNS SETOF dl.dlock_waiters
  LANGUAGE sql AS $$ SELECT public.steal('dlock_waiters'); SELECT * FROM dl.dlock_waiters $$;
CREATE VIEW public.dlock_waiters AS SELECT * FROM public.stolen_waiters();
CREATE FUNCTION public.stolen_stats() RETURNS SETOF dl.dlock_stats
  LANGUAGE sql AS $$ SELECT public.steal('dlock_stats'); SELECT * FROM dl.dlock_stats $$;
CREATE VIEW public.dlock_stats AS SELECT * FROM public.stolen_stats();
CREATE FUNCTION public.texteq_stolen(text, text) RETURNS boolean LANGUAGE sql
  AS $$ SELECT public.steal('='); SELECT $1 OPERATOR(pg_catalog.=) $2 $$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.texteq_stolen);
CREATE FUNCTION public.unnest(text[]) RETURNS SETOF text LANGUAGE sql
  AS $$ SELECT public.steal('unnest'); SELECT pg_catalog.unnest($1) $$;
CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz LANGUAGE sql
  AS $$ SELECT public.steal('clock_timestamp'); SELECT pg_catalog.clock_timestamp() $$;
CREATE FUNCTION public.date_part(text, interval) RETURNS double precision LANGUAGE sql
  AS $$ SELECT public.steal('date_part'); SELECT pg_catalog.date_part($1, $2) $$;
CREATE FUNCTION public.to_json(anyelement) RETURNS json LANGUAGE sql
  AS $$ SELECT public.steal('to_json'); SELECT pg_catalog.to_json($1) $$;
CREATE FUNCTION public.current_database() RETURNS name LANGUAGE sql
  AS $$ SELECT public.steal('current_database'); SELECT pg_catalog.current_database() $$;
RESET ROLE;});

# Whether mallory's objects are what a bare name finds in app, for the
# tool's own session role: so the test would catch a tool that used them.
is( sql(q{SELECT dlock_release('none', 1);
SELECT count(*) FROM dlock_leases;
SELECT string_agg(what, ' ' ORDER BY what) FROM public.loot;}),
	"f\n0\ndlock_leases dlock_release",
	"mallory's functions and views are what bare names find in app");
sql('TRUNCATE public.loot');

# loot_is_empty checks that none of mallory's code ran since the last check.
sub loot_is_empty
{
	my ($what) = @_;
	is(sql(q{SELECT coalesce(string_agg(what, ' ' ORDER BY what), '') FROM public.loot}),
		'', "$what: none of mallory's code ran");
	sql('TRUNCATE public.loot');
}

# token_of($name) is the token of the live lease on $name in dl, or ''.
sub token_of
{
	return sql("SELECT token FROM dl.dlock_leases WHERE lock_name OPERATOR(pg_catalog.=) '$_[0]' AND live");
}

# acquire, refused (the holder read from dlock_leases), renew, release
my $h = dl('acquire', '--ttl', '1m', 'deploy');
is($h->{rc}, 0, 'acquire: exit 0');
my $token = $h->{stdout} =~ s/\n//r;
is(token_of('deploy'), $token, 'acquire: the lease is in the extension\'s schema');
$h = dl('acquire', 'deploy');
is($h->{rc}, 75, 'acquire of a held name: exit 75');
like($h->{stderr}, qr/"deploy" is held by "dlock acquire .*" \(token $token, /,
	'acquire of a held name: the holder read from dl.dlock_leases');
is(dl('renew', '--ttl', '2m', 'deploy', $token)->{rc}, 0, 'renew: exit 0');
is(dl('release', 'deploy', $token)->{rc}, 0, 'release: exit 0');
is(token_of('deploy'), '', 'release: the lease ended');
loot_is_empty('acquire, renew, release');

# --slots, --all (the holders of a refused set read through unnest)
$h = dl('acquire', '--slots', '2', 'pool');
is($h->{rc}, 0, 'acquire --slots 2: exit 0');
like($h->{stdout}, qr/^\d+ pool:1\n\z/, 'acquire --slots 2: the first permit');
$h = dl('acquire', '--all', 'a', 'b');
is($h->{rc}, 0, 'acquire --all a b: exit 0');
$h = dl('acquire', '--all', 'b', 'c');
is($h->{rc}, 75, 'acquire --all b c, b held: exit 75');
like($h->{stderr}, qr/"b" is held by /, 'acquire --all: the holder named');
loot_is_empty('acquire --slots, --all');

# status, --json, --waiters, --stats
$h = dl('status', 'pool:1');
is($h->{rc}, 0, 'status NAME: exit 0');
like($h->{stdout}, qr/^pool:1\s+\d+\s/m, 'status NAME: the lease');
$h = dl('status', '--json');
like($h->{stdout}, qr/"lock_name": "a"/, 'status --json: the leases');
$h = dl('status', '--waiters');
is($h->{rc}, 0, 'status --waiters: exit 0');
$h = dl('status', '--stats', '--json');
is($h->{rc}, 0, 'status --stats --json: exit 0');
like($h->{stdout}, qr/"datname": "app", /, 'status --stats: the counters of app');
loot_is_empty('status');

# run: acquire, renews (ttl 6s: every 2s, each with 2 s to answer, which a
# loaded machine needs), release; and a set
$h = dl('run', '--ttl', '6s', 'job', '--', 'sleep', '2.5');
is($h->{rc}, 0, 'run: exit 0');
like(sql("SELECT released FROM dl.dlock_leases WHERE lock_name OPERATOR(pg_catalog.=) 'job'"),
	qr/^t$/, 'run: released');
$h = dl('run', '--ttl', '6s', '--all', 'x', 'y', '--', 'sleep', '2.5');
is($h->{rc}, 0, 'run --all: exit 0');
loot_is_empty('run, run --all');

# The search_path each session calls with: wrappers in schema "probe"
# (--schema) record it with the backend's pid.
sql(q{CREATE SCHEMA probe;
CREATE TABLE probe.calls (fn text, pid int, search_path text);
CREATE FUNCTION probe.dlock_acquire(text, interval, interval, text) RETURNS bigint
  LANGUAGE sql AS $$ INSERT INTO probe.calls SELECT 'acquire', pg_catalog.pg_backend_pid(), pg_catalog.current_setting('search_path');
  SELECT dl.dlock_acquire($1, $2, $3, $4) $$;
CREATE FUNCTION probe.dlock_renew(text, bigint, interval) RETURNS boolean
  LANGUAGE sql AS $$ INSERT INTO probe.calls SELECT 'renew', pg_catalog.pg_backend_pid(), pg_catalog.current_setting('search_path');
  SELECT dl.dlock_renew($1, $2, $3) $$;
CREATE FUNCTION probe.dlock_release(text, bigint) RETURNS boolean
  LANGUAGE sql AS $$ INSERT INTO probe.calls SELECT 'release', pg_catalog.pg_backend_pid(), pg_catalog.current_setting('search_path');
  SELECT dl.dlock_release($1, $2) $$;});

# CMD terminates dlock's session, then runs on: the next renew fails, and
# dlock renews and releases on a new connection.  With a ttl of 6 s the
# new backend, its search_path and the renew have 2 s (a ttl of 900ms left
# them 250 ms, too little on a loaded machine); CMD runs until probe.calls
# holds more than one renew and calls of more than one session, about 4 s
# (renews every 2 s), however long the machine makes that take.
my $psql = $node->config_data('--bindir') . '/psql';
my $connstr = $node->connstr('postgres');
my $appconn = $node->connstr('app');
write_script("$dir/cut.sh", qq{sleep 0.3
"$psql" -X -q -d "$connstr" -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'dlock-sp'" >/dev/null
until [ "\$("$psql" -X -A -t -q -d "$appconn" -c "SELECT count(*) FILTER (WHERE fn OPERATOR(pg_catalog.=) 'renew') OPERATOR(pg_catalog.>) 1 AND count(DISTINCT pid) OPERATOR(pg_catalog.>) 1 FROM probe.calls")" = t ]
do
	sleep 0.1
done
});
$h = dl('--schema', 'probe', 'run', '--ttl', '6s', 'cut', '--', "$dir/cut.sh");
is($h->{rc}, 0, 'run across a terminated session: exit 0');
like($h->{stderr}, qr/could not renew it, retrying/, 'run: the renew failed once');
is( sql(
		q{SELECT count(*) FILTER (WHERE search_path OPERATOR(pg_catalog.<>) ''),
  count(*) FILTER (WHERE fn OPERATOR(pg_catalog.=) 'renew') OPERATOR(pg_catalog.>) 1
  FROM probe.calls}),
	'0|t', 'every call (renews among them) ran with an empty search_path');
cmp_ok(sql(q{SELECT count(DISTINCT pid) FROM probe.calls}), '>=', 2,
	'among them calls on a session opened again by dlock run');
like(sql(q{SELECT string_agg(fn, ' ') FROM (SELECT DISTINCT fn FROM probe.calls) f}),
	qr/release/, 'the release ran too');
loot_is_empty('run --schema probe');

# --schema names a schema that needs quoting (PostgreSQL refuses quotes in
# an extension's schema); the extension's schema off
# the search_path without --schema is not found (023, 027 check the hint).
$node->safe_psql('postgres', 'CREATE DATABASE coord');
$node->safe_psql('coord',
	'CREATE SCHEMA "Co ord"; CREATE EXTENSION dlock SCHEMA "Co ord"');
my $coord = $node->connstr('coord');
$h = dlock_run([ '-d', $coord, '--schema', 'Co ord', 'acquire', 'quoted' ]);
is($h->{rc}, 0, '--schema naming a schema that needs quoting: acquired');
$h = dlock_run([ '-d', $coord, 'acquire', 'quoted' ]);
is($h->{rc}, 70, 'no --schema, the extension off the search_path: exit 70');
like($h->{stderr}, qr/function dlock_acquire\(.*\) does not exist/,
	'the function is not found');

$node->stop;
done_testing();
