package CB::Config;

# "nginx -t" answers on configurations written to the test directory, for the tests of
# directives (t/05-config.t, t/77-fleet-config.t): one that must fail with exactly one
# [emerg] line at the right FILE:LINE, one that must pass without a complaint; and filling a
# template's placeholder lines with the parts under test.
#
#	my $template = CB::Nginx::conf(1, <<'EOF');
#	HTTP
#	    server { ... }
#	EOF
#	conf_fails($t, 'no id', fill($template, HTTP => 'x;'), 'x;', 'message');

use warnings;
use strict;

use Exporter qw/ import /;
our @EXPORT_OK = qw/ fill conf_fails conf_passes /;

use Test::More;

use CB::Nginx qw/ nginx_t /;

###############################################################################

# the files written, numbered in order: bad-01.conf, good-02.conf, ...
my $n = 0;

# TEMPLATE with each placeholder line (one upper-case word alone, such as "UPSTREAM")
# replaced by PARTS' value for that word, or emptied

sub fill {
	my ($template, %parts) = @_;
	(my $c = $template) =~ s/^([A-Z]+)$/$parts{$1} \/\/ ''/mge;
	return $c;
}

# writes CONF, runs "nginx -t", and checks that it fails with exactly one [emerg] line:
# MESSAGE in FILE:LINE, where LINE is the line of the (first, or "nth") line containing AT
# in the expanded file

sub conf_fails {
	my ($t, $name, $conf, $at, $msg, %opts) = @_;
	my $file = sprintf('bad-%02d.conf', ++$n);

	$t->write_file_expand($file, $conf);

	my @lines = split /\n/, $t->read_file($file);
	my @at = grep { index($lines[$_ - 1], $at) >= 0 } 1 .. @lines;
	my $line = $at[($opts{nth} || 1) - 1] // '?';

	my ($rc, $out) = nginx_t($t, $file);
	my @emerg = $out =~ /^(nginx: \[emerg\] .*)$/mg;
	my $path = $t->testdir() . "/$file";

	local $Test::Builder::Level = $Test::Builder::Level + 1;
	is(join("\n", @emerg) . ($rc ? '' : ' (nginx -t succeeded)'),
		"nginx: [emerg] $msg in $path:$line", $name)
		or diag($out);
}

# writes CONF, runs "nginx -t", and checks that it passes with no [emerg], [alert], [crit],
# [error] or [warn] line

sub conf_passes {
	my ($t, $name, $conf) = @_;
	my $file = sprintf('good-%02d.conf', ++$n);

	$t->write_file_expand($file, $conf);
	my ($rc, $out) = nginx_t($t, $file);

	local $Test::Builder::Level = $Test::Builder::Level + 1;
	ok($rc == 0 && $out =~ /syntax is ok/ && $out =~ /test is successful/
		&& $out !~ /\[(?:emerg|alert|crit|error|warn)\]/, $name)
		or diag($out);
}

###############################################################################

1;
