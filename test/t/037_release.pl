#!/usr/bin/perl
#
# test/t/037_release.pl
#
# The release, without a server (CONTRIBUTING.md, "Releasing"):
#
#   1. META.json is valid PGXN metadata (Meta Spec 1.0.0, written down as a
#      JSON Schema in test/release/check-meta), and the check can fail:
#      copies of it with a key missing, a version that is not a semantic
#      version, a license PGXN does not know, an extension without its
#      file, or a key the spec does not define are each refused.
#   2. One version: VERSION holds the release (1.2.0), and what else names
#      it agrees: META.json's version and its extension's, dlock.control's
#      default_version (the release's first two parts), the file META.json
#      names (dlock--<default_version>.sql), debian/changelog's newest entry
#      (<release>-<revision>), CHANGELOG.md's newest dated section, under
#      an "## Unreleased" one if there is one ("## <release> (YYYY-MM-DD)",
#      with an "Upgrading" paragraph, dated as debian/changelog's entry), the client libraries' packages, and
#      dlock --version (when DLOCK_CLI names the tool).
#   3. The update scripts chain from 1.0 to default_version (the upgrade
#      path sql/upgrade.sql takes).
#
# Run by test/run-tests' tap suite; alone: prove test/t/037_release.pl.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Temp qw(tempdir);
use Test::More;

my $top = abs_path(dirname(abs_path($0)) . '/../..');

sub slurp
{
	my ($path) = @_;
	open(my $fh, '<:raw', "$top/$path") or die "$path: $!";
	local $/;
	my $text = <$fh>;
	close $fh;
	return $text;
}

# check_meta($path) runs test/release/check-meta on $path: (exit status,
# output).
sub check_meta
{
	my ($path) = @_;
	my $out = `/usr/bin/python3 '$top/test/release/check-meta' '$path' 2>&1`;
	return ($? >> 8, $out);
}

# 1. META.json against the spec.
my ($rc, $out) = check_meta("$top/META.json");
is($rc, 0, 'META.json is valid PGXN metadata (Meta Spec 1.0.0)') or diag($out);

# Copies of META.json with one thing wrong each: the check must refuse
# every one (JSON::PP is Perl's own; the copies keep the rest as it is).
use JSON::PP;
my $meta = JSON::PP->new->decode(slurp('META.json'));
my $tmp = tempdir(CLEANUP => 1);
my %broken = (
	'no license' => sub { delete $_[0]{license} },
	'version 1.2 (not semantic)' => sub { $_[0]{version} = '1.2' },
	'license "postgres" (not a PGXN license)' =>
	  sub { $_[0]{license} = 'postgres' },
	'an extension without its file' =>
	  sub { delete $_[0]{provides}{dlock}{file} },
	'a key the spec does not define' => sub { $_[0]{homepage} = 'x' },
	'meta-spec 2.0.0' => sub { $_[0]{'meta-spec'}{version} = '2.0.0' },
	'a prerequisite version "15"' =>
	  sub { $_[0]{prereqs}{runtime}{requires}{PostgreSQL} = '15' },);
for my $what (sort keys %broken)
{
	my $copy = JSON::PP->new->decode(JSON::PP->new->encode($meta));
	$broken{$what}->($copy);
	open(my $fh, '>', "$tmp/META.json") or die $!;
	print $fh JSON::PP->new->canonical->encode($copy);
	close $fh;
	my ($brc, $bout) = check_meta("$tmp/META.json");
	is($brc, 1, "check-meta refuses META.json with $what") or diag($bout);
}

# 2. One version.
my $release = slurp('VERSION');
chomp $release;
like($release, qr/^\d+\.\d+\.\d+$/, "VERSION holds a release: $release");
my ($major_minor) = $release =~ /^(\d+\.\d+)\./;

is($meta->{version}, $release, 'META.json: version');
is($meta->{provides}{dlock}{version}, $release, 'META.json: provides dlock version');

my ($default_version) =
  slurp('dlock.control') =~ /^default_version = '([^']+)'/m;
is($default_version, $major_minor,
	"dlock.control: default_version is the release's first two parts");
is($meta->{provides}{dlock}{file}, "dlock--$default_version.sql",
	"META.json: the extension's file is the install script of default_version");
ok(-f "$top/dlock--$default_version.sql", "dlock--$default_version.sql exists");

my $debian = slurp('debian/changelog');
my ($deb_version, $deb_date) = $debian =~
  /\A\S+ \(([^)]+)\)[^\n]*\n.*?\n -- [^\n]*>  \w{3}, (\d{2} \w{3} \d{4}) /s;
like($deb_version // '', qr/^\Q$release\E-\d+$/,
	"debian/changelog: the newest entry is $release-<revision>");

my $changelog = slurp('CHANGELOG.md');
# changes since the release wait in an "## Unreleased" section on top
$changelog =~ s/^## Unreleased\n.*?(?=^## )//ms;
my ($section) = $changelog =~ /^(## .*?)(?=^## |\z)/ms;
my ($cl_version, $cl_date) =
  ($section // '') =~ /\A## (\S+) \((\d{4}-\d{2}-\d{2})\)\n/;
is($cl_version, $release,
	'CHANGELOG.md: the newest section is the release, dated (## X.Y.Z (YYYY-MM-DD))');
like($section // '', qr/^### Upgrading\n/m,
	'CHANGELOG.md: the release has an "Upgrading" paragraph');
my %month = (
	Jan => '01', Feb => '02', Mar => '03', Apr => '04', May => '05', Jun => '06',
	Jul => '07', Aug => '08', Sep => '09', Oct => '10', Nov => '11', Dec => '12');
my $deb_iso = '';
if (defined $deb_date && $deb_date =~ /^(\d{2}) (\w{3}) (\d{4})$/)
{
	$deb_iso = "$3-" . ($month{$2} // '??') . "-$1";
}
is($cl_date, $deb_iso, 'CHANGELOG.md and debian/changelog date the release alike');

my ($py_version) = slurp('clients/python/pyproject.toml') =~ /^version = "([^"]+)"/m;
is($py_version, $release, 'clients/python/pyproject.toml: version');
my ($py_dunder) =
  slurp('clients/python/src/dlock/__init__.py') =~ /^__version__ = "([^"]+)"/m;
is($py_dunder, $release, 'clients/python: dlock.__version__');
my $node = JSON::PP->new->decode(slurp('clients/node/package.json'));
is($node->{version}, $release, 'clients/node/package.json: version');
my $lock = JSON::PP->new->decode(slurp('clients/node/package-lock.json'));
is($lock->{packages}{''}{version} // $lock->{version},
	$release, 'clients/node/package-lock.json: version');

SKIP:
{
	skip 'DLOCK_CLI is not set (the tool is not built)', 1
	  unless $ENV{DLOCK_CLI} && -x $ENV{DLOCK_CLI};
	my $v = `'$ENV{DLOCK_CLI}' --version`;
	like($v, qr/^dlock \Q$release\E /, "dlock --version says $release");
}

# 3. The update chain, 1.0 to default_version.
my %next;
for my $f (glob("$top/dlock--*--*.sql"))
{
	$next{$1} = $2 if $f =~ m{/dlock--([\d.]+)--([\d.]+)\.sql$};
}
my @path = ('1.0');
push @path, $next{ $path[-1] } while exists $next{ $path[-1] } && @path < 100;
is($path[-1], $default_version,
	'the update scripts lead from 1.0 to default_version: ' . join(' -> ', @path));

done_testing();
