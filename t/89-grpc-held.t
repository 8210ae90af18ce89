#!/usr/bin/perl

# A gRPC answer that its client holds up is judged by its header, and the grpc-status its
# trailers then bring is not believed.  Behind grpc_pass nginx passes an answer on at the
# client's pace, so a client that keeps its stream windows at 0 holds the origin's answer up;
# an origin with a server-side deadline then ends it with DEADLINE_EXCEEDED or UNAVAILABLE in
# its trailers, which the client caused.  A real grpcio backend (t/lib/CB/grpc_peer.py)
# streams 8 MB back for each call and ends every call with UNAVAILABLE in trailers.  Default
# breakers (20 requests at 50 %, or 10 gateway failures in a row): 24 calls held 1.5 s, then
# read, leave the breaker closed with 24 successes; the control, 24 calls of the same origin
# whose answers end the same way but are small enough that no client holds them (a header,
# then UNAVAILABLE in trailers), read one at a time, opens the same kind of breaker on its
# 10th.  (Read as they come, 8 MB answers are no steady control: a client slowed by a busy
# machine holds some of them up too.)  About 10 s.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf /;
use CB::GrpcPeer qw/ grpc_peer /;
use CB::Status qw/ breaker_at /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my ($python, $peer) = grpc_peer();

my $t = Test::Nginx->new()->has(qw/http http_v2 grpc/)->plan(6);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    upstream held { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream read { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }

    server {
        listen       127.0.0.1:8080;
        http2        on;
        server_name  localhost;

        location /test.Echo/BigHeld { grpc_pass grpc://held; }
        location /test.Echo/Read { grpc_pass grpc://read; }

        location = /status { circuit_breaker_status; }
    }
EOF

my $hits = $t->testdir() . '/grpc-8081.hits';
$t->write_file('grpc-8081.hits.mode', "/test.Echo/Big 14 end\n/test.Echo/Read 14 end\n");
$t->write_file('grpc-8081.hits', '');
# as many calls at once as the test holds up
$ENV{GRPC_PEER_WORKERS} = 32;
$t->run_daemon($python, $peer, 'serve', port(8081), $hits);
$t->run();
$t->waitforsocket('127.0.0.1:' . port(8081)) or die "no grpc backend\n";

###############################################################################

# the breaker's state, failures and requests
sub summary {
	my $b = breaker_at("/status?upstream=$_[0]");
	return join ' ', $b->{state} // 'none', $b->{totals}{failures} // -1,
		$b->{totals}{requests} // -1;
}

# calls of the origin's whose path starts with PREFIX
sub seen {
	my ($prefix) = @_;
	open my $fh, '<', $hits or die "$hits: $!\n";
	return scalar grep { index($_, $prefix) == 0 } <$fh>;
}

my $lev = "/usr/bin/python3 $FindBin::Bin/lib/CB/levers.py";

# Held: every stream window 0 until the origin has begun every call, then 1.5 s more, then
# opened; each call's UNAVAILABLE comes after

my $held = `$lev grpc_held ${\ port(8080)} /test.Echo/BigHeld 24 1.5 $hits`;
chomp $held;
like($held, qr/^ended 24 of 24, 201334272 bytes/, "held: every call read to its end ($held)");
is(seen('/test.Echo/BigHeld'), 24, 'held: each reached the origin');
is(summary('held'), 'closed 0 24', "held: judged by their header, a success ($held)");

# The control: small answers that end the same way, read one at a time

my $read = `$lev grpc_held ${\ port(8080)} /test.Echo/Read 24 0`;
chomp $read;
like($read, qr/^ended 24 of 24/, "read: every call ended ($read)");
is(seen('/test.Echo/Read'), 10, 'read: the breaker let through 10');
is(summary('read'), 'open 10 10', "read: UNAVAILABLE in trailers opens it, 10 in a row ($read)");

###############################################################################
