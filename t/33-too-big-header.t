#!/usr/bin/perl

# A response header too big for nginx's buffer is nginx's configuration, not the origin's
# failure: a client that makes a healthy origin echo a long path into a header ("upstream
# sent too big header", 502) cannot open the breaker; each such answer is logged, at warn,
# as not counted.  The default configuration; the same origin failing for real still opens
# within min_requests.  In a pool of two, such answers do not mark the servers failed for
# nginx's own max_fails either: else one per server would leave "no live upstreams", which
# the breaker counts.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start log_count /;
use CB::Origin;
use CB::Response qw/ status header /;
use CB::Status qw/ breaker_at /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(11);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    upstream h {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker;
    }

    upstream p {
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
        circuit_breaker min_requests=4;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location / { proxy_pass http://h; }
        location /p/ { proxy_pass http://p; }
        location = /status { circuit_breaker_status; }
    }
EOF

my ($hits) = start($t, 8081, 8082);

###############################################################################

sub state_of { breaker_at('/status?upstream=h')->{state} // 'none' }

# the origin echoes 6000 bytes of the client's into Location: more than proxy_buffer_size

my $long = 'a' x 6000;
my @echo = map { status(http_get("/r$_?hdr=Location:/$long")) } 1 .. 30;
is(join(' ', @echo), join(' ', (502) x 30), '30 answers too big for the buffer: 502');
is(CB::Origin::hits($hits, qr!^/r\d+!), 30, 'each reached the origin');
is(state_of(), 'closed', 'the client cannot open the breaker');
is(breaker_at('/status?upstream=h')->{totals}{failures}, 0, 'no failure counted');
is(status(http_get('/ok')), 200, 'other clients are served');
ok(log_count($t, qr/circuit breaker "h\/default": upstream sent too big header, not counted/) >= 30,
	'each said in the error log');

# a pool of two with nginx's default max_fails=1: one echo on each server (round robin),
# then ordinary requests

my @pool = map { status(http_get("/p/e$_?hdr=Location:/$long")) } 1 .. 2;
is(join(' ', @pool), '502 502', 'pool: an answer too big for the buffer from each server');
my @pool_ok = map { status(http_get("/p/ok$_")) } 1 .. 6;
is(join(' ', @pool_ok), join(' ', (200) x 6), 'pool: both servers still take requests');
is(breaker_at('/status?upstream=p')->{state}, 'closed', 'pool: the breaker stays closed');

# the origin failing for real: open once the window holds the default min_requests (20:
# the one success above, then 19 failures), not one later

my @fail = map { status(http_get("/f$_?status=500")) } 1 .. 21;
is(join(' ', @fail[18 .. 20]), '500 503 503', 'opens on the 20th request');
is(CB::Origin::hits($hits, qr!^/f\d+!), 19, 'the origin saw 19 failures');

###############################################################################
