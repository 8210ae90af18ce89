#!/usr/bin/perl

# Probe tickets are unique across resets and reloads: a probe granted before a
# reload that reset its breaker, still in flight afterwards, is never taken
# for the probe the reset breaker grants later.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use IO::Socket::INET;
use Time::HiRes qw/ sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start reload /;
use CB::Origin;
use CB::Response qw/ status header /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(7);

my $conf = <<'EOF';
    upstream tk {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=MIN failure_rate=50% open=1s
                        jitter=0% probes=2 probe_interval=100ms;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /tk/ { proxy_pass http://tk; }
    }
EOF

(my $first = $conf) =~ s/MIN/2/;
(my $second = $conf) =~ s/MIN/3/;

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

is(join(' ', map { status(http_get('/tk/x?status=500')) } 1 .. 3),
	'500 500 503', 'trips');
sleep 1.2;

# the first probe: slow, still in flight across the reload

my $p1 = send_slow('/tk/x?p1=1&delay=2500');
sleep 0.3;

# a changed parameter resets the breaker in the same memory

$t->write_file_expand('nginx.conf', conf(2, $second));
ok(reload($t), 'reloaded with another min_requests');

is(join(' ', map { status(http_get('/tk/x?status=500')) } 1 .. 4),
	'500 500 500 503', 'the reset breaker trips again');
sleep 1.2;

# its own first probe, slower still

my $p2 = send_slow('/tk/x?p2=1&delay=4000');
sleep 0.3;

# the old probe ends well: it must not count as the new one

is(status(answer($p1)), '200', 'the old probe ends');

my $r = http_get('/tk/x?after=1');
is(status($r), '503', 'the new probe still holds the slot');
is(header($r, 'X-Circuit-State'), 'half_open', '... half-open');

is(status(answer($p2)), '200', 'the new probe ends');

###############################################################################
