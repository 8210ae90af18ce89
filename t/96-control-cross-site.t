#!/usr/bin/perl

# Control that another site's page cannot trigger, without a browser: the
# requests a hidden cross-site form, a fetch(..., {mode: "no-cors"}) and a
# CORS preflight send (as Chromium sends them) to a control=on location
# behind allow/deny, each refused with 403 and a reason, with a warn line;
# a wrong Origin, Origin: null, another port's origin, a missing or wrong
# X-Circuit-Breaker-Control, Sec-Fetch-Site cross-site and same-site are
# refused even with the header; none of them changes a breaker or a server.
# curl's request (the header alone) and the dashboard's own (the header,
# its own Origin, Sec-Fetch-Site: same-origin) pass, over plain HTTP and
# TLS; an https:// Origin passes on plain HTTP (TLS ended in front of
# nginx), an http:// one does not over TLS.
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/96-control-cross-site.t

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use MIME::Base64 qw//;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start self_signed log_size log_since /;
use CB::Origin;
use CB::Status qw/ breakers /;
use CB::Response qw/ status body header json /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy access http_ssl/)
	->has_daemon('openssl')->plan(53);

$t->write_file_expand('nginx.conf', conf(2, <<'EOF'));
    circuit_breaker_zone cb:1m;

    upstream up {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 open=60s jitter=0%;
    }

    # two servers: a breaker per server, eject and restore
    upstream pool {
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
        circuit_breaker window=10s min_requests=4 open=60s jitter=0%;
    }

    server {
        listen       127.0.0.1:8080;
        listen       127.0.0.1:8443 ssl;
        server_name  localhost;

        ssl_certificate     localhost.crt;
        ssl_certificate_key localhost.key;

        location /d/ {
            proxy_pass http://up;
        }

        # as docs/status.md shows it: the operator's own machine only
        location = /circuit_breaker {
            circuit_breaker_status control=on;
            allow 127.0.0.1;
            deny all;
        }

        # and who the operator is, as docs/status.md shows it
        location = /ops/circuit_breaker {
            circuit_breaker_status control=on;
            allow 127.0.0.1;
            deny all;
            auth_basic "circuit breakers";
            auth_basic_user_file htpasswd;
        }

        location = /ops/cert {
            circuit_breaker_status control=on;
            if ($ssl_client_verify != SUCCESS) { return 403; }
        }
    }

    server {
        listen       127.0.0.1:8444 ssl;
        server_name  localhost;

        ssl_certificate        localhost.crt;
        ssl_certificate_key    localhost.key;
        ssl_client_certificate localhost.crt;
        ssl_verify_client      optional;

        location = /ops/cert {
            circuit_breaker_status control=on;
            if ($ssl_client_verify != SUCCESS) { return 403; }
        }
    }
EOF

$t->write_file('htpasswd', "operator:{PLAIN}s3cr3t\n");
self_signed($t, 'localhost');
start($t, 8081, 8082);

###############################################################################

my $p = port(8080);
my $own = "127.0.0.1:$p";
my $tls = '127.0.0.1:' . port(8443);
my $s2 = '127.0.0.1:' . port(8082);
my $CTL = 'X-Circuit-Breaker-Control: 1';

# a POST to the control location: QUERY, then HEADERS ("Name: value"), a
# BODY; Host is the location's own address unless HEADERS has one

sub post {
	my ($query, $headers, %o) = @_;
	my $body = $o{body} // '';
	my @h = @$headers;
	unshift @h, 'Host: ' . ($o{tls} ? $tls : $own)
		unless grep { /^Host:/i } @h;
	my $head = join '', map { "$_\r\n" } @h;
	return http("POST /circuit_breaker?$query HTTP/1.1\r\n$head"
		. 'Content-Length: ' . length($body) . "\r\n"
		. "Connection: close\r\n\r\n$body", $o{tls} ? (SSL => 1) : ());
}

sub breaker {
	my ($upstream) = @_;
	my @b = breakers("/circuit_breaker?upstream=$upstream&route=default");
	return @b == 1 ? $b[0] : {};
}

# the breaker closed, not forced, opened OPENED times (by the allowed
# requests only); the pool's servers in, not forced

sub unchanged {
	my ($name, $opened) = @_;
	my ($b, $pool) = (breaker('up'), breaker('pool'));
	my @out = grep { $_->{state} ne 'in' || defined $_->{forced} }
		@{ $pool->{servers} || [] };
	ok($b->{state} eq 'closed' && !defined $b->{forced}
		&& $b->{totals}{opened} == ($opened // 0)
		&& @{ $pool->{servers} || [] } == 2 && !@out
		&& !defined $pool->{forced}, "$name: nothing changed")
		or diag(explain([ $b, $pool ]));
}

my %form = (
	ct => 'Content-Type: application/x-www-form-urlencoded',
	evil => 'Origin: http://evil.example',
	xsite => 'Sec-Fetch-Site: cross-site',
);

my $need = 'control needs the request header '
	. '"X-Circuit-Breaker-Control: 1"';
my $xsite = 'control refused: "Sec-Fetch-Site: cross-site" is not this '
	. "location's own page";
my $evil = 'control refused: "Origin: http://evil.example" is not this '
	. "location's own origin";

###############################################################################

is(breaker('up')->{state}, 'closed', 'up closed at start');

my $log0 = log_size($t);

# a hidden form on another site, submitted by the operator's browser: what
# Chromium sends (a form cannot add a header of its own)

for my $action ('upstream=up&action=force_open',
	"upstream=pool&server=127.0.0.1:$p&action=eject")
{
	my $r = post($action, [ $form{ct}, $form{evil}, $form{xsite},
		'Sec-Fetch-Mode: navigate', 'Sec-Fetch-Dest: document',
		'Accept: text/html' ], body => 'x=1');
	ok(status($r) == 403 && body($r) eq "$xsite\n"
		&& header($r, 'Content-Type') =~ m!^text/plain!,
		"cross-site form ($action): 403") or diag($r);
}

# the same form from a browser that sends no Sec-Fetch-*: the Origin says it

my $r = post('upstream=up&action=force_open', [ $form{ct}, $form{evil} ],
	body => 'x=1');
ok(status($r) == 403 && body($r) eq "$evil\n", 'form, Origin only: 403')
	or diag($r);

# and one that sends no Origin either: no header, no control

$r = post('upstream=up&action=force_open', [ $form{ct} ], body => 'x=1');
ok(status($r) == 403 && body($r) eq "$need\n", 'form, no Origin: 403')
	or diag($r);

# fetch(url, {method: 'POST', mode: 'no-cors', body: 'x'}) from another site

$r = post('upstream=up&action=force_open',
	[ 'Content-Type: text/plain;charset=UTF-8', $form{evil}, $form{xsite},
		'Sec-Fetch-Mode: no-cors', 'Sec-Fetch-Dest: empty' ], body => 'x');
ok(status($r) == 403 && body($r) eq "$xsite\n", 'no-cors fetch: 403')
	or diag($r);

$r = post("upstream=pool&server=$s2&action=eject",
	[ 'Content-Type: text/plain;charset=UTF-8', $form{evil}, $form{xsite},
		'Sec-Fetch-Mode: no-cors' ], body => 'x');
is(status($r), 403, 'no-cors fetch, eject: 403');

# the CORS preflight a cross-site fetch with the header needs: refused,
# and nothing in the answer lets the browser send the real request

$r = http("OPTIONS /circuit_breaker?upstream=up&action=force_open HTTP/1.1\r\n"
	. "Host: $own\r\n$form{evil}\r\n"
	. "Access-Control-Request-Method: POST\r\n"
	. "Access-Control-Request-Headers: x-circuit-breaker-control\r\n"
	. "Sec-Fetch-Mode: cors\r\nSec-Fetch-Site: cross-site\r\n"
	. "Connection: close\r\n\r\n");
ok(status($r) == 405 && $r !~ /^Access-Control-/mi,
	'preflight: 405, no Access-Control-Allow-*') or diag($r);
is(header($r, 'Allow'), 'GET, HEAD, POST', 'preflight: Allow');

# with the header, but saying another site sent it

for my $case (
	[ 'wrong Origin', [ $CTL, $form{evil} ], $evil ],
	[ 'wrong Origin, same-origin fetch site',
		[ $CTL, $form{evil}, 'Sec-Fetch-Site: same-origin' ], $evil ],
	[ 'Origin: null', [ $CTL, 'Origin: null' ],
		'control refused: "Origin: null" is not this location\'s own origin' ],
	[ 'another port of the same host',
		[ $CTL, 'Origin: http://127.0.0.1:' . port(8081) ],
		'control refused: "Origin: http://127.0.0.1:' . port(8081)
		. '" is not this location\'s own origin' ],
	[ 'the same port without it', [ $CTL, 'Origin: http://127.0.0.1' ],
		'control refused: "Origin: http://127.0.0.1" is not this '
		. 'location\'s own origin' ],
	[ 'Sec-Fetch-Site: cross-site', [ $CTL, $form{xsite} ], $xsite ],
	[ 'Sec-Fetch-Site: cross-site, own Origin',
		[ $CTL, "Origin: http://$own", $form{xsite} ], $xsite ],
	[ 'Sec-Fetch-Site: same-site',
		[ $CTL, 'Origin: http://ops.localhost:' . $p,
			'Sec-Fetch-Site: same-site' ],
		'control refused: "Sec-Fetch-Site: same-site" is not this '
		. 'location\'s own page' ],
	[ 'missing header, own Origin',
		[ "Origin: http://$own", 'Sec-Fetch-Site: same-origin' ], $need ],
	[ 'missing header', [], $need ],
	[ 'header "0"', [ 'X-Circuit-Breaker-Control: 0' ], $need ],
	[ 'header twice, one wrong',
		[ $CTL, 'X-Circuit-Breaker-Control: yes' ], $need ],
	[ 'an Origin of two',
		[ $CTL, "Origin: http://$own", $form{evil} ], $evil ],
	[ 'an http:// Origin over TLS', [ $CTL, "Origin: http://$tls" ],
		"control refused: \"Origin: http://$tls\" is not this location's "
		. 'own origin', tls => 1 ],
) {
	my ($name, $headers, $reason, %o) = @$case;
	$r = post('upstream=up&action=force_open', $headers, %o);
	ok(status($r) == 403 && body($r) eq "$reason\n", "$name: 403")
		or diag($r);
}

# echoed values are quoted and cut

$r = post('upstream=up&action=force_open',
	[ $CTL, 'Origin: http://' . ('a' x 300) . '"<b>' ]);
ok(status($r) == 403 && length(body($r)) < 160
	&& body($r) =~ /"Origin: http:\/\/a+\.\.\." is not/, 'a long Origin: cut')
	or diag($r);

unchanged('after every refusal');
is(status(http_get('/d/x')), 200, 'traffic passes');

my @lines = log_since($t, $log0) =~ /^(.*circuit breaker control .*)$/mg;
is(scalar @lines, 21, 'each refusal logged') or diag(join "\n", @lines);
is(scalar(grep { /\[warn\]/ && /client: 127\.0\.0\.1/ } @lines), 21,
	'at warn, with the client');
unlike(log_since($t, $log0), qr/forced open by|ejected by/,
	'no action logged');

# what may: curl with the header, the dashboard's own request

$r = post('upstream=up&action=force_open', [ $CTL ]);
ok(status($r) == 200 && (json($r) || {})->{forced} eq 'open',
	'curl with the header: forced open') or diag($r);
$r = post('upstream=up&action=reset', [ $CTL, "Origin: http://$own",
	'Sec-Fetch-Site: same-origin', 'Sec-Fetch-Mode: cors',
	'Content-Type: text/plain;charset=UTF-8' ]);
ok(status($r) == 200 && !defined((json($r) || {})->{forced})
	&& (json($r) || {})->{state} eq 'closed', 'the dashboard\'s reset: 200')
	or diag($r);
$r = post("upstream=pool&server=$s2&action=eject",
	[ $CTL, "Origin: http://$own", 'Sec-Fetch-Site: same-origin' ]);
ok(status($r) == 200 && (json($r) || {})->{servers}[0]{state} eq 'ejected',
	'the dashboard\'s eject: 200') or diag($r);
$r = post("upstream=pool&server=$s2&action=restore",
	[ $CTL, "Origin: http://$own", 'Sec-Fetch-Site: same-origin' ]);
ok(status($r) == 200 && (json($r) || {})->{servers}[0]{state} eq 'in',
	'the dashboard\'s restore: 200') or diag($r);

# Host and Origin compared as browsers write them

$r = post('upstream=up&action=reset', [ $CTL, "Host: LOCALHOST:$p",
	"Origin: http://localhost:$p" ]);
is(status($r), 200, 'host names compared case-insensitively');
$r = post('upstream=up&action=reset', [ $CTL, 'Host: localhost:80',
	'Origin: http://localhost' ]);
is(status($r), 200, 'a default port is the same as none');

# over TLS, and behind a proxy that ends TLS

$r = post('upstream=up&action=reset', [ $CTL, "Origin: https://$tls",
	'Sec-Fetch-Site: same-origin' ], tls => 1);
ok(status($r) == 200 && (json($r) || {})->{state} eq 'closed',
	'TLS: the page\'s own https:// Origin passes') or diag($r);
$r = post('upstream=up&action=reset', [ $CTL, "Origin: https://$own" ]);
is(status($r), 200, 'plain HTTP, https:// Origin of the same authority');

unchanged('after the allowed requests', 1);

# the refusals answer as every status answer does

$r = post('upstream=up&action=force_open', [ $form{ct}, $form{evil} ]);
is(header($r, 'X-Frame-Options'), 'DENY', '403: X-Frame-Options');
like(header($r, 'Content-Security-Policy'), qr/frame-ancestors 'none'/,
	'403: CSP');
is(header($r, 'Cache-Control'), 'no-store', '403: Cache-Control');
is(header($r, 'X-Content-Type-Options'), 'nosniff', '403: nosniff');

# allow/deny still applies before any of this

$r = http("POST /circuit_breaker?upstream=up&action=force_open HTTP/1.0\r\n"
	. "Host: $own\r\n$CTL\r\n\r\n");
is(status($r), 200, 'from an allowed address: 200');
$r = http("POST /circuit_breaker?upstream=up&action=reset HTTP/1.0\r\n"
	. "Host: $own\r\n$CTL\r\n\r\n");
is((json($r) || {})->{state}, 'closed', 'reset');

# behind auth_basic: the header and the address are not enough

my $login = 'Authorization: Basic '
	. MIME::Base64::encode_base64('operator:s3cr3t', '');
$r = http("POST /ops/circuit_breaker?upstream=up&action=force_open HTTP/1.0\r\n"
	. "Host: $own\r\n$CTL\r\n\r\n");
is(status($r), 401, 'auth_basic: without the login, 401');
$r = http("POST /ops/circuit_breaker?upstream=up&action=force_open HTTP/1.0\r\n"
	. "Host: $own\r\n$CTL\r\n$login\r\n\r\n");
is((json($r) || {})->{forced}, 'open', 'auth_basic: with it, forced open');
$r = http("POST /ops/circuit_breaker?upstream=up&action=reset HTTP/1.0\r\n"
	. "Host: $own\r\n$form{evil}\r\n$login\r\n\r\n");
is(status($r), 403, 'auth_basic: a login sent along from another site, 403');
$r = http("POST /ops/circuit_breaker?upstream=up&action=reset HTTP/1.0\r\n"
	. "Host: $own\r\n$CTL\r\n$login\r\n\r\n");
is((json($r) || {})->{state}, 'closed', 'auth_basic: reset');

# with client certificates: a request without one is refused before the
# module sees it

$r = http("POST /ops/cert?upstream=up&action=force_open HTTP/1.0\r\n"
	. "Host: $own\r\n$CTL\r\n\r\n",
	PeerAddr => '127.0.0.1:' . port(8444), SSL => 1);
is(status($r), 403, 'client certificates: without one, 403');
$r = http("POST /ops/cert?upstream=up&action=force_open HTTP/1.0\r\n"
	. "Host: $own\r\n$CTL\r\n\r\n");
is(status($r), 403, 'client certificates: over plain HTTP, 403');

# GET is what it was: no header needed to read

$r = http_get('/circuit_breaker?upstream=up');
ok(status($r) == 200 && (json($r) || {})->{control}, 'GET: the JSON');
$r = http("GET /circuit_breaker?upstream=up&action=force_open HTTP/1.0\r\n"
	. "Host: $own\r\n$CTL\r\n\r\n");
is(status($r), 400, 'GET with an action: 400, header or not');

unchanged('at the end', 3);

###############################################################################
