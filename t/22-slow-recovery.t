#!/usr/bin/perl

# Recovery judged by what tripped the breaker: with "slow", a probe slower than "slow" is a
# bad probe — an active probe (probe_uri), a user request let through half-open, an ejected
# server's probe — so an origin that is still slow keeps a breaker that opened on the slow
# rate open (and a slow server ejected), and one that is fast again closes it; with
# probe_latency=off, probes are judged by their answer alone, as before.  Counted at the
# origin: the probes reach it while it is slow.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start log_count /;
use CB::Origin;
use CB::Status qw/ breaker_at wait_state /;
use CB::Response qw/ status /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(15);

$t->write_file_expand('nginx.conf', conf(2, <<'EOF'));
    circuit_breaker_zone cb:1m;
    circuit_breaker_header on;

    upstream act {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=5s min_requests=4 slow=100ms slow_rate=50%
                        probes=2 probe_interval=200ms jitter=0% probe_uri=/act/health;
    }
    upstream pas {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=5s min_requests=4 slow=100ms slow_rate=50%
                        open=300ms max_open=300ms probes=2 probe_interval=200ms jitter=0%;
    }
    upstream old {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=5s min_requests=4 slow=100ms slow_rate=50%
                        probes=2 probe_interval=200ms jitter=0% probe_uri=/old/health
                        probe_latency=off;
    }
    upstream ej {
        server 127.0.0.1:%%PORT_8082%%;
        server 127.0.0.1:%%PORT_8083%%;
        circuit_breaker window=5s slow=100ms slow_rate=50% probe_interval=200ms
                        jitter=0% probe_uri=/ej/health;
        circuit_breaker_eject min_requests=4;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /act/ { proxy_pass http://act; }
        location /pas/ { proxy_pass http://pas; }
        location /old/ { proxy_pass http://old; }
        location /ej/ { proxy_pass http://ej; }
        location = /status { circuit_breaker_status; }
    }
EOF

my ($hits, $fast, $slow) = start($t, 8081, 8082, 8083);

###############################################################################

# The origin adds 300 ms to every answer (probes too); ej's second server alone.

CB::Origin::behave($hits, '* delay=300');
CB::Origin::behave($slow, '* delay=300');

for my $u (qw/ act pas old /) {
	http_get("/$u/trip$_") for 1 .. 4;
}
ok(wait_state("/status?upstream=$_", 'open', 2), "$_: opened on the slow rate")
	for qw/ act pas old /;
http_get("/ej/x$_") for 1 .. 12;
my ($ejected) = grep { $_->{address} eq '127.0.0.1:' . port(8083) }
	@{breaker_at('/status?upstream=ej')->{servers} // []};
is($ejected->{state} // '', 'ejected', 'ej: the slow server is ejected');

# 2 s of a slow origin: probes go every 200 ms, each slower than "slow"; user requests
# to "pas" become its probes each time its cooldown ends.

my %closed;
my $end = time() + 2;
while (time() < $end) {
	for my $u (qw/ act pas /) {
		$closed{$u}++ if breaker_at("/status?upstream=$u")->{state} eq 'closed';
	}
	http_get('/pas/during');
	sleep 0.05;
}
ok(!$closed{act}, 'act: a slow origin keeps it open through its active probes');
cmp_ok(CB::Origin::hits($hits, qr!^/act/health!), '>=', 3, 'act: the probes reached the origin');
ok(!$closed{pas}, 'pas: a slow origin keeps it open through its half-open probes');
cmp_ok(CB::Origin::hits($hits, qr!^/pas/during!), '>=', 2, 'pas: the probes reached the origin');
like($t->read_file('error.log'), qr/circuit breaker "pas\/default" opened: probe too slow: \d+ms > 100ms/,
	'pas: a slow probe reopens it, said so');
is(breaker_at('/status?upstream=old')->{state}, 'closed',
	'old: probe_latency=off judges by the answer alone');
($ejected) = grep { $_->{address} eq '127.0.0.1:' . port(8083) }
	@{breaker_at('/status?upstream=ej')->{servers} // []};
is($ejected->{state} // '', 'ejected', 'ej: a slow server stays out through its probes');
cmp_ok(CB::Origin::hits($slow, qr!^/ej/health!), '>=', 3, 'ej: its probes reached it');

# fast again: the probes close both breakers and return the server

CB::Origin::behave($hits);
CB::Origin::behave($slow);
ok(wait_state('/status?upstream=act', 'closed', 3), 'act: a fast origin closes it');
my $closed = 0;
for (1 .. 40) {
	http_get('/pas/healed');
	$closed = 1, last if breaker_at('/status?upstream=pas')->{state} eq 'closed';
	sleep 0.1;
}
ok($closed, 'pas: a fast origin closes it');
ok(eval {
	my $ok = 0;
	for (1 .. 30) {
		($ejected) = grep { $_->{address} eq '127.0.0.1:' . port(8083) }
			@{breaker_at('/status?upstream=ej')->{servers} // []};
		$ok = 1, last if ($ejected->{state} // '') eq 'in';
		sleep 0.1;
	}
	$ok;
}, 'ej: the server returns');

###############################################################################
