#!/usr/bin/perl

# Active probes (circuit_breaker_probe uri=, given before or after
# circuit_breaker), worker_processes 4, a client sending all along:
#
# 1. "act": the origin refuses connections, then hangs, then heals.  While
#    the breaker is open no user request reaches the origin; the module's own
#    probes (GET /act/health) do, one at a time for the instance, every
#    probe_interval; the breaker closes within probe_interval + probes x
#    probe_interval (+ jitter) of the heal, with no half-open state.
# 2. "pas": without probe_uri nothing changes: a user request is the probe
#    (half-open), and no health check is sent.
# 3. "brown": a brownout (20 % of answers fail, the probes' too) above a 15 %
#    threshold keeps the breaker open: no close -> reopen cycle.
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/25-active-probes.t

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use POSIX qw//;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start log_count /;
use CB::Origin;
use CB::Status qw/ breaker_at wait_state /;
use CB::Response qw/ status header /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(34);

$t->write_file_expand('nginx.conf', conf(4, <<'EOF'));
    circuit_breaker_zone cb:1m;
    circuit_breaker_header on;

    upstream act {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=5s min_requests=4 failure_rate=50%
                        probes=3 probe_interval=500ms jitter=20%;
        circuit_breaker_probe uri=/act/health timeout=300ms;
    }

    upstream pas {
        server 127.0.0.1:%%PORT_8082%%;
        circuit_breaker window=5s min_requests=4 failure_rate=50%
                        open=500ms jitter=0% probes=2 probe_interval=100ms;
    }

    upstream brown {
        server 127.0.0.1:%%PORT_8083%%;
        circuit_breaker_probe uri=/brown/health timeout=300ms;
        circuit_breaker window=10s min_requests=50 failure_rate=15%
                        probes=3 probe_interval=100ms;
    }

    server {
        listen       127.0.0.1:8080 reuseport;
        server_name  localhost;

        proxy_connect_timeout 1s;
        proxy_read_timeout 1s;

        location /act/ {
            proxy_pass http://act;
        }

        location /pas/ {
            proxy_pass http://pas;
        }

        location /brown/ {
            proxy_pass http://brown;
        }

        location = /cb {
            circuit_breaker_status;
        }
    }

EOF

my ($hits, $hits2, $hits3) = start($t, 8081, 8082, 8083);

###############################################################################

# the breaker that the status location shows (see CB::Status)

sub breaker { breaker_at("/cb?upstream=$_[0]") }

# a client process sending GET PATH every 20 ms on a new connection (so
# that reuseport spreads them over the workers), writing "time status
# state" lines to FILE, until STOP exists

sub client {
	my ($t, $path, $file, $stop) = @_;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	return $pid if $pid;

	my $out = '';
	my $n = 0;
	until (-e $stop) {
		my $s = time();
		my $r = http_get(sprintf('%s?c=%d', $path, $n++));
		$out .= sprintf("%.6f %d %s\n", $s, status($r),
			header($r, 'X-Circuit-State') // '-');
		sleep 0.02;
	}
	$t->write_file($file, $out);
	POSIX::_exit(0);
}

###############################################################################

# 1. refused, then hanging, then healed, with probe_uri

my $stop = $t->testdir() . '/stop';
my $kid = client($t, '/act/x', 'client-act', $stop);

sleep 0.5;
CB::Origin::behave($hits, 'refuse');

my $open = wait_state('/cb?upstream=act', 'open', 5);
ok($open, 'act: opens when the origin refuses');
my $opened_at = $open ? $open->{since} : time();
is($open && $open->{probe_uri}, '/act/health', 'act: status shows the probe');

sleep 1.5;
CB::Origin::behave($hits, '* hang=1');
sleep 1.5;
is(breaker('act')->{state}, 'open', 'act: open while refusing and hanging');

CB::Origin::behave($hits);
my $healed = time();
my $closed = wait_state('/cb?upstream=act', 'closed', 6);
my $took = time() - $healed;

# probe_interval + probes x probe_interval, each spacing up to 20 % longer,
# plus 0.3 s for the looks and the test's polling

ok($closed && $took <= (0.5 + 3 * 0.5) * 1.2 + 0.3,
	'act: closed within probe_interval + probes x probe_interval')
	or diag(sprintf('%.3f s', $took));
is($closed && $closed->{last_transition}, '3 good probes',
	'act: closed by 3 good probes');

sleep 0.5;
$t->write_file('stop', '');
waitpid($kid, 0);

my $closed_at = $closed ? $closed->{since} : time();
my @user = grep { $_->[0] > $opened_at + 0.002 && $_->[0] < $closed_at - 0.002 }
	CB::Origin::timings($hits, qr!^/act/x!);
is(scalar @user, 0, 'act: no user request reached the origin while open');

my @probes = CB::Origin::timings($hits, qr!^/act/health!);
my @hung = grep { $_->[1] - $_->[0] > 0.2 } @probes;
cmp_ok(scalar @hung, '>=', 2, 'act: probes hung until probe_timeout')
	or diag(scalar @probes);
ok(!grep({ $_->[1] - $_->[0] > 0.6 } @hung), 'act: probe_timeout ends them');
is(CB::Origin::in_flight($hits, qr!^/act/health!, slack => 0.02), 1,
	'act: one probe in flight at a time');
cmp_ok(scalar(grep { $_->[0] > $healed } @probes), '<=', 4,
	'act: no probe storm after the heal');

# Failed probes one per probe_interval (500 ms, jittered by 20 %); once one is good, the
# rest of the hard outage's run within half an interval (83 ms apart, jittered).
my @starts = sort { $a <=> $b } map { $_->[0] } @probes;
my @gaps = map { $starts[$_] - $starts[$_ - 1] } 1 .. $#starts;
my @failed = map { $gaps[$_] } grep { $starts[$_ + 1] < $healed } 0 .. $#gaps;
ok(@failed && !grep({ $_ < 0.39 } @failed), 'act: failed probes at most one per probe_interval')
	or diag(join ' ', map { sprintf '%.3f', $_ } @gaps);
my @run = map { $starts[$_] - $starts[$_ - 1] } grep { $starts[$_ - 1] > $healed } 1 .. $#starts;
ok(!grep({ $_ < 0.06 || $_ > 0.25 } @run),
	'act: after a good probe, the rest of the run within half an interval')
	or diag(join ' ', map { sprintf '%.3f', $_ } @gaps);

my $b = breaker('act');
cmp_ok($b->{totals}{probes}, '>=', 6, 'act: probed while refusing too')
	or diag($b->{totals}{probes});
is($b->{totals}{half_opened}, 0, 'act: never half-open');
is($b->{totals}{opened} . '/' . $b->{totals}{closed}, '1/1', 'act: one cycle');

my @rec = map { [ split ' ' ] } split /\n/, $t->read_file('client-act');
my @open503 = grep { $_->[1] == 503 && $_->[2] eq 'open' } @rec;
cmp_ok(scalar @open503, '>=', 50, 'act: clients short-circuited while open');
my @bad = grep { $_->[1] != 200 && $_->[1] != 503 && $_->[1] != 502 } @rec;
is(scalar @bad, 0, 'act: only 200, 502 (before the trip) and 503')
	or diag(join ',', map { $_->[1] } @bad);
ok(!grep({ $_->[1] != 200 && $_->[0] > $closed_at + 0.05 } @rec),
	'act: every request passes once closed');
is(log_count($t, qr/circuit breaker "act\/default" opened: /), 1, 'act: opened logged');
is(log_count($t, qr/circuit breaker "act\/default" closed: 3 good probes/), 1,
	'act: closed logged');
cmp_ok(log_count($t, qr/"act\/default" probe to 127\.0\.0\.1:\d+ failed: connection refused/),
	'>=', 2, 'act: refused probes logged at info');
cmp_ok(log_count($t, qr/"act\/default" probe to 127\.0\.0\.1:\d+ failed: timed out/),
	'>=', 2, 'act: timed-out probes logged at info');

###############################################################################

# 2. without probe_uri: a user request is the probe

CB::Origin::behave($hits2, '* status=500');
my @s = map { status(http_get("/pas/t$_")) } 1 .. 5;
is("@s", '500 500 500 500 503', 'pas: trips');
CB::Origin::behave($hits2);
sleep 0.7;
@s = map { sleep 0.15; status(http_get("/pas/p$_")) } 1 .. 3;
is("@s", '200 200 200', 'pas: user requests are the probes, then it closes');
is(breaker('pas')->{state}, 'closed', 'pas: closed by user requests');
is(log_count($t, qr/"pas\/default" half-opened/), 1, 'pas: half-opened');
is(CB::Origin::hits($hits2, qr!health!), 0, 'pas: no health check');
is(breaker('pas')->{probe_uri}, undef, 'pas: no probe_uri in status');

###############################################################################

# 3. a brownout above the threshold: stays open, probing

CB::Origin::behave($hits3, '* fail=20');

my $n = 0;
my $bopen;
while ($n < 1000) {
	my $r = http_get('/brown/x' . $n++);
	if (header($r, 'X-Circuit-State') eq 'open') {
		$bopen = 1;
		last;
	}
}
ok($bopen, "brown: opens") or diag("$n requests", explain(breaker("brown")));

my $browned = time();
sleep 3;

$b = breaker('brown');
is($b->{state}, 'open', 'brown: still open after 3 s of probes');
is($b->{totals}{closed}, 0, 'brown: never closed') or diag(explain $b);
cmp_ok($b->{totals}{probes}, '>=', 15, 'brown: probed all along')
	or diag($b->{totals}{probes});
cmp_ok($b->{probes_needed}, '>', 3, 'brown: more than "probes" good probes needed')
	or diag($b->{probes_needed});
is(CB::Origin::hits($hits3, qr!^/brown/x!), $n - 1,
	'brown: no user request sent while open');

###############################################################################
