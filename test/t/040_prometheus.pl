#!/usr/bin/perl
#
# test/t/040_prometheus.pl
#	  dlock's metrics through Debian's prometheus-postgres-exporter and the
#	  queries file contrib/prometheus/dlock-queries.yaml
#	  (docs/monitoring.md, "Prometheus").
#
# Node "prometheus" has dlock in shared_preload_libraries and three
# databases: postgres and app2 with the extension, nodlock without.  The
# exporters connect as role dlock_exporter (LOGIN, member of pg_monitor:
# the role docs/monitoring.md describes) over the node's Unix socket, run
# as the node's OS user, listen on 127.0.0.1 on a free port (the packaged
# service, port 9187, is neither used nor touched) and are read with
# HTTP::Tiny.
#
#   1. A scripted workload.  In postgres: acquires, a renewal, a renewal
#      and a release of a released lease, a release, an acquire after the
#      release, a refusal, a takeover after expiry, a break, a purge,
#      fenced writes accepted and rejected in modes latest and live; then
#      a background session waits in dlock_acquire on a held name, so
#      dlock_waiters has one row.  In app2: one live lease and one
#      expired.  The view dlock_stats shows the counts this implies.
#   2. Exporter A, set up as docs/monitoring.md says: DATA_SOURCE_NAME's
#      database postgres, --auto-discover-databases
#      --include-databases=app2.  Once the dlock metrics appear (bounded
#      retry), each metric of postgres and app2 equals the views, read
#      before and after the scrape: every counter of dlock_stats (the
#      view's columns but datid, datname and stats_reset: a counter
#      without a metric fails), typed counter; stats_reset; the live
#      leases; the waiting sessions; the oldest wait lies between its ages
#      read before and after the scrape.  The dlock metrics carry the
#      labels datname and server only; none names nodlock; the scrape had
#      no error (pg_exporter_last_scrape_error 0).
#   3. The holder releases and the waiter is served: the next scrape
#      shows no waiter, an oldest wait of 0, and the counters again equal
#      to the view.
#   4. Exporter B, without --include-databases: the failure
#      docs/monitoring.md warns of.  In nodlock the queries fail (the
#      exporter logs 'relation "public.dlock_stats" does not exist'),
#      pg_exporter_last_scrape_error is 1, and the metrics of postgres and
#      app2 are still there and equal to the views.
#
# Skipped only when the exporter is not installed and the test does not
# run as root, who could have installed it (make test, as root, installs
# it: test/lib/common.sh).  Every exporter is stopped at the end, also
# when the test dies (END block).  Every wait is bounded by
# $PostgreSQL::Test::Utils::timeout_default.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use HTTP::Tiny;
use IPC::Run;
use Time::HiRes qw(time usleep);

my $top = abs_path(dirname(abs_path($0)) . '/../..');
my $queries = "$top/contrib/prometheus/dlock-queries.yaml";

my ($exporter) = grep { -x $_ }
  (map { "$_/prometheus-postgres-exporter" } split(/:/, $ENV{PATH} // ''),
	'/usr/bin');
unless (defined $exporter)
{
	plan skip_all =>
	  'prometheus-postgres-exporter is not installed (make test, as root, installs it)'
	  if $> != 0;
	fail('prometheus-postgres-exporter is installed (test/lib/common.sh installs it)');
	done_testing();
	exit;
}
ok(-r $queries, 'the queries file is there');

my $node = dlock_node(
	'prometheus',
	preload => 1,
	setup => q{
CREATE EXTENSION dlock;
CREATE DATABASE app2;
CREATE DATABASE nodlock;
CREATE ROLE dlock_exporter LOGIN;
GRANT pg_monitor TO dlock_exporter;
});
$node->safe_psql('app2', 'CREATE EXTENSION dlock');

# expire($db, $name) waits until the lease on $name in $db is no longer
# live.
sub expire
{
	my ($db, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	ok(wait_for_expiry($node, $name, $db),
		"$db: the lease on $name expired");
	return;
}

# 1. The workload.
my $t1 = sql("SELECT dlock_acquire('job:a', '1 hour')");
like($t1, qr/^\d+$/, 'job:a acquired');
is(sql("SELECT dlock_renew('job:a', $t1, '1 hour')"), 't', 'job:a renewed');
is(sql("SELECT dlock_release('job:a', $t1)"), 't', 'job:a released');
is(sql("SELECT dlock_release('job:a', $t1)"), 'f',
	'job:a: a second release fails');
is(sql("SELECT dlock_renew('job:a', $t1, '1 hour')"), 'f',
	'job:a: renewing the released lease fails');
my $t2 = sql("SELECT dlock_acquire('job:a', '1 hour')");
like($t2, qr/^\d+$/, 'job:a acquired again after its release');
is(sql("SELECT dlock_acquire('job:a', '1 hour') IS NULL"), 't',
	'job:a: another acquire is refused');

my $b1 = sql("SELECT dlock_acquire('job:b', '200 ms')");
like($b1, qr/^\d+$/, 'job:b acquired for 200 ms');
expire('postgres', 'job:b');
my $b2 = sql("SELECT dlock_acquire('job:b', '1 hour')");
like($b2, qr/^\d+$/, 'job:b taken over after its expiry');

like(sql("SELECT dlock_acquire('job:c', '1 hour')"),
	qr/^\d+$/, 'job:c acquired');
is(sql("SELECT dlock_break('job:c')"), 't', 'job:c broken');
is(sql("SELECT dlock_purge('0 s')"), '1',
	'the purge deletes the broken lease of job:c');

$node->safe_psql(
	'postgres', q{
CREATE TABLE reports (id int PRIMARY KEY, fence_token bigint);
CREATE TRIGGER reports_fence BEFORE INSERT OR UPDATE ON reports
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('job:b', 'fence_token');
CREATE TABLE tallies (id int PRIMARY KEY, fence_token bigint);
CREATE TRIGGER tallies_fence BEFORE INSERT OR UPDATE ON tallies
  FOR EACH ROW EXECUTE FUNCTION dlock_fence('job:a', 'fence_token', 'live');
});
sql("INSERT INTO reports VALUES (1, $b2)");
fails_with($node, "INSERT INTO reports VALUES (2, $b1)",
	'55T01', 'a write with the token of the lease taken over (latest)');
sql("INSERT INTO tallies VALUES (1, $t2)");
fails_with($node, "INSERT INTO tallies VALUES (2, $t1)",
	'55T01', 'a write with the token of the released lease (live)');

like(sql("SELECT dlock_acquire('app2:x', '1 hour')", 'app2'),
	qr/^\d+$/, 'app2: app2:x acquired');
like(sql("SELECT dlock_acquire('app2:y', '10 ms')", 'app2'),
	qr/^\d+$/, 'app2: app2:y acquired for 10 ms');
expire('app2', 'app2:y');

my $waiter = bg_session($node, 'waiter');
bg_start($waiter, "SELECT dlock_acquire('job:a', '1 hour', '10 min');");
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 1 AND bool_and(pid = $waiter->{pid}) FROM dlock_waiters"),
	'a session waits for job:a');

# The counter columns of dlock_stats: every column but datid, datname and
# stats_reset.
my @counters = split /\n/, sql(
	q{
SELECT attname FROM pg_attribute
 WHERE attrelid = 'public.dlock_stats'::regclass AND attnum > 0 AND NOT attisdropped
   AND attname NOT IN ('datid', 'datname', 'stats_reset')
 ORDER BY attnum});
cmp_ok(scalar(@counters), '>=', 19,
	'dlock_stats has its counters (' . scalar(@counters) . ')');

# stats_row($db, @columns) returns the columns @columns (expressions with
# "AS name" are named name) of $db's row of dlock_stats as a hash (empty
# when the view has no row for $db).
sub stats_row
{
	my ($db, @cols) = @_;
	my $row = sql(
		'SELECT '
		  . join(', ', @cols)
		  . ' FROM dlock_stats WHERE datname = current_database()',
		$db);
	return {} if $row eq '';
	my @v = split /\|/, $row, -1;
	my @names = map { /\bAS (\w+)$/ ? $1 : $_ } @cols;
	return { map { $names[$_] => $v[$_] } 0 .. $#cols };
}

# stats($db, @columns): the same as "name=value" lines.
sub stats
{
	my ($db, @cols) = @_;
	my $r = stats_row($db, @cols);
	return join("\n", map { "$_=" . ($r->{$_} // '(no row)') } @cols);
}

is( stats(
		'postgres', qw(grants_new grants_after_release takeovers refusals
		  renewals renewals_failed releases releases_failed breaks purged
		  fence_latest_accepted fence_latest_rejected fence_live_accepted
		  fence_live_rejected fence_seen_accepted fence_seen_rejected wait_timeouts)),
	join("\n",
		qw(grants_new=3 grants_after_release=1 takeovers=1 refusals=1
		  renewals=1 renewals_failed=1 releases=1 releases_failed=1 breaks=1 purged=1
		  fence_latest_accepted=1 fence_latest_rejected=1 fence_live_accepted=1
		  fence_live_rejected=1 fence_seen_accepted=0 fence_seen_rejected=0 wait_timeouts=0)),
	'postgres: dlock_stats counted the workload');
is(stats('app2', qw(grants_new takeovers refusals)),
	"grants_new=2\ntakeovers=0\nrefusals=0", 'app2: dlock_stats counted its workload');

# The exporters.
my @exporters;

END
{
	local $?;    # the test's exit status, not kill_kill's
	for my $e (@exporters)
	{
		$e->{h}->kill_kill(grace => 5) if $e->{h}->pumpable;
	}
}

# start_exporter($name, @flags) starts an exporter with the queries file
# and @flags, listening on a free port of 127.0.0.1, logging to a file of
# the node's directory.
sub start_exporter
{
	my ($name, @flags) = @_;
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $log = $node->basedir . "/exporter_$name.log";
	local %ENV = %ENV;
	delete $ENV{$_} for grep { /^(PG_EXPORTER_|DATA_SOURCE_)/ } keys %ENV;
	$ENV{DATA_SOURCE_NAME} =
	    'host=' . $node->host
	  . ' port=' . $node->port
	  . ' user=dlock_exporter dbname=postgres sslmode=disable';
	my $h = IPC::Run::start(
		[
			$exporter, "--extend.query-path=$queries",
			"--web.listen-address=127.0.0.1:$port", @flags
		],
		'<', \undef, '>', $log, '2>&1');
	my $e = { h => $h, port => $port, log => $log, name => $name };
	push @exporters, $e;
	return $e;
}

sub stop_exporter
{
	my ($e) = @_;
	$e->{h}->kill_kill(grace => 5) if $e->{h}->pumpable;
	return;
}

sub exporter_log { return PostgreSQL::Test::Utils::slurp_file($_[0]->{log}); }

my $http = HTTP::Tiny->new(timeout => 30, proxy => undef, http_proxy => undef);

# scrape($e) fetches $e's metrics and returns them (undef when the fetch
# failed) as a hash: value (key => value, where the key of a metric with
# the label datname is "name{datname}", else the name), type (name =>
# type), labels (name => the names of its labels, for dlock's metrics).
sub scrape
{
	my ($e) = @_;
	my $res = $http->get("http://127.0.0.1:$e->{port}/metrics");
	return undef unless $res->{success};
	my %m = (value => {}, type => {}, labels => {});
	for my $line (split /\n/, $res->{content})
	{
		if ($line =~ /^# TYPE (\S+) (\S+)/)
		{
			$m{type}{$1} = $2;
			next;
		}
		next if $line =~ /^#/;
		my ($name, $labels, $v) =
		  $line =~ /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)/
		  or next;
		my %l;
		$l{$1} = $2 while ($labels // '') =~ /(\w+)="((?:[^"\\]|\\.)*)"/g;
		$m{labels}{$name}{ join(',', sort keys %l) } = 1 if $name =~ /^dlock_/;
		$m{value}{ defined $l{datname} ? "$name\{$l{datname}}" : $name } = $v;
	}
	return \%m;
}

# scrape_when_ready($e, @dbs) scrapes $e until its metrics show the live
# leases of every database of @dbs, and returns them; dies when $e exits
# or after timeout_default seconds.
sub scrape_when_ready
{
	my ($e, @dbs) = @_;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (1)
	{
		my $m = scrape($e);
		return $m
		  if $m && !grep { !defined $m->{value}{"dlock_leases_live{$_}"} } @dbs;
		die "exporter $e->{name} exited:\n" . exporter_log($e)
		  unless $e->{h}->pumpable;
		die "exporter $e->{name}: no dlock metrics of @dbs after "
		  . "$PostgreSQL::Test::Utils::timeout_default s:\n"
		  . exporter_log($e)
		  if time > $deadline;
		usleep(200_000);
	}
}

# views($db) reads what the metrics of $db show, from the views: the
# counters and stats_reset (as "metric=value" lines, stats_reset in Unix
# time), the live leases, the waiting sessions and how
# long the first has waited (0: nobody).
sub views
{
	my ($db) = @_;
	my %v;
	my $r = stats_row($db, @counters,
		"date_part('epoch', stats_reset) AS stats_reset");
	$v{counters} = join("\n",
		(map { "dlock_${_}_total=" . ($r->{$_} // '(no row)') } @counters),
		'dlock_stats_reset_timestamp_seconds=' . ($r->{stats_reset} // '(no row)'));
	($v{live}, $v{sessions}, $v{oldest}) = split /\|/, sql(
		q{
SELECT (SELECT count(*) FROM dlock_leases WHERE live),
       count(*),
       COALESCE(date_part('epoch', clock_timestamp() - min(waiting_since)), 0)
  FROM dlock_waiters}, $db);
	return \%v;
}

# check_metrics($e, $what, @dbs) reads the views of each database of @dbs,
# scrapes $e, reads the views again, and checks that the metrics of each
# database equal the views.  Returns the metrics.
sub check_metrics
{
	my ($e, $what, @dbs) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my %before = map { $_ => views($_) } @dbs;
	my $m = scrape_when_ready($e, @dbs);
	my %after = map { $_ => views($_) } @dbs;
	for my $db (@dbs)
	{
		my ($pre, $post) = ($before{$db}, $after{$db});
		is($post->{counters}, $pre->{counters},
			"$what: $db: no counter changed during the scrape");
		my @got;
		for my $line (split /\n/, $pre->{counters})
		{
			my ($metric, $want) = $line =~ /^([^=]*)=(.*)$/;
			my $v = $m->{value}{"$metric\{$db}"};
			# stats_reset: a float8 of Unix time, printed by Go and by
			# PostgreSQL, maybe with different rounding.
			$v = $want
			  if defined $v
			  && $metric =~ /timestamp_seconds$/
			  && $want =~ /^[0-9.e+]+$/
			  && abs($v - $want) < 1e-3;
			push @got, "$metric=" . ($v // '(no metric)');
		}
		is(join("\n", @got), $pre->{counters},
			"$what: $db: a metric per counter of dlock_stats, and stats_reset, equal to the view");
		is($m->{value}{"dlock_leases_live{$db}"},
			$pre->{live}, "$what: $db: dlock_leases_live is $pre->{live}");
		is($post->{live}, $pre->{live},
			"$what: $db: no lease ended during the scrape");
		is($m->{value}{"dlock_waiters_sessions{$db}"},
			$pre->{sessions},
			"$what: $db: dlock_waiters_sessions is $pre->{sessions}");
		my $oldest = $m->{value}{"dlock_waiters_oldest_wait_seconds{$db}"};
		ok( defined $oldest
			  && $oldest >= $pre->{oldest} - 1e-6
			  && $oldest <= $post->{oldest} + 1e-6,
			"$what: $db: dlock_waiters_oldest_wait_seconds lies between the ages read before and after the scrape"
		  )
		  or diag("before $pre->{oldest}, metric "
			  . ($oldest // 'none')
			  . ", after $post->{oldest}");
	}
	my @dlock = sort grep { /^dlock_/ } keys %{ $m->{type} };
	is( join(' ', map { "$_:$m->{type}{$_}" } @dlock),
		join(' ',
			map { "$_:" . (/_total$/ ? 'counter' : 'gauge') }
			  sort((map { "dlock_${_}_total" } @counters),
				qw(dlock_leases_live dlock_stats_reset_timestamp_seconds
				  dlock_waiters_oldest_wait_seconds dlock_waiters_sessions))),
		"$what: a metric per counter, typed counter, and the gauges");
	is(join(' ', map { keys %{ $m->{labels}{$_} } } @dlock),
		join(' ', ('datname,server') x @dlock),
		"$what: the dlock metrics are labelled datname and server");
	return $m;
}

# 2. Exporter A: the documented setup.
my $exp_a = start_exporter('a', '--auto-discover-databases',
	'--include-databases=app2');
my $m = check_metrics($exp_a, 'exporter A', 'postgres', 'app2');
is($m->{value}{'dlock_waiters_sessions{postgres}'}, 1, 'exporter A: one session waits in postgres');
is($m->{value}{'dlock_leases_live{postgres}'}, 2, 'exporter A: two leases are live in postgres');
is($m->{value}{'dlock_leases_live{app2}'}, 1, 'exporter A: one lease is live in app2');
is(join(' ', grep { /^dlock_.*\{nodlock\}$/ } keys %{ $m->{value} }),
	'', 'exporter A: no dlock metric of nodlock');
is($m->{value}{pg_exporter_last_scrape_error},
	0, 'exporter A: the scrape had no error');
unlike(exporter_log($exp_a), qr/Error running query/,
	'exporter A: no query failed');

# 3. The waiter is served.
is(sql("SELECT dlock_release('job:a', $t2)"), 't', 'job:a released');
my ($out, $state) = bg_finish($waiter);
is($state, '00000', 'the waiter returned');
like($out, qr/^\d+$/, 'the waiter got job:a');
bg_close($waiter);
$m = check_metrics($exp_a, 'exporter A, waiter served', 'postgres', 'app2');
is($m->{value}{'dlock_waiters_sessions{postgres}'}, 0, 'exporter A: nobody waits');
is($m->{value}{'dlock_waiters_oldest_wait_seconds{postgres}'},
	0, 'exporter A: the oldest wait is 0');
is(stats('postgres', qw(waits wait_timeouts grants_after_release)),
	"waits=1\nwait_timeouts=0\ngrants_after_release=2",
	'postgres: dlock_stats counted the wait and its grant');
stop_exporter($exp_a);

# 4. Exporter B: every database discovered, nodlock included.
my $exp_b = start_exporter('b', '--auto-discover-databases');
$m = check_metrics($exp_b, 'exporter B', 'postgres', 'app2');
is($m->{value}{pg_exporter_last_scrape_error},
	1, 'exporter B: the scrape reports an error');
like(
	exporter_log($exp_b),
	qr/Error running query on database .*relation \\?"public\.dlock_stats\\?" does not exist/,
	'exporter B: it logged the failed query of nodlock');
is(join(' ', grep { /^dlock_.*\{nodlock\}$/ } keys %{ $m->{value} }),
	'', 'exporter B: no dlock metric of nodlock');
stop_exporter($exp_b);

$node->stop;
done_testing();
