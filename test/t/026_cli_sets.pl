#!/usr/bin/perl
#
# test/t/026_cli_sets.pl
#	  Sets and permits of the dlock command-line tool (cli/run.c,
#	  cli/leases.c, cli/dlock.c): dlock run --all NAME... takes every name
#	  or none and renews the set with one call; dlock run --slots N NAME
#	  takes one of the permits NAME:1 ... NAME:N; what CMD's environment
#	  carries; a member of a set broken while CMD runs; dlock acquire with
#	  both options; usage errors; an extension older than 1.2.
#
# Real processes against a real server, as in test/t/020_cli_run.pl: every
# CMD is a bash script that records what it sees in files, and outcomes are
# checked against the lease rows (dlock_leases) and, for the renewals, the
# statements in the server log (log_statement = 'all', each dlock named by
# its application_name).  Scripts that must hold their leases for a while
# wait for a file the test creates, so no outcome depends on a sleep being
# long enough.  Timings are not asserted (design.md §10), except bounds
# that only a broken dlock could miss.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();
use DlockCli;
use DlockTest;

my $node = dlock_node(
	'dlock_cli_sets',
	conf => q{
log_statement = 'all'
log_line_prefix = '%m [%p] app=%a '
},
	setup => 'CREATE EXTENSION dlock');
my $conn = $node->connstr('postgres');
my $dir = PostgreSQL::Test::Utils::tempdir('cli_sets');

# conn_as returns a connection string whose sessions are named $app.
sub conn_as { return "$conn application_name=$_[0]"; }

# lease returns "token|released|live" of $name's row, '' when there is none.
sub lease
{
	my ($name) = @_;
	return sql(
		"SELECT token, released, live FROM dlock_leases WHERE lock_name = '$name'");
}

# live_count returns how many of @names have a live lease.
sub live_count
{
	my $list = join(',', map { "'$_'" } @_);
	return sql("SELECT count(*) FROM dlock_leases WHERE lock_name IN ($list) AND live");
}

# The scripts.  env.sh records DLOCK_* (each in its own file: the lists
# span several lines) and exits 3.  hold.sh records its permit, then
# holds it until $dir/go.<tag> exists.  touch.sh must never run.
write_script("$dir/env.sh", qq{d=$dir/env.\$1
mkdir -p "\$d"
printf '%s' "\$DLOCK_NAMES" > "\$d/names"
printf '%s' "\$DLOCK_TOKENS" > "\$d/tokens"
printf '%s' "\${DLOCK_NAME-unset}" > "\$d/name"
printf '%s' "\${DLOCK_TOKEN-unset}" > "\$d/token"
printf '%s' "\${DLOCK_SLOT-unset}" > "\$d/slot"
exit 3
});
write_script("$dir/hold.sh", qq{printf '%s %s %s' "\$DLOCK_NAME" "\$DLOCK_SLOT" "\$DLOCK_TOKEN" > $dir/hold.\$1.tmp
mv $dir/hold.\$1.tmp $dir/hold.\$1
for i in \$(seq 600); do [ -e $dir/go.\$1 ] && exit 0; sleep 0.05; done
exit 99
});
write_script("$dir/touch.sh", "echo ran >> $dir/touched\n");

# env_of returns what env.sh recorded under $tag: {names, tokens, name,
# token, slot}.
sub env_of
{
	my ($tag) = @_;
	return { map { $_ => slurp("$dir/env.$tag/$_") } qw(names tokens name token slot) };
}

# ---------------------------------------------------------------------
# Part 1: short runs, one at a time.
# ---------------------------------------------------------------------

# A set: every name, one token each, in the order given (not the order the
# extension takes them in); CMD's status; all released at the end.  The
# DLOCK_NAME, DLOCK_TOKEN and DLOCK_SLOT of an outer dlock run are not
# passed on to a set's CMD.
my @set = ('set-c', 'set-a', 'set b');
my $h = dlock_run([ 'run', '-d', $conn, '--all', @set, '--', "$dir/env.sh", 'set' ],
	env => { DLOCK_NAME => 'outer', DLOCK_TOKEN => '1', DLOCK_SLOT => '7' });
is($h->{rc}, 3, "--all: exit with CMD's status (3)");
is($h->{stderr}, '', '--all: a successful run prints nothing');
my $env = env_of('set');
is($env->{names}, join("\n", @set), 'DLOCK_NAMES: the names, one per line, in the order given');
my @tokens = split /\n/, $env->{tokens};
is(scalar(@tokens), 3, 'DLOCK_TOKENS: one token per name');
is(join(',', map { lease($_) } @set), join(',', map { "$_|t|f" } @tokens),
	"DLOCK_TOKENS: each line is its name's token; the set was released when CMD exited");
is(scalar(keys %{ { map { $_ => 1 } @tokens } }), 3, 'the tokens of a set are distinct');
is($env->{name} . '/' . $env->{token} . '/' . $env->{slot}, 'unset/unset/unset',
	'a set of several has no DLOCK_NAME, DLOCK_TOKEN or DLOCK_SLOT (not even an outer run\'s)');
like(
	sql("SELECT string_agg(DISTINCT owner, ',') FROM dlock_leases WHERE lock_name IN ('set-a', 'set b', 'set-c')"),
	qr/^dlock run \S+ pid $h->{pid}$/,
	'every lease of the set has the default owner label');

# One name: DLOCK_NAMES and DLOCK_TOKENS equal DLOCK_NAME and DLOCK_TOKEN.
$h = dlock_run([ 'run', '-d', $conn, 'one', '--', "$dir/env.sh", 'one' ],
	env => { DLOCK_SLOT => '7' });
is($h->{rc}, 3, 'one name: exit 3');
$env = env_of('one');
is("$env->{names}|$env->{tokens}", "$env->{name}|$env->{token}",
	'one name: DLOCK_NAMES and DLOCK_TOKENS are DLOCK_NAME and DLOCK_TOKEN');
is($env->{name}, 'one', 'one name: DLOCK_NAME');
is($env->{slot}, 'unset', 'one name: no DLOCK_SLOT');

# A permit: DLOCK_NAME is the permit, DLOCK_SLOT its number.
$h = dlock_run([ 'run', '-d', $conn, '--slots', '3', 'perm', '--', "$dir/env.sh", 'perm' ]);
is($h->{rc}, 3, '--slots: exit 3');
$env = env_of('perm');
is("$env->{name}|$env->{slot}|$env->{names}", 'perm:1|1|perm:1',
	'--slots: the first free permit, NAME:1; DLOCK_SLOT 1; DLOCK_NAMES the permit');
is(lease('perm:1'), "$env->{token}|t|f", '--slots: DLOCK_TOKEN is the permit\'s token, released at the end');
is(sql("SELECT count(*) FROM dlock_leases WHERE lock_name LIKE 'perm:%'"),
	'1', '--slots: only the permit taken has a lease row');

# All or nothing: one member held by someone else.  dlock exits 75, starts
# nothing and holds none of the names afterwards, also after waiting.
my $held = sql(q{SELECT dlock_acquire('aon-b', '5 min', owner => 'the other job')});
$h = dlock_run([ 'run', '-d', $conn, '--all', 'aon-a', 'aon-b', 'aon-c', '--', "$dir/touch.sh" ]);
is($h->{rc}, 75, 'all or nothing: a held member: exit 75');
like($h->{stderr},
	qr/^dlock: not acquired: not all of "aon-a", "aon-b", "aon-c" are free: "aon-b" is held by "the other job" \(token $held, role \S+, expires in /m,
	'all or nothing: the message names the member held, its holder and token');
is(live_count('aon-a', 'aon-c'), '0', 'all or nothing: none of the other names is held');
$h = dlock_run([ 'run', '-d', $conn, '--wait', '300ms', '--all', 'aon-a', 'aon-b', 'aon-c', '--', "$dir/touch.sh" ]);
is($h->{rc}, 75, 'all or nothing with --wait 300ms: exit 75');
cmp_ok($h->{elapsed}, '>=', 0.3, 'all or nothing with --wait 300ms: it waited');
like($h->{stderr}, qr/are free after waiting 300ms: "aon-b" is held/, 'all or nothing with --wait: says it waited');
is(live_count('aon-a', 'aon-c'), '0', 'all or nothing with --wait: none of the other names is held');
is(lease('aon-b'), "$held|f|t", "all or nothing: the holder's lease is untouched");
ok(!-e "$dir/touched", 'all or nothing: CMD was never started');

# dlock acquire with --all and --slots: "TOKEN NAME" per lease, in the
# order given; all or nothing there too.
$h = dlock_run([ 'acquire', '-d', $conn, '--ttl', '1m', '--all', 'acq-z', 'acq a' ]);
is($h->{rc}, 0, 'acquire --all: exit 0');
like($h->{stdout}, qr/^(\d+) acq-z\n(\d+) acq a\n\z/, 'acquire --all: "TOKEN NAME" per name, in the order given');
my ($tz, $ta) = $h->{stdout} =~ /^(\d+) acq-z\n(\d+) acq a\n/;
is(lease('acq-z') . ',' . lease('acq a'), "$tz|f|t,$ta|f|t", 'acquire --all: both leases are live with those tokens');
$h = dlock_run([ 'acquire', '-d', $conn, '--all', 'acq-y', 'acq-z' ]);
is($h->{rc}, 75, 'acquire --all with a member held: exit 75');
is($h->{stdout}, '', 'acquire --all with a member held: prints nothing');
is(live_count('acq-y'), '0', 'acquire --all with a member held: holds nothing');
$h = dlock_run([ 'acquire', '-d', $conn, '--slots', '2', 'acq-p' ]);
like($h->{stdout}, qr/^\d+ acq-p:1\n\z/, 'acquire --slots: "TOKEN NAME:1", the first permit');
$h = dlock_run([ 'acquire', '-d', $conn, '--slots', '2', 'acq-p' ]);
like($h->{stdout}, qr/^\d+ acq-p:2\n\z/, 'acquire --slots again: the next permit, NAME:2');
$h = dlock_run([ 'acquire', '-d', $conn, '--slots', '2', 'acq-p' ]);
is($h->{rc}, 75, 'acquire --slots with every permit held: exit 75');
like($h->{stderr}, qr/^dlock: not acquired: all 2 permits of "acq-p" are held: "acq-p:1" is held by /m,
	'acquire --slots with every permit held: says so, with the holders');

# Usage errors: 64, a message and the usage; nothing acquired, CMD not
# started.
my @usage = (
	[ [ '--all', 'u-a', 'u-b', "$dir/touch.sh" ], qr/^dlock: missing "--" and CMD after the names \(with --all, "--" ends the names\)$/m, '--all without --' ],
	[ [ '--all', 'u-a', 'u-b', '--' ], qr/^dlock: missing CMD after "--"$/m, '--all without CMD' ],
	[ [ '--slots', '3', 'u-a', 'u-b', '--', "$dir/touch.sh" ], qr/^dlock: --slots takes one NAME, not 2/m, '--slots with two names' ],
	[ [ '--slots', '3', 'u-a', "$dir/touch.sh" ], qr/^dlock: missing "--" and CMD after the names \(with --slots/m, '--slots without --' ],
	[ [ '--slots', '0', 'u-a', '--', "$dir/touch.sh" ], qr/^dlock: invalid value "0" for --slots: the number of permits, from 1 to 10000$/m, '--slots 0' ],
	[ [ '--slots', '10001', 'u-a', '--', "$dir/touch.sh" ], qr/^dlock: invalid value "10001" for --slots/m, '--slots 10001' ],
	[ [ '--slots', 'two', 'u-a', '--', "$dir/touch.sh" ], qr/^dlock: invalid value "two" for --slots/m, '--slots two' ],
	[ [ '--slots', '2', '--all', 'u-a', '--', "$dir/touch.sh" ], qr/^dlock: --all and --slots cannot be combined$/m, '--slots with --all' ],
	[ [ '--all', 'u-a', 'u-b', 'u-a', '--', "$dir/touch.sh" ], qr/^dlock: NAME "u-a" is given twice$/m, 'a name twice' ],
	[ [ '--all', 'u-a', '', '--', "$dir/touch.sh" ], qr/^dlock: NAME must not be empty$/m, 'an empty name' ],
	[ [ '--all', 'u-a', "u\nb", '--', "$dir/touch.sh" ], qr/^dlock: NAME must not contain a newline with --all/m, 'a newline in a name' ],
	[ [ '--all', map({ "u-$_" } 1 .. 10001), '--', "$dir/touch.sh" ], qr/^dlock: too many names \(10001\): --all takes at most 10000$/m, '10001 names' ],
	[ [ '--all=yes', 'u-a', '--', "$dir/touch.sh" ], qr/^dlock: option --all takes no value$/m, '--all=yes' ],
);
for my $u (@usage)
{
	my ($args, $re, $what) = @$u;
	$h = dlock_run([ 'run', '-d', $conn, @$args ]);
	is($h->{rc}, 64, "usage error ($what): exit 64");
	like($h->{stderr}, $re, "usage error ($what): the message");
	like($h->{stderr}, qr/^Usage: dlock run /m, "usage error ($what): the usage");
}
$h = dlock_run([ 'acquire', '-d', $conn, 'u-a', 'u-b' ]);
is($h->{rc}, 64, 'acquire with two names and no --all: exit 64');
like($h->{stderr}, qr/^dlock: too many arguments \("u-b"\); several names need --all$/m,
	'acquire with two names and no --all: says --all is needed');
$h = dlock_run([ 'renew', '-d', $conn, '--all', 'u-a', '1' ]);
is($h->{rc}, 64, 'renew --all: exit 64 (the option does not apply)');
ok(!-e "$dir/touched", 'no CMD was started by a usage error');
is(sql("SELECT count(*) FROM dlock_leases WHERE lock_name LIKE 'u-%'"),
	'0', 'no lease was acquired by a usage error');

# Without --all, the argument after NAME is CMD, as it always was: "A B --
# C" runs "B -- C" under A, and a B that is no command gets a hint.
write_script("$dir/args.sh", qq{printf '%s|' "\$DLOCK_NAMES" "\$@" > $dir/args.out\n});
$h = dlock_run([ 'run', '-d', $conn, 'compat-a', "$dir/args.sh", '--', 'x' ]);
is($h->{rc}, 0, 'one NAME, then CMD with a "--" among its arguments: exit 0');
is(slurp("$dir/args.out"), 'compat-a|--|x|', 'one NAME: CMD and its arguments, "--" included, as before');
$h = dlock_run([ 'run', '-d', $conn, 'compat-a', 'compat-b', '--', "$dir/touch.sh" ]);
like($h->{rc}, qr/^12[67]$/, '"dlock run A B -- CMD" without --all: B is CMD (not found: 127, or 126 for a PATH with a directory it may not search)');
like($h->{stderr}, qr/^dlock: hint: .*give --all/m, '... and dlock suggests --all');
ok(!-e "$dir/touched", '... and the real CMD was not started');

# An extension older than 1.2: one name works as before; --all and --slots
# fail (70) with a hint about the version.
sql(q{CREATE DATABASE old_dlock});
$node->safe_psql('old_dlock', q{CREATE EXTENSION dlock VERSION '1.1'});
my $old = $node->connstr('old_dlock');
$h = dlock_run([ 'run', '-d', $old, 'old-one', '--', "$dir/env.sh", 'old' ]);
is($h->{rc}, 3, 'extension 1.1: a run of one name works');
is(env_of('old')->{names}, 'old-one', 'extension 1.1: with DLOCK_NAMES');
$h = dlock_run([ 'run', '-d', $old, '--all', 'old-a', 'old-b', '--', "$dir/touch.sh" ]);
is($h->{rc}, 70, 'extension 1.1: --all exits 70');
like($h->{stderr}, qr/in version 1\.2 or later \(--all and --slots need it\)/,
	'extension 1.1: the hint names the version needed');
ok(!-e "$dir/touched", 'extension 1.1: CMD was not started');

# ---------------------------------------------------------------------
# Part 2: long runs, at the same time, on different names.
# ---------------------------------------------------------------------

# R: a set renewed by the watchdog: a 6 s ttl (each renew has 2 s, which a
#    loaded machine needs), CMD holds it until told.
# B: a set one of whose members is broken while CMD runs; CMD traps
#    SIGTERM, records it, and exits 9 only when told, so that the test can
#    look at the other members while CMD is being stopped.
# S: three runs with --slots 3, holding their permits until told; a
#    fourth fails, a fifth waits for a permit.
# W: a set waiting (--wait) for a member held by another job.
write_script("$dir/break.sh", qq{trap 'echo TERM > $dir/break.term; for i in \$(seq 600); do [ -e $dir/go.break ] && exit 9; sleep 0.05; done; exit 98' TERM
printf '%s' "\$DLOCK_TOKENS" > $dir/break.tokens.tmp
mv $dir/break.tokens.tmp $dir/break.tokens
sleep 60 & wait \$!
echo "no SIGTERM" > $dir/break.term
});

my $log_offset = -s $node->logfile;
my $t_r = Time::HiRes::time();
my $r = dlock_start([ 'run', '-d', conn_as('set-renew'), '--ttl', '6s', '--all', 'ren-a', 'ren-b', '--', "$dir/hold.sh", 'ren' ]);
my $b = dlock_start([ 'run', '-d', $conn, '--ttl', '6s', '--kill-after', '20s', '--all', 'brk-a', 'brk-b', 'brk-c', '--', "$dir/break.sh" ]);
my @s = map { dlock_start([ 'run', '-d', $conn, '--slots', '3', 'pool', '--', "$dir/hold.sh", "s$_" ]) } 1 .. 3;
my $w_held = sql(q{SELECT dlock_acquire('wait-b', '5 min', owner => 'the other job')});
my $w = dlock_start([ 'run', '-d', $conn, '--wait', '60s', '--all', 'wait-a', 'wait-b', '--', "$dir/hold.sh", 'w' ]);

ok(wait_for_file("$dir/hold.ren"), 'renewed set: CMD started');
ok(wait_for_file("$dir/break.tokens"), 'broken set: CMD started');
ok(wait_for_file("$dir/hold.s$_"), "permit run $_: CMD started") for 1 .. 3;

# S: three distinct permits; the fourth run exits 75, a fifth waits.
my %perm = map { my ($name, $slot, $token) = split / /, slurp("$dir/hold.s$_"); ("s$_" => [ $name, $slot, $token ]) } 1 .. 3;
is(join(',', sort map { $perm{$_}[0] } keys %perm), 'pool:1,pool:2,pool:3',
	'--slots 3: three concurrent runs hold three distinct permits');
is(join(',', map { $perm{$_}[0] eq "pool:$perm{$_}[1]" ? 'ok' : 'no' } sort keys %perm), 'ok,ok,ok',
	'--slots 3: each DLOCK_SLOT is its permit\'s number');
is(join(',', map { lease($perm{$_}[0]) } sort keys %perm), join(',', map { "$perm{$_}[2]|f|t" } sort keys %perm),
	'--slots 3: each permit is live with the token its CMD got');
$h = dlock_run([ 'run', '-d', $conn, '--slots', '3', 'pool', '--', "$dir/touch.sh" ]);
is($h->{rc}, 75, '--slots 3: a fourth run exits 75');
like($h->{stderr}, qr/^dlock: not acquired: all 3 permits of "pool" are held: "pool:1" is held by /m,
	'--slots 3: a fourth run says every permit is held');
ok(!-e "$dir/touched", '--slots 3: the fourth run started nothing');
is(sql("SELECT count(*) FROM dlock_leases WHERE lock_name LIKE 'pool%'"), '3',
	'--slots 3: and it took no permit beyond the three');
my $fifth = dlock_start([ 'run', '-d', $conn, '--slots', '3', '--wait', '60s', 'pool', '--', "$dir/hold.sh", 's5' ]);

# W: waiting, it holds none of the set.
is(live_count('wait-a'), '0', 'waiting set: holds none of its names while it waits');

# R: past its first ttl the set is live, with its tokens, renewed.
my $pause = 7 - (Time::HiRes::time() - $t_r);
Time::HiRes::sleep($pause) if $pause > 0;
is( sql(
		q{SELECT count(*) FROM dlock_leases WHERE lock_name IN ('ren-a', 'ren-b') AND live AND renewed_at > acquired_at + interval '1 s'}
	),
	'2',
	'renewed set: 7 s into the run, both leases of the 6 s set are live and were renewed');

# B: break one member.  CMD gets SIGTERM; while it is being stopped, the
# other members stay held; once it exits they are released, and dlock
# exits 76.
my @brk_tokens = split /\n/, slurp("$dir/break.tokens");
is(sql(q{SELECT dlock_break('brk-b')}), 't', 'broken set: dlock_break of one member');
ok(wait_for_file("$dir/break.term"), 'broken set: CMD got a signal');
is(slurp("$dir/break.term"), "TERM\n", 'broken set: CMD got SIGTERM');
is(lease('brk-a') . ',' . lease('brk-c'), "$brk_tokens[0]|f|t,$brk_tokens[2]|f|t",
	'broken set: while CMD is being stopped, the other members are still held');
is(lease('brk-b'), "$brk_tokens[1]|t|f", 'broken set: the broken member is not taken again');
append_to_file("$dir/go.break", 'go');
is(dlock_wait($b), 76, 'broken set: dlock exits 76');
is(lease('brk-a') . ',' . lease('brk-c'), "$brk_tokens[0]|t|f,$brk_tokens[2]|t|f",
	'broken set: the other members were released after CMD exited');
like($b->{stderr}, qr/lost "brk-b" \(token $brk_tokens[1]\): dlock_renew_each returned false/,
	'broken set: dlock names the lost member');
like($b->{stderr}, qr/CMD exited with status 9 after the set was lost; releasing "brk-a" \(token $brk_tokens[0]\), "brk-c" \(token $brk_tokens[2]\)/,
	'broken set: dlock says it releases the others');

# S: one permit is given back; the waiting fifth run gets exactly it.
append_to_file("$dir/go.s2", 'go');
is(dlock_wait($s[1]), 0, 'permit run 2: exit 0 when its CMD ends');
ok(wait_for_file("$dir/hold.s5"), 'the waiting fifth run started once a permit was free');
my ($p5) = split / /, slurp("$dir/hold.s5");
is($p5, $perm{s2}[0], 'the waiting fifth run got the permit given back');

# W: the other job releases; the waiting set gets both names.
is(sql("SELECT dlock_release('wait-b', $w_held)"), 't', 'waiting set: the other job releases');
ok(wait_for_file("$dir/hold.w"), 'waiting set: CMD started once every name was free');
is(live_count('wait-a', 'wait-b'), '2', 'waiting set: holds both names');

# Let everything end.
append_to_file("$dir/go.$_", 'go') for qw(ren s1 s3 s5 w);
is(dlock_wait($r), 0, 'renewed set: exit 0');
my $t_r_end = Time::HiRes::time() - $t_r;
is(lease('ren-a') =~ s/^\d+//r . ',' . lease('ren-b') =~ s/^\d+//r, '|t|f,|t|f',
	'renewed set: both released at the end');
is(dlock_wait($s[0]), 0, 'permit run 1: exit 0');
is(dlock_wait($s[2]), 0, 'permit run 3: exit 0');
is(dlock_wait($fifth), 0, 'the fifth run: exit 0');
is(dlock_wait($w), 0, 'waiting set: exit 0');
is(sql("SELECT count(*) FROM dlock_leases WHERE (lock_name LIKE 'pool:%' OR lock_name LIKE 'wait-%') AND live"),
	'0', 'every permit and the waiting set were released');

# R, from the server log: the watchdog renewed the set with one
# dlock_renew_each call per renewal, naming both leases, and never with
# dlock_renew; and it released it with one dlock_release_each call.  (At
# most one call per ttl/3, plus slack: a bound that only a renew storm
# could break, not a slow machine.)
my @log = grep { /app=set-renew / } split /\n/, substr(slurp($node->logfile), $log_offset);
my @renews = grep { /execute .*dlock_renew_each\(/ } @log;
my @params = grep { /DETAIL:  [Pp]arameters: \$1 = '\{ren-a,ren-b\}', \$2 = '\{\d+,\d+\}', \$3 = '00:00:06'/ } @log;
cmp_ok(scalar(@renews), '>=', 2, 'renewed set: renewed by dlock_renew_each (' . scalar(@renews) . ' calls)');
cmp_ok(scalar(@renews), '<=', int($t_r_end / 2) + 3, 'renewed set: one call per renewal, not one per lease or more');
is(scalar(@params), scalar(@renews), 'renewed set: every renew call names both leases');
is(scalar(grep { /dlock_renew\(/ } @log), 0, 'renewed set: never renewed lease by lease (dlock_renew)');
is(scalar(grep { /execute .*dlock_release_each\(/ } @log), 1, 'renewed set: released with one dlock_release_each call');

$node->stop;
done_testing();
