#!/usr/bin/perl

# prove: alone
# Workers killed with SIGKILL (worker_processes 4).
#
# All workers share the breakers; "a worker that dies mid-update must
# not wedge the zone"; a half-open probe "whose owner vanished is
# reclaimed".
#
# 1. A probe in flight (the origin hangs) whose worker is killed: the probe
#    must be reclaimed, so the next request after probe_interval probes
#    and closes the breaker.
# 2. Four forked clients fire requests (half of them failing at the
#    origin) while the test kills a worker every half second, 5 times
#    (about 3 seconds), and one more each after that.  The master must
#    replace every worker; every request must get a 200/500/503 quickly (a
#    wedged zone lock would hang every request), except those in flight on
#    a killed worker (at most one per client and kill).
# 3. Afterwards, with only replacement workers left, a full cycle works:
#    the breaker trips on exactly the min_requests-th failure (counts
#    shared by workers), rejects without origin hits, half-opens, and a
#    good probe closes it.
#
# Only processes of this test's nginx are signalled: children of the master
# whose pid is in nginx.pid and whose title is "nginx: worker process".
#
# nginx logs "[alert] ... worker process N exited on signal 9" for every
# kill: expected here.  As nginx-tests does for expected alerts, the
# harness's "no alerts" check is marked TODO (todo_alerts), and this test
# checks itself that those are the only [alert]/[crit] lines, one per kill.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use POSIX qw//;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT http_end /;
use CB::Nginx qw/ conf start workers workers_up /;
use CB::Proc qw/ cmdline reap /;
use CB::Workers qw/ send_get read_response owner_of /;
use CB::Origin;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

plan(skip_all => 'needs Linux /proc') unless -d '/proc/self/fd';

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(28)
	->todo_alerts();

# reuseport: the kernel spreads connections over the four workers, so
# consecutive requests are served by different workers

$t->write_file_expand('nginx.conf', conf(4, <<'EOF'));
    circuit_breaker_zone cb:1m;
    circuit_breaker_header on;

    upstream up {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=5s min_requests=6 failure_rate=50%
                        open=1s max_open=1s jitter=0%
                        probes=1 probe_interval=100ms;
    }

    server {
        listen       127.0.0.1:8080 reuseport;
        server_name  localhost;

        proxy_connect_timeout 2s;
        proxy_read_timeout 20s;

        add_header X-Pid $pid always;

        location /load/ {
            proxy_pass http://up;
            circuit_breaker_route load;
        }

        location /probe/ {
            proxy_pass http://up;
            circuit_breaker_route probe;
        }

        location /steady/ {
            proxy_pass http://up;
            circuit_breaker_route steady;
        }

        location = /cb {
            circuit_breaker_status control=on;
        }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

my @killed;

# SIGKILL one worker; true once the master runs 4 workers again, one new

sub kill_worker {
	my ($t, $pid) = @_;
	my %before = map { $_ => 1 } workers($t);

	return 0 unless $before{$pid} && cmdline($pid) eq 'nginx: worker process';

	kill 'KILL', $pid or return 0;
	push @killed, $pid;

	my $end = time() + 3;
	while (time() < $end) {
		my @w = workers($t);
		return 1 if @w == 4 && !grep { $_ == $pid } @w;
		sleep 0.02;
	}

	return 0;
}

# one request on its own connection, with a deadline: (status or failure
# reason, seconds, worker pid)

sub request {
	my ($uri, $timeout) = @_;
	my $start = time();

	my $s = send_get($uri) or return ("send:$!", time() - $start, 0);

	my ($buf, $why) = read_response($s, $start + ($timeout // 5));
	return ($why, time() - $start, 0) unless defined $buf;

	my $took = time() - $start;
	return ('empty', $took, 0) unless $buf =~ m!^HTTP/1\.1 (\d{3}) !;

	my $status = $1;
	my $pid = $buf =~ /^X-Pid: (\d+)\x0d?$/m ? $1 : 0;
	my $state = $buf =~ /^X-Circuit-State: (\w+)\x0d?$/m ? $1 : '';
	my $origin = $buf =~ /^X-Origin: /m ? 1 : 0;

	return ($status, $took, $pid, $state, $origin);
}

my @original = workers_up($t, 4);
is(scalar @original, 4, 'four workers');

###############################################################################

# 1. a probe in flight, its worker killed: the probe is reclaimed

my (@st, %pids);
for my $i (1 .. 7) {
	my ($s, undef, $pid) = request("/probe/?status=500&trip=$i");
	push @st, $s;
	$pids{$pid} = 1;
}
is("@st", '500 500 500 500 500 500 503', 'probe route: trips at min_requests');

sleep 1.1;

my $hang = http_get('/probe/?hang=1', start => 1);
my $hung = 0;
for (1 .. 100) {
	last if $hung = CB::Origin::hits($hits, qr/hang=1/);
	sleep 0.02;
}
is($hung, 1, 'probe in flight');

my ($s, undef, undef, $state) = request('/probe/?status=200&busy=1');
is("$s $state", '503 half_open', 'probe held');

my $owner = $hang && owner_of($t, $hang->sockport());
ok($owner && kill_worker($t, $owner), 'probe worker killed and replaced')
	or diag('owner: ' . ($owner // 'none'));

my $dead = $hang && http_end($hang);
ok(!defined $dead || $dead !~ m!^HTTP/!, 'probe connection lost');

sleep 0.3;

CB::Origin::clear($hits);
($s, undef, undef, undef, my $origin) = request('/probe/?status=200&after=1');
is("$s $origin", '200 1', 'probe reclaimed: new probe passes');
($s, undef, undef, $state) = request('/probe/?status=200&after=2');
is("$s $state", '200 closed', 'probe route closed');

###############################################################################

# 2. kill workers under traffic

# the clients go on until the last kill is over (the file "killed"), then
# send one more request each; 15s at most

my $clients = 4;
my $until = time() + 15;
my $killed = $t->testdir() . '/killed';
my @kids;

for my $c (1 .. $clients) {
	my $pid = fork();
	die "fork: $!\n" unless defined $pid;

	if ($pid == 0) {
		my $out = '';
		my $i = 0;
		while (time() < $until) {
			my $last = -e $killed;
			$i++;
			my $uri = ('/steady/?', '/load/?status=500&delay=10&',
				'/load/?status=200&delay=10&')[$i % 3];
			my $t0 = time();
			my ($s, $took, $w) = request("${uri}c=$c&i=$i", 5);
			$out .= sprintf("%.6f %s %.3f %d %s\n", $t0, $s, $took, $w,
				$uri =~ m!^/(\w+)! ? $1 : '');
			last if $last;
		}
		$t->write_file("client-$c.log", $out);
		POSIX::_exit(0);
	}

	push @kids, $pid;
}

# one kill every half second, originals first, then any worker

my @replaced;
my %original = map { $_ => 1 } @original;
my $next = time() + 0.4;
my $last_kill = 0;

for my $k (1 .. 5) {
	sleep($next - time()) if $next > time();

	my @w = workers($t);
	my ($victim) = grep { $original{$_} } @w;
	$victim //= $w[int rand @w];

	push @replaced, kill_worker($t, $victim) ? 1 : 0;
	$last_kill = time();
	$next += 0.5;
}

$t->write_file('killed', '');

reap($_, 15) for @kids;

is(join('', @replaced), '11111', 'master replaced every killed worker');
ok(!grep({ $original{$_} } workers($t)),
	'no original worker left');

my (%status, @fail, $n, $max, %after_last, %steady);
for my $c (1 .. $clients) {
	my $log = eval { $t->read_file("client-$c.log") } // '';
	for (split /\n/, $log) {
		my ($t0, $s, $took, $w, $route) = split / /;
		$n++;
		if ($s =~ /^\d{3}$/) {
			$status{$s}++;
			$steady{$s}++ if $route eq 'steady';
			$max = $took if !defined $max || $took > $max;
			$after_last{$c}++ if $t0 > $last_kill;
		} else {
			push @fail, "$s after ${took}s";
		}
	}
}

my $summary = join ', ', (map { "$_: $status{$_}" } sort keys %status),
	'failed: ' . @fail;
diag("$n requests; $summary; slowest " . sprintf('%.3f', $max // 0));

cmp_ok($n // 0, '>=', 40, 'clients sent requests');
is(join(',', grep { !/^(200|500|503)$/ } sort keys %status), '',
	'only 200, 500 and 503 responses');
ok($status{200} && $status{500} && $status{503},
	'responses of every kind: passed, failed, short-circuited');
cmp_ok(scalar @fail, '<=', 5 * $clients,
	'failures: at most the connections of killed workers')
	or diag(join "\n", @fail);
ok(!grep({ /timeout/ } @fail), 'no request timed out');
ok($steady{200} && keys %steady == 1, 'a healthy route next to it: all 200')
	or diag(join ', ', map { "$_: $steady{$_}" } sort keys %steady);
cmp_ok($max // 99, '<', 2, 'every response came quickly');
is(scalar keys %after_last, $clients, 'every client served after the last kill')
	or diag(sprintf("last kill %.6f\n", $last_kill), map {
		my @l = split /\n/, eval { $t->read_file("client-$_.log") } // '';
		"client $_: " . join(' | ', @l[-2 .. -1]) . "\n"
	} grep { !$after_last{$_} } 1 .. $clients);

###############################################################################

# 3. a full cycle with replacement workers only, from a fresh breaker: the
#    brownout of part 2 (every other request failing, at the threshold) is no
#    hard outage, and one lucky probe would not close it

my @seen;

like(http("POST /cb?upstream=up&route=load&action=reset HTTP/1.0\r\n"
	. "Host: localhost\r\nX-Circuit-Breaker-Control: 1\r\n\r\n"), qr!^HTTP/1\.[01] 200!,
	'load route reset');

my $tripped = 0;
for my $i (1 .. 30) {
	my ($s, undef, $w) = request("/load/?status=500&force=$i");
	push @seen, $w;
	if ($s eq '503') {
		$tripped = 1;
		last;
	}
}
ok($tripped, 'load route open');

sleep 1.1;

($s) = request('/load/?status=200&probe=1');
($s, undef, undef, $state) = request('/load/?status=200&probe=2');
is("$s $state", '200 closed', 'load route closed after a good probe');

# fresh window after closing, holding the one good request above: the
# fifth failure makes min_requests (6) and opens it (5/6 >= 50%), not the
# fourth (5 requests) - counted across workers

CB::Origin::clear($hits);

@st = ();
for my $i (1 .. 8) {
	my ($s, undef, $w) = request("/load/?status=500&final=$i");
	push @st, $s;
	push @seen, $w;
}
is("@st", '500 500 500 500 500 503 503 503', 'final: trips at min_requests');
is(CB::Origin::hits($hits), 5, 'final: no origin hits while open');

sleep 1.1;

CB::Origin::clear($hits);
@st = ();
for my $i (1 .. 4) {
	my ($s, undef, $w) = request("/load/?status=200&final_ok=$i");
	push @st, $s;
	push @seen, $w;
}
is("@st", '200 200 200 200', 'final: probe closes, traffic flows');
is(CB::Origin::hits($hits), 4, 'final: origin hits after close');

my %final = map { $_ => 1 } grep { $_ } @seen;
ok(keys %final >= 2 && !grep({ $original{$_} } keys %final),
	'final cycle served by several replacement workers')
	or diag('pids: ' . join ' ', sort keys %final);

###############################################################################

# error.log: the only alerts are the kills, one each

$t->stop();

my $log = $t->read_file('error.log');
my @alerts = $log =~ /^.*\[(?:alert|crit|emerg)\].*$/gm;
my @expected = map { qr/\[alert\] \d+#\d+: worker process $_ exited on signal 9/ }
	@killed;

my @unexpected = grep { my $l = $_; !grep { $l =~ $_ } @expected } @alerts;
is(join("\n", @unexpected), '', 'no alerts but the kills');
is(scalar @alerts, scalar @killed, 'one alert per kill');

###############################################################################
