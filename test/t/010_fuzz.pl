#!/usr/bin/perl
#
# test/t/010_fuzz.pl
#	  A seeded fuzz pass over the SQL API (leases, the fence trigger, bad
#	  input and privileges, as docs/sql-reference.md states them): random
#	  calls of dlock_acquire, dlock_renew, dlock_release, dlock_break,
#	  dlock_purge and writes through the dlock_fence trigger, with hostile
#	  arguments, checked against a model, then from three concurrent
#	  sessions.
#
# The seed is printed (diag) and can be set with DLOCK_FUZZ_SEED; the same
# seed generates the same calls.  One node, dlock preloaded, errors logged
# with their SQLSTATE (log_error_verbosity = verbose).
#
# Arguments are drawn from pools: lock names of 1, 512 and 513 bytes, empty,
# multibyte (up to 128 four-byte characters), control characters, quotes
# and braces, NULL, and invalid UTF-8 (0xff, overlong, surrogate, beyond
# U+10FFFF, NUL) built with convert_from(bytea, 'UTF8'), which must fail
# cleanly with 22021; ttl and wait intervals long, tiny (1 microsecond),
# zero, negative, over dlock.max_ttl, '1000000 years', 'infinity' (not an
# interval in PostgreSQL 15: 22007; from 17 on an interval that dlock
# refuses with 22023), calendar-dependent ('-1 mon 31
# days'), NULL; owners over 1024 bytes; tokens 0, -1, the bigint limits,
# out of range, NULL, real current tokens, neighbours of real tokens, and
# the greatest token of another name.
#
# Part 1, the model: one session runs ~2500 random calls as one psql
# script.  Tokens flow between calls through psql variables (\gset), and
# after every call that names a valid lock the script reads that lease's
# row (and after a fenced write, the protected row).  A model in Perl,
# replaying the output, predicts every call: which SQLSTATE an invalid
# argument raises (literals that do not parse fail before evaluation,
# convert_from before the call, then dlock's own checks in any order),
# what a valid call returns (a token strictly greater than every token
# before it, or NULL when the lease is live; renew and release true only
# for the live lease's token; break true only for a live lease; purge's
# count), whether the fence accepts a write ('latest': the token is the
# name's current token; 'live': and the lease is live; on UPDATE, not
# lower than the row's token) and what the lease and protected rows look
# like afterwards: no lease is lost, none appears.  Every 150 calls and at
# the end the whole lease table is compared with the model and checked for
# consistency (one row per name, token > 0, acquired_at <= renewed_at <=
# expires_at, live implies not released).  Differences are failures,
# printed with their call; the model then adopts what it read, so that one
# difference is reported once.
#
# Part 2, concurrency: three psql sessions (two superusers, one ordinary
# role) run ~800 random calls each at the same time on six lock names,
# including dlock_break and dlock_purge, fenced writes in both modes,
# waits, and a statement_timeout that cancels waiting acquires.  Checked:
# each session's tokens strictly increase; no token is granted twice; the
# ordinary role's break and purge fail with 42501; every lease row carries
# the greatest token granted for its name; every protected row carries a
# token that was granted for its lock; the lease table is consistent.
#
# Throughout: every SQLSTATE seen by a client or logged by the server is
# in class 22 or one of 42501, 55T01 (and 57014 in part 2); anything else
# (XX000, P0001, 23505, 40P01, ...) fails.  The server log shows no crashed
# process (signal, PANIC, TRAP), and the server still answers.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DlockTest;
use IPC::Run;
use List::Util qw(max);

my $seed = $ENV{DLOCK_FUZZ_SEED} // 20261130;
die "DLOCK_FUZZ_SEED must be a number" unless $seed =~ /^\d+$/;
srand($seed);
diag("fuzz seed $seed (DLOCK_FUZZ_SEED=$seed reproduces this run)");

my $model_steps = 2500;
my $conc_steps = 800;

my $node = dlock_node(
	'fuzz',
	preload => 1,
	conf => q{
log_error_verbosity = verbose
log_statement = none
max_connections = 20
});
my $log_start = -s $node->logfile;

my $tables = q{
CREATE EXTENSION dlock;
CREATE TABLE fz_latest (id int PRIMARY KEY, name text, tok bigint, n int NOT NULL DEFAULT 0);
CREATE TABLE fz_live (LIKE fz_latest INCLUDING ALL);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE ON fz_latest FOR EACH ROW
  EXECUTE FUNCTION dlock_fence('{name}', 'tok', 'latest');
CREATE TRIGGER fence BEFORE INSERT OR UPDATE ON fz_live FOR EACH ROW
  EXECUTE FUNCTION dlock_fence('{name}', 'tok', 'live');
GRANT SELECT, INSERT, UPDATE ON fz_latest, fz_live TO PUBLIC;
};
$node->safe_psql('postgres',
	'CREATE ROLE fz_app LOGIN; CREATE DATABASE fz_model; CREATE DATABASE fz_conc;'
);
$node->safe_psql('fz_model', $tables);
$node->safe_psql('fz_conc', $tables);

# ---------------------------------------------------------------------
# Pools of arguments.  An error is [stage, SQLSTATE]: stage P for a
# literal that does not parse (raised before anything runs), X for an
# expression that fails when evaluated (before the call), F for dlock's
# own argument checks.
# ---------------------------------------------------------------------

sub pick { return $_[ int(rand(@_)) ]; }

# bytes_sql returns an expression giving the text of byte string $b.
sub bytes_sql
{
	my ($b) = @_;
	return "convert_from('\\x" . unpack('H*', $b) . "'::bytea, 'UTF8')";
}

my $lock4 = "\xf0\x9f\x94\x92";    # U+1F512, four bytes
my @valid_names = (
	'a', 'job', 'Job', 'x' x 512,
	"\xc3\xa9t\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac",
	$lock4 x 128, "\x01\x02\t\n\x1f\x7f",
	'{id}', "a'b\\c", ' ', 'b', 'c');

# A name: sql; key (its bytes) when valid; err for the functions; ferr for
# the fence trigger (an empty name is just never acquired; one over 512
# bytes is refused there too).
my @bad_names = (
	{ sql => bytes_sql(''), err => [ 'F', '22023' ], ferr => [ 'F', '55T01' ] },
	{
		sql => bytes_sql('x' x 513),
		err => [ 'F', '22023' ],
		ferr => [ 'F', '22023' ]
	},
	{
		sql => bytes_sql('a' . $lock4 x 128),
		err => [ 'F', '22023' ],
		ferr => [ 'F', '22023' ]
	},
	{ sql => 'NULL', err => [ 'F', '22004' ], ferr => [ 'F', '22004' ] },
	{ sql => 'NULL::text', err => [ 'F', '22004' ], ferr => [ 'F', '22004' ] },
	map { { sql => bytes_sql($_), err => [ 'X', '22021' ], ferr => [ 'X', '22021' ] } }
	  ("\xff", "\xc3\x28", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
		"a\x00b", "\xe6\x97"));

sub valid_name
{
	my $b = pick(@valid_names);
	return { sql => bytes_sql($b), key => $b };
}
sub any_name { return rand() < 0.8 ? valid_name() : pick(@bad_names); }

# ttl: kind long (live for the whole run), tiny (ended by the next
# statement), unc (depends on the calendar: token or 22023, liveness read
# back; with another bad argument, 22023 is one more possible error), or
# err.
# 'infinity' and '-infinity': not intervals before PostgreSQL 17 (a parse
# error), refused by dlock from 17 on.
my $infinite_err =
  $node->pg_version >= 17 ? [ 'F', '22023' ] : [ 'P', '22007' ];

my @ttls = (
	(map { { sql => $_, kind => 'long' } }
		  ("'1 hour'", "'1 day'", "'86400 seconds'", "'23:59:59.999999'",
			"'1 day -1 hour'", "'24 hours'", "interval '2 hours'")),
	(map { { sql => $_, kind => 'tiny' } }
		  ("'1 microsecond'", "'0.6 microseconds'", "'00:00:00.000001'")),
	(map { { sql => $_, kind => 'unc' } }
		  ("'-1 mon 31 days'", "'1 mon -29 days'", "'1 mon -30 days'")),
	(map { { sql => $_, kind => 'err', err => [ 'F', '22023' ] } } (
			"'0'", "'-1 second'", "'-1 microsecond'", "'0.4 microseconds'",
			"'1 day 1 microsecond'", "'2 days'", "'1 mon'",
			"'1000000 years'", "'-1000000 years'", "'178000000 years'")),
	(map { { sql => $_, kind => 'err', err => [ 'F', '22004' ] } }
		  ('NULL', 'NULL::interval')),
	(map { { sql => $_, kind => 'err', err => $infinite_err } }
		  ("'infinity'", "'-infinity'")),
	(map { { sql => $_, kind => 'err', err => [ 'P', '22007' ] } }
		  ("'forever'", "'1 fortnight'")));
my @good_ttls = grep { $_->{kind} eq 'long' || $_->{kind} eq 'tiny' } @ttls;

sub any_ttl { return rand() < 0.6 ? pick(@good_ttls) : pick(@ttls); }

my @waits = (
	(map { { sql => $_ } } (undef, undef, undef, "'0'", "'1 microsecond'", "'2 ms'")),
	(map { { sql => $_, err => [ 'F', '22023' ] } }
		  ("'-1 second'", "'-1 microsecond'")),
	{ sql => 'NULL', err => [ 'F', '22004' ] },
	(map { { sql => $_, err => [ 'F', '22008' ] } }
		  ("'1000000 years'", "'178000000 years'")),
	{ sql => "'infinity'", err => $infinite_err },
	{ sql => "'soon'", err => [ 'P', '22007' ] });

my @owners = (
	(map { { sql => $_ } } (undef, undef, undef, 'NULL', "'o'",
			bytes_sql("\xc3\xa9\x01 \xe6\x97\xa5"), "repeat('o', 1024)")),
	{ sql => "repeat('o', 1025)", err => [ 'F', '22023' ] },
	{ sql => bytes_sql("\xff\xfe"), err => [ 'X', '22021' ] });

# older_than of dlock_purge: all (every ended row), none, or err.
my @olders = (
	(map { { sql => $_, kind => 'all' } } ("'0'", "'1 microsecond'")),
	(map { { sql => $_, kind => 'none' } } ("'10 years'")),
	{ sql => "'-1 second'", kind => 'err', err => [ 'F', '22023' ] },
	{ sql => 'NULL', kind => 'err', err => [ 'F', '22004' ] },
	{ sql => "'1000000 years'", kind => 'err', err => [ 'F', '22008' ] },
	{ sql => "'infinity'", kind => 'err', err => $infinite_err });

# A token: a slot variable (:tK, plus a delta), a constant, NULL, the
# greatest token in the table, or a literal out of range.
sub any_token
{
	my ($slots) = @_;
	my $r = rand();
	if ($r < 0.45)
	{
		my $k = 1 + int(rand($slots));
		my $d = pick(0, 0, 0, 0, 1, -1);
		return {
			sql => ":t$k" . ($d ? ($d > 0 ? ' + 1' : ' - 1') : ''),
			slot => $k,
			delta => $d
		};
	}
	return { sql => '(SELECT max(token) FROM dlock_leases)', max => 1 }
	  if $r < 0.55;
	return pick(
		{ sql => '0', value => 0 },
		{ sql => '-1', value => -1 },
		{ sql => '9223372036854775807', value => '9223372036854775807' },
		{ sql => '(-9223372036854775807 - 1)', value => '-9223372036854775808' },
		{ sql => 'NULL', null => 1 },
		{ sql => 'NULL::bigint', null => 1 },
		{ sql => "'9223372036854775808'::bigint", err => [ 'P', '22003' ] },
		{ sql => "'-9223372036854775809'::bigint", err => [ 'P', '22003' ] });
}

# acquire_sql returns the SQL of an acquire call, in positional or named
# notation.
sub acquire_sql
{
	my ($name, $ttl, $wait, $owner) = @_;
	if (rand() < 0.5)
	{
		my $s = "dlock_acquire(lock_name => $name->{sql}, ttl => $ttl->{sql}";
		$s .= ", wait => $wait->{sql}" if defined $wait->{sql};
		$s .= ", owner => $owner->{sql}" if defined $owner->{sql};
		return "$s)";
	}
	my @a = ($name->{sql}, $ttl->{sql});
	push @a, $wait->{sql} // "'0'" if defined $wait->{sql} || defined $owner->{sql};
	push @a, $owner->{sql} if defined $owner->{sql};
	return 'dlock_acquire(' . join(', ', @a) . ')';
}

# err_set returns the SQLSTATEs one of which the call must raise given the
# errors of its arguments (the earliest stage wins; within a stage any),
# or undef when every argument is valid.
sub err_set
{
	my @e = grep { defined } @_;
	return undef unless @e;
	for my $stage (qw(P X F))
	{
		my %c = map { ($_->[1] => 1) } grep { $_->[0] eq $stage } @e;
		return \%c if %c;
	}
	die 'unreachable';
}

# ---------------------------------------------------------------------
# Part 1: the model.
# ---------------------------------------------------------------------

my @steps;
my $script = "\\set t1 0\n\\set t2 0\n\\set t3 0\n\\set t4 0\n\\set r 0\n"
  . "SET statement_timeout = '20s';\n";

# Which name each slot's last acquire was for, to renew and release with
# matching pairs.
my %slot_name;

for my $i (1 .. $model_steps)
{
	my $r = rand();
	my %s = (i => $i);
	my $sql;
	if ($r < 0.30)
	{
		my $k = 1 + int(rand(4));
		%s = (
			%s,
			op => 'acquire',
			slot => $k,
			name => any_name(),
			ttl => any_ttl(),
			wait => pick(@waits),
			owner => pick(@owners));
		$slot_name{$k} = $s{name};
		$sql = 'SELECT coalesce('
		  . acquire_sql(@s{qw(name ttl wait owner)})
		  . ", -1) AS t$k \\gset\n\\echo STEP $i :SQLSTATE :t$k\n";
	}
	elsif ($r < 0.60)
	{
		my $op = rand() < 0.5 ? 'renew' : 'release';
		my ($name, $tok);
		if (rand() < 0.6 && %slot_name)
		{
			my $k = pick(sort keys %slot_name);
			$name = $slot_name{$k};
			$tok = rand() < 0.85
			  ? { sql => ":t$k", slot => $k, delta => 0 }
			  : any_token(4);
		}
		else
		{
			$name = any_name();
			$tok = any_token(4);
		}
		%s = (%s, op => $op, name => $name, tok => $tok);
		if ($op eq 'renew')
		{
			$s{ttl} = any_ttl();
			$sql = "SELECT dlock_renew($name->{sql}, $tok->{sql}, $s{ttl}{sql}) AS r \\gset\n";
		}
		else
		{
			$sql = "SELECT dlock_release($name->{sql}, $tok->{sql}) AS r \\gset\n";
		}
		$sql .= "\\echo STEP $i :SQLSTATE :r\n";
	}
	elsif ($r < 0.67)
	{
		%s = (%s, op => 'break', name => any_name());
		$sql = "SELECT dlock_break($s{name}{sql}) AS r \\gset\n"
		  . "\\echo STEP $i :SQLSTATE :r\n";
	}
	elsif ($r < 0.69)
	{
		%s = (%s, op => 'purge', older => pick(@olders));
		$sql = "SELECT dlock_purge($s{older}{sql}) AS r \\gset\n"
		  . "\\echo STEP $i :SQLSTATE :r\n";
	}
	elsif ($r < 0.93)
	{
		my $tab = pick('latest', 'live');
		my $id = 1 + int(rand(6));
		my $name = rand() < 0.9 ? valid_name() : pick(@bad_names);
		my $tok;
		if (rand() < 0.6 && %slot_name)
		{
			my $k = pick(sort keys %slot_name);
			$name = $slot_name{$k} if rand() < 0.8;
			$tok = { sql => ":t$k", slot => $k, delta => 0 };
		}
		else
		{
			$tok = any_token(4);
		}
		%s = (%s, op => 'upsert', tab => $tab, id => $id, name => $name, tok => $tok);
		$sql =
		  "INSERT INTO fz_$tab AS f (id, name, tok) VALUES ($id, $name->{sql}, $tok->{sql})"
		  . " ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, tok = EXCLUDED.tok, n = f.n + 1;\n"
		  . "\\echo STEP $i :SQLSTATE\n";
	}
	else
	{
		my $tab = pick('latest', 'live');
		my $id = 1 + int(rand(6));
		%s = (%s, op => 'touch', tab => $tab, id => $id);
		$sql = "UPDATE fz_$tab SET n = n + 1 WHERE id = $id;\n"
		  . "\\echo STEP $i :SQLSTATE\n";
	}

	# Read back what the call may have changed.
	if (($s{op} eq 'upsert' || $s{op} eq 'touch'))
	{
		$sql .=
		  "SELECT coalesce((SELECT encode(convert_to(name, 'UTF8'), 'hex') || ',' || tok || ',' || n"
		  . " FROM fz_$s{tab} WHERE id = $s{id}), 'none') AS o \\gset\n"
		  . "\\echo OBSF $i :SQLSTATE :o\n";
	}
	if (defined $s{name} && defined $s{name}{key})
	{
		$sql .=
		  "SELECT coalesce((SELECT token || ',' || released || ',' || live FROM dlock_leases"
		  . " WHERE lock_name = $s{name}{sql}), 'none') AS o \\gset\n"
		  . "\\echo OBS $i :SQLSTATE :o\n";
	}
	if ($i % 150 == 0 || $i == $model_steps)
	{
		$sql .= "\\echo ROWS $i\n"
		  . "SELECT 'ROW ' || encode(convert_to(lock_name, 'UTF8'), 'hex') || ' ' || token"
		  . " || ' ' || released || ' ' || live FROM dlock_leases;\n"
		  . "SELECT 'CONS ' || count(*) FILTER (WHERE NOT (token > 0 AND acquired_at <= renewed_at"
		  . " AND renewed_at <= expires_at AND NOT (live AND released)))"
		  . " || ' ' || (count(*) - count(DISTINCT lock_name)) FROM dlock_leases;\n"
		  . "\\echo ENDROWS $i\n";
	}
	$s{sql} = $sql;
	push @steps, \%s;
	$script .= $sql;
}

my $dir = $node->basedir;
PostgreSQL::Test::Utils::append_to_file("$dir/fuzz_model.sql", $script);
my ($mout, $merr) = ('', '');
IPC::Run::run(
	[
		'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=0',
		'-d', $node->connstr('fz_model'), '-f', "$dir/fuzz_model.sql"
	],
	'>', \$mout, '2>', \$merr,
	IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
PostgreSQL::Test::Utils::append_to_file("$dir/fuzz_model.out", $mout);
PostgreSQL::Test::Utils::append_to_file("$dir/fuzz_model.err", $merr);

# Parse the output: per step its STEP, OBS, OBSF lines, and the ROWS blocks.
my (%out, %rows);
{
	my $block;
	for my $line (split /\n/, $mout)
	{
		if ($line =~ /^ROWS (\d+)$/) { $block = $1; $rows{$block} = []; next; }
		if ($line =~ /^ENDROWS \d+$/) { undef $block; next; }
		if (defined $block) { push @{ $rows{$block} }, $line; next; }
		if ($line =~ /^(STEP|OBS|OBSF) (\d+) (\S+) ?(.*)$/)
		{
			$out{$2}{$1} = [ $3, $4 ];
			next;
		}
	}
}

# The model.
my %lease;       # name bytes => { token, released, live (1, 0, undef) }
my %fz = (latest => {}, live => {});    # id => { name (bytes), tok, n }
my %slot = map { ($_ => 0) } 1 .. 4;
my $max_token = 0;
my @mismatch;
my %states;      # SQLSTATE => count, over all calls
my %outcome;     # "op result" => count, over the calls that succeeded or were fenced off

sub mismatch
{
	my ($s, $what) = @_;
	my $sql = $s->{sql};
	$sql =~ s/\n.*//s;
	push @mismatch, "step $s->{i}: $what\n    $sql";
	return;
}

sub fmt_set { return join('/', sort keys %{ $_[0] }); }

# token_value returns (error, null, value) of token $t in the model.
sub token_value
{
	my ($t) = @_;
	return ($t->{err}, 0, undef) if $t->{err};
	return (undef, 1, undef) if $t->{null};
	return (undef, 0, $t->{value}) if defined $t->{value};
	if ($t->{max})
	{
		my @all = map { $_->{token} } values %lease;
		return (undef, 1, undef) unless @all;
		return (undef, 0, max(@all));
	}
	return (undef, 0, $slot{ $t->{slot} } + $t->{delta});
}

sub live_now
{
	my ($key) = @_;
	my $l = $lease{$key};
	return 0 unless $l;
	return $l->{live};
}

for my $s (@steps)
{
	my $i = $s->{i};
	my $o = $out{$i};
	unless ($o && $o->{STEP})
	{
		mismatch($s, 'no output (psql stopped?)');
		last;
	}
	my ($state, $val) = @{ $o->{STEP} };
	$states{$state}++;
	my $op = $s->{op};
	if ($state eq '00000')
	{
		my $what = $op eq 'acquire' ? ($val eq '-1' ? 'NULL' : 'token')
		  : $op eq 'upsert' || $op eq 'touch' ? 'written'
		  : $op eq 'purge' ? ($val > 0 ? 'some' : 'none')
		  : $val;
		$outcome{"$op $what"}++;
	}
	elsif ($state eq '55T01')
	{
		$outcome{"$op rejected"}++;
	}
	my $key = $s->{name} ? $s->{name}{key} : undef;

	# What the call must do: an error set, or success with a check.
	my $errs;
	if ($op eq 'acquire')
	{
		$errs = err_set($s->{name}{err}, $s->{ttl}{err}, $s->{wait}{err},
			$s->{owner}{err});
		$errs = err_set($s->{name}{err}, $s->{wait}{err}, $s->{owner}{err},
			[ 'F', '22023' ])
		  if $errs && $s->{ttl}{kind} eq 'unc';
		if (!$errs && $s->{ttl}{kind} eq 'unc' && $state eq '22023')
		{
			undef $errs;    # a calendar-dependent ttl that ends too soon
		}
		elsif (!$errs)
		{
			if ($state ne '00000')
			{
				mismatch($s, "expected success, got $state");
			}
			elsif (live_now($key))
			{
				mismatch($s, "acquire of a live lease returned $val, not NULL")
				  if $val ne '-1';
			}
			elsif ($val eq '-1')
			{
				mismatch($s, 'acquire of a free lease returned NULL');
			}
			elsif (!($val > $max_token))
			{
				mismatch($s,
					"token $val is not greater than every earlier token ($max_token)");
			}
			if ($state eq '00000')
			{
				$slot{ $s->{slot} } = $val;
				if ($val ne '-1')
				{
					$max_token = max($max_token, $val);
					$lease{$key} = {
						token => $val,
						released => 0,
						live => $s->{ttl}{kind} eq 'long' ? 1
						: $s->{ttl}{kind} eq 'tiny' ? 0
						: undef
					};
				}
			}
		}
	}
	elsif ($op eq 'renew' || $op eq 'release')
	{
		my ($terr, $tnull, $tv) = token_value($s->{tok});
		my $unc = $op eq 'renew' && $s->{ttl}{kind} eq 'unc';
		my @e = ($s->{name}{err}, $terr, $tnull ? [ 'F', '22004' ] : undef);
		$errs = err_set(@e, $op eq 'renew' ? $s->{ttl}{err} : undef);
		$errs = err_set(@e, [ 'F', '22023' ]) if $errs && $unc;
		if (!$errs && !($unc && $state eq '22023'))
		{
			my $holds = live_now($key) && $lease{$key}{token} == $tv;
			if ($state ne '00000')
			{
				mismatch($s, "expected success, got $state");
			}
			elsif ($val ne ($holds ? 't' : 'f'))
			{
				mismatch($s,
					"$op returned $val, expected " . ($holds ? 't' : 'f'));
			}
			if ($state eq '00000' && $val eq 't')
			{
				if ($op eq 'release')
				{
					@{ $lease{$key} }{qw(released live)} = (1, 0);
				}
				else
				{
					$lease{$key}{live} = $s->{ttl}{kind} eq 'long' ? 1
					  : $s->{ttl}{kind} eq 'tiny' ? 0
					  : undef;
				}
			}
		}
	}
	elsif ($op eq 'break')
	{
		$errs = err_set($s->{name}{err});
		if (!$errs)
		{
			my $live = live_now($key);
			if ($state ne '00000') { mismatch($s, "expected success, got $state"); }
			elsif ($val ne ($live ? 't' : 'f'))
			{
				mismatch($s, "break returned $val, expected " . ($live ? 't' : 'f'));
			}
			@{ $lease{$key} }{qw(released live)} = (1, 0)
			  if $state eq '00000' && $val eq 't';
		}
	}
	elsif ($op eq 'purge')
	{
		$errs = err_set($s->{older}{err});
		if (!$errs)
		{
			my @ended = grep { !$lease{$_}{live} } keys %lease;
			my $n = $s->{older}{kind} eq 'all' ? scalar(@ended) : 0;
			if ($state ne '00000') { mismatch($s, "expected success, got $state"); }
			elsif ($val ne $n) { mismatch($s, "purge returned $val, expected $n"); }
			delete @lease{@ended} if $s->{older}{kind} eq 'all';
		}
	}
	elsif ($op eq 'upsert' || $op eq 'touch')
	{
		my $rowset = $fz{ $s->{tab} };
		my $old = $rowset->{ $s->{id} };
		my ($nkey, $tv, $reject);
		if ($op eq 'upsert')
		{
			my ($terr, $tnull);
			($terr, $tnull, $tv) = token_value($s->{tok});
			# A NULL token is rejected (55T01); with a NULL name too, the
			# trigger may report either.
			$errs = err_set($s->{name}{ferr}, $terr,
				$tnull ? [ 'F', '55T01' ] : undef);
			$nkey = $s->{name}{key};
		}
		elsif ($old)
		{
			($nkey, $tv) = ($old->{name}, $old->{tok});
		}
		if (!$errs && defined $nkey)
		{
			my $l = $lease{$nkey};
			# An upsert that gives the row another name moves it to
			# another lock, which needs a check of the old one: the model
			# never checks, so such a move is rejected.
			my $ok = $l && $l->{token} == $tv
			  && ($s->{tab} eq 'latest' || $l->{live})
			  && (!$old || ($old->{name} eq $nkey && $tv >= $old->{tok}));
			if ($ok)
			{
				mismatch($s, "fenced write expected to pass, got $state")
				  if $state ne '00000';
				$rowset->{ $s->{id} } =
				  { name => $nkey, tok => $tv, n => $old ? $old->{n} + 1 : 0 }
				  if $state eq '00000';
			}
			else
			{
				mismatch($s,
					"fenced write expected to be rejected (55T01), got $state")
				  if $state ne '55T01';
			}
		}
		elsif (!$errs)
		{
			mismatch($s, "touch of a missing row: expected success, got $state")
			  if $state ne '00000';
		}
		# Compare the protected row.
		my $obs = $o->{OBSF} ? $o->{OBSF}[1] : '?';
		my $row = $rowset->{ $s->{id} };
		my $want = $row ? unpack('H*', $row->{name}) . ",$row->{tok},$row->{n}" : 'none';
		if ($obs ne $want)
		{
			mismatch($s, "protected row fz_$s->{tab} $s->{id} is '$obs', model '$want'");
			if ($obs eq 'none') { delete $rowset->{ $s->{id} }; }
			else
			{
				my ($h, $t, $n) = split /,/, $obs;
				$rowset->{ $s->{id} } = { name => pack('H*', $h), tok => $t, n => $n };
			}
		}
	}

	if ($errs)
	{
		mismatch($s, "expected SQLSTATE " . fmt_set($errs) . ", got $state")
		  unless $errs->{$state};
	}

	# Compare the lease row of the name.
	if (defined $key && $o->{OBS})
	{
		my $obs = $o->{OBS}[1];
		my $l = $lease{$key};
		if ($l && !defined $l->{live} && $obs =~ /^\Q$l->{token}\E,false,(true|false)$/)
		{
			$l->{live} = $1 eq 'true' ? 1 : 0;    # a ttl read back
		}
		my $want = $l
		  ? "$l->{token},"
		  . ($l->{released} ? 'true' : 'false') . ','
		  . ($l->{live} ? 'true' : 'false')
		  : 'none';
		if ($obs ne $want)
		{
			mismatch($s, "lease row is '$obs', model '$want'");
			if ($obs eq 'none') { delete $lease{$key}; }
			else
			{
				my ($t, $rel, $live) = split /,/, $obs;
				$lease{$key} = {
					token => $t,
					released => $rel eq 'true' ? 1 : 0,
					live => $live eq 'true' ? 1 : 0
				};
			}
		}
	}

	# The whole table.
	if ($rows{$i})
	{
		my @lines = @{ $rows{$i} };
		my ($cons) = grep { /^CONS / } @lines;
		mismatch($s, "inconsistent lease rows: $cons") unless ($cons // '') eq 'CONS 0 0';
		my %got = map { my (undef, $h, $t, $rel, $live) = split / /; (pack('H*', $h) => "$t $rel $live") }
		  grep { /^ROW / } @lines;
		my %want = map {
			my $l = $lease{$_};
			($_ => "$l->{token} " . ($l->{released} ? 'true' : 'false') . ' ' . ($l->{live} ? 'true' : 'false'))
		} keys %lease;
		for my $k (sort(keys %got, keys %want))
		{
			next if ($got{$k} // '') eq ($want{$k} // '');
			mismatch($s, 'table row ' . unpack('H*', $k) . ': '
				  . ($got{$k} // 'none') . ', model ' . ($want{$k} // 'none'));
		}
	}
}

note 'model part: SQLSTATEs: '
  . join(', ', map { "$_ x$states{$_}" } sort keys %states);
note 'model part: outcomes: '
  . join(', ', map { "$_ x$outcome{$_}" } sort keys %outcome);
my @missing = grep { !$outcome{$_} } (
	'acquire token', 'acquire NULL', 'renew t', 'renew f', 'release t',
	'release f', 'break t', 'break f', 'purge some', 'purge none',
	'upsert written', 'upsert rejected', 'touch written', 'touch rejected');
is("@missing", '', 'model: every kind of outcome happened');
is(scalar(@mismatch), 0,
	"model: $model_steps random calls behaved as the model predicts")
  or diag(join("\n", grep { defined } @mismatch[ 0 .. 19 ]));
cmp_ok($states{'00000'} // 0, '>', $model_steps / 3,
	'model: a good share of the calls succeeded');
cmp_ok(scalar(grep { /^22/ } keys %states), '>=', 6,
	'model: the calls raised many kinds of class 22 errors');
cmp_ok($states{'55T01'} // 0, '>', 0, 'model: the fence rejected writes');
cmp_ok($max_token, '>', 0, 'model: tokens were granted');

# ---------------------------------------------------------------------
# Part 2: three concurrent sessions.
# ---------------------------------------------------------------------

my @cnames = ('c1', 'c2', 'c3', 'c4', "\xc3\xa7", 'c6');
my @cttls = ("'5 ms'", "'20 ms'", "'50 ms'", "'1 hour'", "'1 microsecond'",
	"'2 s'");
my @cwaits = ("'0'", "'1 ms'", "'5 ms'", "'20 ms'");
my @sessions = (
	{ name => 's1', role => 'postgres' },
	{ name => 's2', role => 'postgres' },
	{ name => 's3', role => 'fz_app' });

for my $se (@sessions)
{
	my $sc = "\\set t1 0\n\\set t2 0\n\\set t3 0\nSET statement_timeout = '20s';\n";
	my %sn;
	my @st;
	for my $i (1 .. $conc_steps)
	{
		my $r = rand();
		my $nb = pick(@cnames);
		my $name = rand() < 0.95 ? { sql => bytes_sql($nb), key => $nb } : pick(@bad_names);
		my %s = (i => $i, name => $name);
		my $sql;
		if ($r < 0.35)
		{
			my $k = 1 + int(rand(3));
			$sn{$k} = $name;
			my $ttl = rand() < 0.9 ? pick(@cttls) : pick(@ttls)->{sql};
			my $timeout = $se->{name} eq 's2' && rand() < 0.15;
			$sql = $timeout ? "SET statement_timeout = '1ms';\n" : '';
			$sql .= "SELECT coalesce(dlock_acquire($name->{sql}, $ttl, "
			  . ($timeout ? "'50 ms'" : pick(@cwaits))
			  . "), -1) AS t$k \\gset\n\\echo STEP $i :SQLSTATE :t$k\n";
			$sql .= "SET statement_timeout = '20s';\n" if $timeout;
			%s = (%s, op => 'acquire', slot => $k);
		}
		elsif ($r < 0.65)
		{
			my ($tok, $nm);
			if (%sn && rand() < 0.8)
			{
				my $k = pick(sort keys %sn);
				($nm, $tok) = ($sn{$k}, ":t$k");
			}
			else
			{
				($nm, $tok) = ($name, any_token(3)->{sql});
			}
			$s{name} = $nm;
			$sql = rand() < 0.5
			  ? "SELECT dlock_renew($nm->{sql}, $tok, " . pick(@cttls) . ")"
			  : "SELECT dlock_release($nm->{sql}, $tok)";
			$sql .= ";\n\\echo STEP $i :SQLSTATE\n";
			$s{op} = 'renew/release';
		}
		elsif ($r < 0.72)
		{
			$sql = "SELECT dlock_break($name->{sql});\n\\echo STEP $i :SQLSTATE\n";
			$s{op} = 'break';
		}
		elsif ($r < 0.74)
		{
			$sql = "SELECT dlock_purge('0');\n\\echo STEP $i :SQLSTATE\n";
			$s{op} = 'purge';
		}
		else
		{
			my $tab = pick('latest', 'live');
			my $id = 1 + int(rand(6));
			my $tok = %sn && rand() < 0.7 ? ':t' . pick(sort keys %sn) : any_token(3)->{sql};
			$sql = rand() < 0.8
			  ? "INSERT INTO fz_$tab AS f (id, name, tok) VALUES ($id, $name->{sql}, $tok)"
			  . " ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, tok = EXCLUDED.tok, n = f.n + 1;\n"
			  : "UPDATE fz_$tab SET n = n + 1 WHERE id = $id;\n";
			$sql .= "\\echo STEP $i :SQLSTATE\n";
			$s{op} = 'fence';
		}
		$s{sql} = $sql;
		push @st, \%s;
		$sc .= $sql;
	}
	$se->{steps} = \@st;
	my $file = "$dir/fuzz_$se->{name}.sql";
	PostgreSQL::Test::Utils::append_to_file($file, $sc);
	$se->{out} = '';
	$se->{err} = '';
	$se->{h} = IPC::Run::start(
		[
			'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=0',
			'-d', $node->connstr('fz_conc') . " user=$se->{role}",
			'-f', $file
		],
		'>', \$se->{out}, '2>', \$se->{err},
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
}
$_->{h}->finish for @sessions;

my %cstates;
my %granted;    # token => "session/name"
my @dups;
my %max_of;     # name bytes => greatest token granted
my @cproblems;
for my $se (@sessions)
{
	PostgreSQL::Test::Utils::append_to_file("$dir/fuzz_$se->{name}.out", $se->{out});
	PostgreSQL::Test::Utils::append_to_file("$dir/fuzz_$se->{name}.err", $se->{err});
	my %res;
	for my $line (split /\n/, $se->{out})
	{
		$res{$1} = [ $2, $3 ] if $line =~ /^STEP (\d+) (\S+) ?(.*)$/;
	}
	my $last = 0;
	my $seen = 0;
	for my $s (@{ $se->{steps} })
	{
		my $r = $res{ $s->{i} };
		unless ($r)
		{
			push @cproblems, "$se->{name} step $s->{i}: no output";
			last;
		}
		$seen++;
		my ($state, $val) = @$r;
		$cstates{$state}++;
		if ($se->{role} eq 'fz_app' && ($s->{op} eq 'break' || $s->{op} eq 'purge'))
		{
			# (a name that fails to evaluate may fail first, at planning)
			push @cproblems, "$se->{name} step $s->{i}: $s->{op} by an ordinary role gave $state, not 42501"
			  unless $state eq '42501'
			  || ($s->{op} eq 'break' && $s->{name}{err}
				  && $s->{name}{err}[0] eq 'X' && $state eq $s->{name}{err}[1]);
		}
		next unless $s->{op} eq 'acquire' && $state eq '00000' && $val ne '-1';
		push @cproblems, "$se->{name} step $s->{i}: token $val after $last"
		  unless $val > $last;
		$last = $val;
		push @dups, "$val ($granted{$val} and $se->{name})" if exists $granted{$val};
		$granted{$val} = "$se->{name}/" . unpack('H*', $s->{name}{key});
		$max_of{ $s->{name}{key} } = max($max_of{ $s->{name}{key} } // 0, $val);
	}
	note "session $se->{name}: $seen calls answered";
}
note 'concurrent part: SQLSTATEs: '
  . join(', ', map { "$_ x$cstates{$_}" } sort keys %cstates);
is(scalar(@cproblems), 0,
	'concurrent: every call answered, tokens increase per session, break and purge refused to the ordinary role'
) or diag(join("\n", @cproblems[ 0 .. ($#cproblems > 19 ? 19 : $#cproblems) ]));
is(scalar(@dups), 0, 'concurrent: no token was granted twice')
  or diag("@dups");
cmp_ok(scalar(keys %granted), '>', 100, 'concurrent: many leases were granted');

my %rows_c = map { my ($h, $t) = split /\|/; (pack('H*', $h) => $t) }
  split /\n/,
  $node->safe_psql('fz_conc',
	q{SELECT encode(convert_to(lock_name, 'UTF8'), 'hex'), token FROM dlock_leases});
my @bad_rows = grep { !defined $max_of{$_} || $rows_c{$_} != $max_of{$_} } keys %rows_c;
is(scalar(@bad_rows), 0,
	'concurrent: every lease row carries the greatest token granted for its name')
  or diag(join("\n", map { unpack('H*', $_) . ": row $rows_c{$_}, granted max " . ($max_of{$_} // 'none') } @bad_rows));
my @bad_fz;
for my $tab (qw(latest live))
{
	for my $row (split /\n/,
		$node->safe_psql('fz_conc',
			"SELECT id, encode(convert_to(name, 'UTF8'), 'hex'), tok FROM fz_$tab"))
	{
		my ($id, $h, $t) = split /\|/, $row;
		push @bad_fz, "fz_$tab $id: token $t"
		  unless ($granted{$t} // '') =~ /\/\Q$h\E$/;
	}
}
is(scalar(@bad_fz), 0,
	'concurrent: every protected row carries a token granted for its lock')
  or diag("@bad_fz");
is( $node->safe_psql(
		'fz_conc', q{
SELECT count(*) FILTER (WHERE NOT (token > 0 AND acquired_at <= renewed_at
         AND renewed_at <= expires_at AND NOT (live AND released)))
       + count(*) - count(DISTINCT lock_name)
  FROM dlock_leases}),
	'0',
	'concurrent: the lease table is consistent');

# ---------------------------------------------------------------------
# Every SQLSTATE, from the clients and the server log; no crash.
# ---------------------------------------------------------------------

my $allowed = sub {
	my ($st, $conc) = @_;
	return $st eq '00000' || $st =~ /^22/ || $st eq '42501' || $st eq '55T01'
	  || ($conc && $st eq '57014');
};
my @bad_states = grep { !$allowed->($_, 0) } keys %states;
push @bad_states, grep { !$allowed->($_, 1) } keys %cstates;
is(scalar(@bad_states), 0,
	'every SQLSTATE the clients saw is in class 22 or 42501, 55T01, 57014')
  or diag("unexpected: @bad_states");

my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $log_start);
my %logged;
$logged{$2}++ while $log =~ /^\S+ \S+ \S+ \[\d+\] \S* ?(ERROR|FATAL|PANIC):  ([0-9A-Z]{5}):/mg;
note 'server log: SQLSTATEs: ' . join(', ', map { "$_ x$logged{$_}" } sort keys %logged);
my @bad_logged = grep { !$allowed->($_, 1) } keys %logged;
is(scalar(@bad_logged), 0,
	'every SQLSTATE in the server log is in class 22 or 42501, 55T01, 57014')
  or diag(join("\n", map { /^.*\b\Q$_\E:.*$/m ? $& : $_ } @bad_logged));
cmp_ok(scalar(keys %logged), '>=', 5, 'the server log has the errors, with their SQLSTATEs');
my @crashes = crash_lines($node, $log_start);
is(scalar(@crashes), 0, 'no server process crashed') or diag(join("\n", @crashes));
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server still answers');

$node->stop;
done_testing();
