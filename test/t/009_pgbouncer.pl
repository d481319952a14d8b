#!/usr/bin/perl
#
# test/t/009_pgbouncer.pl
#	  Leases through PgBouncer in transaction pooling mode, where
#	  consecutive transactions of one client run on different server
#	  sessions (leases belong to tokens, not to sessions; see
#	  docs/guarantees.md, "Connection poolers").
#
# The test starts its own pgbouncer (Debian's package; the system service,
# if any, is neither used nor touched) on 127.0.0.1 and a free port, with
# auth_type = trust and pool_mode = transaction, in front of a throwaway
# cluster with dlock preloaded.  Pooled databases:
#   postgres  default_pool_size = 4
#   solo      pool_size = 1
#   hot       pool_size = 2
#
#   1. Sixteen pgbench clients through the pool of four server connections,
#      on 20 names: acquire (wait 0, 5 or 10 ms) and, if granted, record
#      the grant, write the name's protected counter row with the token
#      (dlock_fence in 'live' mode), renew and release, each statement its
#      own transaction, every one recording the server process it ran on.
#      Checked: pgbench ends without any error (a rejected fenced write, or
#      any other error, would abort its client); every renew and release of
#      a granted lease returned true; every grant wrote its row exactly once
#      (grants = sum of the counters = rows of the audit table filled by an
#      AFTER trigger, token for token); at most four server processes ran
#      the clients' statements, and grants were renewed or released on
#      another server process than the one that granted them.
#   2. The contrast with session advisory locks, through the pool of one:
#      a client takes pg_try_advisory_lock(42) and disconnects; the lock
#      stays with the pooled server session, so another client "gets" the
#      same lock and can even unlock it.  The same two clients with dlock:
#      the second is refused and cannot release the first one's lease.
#   3. Measured, not asserted: what waiting acquires cost a pool.  Eight
#      clients acquire one held name with wait => '2 s' through the pool of
#      two (and then over direct connections).  SHOW POOLS on pgbouncer's
#      admin console is sampled while they run, and a probe query through
#      the same pool is timed; the figures are printed.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;
use IPC::Run;
use Time::HiRes qw(time usleep);

my ($pgbouncer) = grep { -x $_ }
  (map { "$_/pgbouncer" } split(/:/, $ENV{PATH} // ''), '/usr/sbin');
unless (defined $pgbouncer)
{
	fail('pgbouncer is installed (test/lib/common.sh installs it)');
	done_testing();
	exit;
}

my $node = dlock_node('pooled', preload => 1, conf => "max_connections = 40\n");

my $dir = $node->basedir;
my $bport = PostgreSQL::Test::Cluster::get_free_port();
my $server = 'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres';
PostgreSQL::Test::Utils::append_to_file("$dir/userlist.txt",
	qq{"postgres" ""\n});
PostgreSQL::Test::Utils::append_to_file(
	"$dir/pgbouncer.ini", qq{
[databases]
postgres = $server
solo = $server pool_size=1
hot = $server pool_size=2

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bport
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
admin_users = postgres
pool_mode = transaction
default_pool_size = 4
reserve_pool_size = 0
max_client_conn = 100
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
ignore_startup_parameters = extra_float_digits
});

my ($bout, $berr) = ('', '');
my $bouncer = IPC::Run::start([ $pgbouncer, "$dir/pgbouncer.ini" ],
	'>', \$bout, '2>', \$berr);
END { $bouncer->kill_kill if $bouncer && $bouncer->pumpable; }

# pooled_connstr returns the connection string of pooled database $db.
sub pooled_connstr
{
	my ($db) = @_;
	return "host=127.0.0.1 port=$bport user=postgres dbname=$db";
}

# via runs $sql through pgbouncer's database $db, as one new client.
sub via
{
	my ($db, $sql) = @_;
	return $node->safe_psql('postgres', $sql, connstr => pooled_connstr($db));
}

# show_pools returns pgbouncer's SHOW POOLS as a hash: database => row
# (a hash of column => value).
sub show_pools
{
	my ($out, $err) = ('', '');
	IPC::Run::run(
		[ 'psql', '-XAq', '-d', pooled_connstr('pgbouncer'), '-c', 'SHOW POOLS' ],
		'>', \$out, '2>', \$err)
	  or die "SHOW POOLS failed: $err";
	my ($head, @rows) = split /\n/, $out;
	my @cols = split /\|/, $head;
	my %pools;
	for my $row (@rows)
	{
		next if $row =~ /^\(\d+ rows?\)$/;
		my %r;
		@r{@cols} = split /\|/, $row, -1;
		$pools{ $r{database} } = \%r;
	}
	return \%pools;
}

my $up = 0;
for (1 .. 100)
{
	$up = eval { show_pools(); 1 } and last;
	usleep(100_000);
}
ok($up, "pgbouncer runs on 127.0.0.1:$bport") or diag("pgbouncer: $berr");
is(via('postgres', 'SELECT 1'), '1', 'a query through pgbouncer works');

$node->safe_psql(
	'postgres', q{
CREATE EXTENSION dlock;
CREATE TABLE counters (id int PRIMARY KEY, hits int NOT NULL, fence_token bigint);
INSERT INTO counters SELECT i, 0, NULL FROM generate_series(1, 20) i;
CREATE TRIGGER counters_fence BEFORE INSERT OR UPDATE ON counters FOR EACH ROW
  EXECUTE FUNCTION dlock_fence('pool:{id}', 'fence_token', 'live');

-- pid: the server process that ran the statement.
CREATE TABLE grants (token bigint NOT NULL, id int NOT NULL, client int NOT NULL, pid int NOT NULL);
CREATE TABLE ops (token bigint NOT NULL, op text NOT NULL, ok boolean, pid int NOT NULL);
CREATE TABLE audit (token bigint NOT NULL, id int NOT NULL, pid int NOT NULL);
CREATE FUNCTION audit_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO audit VALUES (NEW.fence_token, NEW.id, pg_backend_pid());
  RETURN NULL;
END
$$;
CREATE TRIGGER counters_audit AFTER UPDATE ON counters FOR EACH ROW
  EXECUTE FUNCTION audit_write();
CREATE TABLE waits (run text, client int, got bigint, started timestamptz, ended timestamptz);
});

# 1. Sixteen clients, four server connections.
my $clients = 16;
$node->pgbench(
	"-n -c $clients -j 4 -T 3 -h 127.0.0.1 -p $bport -U postgres",
	0,
	[qr{number of failed transactions: 0 }, qr{processed: [1-9]}],
	[qr{^$}],
	'pgbench: 16 clients through a transaction pool of 4 acquire, write fenced rows, renew and release',
	{
		'009_pooled.sql' => q{
\set id random(1, 20)
\set w random(0, 2)
SELECT coalesce(dlock_acquire('pool:' || :id, '10 s', :w * interval '5 ms', 'pgbench ' || :client_id), 0) AS tok \gset
\if :tok > 0
INSERT INTO grants VALUES (:tok, :id, :client_id, pg_backend_pid());
UPDATE counters SET hits = hits + 1, fence_token = :tok WHERE id = :id;
INSERT INTO ops SELECT :tok, 'renew', dlock_renew('pool:' || :id, :tok, '10 s'), pg_backend_pid();
INSERT INTO ops SELECT :tok, 'release', dlock_release('pool:' || :id, :tok), pg_backend_pid();
\endif
}
	},
	'postgres');

my $grants = sql('SELECT count(*) FROM grants');
note "pooled run: $grants grants; server processes used: "
  . sql('SELECT count(DISTINCT pid) FROM (SELECT pid FROM grants UNION ALL SELECT pid FROM ops UNION ALL SELECT pid FROM audit) p');
cmp_ok($grants, '>', 0, 'leases were granted through the pool');
is(sql('SELECT sum(hits) FROM counters'),
	$grants, 'the counters add up to the number of grants');
is(sql('SELECT count(*) FROM audit'),
	$grants, 'the audit table has one accepted write per grant');
is( sql(
		q{SELECT count(*) FROM grants g FULL JOIN audit a USING (token)
		   WHERE g.token IS NULL OR a.token IS NULL OR g.id <> a.id}),
	'0',
	'every granted token wrote its own row, and no other token wrote');
is(sql('SELECT count(*) - count(DISTINCT token) FROM grants'),
	'0', 'no token was granted twice');
is(sql(q{SELECT count(*) FROM ops WHERE ok}),
	2 * $grants, 'every renew and release of a granted lease returned true');
is( sql(
		q{SELECT count(*) FROM counters c
		   WHERE fence_token IS DISTINCT FROM (SELECT max(token) FROM grants g WHERE g.id = c.id)}
	),
	'0',
	'each counter row carries the last token granted for it');
is(sql(q{SELECT count(*) FROM dlock_leases WHERE live}),
	'0', 'no lease is left live');
cmp_ok(
	sql(
		'SELECT count(DISTINCT pid) FROM (SELECT pid FROM grants UNION ALL SELECT pid FROM ops UNION ALL SELECT pid FROM audit) p'
	),
	'<=', 4,
	'the 16 clients ran on at most 4 server processes');
cmp_ok(
	sql(
		q{SELECT count(*) FROM grants g JOIN ops o USING (token) WHERE o.pid <> g.pid}
	),
	'>', 0,
	'leases were renewed or released on another server process than the one that granted them'
);

# 2. Session advisory locks leak through the pool of one; leases do not.
is(via('solo', 'SELECT pg_try_advisory_lock(42)'),
	't', 'advisory: client A takes advisory lock 42 and disconnects');
is(via('solo', 'SELECT pg_try_advisory_lock(42)'),
	't',
	'advisory: client B also "gets" lock 42: the pooled server session already holds it');
is(via('solo', 'SELECT pg_advisory_unlock(42) AND pg_advisory_unlock(42)'),
	't', 'advisory: client C unlocks what A and B took');
my $ta = via('solo', "SELECT dlock_acquire('solo-job', '1 minute')");
like($ta, qr/^\d+$/, 'dlock: client A acquires solo-job and disconnects');
is(via('solo', "SELECT dlock_acquire('solo-job', '1 minute') IS NULL"),
	't', 'dlock: client B is refused solo-job on the same server session');
is(via('solo', "SELECT dlock_release('solo-job', $ta + 1)"),
	'f', 'dlock: a release without A\'s token ends nothing');
is(via('solo', "SELECT dlock_release('solo-job', $ta)"),
	't', 'dlock: A\'s token releases it, from any session');

# 3. Waiting acquires and the pool.  A direct session holds 'hot' for
# 1 s; eight clients acquire it with wait => '2 s' and a ttl of 100 ms
# (each grant then expires, and the next waiter gets it), first through
# the pool of two, then over direct connections.
sub waiting_run
{
	my ($run, $probe_connstr, @conn) = @_;
	my $script = "$dir/waiting_$run.sql";
	$script =~ s/ /_/g;
	PostgreSQL::Test::Utils::append_to_file(
		$script, qq{
INSERT INTO waits VALUES ('$run', :client_id, NULL, clock_timestamp(), NULL);
UPDATE waits SET got = dlock_acquire('hot', '100 ms', '2 s'), ended = clock_timestamp()
 WHERE run = '$run' AND client = :client_id;
});
	like($node->safe_psql('postgres', "SELECT dlock_acquire('hot', '1 s', '5 s')"),
		qr/^\d+$/, "$run: a direct session holds 'hot' for 1 s");
	my $t0 = time;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'pgbench', '-n', '-c', 8, '-j', 8, '-t', 1, '-f', $script, @conn ],
		'>', \$out, '2>', \$err);
	my ($max_waiting, $max_active, $probe) = (0, 0, undef);
	while ($h->pumpable)
	{
		my $p = show_pools()->{hot};
		$max_waiting = $p->{cl_waiting} if $p->{cl_waiting} > $max_waiting;
		$max_active = $p->{sv_active} if $p->{sv_active} > $max_active;
		if (!defined $probe && time - $t0 > 0.3)
		{
			my $t = time;
			$node->safe_psql('postgres', 'SELECT 1', connstr => $probe_connstr);
			$probe = time - $t;
		}
		usleep(20_000);
		$h->pump_nb;
	}
	$h->finish;
	my $rc = $? >> 8;
	my $elapsed = time - $t0;
	my ($granted, $refused, $span) = split /\|/,
	  $node->safe_psql(
		'postgres', qq{
SELECT count(got), count(*) - count(got),
       round(extract(epoch FROM max(ended) - min(started))::numeric, 2)
  FROM waits WHERE run = '$run'});
	return sprintf(
		"%s: %d granted, %d not granted, pgbench exit %d; all clients done after %.2f s "
		  . "(first statement to last grant on the server: %s s); "
		  . "a probe SELECT 1 over the same kind of connection, sent at 0.3 s, took %.3f s; "
		  . "SHOW POOLS for 'hot' while they ran: max cl_waiting %d, max sv_active %d",
		$run, $granted, $refused, $rc, $elapsed, $span // '-', $probe // -1,
		$max_waiting, $max_active);
}

my $pooled = waiting_run('pool of 2', pooled_connstr('hot'), '-h', '127.0.0.1',
	'-p', $bport, '-U', 'postgres', 'hot');
note "waiting acquires, $pooled";
my $direct = waiting_run('direct', $node->connstr('postgres'), '-h',
	$node->host, '-p', $node->port, 'postgres');
note "waiting acquires, $direct";

$bouncer->signal('TERM');
$bouncer->finish;
$node->stop;
done_testing();
