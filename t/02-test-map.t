#!/usr/bin/perl

# The map of the tests, t/README.md, stays true of t/: every t/*.t has its line there, once;
# every file it names exists, and so does every file its links point to (the counterparts in
# core/tests/, core/src/ and replay/); every core/tests/*.rs has its place in it; no two
# t/*.t share a number, and each number lies in a band the map lists.  No nginx is run and
# no Test::Nginx is loaded, so it runs alike under nginx-tests' own library.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use File::Basename qw/ basename /;

###############################################################################

my $t = $FindBin::Bin;
my $root = "$t/..";

open my $fh, '<', "$t/README.md" or die "t/README.md: $!\n";
my @lines = <$fh>;
close $fh;
my $map = join '', @lines;

my @files = sort map { basename($_) } glob("$t/*.t");
my @core = sort map { "core/tests/" . basename($_) } glob("$root/core/tests/*.rs");

# a test file's name, not part of a longer one (t/ may precede it)
my $name = qr/(?<![\w.-])(\d\d-[\w-]+\.t)\b/;

plan(tests => 8);

ok(@files > 50, 'found the test files (' . scalar(@files) . ')');

# once each: the number of lines naming a file, whatever links repeat it on its line

my %lines;
for my $line (@lines) {
	my %on = map { $_ => 1 } $line =~ /$name/g;
	$lines{$_}++ for keys %on;
}
is(join(' ', map { "$_ (" . ($lines{$_} // 0) . ' lines)' }
		grep { ($lines{$_} // 0) != 1 } @files),
	'', 'every t/*.t is on one line of t/README.md');

my %exists = map { $_ => 1 } @files;
is(join(' ', sort grep { !$exists{$_} } keys %lines), '',
	'every file t/README.md names exists');

# every link resolves (the counterparts, written as links from t/), and every
# core/ or replay/ path written out is a file

my @links = $map =~ /\]\(([^)#\s]+)(?:#[^)]*)?\)/g;
is(join(' ', grep { !/^[a-z]+:/ && !-e "$t/$_" } @links), '',
	'every link of t/README.md resolves');

my @paths = $map =~ m{(?<![\w/.-])((?:core|replay)/[\w/.-]+\.rs)\b}g;
is(join(' ', grep { !-f "$root/$_" } @paths), '',
	'every counterpart t/README.md names exists');

my %named = map { $_ => 1 } @paths;
is(join(' ', grep { !$named{$_} } @core), '',
	'every core/tests/*.rs has its place in t/README.md');

# numbers: unique, and each in a band ("- `20`–`29` ...")

my %by;
push @{ $by{ substr($_, 0, 2) } }, $_ for @files;
is(join('; ', map { join ' ', @{ $by{$_} } } grep { @{ $by{$_} } > 1 } sort keys %by),
	'', 'no two t/*.t share a number');

# the file is read as bytes: whatever stands between a band's two numbers (an en dash)
my @bands;
push @bands, [$1, $2] while $map =~ /^- `(\d\d)`[^`\s]+`(\d\d)`/mg;
my @outside = grep {
	my $n = $_;
	!grep { $n >= $_->[0] && $n <= $_->[1] } @bands;
} sort keys %by;
is(join(' ', map { @{ $by{$_} } } @outside), '',
	'every number lies in a band of t/README.md (' . @bands . ' bands)');

###############################################################################
