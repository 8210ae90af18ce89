#!/usr/bin/perl

# Classification as nginx itself classifies (ngx_http_upstream_next and the
# body readers of ngx_http_upstream.c):
#  - a reset during the TLS handshake (a dead backend behind an L4 balancer)
#    is the origin's "error", not a TLS error;
#  - a kept-alive connection the origin had closed is retried by nginx for
#    free and counts for nothing;
#  - a failure after a good header (reset, close or timeout mid-body) is an
#    error or a timeout, buffered or not;
#  - a partial header followed by EOF is "error" ("upstream prematurely
#    closed connection"), not invalid_header;
#  - nginx's own 502 for an invalid upstream response (memcached
#    SERVER_ERROR) is invalid_header, which the default classes count.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use IO::Socket::INET;
use Socket qw/ SOL_SOCKET SO_LINGER /;
use Time::HiRes qw/ sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Status qw/ breaker_at /;
use CB::Response qw/ status /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy http_ssl memcached/)
	->plan(14);

# one worker: the kept-alive connection must be the one the next request
# meets

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    proxy_read_timeout 1s;

    # an origin that resets every connection at once
    upstream tlsreset {
        server 127.0.0.1:%%PORT_8083%%;
        circuit_breaker window=10s min_requests=3 failure_rate=50% open=30s;
    }

    upstream ka {
        server 127.0.0.1:%%PORT_8081%%;
        keepalive 4;
        circuit_breaker window=10s min_requests=1 failure_rate=1% open=30s;
    }

    upstream body {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=100 failure_rate=50%;
    }

    upstream partial {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=2 failure_rate=50% open=30s;
        circuit_breaker_failure error;
    }

    upstream mc {
        server 127.0.0.1:%%PORT_8084%%;
        circuit_breaker window=10s min_requests=2 failure_rate=50% open=30s;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /tls/ {
            proxy_pass https://tlsreset;
        }

        location /ka/ {
            proxy_pass http://ka;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }

        location /buffered/ {
            proxy_pass http://body;
        }

        location /unbuffered/ {
            proxy_pass http://body;
            proxy_buffering off;
        }

        location /partial/ {
            proxy_pass http://partial;
        }

        location /mc/ {
            set $memcached_key $uri;
            memcached_pass mc;
        }

        location = /status { circuit_breaker_status; }
    }
EOF

$t->run_daemon(\&CB::Origin::run, port(8083), \&reset_on_accept);
$t->run_daemon(\&CB::Origin::run, port(8084), \&memcached_error);
my $hits = start($t, 8081);
$t->waitforsocket('127.0.0.1:' . port(8083)) or die "no reset daemon\n";
$t->waitforsocket('127.0.0.1:' . port(8084)) or die "no memcached daemon\n";

###############################################################################

sub breaker { breaker_at('/status', upstream => $_[0], route => 'default') }

sub codes {
	my ($path, $n) = @_;
	return join ' ', map { status(http_get($path)) } 1 .. $n;
}

# TLS to a backend that resets in the handshake: the origin's error

is(codes('/tls/x', 4), '502 502 502 503', 'reset in TLS handshake trips');
is(breaker('tlsreset')->{totals}{tls_errors}, 0, '... and is no TLS error');

# a kept-alive connection the origin closed: retried for free, not counted

is(codes('/ka/a?drop_next=1', 1), '200', 'keepalive: first response');
is(codes('/ka/b', 1), '200', 'keepalive: the dead connection is retried');
my $b = breaker('ka');
is($b->{totals}{failures}, 0, 'keepalive: nothing counted as a failure');
is($b->{state}, 'closed', 'keepalive: still closed');

# failures after a good header

http_get('/buffered/x?size=100&truncate=10&then=close');
http_get('/buffered/x?size=100&truncate=10&then=reset');
http_get('/unbuffered/x?size=100&truncate=10&then=close');
http_get('/unbuffered/x?size=100&truncate=10&then=hang');
http_get('/buffered/x?size=100&truncate=10&then=hang');
http_get('/buffered/x?size=100');
$b = breaker('body');
is($b->{window}{requests}, 6, 'mid-body: every attempt recorded');
is($b->{window}{failures}, 5, 'mid-body: failures after a good header count');
is($b->{totals}{failures}, 5, 'mid-body: in the totals too');

# partial header then EOF: "error", which is the only class named here

is(codes('/partial/x?partial=1', 3), '502 502 503',
	'partial header then EOF is "error"');

# memcached SERVER_ERROR: nginx's 502 for an invalid response

is(codes('/mc/x', 3), '502 502 503', 'invalid_header counts by default');
is(breaker('mc')->{window}{failures}, 2, 'invalid_header: two failures');

my $log = $t->read_file('error.log');
like($log, qr/prematurely closed/, 'nginx saw the premature close');
unlike($log, qr/TLS failure with the upstream/,
	'no TLS error was logged for the resets');

###############################################################################

# peers no HTTP origin plays: one that resets every connection at once, and
# a memcached that answers SERVER_ERROR

sub reset_on_accept {
	my ($c) = @_;
	setsockopt($c, SOL_SOCKET, SO_LINGER, pack('ii', 1, 0));
	close $c;
}

sub memcached_error {
	my ($c) = @_;
	my $line = <$c>;
	print $c "SERVER_ERROR out of memory\r\n";
	close $c;
}

###############################################################################
