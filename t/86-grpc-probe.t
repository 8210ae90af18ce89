#!/usr/bin/perl

# gRPC health checking as the active probe (probe_grpc=SERVICE): while a breaker
# is open, grpc.health.v1.Health/Check goes to the backend over HTTP/2 (cleartext,
# or TLS from the first byte for grpc_pass grpcs://, verified as the location
# verifies); SERVING is a good probe and closes the breaker, NOT_SERVING and a
# grpc-status such as NOT_FOUND (a service the backend does not know) keep it
# open, and so do a server that does not speak HTTP/2 and an answer larger than
# a health answer can be (SERVING, padded to 4 KB: the probe reads 1 KB of it).
# The probe asks for the service named, and no user call reaches the backend
# while the breaker is open.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start self_signed log_count /;
use CB::GrpcPeer qw/ grpc_peer /;
use CB::Origin;
use CB::Status qw/ breaker_at wait_state /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my ($python, $peer) = grpc_peer();

my $t = Test::Nginx->new()->has(qw/http http_v2 grpc http_ssl/)
	->has_daemon('openssl')->plan(21);

# one breaker per case; 8081 is a cleartext gRPC backend, 8085 the same over
# TLS, 8086 one whose health answers are oversized, 8083 an HTTP/1.1 origin

my $cb = 'circuit_breaker window=30s min_requests=4 failure_rate=50% open=1s '
	. 'probes=2 probe_interval=200ms jitter=0%';

$t->write_file_expand('nginx.conf', conf(2, <<"EOF"));
    upstream server_health {
        server 127.0.0.1:%%PORT_8081%%;
        $cb probe_grpc=;
    }

    upstream service {
        server 127.0.0.1:%%PORT_8081%%;
        $cb probe_grpc=test.Echo probe_timeout=2s;
    }

    upstream unknown {
        server 127.0.0.1:%%PORT_8081%%;
        $cb probe_grpc=no.Such;
    }

    upstream http1 {
        server 127.0.0.1:%%PORT_8083%%;
        $cb probe_grpc=;
    }

    upstream oversized {
        server 127.0.0.1:%%PORT_8086%%;
        $cb probe_grpc=;
    }

    upstream tls {
        server 127.0.0.1:%%PORT_8085%%;
        $cb probe_grpc=test.Echo;
    }

    server {
        listen       127.0.0.1:8084;
        http2        on;
        server_name  localhost;

        location /test.Echo/Server { grpc_pass grpc://server_health; }
        location /test.Echo/Service { grpc_pass grpc://service; }
        location /test.Echo/Unknown { grpc_pass grpc://unknown; }
        location /test.Echo/Http1 { grpc_pass grpc://http1; }
        location /test.Echo/Oversized { grpc_pass grpc://oversized; }
        location /test.Echo/Tls {
            grpc_pass grpcs://tls;
            grpc_ssl_verify on;
            grpc_ssl_name localhost;
            grpc_ssl_trusted_certificate localhost.crt;
        }
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location = /status { circuit_breaker_status; }
    }
EOF

self_signed($t, 'localhost');

my $dir = $t->testdir();
my ($hits, $tls_hits) = ("$dir/grpc-8081.hits", "$dir/grpc-8085.hits");
my $sick = <<'EOF';
/test.Echo/ 14 only
/grpc.health.v1.Health/Check 14 only
EOF
$t->write_file('grpc-8081.hits.mode', $sick);
$t->write_file('grpc-8085.hits.mode', $sick);
$t->write_file('grpc-8086.hits.mode', <<'EOF');
/test.Echo/ 14 only
/grpc.health.v1.Health/Check 0 big
EOF

$t->run_daemon($python, $peer, 'serve', port(8081), $hits);
$t->run_daemon($python, $peer, 'serve', port(8085), $tls_hits,
	"$dir/localhost.crt", "$dir/localhost.key");
$t->run_daemon($python, $peer, 'serve', port(8086), "$dir/grpc-8086.hits");
start($t, 8083);
$t->waitforsocket('127.0.0.1:' . port($_)) or die "no gRPC backend on $_\n"
	for 8081, 8085, 8086;

###############################################################################

sub codes {
	my ($method, $n) = @_;
	my @out = `$python $peer call @{[ port(8084) ]} $n test.Echo/$method 2>/dev/null`;
	return join ' ', map { /^(\d+) / ? $1 : '?' } @out;
}

sub state_of { breaker_at("/status?upstream=$_[0]")->{state} // 'none' }

sub count {
	my ($file, $re) = @_;
	return CB::Origin::hits($file, $re);
}

my %method = (server_health => 'Server', service => 'Service',
	unknown => 'Unknown', http1 => 'Http1', tls => 'Tls',
	oversized => 'Oversized');

# four failing calls open each breaker

for my $u (sort keys %method) {
	codes($method{$u}, 4);
}
is(join(' ', map { state_of($_) } sort keys %method),
	'open open open open open open', 'every breaker opened');

# while the backend is NOT_SERVING, the probes keep the breakers open

my $health = qr!^/grpc\.health\.v1\.Health/Check !;
for (1 .. 100) {
	last if count($hits, qr!^/grpc\.health\.v1\.Health/Check no\.Such$!) >= 2
		&& count($tls_hits, $health) >= 2
		&& log_count($t, qr/"server_health\/default" probe to \S+ failed: NOT_SERVING/) >= 2;
	sleep 0.05;
}
cmp_ok(count($hits, qr!^/grpc\.health\.v1\.Health/Check -$!), '>=', 2,
	'probe_grpc=: the server\'s own health asked');
cmp_ok(count($hits, qr!^/grpc\.health\.v1\.Health/Check test\.Echo$!), '>=', 2,
	'probe_grpc=test.Echo: that service asked');
cmp_ok(log_count($t, qr/"server_health\/default" probe to \S+ failed: NOT_SERVING/),
	'>=', 2, 'NOT_SERVING fails a probe, said in the log');
cmp_ok(log_count($t, qr/"unknown\/default" probe to \S+ failed: grpc-status 5$/m),
	'>=', 1, 'an unknown service: NOT_FOUND fails a probe');
cmp_ok(count($tls_hits, qr!^/grpc\.health\.v1\.Health/Check test\.Echo$!), '>=', 2,
	'grpcs: the probe spoke TLS and HTTP/2 (ALPN h2) to the backend');
cmp_ok(log_count($t, qr/"http1\/default" probe to \S+ failed: (invalid response|prematurely closed)/),
	'>=', 1, 'an HTTP/1.1 server: no health answer, a failed probe');
is(join(' ', map { state_of($_) } sort keys %method),
	'open open open open open open', 'all still open while NOT_SERVING');

# no user call reached the backend while open: each method was called 4 times

is(count($hits, qr!^/test\.Echo/!), 12, 'no user call to the backend while open');
is(count($tls_hits, qr!^/test\.Echo/!), 4, 'no user call to the TLS backend while open');

# the backends heal: SERVING closes the breakers probing a known service

$t->write_file('grpc-8081.hits.mode', '');
$t->write_file('grpc-8085.hits.mode', '');

for my $u (qw/ server_health service tls /) {
	ok(wait_state("/status?upstream=$u", 'closed', 10), "$u: closed by SERVING");
}
like($t->read_file('error.log'),
	qr/circuit breaker "server_health\/default" closed: /,
	'the close is logged');
is(codes('Server', 3), '0 0 0', 'calls served after the close');
is(codes('Tls', 2), '0 0', 'grpcs: calls served after the close');

# an unknown service and an HTTP/1.1 server never close

sleep 1;
is(state_of('unknown'), 'open', 'unknown service: still open');
is(state_of('http1'), 'open', 'HTTP/1.1 server: still open');
is(state_of('oversized'), 'open', 'an oversized health answer: still open');
cmp_ok(count("$dir/grpc-8086.hits", $health), '>=', 2,
	'oversized: probed, its SERVING never taken');
cmp_ok(log_count($t, qr/"oversized\/default" probe to \S+ failed: invalid response$/m),
	'>=', 2, 'oversized: an invalid response, said in the log');

###############################################################################
