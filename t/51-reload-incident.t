#!/usr/bin/perl

# A reload that changes a breaker's parameters keeps an incident an incident.
#
# Breakers on an origin that keeps failing, then a reload that changes their
# parameters:
#	inc	open (defaults: min_requests=20), failure_rate 50% -> 80%:
#		still open, the origin gets no request until the probe, which
#		is the only one; a warn line names it
#	inc10	open, min_requests=10, failure_rate 50% -> 80%: still open
#	len	open, window 10s -> 20s (another window length: a new
#		allocation): still open, totals kept, window emptied
#	win	closed, 6 failures in its window (min_requests=10), failure_rate
#		50% -> 40%: the window is kept, so 4 more failures trip it, not
#		10; a notice line names it
#
# Before this behaviour a reload reset each of them (closed, empty
# window): inc let 20 requests reach the failing origin, inc10 10, len 20,
# and win needed 10.  The figures are printed (note) as measured.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ start reload log_size log_since /;
use CB::Origin;
use CB::Response qw/ status header /;
use CB::Status qw/ breaker_at /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(25);

sub conf {
	my (%o) = @_;
	my $rate = $o{rate};
	my $win_rate = $o{win_rate};
	my $len = $o{len};

	return CB::Nginx::conf(2, <<"EOF");
    circuit_breaker_zone cb:256k;

    upstream inc {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker failure_rate=$rate open=20s jitter=0% probes=1;
    }

    upstream inc10 {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=10 failure_rate=$rate open=20s
                        jitter=0% probes=1;
    }

    upstream len {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=$len open=20s jitter=0% probes=1;
    }

    upstream win {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=60s min_requests=10 failure_rate=$win_rate
                        consecutive=off open=20s jitter=0% probes=1;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /inc/ {
            proxy_pass http://inc;
        }

        location /inc10/ {
            proxy_pass http://inc10;
        }

        location /len/ {
            proxy_pass http://len;
        }

        location /win/ {
            proxy_pass http://win;
        }

        location = /status {
            circuit_breaker_status;
        }
    }
EOF
}

$t->write_file_expand('nginx.conf',
	conf(rate => '50%', win_rate => '50%', len => '10s'));

my $hits = start($t, 8081);

###############################################################################

# n failing requests to a location; their statuses

sub failing {
	my ($loc, $n, $tag) = @_;
	return map { status(http_get("/$loc/?status=500&$tag=$_")) } 1 .. $n;
}

sub at_origin {
	my ($loc) = @_;
	return CB::Origin::hits($hits, qr!^/\Q$loc\E/!);
}

sub b {
	my ($up) = @_;
	return breaker_at("/status?upstream=$up", route => 'default');
}

# trip them all, and fill win's window part way

my @s = failing('inc', 20, 'trip');
is($s[-1], 500, 'inc: 20 failures reach the origin');
@s = failing('inc10', 10, 'trip');
is($s[-1], 500, 'inc10: 10 failures reach the origin');
@s = failing('len', 20, 'trip');
is(join(' ', failing('win', 6, 'fill')), '500 500 500 500 500 500',
	'win: 6 failures, below min_requests');

is(b('inc')->{state}, 'open', 'inc open');
is(b('inc10')->{state}, 'open', 'inc10 open');
is(b('len')->{state}, 'open', 'len open');
my $opened_at = time();
my $inc_before = b('inc');

###############################################################################

# the operator tunes during the incident

my $size = log_size($t);
$t->write_file_expand('nginx.conf',
	conf(rate => '80%', win_rate => '40%', len => '20s'));
ok(reload($t), 'reloaded');
my $log = log_since($t, $size);

my %before = map { $_ => at_origin($_) } qw/ inc inc10 len win /;

@s = failing('inc', 40, 'after');
my $inc_n = at_origin('inc') - $before{inc};
@s = failing('inc10', 30, 'after');
my $inc10_n = at_origin('inc10') - $before{inc10};
@s = failing('len', 40, 'after');
my $len_n = at_origin('len') - $before{len};

my ($win_n, $win_to_trip) = (0, undef);
for my $i (1 .. 20) {
	my $st = status(http_get("/win/?status=500&after=$i"));
	if ($st eq '503') {
		$win_to_trip = $i - 1;
		last;
	}
}
$win_n = at_origin('win') - $before{win};

note("requests that reached the still-failing origin after the reload, "
	. "breaker open: inc (min_requests=20) $inc_n of 40, "
	. "inc10 (min_requests=10) $inc10_n of 30, len (window 10s->20s) "
	. "$len_n of 40; win (closed, 6 of min_requests=10 in its window) "
	. "tripped after " . ($win_to_trip // 'more than 20'));

is($inc_n, 0, 'inc: no request reached the origin after the reload');
is($inc10_n, 0, 'inc10: none either');
is($len_n, 0, 'len: none either');

my $inc = b('inc');
is($inc->{state}, 'open', 'inc: status shows it open');
is($inc->{totals}{opened}, 1, 'inc: opened still 1 (no counter reset)');
is($inc->{totals}{requests}, $inc_before->{totals}{requests},
	'inc: requests kept');
ok($inc->{totals}{short_circuited} >= 40,
	'inc: short_circuited counts on from before')
	or diag("short_circuited $inc->{totals}{short_circuited}");

my $len = b('len');
is($len->{window}{seconds}, 20, 'len: the new window length');
is($len->{totals}{opened}, 1, 'len: totals carried into its new memory');

is($win_to_trip, 4, 'win: its window kept, 4 more failures trip it');

like($log, qr/\[warn\].*circuit breaker "inc\/default": parameters changed on reload while open, kept open until its probe, window kept/,
	'warn line names inc');
like($log, qr/\[warn\].*circuit breaker "len\/default": parameters changed on reload while open, kept open until its probe, window emptied/,
	'warn line names len, window emptied');
like($log, qr/\[notice\].*circuit breaker "win\/default": parameters changed on reload, closed, window kept/,
	'notice line names win');
like($log, qr/\[notice\].*circuit breaker zone "cb": 0 breaker\(s\) dropped, 4 retuned by the new configuration/,
	'the zone line counts them');

###############################################################################

# the probe: once the cooldown drawn before the reload has passed, one
# request reaches the origin, fails, and the breaker opens again

my $ra = header(http_get('/inc/?status=500&ra=1'), 'Retry-After') // 20;
my $wait = $opened_at + 20 - time();
sleep($wait + 0.3) if $wait > -0.3;

my $n0 = at_origin('inc');
@s = failing('inc', 5, 'probe');
my $probe_n = at_origin('inc') - $n0;
is($probe_n, 1, 'inc: its probe is the only request at the origin')
	or diag("statuses: @s (Retry-After was $ra)");
is($s[0], 500, 'inc: the probe went through');
is(b('inc')->{state}, 'open', 'inc: the failed probe opened it again');
is(b('inc')->{totals}{opened}, 2, 'inc: opened 2');

###############################################################################
