#!/usr/bin/perl

# gRPC request streams that trickle (nginx never buffers a gRPC request body) hold no slot
# of the adaptive limit and never the half-open probe: a request that may take either has
# its whole body read first.  Eight client streams sending a message every 0.3 s for 3 to
# 5 s beside a limit of four: every unary call is served meanwhile, the streams are served when
# they end, and the limit does not fall.  While half-open, a trickling stream does not keep
# the breaker from closing on the next call; to an upstream named by a variable (where every
# call's body is still arriving when nginx connects), a call takes the probe once it has
# waited one probe_interval.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ sleep time /;

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

my $t = Test::Nginx->new()->has(qw/http http_v2 grpc/)->plan(11);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    upstream lim {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker limit=adaptive limit_min=2 limit_max=4 limit_initial=4;
    }

    upstream half {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=30s min_requests=3 failure_rate=50% open=1s jitter=0%
                        probes=1;
    }

    upstream vhalf {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=30s min_requests=3 failure_rate=50% open=1s jitter=0%
                        probes=1;
    }

    server {
        listen       127.0.0.1:8084;
        http2        on;
        server_name  localhost;

        client_body_timeout 30s;

        location /test.Echo/Lim { grpc_pass grpc://lim; }
        location /test.Echo/StreamLim { grpc_pass grpc://lim; }
        location /test.Echo/Half { grpc_pass grpc://half; }
        location /test.Echo/StreamHalf { grpc_pass grpc://half; }
        location /test.Echo/Var { set $up vhalf; grpc_pass grpc://$up; }
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location = /status { circuit_breaker_status; }
    }
EOF

my $hits = $t->testdir() . '/grpc-8081.hits';
$t->write_file('grpc-8081.hits.mode', "/test.Echo/HalfFail 14 only\n/test.Echo/VarFail 14 only\n");

$t->run_daemon($python, $peer, 'serve', port(8081), $hits);
$t->run();
$t->waitforsocket('127.0.0.1:' . port(8081)) or die "no grpc backend\n";

###############################################################################

sub codes {
	my ($method, $n) = @_;
	my @out = `$python $peer call @{[ port(8084) ]} $n test.Echo/$method`;
	return map { /^(\d+) / ? $1 : -1 } @out;
}

# N trickling streams in the background: a pipe to read their codes from when they end

sub streams {
	my ($method, $n, $count) = @_;
	open my $fh, '-|', $python, $peer, 'streams', port(8084), $n, $count, 300,
		"test.Echo/$method" or die "streams: $!\n";
	return $fh;
}

# the limit: eight streams trickle for 3 to 5 s, and end one by one; unary calls meanwhile

my $fh = streams('StreamLim', 8, 11);
sleep 0.5;

my @served;
my $end = time() + 2;
while (time() < $end) {
	push @served, codes('Lim', 1);
	sleep 0.1;
}
is(scalar(grep { $_ ne '0' } @served), 0,
	'limit: every unary call served while 8 streams trickle') or diag("@served");
ok(@served >= 5, 'limit: calls were made meanwhile') or diag(scalar @served);

my @ends = <$fh>;
close $fh;
chomp @ends;
is(join(' ', @ends), join(' ', (0) x 8), 'limit: the streams are served when they end');
is(join(' ', map { CB::Origin::hits($hits, qr!^/test\.Echo/StreamLim $_$!) } 11 .. 18),
	'1 1 1 1 1 1 1 1', 'with their whole bodies');
is(breaker_at('/status?upstream=lim')->{limit}{limit}, 4, 'limit: not lowered');

# the probe: the breaker half-opens; a trickling stream does not hold its probe

is(join(' ', codes('HalfFail', 4)), '14 14 14 14', 'half: trips');
sleep 1.2;

$fh = streams('StreamHalf', 1, 11);
sleep 0.5;
is(join(' ', codes('Half', 1)), '0', 'half: the next unary call is the probe, served');
is(breaker_at('/status?upstream=half')->{state}, 'closed', 'half: closed on it');
my @rest = <$fh>;
close $fh;

# an upstream named by a variable: the PRECONTENT phase does not decide, and every gRPC
# call's body is still arriving when nginx connects (its DATA frames follow its HEADERS):
# once the probe has waited one probe_interval with no other taker, such a call takes it

is(join(' ', codes('VarFail', 4)), '14 14 14 14', 'variable: trips');
sleep 1.2;
my @var;
$end = time() + 6;
while (time() < $end) {
	push @var, codes('Var', 1);
	last if $var[-1] eq '0';
	sleep 0.2;
}
is($var[-1], '0', 'variable: a call became the probe') or diag("@var");
is(breaker_at('/status?upstream=vhalf')->{state}, 'closed', 'variable: closed on it');

###############################################################################
