package CB::Response;

# Small readers for the raw responses that Test::Nginx's http() returns: the status code,
# one header (from the head only), the body, and the body decoded as JSON. Shared by the
# t/*.t files.

use warnings;
use strict;

use Exporter qw/ import /;
our @EXPORT_OK = qw/ status header body json /;

use JSON::PP qw//;

# The status code, or 0 when there is no response (connection closed, timeout).
sub status {
	my ($r) = @_;
	return defined $r && $r =~ m!^HTTP/1\.[01] (\d{3})! ? $1 : 0;
}

# The first value of header $name in the response head, or undef.
sub header {
	my ($r, $name) = @_;
	return undef unless defined $r;
	my ($head) = split /\x0d?\x0a\x0d?\x0a/, $r, 2;
	return $head =~ /^\Q$name\E:[ \t]*(.*?)\x0d?$/mi ? $1 : undef;
}

# The body, or undef without one.
sub body {
	my ($r) = @_;
	return defined $r && $r =~ /\x0d?\x0a\x0d?\x0a(.*)\z/s ? $1 : undef;
}

# The body decoded as JSON, or undef without a body or when it is not JSON.
sub json {
	my ($r) = @_;
	my $b = body($r);
	return undef unless defined $b && length $b;
	return eval { JSON::PP->new->decode($b) };
}

1;
