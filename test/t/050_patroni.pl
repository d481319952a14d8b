#!/usr/bin/perl
#
# test/t/050_patroni.pl
#	  dlock under Patroni (docs/guarantees.md, "Running under Patroni";
#	  tracker issue 16): Debian's patroni and etcd-server, one etcd member
#	  and two Patroni members on loopback, dlock preloaded through Patroni's
#	  bootstrap configuration, and `dlock run` writers on a multi-host
#	  conninfo (target_session_attrs=read-write) through a switchover and a
#	  kill -9 failover, first with asynchronous replication, then with
#	  Patroni's synchronous_mode.
#
# The cluster: etcd 3.4 (one member, free ports, data under the test's
# temporary directory) and members m1 and m2, each with its own data
# directory, PostgreSQL port and REST API port, all on 127.0.0.1.  Patroni
# runs the PostgreSQL binaries of the server under test (bin_dir is the
# directory of the psql on PATH, which test/run-tests puts first) as the
# user the test runs as (test/run-tests runs prove as postgres; Patroni,
# like PostgreSQL, must not run as root).  The bootstrap configuration
# (what Patroni writes into etcd when it creates the cluster) preloads
# dlock, sets ttl 10, loop_wait 1, retry_timeout 3 (fast failovers),
# use_pg_rewind, and primary_start_timeout 0: Patroni's default (300 s)
# restarts a primary whose postmaster died in place, on the same node,
# and fails over only if that takes longer; with 0 a killed primary fails
# over at once, which is what the test is about.  Both members log every
# lease change (dlock.log_lease_changes = 'all'), so their server logs
# give each token's grant and end.
#
# The workload: on the leader, CREATE EXTENSION dlock and a table "work"
# fenced by dlock_fence('job', 'token'), with a second trigger that records
# in each row the lease of 'job' as dlock_leases shows it to that write.
# Two writers (bash loops, A and B) compete for the lease 'job': each runs
# again and again
#
#   dlock run -d CONNINFO --ttl 3s --wait 20s job -- child.sh
#
# on CONNINFO = host=127.0.0.1,127.0.0.1 port=P1,P2
# target_session_attrs=read-write, and records each run's start, end and
# exit status.  The child (bash) records its start and end (wall clock)
# and does four fenced INSERTs 0.15 s apart with $DLOCK_TOKEN, each with
# psql on the same conninfo, recording each one's outcome (SQLSTATE); on
# SIGTERM it stops its psql and exits.  Meanwhile, each bounded:
#
#   1. async switchover (POST /switchover), until the old leader streams
#      from the new one again;
#   2. async failover: the primary's walsender is stopped (SIGSTOP) for
#      1.5 s, as a slow network would hold the standby back, so that the
#      standby misses the primary's last commits; then kill -9 of the
#      primary's postmaster (and of the stopped walsender), until the
#      other member is primary and the killed one (crash recovery,
#      pg_rewind) streams from it again;
#   3. synchronous_mode: true (PATCH /config), until the replica is the
#      synchronous standby;
#   4. sync switchover, until the old leader is the synchronous standby;
#   5. sync failover: kill -9 of the primary's postmaster, until the other
#      member is primary and accepted writes again.
#
# Checks, from the writers' and children's records, the final primary's
# table and dlock_leases, and the members' server logs:
#
#   - every dlock run exit status is one docs/cli.md allows for this
#     workload: 0, 69, 75, 76 (and the new status of issue 16, see
#     $EXIT_UNCONFIRMED);
#   - tokens strictly increase across all runs, in the order their children
#     started;
#   - tokens jump at each promotion: every token handed out after a
#     promotion is at least the clock reading (microseconds since
#     2000-01-01) taken before the switchover or the kill;
#   - no stale write lands: in the final table, tokens are non-decreasing
#     in commit order, every row's token is the lease's token as
#     dlock_leases showed it to the write, and none exceeds the token
#     dlock_leases holds at the end; with synchronous_mode, no write the
#     children saw committed is missing; a write with the token of any
#     write lost in the asynchronous failover is rejected (55T01) on the
#     final primary;
#   - no child outlives its lease: each child started after its token's
#     grant and ended before the lease's end (release, or the expiry that
#     a takeover reports), as the server logs tell; an exception is
#     allowed only in the asynchronous failover, where a grant or a
#     renewal can be lost (docs/guarantees.md, "Failover"), and only if
#     no write that child made after the lease's end landed;
#   - a run that exits 0 made no write that the fence rejected (dlock
#     run exits 79 instead when no release confirmed the lease).
#
# The write gap of each event (the longest time between two consecutive
# acknowledged writes that are in the final table, around the event) is
# printed with note() as "write gap: ...", and summed up in one line,
# "write gaps: ..." (docs/guarantees.md quotes them).  Logs of etcd,
# Patroni and PostgreSQL, and the writers' and children's records, stay in
# tmp_check/log/patroni/.  Patroni, PostgreSQL and etcd are stopped on
# every path (END block).  Every wait is bounded, and the waits until the
# writers stop share a budget of 120 s: the test takes about a minute on
# 2 cores, and at most about 3 if everything waited as long as allowed.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockCli;
use Cwd ();
use File::Path qw(make_path);
use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use POSIX ();
use Time::HiRes qw(time sleep);
use Time::Local qw(timegm);

# The exit status of `dlock run` when CMD ended but no release confirmed
# the lease (DLOCK_EXIT_UNCONFIRMED in cli/dlock_cli.h, docs/cli.md "Exit
# statuses").
my $EXIT_UNCONFIRMED = 79;

my $patroni_bin = '/usr/bin/patroni';
my ($etcd_bin) = grep { -x $_ } ('/usr/bin/etcd', '/usr/sbin/etcd');
unless (-x $patroni_bin && defined $etcd_bin)
{
	plan skip_all =>
	  'patroni or etcd-server is not installed (make test, as root, installs them)'
	  if $> != 0;
	fail('patroni and etcd-server are installed (test/lib/common.sh installs them)');
	done_testing();
	exit;
}
if ($> == 0)
{
	plan skip_all => 'Patroni must not run as root: run this test through test/run-tests';
}

my $dlock = dlock_path();
my %allowed_exit = map { $_ => 1 } (0, 69, 75, 76, $EXIT_UNCONFIRMED);
note 'dlock run exit statuses accepted: ' . join(' ', sort { $a <=> $b } keys %allowed_exit);

# The server under test: test/run-tests puts its bindir first on PATH.
my ($bindir) = map { "$_" }
  grep { -x "$_/postgres" && -x "$_/psql" } split /:/, $ENV{PATH};
die 'no PostgreSQL bindir on PATH' unless defined $bindir;

my $tmp = PostgreSQL::Test::Utils::tempdir('patroni');
my $sock = PostgreSQL::Test::Utils::tempdir_short();
my $logdir = "$PostgreSQL::Test::Utils::log_path/patroni";
make_path($logdir);
$logdir = Cwd::abs_path($logdir);    # PostgreSQL's log_directory: absolute
my $rec = "$logdir/records";    # what the writers and children record
make_path($rec);

my $http = HTTP::Tiny->new(timeout => 2);
my $t_start = time();
# Every wait until the writers stop comes out of one budget, so that the
# test ends within 3 minutes whatever happens: about 45 s are needed.
my $budget_end = $t_start + 120;
sub budget_left { my $left = $budget_end - time(); return $left > 0 ? $left : 0; }

# ---------------------------------------------------------------------
# Processes: etcd, the Patroni members, the writers.  Each is started in
# a session of its own; the END block stops them all.
# ---------------------------------------------------------------------

my %proc;    # name => pid (process group leader)

# spawn($name, $log, @cmd) starts @cmd in a new session with stdout and
# stderr appended to $log and returns its pid.
sub spawn
{
	my ($name, $log, @cmd) = @_;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		POSIX::setsid();
		open(STDIN,  '<',  '/dev/null') or POSIX::_exit(250);
		open(STDOUT, '>>', $log)        or POSIX::_exit(250);
		open(STDERR, '>&', \*STDOUT)    or POSIX::_exit(250);
		$SIG{$_} = 'DEFAULT' for qw(HUP INT QUIT TERM USR1 USR2 CHLD PIPE ALRM);
		exec(@cmd) or POSIX::_exit(251);
	}
	$proc{$name} = $pid;
	return $pid;
}

# reap($name, $timeout) waits up to $timeout s for $name to exit; true if
# it did.
sub reap
{
	my ($name, $timeout) = @_;
	my $pid = $proc{$name} or return 1;
	my $deadline = time() + $timeout;
	while (time() < $deadline)
	{
		my $r = waitpid($pid, POSIX::WNOHANG());
		if ($r == $pid || $r == -1)
		{
			delete $proc{$name};
			return 1;
		}
		sleep(0.05);
	}
	return 0;
}

# stop_proc($name, $timeout): SIGTERM to its process group, then SIGKILL
# after $timeout s.
sub stop_proc
{
	my ($name, $timeout) = @_;
	my $pid = $proc{$name} or return;
	kill 'TERM', -$pid;
	return if reap($name, $timeout);
	kill 'KILL', -$pid;
	reap($name, 5);
	return;
}

my %member;    # m1, m2 => {name, pg, rest, data}

# postmaster_pid($m) returns the pid in $m's postmaster.pid, or undef.
sub postmaster_pid
{
	my ($m) = @_;
	my $f = slurp("$member{$m}{data}/postmaster.pid");
	return $f =~ /^(\d+)\n/ ? $1 : undef;
}

my $cleaned = 0;
my %stopped;    # walsenders stopped with SIGSTOP (see failover)

sub cleanup
{
	return if $cleaned++;
	kill 'CONT', $_ for keys %stopped;
	# Writers first (their dlock and children are in their sessions).
	stop_proc($_, 3) for grep { /^writer/ } keys %proc;
	# Patroni stops its PostgreSQL on SIGTERM (fast shutdown).
	for my $m (grep { /^m\d$/ } keys %proc) { kill 'TERM', -$proc{$m}; }
	my $until = time() + 15;
	for my $m (grep { /^m\d$/ } keys %proc)
	{
		next if reap($m, $until - time());
		kill 'KILL', -$proc{$m};
		reap($m, 3);
	}
	# A postmaster Patroni left behind (it runs in a session of its own).
	for my $m (sort keys %member)
	{
		my $pid = postmaster_pid($m);
		next unless defined $pid && kill(0, $pid);
		system("$bindir/pg_ctl", '-D', $member{$m}{data}, '-m', 'immediate',
			'-w', '-t', '10', 'stop');
	}
	stop_proc('etcd', 10);
	return;
}

END
{
	my $rc = $?;
	cleanup();
	$? = $rc;
}

# ---------------------------------------------------------------------
# Helpers: HTTP (Patroni's REST API), SQL (psql), polling.
# ---------------------------------------------------------------------

sub api_url { my ($m, $path) = @_; return "http://127.0.0.1:$member{$m}{rest}$path"; }

# api_status($m, $path) returns the HTTP status of GET $path on $m's REST
# API (599 when it does not answer).
sub api_status { return $http->get(api_url(@_))->{status}; }

# api_json($m, $method, $path, $body) sends a request with a JSON body and
# returns (status, content).
sub api_json
{
	my ($m, $method, $path, $body, $timeout) = @_;
	$timeout //= 30;
	$timeout = budget_left() + 1 if budget_left() + 1 < $timeout;
	my $h = HTTP::Tiny->new(timeout => $timeout);
	my $r = $h->request(
		$method,
		api_url($m, $path),
		{
			headers => { 'Content-Type' => 'application/json' },
			content => encode_json($body)
		});
	return ($r->{status}, $r->{content});
}

# poll($what, $timeout, $sub) calls $sub every 0.1 s until it returns
# true, at most $timeout s; returns the time it took, or dies.
sub poll
{
	my ($what, $timeout, $sub) = @_;
	my $t0 = time();
	if (budget_left() < $timeout)
	{
		$timeout = budget_left();
		$what .= " (the test's budget of 120 s ran out)";
	}
	while (1)
	{
		return time() - $t0 if $sub->();
		die "timed out after $timeout s waiting for: $what\n"
		  if time() - $t0 > $timeout;
		sleep(0.1);
	}
}

# sql($m, $query) runs $query on member $m (postgres database) and returns
# its output (-At), or dies.
sub sql
{
	my ($m, $query, $timeout) = @_;
	my ($out, $err) = ('', '');
	my $ok = eval {
		IPC::Run::run(
			[
				"$bindir/psql", '-X', '-At', '-v', 'ON_ERROR_STOP=1', '-d',
				"host=127.0.0.1 port=$member{$m}{pg} dbname=postgres user=postgres connect_timeout=3",
				'-c', $query
			],
			'<', \'', '>', \$out, '2>', \$err,
			IPC::Run::timeout($timeout // 15));
	};
	die "psql on $m failed: $err$@\n" unless $ok;
	chomp $out;
	return $out;
}

sub sql_try { my @a = @_; my $r = eval { sql(@a) }; return $r; }

# sql_state($m, $query) runs $query on member $m and returns its SQLSTATE
# ('00000' when it succeeded).
sub sql_state
{
	my ($m, $query) = @_;
	my ($out, $err) = ('', '');
	eval {
		IPC::Run::run(
			[
				"$bindir/psql", '-X', '-At', '-v', 'ON_ERROR_STOP=1', '-v', 'VERBOSITY=verbose',
				'-d', "host=127.0.0.1 port=$member{$m}{pg} dbname=postgres user=postgres connect_timeout=3",
				'-c', $query
			],
			'<', \'', '>', \$out, '2>', \$err,
			IPC::Run::timeout(15));
	};
	return $err =~ /^ERROR:  ([0-9A-Z]{5}):/m ? $1 : $err eq '' ? '00000' : "? $err";
}

# primary() returns the member whose REST API reports it as the primary
# (undef when none or both).
sub primary
{
	my @p = grep { api_status($_, '/primary') == 200 } sort keys %member;
	return @p == 1 ? $p[0] : undef;
}

sub other { return $_[0] eq 'm1' ? 'm2' : 'm1'; }

# wait_streaming($replica, $primary, $timeout, $sync): until $replica runs
# as a replica (REST /replica, or /sync with $sync) and $primary's
# pg_stat_replication shows it streaming (as 'sync' with $sync).
sub wait_streaming
{
	my ($r, $p, $timeout, $sync) = @_;
	return poll(
		"$r streaming from $p" . ($sync ? ' as the synchronous standby' : ''),
		$timeout,
		sub {
			return 0 unless api_status($r, $sync ? '/sync' : '/replica') == 200;
			my $n = sql_try($p,
				"SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND application_name = '$r'"
				  . ($sync ? " AND sync_state = 'sync'" : ''),
				5);
			return defined $n && $n eq '1';
		});
}

# ---------------------------------------------------------------------
# etcd
# ---------------------------------------------------------------------

my $etcd_client = PostgreSQL::Test::Cluster::get_free_port();
my $etcd_peer = PostgreSQL::Test::Cluster::get_free_port();
spawn(
	'etcd', "$logdir/etcd.log", $etcd_bin,
	'--name', 'e1', '--data-dir', "$tmp/etcd",
	'--listen-client-urls', "http://127.0.0.1:$etcd_client",
	'--advertise-client-urls', "http://127.0.0.1:$etcd_client",
	'--listen-peer-urls', "http://127.0.0.1:$etcd_peer",
	'--initial-advertise-peer-urls', "http://127.0.0.1:$etcd_peer",
	'--initial-cluster', "e1=http://127.0.0.1:$etcd_peer",
	'--initial-cluster-state', 'new', '--logger', 'zap',
	'--log-outputs', 'stderr');
my $took = poll(
	'etcd to answer /health',
	20,
	sub {
		my $r = $http->get("http://127.0.0.1:$etcd_client/health");
		return $r->{status} == 200 && $r->{content} =~ /"health":\s*"true"/;
	});
pass(sprintf('etcd answers on 127.0.0.1:%d (%.1f s)', $etcd_client, $took));

# ---------------------------------------------------------------------
# The Patroni members
# ---------------------------------------------------------------------

for my $m ('m1', 'm2')
{
	$member{$m} = {
		pg   => PostgreSQL::Test::Cluster::get_free_port(),
		rest => PostgreSQL::Test::Cluster::get_free_port(),
		data => "$tmp/$m/data",
	};
	make_path("$tmp/$m");
	chmod 0700, "$tmp/$m";
	# The bootstrap section is used by the member that creates the
	# cluster; both carry it, as in a real deployment.
	my $conf = <<"YAML";
scope: dlock-test
name: $m
log:
  level: INFO
restapi:
  listen: 127.0.0.1:$member{$m}{rest}
  connect_address: 127.0.0.1:$member{$m}{rest}
etcd3:
  hosts: 127.0.0.1:$etcd_client
watchdog:
  mode: 'off'
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 3
    maximum_lag_on_failover: 16777216
    primary_start_timeout: 0
    synchronous_mode: false
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        shared_preload_libraries: dlock
        dlock.log_lease_changes: 'all'
        max_connections: 50
        wal_keep_size: 128MB
  initdb:
  - encoding: UTF8
  - no-locale
postgresql:
  listen: 127.0.0.1:$member{$m}{pg}
  connect_address: 127.0.0.1:$member{$m}{pg}
  data_dir: $member{$m}{data}
  bin_dir: $bindir
  pgpass: $tmp/$m/pgpass
  remove_data_directory_on_rewind_failure: true
  remove_data_directory_on_diverged_timelines: true
  authentication:
    superuser:
      username: postgres
      password: super-secret
    replication:
      username: replicator
      password: repl-secret
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
  parameters:
    unix_socket_directories: '$sock'
    logging_collector: 'on'
    log_directory: '$logdir'
    log_filename: '$m-postgresql.log'
    log_line_prefix: '%m [%p] '
    log_timezone: UTC
    timezone: UTC
    fsync: 'off'
YAML
	open(my $fh, '>', "$tmp/$m/patroni.yml") or die $!;
	print $fh $conf;
	close($fh);
}

# m1 creates the cluster (initdb), then m2 joins it (pg_basebackup).
spawn('m1', "$logdir/m1-patroni.log", $patroni_bin, "$tmp/m1/patroni.yml");
$took = poll('m1 to be the primary', 90, sub { api_status('m1', '/primary') == 200 });
pass(sprintf('m1 bootstrapped the cluster and is the primary (%.1f s)', $took));
spawn('m2', "$logdir/m2-patroni.log", $patroni_bin, "$tmp/m2/patroni.yml");
$took = wait_streaming('m2', 'm1', 90);
pass(sprintf('m2 streams from m1 (%.1f s)', $took));

is(sql('m1', 'SHOW shared_preload_libraries'), 'dlock',
	'dlock is preloaded through the bootstrap configuration');
is(sql('m1', "SELECT current_setting('dlock.log_lease_changes')"), 'all',
	'dlock.log_lease_changes is set through the bootstrap configuration');

sql(
	'm1', q{
CREATE EXTENSION dlock;
CREATE TABLE work (
  writer text NOT NULL, run int NOT NULL, k int NOT NULL,
  token bigint NOT NULL,
  written_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  server_port int DEFAULT inet_server_port(),
  lease_token bigint, lease_live boolean,
  PRIMARY KEY (writer, run, k));
CREATE TRIGGER work_fence BEFORE INSERT OR UPDATE OR DELETE ON work
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('job', 'token');
-- Fires after work_fence (triggers fire in name order): the lease as
-- dlock_leases shows it to this write.
CREATE FUNCTION work_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  SELECT token, live INTO NEW.lease_token, NEW.lease_live
    FROM dlock_leases WHERE lock_name = 'job';
  RETURN NEW;
END $$;
CREATE TRIGGER work_zz_lease BEFORE INSERT ON work
  FOR EACH ROW EXECUTE FUNCTION work_lease();
});
pass('the extension and the fenced table are created on the leader');

# ---------------------------------------------------------------------
# The writers
# ---------------------------------------------------------------------

my $conninfo =
  "host=127.0.0.1,127.0.0.1 port=$member{m1}{pg},$member{m2}{pg} "
  . 'target_session_attrs=read-write dbname=postgres user=postgres connect_timeout=2';
my $stop = "$rec/stop";

write_script(
	"$tmp/child.sh", q{
# child.sh WRITER RUN: four fenced INSERTs with $DLOCK_TOKEN.
W=$1 I=$2
log=$DIR/child-$W
now() { date +%s.%N; }
sub=
on_term() {
	[ -n "$sub" ] && kill -TERM "$sub" 2>/dev/null && wait "$sub" 2>/dev/null
	echo "end $W $I $DLOCK_TOKEN $(now) term" >>"$log"
	exit 143
}
trap on_term TERM
echo "start $W $I $DLOCK_TOKEN $(now)" >>"$log"
for k in 1 2 3 4; do
	tb=$(now)
	psql -X -q -At -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -d "$CONN" \
		-c "INSERT INTO work (writer, run, k, token) VALUES ('$W', $I, $k, $DLOCK_TOKEN)" \
		>/dev/null 2>"$DIR/psql-$W.err" </dev/null &
	sub=$!
	wait "$sub"
	rc=$?
	sub=
	ta=$(now)
	state=$(sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\):.*/\1/p' "$DIR/psql-$W.err" | head -n 1)
	[ "$rc" -ne 0 ] && [ -z "$state" ] && state=conn
	echo "ins $W $I $k $DLOCK_TOKEN $tb $ta $rc ${state:--}" >>"$log"
	if [ "$rc" -ne 0 ]; then
		sed "s/^/$W $I $k: /" "$DIR/psql-$W.err" >>"$DIR/psql-errors"
	fi
	sleep 0.15 &
	sub=$!
	wait "$sub"
	sub=
done
echo "end $W $I $DLOCK_TOKEN $(now) done" >>"$log"
exit 0
});

write_script(
	"$tmp/writer.sh", q{
# writer.sh WRITER: dlock run in a loop until $STOP exists.
W=$1
i=0
while [ ! -e "$STOP" ]; do
	i=$((i + 1))
	echo "== run $i $(date +%s.%N)" >>"$DIR/writer-$W.err"
	t0=$(date +%s.%N)
	"$DLOCK" run -d "$CONN" --ttl 3s --wait 20s --owner "writer $W run $i" job -- \
		"$CHILD" "$W" "$i" </dev/null >/dev/null 2>>"$DIR/writer-$W.err"
	rc=$?
	t1=$(date +%s.%N)
	echo "run $W $i $t0 $t1 $rc" >>"$DIR/runs-$W"
	[ "$rc" -eq 0 ] || sleep 0.1
done
});

{
	local $ENV{DIR} = $rec;
	local $ENV{CONN} = $conninfo;
	local $ENV{STOP} = $stop;
	local $ENV{DLOCK} = $dlock;
	local $ENV{CHILD} = "$tmp/child.sh";
	local $ENV{PATH} = "$bindir:$ENV{PATH}";
	spawn("writer$_", "$logdir/writer$_.log", "$tmp/writer.sh", $_) for ('A', 'B');
}

# acked_after($t): the number of writes the children saw committed after
# time $t.
sub acked_after
{
	my ($t) = @_;
	my $n = 0;
	for my $w ('A', 'B')
	{
		for (split /\n/, slurp("$rec/child-$w"))
		{
			$n++ if /^ins \S+ \S+ \S+ \S+ \S+ (\S+) 0 / && $1 > $t;
		}
	}
	return $n;
}

$took = poll('the writers to write', 30, sub { acked_after(0) >= 4 });
pass(sprintf('the writers write (%.1f s)', $took));
sleep(2);

# ---------------------------------------------------------------------
# The events
# ---------------------------------------------------------------------

my @events;    # {name, mode, kind, t0, t_primary, t_end, from, to}

sub us_since_2000 { return int(($_[0] - 946684800) * 1e6); }

# switchover($mode): POST /switchover from the primary to the other
# member, bounded; then until the old primary streams from the new one.
sub switchover
{
	my ($mode) = @_;
	my $from = primary() // die "no primary before the switchover\n";
	my $to = other($from);
	my $e = { name => "$mode switchover", mode => $mode, kind => 'switchover', from => $from, to => $to };
	note "$e->{name}: $from -> $to";
	$e->{t0} = time();
	my ($status, $body) =
	  api_json($from, 'POST', '/switchover', { leader => $from, candidate => $to }, 40);
	is($status, 200, "$e->{name}: POST /switchover from $from to $to answers 200")
	  or diag("POST /switchover: $status $body");
	poll("$to to be the primary", 40, sub { api_status($to, '/primary') == 200 });
	$e->{t_primary} = time();
	wait_streaming($from, $to, 60, $mode eq 'sync');
	poll('a write after the switchover', 30, sub { acked_after($e->{t_primary}) >= 2 });
	$e->{t_end} = time();
	note sprintf('%s: %s primary after %.1f s, %s streams again after %.1f s',
		$e->{name}, $to, $e->{t_primary} - $e->{t0}, $from, $e->{t_end} - $e->{t0});
	push @events, $e;
	return;
}

# failover($mode, $rejoin, $lag): kill -9 the primary's postmaster; until
# the other member is primary and accepts writes, and with $rejoin until
# the killed one streams from it again.  With $lag (seconds, asynchronous
# replication only) the primary's walsender to the standby is stopped
# (SIGSTOP) that long before the kill, as a slow network would hold the
# standby back, and killed with the postmaster, so that the standby misses
# the primary's last commits.  (Stopping the standby's walreceiver instead
# loses nothing: the kernel's socket buffer keeps what the walsender sent
# meanwhile.)
sub failover
{
	my ($mode, $rejoin, $lag) = @_;
	my $from = primary() // die "no primary before the failover\n";
	my $to = other($from);
	my $e = { name => "$mode failover", mode => $mode, kind => 'failover', from => $from, to => $to };
	my $pid = postmaster_pid($from) // die "no postmaster.pid for $from\n";
	my $receiver;
	if ($lag)
	{
		$receiver = sql($from,
			"SELECT pid FROM pg_stat_replication WHERE application_name = '$to'");
		die "no walsender for $to on $from\n" unless $receiver =~ /^\d+$/;
		note "$e->{name}: the walsender of $from to $to (pid $receiver) stopped for $lag s";
		kill 'STOP', $receiver;
		$stopped{$receiver} = 1;
		$e->{t_lag} = time();
		sleep($lag);
	}
	note "$e->{name}: kill -9 of $from\'s postmaster (pid $pid)";
	$e->{t0} = time();
	ok(kill('KILL', $pid), "$e->{name}: the postmaster of $from is killed");
	if ($lag)
	{
		kill 'KILL', $receiver;
		delete $stopped{$receiver};
	}
	poll("$to to be the primary", 60, sub { api_status($to, '/primary') == 200 });
	$e->{t_primary} = time();
	poll('a write after the failover', 30, sub { acked_after($e->{t_primary}) >= 2 });
	wait_streaming($from, $to, 90) if $rejoin;
	$e->{t_end} = time();
	note sprintf('%s: %s primary after %.1f s%s', $e->{name}, $to,
		$e->{t_primary} - $e->{t0},
		$rejoin ? sprintf(', %s streams again after %.1f s', $from, $e->{t_end} - $e->{t0}) : '');
	push @events, $e;
	return;
}

my $events_ok = eval {
	switchover('async');
	sleep(1);
	failover('async', 1, 1.5);

	my $p = primary() // die "no primary\n";
	my ($status, $body) = api_json($p, 'PATCH', '/config', { synchronous_mode => JSON::PP::true });
	is($status, 200, 'PATCH /config synchronous_mode: true answers 200')
	  or diag("PATCH /config: $status $body");
	$took = wait_streaming(other($p), $p, 30, 1);
	pass(sprintf('%s is the synchronous standby (%.1f s)', other($p), $took));
	sleep(1);

	switchover('sync');
	sleep(1);
	failover('sync', 0);
	sleep(1);
	1;
};
ok($events_ok, 'every event completed in time') or diag($@);

# Stop the writers: each finishes its current run.
my $t_stop = time();
open(my $sfh, '>', $stop) or die $!;
close($sfh);
for my $w ('writerA', 'writerB')
{
	ok(reap($w, 10), "$w stopped after its current run")
	  or stop_proc($w, 3);
}
note sprintf('writers stopped %.1f s after the stop file', time() - $t_stop);

# ---------------------------------------------------------------------
# The records
# ---------------------------------------------------------------------

# Runs: writer, run => {t0, t1, rc}; children: writer, run => {token,
# start, end, how, ins => [{k, tb, ta, rc, state}]}.
my (%run, %child);
for my $w ('A', 'B')
{
	for (split /\n/, slurp("$rec/runs-$w"))
	{
		my (undef, $ww, $i, $t0, $t1, $rc) = split / /;
		$run{"$ww/$i"} = { w => $ww, i => $i, t0 => $t0, t1 => $t1, rc => $rc };
	}
	for (split /\n/, slurp("$rec/child-$w"))
	{
		my @f = split / /;
		my $c = $child{"$f[1]/$f[2]"} //= { w => $f[1], i => $f[2], ins => [] };
		if ($f[0] eq 'start') { $c->{token} = $f[3]; $c->{start} = $f[4]; }
		elsif ($f[0] eq 'end') { $c->{end} = $f[4]; $c->{how} = $f[5]; }
		elsif ($f[0] eq 'ins')
		{
			push @{ $c->{ins} },
			  { k => $f[3], tb => $f[5], ta => $f[6], rc => $f[7], state => $f[8] };
		}
	}
}
my @runs = sort { $a->{t0} <=> $b->{t0} } values %run;
my @children = sort { $a->{start} <=> $b->{start} } grep { defined $_->{start} } values %child;
$run{"$_->{w}/$_->{i}"}{child} = $_ for @children;

my %rc_count;
$rc_count{ $_->{rc} }++ for @runs;
note 'dlock run exits: '
  . join(', ', map { "$_: $rc_count{$_}" } sort { $a <=> $b } keys %rc_count)
  . sprintf(' (%d runs, %d children)', scalar(@runs), scalar(@children));
cmp_ok(scalar(@children), '>=', 20, 'the writers ran at least 20 children');

# 1. Exit statuses.
my @bad_rc = grep { !$allowed_exit{ $_->{rc} } } @runs;
is(scalar(@bad_rc), 0, 'every dlock run exit status is one docs/cli.md allows')
  or diag('runs with other statuses: '
	  . join(', ', map { "$_->{w} run $_->{i}: $_->{rc}" } @bad_rc)
	  . " (their stderr is in $rec/writer-*.err)");
my @started_bad = grep { $_->{child} && ($_->{rc} == 69 || $_->{rc} == 75) } @runs;
is(scalar(@started_bad), 0, 'no run that exited 69 or 75 started its child');

# 2. Tokens strictly increase in the order the children started, and
# per writer.
my @bad_order;
for my $n (1 .. $#children)
{
	push @bad_order, "$children[$n-1]{token} then $children[$n]{token}"
	  unless $children[$n]{token} > $children[ $n - 1 ]{token};
}
is(scalar(@bad_order), 0, 'tokens strictly increase across all runs, in the order their children started')
  or diag("out of order: @bad_order");

# 3. Jumps: every token of a child that started after the new primary
# was reported is at least the clock (microseconds since 2000) at the
# event's start, and the tokens just before the event are below it.
for my $e (@events)
{
	my $floor = us_since_2000($e->{t0});
	my @after = grep { $_->{start} > $e->{t_primary} } @children;
	my @before = grep { $_->{start} < $e->{t0} } @children;
	my $first = $after[0];
	my $last = $before[-1];
	ok(defined $first && !grep({ $_->{token} < $floor } @after),
		"$e->{name}: every token after the promotion is >= the clock at the event ($floor)")
	  or diag('tokens after: ' . join(' ', map { $_->{token} } @after[0 .. ($#after < 5 ? $#after : 5)]));
	ok(defined $last && $last->{token} < $floor,
		"$e->{name}: the last token before the event is below it");
	note sprintf('%s: token %s before, %s after (a jump of %s)', $e->{name},
		$last->{token} // '?', $first->{token} // '?',
		defined $first && defined $last ? $first->{token} - $last->{token} : '?');
}

# 4. The final primary's table and dlock_leases.
my $final = primary() // 'm1';
my @rows = map { [ split /\|/ ] } split /\n/,
  sql($final,
	q{SELECT writer, run, k, token, extract(epoch FROM written_at), server_port,
       coalesce(lease_token, -1), coalesce(lease_live::text, '')
  FROM work ORDER BY written_at, token});
my $lease_token = sql($final, "SELECT token FROM dlock_leases WHERE lock_name = 'job'");
note sprintf('final primary %s: %d rows, lease token %s', $final, scalar(@rows), $lease_token);
my %in_table = map { ("$_->[0]/$_->[1]/$_->[2]" => $_) } @rows;

my (@decreasing, @not_current, @not_live);
for my $n (0 .. $#rows)
{
	my $r = $rows[$n];
	push @decreasing, "@$r" if $n > 0 && $r->[3] < $rows[ $n - 1 ][3];
	push @not_current, "@$r" if $r->[3] != $r->[6];
	push @not_live, "@$r" if $r->[7] ne 'true';
}
is(scalar(@decreasing), 0, 'no stale write landed: tokens are non-decreasing in commit order')
  or diag("rows after a greater token: @decreasing[0 .. ($#decreasing < 5 ? $#decreasing : 5)]");
is(scalar(@not_current), 0, "every row's token was the lease's current token at its write")
  or diag("rows: @not_current[0 .. ($#not_current < 5 ? $#not_current : 5)]");
ok(!grep({ $_->[3] > $lease_token } @rows), 'no row carries a token above the one dlock_leases holds');
note scalar(@not_live) . ' rows were written while dlock_leases showed the lease not live (mode latest accepts them)';

# Acknowledged writes, and the ones missing from the final table.
my @acked;
for my $c (@children)
{
	for my $x (@{ $c->{ins} })
	{
		push @acked, { %$x, c => $c, kept => exists $in_table{"$c->{w}/$c->{i}/$x->{k}"} }
		  if $x->{rc} == 0;
	}
}
@acked = sort { $a->{ta} <=> $b->{ta} } @acked;
my @lost = grep { !$_->{kept} } @acked;
my $t_sync = (grep { $_->{mode} eq 'sync' } @events)[0];
my @lost_sync = defined $t_sync ? grep { $_->{tb} >= $t_sync->{t0} } @lost : ();
is(scalar(@lost_sync), 0, 'synchronous_mode: no write the children saw committed is lost')
  or diag(join(', ', map { "$_->{c}{w} run $_->{c}{i} insert $_->{k}" } @lost_sync));
note scalar(@acked) . ' writes acknowledged, ' . scalar(@lost)
  . ' of them lost (asynchronous failover)';
# The holders of the writes lost with the old primary still have their
# tokens: none of them can write on the final primary.
{
	my %stale = map { ($_->{c}{token} => 1) } @lost;
	my @landed = grep {
		sql_state($final, "INSERT INTO work (writer, run, k, token) VALUES ('stale', 0, 0, $_)") ne '55T01'
	} sort keys %stale;
	note sprintf('the %d tokens of the writes lost in the asynchronous failover: %s',
		scalar(keys %stale), join(' ', sort keys %stale));
	is(scalar(@landed), 0,
		'a write with the token of a write lost in the asynchronous failover is rejected (55T01)')
	  or diag("accepted or failed otherwise: @landed");
}
my %rejected;
for my $c (@children)
{
	$rejected{"$c->{w}/$c->{i}"} = scalar grep { $_->{state} eq '55T01' } @{ $c->{ins} };
}
note 'writes rejected by the fence (55T01): ' . (eval { my $s = 0; $s += $_ for values %rejected; $s });

# 5. No child outlives its lease: grants and ends from the server logs.
my (%grant, %end);
for my $m (sort keys %member)
{
	my $last = '';
	for (split /\n/, slurp("$logdir/$m-postgresql.log"))
	{
		next unless /^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{3}) UTC \[\d+\] (\w+):  (.*)$/;
		my $t = timegm($6, $5, $4, $3, $2 - 1, $1) + $7 / 1000;
		my ($level, $msg) = ($8, $9);
		if ($level eq 'LOG' && $msg =~ /^dlock: lease "job" (?:acquired|taken over) with token (\d+)/)
		{
			$grant{$1} //= [ $t, $m ];
			$grant{$1} = [ $t, $m ] if $t < $grant{$1}[0];
		}
		if ($level eq 'LOG' && $msg =~ /^dlock: lease "job" with token (\d+) released/)
		{
			push @{ $end{$1} }, [ $t + 0.001, $m, 'release' ];    # the log's ms are truncated
		}
		if (   $level eq 'DETAIL'
			&& $last =~ /taken over/
			&& $msg =~ /^Token (\d+) of .* expired at (\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(\.\d+)?\+00 without a release/)
		{
			push @{ $end{$1} },
			  [ timegm($7, $6, $5, $4, $3 - 1, $2) + ($8 // 0), $m, 'expiry' ];
		}
		$last = $msg if $level eq 'LOG';
	}
}
my $async_failover = (grep { $_->{name} eq 'async failover' } @events)[0];
my (@early, @outlived, @excused, $no_grant, $no_end);
my $min_margin;
for my $c (@children)
{
	my $g = $grant{ $c->{token} };
	if (!$g) { $no_grant++; }
	else
	{
		push @early, "$c->{w} run $c->{i} (token $c->{token})" if $c->{start} < $g->[0];
	}
	my @e = @{ $end{ $c->{token} } // [] };
	if (!@e || !defined $c->{end}) { $no_end++; next; }
	my ($first_end) = sort { $a->[0] <=> $b->[0] } @e;
	my $margin = $first_end->[0] - $c->{end};
	$min_margin = $margin if !defined $min_margin || $margin < $min_margin;
	next if $margin >= 0;
	# Past the lease's end: allowed only around the asynchronous failover,
	# and only if no write of the child after that end landed.
	my $in_async = $async_failover
	  && $c->{end} > $async_failover->{t0} - 5
	  && $c->{start} < $async_failover->{t_end};
	my @landed = grep {
		my $r = $in_table{"$c->{w}/$c->{i}/$_->{k}"};
		$r && $r->[4] > $first_end->[0]
	} @{ $c->{ins} };
	my $what = sprintf('%s run %d (token %s) ended %.3f s after its lease (%s on %s)',
		$c->{w}, $c->{i}, $c->{token}, -$margin, $first_end->[2], $first_end->[1]);
	if ($in_async && !@landed) { push @excused, $what; }
	else { push @outlived, $what . (@landed ? ', with writes that landed after it' : ''); }
}
is(scalar(@early), 0, 'every child started after its token was granted') or diag("@early");
is(scalar(@outlived), 0, 'no child outlived its lease') or diag(join("\n", @outlived));
note "asynchronous failover, lease lost with it (no write landed after it): $_" for @excused;
note sprintf('children: %d without a logged grant, %d without a logged end; least margin between a child\'s end and its lease\'s end: %.3f s',
	$no_grant // 0, $no_end // 0, $min_margin // 0);

# 6. A run that exits 0 made no write that the fence rejected.
{
	my @zero_rejected = grep { $_->{rc} == 0 && $_->{child} && $rejected{"$_->{w}/$_->{i}"} } @runs;
	is(scalar(@zero_rejected), 0, 'no run that exited 0 had a write rejected by the fence')
	  or diag(join(', ', map { "$_->{w} run $_->{i} (token $_->{child}{token})" } @zero_rejected));
}

# Runs that exited 0 although no server logged the release of their
# token (the release got no answer, e.g. from a primary that was killed,
# or was lost with it): the case of issue 16's item 3, where dlock run
# says 0 without a server having confirmed the lease.
{
	my @unconfirmed = grep {
		my $t = $_->{child} && $_->{child}{token};
		$_->{rc} == 0 && $t && !grep { $_->[2] eq 'release' } @{ $end{$t} // [] }
	} @runs;
	note sprintf('%d runs exited 0 without a release logged by a server: %s',
		scalar(@unconfirmed),
		join(', ', map { "$_->{w} run $_->{i} (token $_->{child}{token})" } @unconfirmed) || 'none');
}

# 7. The write gaps: the longest time between two consecutive acknowledged
# writes that are in the final table, from 2 s before the event to its
# end; and, for scale, the longest gap before the first event.
my @kept = map { $_->{ta} } grep { $_->{kept} } @acked;
my @all_acked = map { $_->{ta} } @acked;
sub longest_gap
{
	my ($from, $to, $all) = @_;
	my @t = grep { $_ >= $from && $_ <= $to } ($all ? @all_acked : @kept);
	my ($gap, $at) = (0, undef);
	for my $n (1 .. $#t)
	{
		($gap, $at) = ($t[$n] - $t[ $n - 1 ], $t[ $n - 1 ]) if $t[$n] - $t[ $n - 1 ] > $gap;
	}
	return ($gap, $at);
}
my ($base_gap) = @events ? longest_gap(0, $events[0]{t0}) : (0);
note sprintf('write gap: steady state (before the first event): %.2f s', $base_gap);
my @summary;
for my $e (@events)
{
	my ($gap, $at) = longest_gap(($e->{t_lag} // $e->{t0}) - 2, $e->{t_end});
	my ($agap) = longest_gap(($e->{t_lag} // $e->{t0}) - 2, $e->{t_end}, 1);
	push @summary, sprintf('%s %.1f s', $e->{name}, $gap)
	  . ($agap < $gap - 0.01 ? sprintf(' (%.1f s counting the writes it lost)', $agap) : '');
	note sprintf('write gap: %s (%s -> %s): %.2f s from the last acknowledged write before to the first after, of the writes the final primary has; %.2f s of all acknowledged writes (new primary reported after %.2f s)',
		$e->{name}, $e->{from}, $e->{to}, $gap, $agap, $e->{t_primary} - $e->{t0});
	if ($e->{t_lag})
	{
		my @lost_here = grep { !$_->{kept} && $_->{ta} >= $e->{t_lag} - 1 && $_->{ta} <= $e->{t0} + 1 } @acked;
		note sprintf('%s: the standby was held back %.1f s; %d acknowledged writes lost with the old primary',
			$e->{name}, $e->{t0} - $e->{t_lag}, scalar(@lost_here));
	}
	cmp_ok($gap, '<', 30, "$e->{name}: writes resumed");
	# The runs whose child was running when the event began.
	my @across = grep {
		$_->{child} && $_->{child}{start} < $e->{t0} && ($_->{child}{end} // 0) > $e->{t0}
	} @runs;
	note sprintf('%s: runs under way: %s', $e->{name},
		join(', ',
			map {
				my $t = $_->{child}{token};
				my @rel = map { $_->[1] } grep { $_->[2] eq 'release' } @{ $end{$t} // [] };
				sprintf('%s run %d token %s exit %d, child %s after %.2f s, %d writes ok, %d rejected, released on %s',
					$_->{w}, $_->{i}, $t, $_->{rc}, $_->{child}{how} // '?',
					$_->{child}{end} - $_->{child}{start},
					scalar(grep { $_->{rc} == 0 } @{ $_->{child}{ins} }),
					$rejected{"$_->{w}/$_->{i}"}, @rel ? "@rel" : 'no server')
			} @across) || 'none');
}

note 'write gaps: ' . join(', ', @summary)
  . sprintf(' (steady state %.1f s; primary reported after: %s)', $base_gap,
	join(', ', map { sprintf('%.1f s', $_->{t_primary} - $_->{t0}) } @events));
{
	my ($out, $err) = ('', '');
	eval {
		IPC::Run::run([ '/usr/bin/patronictl', '-c', "$tmp/$final/patroni.yml", 'list' ],
			'<', \'', '>', \$out, '2>', \$err, IPC::Run::timeout(15));
	};
	note "patronictl list at the end:\n$out$err";
}
note sprintf('test ran %.1f s; PostgreSQL %s; Patroni %s; etcd %s', time() - $t_start,
	sql($final, 'SHOW server_version'),
	(`$patroni_bin --version 2>&1` =~ /(\d[\d.]*)/)[0] // '?',
	(`$etcd_bin --version 2>&1` =~ /etcd Version: (\S+)/)[0] // '?');

cleanup();
done_testing();
