#!/usr/bin/perl

# prove: alone
# The dashboard read at a glance, in headless Chromium at 1 280 x 800 (and
# 1 024 x 768): with several upstreams, 60-character names, breakers open,
# half-open and forced open, a server ejected, the control buttons and the
# status line, nothing scrolls sideways (the document's scrollWidth is no more
# than the viewport's width) and no button or the "updated" line ends past
# the right edge. "open since" is the episode's start: the trip, not the
# reopen after a failed probe. The chart has the minutes before the page was
# opened, from the server's history (?history=1). Screenshots go to the
# test's directory (a failure's is kept in build/screenshots/).
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/91-dashboard-glance.t

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use POSIX qw/ strftime /;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Browser;
use CB::Nginx qw/ conf start req reload /;
use CB::Origin;
use CB::Status qw/ breakers /;
use CB::Response qw/ status json /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/);
CB::Browser::plan($t, 27);

# 60 characters each
my $long_up = 'payments-gateway-europe-west-primary-cluster-upstream-000001';
my $long_rt = 'checkout-confirmation-with-three-d-secure-and-wallets-000002';

# $extra: more upstreams (a reload adds the adaptive limit's column)
sub config {
	my ($extra) = @_;
	$extra //= '';
	return conf(1, <<"EOF");
    circuit_breaker_zone cb:1m;

$extra

    # its probe fails: reopened, the episode still the trip's
    upstream $long_up {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 failure_rate=50% open=2s
                        jitter=0% probes=1;
    }

    # failed well before the page is opened, then recovered: the chart
    # shows it from the server's history
    upstream hist {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=1s min_requests=4 failure_rate=50% open=1s
                        jitter=0% probes=1;
    }

    # half-open as long as no second request comes
    upstream hp {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=3s min_requests=2 open=1s jitter=0% probes=3
                        probe_interval=1s;
    }

    upstream forced {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker;
    }

    # its second server fails and is ejected for a minute
    upstream pool {
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
        circuit_breaker jitter=0%;
        circuit_breaker_eject min_requests=4 time=60s;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        proxy_read_timeout 10s;

        location /long/ { proxy_pass http://$long_up; }
        location /route/ {
            proxy_pass http://$long_up;
            circuit_breaker_route $long_rt;
        }
        location /hist/ { proxy_pass http://hist; }
        location /hp/ { proxy_pass http://hp; }
        location /pool/ { proxy_pass http://pool; }

        location = /circuit_breaker {
            circuit_breaker_status control=on;
        }
    }
EOF
}

$t->write_file_expand('nginx.conf', config());
my ($hits, $bad) = start($t, 8081, 8082);

###############################################################################

sub breaker {
	my ($upstream, $route) = @_;
	$route //= 'default';
	my @b = breakers("/circuit_breaker?upstream=$upstream&route=$route");
	return @b == 1 ? $b[0] : {};
}

sub server_of {
	my ($b, $port) = @_;
	my ($s) = grep { $_->{address} eq '127.0.0.1:' . port($port) }
		@{ $b->{servers} || [] };
	return $s || {};
}

sub wait_for {
	my ($what, $seconds) = @_;
	my $end = time() + $seconds;
	while (time() < $end) {
		my $v = $what->();
		return $v if $v;
		sleep(0.1);
	}
	return undef;
}

# the points of an SVG path, [x, y] each
sub points {
	my ($d) = @_;
	my @p;
	push @p, [$1, $2] while ($d // '') =~ /[ML]([\d.]+) ([\d.]+)/g;
	return @p;
}

###############################################################################

# before the page is opened: hist fails (opens), then recovers; its window
# (1 s) forgets it, the server's history does not

my $hist_at = time();
is(join(' ', map { status(http_get("/hist/x?status=500&n=$_")) } 1 .. 5),
	'500 500 500 500 503', 'hist: the 4th failure opens it');
sleep(1.2);
is(status(http_get('/hist/probe')), 200, 'hist: a good probe closes it');
is(breaker('hist')->{state}, 'closed', 'hist: closed again');

# the episode: the long-named upstream trips, its probe fails 2 s later and
# reopens it

is(join(' ', map { status(http_get("/long/x?status=500&n=$_")) } 1 .. 5),
	'500 500 500 500 503', 'long: the 4th failure opens it');
my $first = breaker($long_up);
ok(defined $first->{open_since} && $first->{open_since} == $first->{since},
	'long: open since the trip') or diag(explain($first));
sleep(2.3);
is(status(http_get('/long/probe?status=500')), 500, 'long: the probe fails');
my $again = breaker($long_up);
is($again->{state}, 'open', 'long: open again');
ok($again->{since} - $first->{since} >= 2, 'long: its state began anew')
	or diag("since $first->{since} then $again->{since}");
is($again->{open_since}, $first->{since},
	'long: the episode still began at the trip (JSON)');

# the long route: a breaker, closed
is(status(http_get('/route/x')), 200, 'the long route\'s breaker');

# half-open: opened, then one good probe of three
is(join(' ', map { status(http_get("/hp/x?status=500&n=$_")) } 1 .. 2),
	'500 500', 'hp: the 2nd failure opens it');
sleep(1.2);
is(status(http_get('/hp/probe')), 200, 'hp: one good probe');

# forced open by the operator
is(status(req('POST', '/circuit_breaker?upstream=forced&route=default'
	. '&action=force_open', 'X-Circuit-Breaker-Control: 1')), 200,
	'forced: forced open');

# pool's second server ejected
CB::Origin::behave($bad, '* status=500');
wait_for(sub {
	http_get("/pool/x?n=" . rand());
	server_of(breaker('pool'), 8082)->{state} eq 'ejected';
}, 10);
is(server_of(breaker('pool'), 8082)->{state}, 'ejected', 'pool: 8082 ejected');

# the chart's points are 10 s long: the page is opened in a later one than
# hist's failures
my $wait = $hist_at + 10.5 - time();
sleep($wait) if $wait > 0;

###############################################################################

my $b = CB::Browser->new($t);
$b->drive('viewport', width => 1280, height => 800);
my $r = $b->drive('open', url => $b->url('/circuit_breaker'));
ok($r->{ok} && $r->{status} == 200, 'the dashboard at 1280 x 800');

# the chart on first load: hist's failures of more than 10 s ago, open then

$r = $b->row(upstream => 'hist', route => 'default', state => 'closed');
# (the current interval's point is at x 118, those before 4 px apart)
my @fail = points($r->{spark}{'p-fail'});
ok((grep { $_->[1] < 10 && $_->[0] < 115 } @fail),
	'hist: its failure rate before the page was opened, on first load')
	or diag(explain($r->{spark}));
ok($r->{spark}{'p-open'}, 'hist: and the state it was in then (open)')
	or diag(explain($r->{spark}));

# "open since": the trip's time, not the reopen's

$r = $b->row(upstream => $long_up, route => 'default', state => 'open');
my $shown = strftime('%H:%M:%S', localtime(int($first->{since})));
like($r->{cells}{when},
	qr/^open since \Q$shown\E \((?:\d+m )?\d+s\) open (?:\d+m )?\d+s · probe /,
	"long: open since $shown, the trip") or diag(explain($r->{cells}));
my ($m, $sec) = ($r->{cells}{when} // '') =~ /\((?:(\d+)m )?(\d+)s\)/;
my $for = defined $sec ? ($m // 0) * 60 + $sec : undef;
ok(defined $for && abs($for - (time() - $first->{since})) <= 2,
	'long: and for how long') or diag($r->{cells}{when});

$r = $b->row(upstream => 'hp', route => 'default', state => 'half_open');
like($r->{cells}{when}, qr/^open since \d\d:\d\d:\d\d \((?:\d+m )?\d+s\) half-open (?:\d+m )?\d+s · 1\/3 good probes/,
	'hp: half-open within its episode') or diag(explain($r->{cells}));

# nothing past the right edge

$r = $b->drive('layout');
ok($r->{scrollWidth} <= $r->{innerWidth} && !@{ $r->{out} || [1] }
	&& $r->{statusVisible} && $r->{status} =~ /^updated /,
	"1280 x 800: no sideways scroll ($r->{scrollWidth} <= $r->{innerWidth})")
	or diag(explain($r));
my $png = $b->keep('glance-1280x800') // '';
ok(-s $png && -s $png > 10000, "screenshot $png");

$b->drive('viewport', width => 1024, height => 768);
$r = $b->drive('layout');
ok($r->{scrollWidth} <= $r->{innerWidth} && !@{ $r->{out} || [1] }
	&& $r->{statusVisible},
	"1024 x 768: no sideways scroll ($r->{scrollWidth} <= $r->{innerWidth})")
	or diag(explain($r));
$b->keep('glance-1024x768');

# the adaptive limit's column too, at 1 280: still no sideways scroll

$t->write_file_expand('nginx.conf', config(<<'EOF'));
    upstream lim {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker limit=adaptive limit_min=2 limit_max=2
                        limit_initial=2;
    }
EOF
ok(reload($t), 'reloaded with an adaptive limit');
$b->drive('viewport', width => 1280, height => 800);
$r = $b->drive('open', url => $b->url('/circuit_breaker'));
$r = $b->row(upstream => 'lim', route => 'default');
ok($r->{found} && defined $r->{cells}{limit}, 'the limit\'s column')
	or diag(explain($r));
$r = $b->drive('layout');
ok($r->{scrollWidth} <= $r->{innerWidth} && !@{ $r->{out} || [1] }
	&& $r->{statusVisible},
	"1280 x 800 with the limit: no sideways scroll ($r->{scrollWidth} <= $r->{innerWidth})")
	or diag(explain($r));
$b->keep('glance-limit-1280x800');

$r = $b->drive('report');
is_deeply([ @{ $r->{consoleErrors} || [] }, @{ $r->{pageErrors} || [] },
	@{ $r->{csp} || [] } ], [], 'no script errors, no CSP violation');

$b->quit;

###############################################################################
