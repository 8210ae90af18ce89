#!/usr/bin/perl

# Counters that say what they mean:
#  - alloc_failures counts breakers that could not be created, not requests;
#  - a control request for a known pair whose breaker the full zone could not
#    hold says so, with 507 rather than "not found";
#  - retry_at says when the next probe may start, never a moment in the past,
#    also while a probe is in flight;
#  - a dry run changes nothing traffic sees: its would-be probe still retries.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use IO::Socket::INET;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Status qw/ status_json /;
use CB::Response qw/ status body /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(15);

my $N = 40;
my $routes = join '', map { <<"EOF" } 1 .. $N;
        location /r$_/ { proxy_pass http://full; circuit_breaker_route r$_; }
EOF

$t->write_file_expand('nginx.conf', conf(2, <<"EOF"));
    circuit_breaker_zone cb:64k;

    # breakers are created in configuration order: these two fit

    upstream slow {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=2 failure_rate=50% open=1s
                        jitter=0% probes=1 probe_interval=200ms;
    }

    # a refused primary and a healthy backup: every request is rescued
    upstream dry {
        server 127.0.0.1:%%PORT_8085%% max_fails=0;
        server 127.0.0.1:%%PORT_8081%% backup;
        circuit_breaker window=10s min_requests=2 failure_rate=40% open=1s
                        jitter=0% probes=3 dry_run;
    }

    # and these do not all fit

    upstream full {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /slow/ { proxy_pass http://slow; }
        location /dry/  { proxy_pass http://dry; }
$routes
        location = /status { circuit_breaker_status control=on; }
    }
EOF

start($t, 8081);

###############################################################################

sub breaker {
	my ($j, $upstream, $route) = @_;
	my ($b) = grep { $_->{upstream} eq $upstream && $_->{route} eq $route }
		@{ $j->{breakers} || [] };
	return $b;
}

# alloc_failures: breakers, not requests

my $j = status_json('/status');
my @missing = grep { !breaker($j, 'full', "r$_") } 1 .. $N;
my $failures = $j->{alloc_failures} // -1;
ok(@missing > 0 && breaker($j, 'slow', 'default') && breaker($j, 'dry', 'default'),
	'the zone could not hold every route breaker')
	or diag("zone used $j->{used} of $j->{size}");
is($failures, @missing + (breaker($j, 'full', 'default') ? 0 : 1),
	'alloc_failures counts them');

http_get("/r$missing[0]/x") for 1 .. 10;
is(status_json('/status')->{alloc_failures}, $failures,
	'ten requests to a missing breaker change nothing');

my $r = http(<<"EOF");
POST /status?upstream=full&route=r$missing[0]&action=force_open HTTP/1.0
Host: localhost
X-Circuit-Breaker-Control: 1

EOF
is(status($r), '507', 'control of a breaker the full zone lacks: 507');
like(body($r) // '', qr/zone "cb" is full/, 'and it says so');

# retry_at while a probe is in flight

is(join(' ', map { status(http_get('/slow/x?status=500')) } 1 .. 3),
	'500 500 503', 'slow: trips');
sleep 1.2;

my $probe = IO::Socket::INET->new('127.0.0.1:' . port(8080))
	or die "connect: $!\n";
print $probe "GET /slow/x?delay=2000 HTTP/1.0\r\nHost: localhost\r\n\r\n";
sleep 0.5;

my $b = breaker(status_json('/status'), 'slow', 'default') || {};
is($b->{state}, 'half_open', 'slow: a probe is in flight');
cmp_ok($b->{retry_at} // 0, '>=', time() - 0.1,
	'retry_at is not in the past while a probe is in flight');
cmp_ok($b->{retry_at} // 0, '<=', time() + 1,
	'... but soon: one probe_interval from now');

local $/;
is(status(<$probe> // ''), '200', 'the probe ends well');
close $probe;

# dry run: two requests that fail on the backup too (the primary refuses)
# open it - a request rescued by the backup is no failure; then traffic goes
# on as if there were no breaker, retries and the would-be probe alike

is(join(' ', map { status(http_get('/dry/x?status=500')) } 1 .. 2), '500 500',
	'dry: two requests failed');
is(join(' ', map { status(http_get('/dry/x')) } 1 .. 3), '200 200 200',
	'dry: every request rescued by the backup');
is(breaker(status_json('/status'), 'dry', 'default')->{state} // '', 'open',
	'dry: the breaker runs for real, "open"');

# after the cooldown, the next request is the dry run's probe: still retried

sleep 1.2;
is(status(http_get('/dry/x')), '200', 'dry: its probe is rescued too');
is(breaker(status_json('/status'), 'dry', 'default')->{totals}{probes}, 1,
	'dry: that request was the probe');

###############################################################################
