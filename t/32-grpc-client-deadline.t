#!/usr/bin/perl

# A gRPC deadline the client sets is the client's: nginx passes the client's own
# grpc-timeout to the origin, and an origin that answers DEADLINE_EXCEEDED once that deadline
# has run out did what it was asked.  With the default configuration, calls sent with
# "grpc-timeout: 1n" (the attacker's: a healthy grpcio origin answers each at once with
# DEADLINE_EXCEEDED) never open the breaker, however many; the same origin answering
# DEADLINE_EXCEEDED on its own (long before the client's deadline: a deadline of its own)
# still opens it within the default ten gateway failures in a row.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf /;
use CB::GrpcPeer qw/ grpc_peer /;
use CB::Origin;
use CB::Status qw/ breaker_at /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my ($python, $peer) = grpc_peer();

my $t = Test::Nginx->new()->has(qw/http http_v2 grpc/)->plan(9);

# the breaker with every default; 8085 is the attacker's client: the same calls, with the
# client's grpc-timeout replaced by 1n on their way to 8084

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    log_format calls '$uri $upstream_status $upstream_trailer_grpc_status';

    upstream g {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker;
    }

    server {
        listen       127.0.0.1:8084;
        http2        on;
        server_name  localhost;

        access_log   %%TESTDIR%%/calls.log calls;

        location /test.Echo/ { grpc_pass grpc://g; }
    }

    server {
        listen       127.0.0.1:8085;
        http2        on;
        server_name  localhost;

        location / {
            grpc_pass grpc://127.0.0.1:%%PORT_8084%%;
            grpc_set_header grpc-timeout 1n;
        }
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location = /status { circuit_breaker_status; }
    }
EOF

my $hits = $t->testdir() . '/grpc-8081.hits';
$t->write_file('grpc-8081.hits.mode', "/test.Echo/Fail4 4 end\n/test.Echo/Slow 0 sleep100\n");

$t->run_daemon($python, $peer, 'serve', port(8081), $hits);
$t->run();
$t->waitforsocket('127.0.0.1:' . port(8081)) or die "no grpc backend\n";

###############################################################################

sub codes {
	my ($port, $method, $n) = @_;
	my @out = `$python $peer call @{[ port($port) ]} $n test.Echo/$method`;
	return join ' ', map { /^(\d+) / ? $1 : -1 } @out;
}

sub state_of { breaker_at('/status?upstream=g')->{state} // 'none' }

sub count { CB::Origin::hits($hits, qr!^/test\.Echo/$_[0]$!) }

# thirty calls with a deadline of one nanosecond, to a method that takes 100 ms: each one
# the origin's DEADLINE_EXCEEDED

is(codes(8085, 'Slow', 30), join(' ', (4) x 30), 'the client\'s 1-ns deadline, 30 times');
my $log = $t->read_file('calls.log');
is(scalar(() = $log =~ m!^/test\.Echo/Slow 200 !mg), 30, 'each answered by the origin');
is(state_of(), 'closed', 'the client cannot open the breaker');
is(breaker_at('/status?upstream=g')->{totals}{failures}, 0, 'no failure counted');
is(codes(8084, 'Unary', 3), '0 0 0', 'other callers are served');

# the origin's own DEADLINE_EXCEEDED (at once, long before the client's 5-s deadline)

is(codes(8084, 'Fail4', 10), join(' ', (4) x 10), 'the origin\'s own deadline, 10 times');
is(state_of(), 'open', 'opens within the default ten gateway failures in a row');

my @open = `$python $peer call @{[ port(8084) ]} 2 test.Echo/Fail4`;
like($open[0] // '', qr/^14 .*message=circuit breaker open$/, 'UNAVAILABLE while open');
is(count('Fail4'), 10, 'no call reached the origin while open');

###############################################################################
