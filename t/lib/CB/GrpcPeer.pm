package CB::GrpcPeer;

# The gRPC backend and client the gRPC tests start (grpc_peer.py beside this file, on
# Debian's python3-grpcio): where they are, once grpcio is known to be there.

###############################################################################

use warnings;
use strict;

use Exporter qw/ import /;
our @EXPORT_OK = qw/ grpc_peer grpc_calls /;

use File::Basename qw/ dirname /;
use File::Spec;
use Test::More;

###############################################################################

# (python, grpc_peer.py); without grpcio the test is skipped, or bails out when
# TEST_NGINX_GRPC_REQUIRED is set (scripts/test sets it).

sub grpc_peer {
	my $python = '/usr/bin/python3';
	my $peer = File::Spec->rel2abs(dirname(__FILE__) . '/grpc_peer.py');

	if (system("$python -c 'import grpc' 2>/dev/null")) {
		plan(skip_all => 'no gRPC for Python (Debian package "python3-grpcio")')
			unless $ENV{TEST_NGINX_GRPC_REQUIRED};
		BAIL_OUT('no gRPC for Python (Debian package "python3-grpcio"), '
			. 'and TEST_NGINX_GRPC_REQUIRED is set');
	}

	return ($python, $peer);
}

# N calls of METHOD (after "test.Echo/") through nginx on PORT, as a grpcio client sees them:
# a list of { code, pushback, state, message }

sub grpc_calls {
	my ($port, $method, $n) = @_;
	my $python = '/usr/bin/python3';
	my $peer = File::Spec->rel2abs(dirname(__FILE__) . '/grpc_peer.py');
	my @out = `$python $peer call $port $n test.Echo/$method`;
	return map {
		/^(\d+) pushback=(\S+) state=(\S+) message=(.*)$/
			? { code => $1, pushback => $2, state => $3, message => $4 }
			: { code => -1, message => $_ }
	} @out;
}

###############################################################################

1;
