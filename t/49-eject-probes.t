#!/usr/bin/perl

# Ejected servers probed by the module itself (probe_uri on the upstream),
# with and without an upstream zone, four worker processes: a bad server of
# two is ejected; while out it gets no user request at all (counted at the
# origin by path: /NAME/x for users, /NAME/health for probes), only the
# module's probes, one at a time for the instance, about every
# probe_interval, and the good server gets none (the upstream's breaker is
# closed); once it heals it returns within about probe_interval (+ jitter),
# logged, and takes user traffic again in every worker.  Without probe_uri a
# user request is the probe: t/46-eject.t and t/47-eject-pool.t.

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

my $t = Test::Nginx->new()->has(qw/http proxy upstream_zone/)->plan(27);

# min_requests=1000: the upstream's own breaker never opens here (half the
# answers fail until the ejection); time=30s: with probe_uri the ejection
# time is not waited for, the first probe comes one probe_interval after.

my $cb = 'circuit_breaker min_requests=1000 probe_interval=300ms probe_timeout=500ms';
my $eject = 'circuit_breaker_eject min_requests=4 time=30s;';

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

    server {
        listen       127.0.0.1:8080 reuseport;
        server_name  localhost;

        location /act/ { proxy_pass http://act; }
        location /actz/ { proxy_pass http://actz; }

        location = /status { circuit_breaker_status; }
    }
EOF

my ($good, $bad) = start($t, 8081, 8082);
my $p82 = port(8082);

# 8082 fails everything, its health checks slowly (so that two probes in
# flight at once would show)

CB::Origin::behave($bad, '/act/health status=500&delay=150',
	'/actz/health status=500&delay=150', '* status=500');

###############################################################################

sub server {
	my ($name) = @_;
	my $r = http_get("/status?upstream=$name&route=default");
	my ($body) = $r =~ /\r\n\r\n(.*)\z/s;
	my $j = eval { decode_json($body) } // {};
	my ($s) = grep { $_->{address} =~ /:$p82$/ }
		@{$j->{breakers}[0]{servers} // []};
	return $s // {};
}

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
	# it again

	my @o = map { header(http_get("/$name/x"), 'X-Origin') // '-' } 1 .. 12;
	cmp_ok(scalar(grep { $_ eq $p82 } @o), '>=', 4,
		"$name: takes user traffic again") or diag("@o");
}

is(log_count($t, qr/"act(z)?\/default" (opened|probe)/), 0,
	"the upstreams' own breakers never opened nor probed");

###############################################################################
