#!/usr/bin/perl

# Where an open breaker answers. A location that passes to a fixed upstream without a cache
# is answered in the PRECONTENT phase; a location whose upstream comes from a variable, or that
# caches, is answered from peer.init, after nginx had its chance to serve a fresh cache hit.
# Every path gives the same 503 (Retry-After, X-Circuit-State, error_page) and touches no
# origin.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT /;
use CB::Nginx qw/ conf start /;
use CB::Origin;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy cache rewrite/)->plan(19);

$t->write_file_expand('nginx.conf', conf(2, <<'EOF'));
    proxy_cache_path %%TESTDIR%%/cache keys_zone=c:1m;

    upstream up {
        server 127.0.0.1:8081;
        circuit_breaker window=10s min_requests=3 failure_rate=50% open=30s jitter=0%;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /fixed/ {
            proxy_pass http://up;
        }

        location /var/ {
            set $backend up;
            proxy_pass http://$backend;
        }

        location /sorry/ {
            set $backend up;
            proxy_pass http://$backend;
            error_page 503 /sorry.html;
        }

        location = /sorry.html {
            return 200 "sorry\n";
        }

        location /cached/ {
            proxy_pass http://up;
            proxy_cache c;
            proxy_cache_valid 200 1h;
            add_header X-Cache $upstream_cache_status always;
        }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

# A fresh cache entry (a success), then the upstream's own breaker opens on the second
# failure: 3 requests, 2 failed, 67 % >= 50 %.

like(http_get('/cached/page'), qr/X-Cache: MISS.*origin/s, 'cache primed');
http_get('/fixed/x?status=500') for 1 .. 3;
is(CB::Origin::hits($hits), 3, 'opened on the second failure');

my $r = http_get('/fixed/x');
like($r, qr!^HTTP/1.1 503!, 'fixed upstream: 503');
like($r, qr!Retry-After: \d+\x0d!, 'fixed upstream: Retry-After');
like($r, qr!X-Circuit-State: open\x0d!, 'fixed upstream: X-Circuit-State');

$r = http_get('/var/x');
like($r, qr!^HTTP/1.1 503!, 'upstream from a variable: 503');
like($r, qr!Retry-After: \d+\x0d!, 'upstream from a variable: Retry-After');
like($r, qr!X-Circuit-State: open\x0d!, 'upstream from a variable: X-Circuit-State');
is(() = $r =~ /X-Circuit-State/g, 1, 'upstream from a variable: header once');

$r = http_get('/sorry/x');
like($r, qr!^HTTP/1.1 503!, 'error_page: status kept');
like($r, qr!sorry!, 'error_page: body replaced');
like($r, qr!Retry-After: \d+\x0d!, 'error_page: Retry-After kept');

$r = http_get('/cached/page');
like($r, qr!^HTTP/1.1 200!, 'fresh cache hit served while open');
like($r, qr!X-Cache: HIT!, 'from the cache');

$r = http_get('/cached/other');
like($r, qr!^HTTP/1.1 503!, 'cached location, no entry: 503');
like($r, qr!X-Circuit-State: open\x0d!, 'cached location: X-Circuit-State');

# A POST with a body is answered without reading it upstream.
$r = http(<<EOF);
POST /fixed/x HTTP/1.0
Host: localhost
Content-Length: 5

hello
EOF
like($r, qr!^HTTP/1.1 503!, 'POST: 503');

is(CB::Origin::hits($hits), 3, 'no origin request while open');
unlike($t->read_file('error.log'), qr/\[error\]/, 'no error lines');

###############################################################################
