#!/usr/bin/perl

# A client that reads slowly is not a slow origin, and holds nothing: where nginx passes the
# answer on as it arrives (proxy_buffering off, as gRPC always does), the origin's time ends
# at its response header, and what follows waits on the client; a slot of the adaptive
# limit goes back at that header, and the half-open probe's answer is read whole, at the
# origin's pace.  Twelve clients that ask for a 4 MB answer,
# read none of it for a second and hang up do not open a breaker with slow=500ms; an origin
# that takes 400 ms to answer still opens it within min_requests.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use IO::Socket::INET;
use Socket qw/ SOL_SOCKET SO_RCVBUF inet_aton pack_sockaddr_in /;
use Time::HiRes qw/ sleep time /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Response qw/ status header /;
use CB::Status qw/ breaker_at /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(10);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    upstream readers {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=10 slow=500ms slow_rate=50%;
    }

    upstream origin {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=10 slow=500ms slow_rate=50%;
    }

    upstream lim {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker limit=adaptive limit_min=2 limit_max=4 limit_initial=4;
    }

    upstream half {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=30s min_requests=3 failure_rate=50% open=1s jitter=0%
                        probes=1;
    }

    server {
        listen       127.0.0.1:8080 sndbuf=16k;
        server_name  localhost;

        proxy_buffering off;
        proxy_read_timeout 10s;
        send_timeout 10s;

        location /r/ { proxy_pass http://readers; }
        location /o/ { proxy_pass http://origin; }
        location /l/ { proxy_pass http://lim; }
        location /h/ { proxy_pass http://half; }
        location = /status { circuit_breaker_status; }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

sub breaker { breaker_at("/status?upstream=$_[0]") }

# twelve clients with a small receive buffer ask for 4 MB, read nothing for 1.5 s, and
# hang up

# a client that asks for URI with a small receive buffer and reads nothing

sub reader {
	my ($uri) = @_;
	my $s = IO::Socket::INET->new(Proto => 'tcp') or die "socket: $!\n";
	setsockopt($s, SOL_SOCKET, SO_RCVBUF, 4096) or die "SO_RCVBUF: $!\n";
	$s->connect(pack_sockaddr_in(port(8080), inet_aton('127.0.0.1')))
		or die "connect: $!\n";
	print $s "GET $uri HTTP/1.0\r\nHost: localhost\r\n\r\n";
	return $s;
}

my @s = map { reader("/r/big$_?size=4000000") } 1 .. 12;
sleep 1.5;
close $_ for @s;

# nginx frees each upstream when its next write to the client fails: wait until the breaker
# has heard of all twelve

my $end = time() + 10;
sleep 0.1 while (breaker('readers')->{totals}{requests} // 0) < 12 && time() < $end;

my $b = breaker('readers');
is($b->{totals}{requests}, 12, 'the twelve answers were judged');
is($b->{totals}{slow} // 0, 0, 'none of them slow');
is($b->{state}, "closed", "slow readers cannot open the breaker") or diag(explain($b));
is(status(http_get('/r/ok')), 200, 'other clients are served');

# slow readers hold no slot of the limit: six of them beside a limit of four, and requests
# meanwhile

@s = map { reader("/l/big$_?size=4000000") } 1 .. 6;
sleep 0.5;
my @st = map { sleep 0.1; status(http_get("/l/ok$_")) } 1 .. 10;
is(join(' ', @st), join(' ', (200) x 10), 'limit: no request shed beside six slow readers');
close $_ for @s;

# a slow reader that takes the half-open probe holds it no longer than the origin takes:
# the probe's answer is read whole, at the origin's pace

is(join(' ', map { status(http_get("/h/t$_?status=500")) } 1 .. 4), '500 500 500 503',
	'half: trips');
sleep 1.2;
my $probe = reader('/h/big?size=4000000');
sleep 1;
is(status(http_get('/h/ok')), 200, 'half: the probe closed the breaker, its reader still reading');
close $probe;

# an origin that takes 800 ms to answer: slow, whoever reads

my @slow = map { status(http_get("/o/s$_?delay=800")) } 1 .. 11;
is(join(' ', @slow), join(' ', (200) x 10) . ' 503', 'opens on the 10th slow answer');
is(CB::Origin::hits($hits, qr!^/o/s\d+!), 10, 'the origin saw ten of them');
like(breaker('origin')->{last_transition} // '', qr/^slow rate 100% \(10\/10\)/, 'by the slow rate');

###############################################################################
