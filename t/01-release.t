#!/usr/bin/perl

# The release's version agrees everywhere it is written: every crate (Cargo.toml's
# [workspace.package], as cargo resolves it with Cargo.lock), CHANGELOG.md's latest release,
# and the Debian package's changelog, with the same date. The package's copyright file names
# every crate linked into the module. No nginx is run; the module's own report of its
# version is checked by t/70-status.t, t/71-prometheus.t and t/81-debian-package.t.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use JSON::PP qw//;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use CB::Release qw/ root version /;

###############################################################################

my $root = root();
my $version = version();

sub slurp {
	my ($name) = @_;
	open my $fh, '<', "$root/$name" or die "$name: $!\n";
	local $/;
	return scalar <$fh>;
}

my $cargo = (grep { -x } map { "$_/cargo" } split(/:/, $ENV{PATH} // ''),
	($ENV{CARGO_HOME} // "$ENV{HOME}/.cargo") . '/bin')[0];

plan(tests => 9);

like($version, qr/^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$/,
	"Cargo.toml: version $version");

# the crates, as cargo sees them (--locked: Cargo.lock must agree too)

SKIP: {
	skip 'no cargo', 2 unless $cargo;

	my $json = `cd $root && $cargo metadata --locked --offline --no-deps --format-version 1 2>&1`;
	my $meta = eval { JSON::PP->new->decode($json) };
	ok($meta, 'cargo metadata --locked') or diag($json);
	my %v = map { $_->{name} => $_->{version} } @{ $meta->{packages} || [] };
	is(join(' ', map { "$_=" . ($v{$_} // '-') } sort keys %v),
		"cb-replay=$version circuit-breaker-core=$version "
		. "circuit-breaker-shell=$version fleet-users=$version nats-keys=$version "
		. "ngx_http_circuit_breaker_module=$version "
		. "ngx_stream_circuit_breaker_module=$version",
		'every crate carries the version');
}

# CHANGELOG.md: Keep a Changelog, latest release first after [Unreleased]

my $changelog = slurp('CHANGELOG.md');
my @releases = $changelog =~ /^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$/mg;
is($releases[0], 'Unreleased', 'CHANGELOG.md: [Unreleased] first');
my ($release, $date) = @releases[2, 3];
is($release, $version, 'CHANGELOG.md: latest release is the crate version');

# the Debian package's changelog: its first entry is the same version, the same day

my $debian = slurp('packaging/debian/changelog');
my ($pkg, $deb_version) = $debian =~ /\A(\S+) \(([^)]+)\) \S+; urgency=\S+$/m;
is("$pkg $deb_version", "libnginx-mod-http-circuit-breaker $version",
	'packaging/debian/changelog: first entry is the crate version');

my %month;
@month{qw/ Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec /} = (1 .. 12);
my ($d, $m, $y) = $debian =~ /^ -- .+>  \w{3}, (\d{1,2}) (\w{3}) (\d{4}) /m;
my $deb_date = $y ? sprintf('%04d-%02d-%02d', $y, $month{$m} // 0, $d) : '';
is($deb_date, $date // 'no date', 'both changelogs date the release alike');

# the copyright file names each crate linked into either module (cargo tree's normal
# dependencies, not the build-time ones such as bindgen, nor procedural macros and theirs,
# which run in the compiler)

my $copyright = slurp('packaging/debian/copyright');
my ($header) = split /\n\n/, $copyright, 2;
my @named = sort $header =~ /^  ([A-Za-z0-9_-]+)  /mg;

SKIP: {
	skip 'no cargo', 2 unless $cargo;

	my $tree = `cd $root && $cargo tree --locked --offline -e normal,no-proc-macro --prefix none --format '{p}' -p ngx_http_circuit_breaker_module -p ngx_stream_circuit_breaker_module 2>&1`;
	is($?, 0, 'cargo tree') or diag($tree);
	my %linked = map { /^(\S+) v/ ? ($1 => 1) : () } split /\n/, $tree;
	delete @linked{qw/ ngx_http_circuit_breaker_module ngx_stream_circuit_breaker_module /};
	is("@named", join(' ', sort keys %linked),
		'copyright: the crates linked in');
}

###############################################################################
