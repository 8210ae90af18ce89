package CB::Release;

# The release's version as the source tree states it (Cargo.toml's [workspace.package]), for
# the files that compare it with what the changelogs, the Debian package and the running
# module say; and the version an nginx binary reports.

use warnings;
use strict;

use Exporter qw/ import /;
use File::Basename qw/ dirname /;
use File::Spec;

our @EXPORT_OK = qw/ root version nginx_version /;

# The source tree: this file is t/lib/CB/Release.pm.
sub root {
	return File::Spec->rel2abs(dirname(__FILE__) . '/../../..');
}

sub version {
	open my $fh, '<', root() . '/Cargo.toml' or die "Cargo.toml: $!\n";
	my $section = '';
	while (<$fh>) {
		$section = $1 if /^\[([^\]]+)\]/;
		return $1 if $section eq 'workspace.package' && /^version = "([^"]+)"/;
	}
	die "no version in Cargo.toml's [workspace.package]\n";
}

sub nginx_version {
	my ($bin) = @_;
	return `$bin -v 2>&1` =~ m!nginx/(\d[\d.]*)! ? $1 : undef;
}

1;
