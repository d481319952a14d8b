#!/usr/bin/perl
#
# test/t/015_fence_cache.pl
#	  The fence cache (src/fence_cache.c), with dlock preloaded: that the
#	  'latest' fence is answered from it, that a superuser's hand edit of
#	  the lease table is seen only through dlock.fence_cache = off (the
#	  documented rule), and that under concurrent takeovers and fenced
#	  writes no accepted token goes backwards.
#
# Part 1, the cache answers.  A fenced write fills the cache with the
# lease's token.  A superuser then changes the token in dlock_lease by hand
# (what docs/sql-reference.md, "Setting", says must be done with
# dlock.fence_cache = off): a write with the old token is still accepted,
# which only the cache can explain (the index holds the new token), and a
# session with dlock.fence_cache = off, which reads the index, rejects it.
# A transaction of such a session that writes drops the whole cache when it
# commits: afterwards every session rejects the old token.  So does one of
# a session with session_replication_role = replica.  With the cache
# turned off by dlock.fence_cache_size = 0 (after a restart) the hand edit
# is seen at once.
#
# Part 1b, a grant publishes its token: see below.
#
# Part 1c, the 'live' fence is answered from the cache too: see below.
#
# Part 4, the slots (run before part 2): see below.
#
# Part 3, the 'live' fence's hint (run before part 2): an index on
# expires_at makes renewals move the row (not HOT); live writes between
# them, after a purge and a VACUUM that truncates the table's end, all find
# the row; after a break they are rejected.
#
# Part 2, takeovers and fenced writes, concurrently, on a cache of one
# bucket (part 4's).  Eight pgbench clients acquire one of six names (three
# of one slot, three of two: more than the bucket holds) with a short ttl,
# pause (often past it, so that another client takes the lease over and the
# cache entry is invalidated between a check's read and its fill), and
# write the name's row with their token; an AFTER trigger logs every accepted write with a sequence number
# (commit order per row, as in 003_fence_stress.pl) and the lease's token
# that a BEFORE trigger read just before the fence checked.  Checked: per
# row the accepted tokens never decrease, and no accepted token is older
# than the lease's token committed before its check (which a stale cache
# hit would show).  No timing is asserted.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;

my $node = dlock_node('dlock_fence_cache',
	preload => 1,
	conf => "max_connections = 30\n");

# write(token, [settings]): a fenced UPDATE of row 1 with token; '' when
# accepted, else the SQLSTATE.
sub write_row
{
	my ($token, $set) = @_;
	$set //= '';
	my ($rc, $out, $err) = $node->psql('postgres',
		"$set\\set VERBOSITY verbose\nUPDATE acct SET val = val + 1, fence_token = $token WHERE id = 1;"
	);
	return '' if $rc == 0;
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : $err;
}

# write_sqlstate(sql): '' when sql succeeds, else its SQLSTATE.
sub write_sqlstate
{
	my ($rc, $out, $err) =
	  $node->psql('postgres', "\\set VERBOSITY verbose\n$_[0];");
	return '' if $rc == 0;
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : $err;
}

sql(q{
CREATE EXTENSION dlock;
CREATE TABLE acct (id int PRIMARY KEY, val int NOT NULL, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE ON acct FOR EACH ROW
  EXECUTE FUNCTION dlock_fence('cache:{id}', 'fence_token', 'latest');
});
my $a = sql(q{SELECT dlock_acquire('cache:1', '1 hour')});
sql(qq{INSERT INTO acct VALUES (1, 0, $a)});

# Part 1.
is(write_row($a), '', 'a write with the current token is accepted');
sql(q{UPDATE dlock_lease SET token = token + 1000 WHERE lock_name = 'cache:1'}
);
is(write_row($a), '',
	'after a hand edit of the lease table, the old token is still accepted: the cache answered'
);
is(write_row($a, "SET dlock.fence_cache = off;\n"),
	'55T01', 'a session with dlock.fence_cache = off reads the index and rejects it');
is(write_row($a), '', 'the other sessions still use the cache');
sql(q{SET dlock.fence_cache = off; CREATE TABLE cache_reset ()});
is(write_row($a), '55T01',
	'a writing transaction of a session with dlock.fence_cache = off dropped the cache');
is(write_row($a + 1000), '', 'the token of the hand edit is accepted');

# session_replication_role = replica (logical replication's apply worker)
# counts as dlock.fence_cache = off.
sql(q{UPDATE dlock_lease SET token = token + 1000 WHERE lock_name = 'cache:1'}
);
is(write_row($a + 1000), '', 'a second hand edit: the cache still answers');
sql(q{SET session_replication_role = replica; CREATE TABLE cache_reset2 ()});
is(write_row($a + 1000),
	'55T01', 'a writing transaction with session_replication_role = replica dropped the cache');
is(write_row($a + 2000), '', 'the token of the second hand edit is accepted');

$node->append_conf('postgresql.conf', "dlock.fence_cache_size = 0\n");
$node->restart;
my $b = $a + 2000;
is(write_row($b), '', 'dlock.fence_cache_size = 0: the current token is accepted');
sql(q{UPDATE dlock_lease SET token = token + 1000 WHERE lock_name = 'cache:1'}
);
is(write_row($b), '55T01', 'without the cache, a hand edit is seen at once');
# The default size, 8192 buckets: the 300 names of part 1b's set fit
# whatever buckets they hash to (a bucket holds 8 short names; with 128
# buckets, about one run in ten had a bucket of more than 8 of them, whose
# names past the eighth evicted others).
$node->append_conf('postgresql.conf', "dlock.fence_cache_size = 65536\n");
$node->restart;

# Part 1b, publishing (on the cache of 65536 slots): a grant that commits
# puts the name's new token into the cache itself, so the first fenced
# write after it is answered without reading the index.  As in part 1, a
# hand edit made after the grant shows which answered: the grant's token
# still accepted means the cache answered, and since no fenced write read
# the name before the edit, the grant published it.  A grant rolled back,
# to a savepoint or whole, publishes nothing: its token, never committed,
# is rejected.  The trigger fires on UPDATE only, so the row's INSERT reads
# nothing.
sql(q{
CREATE TABLE acctp (id int PRIMARY KEY, val int NOT NULL, fence_token bigint);
CREATE TRIGGER fence BEFORE UPDATE ON acctp FOR EACH ROW
  EXECUTE FUNCTION dlock_fence('pub:{id}', 'fence_token', 'latest');
INSERT INTO acctp VALUES (1, 0, NULL), (2, 0, NULL);
});
# write_pub(id, token, [settings]): '' when a fenced UPDATE of row id with
# token is accepted, else the SQLSTATE.
sub write_pub
{
	my ($id, $token, $set) = @_;
	return write_sqlstate(($set // '')
		  . "UPDATE acctp SET val = val + 1, fence_token = $token WHERE id = $id"
	);
}
# The memory docs/sql-reference.md gives for the default size: 72 bytes a
# slot (a 64-byte slot and an eighth of its bucket's 64-byte header), and
# the shared part's header line.
is(sql(q{SELECT size FROM pg_shmem_allocations WHERE name = 'dlock fence cache'}),
	65536 * 72 + 128, 'the default 65536 slots take 72 bytes each (4.5 MB)');

my $hand_edit = q{UPDATE dlock_lease SET token = token + 1000 WHERE lock_name = 'pub:1'};

my $p = sql(q{SELECT dlock_acquire('pub:1', '1 hour')});
sql($hand_edit);
is(write_pub(1, $p), '',
	"a name's first grant published its token: accepted after a hand edit that no fenced write read before"
);
is(write_pub(1, $p, "SET dlock.fence_cache = off;\n"),
	'55T01', 'the index holds the hand edit (the control)');

sql(q{SELECT dlock_break('pub:1')});
my $q = sql(q{SELECT dlock_acquire('pub:1', '1 hour')});
cmp_ok($q, '>', $p + 1000, 'the takeover drew a greater token');
sql($hand_edit);
is(write_pub(1, $q), '', 'a takeover published its token');
is(write_pub(1, $q, "SET dlock.fence_cache = off;\n"),
	'55T01', 'the index holds the hand edit (the control)');

# rolled back: the row keeps the hand edit's token, q + 1000
sql(q{SELECT dlock_break('pub:1')});
my $r = sql(q{BEGIN;
SAVEPOINT s;
SELECT dlock_acquire('pub:1', '1 hour') AS r \gset
ROLLBACK TO s;
COMMIT;
SELECT :r});
cmp_ok($r, '>', $q + 1000, 'the takeover rolled back to a savepoint drew a token');
is(write_pub(1, $r), '55T01', 'a takeover rolled back to a savepoint published nothing');
is(write_pub(1, $q + 1000), '', 'the committed token is accepted');
my $r2 = sql(q{BEGIN;
SELECT dlock_acquire('pub:2', '1 hour') AS r \gset
ROLLBACK;
SELECT :r});
is(write_pub(2, $r2), '55T01', 'a first grant rolled back published nothing');
my $r3 = sql(q{SELECT dlock_acquire('pub:2', '1 hour')});
cmp_ok($r3, '>', $r2, 'the grant that commits draws a greater token');
is(write_pub(2, $r3), '', 'and is accepted');
sql(q{SELECT dlock_acquire('pub:1', '1 hour')});	# live again, for part 3's purge

# A set of 300 names in one transaction publishes them all (more buckets
# than a backend remembers without allocating); dlock_check reads as the
# 'latest' fence does.
sql(q{CREATE TABLE pubm AS
  SELECT i, dlock_acquire('pubm:' || i, '1 hour') AS t FROM generate_series(1, 300) i});
sql(q{UPDATE dlock_lease SET token = token + 1000 WHERE lock_name LIKE 'pubm:%'});
is(sql(q{SELECT count(*) FROM pubm WHERE dlock_check('pubm:' || i, t) = t}),
	'300', 'a transaction that acquired 300 names published every one');
is(write_sqlstate(q{SET dlock.fence_cache = off; SELECT dlock_check('pubm:1', t) FROM pubm WHERE i = 1}),
	'55T01', 'the index holds the hand edit (the control)');

# Part 1c, the 'live' fence (on the cache of 65536 slots): the cache keeps
# what it checks of the row (token, expiry, released), and a renew
# publishes the row as it left it.  A hand edit shows which answered, as in
# part 1: a lease the row says expired, or released, whose writes are still
# accepted was answered by the cache.  (The cache answers only writes that
# pass: one it would reject is read from the table, as without it.)
sql(q{
CREATE TABLE acctl (id int PRIMARY KEY, val int NOT NULL, fence_token bigint);
CREATE TRIGGER fence BEFORE UPDATE ON acctl FOR EACH ROW
  EXECUTE FUNCTION dlock_fence('livec:{id}', 'fence_token', 'live');
INSERT INTO acctl VALUES (1, 0, NULL);
});
my $l = sql(q{SELECT dlock_acquire('livec:1', '1 hour')});
my $live_c = qq{UPDATE acctl SET val = val + 1, fence_token = $l WHERE id = 1};
is(write_sqlstate($live_c), '', 'a live write with the current token is accepted');
sql(q{UPDATE dlock_lease SET expires_at = now() - interval '1 minute' WHERE lock_name = 'livec:1'});
is(write_sqlstate($live_c), '',
	'a live write after a hand edit that expired the lease is accepted: the cache answered');
is(write_sqlstate("SET dlock.fence_cache = off; $live_c"),
	'55T01', 'the row says expired (the control)');
sql(q{UPDATE dlock_lease SET expires_at = now() + interval '1 hour', released = true WHERE lock_name = 'livec:1'});
is(write_sqlstate($live_c), '', 'a hand edit that released it: the cache answered');
is(write_sqlstate("SET dlock.fence_cache = off; $live_c"),
	'55T01', 'the row says released (the control)');
# undone by hand in a session with dlock.fence_cache = off, which drops the
# whole cache; then a renew publishes the row it leaves
sql(q{SET dlock.fence_cache = off;
UPDATE dlock_lease SET expires_at = now() + interval '1 hour', released = false
 WHERE lock_name = 'livec:1'});
is(sql(qq{SELECT dlock_renew('livec:1', $l, '2 hours')}), 't', 'renewed');
sql(q{UPDATE dlock_lease SET expires_at = now() - interval '1 minute' WHERE lock_name = 'livec:1'});
is(write_sqlstate($live_c), '',
	'a renew published its row: accepted after a hand edit that no fenced write read before');
sql(q{UPDATE dlock_lease SET expires_at = now() + interval '1 hour' WHERE lock_name = 'livec:1'});
is(sql(qq{SELECT dlock_release('livec:1', $l)}), 't', 'released');
is(write_sqlstate($live_c), '55T01', 'after the release the live write is rejected');
is(sql(q{SELECT val FROM acctl WHERE id = 1}), '4', 'the accepted live writes');

# Part 3 (before part 2, on the cache of 65536 slots): the 'live' fence
# across renewals that move the row.  An index a DBA added on expires_at
# makes every renewal a non-HOT update, which moves the row; VACUUM then
# removes the old versions and truncates the emptied end of the table.
sql(q{
CREATE TABLE acct3 (id int PRIMARY KEY, val int NOT NULL, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE ON acct3 FOR EACH ROW
  EXECUTE FUNCTION dlock_fence('hint:{id}', 'fence_token', 'live');
CREATE INDEX dlock_lease_expires ON dlock_lease (expires_at);
});
my $h = sql(q{SELECT dlock_acquire('hint:1', '1 hour')});
sql(qq{INSERT INTO acct3 VALUES (1, 0, $h)});
sql(q{SELECT dlock_acquire('filler:' || i, '1 hour') FROM generate_series(1, 2000) i});
my $live_write = qq{UPDATE acct3 SET val = val + 1, fence_token = $h WHERE id = 1};
sql($live_write);
for my $i (1 .. 3)
{
	is(sql(qq{SELECT dlock_renew('hint:1', $h, '2 hours')}),
		't', "renewal $i (not HOT: the row moves)");
	sql($live_write);
}
sql(q{SELECT dlock_break('filler:' || i) FROM generate_series(1, 2000) i});
is(sql(q{SELECT dlock_purge('0 s')}), '2001', "the filler rows (and part 1c's) are purged");
sql(q{VACUUM dlock_lease});
is(sql(qq{SELECT dlock_renew('hint:1', $h, '3 hours')}), 't', 'renewed after the VACUUM');
sql($live_write);
sql($live_write);
is(sql(q{SELECT val FROM acct3 WHERE id = 1}), '6', 'every live write was accepted');
sql(q{SELECT dlock_break('hint:1')});
is(write_sqlstate($live_write), '55T01', 'a live write after a break is rejected');
sql(q{DROP INDEX dlock_lease_expires});

# Part 4, the slots, in one bucket (dlock.fence_cache_size = 8: its 8
# slots).  A name of up to 22 bytes takes one slot, a longer one (up to 86
# bytes) two adjacent slots; a name of 87 bytes is never cached.  The hand
# edit of part 1 shows which names the cache holds: a name whose old token
# is still accepted was answered by the cache.  Each check below that
# expects a hit comes before any that expects a miss (a miss fills).
$node->append_conf('postgresql.conf', "dlock.fence_cache_size = 8\n");
$node->restart;
sql(q{
CREATE FUNCTION cached(p_name text, p_token bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM dlock_check(p_name, p_token);
  RETURN true;
EXCEPTION WHEN SQLSTATE '55T01' THEN
  RETURN false;
END
$$;
CREATE TABLE slot_name (name text PRIMARY KEY, t bigint);
});
# grant(name): acquires name in a transaction of its own (which publishes
# it), remembers its token in slot_name and returns it.
sub grant
{
	my ($name) = @_;
	return sql(qq{INSERT INTO slot_name
  SELECT '$name', dlock_acquire('$name', '1 hour') RETURNING t});
}
sub hand_edit
{
	sql(qq{UPDATE dlock_lease SET token = token + 1000 WHERE lock_name = '$_[0]'});
}
sub cached { return sql(qq{SELECT cached(name, t) FROM slot_name WHERE name = '$_[0]'}) }

my @long = map { "slot-long-$_:" . ('x' x 30) } 1 .. 4;
for my $n (@long)
{
	grant($n);
	hand_edit($n);
}
is(join(',', map { cached($_) } @long), 't,t,t,t',
	'four names of 42 bytes, two slots each, fill the bucket');
is(write_sqlstate(qq{SET dlock.fence_cache = off; SELECT dlock_check(name, t) FROM slot_name WHERE name = '$long[0]'}),
	'55T01', 'the index holds the hand edit (the control)');
grant('slot-s1');
hand_edit('slot-s1');
is(join(',', map { cached($_) } 'slot-s1', @long[1 .. 3], $long[0]), 't,t,t,t,f',
	'a name of 7 bytes took one slot of the victim, the first long name (both its slots dropped); the others stayed');

# One byte more than the longest name cached (its grant clears the bucket:
# first), then two of the longest, which differ in their last byte only
# (which a lookup compares in the entry's second slot).
my $n86a = 'a' x 85 . '1';
my $n86b = 'a' x 85 . '2';
my $n87 = 'c' x 87;
grant($n87);
sql(q{SELECT dlock_acquire('slot-fill:' || i, '1 hour') FROM generate_series(1, 8) i});
my $ta = grant($n86a);
my $tb = grant($n86b);
cmp_ok($tb, '>', $ta, "the second 86-byte name's token is greater");
hand_edit($_) for ($n86a, $n86b, $n87);
is(cached($n86a) . ',' . cached($n86b), 't,t',
	'two names of 86 bytes are cached, and found by their whole names');
is(cached($n87), 'f', 'a name of 87 bytes is not cached');
# The boundary of one slot: a name of 22 bytes takes one, of 23 two.  Each
# set comes after the grant of a name too long to cache ($clear), which
# clears the bucket, so that they fill empty slots.  cached_set($clear,
# @names) grants the names, edits them by hand and returns which are cached.
sub cached_set
{
	my ($clear, @names) = @_;
	grant($clear);
	grant($_) for @names;
	hand_edit($_) for @names;
	return join(',', map { cached($_) } @names);
}
is(cached_set('d' x 87, map { sprintf('slot-22-%014d', $_) } 1 .. 8),
	't,t,t,t,t,t,t,t', 'eight names of 22 bytes fill the bucket, one slot each');
is(cached_set('e' x 87, map { sprintf('slot-23-%015d', $_) } 1 .. 2), 't,t',
	'two names of 23 bytes that differ in their last byte (in the second slot) are both cached');

# Part 2.
my $clients = 8;
my $per_client = 60;
my $transactions = $clients * $per_client;
my $rows = 6;

sql(qq{
CREATE TABLE acct2 (id int PRIMARY KEY, k text NOT NULL, val int NOT NULL,
                    fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE ON acct2 FOR EACH ROW
  EXECUTE FUNCTION dlock_fence('{k}', 'fence_token', 'latest');
CREATE SEQUENCE write_log_seq;
CREATE TABLE write_log (seq bigint PRIMARY KEY, id int NOT NULL,
                        token bigint NOT NULL, lease_token bigint,
                        pre_lease bigint);
-- the lease's token read right before the fence checks (a BEFORE trigger
-- that fires first, by name): a newer committed token than the write's
-- means the fence must reject it, so an accepted write below it is a
-- stale answer
CREATE FUNCTION pre_lease() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
  PERFORM set_config('dlock_test.pre_lease',
    coalesce((SELECT token FROM dlock_leases
               WHERE lock_name = NEW.k)::text, ''), true);
  RETURN NEW;
END
\$\$;
CREATE TRIGGER a_pre_lease BEFORE UPDATE ON acct2 FOR EACH ROW
  EXECUTE FUNCTION pre_lease();
CREATE FUNCTION log_write() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
  INSERT INTO write_log
  VALUES (nextval('write_log_seq'), NEW.id, NEW.fence_token,
          (SELECT token FROM dlock_leases WHERE lock_name = NEW.k),
          nullif(current_setting('dlock_test.pre_lease', true), '')::bigint);
  RETURN NULL;
END
\$\$;
CREATE TRIGGER log_write AFTER UPDATE ON acct2 FOR EACH ROW
  EXECUTE FUNCTION log_write();
CREATE TABLE outcome (n bigserial PRIMARY KEY, outcome text NOT NULL);
-- fenced_write: 1 is added to row p_id with token p_token (0: not
-- acquired, nothing written); only 55T01 is caught.
CREATE FUNCTION fenced_write(p_id int, p_token bigint) RETURNS text
LANGUAGE plpgsql AS \$\$
BEGIN
  IF p_token = 0 THEN
    INSERT INTO outcome (outcome) VALUES ('not acquired');
    RETURN 'not acquired';
  END IF;
  BEGIN
    UPDATE acct2 SET val = val + 1, fence_token = p_token WHERE id = p_id;
    INSERT INTO outcome (outcome) VALUES ('accepted');
    RETURN 'accepted';
  EXCEPTION WHEN SQLSTATE '55T01' THEN
    INSERT INTO outcome (outcome) VALUES ('rejected');
    RETURN 'rejected';
  END;
END
\$\$;
-- three names of one slot, three of two (the last of 86 bytes, the
-- longest cached): 9 slots, more than the one bucket has
CREATE TABLE race_name AS
  SELECT i AS id, CASE WHEN i <= 3 THEN 'race:' || i
                       ELSE 'race:' || i || ':' || repeat('y', (i - 3) * 26 + 1)
                  END AS k
    FROM generate_series(1, $rows) i;
SELECT dlock_acquire(k, '1 hour') FROM race_name;
INSERT INTO acct2
  SELECT id, k, 0, token FROM race_name JOIN dlock_leases ON lock_name = k;
SELECT dlock_release(lock_name, token) FROM dlock_leases WHERE lock_name LIKE 'race:%';
});

$node->pgbench(
	"-n -c $clients -j $clients -t $per_client",
	0,
	[
		qr{number of transactions actually processed: $transactions/$transactions},
		qr{number of failed transactions: 0 }
	],
	[qr{^$}],
	'pgbench: concurrent takeovers and cached fenced writes',
	{
		'015_fence_cache.sql' => qq{
\\set id random(1, $rows)
\\set ttl random(5, 40)
\\set pause random(0, 60)
SELECT coalesce(dlock_acquire(k, :ttl * interval '1 millisecond', interval '20 ms'), 0) AS tok FROM race_name WHERE id = :id \\gset
SELECT fenced_write(:id, :tok);
\\sleep :pause ms
SELECT fenced_write(:id, :tok);
SELECT fenced_write(:id, :tok);
}
	},
	'postgres');

note(
	"outcomes:\n",
	sql(q{SELECT outcome, count(*) FROM outcome GROUP BY 1 ORDER BY 1}));
cmp_ok(sql(q{SELECT count(*) FROM outcome WHERE outcome = 'accepted'}),
	'>', 0, 'some writes were accepted');
cmp_ok(sql(q{SELECT count(*) FROM outcome WHERE outcome = 'rejected'}),
	'>', 0, 'some writes were rejected');
is( sql(
		q{
SELECT count(*) FROM (
  SELECT token < lag(token) OVER (PARTITION BY id ORDER BY seq) AS backwards
    FROM write_log) s
 WHERE backwards}),
	'0',
	'per row, accepted tokens in commit order never decrease');
is(sql(q{SELECT count(*) FROM write_log WHERE NOT lease_token >= token}),
	'0', 'the lease\'s token is never older than an accepted token');
is(sql(q{SELECT count(*) FROM write_log WHERE pre_lease IS NULL}),
	'0', 'every accepted write knows the lease token read before its check');
is(sql(q{SELECT count(*) FROM write_log WHERE token < pre_lease}),
	'0', 'no accepted token is older than the lease token committed before its check');
is(sql(q{SELECT count(*) FROM outcome WHERE outcome = 'accepted'}),
	sql(q{SELECT count(*) FROM write_log}),
	'every accepted write is logged, and nothing else');

$node->stop;
done_testing();
