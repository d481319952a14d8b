#!/usr/bin/perl
#
# test/t/041_format.pl
#	  The C code as pgindent formats it, with no server (tools/pgindent,
#	  CONTRIBUTING.md, "Formatting").
#
#   1. tools/pgindent --check passes on the checkout: every C file is as
#      PostgreSQL's pgindent (with pg_bsd_indent built from PostgreSQL
#      18's source) leaves it, and typedefs.list names every typedef the
#      code defines, and nothing the code neither defines nor uses.
#   2. The check can fail: on a scratch tree of one badly formatted file
#      defining a typedef that typedefs.list lacks, --check exits 1, shows
#      the diff, names the typedef and changes nothing; tools/pgindent
#      refuses to format until the typedef is listed, then formats the
#      file (the typedef as a type: "Widget *w"), and --check passes.
#
# Skipped only when PostgreSQL 18's source is neither cached nor fetchable
# (tools/pgindent exits 3: test/pg-server fetches it).  The first run builds
# pg_bsd_indent (a minute or two); later ones take a few seconds.
#
# Run by test/run-tests' tap suite; alone: prove test/t/041_format.pl.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Copy qw(copy);
use File::Path qw(make_path);
use File::Temp qw(tempdir);
use Test::More;
use DlockFiles;

my $top = abs_path(dirname(abs_path($0)) . '/../..');

# run(@command) returns the exit status and the output (stdout and
# stderr) of @command.
sub run
{
	my @cmd = @_;
	my $pid = open(my $fh, '-|') // die "fork: $!";
	if ($pid == 0)
	{
		open(STDERR, '>&', \*STDOUT) or die "dup: $!";
		exec(@cmd) or die "exec $cmd[0]: $!";
	}
	local $/;
	my $out = <$fh> // '';
	close $fh;
	return ($? >> 8, $out);
}

sub spew
{
	my ($path, $text) = @_;
	open(my $fh, '>:raw', $path) or die "$path: $!";
	print $fh $text;
	close $fh or die "$path: $!";
	return;
}

# 1. The checkout.
my ($rc, $out) = run("$top/tools/pgindent", '--check');
if ($rc == 3)
{
	plan skip_all => "no PostgreSQL 18 source to build pg_bsd_indent from, and it "
	  . "could not be fetched (tools/pgindent says how to get it):\n$out";
}

my @diff_files = $out =~ m{^\+\+\+ b/(\S+)$}mg;
my @lines = split /\n/, $out;
splice(@lines, 60) if @lines > 60;
ok($out =~ /^pgindent: the \d+ C files are formatted$/m,
	'every C file is formatted as pgindent formats it')
  or diag("files pgindent would change (run tools/pgindent): @diff_files\n"
	  . join("\n", @lines));
my @typedef_problems = $out =~ /^(typedefs\.list.*)$/mg;
is(join("\n", @typedef_problems), '', 'typedefs.list is complete and current');
is($rc, 0, 'tools/pgindent --check exits 0');
note($1) if $out =~ /^(long lines: .*)$/m;

# 2. The check, on a scratch tree.
my $dir = tempdir('dlock-041-XXXXXX', TMPDIR => 1, CLEANUP => 1);
make_path("$dir/tools", "$dir/test", "$dir/src");
copy("$top/tools/pgindent", "$dir/tools/pgindent") or die "copy: $!";
chmod(0755, "$dir/tools/pgindent") or die "chmod: $!";
copy("$top/test/pg-server", "$dir/test/pg-server") or die "copy: $!";
my $ugly = <<'EOF';
/* src/widget.c: a file as nobody should write it */
typedef struct Widget
{
int a;   int b;
} Widget;

static int widget_sum(Widget *w,int n)
{
    int s=0;
    for (int i=0;i<n;i++) s+=w[i].a;
    return s;
}
EOF
spew("$dir/src/widget.c", $ugly);
spew("$dir/typedefs.list", "# none yet\n");

($rc, $out) = run("$dir/tools/pgindent", '--check');
is($rc, 1, 'scratch tree: --check fails');
like($out, qr{^\+\+\+ b/src/widget\.c$}m, 'scratch tree: --check shows the diff');
like($out, qr/^typedefs\.list misses Widget \(defined in src\/widget\.c\)$/m,
	'scratch tree: --check names the missing typedef');
is(slurp("$dir/src/widget.c"), $ugly, 'scratch tree: --check changes nothing');

($rc, $out) = run("$dir/tools/pgindent");
is($rc, 1, 'scratch tree: formatting with a typedef missing is refused');
is(slurp("$dir/src/widget.c"), $ugly, 'scratch tree: ... and changes nothing');

spew("$dir/typedefs.list", "Widget\n");
($rc, $out) = run("$dir/tools/pgindent");
is($rc, 0, 'scratch tree: tools/pgindent formats') or diag($out);
my $formatted = slurp("$dir/src/widget.c");
like($formatted, qr/^widget_sum\(Widget \*w, int n\)$/m,
	'scratch tree: the function as pgindent writes it, the typedef as a type');
like($formatted, qr/^\tint\t\t\ta;\n\tint\t\t\tb;$/m,
	'scratch tree: the members one a line, aligned');
($rc, $out) = run("$dir/tools/pgindent", '--check');
is($rc, 0, 'scratch tree: --check passes once formatted') or diag($out);

done_testing();
