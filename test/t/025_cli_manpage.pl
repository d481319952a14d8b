#!/usr/bin/perl
#
# test/t/025_cli_manpage.pl
#	  The manual page of the dlock command-line tool (cli/dlock.1) and
#	  "dlock --help" (cli/dlock.c) never disagree: the same commands (in
#	  the usage and in the list of commands), the same options and the same
#	  exit statuses; and its ENVIRONMENT section names every variable the
#	  tool reads (getenv in cli/*.c).
#
# Needs no database server: it runs "$DLOCK_CLI --help" (test/run-tests
# sets DLOCK_CLI to the checkout's cli/dlock; without it, the checkout's
# cli/dlock is used) and reads cli/dlock.1 of this checkout, or the file
# DLOCK_MANPAGE names.  A difference is reported as what only one of the
# two has.
#
# Copyright (c) 2026, the dlock authors

use strict;
use warnings;

use File::Basename qw(dirname);
use File::Spec;
use Test::More;

my $top = File::Spec->rel2abs(dirname(__FILE__) . '/../..');
my $cli = $ENV{DLOCK_CLI} || "$top/cli/dlock";
my $manpage = $ENV{DLOCK_MANPAGE} || "$top/cli/dlock.1";

BAIL_OUT("the dlock command-line tool is not built: no executable $cli")
  unless -x $cli;
BAIL_OUT("no manual page $manpage") unless -r $manpage;

# The help, by sections: a line "Name:" starts a section, its indented
# lines follow; anything else (a paragraph, a blank line) ends it.
my $help = `"$cli" --help`;
is($?, 0, 'dlock --help exits 0');
my %help;
my $section;
for my $line (split /\n/, $help)
{
	if ($line =~ /^(\w[\w ]*):$/)
	{
		$section = $1;
		$help{$section} = [];
	}
	elsif (defined $section && $line =~ /^\s/)
	{
		push @{ $help{$section} }, $line;
	}
	else
	{
		undef $section;
	}
}

# options_in(TEXT): the options (-d, --dbname, ...) TEXT names.
sub options_in
{
	my ($text) = @_;
	return $text =~ /(?<![\w-])(--?[A-Za-z][A-Za-z0-9-]*)/g;
}

my (%help_usage, %help_commands, %help_options, %help_status);
for (@{ $help{Usage} // [] })
{
	# "  dlock run [OPTION]... NAME ...", "  dlock --help | --version"
	$help_usage{$1} = 1 if /^\s+dlock (\w+)/;
	$help_usage{$_} = 1 for (/^\s+dlock (--.*)/ ? options_in($1) : ());
}
for (@{ $help{Commands} // [] })
{
	$help_commands{$1} = 1 if /^  (\w+)\s/;
}
for (@{ $help{Options} // [] })
{
	# an entry: "  -d, --dbname=CONNINFO   the database...", its option
	# part ends at two spaces; continuation lines start with text
	$help_options{$_} = 1 for (/^\s+(-\S.*?)(?:\s{2,}|$)/ ? options_in($1) : ());
}
for (@{ $help{'Exit status'} // [] })
{
	$help_status{$1} = 1 if /^  (\S+)\s{2,}/;
}

# The manual page, by sections (.SH); text is the roff source with font
# changes and escapes removed, macro names and quotes dropped.
sub roff_text
{
	my ($line) = @_;
	$line =~ s/^\.\w+\s*//;
	$line =~ s/\\f(?:\[[^\]]*\]|\(..|.)//g;
	$line =~ s/\\-/-/g;
	$line =~ s/\\&//g;
	$line =~ s/\\e/\\/g;
	$line =~ s/"//g;
	return $line;
}

open(my $fh, '<', $manpage) or die "cannot read $manpage: $!";
my @man = <$fh>;
close $fh;
chomp @man;
my (%man_sections, %man_tags);
undef $section;
for my $i (0 .. $#man)
{
	my $line = $man[$i];
	if ($line =~ /^\.SH\s+"?([^"]*?)"?\s*$/)
	{
		$section = $1;
		$man_sections{$section} = [];
		$man_tags{$section} = [];
		next;
	}
	next unless defined $section;
	push @{ $man_sections{$section} }, $line;
	# the tag of a .TP paragraph is the line after .TP
	push @{ $man_tags{$section} }, roff_text($man[ $i + 1 ])
	  if $line =~ /^\.TP\b/ && $i < $#man;
}

my (%man_usage, %man_commands, %man_options, %man_status);
for (@{ $man_sections{SYNOPSIS} // [] })
{
	next unless /^\.B\w*\s/;
	my $text = roff_text($_);
	# ".B dlock run", ".B dlock" followed by ".BR \-\-help ..."
	$man_usage{$1} = 1 if $text =~ /^dlock (\w+)/;
	$man_usage{$_} = 1 for ($text =~ /^(?:dlock\s*)?(--.*)/ ? options_in($1) : ());
}
for (@{ $man_tags{COMMANDS} // [] })
{
	$man_commands{$1} = 1 if /^(\w+)/;
}
for (@{ $man_tags{OPTIONS} // [] })
{
	# "-d, --dbname=CONNINFO": only the part before a value
	$man_options{$_} = 1 for options_in(join ' ', map { s/=.*//r } split /,\s*/);
}
for (@{ $man_tags{'EXIT STATUS'} // [] })
{
	$man_status{$1} = 1 if /^(\S+)/;
}

# same_set(WHAT, \%help, \%man): one test, failing with the differences.
sub same_set
{
	my ($what, $h, $m) = @_;
	my @only_help = sort grep { !$m->{$_} } keys %$h;
	my @only_man = sort grep { !$h->{$_} } keys %$m;
	ok(!@only_help && !@only_man, "$what: --help and dlock.1 agree")
	  or diag("$what only in --help: "
		  . (join(' ', @only_help) || '(none)')
		  . "\n$what only in dlock.1: "
		  . (join(' ', @only_man) || '(none)'));
}

# What is compared must have been found at all: a parser that finds
# nothing on either side would find them equal.
my @commands = qw(run acquire renew release status);
my @options =
  qw(-d --dbname --schema --ttl --wait --owner --kill-after --timeout --slots --all --waiters
  --stats --json --help -V --version);
for my $c (@commands)
{
	ok($help_commands{$c}, "--help lists the command $c");
	ok($help_usage{$c}, "--help's usage shows the command $c");
}
ok($help_usage{$_}, "--help's usage shows $_") for qw(--help --version);
ok($help_options{$_}, "--help lists the option $_") for @options;
ok($help_status{$_}, "--help lists the exit status $_") for qw(0 1 64 69 70 75 76 79);

same_set('commands', \%help_commands, \%man_commands);
same_set('commands and options of the usage (SYNOPSIS)', \%help_usage, \%man_usage);
same_set('options', \%help_options, \%man_options);
same_set('exit statuses', \%help_status, \%man_status);

# Every environment variable the tool reads (getenv in cli/*.c) is in the
# manual page's ENVIRONMENT section.
my $man_text = do { local $/; open(my $m, '<', $manpage) or die $!; <$m> };
my ($environment) = $man_text =~ /^\.SH ENVIRONMENT\n(.*?)^\.SH /ms;
my %getenv;
for my $file (glob("$top/cli/*.c"))
{
	my $code = do { local $/; open(my $c, '<', $file) or die $!; <$c> };
	$getenv{$1} = 1 while $code =~ /getenv\("(\w+)"\)/g;
}
ok(%getenv, 'the tool reads environment variables (getenv)');
ok(($environment // '') =~ /\b\Q$_\E\b/, "the manual page's ENVIRONMENT names $_")
  for sort keys %getenv;

done_testing();
