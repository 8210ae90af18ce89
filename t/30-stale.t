#!/usr/bin/perl

# Open breaker and proxy_cache: an expired entry is served stale with no
# origin attempt when proxy_cache_use_stale has "error" (or the entry has
# stale-if-error); otherwise, and without a cache entry, a fast 503.
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/30-stale.t

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT http_end http_content /;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Response qw/ status header /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy cache/)->plan(48);

$t->write_file_expand('nginx.conf', conf(2, <<'EOF'));
    proxy_cache_path %%TESTDIR%%/cache keys_zone=one:1m;

    log_format cb '$uri $status "$upstream_cache_status" "$circuit_breaker_state"';
    access_log %%TESTDIR%%/cb.log cb;

    upstream u {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 failure_rate=50%
                        open=2s max_open=10s jitter=0%
                        probes=1 probe_interval=500ms;
    }

    upstream u2 {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 failure_rate=50%
                        open=30s jitter=0%;
    }

    upstream u3 {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 failure_rate=50%
                        open=2s max_open=10s jitter=0%
                        probes=1 probe_interval=500ms;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        proxy_read_timeout 5s;
        proxy_cache one;
        proxy_cache_valid 200 1s;
        add_header X-Cache $upstream_cache_status always;

        # stale on error
        location /s/ {
            proxy_pass http://u;
            proxy_cache_use_stale error timeout;
        }

        # stale while a background subrequest updates the entry
        location /bg/ {
            proxy_pass http://u3;
            proxy_cache_use_stale error timeout updating;
            proxy_cache_background_update on;
        }

        # no stale at all (a stale-if-error entry still may be)
        location /n/ {
            proxy_pass http://u2;
        }

        # stale, but not on "error"
        location /t/ {
            proxy_pass http://u2;
            proxy_cache_use_stale timeout http_500;
        }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

sub hits { CB::Origin::hits($hits, @_) }

my $s1 = '/s/c1?body=stale+one';
my $n1 = '/n/c1?body=stale+two';
my $t1 = '/t/c1?body=stale+three';
my $sie = '/n/sie?body=stale+four&hdr=Cache-Control:max-age%3D1,+stale-if-error%3D60';

# prime the cache

my $r = http_get($s1);
ok(status($r) == 200 && header($r, 'X-Cache') eq 'MISS', 'prime: miss')
	or diag($r);
$r = http_get($s1);
ok(status($r) == 200 && header($r, 'X-Cache') eq 'HIT'
	&& http_content($r) eq 'stale one', 'prime: hit') or diag($r);
is(hits(qr!^/s/c1!), 1, 'prime: one origin hit');

my $bg = '/bg/c1?body=stale+five';

for my $uri ($n1, $t1, $sie, $bg) {
	http_get($uri);
}
like(http_get($sie), qr/^X-Cache: HIT\x0d?$/m, 'prime: stale-if-error entry');
is(hits(), 5, 'prime: origin hits');

# expired once the second after the one of the store has passed

my $primed = time();
sleep(int($primed) + 2.05 - $primed);

# open both breakers with requests that cannot be cached; the window holds
# the priming MISSes too: u 1 + 3 failures, u2 3 + 3 failures

my @s = map { status(http_get("/s/fail?status=500&n=$_")) } 1 .. 4;
is("@s", '500 500 500 503', 'u: opened by the third failure');
my $t_open = time();

@s = map { status(http_get("/n/fail?status=500&n=$_")) } 1 .. 4;
is("@s", '500 500 500 503', 'u2: opened by the third failure');

@s = map { status(http_get("/bg/fail?status=500&n=$_")) } 1 .. 4;
is("@s", '500 500 500 503', 'u3: opened by the third failure');

my $h0 = hits();

# stale served, no origin attempt

$r = http_get($s1);
is(status($r), 200, 'stale: 200');
is(http_content($r), 'stale one', 'stale: cached body');
is(header($r, 'X-Cache'), 'STALE', 'stale: $upstream_cache_status STALE');
is(header($r, 'X-Circuit-State'), 'open', 'stale: X-Circuit-State open');

my @st = map { my $r = http_get($s1); status($r) . ' ' . header($r, 'X-Cache') }
	1 .. 10;
is(scalar(grep { $_ eq '200 STALE' } @st), 10, 'stale: repeatedly')
	or diag("@st");

# no cache entry: 503

$r = http_get('/s/nocache');
is(status($r), 503, 'no entry: 503');
is(header($r, 'X-Circuit-State'), 'open', 'no entry: X-Circuit-State');
like(header($r, 'Retry-After') // '', qr/^[12]$/, 'no entry: Retry-After');

# without proxy_cache_use_stale error: 503 for the expired entry

$r = http_get($n1);
is(status($r), 503, 'no use_stale: 503');
is(header($r, 'X-Circuit-State'), 'open', 'no use_stale: X-Circuit-State');
like(header($r, 'Retry-After') // '', qr/^\d+$/, 'no use_stale: Retry-After');
unlike(http_content($r) // '', qr/stale two/, 'no use_stale: not the cached body');

$r = http_get($t1);
is(status($r), 503, 'use_stale without error: 503');
is(header($r, 'X-Circuit-State'), 'open',
	'use_stale without error: X-Circuit-State');

# stale-if-error in the cached response allows stale on error

$r = http_get($sie);
ok(status($r) == 200 && http_content($r) eq 'stale four'
	&& header($r, 'X-Cache') eq 'STALE', 'stale-if-error: stale served')
	or diag($r);

# background update: the main request gets the stale entry, the background
# subrequest is short-circuited

@st = map { my $r = http_get($bg);
	status($r) . ' ' . (header($r, 'X-Cache') // '-') . ' '
	. (http_content($r) // '') } 1 .. 3;
is(join(',', @st), join(',', ('200 STALE stale five') x 3),
	'background update: stale served');

sleep(0.2);
is(hits(), $h0, 'no origin hits while open');

# nginx's own "no live upstreams" path is not taken, nothing logged per
# request

my $log = $t->read_file('error.log');
unlike($log, qr/no live upstreams/, 'no "no live upstreams"');
unlike($log, qr/\[error\]/, 'no errors logged');

# the access log sees the breaker state for stale responses too

my @al = grep { m!^/s/c1 ! } split /\n/, $t->read_file('cb.log');
is(scalar(grep { $_ eq '/s/c1 200 "STALE" "open"' } @al), 11,
	'access log: stale with state open') or diag(join "\n", @al);

# half-open: while the probe is in flight, stale is served as in open,
# then the probe (probes=1) closes it

sleep($t_open + 2.05 - time());

my $probe = http_get('/s/probe?delay=700', start => 1);
sleep(0.2);

$r = http_get($s1);
ok(status($r) == 200 && header($r, 'X-Cache') eq 'STALE'
	&& http_content($r) eq 'stale one', 'half-open: stale served')
	or diag($r);
is(header($r, 'X-Circuit-State'), 'half_open',
	'half-open: X-Circuit-State half_open');
$r = http_get('/s/nocache');
ok(status($r) == 503 && header($r, 'X-Circuit-State') eq 'half_open',
	'half-open: no entry 503');
is(hits(qr!^/s/(c1|nocache)!), 1, 'half-open: no origin hits but the probe');
is(hits(qr!^/s/probe!), 1, 'half-open: probe reached origin');

$r = http_end($probe);
is(status($r), 200, 'probe answered');

# closed: the expired entry is refreshed from the origin

$r = http_get($s1);
ok(status($r) == 200 && header($r, 'X-Cache') eq 'EXPIRED'
	&& http_content($r) eq 'stale one', 'closed: expired entry refetched')
	or diag($r);
is(header($r, 'X-Circuit-State'), undef,
	'closed: no X-Circuit-State (circuit_breaker_header off)');
is(hits(qr!^/s/c1!), 2, 'closed: origin hit');
$r = http_get($s1);
is(header($r, 'X-Cache'), 'HIT', 'closed: cached again');
is(hits(qr!^/s/c1!), 2, 'closed: hit served from cache');

# u3: after the cooldown the background update is the probe: the client
# gets the stale entry at once, the probe refreshes the entry and closes
# the breaker

sleep($t_open + 2.05 - time()) if time() < $t_open + 2.05;

$r = http_get($bg);
ok(status($r) == 200 && header($r, 'X-Cache') eq 'STALE'
	&& http_content($r) eq 'stale five', 'u3 half-open: stale served')
	or diag($r);

for (1 .. 20) {
	last if hits(qr!^/bg/c1!) > 1;
	sleep(0.05);
}
is(hits(qr!^/bg/c1!), 2, 'u3 half-open: background update reached origin');

sleep(0.1);
$r = http_get($bg);
ok(status($r) == 200 && header($r, 'X-Cache') eq 'HIT'
	&& http_content($r) eq 'stale five', 'u3: entry refreshed') or diag($r);
like($t->read_file('error.log'), qr/circuit breaker "u3\/default" closed/,
	'u3 closed by the background probe');
is(hits(qr!^/bg/!), 5, 'u3: origin hits');

# u2 is still open: the probe of u did not affect it

$r = http_get($n1);
is(status($r), 503, 'u2 still open');

is(scalar(() = $t->read_file('error.log')
	=~ /circuit breaker "u\/default" opened/g), 1, 'u opened logged once');
like($t->read_file('error.log'), qr/circuit breaker "u\/default" closed/,
	'u closed logged');
unlike($t->read_file('error.log'), qr/no live upstreams/,
	'no "no live upstreams" at all');

###############################################################################
