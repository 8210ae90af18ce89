#!/usr/bin/perl

# Status location with control=on: POST ?upstream=&route=&action=
# force_open | force_close | reset, with 4 workers sharing the result;
# forced states hold (past the cooldown, through failures, through a
# reload) until reset; the 400/404/405 answers; allow/deny in the control
# location; the warn line naming the client.
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/72-control.t

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT http_end /;
use CB::Nginx qw/ conf start req reload log_size log_since /;
use CB::Origin;
use CB::Status qw/ breakers /;
use CB::Response qw/ status body header json /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy access realip/)->plan(73);

$t->write_file_expand('nginx.conf', conf(4, <<'EOF'));
    circuit_breaker_zone cb:1m;

    log_format cb '$pid $uri $status "$circuit_breaker_state"';

    upstream up {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 failure_rate=50% open=1s
                        jitter=0% probes=1 probe_interval=100ms;
    }

    # no location sends route "checkout" to this one
    upstream other {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 open=1s jitter=0%;
    }

    # an upstream without a breaker
    upstream plain {
        server 127.0.0.1:%%PORT_8081%%;
    }

    server {
        # one listening socket per worker: the kernel spreads connections
        # over all four, however busy the machine is
        listen       127.0.0.1:8080 reuseport;
        server_name  localhost;

        proxy_read_timeout 5s;

        location /d/ {
            proxy_pass http://up;
            access_log %%TESTDIR%%/cb.log cb;
        }

        location /r/ {
            proxy_pass http://up;
            circuit_breaker_route checkout;
        }

        location /o/ {
            proxy_pass http://other;
        }

        location /p/ {
            proxy_pass http://plain;
        }

        # X-Real-IP lets a test client on 127.0.0.1 pose as another address
        location = /control {
            circuit_breaker_status control=on;
            set_real_ip_from 127.0.0.1;
            real_ip_header X-Real-IP;
            allow 127.0.0.1;
            deny all;
        }

        location = /status {
            circuit_breaker_status;
        }

        location = /denied {
            circuit_breaker_status control=on;
            deny all;
        }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

# a control request as curl sends it, with the header control needs

my $CTL = 'X-Circuit-Breaker-Control: 1';

sub control {
	my ($query, @headers) = @_;
	return req('POST', "/control?$query", $CTL, @headers);
}

# a breaker as GET /status shows it

sub breaker {
	my ($upstream, $route) = @_;
	my @b = breakers("/status?upstream=$upstream&route=$route");
	return @b == 1 ? $b[0] : {};
}

# sends @uris over as many connections at once, then reads all answers

sub parallel {
	my (@uris) = @_;
	my @s = map { http_get($_, start => 1) } @uris;
	return map { defined $_ ? http_end($_) : undef } @s;
}

sub hits {
	return CB::Origin::hits($hits, @_);
}

###############################################################################

# the default breaker exists from the start

is(breaker('up', 'default')->{state}, 'closed', 'up/default closed at start');

# bad requests: nothing changes, nothing is logged

my $log0 = log_size($t);

for my $case (
	[ 'POST', '', 400, 'missing parameter "upstream"' ],
	[ 'POST', 'action=force_open', 400, 'missing parameter "upstream"' ],
	[ 'POST', 'upstream=up', 400, 'missing parameter "action"' ],
	[ 'POST', 'upstream=up&route=default', 400,
		'missing parameter "action"' ],
	[ 'POST', 'upstream=up&action=explode', 400,
		'invalid value "explode" for "action", expected one of: force_open, force_close, reset, eject, restore' ],
	[ 'POST', 'upstream=up&action=rest', 400,
		'invalid value "rest" for "action", did you mean "reset"? '
		. 'expected one of: force_open, force_close, reset, eject, restore' ],
	[ 'POST', 'upstream=up&action=', 400,
		'invalid value "" for "action", expected one of: force_open, force_close, reset, eject, restore' ],
	[ 'POST', 'upstream=up&action=reset&bogus=1', 400,
		'unknown parameter "bogus", expected one of: format, upstream, route, action, server, history, keys, key_prefix, key_limit, proxy' ],
	[ 'POST', 'upstream=up&action=reset&action=reset', 400,
		'duplicate parameter "action"' ],
	[ 'POST', 'upstream=nosuch&action=force_open', 404,
		'no circuit breaker for upstream "nosuch" route "default"' ],
	[ 'POST', 'upstream=plain&action=force_open', 404,
		'no circuit breaker for upstream "plain" route "default"' ],
	[ 'POST', 'upstream=up&route=nosuch&action=force_open', 404,
		'no circuit breaker for upstream "up" route "nosuch"' ],
	[ 'GET', 'upstream=up&action=force_open', 400,
		'"action" needs a POST request to a location with "control=on"' ],
) {
	my ($method, $q, $code, $reason) = @$case;
	my $r = req($method, "/control?$q", $CTL);
	ok(status($r) == $code && body($r) eq "$reason\n"
		&& header($r, 'Content-Type') =~ m!^text/plain!,
		"$method ?$q: $code") or diag($r);
}

for my $method (qw/ PUT DELETE PATCH /) {
	is(status(req($method, '/control?upstream=up&action=force_open')), 405,
		"$method: 405");
}

is(status(req('POST', '/status?upstream=up&action=force_open', $CTL)), 405,
	'POST without control=on: 405');
is(status(req('POST', '/denied?upstream=up&action=force_open', $CTL)), 403,
	'deny all: 403');
is(status(control('upstream=up&action=force_open', 'X-Real-IP: 192.0.2.1')),
	403, 'allow 127.0.0.1 only: another client address gets 403');
is(status(req('GET', '/denied')), 403, 'deny all: GET 403 too');

my $b = breaker('up', 'default');
ok($b->{state} eq 'closed' && !defined $b->{forced}
	&& $b->{totals}{opened} == 0, 'rejected requests changed nothing');
unlike(log_since($t, $log0), qr/circuit breaker "/,
	'rejected requests logged no action');

# GET on the control location is the plain status page

my $r = http_get('/control?upstream=up');
ok(status($r) == 200 && json($r) && json($r)->{zone} eq 'cb',
	'GET on the control location: status JSON');

# force_open (route defaults to "default"), with a request body discarded

my $before = hits();
$log0 = log_size($t);

$r = http(<<EOF);
POST /control?upstream=up&action=force_open HTTP/1.0
Host: localhost
$CTL
Content-Length: 5

hello
EOF

is(status($r), 200, 'force_open: 200');
is(header($r, 'Content-Type'), 'application/json', 'force_open: JSON');
my $j = json($r) || {};
ok($j->{upstream} eq 'up' && $j->{route} eq 'default',
	'force_open: the default route by default') or diag($r);
ok($j->{state} eq 'open' && $j->{state_code} == 2 && $j->{forced} eq 'open',
	'force_open: open, forced "open"') or diag($r);
is_deeply([ sort keys %$j ], [ sort qw/ upstream route state state_code
	dry_run forced since retry_at window latency_ms cooldown_ms
	consecutive_probe_successes totals last_transition
	probes_needed ramp_share probe_uri tripped open_since / ],
	'force_open: the breaker object of the status page');
like(log_since($t, $log0),
	qr/\[warn\] .*circuit breaker "up\/default" forced open by 127\.0\.0\.1/,
	'force_open: logged at warn with the client');

# every worker short-circuits, with no origin hit

my @r = parallel(map { "/d/x?n=$_" } 1 .. 32);
is(scalar(grep { status($_) == 503
	&& (header($_, 'X-Circuit-State') // '') eq 'open'
	&& (header($_, 'Retry-After') // '') =~ /^[1-9]\d*$/ } @r), 32,
	'forced open: 32 concurrent requests: 503, X-Circuit-State: open');
is(hits() - $before, 0, 'forced open: no origin hit');

my %pids = map { /^(\d+) \/d\/x 503 "open"$/ ? ($1 => 1) : () }
	split /\n/, $t->read_file('cb.log');
cmp_ok(scalar keys %pids, '>=', 2, 'forced open: several workers answered');

# it holds past the cooldown (open=1s): no half-open, no probe

sleep(1.3);

@r = parallel(map { "/d/later?n=$_" } 1 .. 8);
is(scalar(grep { status($_) == 503
	&& (header($_, 'X-Circuit-State') // '') eq 'open' } @r), 8,
	'forced open: still open after the cooldown');
is(hits() - $before, 0, 'forced open: still no origin hit');
$b = breaker('up', 'default');
ok($b->{state} eq 'open' && $b->{forced} eq 'open'
	&& $b->{totals}{probes} == 0 && $b->{totals}{half_opened} == 0,
	'forced open: no probe, never half-open');
is($b->{totals}{short_circuited}, 40, 'forced open: short_circuited 40');

# force_close: a 100% failing origin never opens it

$log0 = log_size($t);
$r = control('upstream=up&route=default&action=force_close');
$j = json($r) || {};
ok(status($r) == 200 && $j->{state} eq 'closed' && $j->{state_code} == 0
	&& $j->{forced} eq 'closed', 'force_close: closed, forced "closed"')
	or diag($r);
like(log_since($t, $log0),
	qr/\[warn\] .*circuit breaker "up\/default" forced closed by 127\.0\.0\.1/,
	'force_close: logged');

$before = hits();
@r = parallel(map { "/d/fail?status=500&n=$_" } 1 .. 12);
is(join(' ', map { status($_) } @r), join(' ', (500) x 12),
	'forced closed: every failure passed through');
is(hits() - $before, 12, 'forced closed: every request reached the origin');
is(status(http_get('/d/after')), 200, 'forced closed: still passes');

$b = breaker('up', 'default');
ok($b->{state} eq 'closed' && $b->{forced} eq 'closed',
	'forced closed: still closed') or diag(explain($b));
is($b->{totals}{opened}, 1, 'forced closed: never opened (only forced once)');
is($b->{window}{failures}, 12, 'forced closed: failures still recorded');

# reset: closed, fresh, not forced; then it trips as usual

$log0 = log_size($t);
$r = control('upstream=up&action=reset');
$j = json($r) || {};
ok(status($r) == 200 && $j->{state} eq 'closed' && !defined $j->{forced}
	&& exists $j->{forced}, 'reset: closed, forced null') or diag($r);
ok($j->{window}{requests} == 0 && $j->{window}{failures} == 0
	&& $j->{consecutive_probe_successes} == 0 && $j->{cooldown_ms} == 1000,
	'reset: fresh window') or diag($r);
is($j->{totals}{requests}, 13, 'reset: totals kept');
like(log_since($t, $log0),
	qr/\[warn\] .*circuit breaker "up\/default" reset by 127\.0\.0\.1/,
	'reset: logged');

is(join(' ', map { status(http_get("/d/fail?status=500&again=$_")) } 1 .. 5),
	'500 500 500 500 503', 'after reset: trips on the 4th failure');
$b = breaker('up', 'default');
ok($b->{state} eq 'open' && !defined $b->{forced} && $b->{totals}{opened} == 2,
	'after reset: opened by failures');

# reset on an open breaker closes it

$j = json(control('upstream=up&action=reset')) || {};
is($j->{state}, 'closed', 'reset of a tripped breaker: closed');
is(status(http_get('/d/fine')), 200, 'reset of a tripped breaker: passes');

# a route breaker, controlled before it saw any traffic

$before = hits(qr!^/r/!);
$r = control('upstream=up&route=checkout&action=force_open');
$j = json($r) || {};
ok(status($r) == 200 && $j->{route} eq 'checkout' && $j->{forced} eq 'open',
	'route force_open before any traffic') or diag($r);
is(join(' ', map { status($_) } parallel(map { "/r/x?n=$_" } 1 .. 8)),
	join(' ', (503) x 8), 'route forced open: 503');
is(hits(qr!^/r/!) - $before, 0, 'route forced open: no origin hit');
is(status(http_get('/d/unaffected')), 200, 'the default breaker unaffected');
is(breaker('up', 'default')->{forced}, undef, 'default not forced');

# forced states survive a reload with the same configuration

control('upstream=up&action=force_close');
my %old = map { /^(\d+) / ? ($1 => 1) : () } split /\n/, $t->read_file('cb.log');
reload($t);

is(breaker('up', 'checkout')->{forced}, 'open', 'reload: forced open kept');
is(breaker('up', 'default')->{forced}, 'closed', 'reload: forced closed kept');

$before = hits();
@r = parallel(map { "/r/x?after=reload&n=$_" } 1 .. 8);
is(scalar(grep { status($_) == 503
	&& (header($_, 'X-Circuit-State') // '') eq 'open' } @r), 8,
	'reload: route still short-circuited');
@r = parallel(map { "/d/fail?status=500&after=reload&n=$_" } 1 .. 8);
is(join(' ', map { status($_) } @r), join(' ', (500) x 8),
	'reload: default still forced closed');
is(hits() - $before, 8, 'reload: origin saw the default route only');

my @new = grep { !$old{$_} } map { m!^(\d+) /d/fail 500 ! ? $1 : () }
	split /\n/, $t->read_file('cb.log');
is(scalar @new, 8, 'reload: new workers answered');

$b = breaker('up', 'default');
ok($b->{state} eq 'closed' && $b->{forced} eq 'closed',
	'reload: default closed after 8 failures');

# reset both

$log0 = log_size($t);
ok(json(control('upstream=up&route=checkout&action=reset'))->{state}
	eq 'closed', 'route reset');
is(status(http_get('/r/back')), 200, 'route reset: passes');
ok(!defined breaker('up', 'checkout')->{forced}, 'route reset: not forced');
like(log_since($t, $log0),
	qr/circuit breaker "up\/checkout" reset by 127\.0\.0\.1/,
	'route reset: logged');

# a route name that exists, but never with this upstream: no such breaker
# (an operator's slip in an incident must not be taken as done)

$r = control('upstream=other&route=checkout&action=force_open');
ok(status($r) == 404 && body($r) eq
	"no circuit breaker for upstream \"other\" route \"checkout\"\n",
	'route of another upstream: 404') or diag($r);
$j = json(http_get('/status?upstream=other')) || {};
is(join(' ', map { $_->{route} } @{ $j->{breakers} || [] }), 'default',
	'route of another upstream: no breaker created');

# every action logged once, at warn

my $log = $t->read_file('error.log');
my @lines = $log =~ /^(.*circuit breaker "up\/[a-z]+" (?:forced open|forced closed|reset) by .*)$/mg;
is(scalar @lines, 7, 'seven control actions logged') or diag(join "\n", @lines);
is(scalar(grep { /\[warn\]/ && / by 127\.0\.0\.1(?:,|$)/ } @lines), 7,
	'all at warn, with the client address');

###############################################################################
