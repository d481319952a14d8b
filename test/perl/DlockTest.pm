# test/perl/DlockTest.pm: helpers shared by the Perl TAP tests in test/t.
#
# test/run-tests puts this directory on @INC (prove -I test/perl).

package DlockTest;

use strict;
use warnings;

use Exporter 'import';
use PostgreSQL::Test::Cluster;
use Test::More;

# Exported by default, so their names must not clash with the subs of any
# test file (bg_* for background sessions).
our @EXPORT = qw(dlock_node sql coord_sql coord_acquire psql_error
  sqlstate_of fails_with lease_rows bg_session bg_start bg_finish bg_close crash_lines
  to_logging_call dlock_wait_event waits_in_dlock wait_for_replay
  wait_for_expiry);

# The node sql() runs on: the last one dlock_node() started.
my $sql_node;

# dlock_node($name, %opt) creates, initialises and starts a cluster named
# $name, makes it the node sql() runs on, and returns it.  Options:
#   preload => 1     shared_preload_libraries = 'dlock'
#   conf => TEXT     more postgresql.conf lines
#   init => {...}    options of PostgreSQL::Test::Cluster::init
#                    (allows_streaming => 1, ...)
#   setup => SQL     run in the postgres database once it is up (e.g.
#                    'CREATE EXTENSION dlock')
sub dlock_node
{
	my ($name, %opt) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%{ $opt{init} // {} });
	my $conf = $opt{preload} ? "shared_preload_libraries = 'dlock'\n" : '';
	$conf .= $opt{conf} if defined $opt{conf};
	$node->append_conf('postgresql.conf', $conf) if $conf ne '';
	$node->start;
	$node->safe_psql('postgres', $opt{setup}) if defined $opt{setup};
	$sql_node = $node;
	return $node;
}

# sql($sql, $db) runs $sql on the database $db (default postgres) of the
# node dlock_node() started last, with safe_psql (dying on an error), and
# returns its output.  For a file with one node, or one main node.
sub sql
{
	my ($sql, $db) = @_;
	die "sql() before dlock_node()" unless $sql_node;
	return $sql_node->safe_psql($db // 'postgres', $sql);
}

# dlock_wait_event($node) returns the wait_event pg_stat_activity shows for
# a backend waiting in dlock_acquire on $node (its wait_event_type is
# 'Extension'): 'DlockLeaseWait' from PostgreSQL 17 on, where extensions
# can name their wait events, and the generic 'Extension' before.
sub dlock_wait_event
{
	my ($node) = @_;
	return $node->pg_version >= 17 ? 'DlockLeaseWait' : 'Extension';
}

# coord_sql($node, $db, $sql) runs $sql on $node's database $db with
# search_path coord, public: dlock installed in schema coord (the dump and
# upgrade tests, 007 and 012), and returns its output.
sub coord_sql
{
	my ($node, $db, $sql) = @_;
	return $node->safe_psql($db, "SET search_path = coord, public;\n$sql");
}

# coord_acquire($node, $db, $name, $ttl, $as_app) takes $name on $node's
# $db (dlock in schema coord) for $ttl, with owner 'owner of $name', as
# role dlock_app when $as_app, and returns the token (dies when there is
# none).
sub coord_acquire
{
	my ($node, $db, $name, $ttl, $as_app) = @_;
	my $role = $as_app ? 'SET ROLE dlock_app;' : '';
	my $t = coord_sql($node, $db,
		"$role SELECT dlock_acquire('$name', '$ttl', '0', 'owner of $name')");
	die "acquire $name returned '$t'" unless $t =~ /^\d+$/;
	return $t;
}

# waits_in_dlock($node, $pid, $db) polls (poll_query_until, on database
# $db, default postgres) until backend $pid of $node sleeps in a dlock
# wait (wait_event_type 'Extension', wait_event dlock_wait_event($node)),
# and returns whether it did in time.  A backend only shows the wait
# event once it is queued, so a release after this wakes it (CONTRIBUTING,
# "Waiting without racing").
sub waits_in_dlock
{
	my ($node, $pid, $db) = @_;
	my $event = dlock_wait_event($node);
	return $node->poll_query_until($db // 'postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE pid = $pid"
		  . " AND wait_event_type = 'Extension' AND wait_event = '$event'");
}

# wait_for_expiry($node, $name, $db, $schema) polls (poll_query_until)
# until the lease on $name in $node's database $db (default postgres; dlock
# in schema $schema, default public) is no longer live, by the server's
# clock (never a sleep of the ttl: CONTRIBUTING, "Waiting without
# racing"), and returns whether it expired in time.
sub wait_for_expiry
{
	my ($node, $name, $db, $schema) = @_;
	$schema //= 'public';
	return $node->poll_query_until($db // 'postgres',
		"SELECT NOT live FROM $schema.dlock_leases WHERE lock_name = '$name'");
}

# wait_for_replay($primary, $standby) waits until $standby has replayed
# everything $primary has inserted into its WAL so far: its insert LSN,
# not the write LSN wait_for_catchup takes by default, which need not
# cover a commit that did not wait for its flush (dlock's releases commit
# asynchronously: docs/guarantees.md).  The WAL writer writes such a
# record within wal_writer_delay, the walsender then sends it.
sub wait_for_replay
{
	my ($primary, $standby) = @_;
	$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));
	return;
}

# psql_error($node, $sql) runs $sql on $node's postgres database with
# VERBOSITY verbose, not stopping at an error, and returns psql's stdout
# (":ERROR :LAST_ERROR_SQLSTATE", e.g. "true 25006" after a failure) and
# stderr (the verbose error text: "ERROR:  25006: ...", DETAIL, HINT).
sub psql_error
{
	my ($node, $sql) = @_;
	my ($stdout, $stderr);
	$node->psql(
		'postgres', qq{\\set VERBOSITY verbose
$sql;
\\echo :ERROR :LAST_ERROR_SQLSTATE},
		stdout => \$stdout,
		stderr => \$stderr,
		on_error_stop => 0);
	return ($stdout, $stderr);
}

# sqlstate_of($node, $sql, dbname => DB, role => ROLE) runs $sql (one
# statement, or several: each in its own transaction unless $sql says
# otherwise) on database DB (default postgres), connected as ROLE (default
# the node's superuser), not stopping at an error, and returns the
# SQLSTATE of the last statement ('00000' when it succeeded), its output
# and psql's stderr.
sub sqlstate_of
{
	my ($node, $sql, %opt) = @_;
	my ($stdout, $stderr);
	$node->psql(
		$opt{dbname} // 'postgres',
		qq{\\set VERBOSITY verbose
$sql;
\\echo SQLSTATE :SQLSTATE},
		stdout => \$stdout,
		stderr => \$stderr,
		on_error_stop => 0,
		extra_params => [ defined $opt{role} ? ('-U', $opt{role}) : () ]);
	$stdout =~ s/(?:\A|\n)SQLSTATE (\S+)\z//
	  or die "no SQLSTATE in the output of: $sql\n$stdout\n$stderr";
	return ($1, $stdout, $stderr);
}

# fails_with($node, $sql, $state, $what, dbname => DB, role => ROLE)
# checks that $sql fails on $node with SQLSTATE $state.
sub fails_with
{
	my ($node, $sql, $state, $what, %opt) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my ($got, $out, $err) = sqlstate_of($node, $sql, %opt);
	is($got, $state, "$what: fails with SQLSTATE $state")
	  or diag("output: $out\nerror: $err");
	return;
}

# lease_rows($node, $db, $schema) returns every row of dlock_leases (in
# schema $schema, default public) on $node's database $db (default
# postgres), ordered by name, one line per row.  The flag live is
# included: callers compare rows within seconds, with leases that are
# either long (live) or long expired.
sub lease_rows
{
	my ($node, $db, $schema) = @_;
	$schema //= 'public';
	return $node->safe_psql(
		$db // 'postgres', qq{
SELECT lock_name, token, owner, holder_role, acquired_at, renewed_at,
       expires_at, released, live
  FROM $schema.dlock_leases ORDER BY lock_name COLLATE "C"});
}

# bg_session($node, $name, $db, $role) opens a background psql session on
# $node's database $db (default postgres), as role $role (default the
# node's superuser), that does not stop at errors, and returns it (a hash:
# bg, pid, name) with its backend's pid.
sub bg_session
{
	my ($node, $name, $db, $role) = @_;
	my $bg = $node->background_psql(
		$db // 'postgres',
		on_error_stop => 0,
		extra_params => [ defined $role ? ('-U', $role) : () ]);
	my $pid = $bg->query_safe('SELECT pg_backend_pid()');
	return { bg => $bg, pid => $pid, name => $name, seq => 0, out => '' };
}

# bg_start($s, $sql) sends $sql to session $s and returns as soon as psql
# has begun running it, without waiting for it to finish.
sub bg_start
{
	my ($s, $sql) = @_;
	my $tag = "$s->{name}#" . ++$s->{seq};
	$s->{tag} = $tag;
	my $out = $s->{bg}->query_until(qr/^\Q$tag\E start\n/m,
		"\\echo '$tag start'\n$sql\n\\echo :SQLSTATE\n\\echo '$tag end'\n");
	$out =~ s/\A.*?^\Q$tag\E start\n//ms;
	$s->{out} = $out;
	return;
}

# bg_finish($s) waits (bounded by the session's timeout) until the
# statements started by bg_start on $s have finished, and returns their
# output and the SQLSTATE of the last one ('00000' for success).
sub bg_finish
{
	my ($s) = @_;
	my $tag = $s->{tag};
	my $out = $s->{out};
	$out .= $s->{bg}->query_until(qr/^\Q$tag\E end\n/m, '')
	  unless $out =~ /^\Q$tag\E end\n/m;
	$s->{out} = '';
	$out =~ s/^\Q$tag\E end\n.*//ms
	  or die "no end marker for $tag in output: $out";
	$out =~ s/(?:\A|\n)([0-9A-Z]{5})\n\z//
	  or die "no SQLSTATE for $tag in output: $out";
	return ($out, $1);
}

# bg_close($s) ends session $s, also when its backend or psql is gone.
sub bg_close
{
	my ($s) = @_;
	eval { $s->{bg}->quit; 1 } or note "closing $s->{name}: $@";
	return;
}

# crash_lines($node, $from) returns the lines of $node's server log (from
# byte offset $from, default 0) that show a crashed or aborted server
# process: a backend killed by a signal or exiting with a code other than
# 0 or 1 (the postmaster reports only those), a PANIC, a failed assertion
# (TRAP), or a stuck spinlock.
sub crash_lines
{
	my ($node, $from) = @_;
	my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $from // 0);
	return grep {
		/server process .* (?:was terminated|exited with exit code)|terminated by signal|PANIC:|TRAP:|stuck spinlock/
	} split /\n/, $log;
}

# to_logging_call($node, $name) brings $node's token sequence to the point
# where the next nextval() writes the sequence's WAL record (it logs 32
# values ahead, so only every 33rd call and the first after a checkpoint
# write one), by acquiring and releasing the scratch name $name, then
# switches to a new WAL segment so that the few records of the next
# acquire fill no WAL page (a full page wakes the walwriter) and stay in
# WAL buffers until a crash.  The next acquire of $name is then a HOT
# update of a page already written since the last checkpoint: no
# full-page image either.  Used by the crash tests (001, 011).
sub to_logging_call
{
	my ($node, $name) = @_;
	for my $i (1 .. 40)
	{
		last
		  if $node->safe_psql('postgres',
			'SELECT log_cnt FROM dlock_token_seq') eq '0';
		$node->safe_psql('postgres',
			"SELECT dlock_release('$name', dlock_acquire('$name', '1 hour'))");
	}
	is($node->safe_psql('postgres', 'SELECT log_cnt FROM dlock_token_seq'),
		'0', "before acquiring $name: its nextval() will write WAL");
	$node->safe_psql('postgres', 'SELECT pg_switch_wal()');
	return;
}

1;
