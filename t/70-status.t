#!/usr/bin/perl

# Status location, JSON: every field of docs/status.md's example, with its JSON
# type, followed while a breaker goes closed -> open -> half-open -> closed
# (window, state, state_code, since/retry_at, totals, last_transition,
# cooldown_ms, latency percentiles), the zone's figures, a route breaker
# beside the upstream's own one, the upstream/route filters, HEAD, and the
# 400 answers to a bad query string.
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/70-status.t

###############################################################################

use warnings;
use strict;

use Test::More;

use B qw//;
use FindBin;
use JSON::PP qw//;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT http_end /;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Response qw/ status body /;
use CB::Release qw/ version /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(132);

$t->write_file_expand('nginx.conf', conf(2, <<'EOF'));
    circuit_breaker_zone cb:1m;

    # opens on the 4th request when 3 of them failed; two good probes close
    upstream up {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 failure_rate=50% open=1s
                        max_open=10s jitter=0% probes=2 probe_interval=100ms;
    }

    upstream other {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=5s min_requests=4 open=1s jitter=0%;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        proxy_read_timeout 5s;

        location /d/ {
            proxy_pass http://up;
        }

        location /r/ {
            proxy_pass http://up;
            circuit_breaker_route checkout;
        }

        location /o/ {
            proxy_pass http://other;
        }

        location = /status {
            circuit_breaker_status;
        }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

# JSON type of a freshly decoded value (before anything stringifies it)

sub jtype {
	my ($v) = @_;
	return 'null' unless defined $v;
	return 'bool' if JSON::PP::is_bool($v);
	return lc ref $v if ref $v;
	my $f = B::svref_2object(\$v)->FLAGS;
	return 'string' if $f & B::SVp_POK;
	return 'int' if ($f & B::SVp_IOK) && !($f & B::SVp_NOK);
	return 'float' if $f & B::SVp_NOK;
	return 'unknown';
}

# docs/status.md's example breaker object (Status location): field => JSON type
# ("num": an integer or a float; "float?": a float or null, and so on)

my %breaker_fields = (
	upstream => 'string', route => 'string', state => 'string',
	state_code => 'int', dry_run => 'bool', forced => 'string?',
	since => 'float', retry_at => 'float?',
	window => 'hash', latency_ms => 'hash', cooldown_ms => 'int',
	consecutive_probe_successes => 'int', totals => 'hash',
	last_transition => 'string',
	# the window that tripped it, while open or half-open
	tripped => 'hash?',
	# recovery
	probes_needed => 'int', ramp_share => 'float', probe_uri => 'string?',
	# the episode's start: the trip out of closed (null while closed)
	open_since => 'float?',
);
my %window_fields = (
	seconds => 'int', requests => 'int', failures => 'int', slow => 'int',
	failure_rate => 'float', slow_rate => 'float',
);
my %latency_fields = (p50 => 'int?', p95 => 'int?', p99 => 'int?');
my %tripped_fields = (by => 'string', threshold => 'float', suspected => 'bool',
	window => 'hash');
my %totals_fields = map { $_ => 'int' }
	qw/ requests failures short_circuited probes tls_errors
		retry_after_503 opened half_opened closed ramp_shed explained /;
my %zone_fields = (
	zone => 'string', size => 'int', used => 'int', alloc_failures => 'int',
	module_version => 'string', breakers => 'array',
);

# checks that $obj has exactly the fields of %$spec with their types;
# returns a list of problems

sub check_fields {
	my ($what, $obj, $spec) = @_;
	my @bad;

	return ("$what: not an object") unless ref $obj eq 'HASH';

	for my $k (sort keys %$spec) {
		if (!exists $obj->{$k}) {
			push @bad, "$what.$k missing";
			next;
		}
		my $want = $spec->{$k};
		my $got = jtype($obj->{$k});
		my $opt = $want =~ s/\?$//;
		next if $got eq $want || ($opt && $got eq 'null');
		push @bad, "$what.$k is $got, not $spec->{$k}";
	}
	for my $k (sort keys %$obj) {
		push @bad, "$what.$k unexpected" unless exists $spec->{$k};
	}

	return @bad;
}

# an upstream's own breaker adds its retry budget ("retries", on by default) and,
# with per-server ejection, its servers (see t/46-eject.t)

my %retries_fields = (window => 'hash', total => 'int', denied => 'int');
my %retries_window_fields = map { $_ => 'int' }
	qw/ seconds first_attempts retries allowance /;

sub check_breaker_types {
	my ($b) = @_;
	my $name = ref $b eq 'HASH'
		? "$b->{upstream}/$b->{route}" : 'breaker';
	my @own;
	if (ref $b eq 'HASH' && $b->{route} eq 'default') {
		my %copy = %$b;
		if (exists $copy{retries}) {
			my $r = delete $copy{retries};
			push @own, check_fields("$name.retries", $r, \%retries_fields),
				check_fields("$name.retries.window", $r->{window},
					\%retries_window_fields);
		}
		push @own, "$name.servers is not an array"
			if exists $copy{servers} && ref delete $copy{servers} ne 'ARRAY';
		$b = \%copy;
	}
	push @own, check_fields("$name.tripped", $b->{tripped}, \%tripped_fields),
		check_fields("$name.tripped.window", $b->{tripped}{window},
			\%window_fields)
		if ref $b eq 'HASH' && ref $b->{tripped};
	return (@own, check_fields($name, $b, \%breaker_fields),
		check_fields("$name.window", $b->{window}, \%window_fields),
		check_fields("$name.latency_ms", $b->{latency_ms},
			\%latency_fields),
		check_fields("$name.totals", $b->{totals}, \%totals_fields));
}

# GET /status$query (the status page): (raw response, decoded JSON or undef, type problems)

sub status_page {
	my ($query) = @_;
	my $r = http_get('/status' . ($query // ''));
	return ($r) unless defined $r && $r =~ /\x0d\x0a\x0d\x0a(.*)\z/s;
	my $json = eval { JSON::PP->new->decode($1) };
	diag("bad JSON: $@") if $@;
	return ($r) unless $json;

	my @bad = check_fields('status', $json, \%zone_fields);
	push @bad, map { check_breaker_types($_) }
		@{ ref $json->{breakers} eq 'ARRAY' ? $json->{breakers} : [] };

	return ($r, $json, \@bad);
}

sub breaker {
	my ($json, $upstream, $route) = @_;
	my @b = grep { $_->{upstream} eq $upstream && $_->{route} eq $route }
		@{ $json->{breakers} || [] };
	return @b == 1 ? $b[0] : undef;
}

sub names {
	my ($json) = @_;
	return join ' ', sort map { "$_->{upstream}/$_->{route}" }
		@{ $json->{breakers} || [] };
}

# a time near now (Unix seconds with milliseconds)

sub near {
	my ($v, $when, $slack) = @_;
	return defined $v && !ref $v && abs($v - $when) <= ($slack // 1.5);
}

###############################################################################

# the zone and the JSON response

my ($r, $j, $bad) = status_page();

is(status($r), 200, 'status 200');
like($r, qr!^Content-Type: application/json\x0d$!mi, 'content type json');
ok($j, 'valid JSON') or diag($r);
is_deeply($bad, [], 'zone fields and types');
is($j->{zone}, 'cb', 'zone name');
is($j->{size}, 1048576, 'zone size');
cmp_ok($j->{used}, '>', 0, 'zone used');
cmp_ok($j->{used}, '<=', $j->{size}, 'zone used within size');
is($j->{alloc_failures}, 0, 'zone alloc_failures');
is($j->{module_version}, version(), 'module_version is the crate version');

# each upstream's own breaker, and one per route whose locations pass to it,
# exist from the start, fresh and closed

is(names($j), 'other/default up/checkout up/default',
	'default and route breakers listed at start');
my $fb = breaker($j, 'up', 'default') || {};
ok($fb->{state} eq 'closed' && $fb->{state_code} == 0, 'fresh: closed');
ok(near($fb->{since}, time(), 10), 'fresh: since is Unix seconds')
	or diag("since $fb->{since}");
is_deeply([ @{ $fb->{latency_ms} || {} }{qw/ p50 p95 p99 /} ],
	[ undef, undef, undef ], 'fresh: no latency samples: null');
is_deeply($fb->{window}, { seconds => 10, requests => 0, failures => 0,
	slow => 0, failure_rate => 0, slow_rate => 0 }, 'fresh: empty window');
is_deeply($fb->{totals}, { map { $_ => 0 } keys %totals_fields },
	'fresh: totals 0');

# a route breaker with slow (100 ms) good responses: latency percentiles;
# each upstream response time lies between 100 ms and what the client saw

my $slowest = 0;

for (1 .. 5) {
	my $start = time();
	like(http_get("/r/slow?delay=100&n=$_"), qr!^HTTP/1\.1 200 !,
		"route request $_");
	my $ms = (time() - $start) * 1000;
	$slowest = $ms if $ms > $slowest;
}

($r, $j, $bad) = status_page();
is_deeply($bad, [], 'types after route traffic');
my $rb = breaker($j, 'up', 'checkout');
ok($rb, 'route breaker listed') or diag($r);
$rb ||= {};

is($rb->{state}, 'closed', 'route breaker closed');
is($rb->{state_code}, 0, 'route breaker state_code 0');
is(JSON::PP::is_bool($rb->{dry_run}) && !$rb->{dry_run} ? 'false' : 'bad',
	'false', 'dry_run false');
is($rb->{forced}, undef, 'forced null');
is($rb->{retry_at}, undef, 'closed: retry_at null');
is_deeply([ @{ $rb->{window} || {} }{qw/ seconds requests failures slow /} ],
	[ 10, 5, 0, 0 ], 'route window counts');
ok($rb->{window}{failure_rate} == 0 && $rb->{window}{slow_rate} == 0,
	'route window rates 0');
is($rb->{totals}{requests}, 5, 'route totals requests');
is($rb->{cooldown_ms}, 1000, 'cooldown_ms is "open"');

# the histogram reports within 17.2% + 0.5 ms of the true value

for my $p (qw/ p50 p95 p99 /) {
	my $v = $rb->{latency_ms}{$p};
	ok(defined $v && $v >= 100 * 0.828 - 0.5
		&& $v <= $slowest * 1.172 + 0.5, "route latency $p near 100ms")
		or diag(sprintf("%s: %s, slowest seen by the client %.1fms",
			$p, $v // 'null', $slowest));
}
ok(($rb->{latency_ms}{p50} // 0) <= ($rb->{latency_ms}{p95} // -1)
	&& $rb->{latency_ms}{p95} <= ($rb->{latency_ms}{p99} // -1),
	'p50 <= p95 <= p99');

# the default breaker: 1 good, 2 bad: 3 requests, below min_requests

my $t0 = time();

like(http_get('/d/good'), qr!^HTTP/1\.1 200 !, 'default good');
like(http_get('/d/bad?status=500&n=1'), qr!^HTTP/1\.1 500 !, 'default 500 1');
like(http_get('/d/bad?status=500&n=2'), qr!^HTTP/1\.1 500 !, 'default 500 2');

($r, $j, $bad) = status_page();
is_deeply($bad, [], 'types with two breakers');
my $db = breaker($j, 'up', 'default') || {};
$rb = breaker($j, 'up', 'checkout') || {};

is(names($j), 'other/default up/checkout up/default',
	'route and default breakers listed');
is($db->{state}, 'closed', 'default closed below min_requests');
is($db->{state_code}, 0, 'default state_code 0');
is_deeply([ @{ $db->{window} || {} }{qw/ requests failures slow /} ],
	[ 3, 2, 0 ], 'default window 3/2');
is($db->{window}{failure_rate}, 0.6667, 'failure_rate 2/3 rounded');
is($db->{totals}{failures}, 2, 'totals failures 2');
ok(near($db->{since}, time(), 10), 'closed since: Unix seconds')
	or diag("since $db->{since}");
is($rb->{window}{requests}, 5, 'route breaker untouched');

# the 4th request crosses the rate: open

my $before = CB::Origin::hits($hits);

like(http_get('/d/bad?status=500&n=3'), qr!^HTTP/1\.1 500 !, 'default 500 3');
my $opened = time();

($r, $j, $bad) = status_page();
is_deeply($bad, [], 'types when open');
$db = breaker($j, 'up', 'default') || {};
$rb = breaker($j, 'up', 'checkout') || {};

is($db->{state}, 'open', 'open');
is($db->{state_code}, 2, 'open: state_code 2');
ok(near($db->{since}, $opened, 1), 'open: since is now')
	or diag("since $db->{since}, now $opened");
is($db->{open_since}, $db->{since}, 'open: open_since, the trip');
my $trip_since = $db->{since};
ok(defined $db->{retry_at} && abs($db->{retry_at} - $db->{since} - 1) < 0.01,
	'open: retry_at = since + 1s')
	or diag("since $db->{since} retry_at " . ($db->{retry_at} // 'null'));
is($db->{cooldown_ms}, 1000, 'open: cooldown_ms');
is_deeply([ @{ $db->{window} || {} }{qw/ requests failures /} ], [ 4, 3 ],
	'open: window 4/3');
is($db->{window}{failure_rate}, 0.75, 'open: failure_rate');
is($db->{totals}{opened}, 1, 'open: totals opened 1');
is($db->{totals}{half_opened}, 0, 'open: totals half_opened 0');
is($db->{totals}{closed}, 0, 'open: totals closed 0');
is($db->{totals}{requests}, 4, 'open: totals requests');
is($db->{totals}{failures}, 3, 'open: totals failures');
is($db->{last_transition}, 'failure rate 75% (3/4) >= 50% in 10s',
	'open: last_transition');
my $tripped = { by => 'failure_rate', threshold => 0.5,
	suspected => JSON::PP::false,
	window => { seconds => 10, requests => 4, failures => 3, slow => 0,
		failure_rate => 0.75, slow_rate => 0 } };
is_deeply($db->{tripped}, $tripped, 'open: tripped by the window 3/4');
is(jtype($db->{tripped}{suspected}), 'bool', 'open: tripped.suspected bool');
is($fb->{tripped}, undef, 'fresh: tripped null');
is($fb->{open_since}, undef, 'fresh: open_since null');
is($rb->{state}, 'closed', 'open: route breaker still closed');

# short-circuited while open

like(http_get('/d/sc?n=1'), qr!^HTTP/1\.1 503 !, 'short-circuit 1');
like(http_get('/d/sc?n=2'), qr!^HTTP/1\.1 503 !, 'short-circuit 2');
is(CB::Origin::hits($hits) - $before, 1, 'open: no origin hits');

($r, $j) = status_page();
$db = breaker($j, 'up', 'default') || {};
is($db->{totals}{short_circuited}, 2, 'short_circuited 2');
is($db->{totals}{requests}, 4, 'short-circuited not counted as requests');
is($db->{totals}{probes}, 0, 'no probes yet');

# after the cooldown: the first probe (slow) makes it half-open

my $wait = ($db->{retry_at} // $opened + 1) - time() + 0.1;
sleep($wait) if $wait > 0;

my $s = http_get('/d/probe?delay=400&n=1', start => 1);
my $half = time();
sleep(0.15);

($r, $j, $bad) = status_page();
is_deeply($bad, [], 'types when half-open');
$db = breaker($j, 'up', 'default') || {};

is($db->{state}, 'half_open', 'half-open');
is($db->{state_code}, 1, 'half-open: state_code 1');
ok(near($db->{since}, $half, 0.5), 'half-open: since')
	or diag("since $db->{since}, probe sent $half");
is($db->{open_since}, $trip_since, 'half-open: open_since still the trip');
ok(near($db->{retry_at}, $half, 1), 'half-open: retry_at near now')
	or diag('retry_at ' . ($db->{retry_at} // 'null'));
is($db->{totals}{half_opened}, 1, 'half-open: totals half_opened 1');
is($db->{totals}{probes}, 1, 'half-open: totals probes 1');
is($db->{consecutive_probe_successes}, 0, 'half-open: no good probe yet');
is($db->{last_transition}, 'cooldown 1s elapsed',
	'half-open: last_transition');
is_deeply($db->{tripped}, $tripped, 'half-open: still the trip\'s window');

# a second request while the probe is in flight is short-circuited

like(http_get('/d/sc?n=3'), qr!^HTTP/1\.1 503 (?s:.*)^X-Circuit-State: half_open\x0d$!m,
	'half-open: other request 503');

like(http_end($s), qr!^HTTP/1\.1 200 !, 'probe 1 good');

($r, $j) = status_page();
$db = breaker($j, 'up', 'default') || {};
is($db->{state}, 'half_open', 'one good probe of two: still half-open');
is($db->{consecutive_probe_successes}, 1, 'consecutive_probe_successes 1');
ok(($db->{latency_ms}{p99} // 0) >= 400 * 0.828 - 0.5,
	'half-open: the probe\'s 400 ms among the percentiles')
	or diag(explain($db->{latency_ms}));
is($db->{window}{requests}, 4, 'half-open: the probe not counted in the window');
is($db->{totals}{short_circuited}, 3, 'short_circuited 3');

# the second good probe closes it, with a fresh window

sleep(0.15);
like(http_get('/d/probe?n=2'), qr!^HTTP/1\.1 200 !, 'probe 2 good');
my $closed = time();

($r, $j, $bad) = status_page();
is_deeply($bad, [], 'types when closed again');
$db = breaker($j, 'up', 'default') || {};

is($db->{state}, 'closed', 'closed again');
is($db->{state_code}, 0, 'closed: state_code 0');
ok(near($db->{since}, $closed, 0.5), 'closed: since')
	or diag("since $db->{since}, now $closed");
is($db->{open_since}, undef, 'closed: open_since null, the episode over');
is($db->{retry_at}, undef, 'closed: retry_at null');
is_deeply([ @{ $db->{window} || {} }{qw/ requests failures /} ], [ 0, 0 ],
	'closed: fresh window');
is($db->{window}{failure_rate}, 0, 'closed: failure_rate 0');
is($db->{consecutive_probe_successes}, 0, 'closed: probe count reset');
is($db->{cooldown_ms}, 1000, 'closed: cooldown_ms back to "open"');
is_deeply([ @{ $db->{totals} || {} }{qw/ opened half_opened closed probes
	short_circuited tls_errors retry_after_503 /} ], [ 1, 1, 1, 2, 3, 0, 0 ],
	'closed: totals');
is($db->{last_transition}, '2 good probes', 'closed: last_transition');
ok(exists $db->{tripped} && !defined $db->{tripped}, 'closed: tripped null');
is(CB::Origin::hits($hits, qr!^/d/probe!), 2, 'origin saw the 2 probes only');
is(CB::Origin::hits($hits, qr!^/d/sc!), 0, 'origin saw no short-circuited');

# filters

http_get('/o/x');

($r, $j) = status_page();
is(names($j), 'other/default up/checkout up/default', 'all breakers');

($r, $j) = status_page('?upstream=up');
is(names($j), 'up/checkout up/default', 'filter upstream=up');
is($j->{zone}, 'cb', 'filtered: zone still shown');

($r, $j) = status_page('?upstream=other');
is(names($j), 'other/default', 'filter upstream=other');

($r, $j) = status_page('?route=checkout');
is(names($j), 'up/checkout', 'filter route=checkout');

($r, $j) = status_page('?route=default');
is(names($j), 'other/default up/default', 'filter route=default');

($r, $j) = status_page('?upstream=up&route=default');
is(names($j), 'up/default', 'filter upstream and route');

($r, $j, $bad) = status_page('?upstream=nosuch');
is(status($r), 200, 'unknown upstream: 200');
ok($j && ref $j->{breakers} eq 'ARRAY' && @{ $j->{breakers} } == 0,
	'unknown upstream: empty list') or diag($r);
is_deeply($bad, [], 'unknown upstream: zone fields');

($r, $j) = status_page('?upstream=other&route=checkout');
ok($j && @{ $j->{breakers} } == 0, 'route of another upstream: empty list');

($r, $j) = status_page('?format=json&upstream=up&route=checkout');
is(names($j), 'up/checkout', 'format=json with filters');

# HEAD: the headers of GET, no body

$r = http_head('/status');
is(status($r), 200, 'HEAD 200');
like($r, qr!^Content-Type: application/json\x0d$!mi, 'HEAD content type');
is(body($r), '', 'HEAD: no body');

# bad query strings: 400 with a one-line reason

for my $case (
	[ '?foo=1', 'unknown parameter "foo", expected one of: format, upstream, route, action, server, history, keys, key_prefix, key_limit, proxy' ],
	[ '?format=xml', 'invalid value "xml" for "format", expected one of: json, prometheus, html, fleet' ],
	[ '?upstream=', 'empty value for "upstream"' ],
	[ '?route=a&route=b', 'duplicate parameter "route"' ],
	[ '?upstream=%zz', 'invalid percent-encoding in "upstream"' ],
	[ '?action=reset',
		'"action" needs a POST request to a location with "control=on"' ],
) {
	my ($q, $reason) = @$case;
	$r = http_get("/status$q");
	ok(status($r) == 400 && body($r) eq "$reason\n", "400 for $q")
		or diag($r);
}

$r = http(<<EOF);
POST /status HTTP/1.0
Host: localhost
Content-Length: 0

EOF
is(status($r), 405, 'POST without control: 405');

cmp_ok(time() - $t0, '<', 15, 'timeline kept short');

###############################################################################
