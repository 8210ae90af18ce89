#!/usr/bin/perl

# An open key's breaker (circuit_breaker_key) in a location with proxy_cache: an
# expired entry is served stale with no origin attempt where proxy_cache_use_stale
# has "error"; a fresh entry is served as ever; without an entry, or without
# "error", a 503 with Retry-After; no background update (with aio threads too), no
# mirror, no SSI include and no error page reaches the origin; a location without a
# cache answers 503 at once; a body-carrying request is never held back; a reload
# changes nothing; the status location is never the key's; another key is
# untouched. Two workers, and every count is taken at the origin.

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

my $t = Test::Nginx->new()->has(qw/http proxy cache map/)->plan(39);

$t->write_file_expand('nginx.conf', conf(2, <<'EOF'));
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
                            open=8s jitter=0% probes=1;

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

        # the same with a threaded cache read
        location /aio/ {
            aio threads;
            proxy_pass http://$origin;
            proxy_cache_use_stale error updating;
            proxy_cache_background_update on;
        }

        # a mirror, and SSI includes: subrequests to the same key
        location /m/ {
            mirror /mirror;
            proxy_pass http://$origin;
            proxy_cache_use_stale error;
        }

        location = /mirror {
            internal;
            proxy_pass http://$origin/mirrored$request_uri;
            proxy_cache off;
        }

        location /ssi/ {
            ssi on;
            proxy_pass http://$origin;
            proxy_cache_use_stale error;
        }

        # an error page passed to the same key
        location /ep/ {
            error_page 503 /nc/sorry;
            proxy_pass http://$origin;
            proxy_cache off;
        }

        # no cache
        location /nc/ {
            proxy_pass http://$origin;
            proxy_cache off;
        }

        location /status {
            circuit_breaker_status control=on;
        }
    }
EOF

my ($hits, $hits_b) = start($t, 8081, 8082);

###############################################################################

sub hits { CB::Origin::hits($hits, @_) }

# prime: one entry per location

my $ssi = '/ssi/p?body=%3C!--%23include+virtual%3D%22/nc/inc%22+--%3E&hdr=Content-Type:text/html';
my @prime = ('/s/c1?body=stale+one', '/n/c1?body=stale+two',
	'/f/c1?body=fresh+three', '/bg/c1?body=stale+four', '/aio/c1?body=stale+five',
	'/m/c1?body=stale+six', $ssi, '/nc/c1');
my @st = map { my $r = http_get($_); status($r) . ' ' . (header($r, 'X-Cache') // '-') }
	@prime;
is("@st", join(' ', ('200 MISS') x 7, '200 -'), 'prime: eight answers') or diag("@st");
for (1 .. 20) {
	last if hits(qr!^/mirrored/!);
	sleep(0.05);
}
is(hits(), 10, 'prime: eight origin hits, a mirror\'s and an include\'s');
my $primed = time();

# open the key's breaker with answers nothing caches: 8 successes (the mirror's and the
# include's subrequests are not counted), so the eighth failure reaches 50 %

@st = map { status(http_get("/nc/fail?status=500&n=$_")) } 1 .. 9;
is("@st", join(' ', ('500') x 8, '503'), 'opened by the eighth failure');
is(hits(qr!^/nc/fail!), 8, 'the ninth failure never reached the origin');

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
like(header($r, 'Retry-After') // '', qr/^[1-8]$/, 'no entry: Retry-After');

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

# HEAD is looked up as GET (proxy_cache_convert_head); a GET with an empty body is
# no body to wait for

$r = http_head('/s/c1?body=stale+one');
is(status($r) . ' ' . (header($r, 'X-Cache') // '-'), '200 STALE', 'HEAD: stale');
$r = http(<<EOF);
GET /s/c1?body=stale+one HTTP/1.0
Host: localhost
Content-Length: 0

EOF
is(status($r) . ' ' . (header($r, 'X-Cache') // '-'), '200 STALE', 'Content-Length 0: stale');

# what runs around the answer asks the origin nothing: a threaded read's background
# update, a mirror, an SSI include of the same key, an error page passed to it

$r = http_get('/aio/c1?body=stale+five');
is(status($r) . ' ' . header($r, 'X-Cache'), '200 STALE', 'aio threads: stale');
$r = http_get('/m/c1?body=stale+six');
is(status($r) . ' ' . header($r, 'X-Cache'), '200 STALE', 'mirror: stale');
$r = http_get($ssi);
is(status($r) . ' ' . header($r, 'X-Cache'), '200 STALE', 'SSI: the page stale');
$r = http_get('/ep/x');
is(status($r), 503, 'error page of the same key: 503');

# the status location, which inherits the key, is never the key's

like(http_get('/status'), qr!^HTTP/1.1 200.*"route":"127\.0\.0\.1:\d+","state":"open"!s,
	'status: answered while the key is open');

# a reload keeps the key open and the stale answers, in every worker

CB::Nginx::reload($t);
@st = map { my $r = http_get('/s/c1?body=stale+one'); status($r) . ' ' . header($r, 'X-Cache') }
	1 .. 6;
is(scalar(grep { $_ eq '200 STALE' } @st), 6, 'reload: still stale') or diag("@st");

sleep(0.5);
is(hits(), $h0, "no origin hit while open") or diag(`cat $hits`);

# another key is its own

$r = http_get('/s/c1?o=b&body=other');
is(status($r) . ' ' . http_content($r), '200 other', 'another key: its origin answers');
is(CB::Origin::hits($hits_b), 1, 'another key: one hit at its origin');

# after the cooldown the next request is the probe: in a location with background updates
# it refreshes the entry itself (a background update would be counted by no breaker, and
# every request would be the probe again), and the key's breaker closes

sleep($primed + 2.05 + 8.1 - time()) if time() < $primed + 10.15;

$r = http_get('/bg/c1?body=stale+four');
is(status($r) . ' ' . header($r, 'X-Cache'), '200 EXPIRED', 'half-open: the probe refetches');
is(hits(qr!^/bg/c1\?body!), 2, 'half-open: the probe reached the origin');
$r = http_get('/s/c1?body=stale+one');
is(status($r) . ' ' . header($r, 'X-Cache'), '200 EXPIRED', 'closed: the origin again');
$r = http_get('/n/c1?body=stale+two');
is(status($r) . ' ' . header($r, 'X-Cache'), '200 EXPIRED', 'closed: and again');

my $log = $t->read_file('error.log');
unlike($log, qr/\[(alert|crit|emerg)\]/, 'no alerts');
unlike($log, qr/no live upstreams/, 'no "no live upstreams"');

my @al = grep { m!^/s/c1 ! } split /\n/, $t->read_file('cb.log');
is(scalar(grep { $_ eq '/s/c1 200 "STALE"' } @al), 19, 'access log: the stale answers')
	or diag(join "\n", @al);

###############################################################################
