#!/usr/bin/perl

# How an ejected server returns, four worker processes.
#
# Probed by the module itself (probe_uri on the upstream), with and without an
# upstream zone: a bad server of two is ejected; while out it gets no user
# request at all (counted at the origin by path: /NAME/x for users,
# /NAME/health for probes), only the module's probes, one at a time for the
# instance, about every probe_interval, and the good server gets none (the
# upstream's breaker is closed); once it heals it returns within about
# probe_interval (+ jitter), logged, and takes user traffic again in every
# worker once its ramp (ramp=1s here) is over.  Without probe_uri a user
# request is the probe: t/46-eject.t and t/47-eject-pool.t.
#
# Through the ramp, with the default one (10 s from 10 %), a server of four
# returned by a user request: round robin, and least_conn with an upstream
# zone and keepalive, hand it a small share of the requests at first (counted
# at the origin: a quarter without the ramp, ramp=off), every request still
# answered, its share shown on the status page, and a quarter again once the
# ramp is over; a returning server with no other server nginx could pick
# takes every request (none is lost to the ramp), a retry included, and a
# backup beside them gets none.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use JSON::PP;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start log_count /;
use CB::Origin;
use CB::Response qw/ status header /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy upstream_zone/)->plan(27 + 20);

# min_requests=1000: the upstream's own breaker never opens here (half the
# answers fail until the ejection); time=30s: with probe_uri the ejection
# time is not waited for, the first probe comes one probe_interval after.

my $cb = 'circuit_breaker min_requests=1000 probe_interval=300ms probe_timeout=500ms';
my $eject = 'circuit_breaker_eject min_requests=4 time=30s ramp=1s;';

# the ramp's upstreams: three good servers beside the returning one; the
# upstream's own breaker never opens, a passive probe after 1s

my $four = join "\n        ", map { "server 127.0.0.1:%%PORT_$_%% max_fails=0;" }
	qw/ 8081 8083 8084 /;
my $ramp = "circuit_breaker min_requests=1000 jitter=0%;\n"
	. "        circuit_breaker_eject min_requests=4 time=1s";

$t->write_file_expand('nginx.conf', conf(4, <<"EOF"));
    proxy_connect_timeout 1s;
    proxy_read_timeout 1s;

    upstream act {
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        $cb probe_uri=/act/health;
        $eject
    }

    upstream actz {
        zone actz 64k;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        $cb probe_uri=/actz/health;
        $eject
    }

    # the ramp: 8082 fails, then returns by a user request; 8085 refuses

    upstream rr {
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        $four
        $ramp;
    }

    upstream lckz {
        zone lckz 64k;
        least_conn;
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        $four
        keepalive 8;
        $ramp;
    }

    upstream off {
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        $four
        $ramp ramp=off;
    }

    upstream alone {
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        server 127.0.0.1:%%PORT_8085%% max_fails=1 fail_timeout=60s;
        $ramp;
    }

    upstream bk {
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        server 127.0.0.1:%%PORT_8085%% max_fails=1 fail_timeout=60s;
        server 127.0.0.1:%%PORT_8083%% backup;
        $ramp;
    }

    server {
        listen       127.0.0.1:8080 reuseport;
        server_name  localhost;

        location /act/ { proxy_pass http://act; }
        location /actz/ { proxy_pass http://actz; }

        location /rr/ { proxy_pass http://rr; }
        location /off/ { proxy_pass http://off; }
        location /alone/ { proxy_pass http://alone; }
        location /bk/ { proxy_pass http://bk; }
        location /lckz/ {
            proxy_pass http://lckz;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }

        location = /status { circuit_breaker_status; }
    }
EOF

my @hits = start($t, 8081, 8082, 8083, 8084);
my ($good, $bad) = @hits;
my $p82 = port(8082);

# 8082 fails everything, its health checks slowly (so that two probes in
# flight at once would show)

CB::Origin::behave($bad, '/act/health status=500&delay=150',
	'/actz/health status=500&delay=150', '* status=500');

###############################################################################

sub server_of {
	my ($name, $port) = @_;
	my $r = http_get("/status?upstream=$name&route=default");
	my ($body) = $r =~ /\r\n\r\n(.*)\z/s;
	my $j = eval { decode_json($body) } // {};
	my ($s) = grep { $_->{address} =~ /:$port$/ }
		@{$j->{breakers}[0]{servers} // []};
	return $s // {};
}

sub server { server_of($_[0], $p82) }

sub returned {
	my ($t, $name) = @_;
	return log_count($t,
		qr/circuit breaker "$name" server 127\.0\.0\.1:$p82 returned: 1 good probe/);
}

my @names = qw/ act actz /;
my %ejected;

for my $name (@names) {
	for (1 .. 20) {
		http_get("/$name/x");
		last if log_count($t,
			qr/circuit breaker "$name" server 127\.0\.0\.1:$p82 ejected: /);
	}
	$ejected{$name} = time();
	is(server($name)->{state}, 'ejected', "$name: ejected");
}

# 1.5 s of user requests, on new connections spread over the workers: none
# to the ejected server

my %user = map { $_ => CB::Origin::hits($bad, qr!^/$_/x!) } @names;
my %answers;
my $end = time() + 1.5;
while (time() < $end) {
	for my $name (@names) {
		my $r = http_get("/$name/x");
		push @{$answers{$name}}, status($r) . ':' . (header($r, 'X-Origin') // '-');
	}
	sleep 0.02;
}
my $steady = time();

for my $name (@names) {
	my @a = @{$answers{$name}};
	is(scalar(grep { $_ ne '200:' . port(8081) } @a), 0,
		"$name: every request answered by the good server") or diag("@a");
	is(CB::Origin::hits($bad, qr!^/$name/x!), $user{$name},
		"$name: no user request to the ejected server");

	my @starts = sort { $a <=> $b } map { $_->[0] }
		CB::Origin::timings($bad, qr!^/$name/health!);
	my @gaps = map { $starts[$_] - $starts[$_ - 1] } 1 .. $#starts;
	my $gaps = join ' ', map { sprintf '%.3f', $_ } @gaps;

	# first probe one probe_interval (+-20 %) after the ejection, then one
	# per interval: 4 to 7 in the 1.5 s that followed it, never two within
	# 0.8 x probe_interval

	ok(@starts && $starts[0] - $ejected{$name} > 0.2
		&& $starts[0] - $ejected{$name} < 0.6,
		"$name: first probe about one probe_interval after the ejection")
		or diag(@starts ? $starts[0] - $ejected{$name} : 'none');
	my $n = grep { $_ < $steady } @starts;
	ok($n >= 3 && $n <= 7, "$name: probed about every probe_interval")
		or diag("$n probes: $gaps");
	ok(!grep({ $_ < 0.23 } @gaps), "$name: at most one probe per interval")
		or diag($gaps);
	is(CB::Origin::in_flight($bad, qr!^/$name/health!, slack => 0.02), 1,
		"$name: one probe in flight at a time");
	is(CB::Origin::hits($good, qr!^/$name/health!), 0,
		"$name: the server in the pool is not probed");

	my $s = server($name);
	ok($s->{state} eq 'ejected' && $s->{totals}{probes} >= 3,
		"$name: still ejected, probes counted")
		or diag(explain $s);
	cmp_ok(log_count($t,
		qr/circuit breaker "$name" probe to 127\.0\.0\.1:$p82 failed: status 500/),
		'>=', 3, "$name: failed probes logged");
}

# the server heals: the next probe returns it

CB::Origin::behave($bad);
my $healed = time();
my %took;
while (time() < $healed + 3 && grep { !defined $took{$_} } @names) {
	for my $name (grep { !defined $took{$_} } @names) {
		$took{$name} = time() - $healed if returned($t, $name);
	}
	sleep 0.01;
}

for my $name (@names) {
	# the probe in flight at the heal (150 ms), the next one within
	# probe_interval + 20 %, and 0.3 s for the polling and a busy machine

	ok(defined $took{$name} && $took{$name} <= 0.15 + 0.36 + 0.3,
		"$name: returned within about probe_interval of the heal")
		or diag($took{$name} // 'not returned');
	is(server($name)->{state}, 'in', "$name: in the pool");

	# every worker follows: new connections, spread over the workers, reach
	# it again once its ramp is over

	sleep 1.1 if $name eq $names[0];
	my @o = map { header(http_get("/$name/x"), 'X-Origin') // '-' } 1 .. 12;
	cmp_ok(scalar(grep { $_ eq $p82 } @o), '>=', 4,
		"$name: takes user traffic again") or diag("@o");
}

is(log_count($t, qr/"act(z)?\/default" (opened|probe)/), 0,
	"the upstreams' own breakers never opened nor probed");

###############################################################################

# the ramp: 8082 fails until each upstream ejects it

my @ramped = qw/ rr lckz off /;
CB::Origin::behave($bad, '* status=500');

for my $name (@ramped, 'alone', 'bk') {
	my $n = 0;
	http_get("/$name/x") while $n++ < 40 && !log_count($t,
		qr/circuit breaker "$name" server 127\.0\.0\.1:$p82 ejected: /);
}
is(join(' ', map { server_of($_, $p82)->{state} } @ramped, 'alone', 'bk'),
	'ejected ejected ejected ejected ejected', 'ramp: 8082 ejected everywhere');

# 8082 heals, and a request of each upstream returns it

CB::Origin::behave($bad);
sleep 1.2;

my %base = map { $_ => CB::Origin::hits($bad, qr!^/$_/!) } @ramped;
my $back = time();
for my $name (@ramped, 'alone', 'bk') {
	http_get("/$name/probe");
}

sub returned_by {
	my ($t, $name) = @_;
	my ($how) = $t->read_file('error.log') =~
		/circuit breaker "$name" server 127\.0\.0\.1:$p82 returned: (1 good probe(?:, ramp from 10% over 10s)?)/;
	return $how // 'not returned';
}

is(returned_by($t, 'rr'), '1 good probe, ramp from 10% over 10s', 'rr: returns on the default ramp');
is(returned_by($t, 'lckz'), '1 good probe, ramp from 10% over 10s', 'lckz: returns on the default ramp');
is(returned_by($t, 'off'), '1 good probe', 'off: returns at once');

# while it ramps: a request to each upstream in turn, new connections spread
# over the workers, each answered; the returning server's share of them
# follows the ramp, a quarter without it

my (%sent, %codes, @seq);
my $ramping = time() + 2;
while (time() < $ramping) {
	for my $name (@ramped) {
		my $at = time() - $back;
		my $r = http_get("/$name/x");
		push @{$sent{$name}}, $at;
		$codes{$name}{status($r)}++;
		push @seq, header($r, 'X-Origin-Seq') // 0 if $name eq 'lckz';
	}
}

my $mid = server_of('rr', $p82);
my ($prom) = http_get('/status?format=prometheus&upstream=rr') =~
	/nginx_circuit_breaker_server_ramp_share\{[^}]*server="127\.0\.0\.1:$p82"\} ([\d.]+)/;

# the share at T seconds into the ramp, and the bounds of the returning
# server's part of the requests: s/4 (round robin picks it a quarter of the
# time and keeps the pick at share s) to s/(3+s) (a pick passed over goes
# to the others), four standard deviations and one request either way

sub share { my ($at) = @_; $at >= 10 ? 1 : 0.1 + 0.9 * $at / 10 }

sub bounds {
	my (@at) = @_;
	my ($lo, $hi, $var) = (0, 0, 0);
	for (@at) {
		my $s = share($_);
		$lo += $s / 4;
		$hi += $s / (3 + $s);
		$var += $s / 4 * (1 - $s / 4);
	}
	return ($lo - 4 * sqrt($var) - 1, $hi + 4 * sqrt($var) + 1);
}

for my $name (@ramped) {
	my $n = scalar @{$sent{$name}};
	my $got = CB::Origin::hits($bad, qr!^/$name/x!) - $base{$name};
	is(join(' ', map { "$_:$codes{$name}{$_}" } sort keys %{$codes{$name}}),
		"200:$n", "$name: every request answered while it ramps");
	if ($name eq 'off') {
		note("off: $got of $n requests at once");
		ok($got >= $n * 0.2 && $got <= $n * 0.3,
			'off: a quarter of the requests at once')
			or diag("$got of $n");
		next;
	}
	my ($lo, $hi) = bounds(@{$sent{$name}});
	note(sprintf "%s: %d of %d requests in the ramp's first 2 s (%.1f to %.1f expected)",
		$name, $got, $n, $lo, $hi);
	ok($got >= $lo && $got <= $hi && $got < $n * 0.2,
		"$name: its share of the requests follows the ramp")
		or diag(sprintf "%d of %d, expected %.1f to %.1f", $got, $n, $lo, $hi);
}

ok(grep({ $_ >= 2 } @seq), 'lckz: kept-alive connections still reused');
ok($mid->{ramp_share} > 0.1 && $mid->{ramp_share} < 0.5 && $mid->{state} eq 'in',
	'rr: its ramp share on the status page')
	or diag(explain $mid);
ok(defined $prom && $prom > 0.1 && $prom < 0.5, 'rr: and in Prometheus')
	or diag($prom // 'none');

# alone: the other server refuses, and each worker's nginx keeps it out for
# fail_timeout once it saw that: every request is answered by the returning
# server, one the ramp sent to the refusing server first by its retry (the
# balancer, which has the returning server marked tried, finds none)

my $alone = CB::Origin::hits($bad, qr!^/alone/x!);
my @alone = map { status(http_get("/alone/x")) } 1 .. 20;
is(scalar(grep { $_ == 200 } @alone), 20, 'alone: every request answered')
	or diag("@alone");
is(CB::Origin::hits($bad, qr!^/alone/x!) - $alone, 20, 'alone: by the returning server');

# bk: the same with a backup, which a retry the ramp sent elsewhere would
# reach (the returning server is marked tried): it goes back to the returning
# server, as nginx goes to a backup only when every primary is down

my ($bk, $bkb) = (CB::Origin::hits($bad, qr!^/bk/x!),
	CB::Origin::hits($hits[2], qr!^/bk/x!));
my @bk = map { status(http_get("/bk/x")) } 1 .. 20;
is(scalar(grep { $_ == 200 } @bk), 20, 'bk: every request answered') or diag("@bk");
is(join(' ', CB::Origin::hits($bad, qr!^/bk/x!) - $bk,
	CB::Origin::hits($hits[2], qr!^/bk/x!) - $bkb), '20 0',
	'bk: by the returning server, none by the backup');

# once the ramp is over: a quarter again

sleep($back + 10.3 - time()) if time() < $back + 10.3;
is(server_of('rr', $p82)->{ramp_share}, 1, 'rr: ramp over on the status page');

for my $name (qw/ rr lckz /) {
	my $before = CB::Origin::hits($bad, qr!^/$name/x!);
	my @s = map { status(http_get("/$name/x")) } 1 .. 80;
	my $got = CB::Origin::hits($bad, qr!^/$name/x!) - $before;
	ok($got >= 14 && $got <= 26 && !grep({ $_ != 200 } @s),
		"$name: a quarter again after the ramp")
		or diag("$got of 80");
}

