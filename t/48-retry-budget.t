#!/usr/bin/perl

# The upstream breaker judges requests, not attempts: a request rescued by
# proxy_next_upstream does not count against it, a request whose every
# attempt failed counts once, and the breaker still opens on the request that
# crosses its threshold.  The retry budget caps retries at its share of first
# attempts while the origin fails (counted at the origin), and lets them
# through again once it recovers.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Status qw/ breaker_at /;
use CB::Response qw/ status header /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(14);

# 8081 good; 8082 and 8085 answer 500; 8083 and 8084 as each phase says.
# Per-server ejection is off, and nginx's own max_fails quiet period too
# (proxy_next_upstream http_500 makes a 500 one of its failures), so that the
# bad servers keep being tried.

$t->write_file_expand('nginx.conf', conf(2, <<'EOF'));
    proxy_next_upstream error timeout http_500;

    # a failure rate of 25% over attempts would open it; over requests, none
    upstream rescued {
        server 127.0.0.1:8082 max_fails=0;
        server 127.0.0.1:8081 max_fails=0;
        circuit_breaker min_requests=4 failure_rate=25% jitter=0%;
        circuit_breaker_eject off;
    }

    upstream failing {
        server 127.0.0.1:8082 max_fails=0;
        server 127.0.0.1:8085 max_fails=0;
        circuit_breaker min_requests=4 failure_rate=50% jitter=0%;
        circuit_breaker_eject off;
    }

    upstream budget {
        server 127.0.0.1:8083 max_fails=0;
        server 127.0.0.1:8084 max_fails=0;
        circuit_breaker_retry_budget 20% min=0;
        circuit_breaker min_requests=1000;
        circuit_breaker_eject off;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /rescued/ { proxy_pass http://rescued; }
        location /failing/ { proxy_pass http://failing; }
        location /budget/ { proxy_pass http://budget; }
        location = /status { circuit_breaker_status; }
    }
EOF

my %hits;
@hits{8081 .. 8085} = start($t, 8081 .. 8085);
CB::Origin::behave($hits{8082}, '* status=500');
CB::Origin::behave($hits{8085}, '* status=500');

###############################################################################

sub breaker { breaker_at("/status?upstream=$_[0]&route=default") }

# rescued: half the requests fail on 8082 and are retried on 8081

my @s = map { status(http_get("/rescued/x")) } 1 .. 20;
is(join(' ', grep { $_ != 200 } @s), '', 'rescued: every request answered');
cmp_ok(CB::Origin::hits($hits{8082}, qr!^/rescued/!), '>=', 8,
	'rescued: about half failed first');
my $b = breaker('rescued');
is(join(' ', $b->{state}, $b->{window}{requests}, $b->{window}{failures}),
	'closed 20 0', 'rescued: 20 requests, no failure, closed');

# failing: both attempts of each request fail; each request counts once, and
# the 4th opens the breaker

@s = map { status(http_get("/failing/x")) } 1 .. 5;
is("@s", '500 500 500 500 503', 'failing: opened by the 4th request');
like($t->read_file('error.log'),
	qr/"failing\/default" opened: failure rate 100% \(4\/4\) >= 50%/,
	'failing: 4 requests, not 8 attempts');
is(CB::Origin::hits($hits{8082}, qr!^/failing/!)
	+ CB::Origin::hits($hits{8085}, qr!^/failing/!), 8,
	'failing: two attempts each, none after it opened');

# budget: while every server fails, retries stay within 20% of first
# attempts (no floor here)

CB::Origin::behave($hits{8083}, '* status=500');
CB::Origin::behave($hits{8084}, '* status=500');

@s = map { status(http_get("/budget/x")) } 1 .. 50;
my $origin = CB::Origin::hits($hits{8083}) + CB::Origin::hits($hits{8084});
is($origin, 60, 'budget: 50 requests, 10 retries at the origin');
is(join(' ', grep { $_ != 500 } @s), '', 'budget: denied retries answer 500');
$b = breaker('budget');
is(join(' ', @{$b->{retries}}{qw/ total denied /}), '10 40',
	'budget: 10 retries let through, 40 denied');

# the origin recovers: with more first attempts, retries are allowed again

CB::Origin::behave($hits{8083});
CB::Origin::behave($hits{8084});
@s = map { status(http_get("/budget/x")) } 1 .. 50;
is(join(' ', grep { $_ != 200 } @s), '', 'budget: recovered');

CB::Origin::behave($hits{8083}, '* status=500');
my $bad = CB::Origin::hits($hits{8083});
@s = map { status(http_get("/budget/x")) } 1 .. 10;
$bad = CB::Origin::hits($hits{8083}) - $bad;
is(join(' ', grep { $_ != 200 } @s), '', 'budget: failures retried again');
$b = breaker('budget');
is($b->{retries}{total}, 10 + $bad, 'budget: each one a retry');
# each worker hands its first attempts over when it needs the budget, and at
# the latest in the next second: the page may miss this second's successes
my $firsts = $b->{retries}{window}{first_attempts};
ok($firsts >= 100 && $firsts <= 110, 'budget: first attempts') or diag($firsts);

like(http_get('/status?format=prometheus&upstream=budget'),
	qr/^nginx_circuit_breaker_retries_denied_total\{zone="circuit_breaker",upstream="budget"\} 40$/m,
	'budget: denials in Prometheus');

###############################################################################
