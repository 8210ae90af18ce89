#!/usr/bin/perl

# Every answer of the status location is hardened, whatever its format and
# status: JSON, Prometheus, the dashboard, the fleet message, a control
# answer, HEAD, and the 400, 403, 404 and 405 answers each carry
# Content-Security-Policy (with frame-ancestors 'none'), X-Frame-Options:
# DENY, X-Content-Type-Options: nosniff, Cache-Control: no-store,
# Referrer-Policy: no-referrer. The dashboard's policy allows its own inline
# script and style by their SHA-256 (checked against the page it was sent
# with) and nothing else: no 'unsafe-inline'. Values echoed in error bodies
# are quoted and cut.
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/95-headers.t

###############################################################################

use warnings;
use strict;

use Test::More;

use Digest::SHA qw/ sha256_base64 /;
use FindBin;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start req /;
use CB::Origin;
use CB::FleetPeer;
use CB::Response qw/ status header body /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy access/)->plan(98);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    circuit_breaker_zone cb:1m;

    # a fleet of this instance and a peer that is not there: the exchange
    # worker publishes its message all the same
    circuit_breaker_fleet 127.0.0.1:%%PORT_8080%% 127.0.0.1:%%PORT_8082%%
                          id=127.0.0.1:%%PORT_8080%% interval=200ms
                          secret=0123456789abcdef-headers;

    upstream up {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /d/ {
            proxy_pass http://up;
        }

        location = /circuit_breaker {
            circuit_breaker_status control=on;
        }

        location = /ro {
            circuit_breaker_status;
        }
    }
EOF

start($t, 8081);

###############################################################################

my $CTL = 'X-Circuit-Breaker-Control: 1';
my $DATA_CSP = "default-src 'none'; base-uri 'none'; form-action 'none'; "
	. "frame-ancestors 'none'";

# the headers every answer carries; CSP is checked by the caller

sub hardened {
	my ($r, $name) = @_;
	my @bad;
	for my $h ([ 'X-Frame-Options', 'DENY' ],
		[ 'X-Content-Type-Options', 'nosniff' ],
		[ 'Cache-Control', 'no-store' ],
		[ 'Referrer-Policy', 'no-referrer' ],
		[ 'Cross-Origin-Resource-Policy', 'same-origin' ])
	{
		my $v = header($r, $h->[0]);
		push @bad, "$h->[0]: " . ($v // 'none') unless ($v // '') eq $h->[1];
	}
	ok(!@bad, "$name: hardening headers") or diag(join("\n", @bad, $r));
	my @csp = $r =~ /^Content-Security-Policy:/mgi;
	is(scalar @csp, 1, "$name: one Content-Security-Policy");
	return header($r, 'Content-Security-Policy') // '';
}

sub data_answer {
	my ($r, $name, $status, $type) = @_;
	is(status($r), $status, "$name: $status");
	like(header($r, 'Content-Type') // '', $type, "$name: content type");
	is(hardened($r, $name), $DATA_CSP, "$name: runs nothing, framed by none");
}

###############################################################################

# the formats

data_answer(http_get('/circuit_breaker'), 'JSON', 200, qr!^application/json$!);
data_answer(http_get('/circuit_breaker?format=prometheus'), 'Prometheus', 200,
	qr!^text/plain; version=0\.0\.4!);
data_answer(req('GET', '/ro', 'Accept: text/plain'), 'Prometheus by Accept',
	200, qr!^text/plain; version=0\.0\.4!);
data_answer(req('HEAD', '/ro'), 'HEAD', 200, qr!^application/json$!);

# the fleet message, once the exchange worker published it

my $msg;
my $end = time() + 5;
while (time() < $end) {
	# pulled as the absent peer would, under the fleet's key
	$msg = req('GET', '/ro?format=fleet', 'X-Circuit-Breaker-Fleet: '
		. CB::FleetPeer::header('0123456789abcdef-headers', 'pull',
			'127.0.0.1:' . port(8082), CB::FleetPeer::nonce()));
	last if status($msg) == 200;
	sleep 0.1;
}
data_answer($msg, 'fleet', 200, qr!^text/plain$!);
data_answer(req('GET', '/ro?format=fleet'), 'fleet without authentication', 403,
	qr!^text/plain$!);

# control answers

data_answer(req('POST', '/circuit_breaker?upstream=up&action=force_open',
	$CTL), 'control', 200, qr!^application/json$!);
data_answer(req('POST', '/circuit_breaker?upstream=up&action=reset'
	. '&format=prometheus', $CTL), 'control, Prometheus', 200,
	qr!^text/plain; version!);

# errors

data_answer(http_get('/circuit_breaker?bogus=1'), '400', 400, qr!^text/plain$!);
data_answer(req('POST', '/circuit_breaker?upstream=up&action=force_open'),
	'403 (no header)', 403, qr!^text/plain$!);
data_answer(req('POST', '/circuit_breaker?upstream=nosuch&action=reset',
	$CTL), '404', 404, qr!^text/plain$!);
data_answer(req('PUT', '/circuit_breaker'), '405', 405, qr!^text/plain$!);
data_answer(req('POST', '/ro?upstream=up&action=reset', $CTL),
	'405 without control', 405, qr!^text/plain$!);
is(header(req('DELETE', '/ro'), 'Allow'), 'GET, HEAD', '405: Allow');

# the dashboard: its script and style by hash, nothing else

for my $case ([ 'format=html', http_get('/ro?format=html') ],
	[ 'Accept: text/html', req('GET', '/circuit_breaker',
		'Accept: text/html,application/xhtml+xml,*/*;q=0.8') ])
{
	my ($name, $r) = @$case;
	my $page = body($r) // '';
	is(status($r), 200, "dashboard ($name): 200");
	like(header($r, 'Content-Type'), qr!^text/html; charset=utf-8$!,
		"dashboard ($name): HTML");
	my $csp = hardened($r, "dashboard ($name)");
	my %d = map { /^\s*(\S+)\s*(.*?)\s*$/ ? ($1 => $2) : () }
		split /;/, $csp;
	my ($script) = $page =~ m!<script>(.*?)</script>!s;
	my ($style) = $page =~ m!<style>(.*?)</style>!s;
	ok(defined $script && defined $style
		&& $page !~ /<script[^>]/ && $page !~ /<style[^>]/,
		"dashboard ($name): one inline script and style, no attributes");
	# Digest::SHA's base64 has no padding; a SHA-256 in base64 has one "="
	is($d{'script-src'}, "'sha256-" . sha256_base64($script // '') . "='",
		"dashboard ($name): the script by its hash, only");
	is($d{'style-src'}, "'sha256-" . sha256_base64($style // '') . "='",
		"dashboard ($name): the style by its hash, only");
	is($d{'default-src'}, "'none'", "dashboard ($name): default-src 'none'");
	is($d{'connect-src'}, "'self'", "dashboard ($name): connect-src 'self'");
	is($d{'frame-ancestors'}, "'none'",
		"dashboard ($name): frame-ancestors 'none'");
	is($d{'form-action'}, "'none'", "dashboard ($name): form-action 'none'");
	unlike($csp, qr/unsafe|\*/, "dashboard ($name): no unsafe-*, no wildcard");
	unlike($page, qr/http-equiv/i, "dashboard ($name): no <meta> policy");
}

my $head = req('HEAD', '/ro?format=html');
like(hardened($head, 'dashboard HEAD'), qr/script-src 'sha256-/,
	'dashboard HEAD: its policy');

# echoed values are quoted and cut: the 404 of a control request names the
# upstream, route and server it was given, escaped, at most 64 characters

my $odd = 'a%22b%0Ac%3Cscript%3E' . ('x' x 200);
my $r = req('POST', "/circuit_breaker?upstream=$odd&route=r%22&action=reset",
	$CTL);
my $b = body($r) // '';
ok(status($r) == 404 && $b eq 'no circuit breaker for upstream "a\\"b\\nc<script>'
	. ('x' x 51) . "\"... route \"r\\\"\"\n", '404: upstream and route quoted, cut')
	or diag($r);

$r = req('POST', "/circuit_breaker?upstream=$odd&action=eject&server=s",
	$CTL);
$b = body($r) // '';
ok(status($r) == 404 && $b =~ /^no circuit breaker for upstream "a\\"b\\nc<script>x+"\.\.\.\n\z/
	&& length($b) < 120, '404 of eject: quoted, cut') or diag($r);

$r = req('POST', '/circuit_breaker?upstream=up&action=eject&server='
	. $odd, $CTL);
$b = body($r) // '';
ok(status($r) == 404 && $b =~ /^no server "a\\"b\\nc<script>x+"\.\.\. in the pool of upstream "up"\n\z/
	&& length($b) < 140, '404 of a server: quoted, cut') or diag($r);

###############################################################################
