#!/usr/bin/perl

# An open key's breaker (circuit_breaker_key) in a location with proxy_cache: an
# expired entry is served stale with no origin attempt where proxy_cache_use_stale
# has "error"; a fresh entry is served as ever; without an entry, or without
# "error", a 503 with Retry-After; a background update is refused; a location
# without a cache answers 503 at once; a body-carrying request is never held
# back; another key is untouched. Every count is taken at the origin.

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

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy cache map/)->plan(31);

# One worker: which locations make an upstream with a cache is learned per worker,
# from its own requests.

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    circuit_breaker_zone cb:1m;
    proxy_cache_path %%TESTDIR%%/cache keys_zone=one:1m;

    log_format cb '$uri $status "$upstream_cache_status"';
    access_log %%TESTDIR%%/cb.log cb;

    map $arg_o $origin {
        b       127.0.0.1:%%PORT_8082%%;
        default 127.0.0.1:%%PORT_8081%%;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        circuit_breaker_key $origin min_requests=4 failure_rate=50%
                            open=3s jitter=0% probes=1;

        proxy_read_timeout 5s;
        proxy_cache one;
        proxy_cache_valid 200 1s;
        add_header X-Cache $upstream_cache_status always;

        # stale on error
        location /s/ {
            proxy_pass http://$origin;
            proxy_cache_use_stale error timeout;
        }

        # no stale
        location /n/ {
            proxy_pass http://$origin;
        }

        # entries fresh for an hour
        location /f/ {
            proxy_pass http://$origin;
            proxy_cache_valid 200 1h;
        }

        # stale while a background subrequest would update the entry
        location /bg/ {
            proxy_pass http://$origin;
            proxy_cache_use_stale error updating;
            proxy_cache_background_update on;
        }

        # no cache
        location /nc/ {
            proxy_pass http://$origin;
            proxy_cache off;
        }
    }
EOF

my ($hits, $hits_b) = start($t, 8081, 8082);

###############################################################################

sub hits { CB::Origin::hits($hits, @_) }

# prime: one entry per location (the worker learns which ones cache)

my @prime = ('/s/c1?body=stale+one', '/n/c1?body=stale+two',
	'/f/c1?body=fresh+three', '/bg/c1?body=stale+four', '/nc/c1');
my @st = map { my $r = http_get($_); status($r) . ' ' . (header($r, 'X-Cache') // '-') }
	@prime;
is("@st", '200 MISS 200 MISS 200 MISS 200 MISS 200 -', 'prime: five answers')
	or diag("@st");
is(hits(), 5, 'prime: five origin hits');
my $primed = time();

# open the key's breaker with answers nothing caches: 5 successes, so the fifth
# failure reaches 50 %

@st = map { status(http_get("/nc/fail?status=500&n=$_")) } 1 .. 6;
is("@st", '500 500 500 500 500 503', 'opened by the fifth failure');
is(hits(qr!^/nc/fail!), 5, 'the sixth failure never reached the origin');

# the entries of 1 s have expired

sleep($primed + 2.05 - time()) if time() < $primed + 2.05;
my $h0 = hits();

my $r = http_get('/s/c1?body=stale+one');
is(status($r), 200, 'stale: 200');
is(http_content($r), 'stale one', 'stale: the cached body');
is(header($r, 'X-Cache'), 'STALE', 'stale: $upstream_cache_status STALE');
is(header($r, 'X-Circuit-State'), 'open', 'stale: X-Circuit-State open');

@st = map { my $r = http_get('/s/c1?body=stale+one'); status($r) . ' ' . header($r, 'X-Cache') }
	1 .. 10;
is(scalar(grep { $_ eq '200 STALE' } @st), 10, 'stale: repeatedly') or diag("@st");

$r = http_get('/s/none');
is(status($r), 503, 'no entry: 503');
is(header($r, 'X-Circuit-State'), 'open', 'no entry: X-Circuit-State');
like(header($r, 'Retry-After') // '', qr/^[1-3]$/, 'no entry: Retry-After');

$r = http_get('/n/c1?body=stale+two');
is(status($r), 503, 'no use_stale: 503');
unlike(http_content($r) // '', qr/stale two/, 'no use_stale: not the cached body');

$r = http_get('/f/c1?body=fresh+three');
is(status($r) . ' ' . header($r, 'X-Cache'), '200 HIT', 'fresh entry: a hit');
is(http_content($r), 'fresh three', 'fresh entry: its body');
is(header($r, 'X-Circuit-State'), undef, 'fresh entry: no X-Circuit-State');

$r = http_get('/bg/c1?body=stale+four');
is(status($r) . ' ' . header($r, 'X-Cache'), '200 STALE', 'background update: stale');

$r = http_get('/nc/c1');
is(status($r), 503, 'no cache: 503');
is(header($r, 'X-Circuit-State'), 'open', 'no cache: X-Circuit-State');

$r = http(<<EOF);
POST /s/c1?body=stale+one HTTP/1.0
Host: localhost
Content-Length: 5

hello
EOF
is(status($r), 503, 'a request with a body: 503');

# HEAD is looked up as GET (proxy_cache_convert_head)

$r = http_head('/s/c1?body=stale+one');
is(status($r) . ' ' . (header($r, 'X-Cache') // '-'), '200 STALE', 'HEAD: stale');

sleep(0.3);
is(hits(), $h0, "no origin hit while open") or diag(`cat $hits`);

# another key is its own

$r = http_get('/s/c1?o=b&body=other');
is(status($r) . ' ' . http_content($r), '200 other', 'another key: its origin answers');
is(CB::Origin::hits($hits_b), 1, 'another key: one hit at its origin');

# after the cooldown the next request is the probe: the entry is refreshed and
# the key's breaker closes

sleep($primed + 2.05 + 3.1 - time()) if time() < $primed + 5.15;

$r = http_get('/s/c1?body=stale+one');
is(status($r) . ' ' . header($r, 'X-Cache'), '200 EXPIRED', 'half-open: the probe refetches');
is(hits(qr!^/s/c1\?body!), 2, 'half-open: the probe reached the origin');
$r = http_get('/n/c1?body=stale+two');
is(status($r) . ' ' . header($r, 'X-Cache'), '200 EXPIRED', 'closed: the origin again');

my $log = $t->read_file('error.log');
unlike($log, qr/\[(alert|crit|emerg)\]/, 'no alerts');
unlike($log, qr/no live upstreams/, 'no "no live upstreams"');

my @al = grep { m!^/s/c1 ! } split /\n/, $t->read_file('cb.log');
is(scalar(grep { $_ eq '/s/c1 200 "STALE"' } @al), 12, 'access log: the stale answers')
	or diag(join "\n", @al);

###############################################################################
