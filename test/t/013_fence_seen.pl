#!/usr/bin/perl
#
# test/t/013_fence_seen.pl
#	  Fencing mode 'seen' across two clusters: the pause scenario with the
#	  leases in one cluster and the fenced table in another (src/mark.c:
#	  per lock name, the highest token a database has accepted; a lower
#	  one is rejected with 55T01, a higher one raises the mark).
#
# Cluster A is the lease store (dlock installed, no fenced table).  Cluster
# B holds the data: database shop, dlock installed (no lease is ever taken
# there) and table orders, fenced by dlock_fence('order:{id}',
# 'fence_token', 'seen') for INSERT, UPDATE and DELETE.  B learns of tokens
# only from the writes it is shown.
#
#   1. Setup: row 1 is created with token t0 of order:1 from A, row 2 with
#      a token of order:2; B's marks are t0 and that token.
#   2. Holder 1, a process of its own (a bash script running psql),
#      acquires order:1 on A for 1 s (token t1 > t0), reports t1 and then
#      waits to write to B.  The test freezes it with SIGSTOP; its lease
#      expires on A while it is stopped.  Holder 2, another process,
#      acquires order:1 on A (t2 > t1) and updates row 1 in B with t2:
#      accepted, B's mark for order:1 becomes t2.  Holder 1 is resumed
#      with SIGCONT and updates row 1 with t1: rejected with 55T01 (the
#      detail names t1 and the mark t2), psql exits 1; row 1 still holds
#      holder 2's data and the mark stays t2.
#   3. The stale holder's DELETE: dlock_check('order:1', t1, 'seen') is
#      itself rejected (55T01, "fencing token rejected for lock"); a
#      DELETE after that rejected check (rolled back to a savepoint, so
#      the transaction goes on) is rejected as unchecked (55T01); a DELETE
#      in a transaction of its own too.  Row 1 is still there.
#   4. pg_dump of shop (custom format), pg_restore into a new database of
#      B: the marks come along unchanged (token and raised_at); there t1
#      is still rejected, by the trigger and by dlock_check, and the
#      current holder's t2 passes.
#   5. In shop, the current holder deletes row 1 after dlock_check with t2
#      (accepted); the mark outlives the row: a new row 1 with t1 is
#      rejected, one with t2 accepted.
#   6. dlock_purge_marks: with a horizon between the two marks' raised_at,
#      it deletes only order:2's (returns 1); order:1's is untouched.  Row
#      2 still refuses an older token by its own history.
#
# Every wait polls; the only lease that must expire has a ttl of 1 s.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();
use DlockTest;
use DlockCli qw(dlock_start dlock_wait wait_for_file write_script slurp);

my $store = PostgreSQL::Test::Cluster->new('seen_leases');
$store->init;
$store->start;
$store->safe_psql('postgres', 'CREATE EXTENSION dlock');

my $data = PostgreSQL::Test::Cluster->new('seen_data');
$data->init;
$data->start;
$data->safe_psql('postgres', 'CREATE DATABASE shop');
$data->safe_psql(
	'shop', q{
CREATE EXTENSION dlock;
CREATE TABLE orders (id int PRIMARY KEY, note text, fence_token bigint);
CREATE TRIGGER orders_fence BEFORE INSERT OR UPDATE OR DELETE ON orders
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('order:{id}', 'fence_token', 'seen');
});

sub on_a { return $store->safe_psql('postgres', $_[0]); }
sub on_b { return $data->safe_psql($_[1] // 'shop', $_[0]); }

# mark($name, $db) is B's mark for lock $name in $db (default shop):
# "token", or '' when there is none.
sub mark
{
	my ($name, $db) = @_;
	return on_b("SELECT token FROM dlock_fence_mark WHERE lock_name = '$name'", $db);
}

# row($id, $db) is row $id of orders in $db: "note|fence_token".
sub row
{
	my ($id, $db) = @_;
	return on_b("SELECT note, fence_token FROM orders WHERE id = $id", $db);
}

# process_state($pid) is the state letter of /proc/$pid/stat (T: stopped).
sub process_state
{
	my $stat = slurp("/proc/$_[0]/stat");
	return $stat =~ /^\d+ \(.*\) (\S)/ ? $1 : '';
}

# rejected($what, $sql, $re, %opt): $sql (its last statement) fails on B
# with SQLSTATE 55T01 and psql's stderr matches $re.
sub rejected
{
	my ($what, $sql, $re, %opt) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my ($state, $out, $err) = sqlstate_of($data, $sql, dbname => $opt{dbname} // 'shop');
	is($state, '55T01', "$what: rejected with 55T01") or diag("error: $err");
	like($err, $re, "$what: the error says why");
	return $err;
}

###########################################################################
# 1. Setup: rows 1 and 2, each written with a token from A.
my $t0 = on_a("SELECT dlock_acquire('order:1', '1 minute', '0', 'setup')");
on_b("INSERT INTO orders VALUES (1, 'created', $t0)");
is(on_a("SELECT dlock_release('order:1', $t0)"), 't', 'setup: order:1 released on A');
my $u = on_a("SELECT dlock_acquire('order:2', '1 minute', '0', 'setup')");
on_b("INSERT INTO orders VALUES (2, 'created', $u)");
is(mark('order:1'), $t0, "B's mark for order:1 is the token of its first write");
is(mark('order:2'), $u,  "B's mark for order:2 is the token of its first write");
is(on_b('SELECT count(*) FROM dlock_leases'), '0', 'B holds no leases');

###########################################################################
# 2. The pause.
my $dir = PostgreSQL::Test::Utils::tempdir('seen');
my $conn_a = $store->connstr('postgres');
my $conn_b = $data->connstr('shop');

# holder NAME TTL NOTE: acquires order:1 on A for TTL, writes the token to
# $dir/NAME.token, waits until $dir/NAME.go exists, then updates row 1 in B
# with NOTE and its token.  Exits with psql's status of that update (1: it
# failed), 2 when the acquire failed.
write_script("$dir/holder", qq{set -u
name=\$1 ttl=\$2 note=\$3
tok=\$(psql -X -A -t -v ON_ERROR_STOP=1 -d "$conn_a" \\
    -c "SELECT dlock_acquire('order:1', '\$ttl', '0', 'holder \$name')") || exit 2
[[ \$tok =~ ^[1-9][0-9]*\$ ]] || exit 2
echo "\$tok" > "$dir/\$name.token.tmp" && mv "$dir/\$name.token.tmp" "$dir/\$name.token"
until [ -e "$dir/\$name.go" ]; do sleep 0.01; done
exec psql -X -q -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -d "$conn_b" \\
    -c "UPDATE orders SET note = '\$note', fence_token = \$tok WHERE id = 1"
});

my @holders;

# A holder left behind by a failed test (maybe stopped) is ended.
END
{
	local $?;    # keep the test's exit status
	for my $h (grep { !defined $_->{rc} } @holders)
	{
		kill 'CONT', $h->{pid};
		kill 'KILL', $h->{pid};
		waitpid($h->{pid}, 0);
	}
}

my $h1 = dlock_start([ 'h1', '1 s', 'holder 1: shipped' ], program => "$dir/holder");
push @holders, $h1;
ok(wait_for_file("$dir/h1.token"), 'holder 1 acquired order:1 on A');
my $t1 = slurp("$dir/h1.token") =~ s/\n//r;
cmp_ok($t1, '>', $t0, "holder 1's token t1 ($t1) is greater than t0 ($t0)");

kill 'STOP', $h1->{pid};
my $deadline = Time::HiRes::time() + 10;
Time::HiRes::sleep(0.01)
  while process_state($h1->{pid}) ne 'T' && Time::HiRes::time() < $deadline;
is(process_state($h1->{pid}), 'T', 'holder 1 is stopped (SIGSTOP) before its write to B');

wait_for_expiry($store, 'order:1')
  or die "holder 1's lease did not expire";
is(on_a("SELECT token FROM dlock_leases WHERE lock_name = 'order:1'"),
	$t1, "holder 1's lease on A expired while it was stopped");

open(my $fh, '>', "$dir/h2.go") or die "cannot write $dir/h2.go: $!";
close($fh);
my $h2 = dlock_start([ 'h2', '1 minute', 'holder 2: cancelled' ],
	program => "$dir/holder");
push @holders, $h2;
is(dlock_wait($h2), 0, 'holder 2 acquired order:1 on A and updated row 1 in B');
my $t2 = slurp("$dir/h2.token") =~ s/\n//r;
cmp_ok($t2, '>', $t1, "holder 2's token t2 ($t2) is greater than t1 ($t1)");
is(row(1), "holder 2: cancelled|$t2", "row 1 holds holder 2's write");
is(mark('order:1'), $t2, "B's mark for order:1 is raised to t2");
my $raised_1 = on_b("SELECT raised_at FROM dlock_fence_mark WHERE lock_name = 'order:1'");

kill 'CONT', $h1->{pid};
open($fh, '>', "$dir/h1.go") or die "cannot write $dir/h1.go: $!";
close($fh);
is(dlock_wait($h1), 1, "holder 1, resumed (SIGCONT): its write fails (psql exits 1)");
like($h1->{stderr}, qr/^ERROR:  55T01: fencing token rejected for relation "orders"$/m,
	"holder 1's write is rejected with 55T01");
like($h1->{stderr},
	qr/^DETAIL:  Lock "order:1": token $t1 is lower than token $t2, the highest this database has accepted for it\.$/m,
	'the detail names t1 and the mark t2');
is(row(1), "holder 2: cancelled|$t2", "row 1 still holds holder 2's write");
is(mark('order:1'), $t2, "B's mark for order:1 is still t2");

###########################################################################
# 3. The stale holder's DELETE.
rejected(
	"the stale holder's dlock_check('order:1', t1, 'seen')",
	"SELECT dlock_check('order:1', $t1, 'seen')",
	qr/ERROR:  55T01: fencing token rejected for lock "order:1"\nDETAIL:  Lock "order:1": token $t1 is lower than token $t2,/
);
rejected(
	"the stale holder's DELETE after its rejected check",
	"BEGIN; SAVEPOINT s; SELECT dlock_check('order:1', $t1, 'seen'); ROLLBACK TO s; DELETE FROM orders WHERE id = 1",
	qr/token $t1 is lower than token $t2.*ERROR:  55T01: fencing token rejected for relation "orders"\nDETAIL:  Lock "order:1": the transaction has not checked this lock; a DELETE is accepted only after dlock_check passed/s
);
rejected(
	"the stale holder's DELETE without a check",
	'DELETE FROM orders WHERE id = 1',
	qr/ERROR:  55T01: fencing token rejected for relation "orders"\nDETAIL:  Lock "order:1": the transaction has not checked this lock/
);
is(row(1), "holder 2: cancelled|$t2", 'row 1 is not deleted');
is(mark('order:1'), $t2, "the rejections left B's mark at t2");

###########################################################################
# 4. Dump and restore of B's database: the marks come along.
my $marks_sql =
  'SELECT lock_name, token, raised_at FROM dlock_fence_mark ORDER BY lock_name';
my $marks = on_b($marks_sql);
my $dump = $data->basedir . '/shop.dump';
$data->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', 'shop' ], 'pg_dump of shop');
on_b('CREATE DATABASE shop_restored', 'postgres');
$data->command_ok([ 'pg_restore', '--exit-on-error', '-d', 'shop_restored', $dump ],
	'pg_restore into shop_restored');
is(on_b($marks_sql, 'shop_restored'), $marks, 'the restored database has the same marks');
is(row(1, 'shop_restored'), "holder 2: cancelled|$t2", 'the restored row 1');
rejected(
	'after restore: a write with t1',
	"UPDATE orders SET note = 'holder 1: shipped', fence_token = $t1 WHERE id = 1",
	qr/ERROR:  55T01: .*\nDETAIL:  Lock "order:1": token $t1 is lower than token $t2,/,
	dbname => 'shop_restored');
rejected(
	"after restore: dlock_check with t1",
	"SELECT dlock_check('order:1', $t1, 'seen')",
	qr/ERROR:  55T01: fencing token rejected for lock "order:1"/,
	dbname => 'shop_restored');
is( on_b(
		"UPDATE orders SET note = 'holder 2: refunded', fence_token = $t2 WHERE id = 1 RETURNING note, fence_token",
		'shop_restored'),
	"holder 2: refunded|$t2",
	'after restore: a write with t2 is accepted');
is(mark('order:1', 'shop_restored'), $t2, 'after restore: the mark is still t2');

###########################################################################
# 5. The current holder deletes row 1; the mark outlives the row.
is( on_b(
		"BEGIN; SELECT dlock_check('order:1', $t2, 'seen'); DELETE FROM orders WHERE id = 1 RETURNING note; COMMIT"
	),
	"$t2\nholder 2: cancelled",
	"the current holder's DELETE after dlock_check with t2 is accepted");
is(on_b('SELECT count(*) FROM orders WHERE id = 1'), '0', 'row 1 is deleted');
is(mark('order:1'), $t2, "the mark for order:1 is still t2");
rejected(
	'a new row 1 with t1',
	"INSERT INTO orders VALUES (1, 'holder 1: shipped', $t1)",
	qr/DETAIL:  Lock "order:1": token $t1 is lower than token $t2,/);
is(on_b("INSERT INTO orders VALUES (1, 'holder 2: again', $t2) RETURNING fence_token"),
	$t2, 'a new row 1 with t2 is accepted');

###########################################################################
# 6. dlock_purge_marks deletes the old mark (order:2's, raised in the
#    setup, over a second before order:1's) and keeps the newer one.
is(on_b("SELECT dlock_purge_marks('1 hour')"), '0', 'purge with a 1 hour horizon deletes nothing');
my $horizon = on_b(
	"SELECT clock_timestamp() - (a.raised_at + (b.raised_at - a.raised_at) / 2)
	   FROM dlock_fence_mark a, dlock_fence_mark b
	  WHERE a.lock_name = 'order:2' AND b.lock_name = 'order:1'");
note "purge horizon: $horizon";
is(on_b("SELECT dlock_purge_marks('$horizon')"), '1',
	'purge with a horizon between the two marks deletes one');
is(on_b('SELECT lock_name, token, raised_at FROM dlock_fence_mark'),
	"order:1|$t2|$raised_1", "only order:1's mark is left, unchanged");
rejected(
	'after the purge: row 2 with an older token',
	"UPDATE orders SET note = 'older', fence_token = $t0 WHERE id = 2",
	qr/DETAIL:  Lock "order:2": the row carries token $t0, lower than token $u it already had\./
);
is(mark('order:2'), '', "the rejected write left no mark for order:2");
is(on_b('SELECT count(*) FROM dlock_leases'), '0', 'B still holds no leases');

$store->stop;
$data->stop;
done_testing();
