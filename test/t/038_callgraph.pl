#!/usr/bin/perl
#
# test/t/038_callgraph.pl
#	  The shape of src/, with no server (design.md §1, §2, §11): no circle
#	  in the call graph between its files, version tests only in
#	  src/compat.h, no header that includes postgres.h, postgres.h first
#	  in every .c file, and no .c file over 700 lines.
#
#   1. The call graph.  It builds nothing: it reads the object files of
#      the last build (src/*.o, one per src/*.c; none: skipped, with how to
#      build them) with nm, maps every undefined symbol of a file to the
#      src file that defines it, and fails on any cycle between files,
#      printing it (a -> b -> ... -> a).  A file's calls of itself do not
#      count; symbols from PostgreSQL or libc are defined by no src file.
#   2. No C file or header (src/, cli/, tools/, test/) but src/compat.h
#      contains PG_VERSION_NUM.
#   3. No src/*.h includes postgres.h (PostgreSQL's own headers never do);
#      the first #include of every src/*.c is postgres.h.
#   4. No src/*.c file is over 700 lines.
#
# DLOCK_CALLGRAPH_SRC names another directory to check in place of src/
# (a copy with a deliberate cycle shows that the test fails).
#
# Run by test/run-tests' tap suite; alone: prove test/t/038_callgraph.pl
# (after make).
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(basename dirname);
use File::Find;
use Test::More;
use DlockFiles;

my $top = abs_path(dirname(abs_path($0)) . '/../..');
my $src = $ENV{DLOCK_CALLGRAPH_SRC} // "$top/src";
my $max_lines = 700;

my @c_files = sort glob("$src/*.c");
my @h_files = sort glob("$src/*.h");
ok(@c_files > 0, "$src has C files");

# 1. The call graph.
my @missing = grep { !-f substr($_, 0, -2) . '.o' } @c_files;
SKIP:
{
	skip "no object files in $src (build first: make PG_CONFIG=...)", 2
	  if @missing == @c_files;
	is(join(' ', map { basename($_) } @missing),
		'', 'every src/*.c has its object file (a complete build)');

	my (%defined_in, %undefined);
	foreach my $c (@c_files)
	{
		my $file = basename($c, '.c');
		my $o = substr($c, 0, -2) . '.o';
		next unless -f $o;
		open(my $nm, '-|', 'nm', '-P', $o) or die "nm $o: $!";
		while (my $line = <$nm>)
		{
			my ($sym, $type) = split ' ', $line;
			next unless defined $type;
			if ($type eq 'U')
			{
				$undefined{$file}{$sym} = 1;
			}
			elsif ($type =~ /^[TDBRCGSV]$/)
			{
				$defined_in{$sym} = $file;
			}
		}
		close $nm or die "nm $o failed";
		$undefined{$file} //= {};
	}

	# the edges between files
	my %edges;
	foreach my $file (sort keys %undefined)
	{
		my %to;
		foreach my $sym (keys %{ $undefined{$file} })
		{
			my $def = $defined_in{$sym};
			$to{$def} = 1 if defined $def && $def ne $file;
		}
		$edges{$file} = [ sort keys %to ];
	}

	# depth-first search; a back edge closes a cycle
	my (%state, @stack, @cycles);
	my $visit;
	$visit = sub {
		my ($file) = @_;
		$state{$file} = 1;
		push @stack, $file;
		foreach my $next (@{ $edges{$file} })
		{
			if (($state{$next} // 0) == 1)
			{
				my ($at) = grep { $stack[$_] eq $next } 0 .. $#stack;
				push @cycles, join(' -> ', @stack[ $at .. $#stack ], $next);
			}
			elsif (!$state{$next})
			{
				$visit->($next);
			}
		}
		pop @stack;
		$state{$file} = 2;
	};
	foreach my $file (sort keys %edges)
	{
		$visit->($file) unless $state{$file};
	}
	is(join("\n", @cycles), '', 'no cycle between the files of src/ in the call graph');
	diag("cycle: $_") foreach @cycles;
}

# 2. PG_VERSION_NUM only in src/compat.h.
my @version_tests;
find(
	{
		no_chdir => 1,
		wanted => sub {
			return unless /\.[ch]$/ && -f $_;
			return if /\/tmp_check\//;
			my $rel = File::Spec->abs2rel($_, $top);
			return if $rel eq 'src/compat.h';
			push @version_tests, $rel if slurp($_) =~ /PG_VERSION_NUM/;
		}
	},
	grep { -d } map { "$top/$_" } qw(src cli tools test));
if ($src ne "$top/src")
{
	foreach my $f (@c_files, @h_files)
	{
		next if basename($f) eq 'compat.h';
		push @version_tests, $f if slurp($f) =~ /PG_VERSION_NUM/;
	}
}
is(join(' ', sort @version_tests), '', 'only src/compat.h tests PG_VERSION_NUM');

# 3. postgres.h: first in every .c file, in no header.
my @bad_headers =
  map { basename($_) } grep { slurp($_) =~ /^\s*#\s*include\s+[<"]postgres\.h[>"]/m } @h_files;
is(join(' ', @bad_headers), '', 'no header in src/ includes postgres.h');
my @bad_first;
foreach my $c (@c_files)
{
	my ($first) = slurp($c) =~ /^\s*#\s*include\s+([<"][^>"]+[>"])/m;
	push @bad_first, basename($c) unless defined $first && $first eq '"postgres.h"';
}
is(join(' ', @bad_first), '', 'every .c file in src/ includes postgres.h first');

# 4. No .c file over $max_lines lines.
my @long;
foreach my $c (@c_files)
{
	my $n = () = slurp($c) =~ /\n/g;
	push @long, basename($c) . " ($n lines)" if $n > $max_lines;
}
is(join(', ', @long), '', "no .c file in src/ is over $max_lines lines");

done_testing();
