# test/perl/DlockTest.pm: helpers shared by the Perl TAP tests in test/t.
#
# test/run-tests puts this directory on @INC (prove -I test/perl).

package DlockTest;

use strict;
use warnings;

use Exporter 'import';
our @EXPORT = qw(psql_error);

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

1;
