#!/usr/bin/perl
#
# test/t/030_docs.pl
#	  The repository itself, with no server: links between its Markdown
#	  files, the README's size, no citations of documents it does not
#	  contain, and the committed full install script equal to the
#	  generated one.
#
#   1. Links.  Every relative Markdown link [text](path#anchor) in
#      README.md, CONTRIBUTING.md, CHANGELOG.md, docs/*.md and
#      bench/README.md (outside code blocks and code spans) names a file
#      or directory of the checkout, and, when it has an #anchor into a
#      Markdown file, a heading of that file, by GitHub's rules: the
#      heading's text, lower case, without punctuation other than '-' and
#      '_', spaces turned into '-', and "-1", "-2", ... appended to
#      repeated headings.  Links with a scheme (https:, mailto:) are not
#      followed.
#   2. README.md is at most 15 KB (15000 bytes): the README is for a
#      user deciding and starting; everything else lives in docs/.
#   3. No tracked file (git ls-files; without git, every file of the
#      checkout but build and test output) cites the section of a
#      document the repository does not contain (the team's contract and
#      style guide).
#   4. dlock--<default_version>.sql is what tools/gen-install-script makes
#      from the base script (DLOCK_BASE_VERSION in the Makefile), the
#      update chain and tools/install-tail.sql (CONTRIBUTING.md,
#      "Extension scripts and versions").
#   5. docs/sql-reference.md names every SQLSTATE the C code raises (its
#      SQLSTATEs table) and every superuser-only setting (Privileges).
#
# Run by test/run-tests' tap suite; alone: prove test/t/030_docs.pl.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Find;
use File::Spec;
use Test::More;
use DlockFiles;

my $top = abs_path(dirname(abs_path($0)) . '/../..');

# without_code($markdown) returns $markdown with fenced code blocks and
# code spans blanked out (newlines kept, so line numbers stay right).
sub without_code
{
	my ($text) = @_;
	my @out;
	my $fence;
	foreach my $line (split /\n/, $text, -1)
	{
		if (defined $fence)
		{
			$fence = undef if $line =~ /^\s*\Q$fence\E/;
			push @out, '';
			next;
		}
		if ($line =~ /^\s*(```|~~~)/)
		{
			$fence = $1;
			push @out, '';
			next;
		}
		push @out, $line;
	}
	my $joined = join("\n", @out);
	$joined =~ s/(`+)(?:(?!\1).)+?\1/' ' x length($&)/gse;
	return $joined;
}

# slug($heading) returns GitHub's anchor for a heading's text.
sub slug
{
	my ($h) = @_;
	utf8::decode($h);
	$h =~ s/\s+#+\s*$//;               # closing #s
	$h =~ s/!?\[([^\]]*)\]\([^)]*\)/$1/g;    # links: their text
	$h =~ s/<[^>]+>//g;                # inline HTML
	$h = lc $h;
	$h =~ s/[^\p{L}\p{M}\p{N}\p{Pc}\- ]//g;
	$h =~ s/ /-/g;
	utf8::encode($h);
	return $h;
}

# anchors($path) returns a hash of the anchors of Markdown file $path.
my %anchor_cache;
sub anchors
{
	my ($path) = @_;
	return $anchor_cache{$path} if $anchor_cache{$path};
	my (%anchors, %count);
	my @lines = split /\n/, slurp($path);
	my $fence;
	foreach my $line (@lines)
	{
		if (defined $fence)
		{
			$fence = undef if $line =~ /^\s*\Q$fence\E/;
			next;
		}
		if ($line =~ /^\s*(```|~~~)/)
		{
			$fence = $1;
			next;
		}
		next unless $line =~ /^ {0,3}#{1,6}\s+(.*?)\s*$/;
		my $heading = $1;
		$heading =~ s/`//g;
		my $s = slug($heading);
		my $n = $count{$s}++;
		$anchors{$n ? "$s-$n" : $s} = 1;
	}
	return $anchor_cache{$path} = \%anchors;
}

# 1. Links.
my @docs = grep { -f "$top/$_" } ('README.md', 'CONTRIBUTING.md', 'CHANGELOG.md',
	(map { File::Spec->abs2rel($_, $top) } glob("$top/docs/*.md")),
	'bench/README.md');
ok(scalar(grep { $_ eq 'README.md' } @docs), 'README.md exists');
ok(scalar(grep { m{^docs/} } @docs), 'docs/ has Markdown files');

my ($links, @bad_links) = (0);
foreach my $doc (@docs)
{
	my $text = without_code(slurp("$top/$doc"));
	while ($text =~ /!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)/g)
	{
		my $target = $2;
		my $line = 1 + (() = substr($text, 0, $-[0]) =~ /\n/g);
		next if $target =~ /^[a-z][a-z0-9+.-]*:/i;    # https:, mailto:
		$links++;
		my ($path, $anchor) = $target =~ /^([^#]*)(?:#(.*))?$/;
		my $file = $path eq '' ? "$top/$doc"
		  : File::Spec->catfile(dirname("$top/$doc"), $path);
		if (!-e $file)
		{
			push @bad_links, "$doc:$line: $target: no such file";
			next;
		}
		my $real = abs_path($file);
		if (index($real, $top) != 0)
		{
			push @bad_links, "$doc:$line: $target: outside the repository";
			next;
		}
		next unless defined $anchor && $anchor ne '';
		if ($file !~ /\.md$/)
		{
			push @bad_links, "$doc:$line: $target: an anchor into a file that is not Markdown";
			next;
		}
		push @bad_links, "$doc:$line: $target: no heading with that anchor in " .
		  File::Spec->abs2rel($real, $top)
		  unless anchors($real)->{$anchor};
	}
}
cmp_ok($links, '>', 20, "the docs have relative links ($links checked)");
is(join("\n", @bad_links), '', 'every relative link names an existing file and heading');

# 2. The README's size.
my $readme_size = -s "$top/README.md";
cmp_ok($readme_size, '<=', 15000, "README.md is at most 15 KB ($readme_size bytes)");

# 3. Citations of documents the repository does not contain.  The strings
# are built so that this file does not contain them itself.
my $sect = "\xc2\xa7";    # the section sign, UTF-8
my @cited = map { ($_ . " $sect", $_ . ' section', $_ . '.md') }
  (uc('contract'), uc('style'));
my @files;
my $git = `git -c safe.directory='*' -C '$top' ls-files -z 2>/dev/null`;
if ($? == 0 && $git ne '')
{
	@files = grep { -f "$top/$_" } split /\0/, $git;
}
else
{
	diag('git ls-files failed: checking every file of the checkout instead');
	find(
		{
			no_chdir => 1,
			wanted => sub {
				my $rel = File::Spec->abs2rel($File::Find::name, $top);
				if (-d $_)
				{
					$File::Find::prune = 1
					  if $rel =~ m{^(\.git|tmp_\w+|results|output_iso|log)$};
					return;
				}
				push @files, $rel unless $rel =~ /\.(o|so|bc)$|^cli\/dlock$|^\.pg-build$/;
			}
		},
		$top);
}
cmp_ok(scalar(@files), '>', 50, 'the repository\'s files were listed (' . scalar(@files) . ')');
my @citations;
foreach my $f (sort @files)
{
	my $text = slurp("$top/$f");
	next if $text =~ /\0/;    # binary
	my $n = 0;
	foreach my $line (split /\n/, $text)
	{
		$n++;
		foreach my $c (@cited)
		{
			push @citations, "$f:$n: $line" if index($line, $c) >= 0;
		}
	}
}
is(join("\n", @citations), '',
	'no file cites a document the repository does not contain');

# 4. The generated install script.
my ($base) = slurp("$top/Makefile") =~ /^DLOCK_BASE_VERSION\s*:?=\s*(\S+)/m;
my ($version) = slurp("$top/dlock.control") =~ /^default_version\s*=\s*'([^']*)'/m;
ok(defined $base && defined $version,
	'the Makefile names the base version and dlock.control the default version');
SKIP:
{
	skip 'the current version is the base version, written by hand', 1
	  if !defined $base || !defined $version || $base eq $version;
	my $script = "dlock--$version.sql";
	my $generated = `cd '$top' && '$^X' tools/gen-install-script '$base' '$version'`;
	is($?, 0, 'tools/gen-install-script ran');
	my $committed = slurp("$top/$script");
	if ($generated eq $committed)
	{
		pass("$script is the generated full install script");
	}
	else
	{
		my @g = split /\n/, $generated;
		my @c = split /\n/, $committed;
		my $i = 0;
		$i++ while $i < @g && $i < @c && $g[$i] eq $c[$i];
		fail("$script is the generated full install script");
		diag("first difference at line " . ($i + 1) . ":\n  committed: "
			  . ($c[$i] // '(end of file)') . "\n  generated: "
			  . ($g[$i] // '(end of file)')
			  . "\nrun make install-script, or edit the sources named in its header");
	}
}

# 5. The SQL reference against the code: every SQLSTATE the C code raises
# (errcode(ERRCODE_...) in src/*.c, its value read from the server's
# utils/errcodes.h; XX000, internal errors, aside) has a row in the
# SQLSTATEs table, and every setting defined as PGC_SUSET is in the
# Privileges list of settings only superusers may set.
my $reference = slurp("$top/docs/sql-reference.md");
my %documented = map { $_ => 1 } $reference =~ /^\| \**([0-9A-Z]{5})\** /mg;
my $pg_config = $ENV{PG_CONFIG} || 'pg_config';
my $incdir = `'$pg_config' --includedir-server 2>/dev/null`;
chomp $incdir;
SKIP:
{
	skip 'no pg_config with the server headers (utils/errcodes.h)', 1
	  unless $incdir && -f "$incdir/utils/errcodes.h";
	my %sqlstate;
	for (split /\n/, slurp("$incdir/utils/errcodes.h"))
	{
		my ($name, $chars) = /^#define (ERRCODE_\w+)\s+MAKE_SQLSTATE\(([^)]*)\)/
		  or next;
		$sqlstate{$name} = join('', $chars =~ /'(.)'/g);
	}
	$sqlstate{ERRCODE_DLOCK_STALE_TOKEN} = '55T01';
	my @missing;
	for my $file (sort glob("$top/src/*.c"))
	{
		for my $name (slurp($file) =~ /errcode\((ERRCODE_\w+)\)/g)
		{
			my $code = $sqlstate{$name} // "$name (unknown)";
			next if $code eq 'XX000' || $documented{$code};
			push @missing, "$code ($name, " . ($file =~ s{.*/}{}r) . ')';
		}
	}
	my %seen;
	is(join("\n", grep { !$seen{$_}++ } @missing),
		'', "every SQLSTATE src/ raises has a row in docs/sql-reference.md's table");
}
my ($superuser_only) = $reference =~ /^- Only superusers may set (.*?), and\s+signal/ms;
my @suset;
for my $file (sort glob("$top/src/*.c"))
{
	my $code = slurp($file);
	push @suset, $1
	  while $code =~ /DefineCustom\w+Variable\("(dlock\.\w+)"[^;]*?PGC_SUSET/gs;
}
ok(@suset, 'src/ defines superuser-only settings');
is(join(' ', grep { ($superuser_only // '') !~ /`\Q$_\E`/ } @suset),
	'', "every PGC_SUSET setting is in docs/sql-reference.md's superuser-only list");

done_testing();
