#!/usr/bin/perl

# Overload signals steer the adaptive limit: a 429, or a 503 with Retry-After,
# lowers the limit at once (to half the requests in flight when the origin said
# so, at least limit_min), without counting as a breaker failure unless its
# class is named; a plain 503 is no such signal.  Before that, a fresh limit
# sheds nothing (it shows limit_max) until its first interval.  One request at a time, one
# worker: each limit is read on the status page after each answer.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Status qw/ breaker_at /;
use CB::Response qw/ status /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(13);

my $ups = '';
for my $u (qw/ s429 s503ra s503 named /) {
	my $named = $u eq 'named'
		? 'circuit_breaker_failure error timeout http_429;' : '';
	$ups .= <<"EOF";
    upstream $u {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=1000;
        circuit_breaker_limit adaptive min=2 max=64 initial=32;
        $named
    }
EOF
}

$t->write_file_expand('nginx.conf', conf(1, <<"EOF"));
$ups
    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location ~ ^/(\\w+)/ { proxy_pass http://\$1; }
        location = /status { circuit_breaker_status; }
    }
EOF

start($t, 8081);

###############################################################################

sub b { breaker_at("/status?upstream=$_[0]") }
sub limit_of { b($_[0])->{limit}{limit} // -1 }

for my $u (qw/ s429 s503ra s503 named /) {
	http_get("/$u/?status=200");
}
is(join(' ', map { limit_of($_) } qw/ s429 s503ra s503 named /), '64 64 64 64',
	'no limit (limit_max) before the first interval has shown the demand');

is(status(http_get('/s429/?status=429')), 429, '429 passed on');
is(limit_of('s429'), 2, '429: the limit at once at half the one in flight, limit_min');
is(b('s429')->{state}, 'closed', '429: closed');
is(b('s429')->{totals}{failures}, 0, '429: no failure');

is(status(http_get('/s503ra/?status=503&retry_after=1')), 503, '503 passed on');
is(limit_of('s503ra'), 2, '503 with Retry-After: the limit at once');
is(b('s503ra')->{totals}{failures}, 0, '503 with Retry-After: no failure');

http_get('/s503/?status=503');
is(limit_of('s503'), 64, 'a plain 503: no signal');
is(b('s503')->{totals}{failures}, 1, 'a plain 503: a failure');

http_get('/named/?status=429');
is(limit_of('named'), 2, 'named 429: the limit at once');
is(b('named')->{totals}{failures}, 1, 'named 429: a failure too');
is(b('named')->{state}, 'closed', 'named 429: closed below min_requests');

###############################################################################
