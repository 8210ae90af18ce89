#!/usr/bin/perl

# Status location, the choice of format: ?format=json|prometheus|html, else
# the Accept header negotiated as HTTP says (q-values with q=0 "not
# acceptable", wildcards, specificity, parameters, several Accept fields as
# one list), JSON when nothing served is acceptable (no 406), Vary: Accept
# when Accept chose; the dashboard page for GET and HEAD; control answers in
# the format asked for (Prometheus: that one breaker's families); the
# "control" flag in the JSON of a control=on location.
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/74-format.t

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use JSON::PP qw//;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start req /;
use CB::Origin;
use CB::Response qw/ status header body /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(36);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    circuit_breaker_zone cb:1m;

    upstream up {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 open=10s jitter=0%;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /d/ {
            proxy_pass http://up;
        }

        location = /status {
            circuit_breaker_status;
        }

        location = /control {
            circuit_breaker_status control=on;
        }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

my $JSON = 'application/json';
my $PROM = 'text/plain; version=0.0.4; charset=utf-8';
my $HTML = 'text/html; charset=utf-8';

# the Content-Type a GET with these Accept fields gets

sub ct {
	my ($uri, @accept) = @_;
	my $r = req('GET', $uri, map { "Accept: $_" } @accept);
	return status($r) == 200 ? header($r, 'Content-Type') : "status " . status($r);
}

###############################################################################

# no format=: Accept decides

is(ct('/status'), $JSON, 'no Accept: JSON');
is(ct('/status', '*/*'), $JSON, '*/*: JSON');
is(ct('/status', 'text/plain'), $PROM, 'text/plain: Prometheus');
is(ct('/status', 'text/plain;q=0'), $JSON, 'text/plain;q=0: not Prometheus');
is(ct('/status', 'text/plainx'), $JSON, 'text/plainx: not Prometheus');
is(ct('/status', 'application/openmetrics-text'), $JSON,
	'OpenMetrics only (not served): JSON, not 406');
is(ct('/status', '*/*;q=0'), $JSON, 'nothing acceptable: JSON, not 406');
is(ct('/status', 'application/openmetrics-text;version=1.0.0,'
	. 'application/openmetrics-text;version=0.0.1;q=0.75,'
	. 'text/plain;version=0.0.4;q=0.5,*/*;q=0.1'), $PROM,
	'a Prometheus scraper: Prometheus');
is(ct('/status', 'text/plain;version=1.0.0'), $JSON,
	'text/plain;version=1.0.0: not our text format');
is(ct('/status', 'text/plain;q=0.4, application/json;q=0.5'), $JSON,
	'higher q wins');
is(ct('/status', 'text/*;q=0, text/plain'), $PROM,
	'the most specific range wins');
is(ct('/status', 'application/json;q=0.1', 'text/plain'), $PROM,
	'two Accept fields: one list');
is(ct('/status', 'text/plain', 'text/plain;q=0, application/json'), $JSON,
	'two Accept fields: the second counts too');
is(ct('/status', 'text/html,application/xhtml+xml,application/xml;q=0.9,'
	. '*/*;q=0.8'), $HTML, 'a browser: the page');
is(ct('/status', 'text/html;q=0, */*'), $JSON, 'text/html;q=0: no page');

my $r = req('GET', '/status', 'Accept: text/plain');
is(header($r, 'Vary'), 'Accept', 'chosen by Accept: Vary: Accept');

# format= wins over Accept, and says nothing varies

is(ct('/status?format=json', 'text/plain'), $JSON, 'format=json wins');
is(ct('/status?format=prometheus', 'application/json'), $PROM,
	'format=prometheus wins');
is(ct('/status?format=html', 'application/json'), $HTML, 'format=html wins');
$r = req('GET', '/status?format=json', 'Accept: text/plain');
ok(!defined header($r, 'Vary'), 'format=: no Vary');
is(status(req('GET', '/status?format=xml')), 400, 'format=xml: 400');

# the page

$r = req('GET', '/status?format=html');
my $page = body($r) // '';
ok($page =~ /^<!DOCTYPE html>/ && $page =~ m!<title>circuit breakers</title>!
	&& $page !~ m!https?://!, 'the page: self-contained HTML');
is(header($r, 'Content-Length'), length $page, 'the page: Content-Length');
$r = req('HEAD', '/status', 'Accept: text/html');
ok(status($r) == 200 && header($r, 'Content-Type') eq $HTML
	&& header($r, 'Content-Length') == length $page && !length(body($r) // ''),
	'HEAD with Accept: text/html: the page\'s head only');

# the "control" flag

my $j = eval { JSON::PP->new->decode(body(req('GET', '/control'))) } || {};
ok(JSON::PP::is_bool($j->{control}) && $j->{control}, 'control=on: "control":true');
$j = eval { JSON::PP->new->decode(body(req('GET', '/status'))) } || {};
ok($j->{zone} && !exists $j->{control}, 'no control: no "control" field');

# control answers (with the header a control request needs)

my $CTL = 'X-Circuit-Breaker-Control: 1';

$r = req('POST', '/control?upstream=up&action=force_open&format=prometheus', $CTL);
my $text = body($r) // '';
ok(status($r) == 200 && header($r, 'Content-Type') eq $PROM,
	'POST format=prometheus: Prometheus') or diag($r);
like($text, qr/^nginx_circuit_breaker_state\{zone="cb",upstream="up",route="default"\} 2$/m,
	'POST format=prometheus: the breaker, now open');
like($text, qr/^nginx_circuit_breaker_forced\{zone="cb",upstream="up",route="default",state="open"\} 1$/m,
	'POST format=prometheus: forced open');
unlike($text, qr/zone_|_breakers\{/, 'POST format=prometheus: no zone families');
ok(!defined header($r, 'Vary'), 'POST format=: no Vary');

$r = req('POST', '/control?upstream=up&action=reset', $CTL, 'Accept: text/plain');
ok(header($r, 'Content-Type') eq $PROM
	&& body($r) =~ /^nginx_circuit_breaker_state\{.*\} 0$/m,
	'POST Accept: text/plain: Prometheus, closed');

$r = req('POST', '/control?upstream=up&action=reset&format=html', $CTL);
$j = eval { JSON::PP->new->decode(body($r)) } || {};
ok(header($r, 'Content-Type') eq $JSON && $j->{state} eq 'closed',
	'POST format=html: JSON (the page answers no action)');

$r = req('POST', '/control?upstream=up&action=reset', $CTL,
	'Accept: text/html,application/xhtml+xml,*/*;q=0.8');
ok(header($r, 'Content-Type') eq $JSON, 'POST with a browser\'s Accept: JSON');
is(header($r, 'Vary'), 'Accept', 'POST chosen by Accept: Vary: Accept');

$r = req('POST', '/control?upstream=nosuch&action=reset&format=prometheus', $CTL);
ok(status($r) == 404 && header($r, 'Content-Type') =~ m!^text/plain!
	&& !defined header($r, 'Vary'), 'errors stay plain text');

###############################################################################
