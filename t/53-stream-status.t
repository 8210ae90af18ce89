#!/usr/bin/perl

# Stream breakers on the http status location, beside the http block's: Prometheus has every
# family once with both zones' samples (zone_info says which proxy a zone serves); the
# operator's control reaches a stream breaker with proxy=stream (force_open refuses the next
# sessions, reset lets them through again), refuses what a stream breaker has not (servers,
# routes), names what it does not know, and still asks for the header a page of another site
# cannot send; an http upstream of the same name is another breaker; proxy= selects either
# proxy's breakers on the page.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use Test::Nginx::Stream qw/ stream /;
use CB::Nginx qw/ stream_conf start req log_count /;
use CB::Response qw/ status body json /;
use CB::Redis;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/stream http proxy/)->plan(28);

# One expansion: a second would remap the addresses the first wrote.
my $stream = stream_conf(2, <<'EOF');
    log_format s '$server_port $status';
    access_log %%TESTDIR%%/stream.log s;

    circuit_breaker_zone cbs:1m;

    upstream kv {
        server 127.0.0.1:%%PORT_8091%%;
        circuit_breaker;
    }
    # nothing listens there: every session fails to connect
    upstream down {
        server 127.0.0.1:%%PORT_8095%%;
        circuit_breaker min_requests=4 consecutive=20;
    }

    server { listen 127.0.0.1:%%PORT_8090%%; proxy_pass kv; }
    server { listen 127.0.0.1:%%PORT_8092%%; proxy_pass down; }
EOF
$t->write_file_expand('nginx.conf', $stream . <<'EOF');
http {
    %%TEST_GLOBALS_HTTP%%

    circuit_breaker_zone cb:1m;

    # an http upstream of the same name as the stream one
    upstream kv {
        server 127.0.0.1:%%PORT_8095%%;
        circuit_breaker;
    }

    server {
        listen 127.0.0.1:8080;
        location = /status { circuit_breaker_status control=on; }
        location / { proxy_pass http://kv; }
    }
}
EOF

my $redis = CB::Redis->start($t, port(8091));
start($t);

###############################################################################

my $CTL = 'X-Circuit-Breaker-Control: 1';

sub ping {
	my ($port) = @_;
	return stream("127.0.0.1:$port")->io("PING\r\n", read => 1, read_timeout => 3);
}

sub control {
	my ($query, @headers) = @_;
	return req('POST', "/status?$query", @headers);
}

sub prometheus {
	return body(req('GET', '/status?format=prometheus')) // '';
}

# a stream breaker as the status page's stream member shows it
sub stream_breaker {
	my ($name) = @_;
	my $page = json(req('GET', '/status')) || {};
	my ($cbs) = grep { $_->{zone} eq 'cbs' } @{ $page->{stream} || [] };
	my ($b) = grep { $_->{upstream} eq $name } @{ $cbs->{breakers} || [] };
	return $b || {};
}

is(ping(port(8090)), "+PONG\r\n", 'kv: +PONG through its breaker');
ping(port(8092)) for 1 .. 6;
is(status(req('GET', '/')), 502, 'the http kv: 502, its breaker made');

# Prometheus: one family of each name, both zones' samples in it
my $p = prometheus();
my @help = $p =~ /^# HELP nginx_circuit_breaker_state /mg;
is(scalar @help, 1, 'prometheus: the state family once');
like($p, qr/^nginx_circuit_breaker_zone_info\{zone="cbs",module="stream"\} 1$/m,
	'prometheus: the stream zone, as such');
like($p, qr/^nginx_circuit_breaker_zone_info\{zone="cb",module="http"\} 1$/m,
	'prometheus: the http zone, as such');
like($p, qr/^nginx_circuit_breaker_state\{zone="cbs",upstream="kv",route="default"\} 0$/m,
	'prometheus: the stream kv, closed');
like($p, qr/^nginx_circuit_breaker_state\{zone="cbs",upstream="down",route="default"\} 2$/m,
	'prometheus: the stream down, open');
like($p, qr/^nginx_circuit_breaker_state\{zone="cb",upstream="kv",route="default"\} 0$/m,
	'prometheus: the http kv, its own breaker');
is(scalar(() = $p =~ /^# TYPE /mg), scalar(() = $p =~ /^# HELP /mg),
	'prometheus: a TYPE for each HELP');

my $ps = body(req('GET', '/status?format=prometheus&proxy=stream')) // '';
ok($ps =~ /zone="cbs"/ && $ps !~ /zone="cb"/, 'prometheus, proxy=stream: the stream zone alone');

# the page: proxy= selects either proxy's breakers
my $http_only = json(req('GET', '/status?proxy=http')) || {};
ok(!exists $http_only->{stream} && @{ $http_only->{breakers} || [] } == 1,
	'proxy=http: the http block\'s breakers alone');
my $stream_only = json(req('GET', '/status?proxy=stream')) || {};
ok(@{ $stream_only->{breakers} || [] } == 0 && @{ $stream_only->{stream} || [] } == 1,
	'proxy=stream: the stream module\'s alone');

# control: a page of another site cannot send the header; nothing changes
is(status(control('proxy=stream&upstream=kv&action=force_open')), 403,
	'control: without the header, refused');
is(ping(port(8090)), "+PONG\r\n", 'control refused: kv still answers');

# force_open: the next sessions are refused before any server is asked
my $before = $redis->accepted();
my $r = control('proxy=stream&upstream=kv&action=force_open', $CTL);
is(status($r), 200, 'force_open: done');
my $b = json($r) || {};
is($b->{state} . '/' . ($b->{forced} // ''), 'open/open', 'force_open: answers with the breaker');
is(ping(port(8090)) // '', '', 'forced open: the session is refused');
is($redis->accepted() - $before, 0, 'forced open: Redis saw no connection');
is(log_count($t, qr/circuit breaker stream "kv" forced open by 127\.0\.0\.1/), 1,
	'force_open: one log line, with who');

# the http kv is another breaker: changing it leaves the stream one alone, and the other way
is(status(control('upstream=kv&action=reset', $CTL)), 200, 'the http kv: reset');
is(stream_breaker('kv')->{forced} // '', 'open', 'the stream kv: still forced open');

# reset: sessions pass again
is(status(control('proxy=stream&upstream=kv&action=reset', $CTL)), 200, 'reset: done');
is(ping(port(8090)), "+PONG\r\n", 'reset: +PONG again');

# what a stream breaker has not, and what is not there
$r = control('proxy=stream&upstream=kv&action=eject&server=127.0.0.1:' . port(8091), $CTL);
is(status($r), 404, 'eject: an upstream without a pool has no servers');
$r = control('proxy=stream&upstream=kv&route=x&action=reset', $CTL);
like(body($r), qr/no routes/, 'route: a stream breaker has none');
$r = control('proxy=stream&upstream=nope&action=force_open', $CTL);
is(status($r), 404, 'unknown stream upstream: 404');
like(body($r), qr/^no circuit breaker for stream upstream "nope"/, 'unknown: named');
is(status(req('GET', '/status?proxy=tcp')), 400, 'proxy=tcp: not a proxy');

###############################################################################
