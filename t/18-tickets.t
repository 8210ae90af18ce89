#!/usr/bin/perl

# Probe tickets across resets and reloads: a probe granted before an
# operator's reset, still in flight afterwards, is never taken for the probe
# the reset breaker grants later; a probe granted before a reload that
# retuned its breaker (changed parameters) is still that breaker's probe:
# it stays held across the reload, and its good answer is judged by the
# new parameters (probes=2 -> 1: it closes the breaker).

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use IO::Socket::INET;
use Time::HiRes qw/ sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start req reload /;
use CB::Origin;
use CB::Response qw/ status header /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(14);

my $conf = <<'EOF';
    upstream tk {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=MIN failure_rate=50% open=1s
                        jitter=0% probes=PROBES probe_interval=100ms;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /tk/ { proxy_pass http://tk; }

        location = /control { circuit_breaker_status control=on; }
    }
EOF

(my $first = $conf) =~ s/MIN/2/;
$first =~ s/PROBES/2/;
(my $second = $conf) =~ s/MIN/3/;
$second =~ s/PROBES/1/;

$t->write_file_expand('nginx.conf', conf(2, $first));
my $hits = start($t, 8081);

###############################################################################

sub send_slow {
	my ($path) = @_;
	my $s = IO::Socket::INET->new('127.0.0.1:' . port(8080))
		or die "connect: $!\n";
	print $s "GET $path HTTP/1.0\r\nHost: localhost\r\n\r\n";
	return $s;
}

sub answer {
	my ($s) = @_;
	local $/;
	my $r = <$s> // '';
	close $s;
	return $r;
}

sub reset_breaker {
	return status(req('POST', '/control?upstream=tk&action=reset',
		'X-Circuit-Breaker-Control: 1'));
}

# 1. an operator's reset

is(join(' ', map { status(http_get('/tk/x?status=500')) } 1 .. 3),
	'500 500 503', 'trips');
sleep 1.2;

# the first probe: slow, still in flight across the reset

my $p1 = send_slow('/tk/x?p1=1&delay=2500');
sleep 0.3;

is(reset_breaker(), '200', 'reset');

is(join(' ', map { status(http_get('/tk/x?status=500')) } 1 .. 3),
	'500 500 503', 'the reset breaker trips again');
sleep 1.2;

# its own first probe, slower still

my $p2 = send_slow('/tk/x?p2=1&delay=4000');
sleep 0.3;

# the old probe ends well: it must not count as the new one

is(status(answer($p1)), '200', 'the old probe ends');

my $r = http_get('/tk/x?after=1');
is(status($r), '503', 'the new probe is still held');
is(header($r, 'X-Circuit-State'), 'half_open', '... half-open');

is(status(answer($p2)), '200', 'the new probe ends');

# 2. a reload that changes the breaker's parameters (min_requests 2 -> 3,
# probes 2 -> 1)

is(reset_breaker(), '200', 'reset again');
is(join(' ', map { status(http_get('/tk/x?status=500')) } 1 .. 3),
	'500 500 503', 'trips');
sleep 1.2;

my $p3 = send_slow('/tk/x?p3=1&delay=2500');
sleep 0.3;

$t->write_file_expand('nginx.conf', conf(2, $second));
ok(reload($t), 'reloaded with another min_requests and probes');

my $before = CB::Origin::hits($hits);
$r = http_get('/tk/x?status=500&during=1');
is(header($r, 'X-Circuit-State') // '', 'half_open',
	'the retuned breaker is still half-open, its probe in flight');
is(CB::Origin::hits($hits) - $before, 0, '... and nothing reached the origin');

is(status(answer($p3)), '200', 'the probe granted before the reload ends');
is(status(http_get('/tk/x?after=2')), '200',
	'its good answer closed the breaker (probes=1 now)');

###############################################################################
