#!/usr/bin/perl

# The probe is granted when the upstream connection is about to be made,
# after the request body is read: a slow upload while half-open holds no probe,
# and the next request becomes the probe.  The PRECONTENT phase only ever
# short-circuits.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use IO::Socket::INET;
use Time::HiRes qw/ sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Response qw/ status header /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(6);

$t->write_file_expand('nginx.conf', conf(2, <<'EOF'));
    upstream h {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=5s min_requests=3 failure_rate=50% open=1s
                        jitter=0% probes=1 probe_interval=100ms;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /h/ { proxy_pass http://h; }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

is(join(' ', map { status(http_get('/h/x?status=500')) } 1 .. 4),
	'500 500 500 503', 'trips');

sleep 1.2;

# a POST whose body trickles in: headers and the first byte, then a pause

my $s = IO::Socket::INET->new('127.0.0.1:' . port(8080))
	or die "connect: $!\n";
$s->autoflush(1);
print $s "POST /h/upload HTTP/1.0\r\nHost: localhost\r\n"
	. "Content-Length: 10\r\n\r\nx";
sleep 0.5;

# meanwhile: the next request is the probe, and it closes the breaker

my $r = http_get('/h/x?probe=1');
is(status($r), '200', 'a request during the slow upload is let through')
	or diag($r);
is(CB::Origin::hits($hits, qr/probe=1/), 1, 'it reached the origin');
is(header(http_get('/h/x?after=1'), 'X-Origin') ? 'origin' : 'none', 'origin',
	'the breaker closed on it');

# the upload completes and goes to the (now closed) origin

for (1 .. 9) {
	print $s 'x';
	sleep 0.05;
}
local $/;
my $up = <$s> // '';
is(status($up), '200', 'the slow upload is served');
like($up, qr/^X-Origin-Body-Length: 10\x0d?$/m, 'with its whole body');
close $s;

###############################################################################
