#!/usr/bin/perl

# circuit_breaker_key behind grpc_pass through a variable (no upstream block), with a real
# grpcio backend (t/lib/CB/grpc_peer.py): each method's key is judged by its calls'
# grpc-status, from the headers of a trailers-only answer and from the trailers of one whose
# status comes at the end. UNAVAILABLE and DEADLINE_EXCEEDED open the key (not a
# DEADLINE_EXCEEDED that a stream's client's own deadline brings); NOT_FOUND never does; while open a grpcio client gets UNAVAILABLE with a grpc-message, the wait as
# grpc-retry-pushback-ms and X-Circuit-State, and the origin sees none of those calls.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf /;
use CB::GrpcPeer qw/ grpc_peer grpc_calls /;
use CB::Origin;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my ($python, $peer) = grpc_peer();

my $t = Test::Nginx->new()->has(qw/http http_v2 grpc/)->plan(15);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    server {
        listen       127.0.0.1:8084;
        http2        on;
        server_name  localhost;

        location /test.Echo/ {
            set $backend 127.0.0.1:%%PORT_8081%%;
            circuit_breaker_key $uri min_requests=4 failure_rate=50% open=30s jitter=0%;
            grpc_pass grpc://$backend;
        }
    }
EOF

my $hits = $t->testdir() . '/grpc-8081.hits';
$t->write_file('grpc-8081.hits.mode', <<'EOF');
/test.Echo/Only14 14 only
/test.Echo/End4 4 end
/test.Echo/NotFound 5 only
/test.Echo/DripOwn 4 end
EOF
$t->run_daemon($python, $peer, 'serve', port(8081), $hits);
$t->run();
$t->waitforsocket('127.0.0.1:' . port(8081)) or die "no grpc backend\n";

###############################################################################

# N calls of METHOD through nginx, as a grpcio client sees them
sub calls { grpc_calls(port(8084), @_) }

sub codes { join ' ', map { $_->{code} } @_ }
sub hits { CB::Origin::hits($hits, qr!^/test\.Echo/$_[0]$!) }

# NOT_FOUND is the application's answer: six never open the key.

is(codes(calls('NotFound', 6)), '5 5 5 5 5 5', 'NOT_FOUND: the origin answers each call');
is(hits('NotFound'), 6, 'NOT_FOUND: all six reached the origin');

# UNAVAILABLE (trailers-only) and DEADLINE_EXCEEDED (in trailers) open their own keys.

for my $c ([ 'Only14', 14 ], [ 'End4', 4 ]) {
	my ($m, $code) = @$c;
	is(codes(calls($m, 4)), "$code $code $code $code", "$m: the origin's code");
	my @open = calls($m, 3);
	is(codes(@open), '14 14 14', "$m: UNAVAILABLE while open");
	is($open[0]{message}, 'circuit breaker open', "$m: grpc-message");
	ok(($open[0]{pushback} // 0) =~ /^\d+$/ && $open[0]{pushback} > 25000,
		"$m: grpc-retry-pushback-ms of a 30 s cooldown") or diag($open[0]{pushback});
	is(hits($m), 4, "$m: no call reached the origin while open");
}

like($t->read_file('error.log'), qr/"\$uri" key "\/test\.Echo\/End4" opened/,
	'the key is named in the log');

# A stream that its client's own deadline (300 ms) ends, with DEADLINE_EXCEEDED in trailers
# 300 ms after its header: the client's doing, timed to the call's end, not to its header.
# The control: the origin's own DEADLINE_EXCEEDED after 300 ms, the client's deadline 10 s.

my $lev = "/usr/bin/python3 $FindBin::Bin/lib/CB/levers.py timeout " . port(8084);
system("$lev /test.Echo/DripClient 6 300m");
is(hits('DripClient'), 6, "a client's deadline on a stream: every call reached the origin");
system("$lev /test.Echo/DripOwn 6 10S");
is(hits('DripOwn'), 4, "the origin's own deadline on a stream: the key opened on its 4th");

###############################################################################
