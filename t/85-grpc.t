#!/usr/bin/perl

# gRPC upstreams behind grpc_pass, with a real grpcio backend (t/lib/CB/grpc_peer.py):
# calls are judged by their grpc-status, from the headers of a trailers-only answer and from
# the trailers of one whose status comes at the end (the access log shows which it was).
# UNAVAILABLE and DEADLINE_EXCEEDED open the breaker with the default classes, and eject a
# server of a pool; NOT_FOUND, INVALID_ARGUMENT and CANCELLED never do. While open, a grpcio
# client gets UNAVAILABLE, a grpc-message naming the state, the wait as
# grpc-retry-pushback-ms and X-Circuit-State, and the origin sees none of those calls.
# RESOURCE_EXHAUSTED lowers an adaptive limit at once and counts as no failure; a call the
# limit sheds gets RESOURCE_EXHAUSTED with a pushback of 1 s.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use POSIX qw//;
use Time::HiRes qw/ sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf /;
use CB::GrpcPeer qw/ grpc_peer grpc_calls /;
use CB::Origin;
use CB::Status qw/ breaker_at /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my ($python, $peer) = grpc_peer();

my $t = Test::Nginx->new()->has(qw/http http_v2 grpc upstream_zone/)->plan(49);

# breakers of their own, one per case, all on the backend of port 8081; the pools' second
# server (8082) always answers OK

my %cases = (
	only14 => 'Only14',	# UNAVAILABLE, trailers-only
	end4 => 'End4',		# DEADLINE_EXCEEDED, in trailers
	nf => 'NotFound',	# NOT_FOUND, trailers-only
	inv => 'Invalid',	# INVALID_ARGUMENT, in trailers
	can => 'Cancelled',	# CANCELLED, trailers-only
	parse => 'Parse',	# INTERNAL from grpcio: the call's message does not parse
);

my ($upstreams, $locations) = ('', '');
for my $u (sort keys %cases) {
	$upstreams .= <<"EOF";
    upstream $u {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=30s min_requests=4 failure_rate=50% open=30s jitter=0%;
    }
EOF
	$locations .= "        location /test.Echo/$cases{$u} { grpc_pass grpc://$u; }\n";
}
for my $u (qw/ pool poolnf /) {
	$upstreams .= <<"EOF";
    upstream $u {
        zone $u 64k;
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
        circuit_breaker min_requests=100 jitter=0%;
        circuit_breaker_eject min_requests=4 time=60s;
    }
EOF
}
# RESOURCE_EXHAUSTED: an overload signal for the adaptive limit, no failure
$upstreams .= <<"EOF";
    upstream exh {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=4 limit=adaptive limit_min=2 limit_max=64
                        limit_initial=32;
    }
EOF
$locations .= "        location /test.Echo/Exhausted { grpc_pass grpc://exh; }\n";

# a fixed limit of one: a second call while one is in flight is shed
$upstreams .= <<"EOF";
    upstream lim {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker limit=adaptive limit_min=1 limit_max=1 limit_initial=1;
    }
EOF
$locations .= "        location /test.Echo/Slow { grpc_pass grpc://lim; }\n";

# an upstream chosen at run time: the answer comes from peer.init
$locations .= "        location /test.Echo/Var { set \$up only14; grpc_pass grpc://\$up; }\n";
$locations .= "        location /test.Echo/Pool/ { grpc_pass grpc://pool; }\n";
$locations .= "        location /test.Echo/PoolNF/ { grpc_pass grpc://poolnf; }\n";

$t->write_file_expand('nginx.conf', conf(1, <<"EOF"));
    log_format grpc '\$uri \$status h=\$upstream_http_grpc_status '
                    't=\$upstream_trailer_grpc_status';

$upstreams
    server {
        listen       127.0.0.1:8084;
        http2        on;
        server_name  localhost;
        access_log   %%TESTDIR%%/grpc.log grpc;

$locations
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location = /status { circuit_breaker_status; }
    }
EOF

my $dir = $t->testdir();
my ($bad, $good) = ("$dir/grpc-8081.hits", "$dir/grpc-8082.hits");
$t->write_file('grpc-8081.hits.mode', <<'EOF');
/test.Echo/Only14 14 only
/test.Echo/End4 4 end
/test.Echo/NotFound 5 only
/test.Echo/Invalid 3 end
/test.Echo/Cancelled 1 only
/test.Echo/Exhausted 8 end
/test.Echo/Slow 0 sleep1500
/test.Echo/Pool/ 14 end
/test.Echo/PoolNF/ 5 end
EOF

$t->run_daemon($python, $peer, 'serve', port(8081), $bad);
$t->run_daemon($python, $peer, 'serve', port(8082), $good);
$t->run();
$t->waitforsocket('127.0.0.1:' . port($_)) or die "no grpc backend on $_\n"
	for 8081, 8082;

###############################################################################

# N calls of METHOD through nginx, as a grpcio client sees them
sub calls { grpc_calls(port(8084), @_) }

sub codes { join ' ', map { $_->{code} } @_ }

sub hits { CB::Origin::hits($_[0], qr!^/test\.Echo/$_[1]$!) }

sub state_of { breaker_at("/status?upstream=$_[0]")->{state} // 'none' }

# UNAVAILABLE (trailers-only) and DEADLINE_EXCEEDED (in trailers) open the breaker

for my $c ([ only14 => 'Only14', 14 ], [ end4 => 'End4', 4 ]) {
	my ($u, $m, $code) = @$c;

	is(codes(calls($m, 4)), "$code $code $code $code", "$u: the origin's code");
	is(state_of($u), 'open', "$u: open");

	my @open = calls($m, 3);
	is(codes(@open), '14 14 14', "$u: UNAVAILABLE while open");
	is($open[0]{message}, 'circuit breaker open', "$u: grpc-message");
	like($open[0]{pushback}, qr/^\d+$/, "$u: grpc-retry-pushback-ms");
	ok($open[0]{pushback} > 25000 && $open[0]{pushback} <= 30000,
		"$u: the wait of a 30 s cooldown") or diag($open[0]{pushback});
	is($open[0]{state}, 'open', "$u: X-Circuit-State");
	is(hits($bad, $m), 4, "$u: no call reached the origin while open");
}

my @var = calls('Var', 2);
is(codes(@var), '14 14', 'peer.init: UNAVAILABLE while open');
is(join(' ', map { $var[0]{$_} // '' } qw/ message state /), 'circuit breaker open open',
	'peer.init: grpc-message and X-Circuit-State');
ok(($var[0]{pushback} // 0) =~ /^\d+$/ && $var[0]{pushback} > 20000,
	'peer.init: grpc-retry-pushback-ms');
is(hits($bad, 'Var'), 0, 'peer.init: no call reached the origin');

my $log = $t->read_file('grpc.log');
like($log, qr!^/test\.Echo/Only14 200 h=14 t=-$!m,
	'trailers-only: grpc-status in the headers');
like($log, qr!^/test\.Echo/End4 200 h=- t=4$!m,
	'status at the end: grpc-status in the trailers');

# client-caused codes never count

for my $c ([ nf => 'NotFound', 5 ], [ inv => 'Invalid', 3 ], [ can => 'Cancelled', 1 ]) {
	my ($u, $m, $code) = @$c;

	is(codes(calls($m, 10)), join(' ', ($code) x 10), "$u: the origin's code");
	my $b = breaker_at("/status?upstream=$u");
	is($b->{state}, 'closed', "$u: closed");
	is($b->{totals}{failures}, 0, "$u: no failure");
	is(hits($bad, $m), 10, "$u: every call reached the origin");
}

# INTERNAL, which grpcio itself answers to a message it cannot parse (the client's "hi" is
# not a message of the method's type): a client's doing, no failure by default

is(codes(calls('Parse', 10)), join(' ', (13) x 10), 'parse: INTERNAL from the origin');
my $parse = breaker_at('/status?upstream=parse');
is($parse->{state}, 'closed', 'parse: closed');
is($parse->{totals}{failures}, 0, 'parse: no failure');

# RESOURCE_EXHAUSTED lowers the limit at once, and is no failure

is(codes(calls('Exhausted', 6)), '8 8 8 8 8 8', 'exh: the origin\'s code');
my $exh = breaker_at('/status?upstream=exh');
is($exh->{limit}{limit}, 2, 'exh: the limit fell at once');
is(join(' ', $exh->{state}, $exh->{totals}{failures}), 'closed 0',
	'exh: closed, no failure');

# limited: RESOURCE_EXHAUSTED, the state in grpc-message, a pushback of 1 s

my $slow = "$dir/slow.out";
my $pid = fork() // die "fork: $!\n";
if ($pid == 0) {
	exec("$python $peer call " . port(8084) . " 1 test.Echo/Slow > $slow 2>&1")
		or POSIX::_exit(1);
}
for (1 .. 50) {
	last if hits($bad, 'Slow') >= 1;
	sleep 0.05;
}
my @shed = calls('Slow', 1);
waitpid($pid, 0);
is(join(' ', map { $shed[0]{$_} // '' } qw/ code message pushback state /),
	'8 circuit breaker limited 1000 limited', 'limited: RESOURCE_EXHAUSTED and its pushback');
like($t->read_file('slow.out'), qr/^0 /, 'limited: the call in flight answered');
is(hits($bad, 'Slow'), 1, 'limited: the shed call never reached the origin');

# a pool: the server answering UNAVAILABLE (in trailers) is ejected, the other
# serves; one answering NOT_FOUND is not

my $pb = port(8081);

my @pool = calls('Pool/x', 8);
like($t->read_file('error.log'),
	qr/circuit breaker "pool" server 127\.0\.0\.1:$pb ejected: /,
	'pool: the UNAVAILABLE server ejected');
is(hits($bad, 'Pool/x'), 4, 'pool: ejected on its 4th failure');
is(codes(calls('Pool/x', 6)), '0 0 0 0 0 0', 'pool: then served by the other');
is(hits($bad, 'Pool/x'), 4, 'pool: no call to the ejected server');

calls('PoolNF/x', 20);
unlike($t->read_file('error.log'), qr/circuit breaker "poolnf" server .* ejected/,
	'poolnf: NOT_FOUND ejects no server');
is(hits($bad, 'PoolNF/x'), 10, 'poolnf: half the calls to that server');

###############################################################################
