#!/usr/bin/perl

# One word, one idea: CONTRIBUTING.md's Words section stays true of the code.  Each word
# that once carried several ideas has a comment under its entry, "<!-- words: WORD never:
# "spelling", ... -->", listing the spellings of the ideas it no longer names; none may
# appear in src/, core/, replay/, README.md, docs/ or t/.  A spelling matches from a word's
# start, across a comment's line breaks (a line's indentation and comment marker are one
# space), as written when it has a capital (a type's name) and whatever its case when it
# has none; every hit is named by file and line.  Each such word is
# defined once in the section.  No nginx is run and no Test::Nginx is loaded, so it runs
# alike under nginx-tests' own library.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use File::Find qw/ find /;

###############################################################################

my $root = "$FindBin::Bin/..";

sub slurp {
	my ($name) = @_;
	open my $fh, '<', $name or die "$name: $!\n";
	local $/;
	return scalar <$fh>;
}

my $contributing = slurp("$root/CONTRIBUTING.md");
my ($words) = $contributing =~ /^## Words\n(.*?)(?=^## |\z)/ms;
$words //= '';

my %never;
while ($words =~ /<!--\s*words:\s*(\S+)\s+never:\s*(.*?)\s*-->/gs) {
	my ($word, $list) = ($1, $2);
	push @{ $never{$word} }, $list =~ /"([^"]+)"/g;
}
my @words = sort keys %never;

# every text file that may hold a word: the sources, the docs, the tests

my @files = grep { -f } map { "$root/$_" } 'README.md';
find({
	no_chdir => 1,
	wanted => sub {
		if (-d && /\/(?:target|node_modules|\.git)$/) {
			$File::Find::prune = 1;
			return;
		}
		push @files, $_ if -f && -T;
	},
}, grep { -d } map { "$root/$_" } qw/ src core replay docs t /);
@files = sort @files;

# a file as one line of text, its lines' indentation and comment markers made one
# space, with where each line starts

sub flat {
	my ($name) = @_;
	my ($text, @starts) = ('');
	open my $fh, '<', $name or die "$name: $!\n";
	while (my $line = <$fh>) {
		chomp $line;
		$line =~ s{^\s*(?:///?!?|#(?=\s|$)|\*(?=\s|$)|--(?=\s))?\s*}{};
		push @starts, length $text;
		$text .= $line . ' ';
	}
	close $fh;
	return ($text, \@starts);
}

sub line_of {
	my ($starts, $at) = @_;
	my ($lo, $hi) = (0, $#$starts);
	while ($lo < $hi) {
		my $mid = int(($lo + $hi + 1) / 2);
		if ($starts->[$mid] <= $at) { $lo = $mid } else { $hi = $mid - 1 }
	}
	return $lo + 1;
}

# a spelling as a pattern: from a word's start, any space between words, any case
# unless it has a capital

sub pattern {
	my ($spelling) = @_;
	my $p = join '\s+', map { quotemeta } split /\s+/, $spelling;
	$p = '(?<![A-Za-z0-9_])' . $p if $spelling =~ /^\w/;
	return $spelling =~ /[A-Z]/ ? qr/$p/ : qr/$p/i;
}

my %hits;
for my $name (@files) {
	my ($text, $starts) = flat($name);
	(my $rel = $name) =~ s{^\Q$root\E/}{};
	for my $word (@words) {
		for my $spelling (@{ $never{$word} }) {
			my $p = pattern($spelling);
			while ($text =~ /$p/g) {
				push @{ $hits{$word} }, sprintf('%s:%d: "%s"', $rel,
					line_of($starts, $-[0]), $spelling);
			}
		}
	}
}

plan(tests => 2 + 2 * @words);

ok(@words >= 3, 'CONTRIBUTING.md names the words with ideas to keep apart: '
	. join(' ', @words));
ok(@files > 100, 'found the files to read (' . scalar(@files) . ')');

for my $word (@words) {
	my $defined = () = $words =~ /^- \*\Q$word\E\* —/mg;
	is($defined, 1, "*$word* is defined once in Words");

	my @h = @{ $hits{$word} || [] };
	ok(!@h, "*$word*: none of its " . @{ $never{$word} } . ' banned spellings ('
		. @h . ' found)')
		or diag(join "\n", @h);
}

###############################################################################
