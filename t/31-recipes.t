#!/usr/bin/perl

# The README's recipes, as written there: stale pages while open, a soft
# dependency that fails open to reviewed defaults, and a JSON 503 for API
# clients.  Each is opened by its origin's failures, then answers without
# touching the origin; an origin's own 503 is passed through untouched.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT http_content /;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Response qw/ status header /;
use JSON::PP qw//;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy cache/)->plan(22);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    proxy_cache_path %%TESTDIR%%/cache keys_zone=pages:1m;

    upstream pages {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=3 failure_rate=50% open=30s;
    }
    upstream flags {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=3 failure_rate=50% open=30s;
    }
    upstream api {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=3 failure_rate=50% open=30s;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        # stale pages while the breaker is open
        location /catalog/ {
            proxy_pass http://pages;
            proxy_cache pages;
            proxy_cache_valid 200 1s;
            proxy_cache_use_stale error timeout updating http_500 http_502 http_503 http_504;
        }

        # a soft dependency: fail open to reviewed defaults
        location /flags/ {
            proxy_pass http://flags;
            error_page 503 = @flags_defaults;
        }
        location @flags_defaults {
            default_type application/json;
            return 200 '{"new_checkout":false,"recommendations":true}\n';
        }

        # API clients get JSON, with the breaker's state and its Retry-After
        location /api/ {
            proxy_pass http://api;
            error_page 503 @api_unavailable;
        }
        location @api_unavailable {
            default_type application/json;
            return 503 '{"error":"unavailable","circuit":"$circuit_breaker_state","retry_after":"$sent_http_retry_after"}\n';
        }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

sub hits { CB::Origin::hits($hits, @_) }

sub trip {
	my ($prefix) = @_;
	return join ' ', map { status(http_get("$prefix/fail?status=500&n=$_")) } 1 .. 4;
}

# stale pages: a page cached, expired, then served stale while open

my $page = '/catalog/item?body=a+page';
my $r = http_get($page);
my $cached = time();
is(status($r) . ' ' . http_content($r), '200 a page', 'stale: cached');
# expired once the second after the one of the store has passed (nginx's
# validity counts whole seconds)
sleep(int($cached) + 2.05 - $cached);
is(trip('/catalog'), '500 500 503 503', 'stale: opened by the second failure (with the cached page, 2 of 3)');
my $before = hits(qr!^/catalog/!);
$r = http_get($page);
is(status($r) . ' ' . http_content($r), '200 a page', 'stale: the page served while open');
is(header($r, 'X-Circuit-State'), 'open', 'stale: marked open') or diag($r);
is(hits(qr!^/catalog/!), $before, 'stale: no origin request');

# fail open to defaults

$r = http_get('/flags/all?status=503');
is(status($r), 503, 'defaults: the origin\'s own 503 is passed through');
is(trip('/flags'), '500 500 200 200', 'defaults: opened by the second failure, answered by the defaults');
$before = hits(qr!^/flags/!);
$r = http_get('/flags/all');
is(status($r), 200, 'defaults: 200 while open');
like(header($r, 'Content-Type') // '', qr!^application/json!, 'defaults: JSON');
my $body = eval { JSON::PP::decode_json(http_content($r)) };
is_deeply($body, { new_checkout => JSON::PP::false, recommendations => JSON::PP::true },
	'defaults: the reviewed defaults');
is(hits(qr!^/flags/!), $before, 'defaults: no origin request');

# a JSON 503

$r = http_get('/api/x?status=503&body=origin+says+no');
is(status($r) . ' ' . http_content($r), '503 origin says no',
	'json: the origin\'s own 503 is passed through');
is(trip('/api'), '500 500 503 503', 'json: opened by the second failure');
$before = hits(qr!^/api/!);
$r = http_get('/api/orders');
is(status($r), 503, 'json: 503 while open');
like(header($r, 'Content-Type') // '', qr!^application/json!, 'json: JSON');
my $ra = header($r, 'Retry-After');
ok(defined $ra && $ra =~ /^\d+$/ && $ra >= 1 && $ra <= 37, 'json: Retry-After kept (open=30s, jittered)')
	or diag($r);
is(header($r, 'X-Circuit-State'), 'open', 'json: X-Circuit-State kept');
$body = eval { JSON::PP::decode_json(http_content($r)) };
is($body->{error}, 'unavailable', 'json: error');
is($body->{circuit}, 'open', 'json: the breaker\'s state');
is($body->{retry_after}, $ra, 'json: the wait, as Retry-After says');
is(hits(qr!^/api/!), $before, 'json: no origin request');
is(hits(qr!^/flags/!), 3, 'defaults: the origin saw only the 503 and the two failures');

###############################################################################
