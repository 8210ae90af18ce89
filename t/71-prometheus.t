#!/usr/bin/perl

# Status location, Prometheus text exposition 0.0.4 (?format=prometheus, or
# an Accept header naming text/plain): valid for "promtool check metrics"
# (no lint), well-formed by our own parser (HELP/TYPE once and before the
# samples, each family contiguous, label syntax and escaping, no duplicate
# series), and the same figures as the JSON of the same moment.
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/71-prometheus.t

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT /;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Response qw/ status body json /;
use CB::Release qw/ version nginx_version /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(76);

$t->write_file_expand('nginx.conf', conf(2, <<'EOF'));
    circuit_breaker_zone cb:1m;

    upstream up {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 failure_rate=50% open=5s
                        jitter=0%;
    }

    upstream other {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=5s min_requests=2 failure_rate=50% open=5s
                        jitter=0% dry_run;
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

        # every character a route name may hold
        location /w/ {
            proxy_pass http://up;
            circuit_breaker_route v1.Cart-x_9;
        }

        location /o/ {
            proxy_pass http://other;
        }

        location = /status {
            circuit_breaker_status;
        }

        location = /control {
            circuit_breaker_status control=on;
        }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

my $prefix = 'nginx_circuit_breaker_';

sub get {
	my ($uri, @headers) = @_;
	my $h = join '', map { "$_\n" } @headers;
	return http(<<EOF);
GET $uri HTTP/1.0
Host: localhost
$h
EOF
}


sub ctype {
	my ($r) = @_;
	return $r && $r =~ /^Content-Type: ([^\x0d]*)\x0d$/mi ? $1 : '';
}

# parses the text exposition format 0.0.4 strictly; returns
# ({ "name{sorted labels}" => value }, { name => type }, [ problems ])

sub parse_prometheus {
	my ($text) = @_;
	my (%samples, %type, %help, %done, @bad);
	my $current = '';

	push @bad, 'no final newline' unless $text =~ /\n\z/;

	my $n = 0;
	for my $line (split /\n/, $text) {
		$n++;
		if ($line =~ /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$/) {
			my ($what, $name, $rest) = ($1, $2, $3);
			push @bad, "$n: $what of $name after its samples"
				if $done{$name} || $current eq $name
				&& exists $samples{"$name:seen"};
			if ($what eq 'HELP') {
				push @bad, "$n: second HELP for $name"
					if $help{$name}++;
				push @bad, "$n: HELP of $name after TYPE"
					if $type{$name};
				push @bad, "$n: bad HELP escape"
					if $rest =~ /\\[^\\n]/;
			} else {
				push @bad, "$n: second TYPE for $name"
					if $type{$name};
				push @bad, "$n: bad type $rest" unless $rest =~
					/^(counter|gauge|histogram|summary|untyped)$/;
				$type{$name} = $rest;
			}
			$done{$current} = 1 if $current ne $name;
			$current = $name;
			next;
		}
		if ($line =~ /^#/) {
			next;
		}
		if ($line eq '') {
			push @bad, "$n: empty line";
			next;
		}

		my ($name, $labels, $value) = $line =~
			/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: -?\d+)?$/
			or do { push @bad, "$n: bad sample line: $line"; next };

		push @bad, "$n: $name has no TYPE before it" unless $type{$name};
		push @bad, "$n: $name has no HELP before it" unless $help{$name};
		push @bad, "$n: family $name not contiguous"
			if $done{$name} || $current ne $name;
		$current = $name;
		$samples{"$name:seen"} = 1;

		push @bad, "$n: bad value $value" unless $value =~
			/^(?:[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]Inf|NaN)$/;

		my @l;
		my $rest = $labels // '';
		while (length $rest) {
			$rest =~ s/^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"//
				or do { push @bad, "$n: bad labels: {$labels}"; last };
			my ($k, $v) = ($1, $2);
			$v =~ s/\\(.)/$1 eq 'n' ? "\n" : $1/ge;
			push @bad, "$n: duplicate label $k" if grep { $_->[0] eq $k } @l;
			push @l, [ $k, $v ];
			last if $rest eq '';
			$rest =~ s/^,// or do { push @bad, "$n: bad labels: {$labels}"; last };
		}

		my $key = $name . '{' . join(',', map { "$_->[0]=$_->[1]" }
			sort { $a->[0] cmp $b->[0] } @l) . '}';
		push @bad, "$n: duplicate series $key" if exists $samples{$key};
		$samples{$key} = $value;
	}

	delete @samples{ grep { /:seen$/ } keys %samples };
	return (\%samples, \%type, \@bad);
}

# "promtool check metrics" (exit 0, no lint output): 2 checks

my $promtool = (grep { -x } '/usr/bin/promtool',
	map { "$_/promtool" } split /:/, $ENV{PATH} // '')[0];

sub promtool_ok {
	my ($t, $text, $name) = @_;

	SKIP: {
	skip 'promtool not installed', 2 unless $promtool;

	$t->write_file('metrics.prom', $text);
	my $file = $t->testdir() . '/metrics.prom';
	my $out = `$promtool check metrics < $file 2>&1`;
	is($? >> 8, 0, "$name: promtool check metrics: exit 0") or diag($out);
	is($out, '', "$name: promtool check metrics: no lint output");
	}
}

# the sample of a breaker's metric

sub metric {
	my ($s, $name, $upstream, $route, %extra) = @_;
	my %l = (zone => 'cb', upstream => $upstream, route => $route, %extra);
	my $key = $prefix . $name . '{'
		. join(',', map { "$_=$l{$_}" } sort keys %l) . '}';
	return $s->{$key};
}

###############################################################################

# traffic: a closed route breaker with latency samples, an open default
# breaker with short-circuited requests, a dry-run breaker that would have
# opened, and a route with every kind of character a route name may hold

my $slowest = 0;
for (1 .. 3) {
	my $start = time();
	like(get("/r/x?delay=20&n=$_"), qr/ 200 /, "route request $_");
	my $took = time() - $start;
	$slowest = $took if $took > $slowest;
}
like(get('/w/x'), qr/ 200 /, 'odd route request');

get('/d/good');
get("/d/bad?status=500&n=$_") for 1 .. 3;
like(get('/d/sc'), qr!^HTTP/1\.1 503 !, 'default breaker open');
get('/d/sc');

get("/o/bad?status=502&n=$_") for 1 .. 3;

# the same moment in both formats

my $rj = get('/status');
my $rp = get('/status?format=prometheus');
my $j = json($rj);
ok($j, 'JSON') or diag($rj);

is(status($rp), 200, 'prometheus: 200');
is(ctype($rp), 'text/plain; version=0.0.4; charset=utf-8',
	'prometheus: content type');

my $text = body($rp) // '';
my ($s, $type, $bad) = parse_prometheus($text);
is_deeply($bad, [], 'well-formed exposition') or diag($text);

# promtool: a real Prometheus parser and its linter

promtool_ok($t, $text, 'promtool');

# families and types

is($type->{"${prefix}state"}, 'gauge', 'state is a gauge');
for my $c (qw/ requests_total failures_total short_circuited_total
	transitions_total zone_alloc_failures_total /)
{
	is($type->{"$prefix$c"}, 'counter', "$c is a counter");
}
is($type->{"${prefix}window_requests"}, 'gauge', 'window_requests is a gauge');

# the build: the crate's version, the nginx it was built for (and runs in)

is($s->{"${prefix}build_info{nginx=" . nginx_version($Test::Nginx::NGINX)
	. ',version=' . version() . '}'}, 1, 'build_info');

# zone figures

is($s->{"${prefix}zone_size_bytes{zone=cb}"}, 1048576, 'zone_size_bytes');
is($s->{"${prefix}zone_used_bytes{zone=cb}"}, $j->{used}, 'zone_used_bytes');
is($s->{"${prefix}zone_alloc_failures_total{zone=cb}"}, 0,
	'zone_alloc_failures_total');
is($s->{"${prefix}breakers{zone=cb}"}, scalar @{ $j->{breakers} },
	'breakers');

# every breaker of the JSON, with the same figures

my @names = sort map { "$_->{upstream}/$_->{route}" } @{ $j->{breakers} };
is("@names", 'other/default up/checkout up/default up/v1.Cart-x_9',
	'all breakers in JSON');

my %series;
for (keys %$s) {
	my ($u) = /[{,]upstream=([^,}]*)/;
	my ($r) = /[{,]route=([^,}]*)/;
	$series{"$u/$r"} = 1 if defined $u && defined $r;
}
is(join(' ', sort keys %series), "@names", 'same breakers in prometheus');

my @mismatch;
for my $b (@{ $j->{breakers} }) {
	my ($u, $r) = ($b->{upstream}, $b->{route});
	my %want = (
		state => $b->{state_code},
		requests_total => $b->{totals}{requests},
		failures_total => $b->{totals}{failures},
		short_circuited_total => $b->{totals}{short_circuited},
		probes_total => $b->{totals}{probes},
		window_requests => $b->{window}{requests},
		window_failures => $b->{window}{failures},
		window_seconds => $b->{window}{seconds},
		failure_rate => $b->{window}{failure_rate},
		state_since_seconds => $b->{since},
		dry_run => $b->{dry_run} ? 1 : 0,
	);
	$want{retry_at_seconds} = $b->{retry_at} if defined $b->{retry_at};
	$want{open_since_seconds} = $b->{open_since} if defined $b->{open_since};
	for my $m (sort keys %want) {
		my $got = metric($s, $m, $u, $r);
		push @mismatch, "$u/$r $m: json $want{$m}, prometheus "
			. ($got // 'missing')
			unless defined $got && $got == $want{$m};
	}
	for my $to (qw/ open half_open closed /) {
		my $key = { open => 'opened', half_open => 'half_opened',
			closed => 'closed' }->{$to};
		my $got = metric($s, 'transitions_total', $u, $r, to => $to);
		push @mismatch, "$u/$r transitions_total{to=$to}: json "
			. "$b->{totals}{$key}, prometheus " . ($got // 'missing')
			unless defined $got && $got == $b->{totals}{$key};
	}
}
is_deeply(\@mismatch, [], 'every breaker: same figures as JSON');

# and the expected figures themselves

is(metric($s, 'state', 'up', 'default'), 2, 'up/default state 2');
is(metric($s, 'requests_total', 'up', 'default'), 4, 'up/default requests_total');
is(metric($s, 'failures_total', 'up', 'default'), 3, 'up/default failures_total');
is(metric($s, 'short_circuited_total', 'up', 'default'), 2,
	'up/default short_circuited_total');
is(metric($s, 'transitions_total', 'up', 'default', to => 'open'), 1,
	'up/default transitions_total{to="open"}');
is(metric($s, 'transitions_total', 'up', 'default', to => 'closed'), 0,
	'up/default transitions_total{to="closed"}');
is(metric($s, 'window_requests', 'up', 'default'), 4,
	'up/default window_requests');
is(metric($s, 'failure_rate', 'up', 'default'), 0.75,
	'up/default failure_rate');
ok(abs((metric($s, 'retry_at_seconds', 'up', 'default') // 0)
	- (metric($s, 'state_since_seconds', 'up', 'default') // 0) - 5) < 0.01,
	'up/default retry_at_seconds = since + 5');
ok(abs((metric($s, 'state_since_seconds', 'up', 'default') // 0) - time())
	< 10, 'state_since_seconds is Unix time');

is(metric($s, 'state', 'up', 'checkout'), 0, 'up/checkout state 0');
is(metric($s, 'window_requests', 'up', 'checkout'), 3,
	'up/checkout window_requests');
is(metric($s, 'retry_at_seconds', 'up', 'checkout'), undef,
	'closed: no retry_at_seconds');
is(metric($s, 'open_since_seconds', 'up', 'default'),
	metric($s, 'state_since_seconds', 'up', 'default'),
	'up/default open_since_seconds: the trip');
is(metric($s, 'open_since_seconds', 'up', 'checkout'), undef,
	'closed: no open_since_seconds');
is(metric($s, 'state', 'up', 'v1.Cart-x_9'), 0, 'route name as label');
like($text, qr/^${prefix}state\{zone="cb",upstream="up",route="v1\.Cart-x_9"\} 0$/m,
	'label order and quoting');

is(metric($s, 'dry_run', 'other', 'default'), 1, 'dry_run 1');
is(metric($s, 'dry_run', 'up', 'default'), 0, 'dry_run 0');
is(metric($s, 'failures_total', 'other', 'default'), 3,
	'dry run: failures_total');
is(metric($s, 'short_circuited_total', 'other', 'default'), 1,
	'dry run: would-be short-circuited counted');
is(metric($s, 'transitions_total', 'other', 'default', to => 'open'), 1,
	'dry run: transitions_total{to="open"}');

# forced: both states present, 0 when not forced

is(metric($s, 'forced', 'up', 'default', state => 'open'), 0,
	'forced{state="open"} 0');
is(metric($s, 'forced', 'up', 'default', state => 'closed'), 0,
	'forced{state="closed"} 0');

# latency: in seconds, between the 20 ms delay and the slowest response the
# client saw, within the histogram's error (17.2% + 0.5 ms)

my %jb = map { ("$_->{upstream}/$_->{route}" => $_) } @{ $j->{breakers} };

my $p50 = metric($s, 'latency_seconds', 'up', 'checkout', percentile => '50');
ok(defined $p50 && $p50 >= 0.020 * 0.828 - 0.0005
	&& $p50 <= $slowest * 1.172 + 0.0005, 'latency p50 in seconds')
	or diag('p50 ' . ($p50 // 'missing') . ", slowest $slowest");
is(defined $p50 ? $p50 * 1000 : 'missing',
	$jb{'up/checkout'}{latency_ms}{p50}, 'latency p50 = JSON p50');
my $p99 = metric($s, 'latency_seconds', 'up', 'default', percentile => '99');
is(defined $p99 ? $p99 * 1000 : 'missing',
	$jb{'up/default'}{latency_ms}{p99}, 'latency p99 = JSON p99');

# a cooldown in seconds

ok((metric($s, 'cooldown_seconds', 'up', 'default') // -1) == 5
	&& $jb{'up/default'}{cooldown_ms} == 5000, 'cooldown_seconds');

# filters apply to the Prometheus output too

($s, undef, $bad) = parse_prometheus(body(get(
	'/status?format=prometheus&upstream=up&route=checkout')) // '');
is_deeply($bad, [], 'filtered: well-formed');
is($s->{"${prefix}breakers{zone=cb}"}, 1, 'filtered: breakers 1');
ok(defined metric($s, 'state', 'up', 'checkout')
	&& !defined metric($s, 'state', 'up', 'default'),
	'filtered: only up/checkout');

($s, undef, $bad) = parse_prometheus(body(get(
	'/status?format=prometheus&upstream=nosuch')) // '');
is_deeply($bad, [], 'no breakers: well-formed');
ok(defined $s->{"${prefix}zone_size_bytes{zone=cb}"}
	&& !grep({ /upstream=/ } keys %$s), 'no breakers: zone metrics only');

# forced states

my $r = http(<<EOF);
POST /control?upstream=up&route=checkout&action=force_open HTTP/1.0
Host: localhost
Content-Length: 0
X-Circuit-Breaker-Control: 1

EOF
like($r, qr!^HTTP/1\.1 200 !, 'force_open up/checkout');

$text = body(get('/status?format=prometheus')) // '';
($s, undef, $bad) = parse_prometheus($text);
is_deeply($bad, [], 'forced: well-formed');
promtool_ok($t, $text, 'forced');
is(metric($s, 'forced', 'up', 'checkout', state => 'open'), 1,
	'forced{state="open"} 1');
is(metric($s, 'forced', 'up', 'checkout', state => 'closed'), 0,
	'forced{state="closed"} 0');
is(metric($s, 'state', 'up', 'checkout'), 2, 'forced open: state 2');
is(metric($s, 'transitions_total', 'up', 'checkout', to => 'open'), 1,
	'forced open: transitions_total{to="open"} 1');
is(metric($s, 'forced', 'up', 'default', state => 'open'), 0,
	'other breakers not forced');

# content negotiation

$r = get('/status', 'Accept: text/plain');
ok(ctype($r) eq 'text/plain; version=0.0.4; charset=utf-8'
	&& body($r) =~ /^# HELP ${prefix}/, 'Accept: text/plain: prometheus');

$r = get('/status', 'Accept: text/plain;version=0.0.4;q=0.3,*/*;q=0.1');
like(ctype($r), qr!^text/plain; version=0\.0\.4!,
	'scraper Accept: prometheus');

$r = get('/status', 'Accept: application/json');
ok(ctype($r) eq 'application/json' && body($r) =~ /^\{"zone":/,
	'Accept: application/json: JSON');

$r = get('/status', 'Accept: */*');
is(ctype($r), 'application/json', 'Accept: */*: JSON');

$r = get('/status?format=json', 'Accept: text/plain');
is(ctype($r), 'application/json', 'format=json wins over Accept');

$r = get('/status?format=prometheus', 'Accept: application/json');
like(ctype($r), qr!^text/plain; version=0\.0\.4!,
	'format=prometheus wins over Accept');

$r = get('/status?format=yaml');
ok(status($r) == 400 && body($r) eq "invalid value \"yaml\" for \"format\", "
	. "expected one of: json, prometheus, html, fleet\n",
	'bad format: 400') or diag($r);

# HEAD: headers only

$r = http_head('/status?format=prometheus');
ok(status($r) == 200 && ctype($r) =~ m!^text/plain; version=0\.0\.4!
	&& body($r) eq '', 'HEAD prometheus');

###############################################################################
