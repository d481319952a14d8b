#!/usr/bin/perl
#
# test/t/014_store_cache.pl
#	  The store's per-backend cache of where the extension lives
#	  (src/store_cache.c, design.md §4): a session that has already used
#	  dlock sees relations another session adds to, or removes from, the
#	  extension's schema, and a reinstalled extension, at its next call.
#
# Session A, in a database with version 1.1 (no mark table), takes a lease
# and tries a write fenced in mode 'seen': 0A000, and its cache now holds
# "no dlock_fence_mark".  Then, from other sessions:
#
#   1. A relation named dlock_fence_mark is created in the extension's
#      schema, as an update script would, without touching the lease table
#      (its pg_class row is checked to be the same tuple before and after:
#      no relcache invalidation of dlock_lease can explain what follows).
#      A's next fenced write is accepted and raises the mark; a lower token
#      is rejected (55T01).  Only the RELNAMENSP syscache callback tells A.
#   2. That relation is dropped: A's next write gets 0A000 again, not an
#      error about a relation that no longer exists.
#   3. ALTER EXTENSION dlock UPDATE TO '1.2' creates it for real: A's writes
#      are fenced in mode 'seen' again, and dlock_check (new in 1.2) works.
#   4. The extension is dropped and created in another schema: A's calls
#      there use the new lease table (a fresh token, the lease visible in
#      the new dlock_leases), not the dropped one.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;

my $node = dlock_node('dlock_store_cache');
sql(q{CREATE DATABASE old});
sql(q{
CREATE EXTENSION dlock VERSION '1.1';
CREATE TABLE seen_t (id int PRIMARY KEY, tok bigint);
CREATE TRIGGER seen_t_fence BEFORE INSERT OR UPDATE ON seen_t
    FOR EACH ROW EXECUTE FUNCTION dlock_fence('cache:seen', 'tok', 'seen');
}, 'old');

# run($sql): $sql in session A; returns its output and SQLSTATE.
my $a = bg_session($node, 'a', 'old');
sub run
{
	my ($sql) = @_;
	bg_start($a, $sql);
	return bg_finish($a);
}

my ($out, $state) = run(q{SELECT dlock_acquire('cache:a', '1 hour') > 0;});
is($state, '00000', 'session A takes a lease on 1.1');
($out, $state) = run(q{INSERT INTO seen_t VALUES (1, 5);});
is($state, '0A000', "on 1.1 a write fenced in mode 'seen' asks for 1.2 (0A000)");

# The pg_class row of the lease table: its tuple and reloptions.
my $lease_row = q{SELECT ctid, xmin, reloptions FROM pg_class
                   WHERE oid = 'public.dlock_lease'::regclass};
my $before = sql($lease_row, 'old');

# 1. The mark table appears, the lease table untouched.
sql(q{
CREATE TABLE public.dlock_fence_mark (
    table_owner pg_catalog.regrole NOT NULL,
    lock_name pg_catalog.text COLLATE pg_catalog."C" NOT NULL,
    token     pg_catalog.int8 NOT NULL,
    raised_at pg_catalog.timestamptz NOT NULL,
    CONSTRAINT dlock_fence_mark_pkey PRIMARY KEY (table_owner, lock_name));
REVOKE ALL ON TABLE public.dlock_fence_mark FROM PUBLIC;
}, 'old');
is(sql($lease_row, 'old'), $before,
	"creating dlock_fence_mark left dlock_lease's pg_class row as it was");
($out, $state) = run(q{INSERT INTO seen_t VALUES (1, 5);});
is($state, '00000', 'session A sees the new mark table at its next write');
is(sql(q{SELECT lock_name || ' ' || token FROM dlock_fence_mark}, 'old'),
	'cache:seen 5', 'that write raised the mark');
($out, $state) = run(q{UPDATE seen_t SET tok = 4 WHERE id = 1;});
is($state, '55T01', 'a token below the mark is rejected (55T01)');

# 2. It disappears.
sql(q{DROP TABLE public.dlock_fence_mark}, 'old');
($out, $state) = run(q{UPDATE seen_t SET tok = 6 WHERE id = 1;});
is($state, '0A000', 'session A sees it gone: 0A000 again, no stale OID');

# 3. The real update.
sql(q{ALTER EXTENSION dlock UPDATE TO '1.2'}, 'old');
($out, $state) = run(q{UPDATE seen_t SET tok = 6 WHERE id = 1;});
is($state, '00000', 'after the update by another session, A writes in mode seen');
($out, $state) = run(q{UPDATE seen_t SET tok = 5 WHERE id = 1;});
is($state, '55T01', 'and a lower token is rejected');
($out, $state) = run(q{SELECT dlock_check('cache:seen', 6, 'seen');});
is("$state $out", '00000 6', 'dlock_check, new in 1.2, answers in session A');

# 4. Reinstalled elsewhere.
my $old_token = sql(q{SELECT token FROM dlock_leases WHERE lock_name = 'cache:a'}, 'old');
sql(q{
DROP TABLE seen_t;
DROP EXTENSION dlock;
CREATE SCHEMA elsewhere;
CREATE EXTENSION dlock SCHEMA elsewhere;
}, 'old');
($out, $state) = run(q{SELECT elsewhere.dlock_acquire('cache:a', '1 hour');});
is($state, '00000', 'session A takes the name again from the new installation');
is(sql(q{SELECT token FROM elsewhere.dlock_leases WHERE lock_name = 'cache:a'}, 'old'),
	$out, "its lease is in the new installation's table, with the token it got");
($out, $state) = run(q{SELECT elsewhere.dlock_acquire('cache:a', '1 hour') IS NULL;});
is("$state $out", '00000 t', 'and the new table holds it: a second acquire is refused');
note "token on the old installation: $old_token";

bg_close($a);
$node->stop;
done_testing();
