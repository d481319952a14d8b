# test/perl/DlockFiles.pm: what the TAP files that read the tree without a
# server share (030_docs.pl, 038_callgraph.pl, 041_format.pl): slurp.  It
# loads no PostgreSQL::Test module.
#
# test/run-tests puts this directory on @INC (prove -I test/perl).

package DlockFiles;

use strict;
use warnings;

use Exporter 'import';

our @EXPORT = qw(slurp);

# slurp($path) returns the bytes of $path; dies when it cannot be read.
sub slurp
{
	my ($path) = @_;
	open(my $fh, '<:raw', $path) or die "$path: $!";
	local $/;
	my $text = <$fh>;
	close $fh;
	return $text;
}

1;
