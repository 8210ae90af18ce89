#!/usr/bin/perl

# Half-open: after the cooldown one probe at a time, at most one started per
# probe_interval across all workers (worker_processes 4, concurrent clients);
# "probes" good probes close the breaker; a failed probe reopens it with a
# doubled cooldown capped at max_open; a request counts once, whatever its
# proxy_next_upstream retries; no retries once a breaker is open, nor for a
# probe.
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/20-half-open.t

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use POSIX qw//;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT http_end /;
use CB::Nginx qw/ conf start log_count /;
use CB::Origin;
use CB::Response qw/ status header /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(68);

$t->write_file_expand('nginx.conf', conf(4, <<'EOF'));
    log_format cb '$pid $uri $status "$circuit_breaker_state"';
    access_log %%TESTDIR%%/cb.log cb;

    # "a": probes shorter than probe_interval: the interval is the bound
    upstream a {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 failure_rate=50%
                        open=1s max_open=10s jitter=0%
                        probes=3 probe_interval=500ms;
    }

    # "b": probes longer than probe_interval: one in flight is the bound
    upstream b {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 failure_rate=50%
                        open=1s max_open=10s jitter=0%
                        probes=2 probe_interval=500ms;
    }

    # "c": failed probes double the cooldown, up to max_open
    upstream c {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 failure_rate=50%
                        open=1s max_open=3s jitter=0%
                        probes=2 probe_interval=500ms;
    }

    # "d": two servers, both failing, with proxy_next_upstream http_500
    upstream d {
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        circuit_breaker window=10s min_requests=3 failure_rate=50%
                        open=1s max_open=10s jitter=0%
                        probes=2 probe_interval=500ms;
    }

    # "e": a probe whose client goes away
    upstream e {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 failure_rate=50%
                        open=1s max_open=10s jitter=0%
                        probes=1 probe_interval=500ms;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        proxy_read_timeout 5s;

        location /a/ {
            proxy_pass http://a;
        }

        location /b/ {
            proxy_pass http://b;
        }

        location /c/ {
            proxy_pass http://c;
        }

        location /e/ {
            proxy_pass http://e;
        }

        location /d/ {
            proxy_pass http://d;
            proxy_next_upstream error timeout http_500;
            proxy_next_upstream_tries 0;
        }
    }
EOF

my ($hits, $hits2) = start($t, 8081, 8082);

###############################################################################


# origin hits for a path prefix, with the client's send time (ts=) in order
# of arrival at the origin

sub origin_ts {
	my ($file, $re) = @_;
	open my $fh, '<', $file or return ();
	my @ts = map { /[?&]ts=([\d.]+)/ ? $1 : -1 } grep { $_ =~ $re } <$fh>;
	close $fh;
	return @ts;
}

sub gaps { map { $_[$_] - $_[$_ - 1] } 1 .. $#_ }

sub fmt { join ' ', map { sprintf '%.3f', $_ } @_ }

sub hits { CB::Origin::hits($hits, @_) }
sub hits2 { CB::Origin::hits($hits2, @_) }

###############################################################################

# part 1: "a" and "b" under concurrent load from several client processes

my %trip;
for my $u (qw/ a b /) {
	my @s = map { status(http_get("/$u/?status=500&trip=$_")) } 1 .. 4;
	$trip{$u} = time();
	is("@s", '500 500 500 500', "$u: failures passed through");
}

my $t_trip = $trip{a};

my $r = http_get('/a/?after=trip');
ok(status($r) == 503 && header($r, 'X-Circuit-State') eq 'open'
	&& header($r, 'Retry-After') eq '1', 'a: open, Retry-After 1')
	or diag($r);
is(hits(qr!^/a/!), 4, 'a: no origin hit while open');

my $nclients = 6;
my $run_for = 4.2;
my @kids;

for my $c (1 .. $nclients) {
	my $pid = fork();
	die "fork: $!" unless defined $pid;

	if ($pid == 0) {
		my $out = '';
		my $end = $t_trip + $run_for;
		while (time() < $end) {
			for (['a', 300], ['b', 1200]) {
				my ($u, $delay) = @$_;
				my $s = time();
				my $r = http_get(sprintf('/%s/?delay=%d&c=%d&ts=%.6f',
					$u, $delay, $c, $s));
				my $e = time();
				$out .= sprintf("%s %.6f %.6f %d %s %s\n", $u, $s, $e,
					status($r),
					header($r, 'X-Circuit-State') // '-',
					header($r, 'Retry-After') // '-');
			}
			sleep(0.005);
		}
		$t->write_file("client-$c", $out);
		POSIX::_exit(0);
	}

	push @kids, $pid;
}

waitpid($_, 0) for @kids;

my @rec = map { [ split ' ' ] }
	map { split /\n/, $t->read_file("client-$_") } 1 .. $nclients;

# "a": probes of 300ms, probe_interval 500ms, probes=3

my @a = origin_ts($hits, qr!^/a/\?delay=!);
my @ga = gaps(@a[0 .. 2]);

cmp_ok(scalar @a, '>=', 3 + 8, 'a: traffic flows after closing')
	or diag(fmt(@a));
ok($a[0] - $t_trip >= 0.9, 'a: no probe before the cooldown')
	or diag(fmt($a[0] - $t_trip));
# one probe at a time (each takes 300 ms); once one is good, the rest of the hard
# outage's run within half an interval (83 ms after the last one ended, jittered)
ok($ga[0] >= 0.3 && $ga[1] >= 0.3, 'a: one probe at a time') or diag(fmt(@ga));
ok($ga[0] < 0.6 && $ga[1] < 0.6, 'a: the rest of the run within half an interval')
	or diag(fmt(@ga));

# the third probe closed it: from then on every request reaches the origin,
# before it none but the probes did

my @a_in = grep { $_ < $a[2] } @a;
is(scalar @a_in, 2, 'a: only probes while half-open') or diag(fmt(@a));

my @ar = grep { $_->[0] eq 'a' } @rec;
my @bad = grep { $_->[3] != 200 && $_->[3] != 503 } @ar;
is(scalar @bad, 0, 'a: only 200 and 503') or diag(join ',', map { $_->[3] } @bad);

my @a200 = grep { $_->[3] == 200 } @ar;
is(scalar @a200, scalar @a, 'a: every origin hit answered 200');

my @a503 = grep { $_->[3] == 503 } @ar;
ok(@a503 >= 20 && !grep({ $_->[5] !~ /^[1-9]\d*$/
	|| $_->[4] !~ /^(open|half_open)$/ } @a503),
	'a: 503s carry Retry-After and X-Circuit-State')
	or diag(scalar @a503);
ok(scalar(grep { $_->[4] eq 'half_open' } @a503) >= 3,
	'a: short-circuited while half-open');
# the worker closes the breaker when it finalizes the probe's upstream, which
# may come after the last bytes went to the client: on a loaded machine it can
# be descheduled in between (a run that compiled beside the suite saw a 503
# started 10 ms after the probe's client had its answer)
my ($p3) = grep { sprintf('%.6f', $_->[1]) eq $a[2] } @ar;
ok($p3 && !grep({ $_->[3] == 503 && $_->[1] > $p3->[2] + 0.05 } @ar),
	'a: no 503 after the third probe closed it');

my $aopen = grep { $_->[1] < $t_trip + 0.95 } @a503;
cmp_ok($aopen, '>=', 5, 'a: load while open');

# "b": probes of 1200ms, probe_interval 500ms, probes=2

my @b = origin_ts($hits, qr!^/b/\?delay=!);
my @gb = gaps(@b[0 .. 1]);

ok($b[0] - $trip{b} >= 0.9, 'b: no probe before the cooldown')
	or diag(fmt($b[0] - $trip{b}));
ok($gb[0] >= 1.15, 'b: one probe in flight at a time') or diag(fmt(@gb));
cmp_ok(scalar @b, '>=', 2 + 3, 'b: traffic flows after closing')
	or diag(fmt(@b));
is(scalar(grep { $_ < $b[1] + 1.2 } @b), 2, 'b: only probes while half-open')
	or diag(fmt(@b));

my @br = grep { $_->[0] eq 'b' } @rec;
ok(scalar(grep { $_->[3] == 503 && $_->[4] eq 'half_open' } @br) >= 3,
	'b: short-circuited while a probe is in flight');

# origin-side: no two /b/ probes overlapped (the client saw each probe's
# whole duration; probes are the 200s that started before closing)

my @bp = sort { $a->[1] <=> $b->[1] }
	grep { $_->[3] == 200 && $_->[1] < $b[1] + 0.01 } @br;
my $overlap = 0;
for my $i (1 .. $#bp) {
	$overlap++ if $bp[$i][1] < $bp[$i - 1][2] - 0.05;
}
ok(@bp == 2 && !$overlap, 'b: probes do not overlap')
	or diag(join "\n", map { "@$_" } @bp);

# every worker saw the same breaker: several workers answered

my %pids = map { /^(\d+) / ? ($1 => 1) : () } split /\n/, $t->read_file('cb.log');
cmp_ok(scalar keys %pids, '>=', 2, 'several workers served');

is(log_count($t, qr/circuit breaker "a\/default" opened/), 1, 'a: opened once');
is(log_count($t, qr/circuit breaker "a\/default" half-opened/), 1,
	'a: half-opened once');
is(log_count($t, qr/circuit breaker "a\/default" closed/), 1, 'a: closed once');
is(log_count($t, qr/circuit breaker "b\/default" closed/), 1, 'b: closed once');

###############################################################################

# part 2: "c" failed probes and max_open; "d" no retries to the other server

for (1 .. 4) {
	http_get("/c/?status=500&trip=$_");
	http_get("/e/?status=500&trip=$_");
}

# d: 2 attempts per request (both servers fail); min_requests=3 counts
# requests, not attempts (a request's outcome is settled by its last
# attempt): the third request trips it, once both its attempts failed

$r = http_get('/d/?status=500&trip=1');
is(status($r), 500, 'd: first request');
is(hits(qr!^/d/!) + hits2(qr!^/d/!), 2, 'd: retried on the other server');
ok(hits(qr!^/d/!) == 1 && hits2(qr!^/d/!) == 1, 'd: one hit each');

http_get('/d/?status=500&trip=2');
$r = http_get('/d/?status=500&trip=3');
is(status($r), 500, 'd: tripping request');
is(hits(qr!^/d/!) + hits2(qr!^/d/!), 6,
	'd: three requests of two attempts, counted once each');

$t_trip = time();

$r = http_get('/c/?status=500&after=trip');
ok(status($r) == 503 && header($r, 'Retry-After') eq '1', 'c: open')
	or diag($r);

$r = http_get('/e/?after=trip');
ok(status($r) == 503 && header($r, 'X-Circuit-State') eq 'open', 'e: open');

my %d = (1 => hits(qr!^/d/!), 2 => hits2(qr!^/d/!));
for (1 .. 5) {
	$r = http_get("/d/?status=500&open=$_");
}
ok(status($r) == 503 && header($r, 'X-Circuit-State') eq 'open', 'd: open')
	or diag($r);
ok(hits(qr!^/d/!) == $d{1} && hits2(qr!^/d/!) == $d{2},
	'd: neither server touched while open');

sleep($t_trip + 1.1 - time());

# first probe fails: cooldown 2s

$r = http_get('/c/?status=500&probe=1');
ok(status($r) == 500 && header($r, 'X-Origin'), 'c: probe 1 reached origin');
$r = http_get('/c/?status=500&after=probe1');
ok(status($r) == 503 && header($r, 'X-Circuit-State') eq 'open'
	&& header($r, 'Retry-After') eq '2', 'c: reopened, Retry-After 2')
	or diag($r);

# d: a failed probe is not retried on the other server

%d = (1 => hits(qr!^/d/!), 2 => hits2(qr!^/d/!));
$r = http_get('/d/?status=500&probe=1');
is(status($r), 500, 'd: probe failed');
is(hits(qr!^/d/!) + hits2(qr!^/d/!) - $d{1} - $d{2}, 1,
	'd: failed probe not retried');

# ... and ejects the server it failed on, which the pool may lose: the probe says
# nothing of the upstream, and the next request probes the other server at once;
# failing there too (the pool cannot lose both), it reopens the breaker

like($t->read_file('error.log'),
	qr/circuit breaker "d" server 127\.0\.0\.1:\d+ ejected: probe of "d\/default" failed: http_500/,
	'd: the failed probe ejected its server');
$r = http_get('/d/?status=500&probe=1b');
is(status($r), 500, 'd: the next request probes the other server');
is(hits(qr!^/d/!) + hits2(qr!^/d/!) - $d{1} - $d{2}, 2, 'd: one hit for each probe');
$r = http_get('/d/?status=500&after=probe1');
ok(status($r) == 503 && header($r, 'Retry-After') eq '2',
	'd: reopened, Retry-After 2') or diag($r);

my $t_probe1 = time();

# e: the client of a probe goes away before the origin answers; the probe is
# freed, the next probe goes through one probe_interval later

my $e = hits(qr!^/e/!);
my $t_eprobe = time();
my $s = http_get('/e/?delay=3000&probe=1', start => 1);
sleep(0.2);
is(hits(qr!^/e/!) - $e, 1, 'e: probe 1 reached origin');
$r = http_get('/e/?during=probe1');
ok(status($r) == 503 && header($r, 'X-Circuit-State') eq 'half_open',
	'e: half-open while the probe is in flight') or diag($r);
close $s;

sleep($t_eprobe + 0.7 - time());
$r = http_get('/e/?probe=2');
ok(status($r) == 200 && header($r, 'X-Origin'),
	'e: next probe after the client of the first went away') or diag($r);
$r = http_get('/e/?after=probe2');
is(status($r), 200, 'e: closed by one good probe');
is(hits(qr!^/e/!) - $e, 3, 'e: origin hits');

# still open 1.5s later

sleep($t_probe1 + 1.5 - time());
$r = http_get('/c/?probe=early');
ok(status($r) == 503 && header($r, 'X-Circuit-State') eq 'open'
	&& header($r, 'Retry-After') eq '1', 'c: still open after 1.5s')
	or diag($r);

sleep($t_probe1 + 2.1 - time());

# second probe fails: 4s, capped at max_open=3s

$r = http_get('/c/?status=500&probe=2');
ok(status($r) == 500 && header($r, 'X-Origin'), 'c: probe 2 reached origin');
my $t_c2 = time();
$r = http_get('/c/?after=probe2');
ok(status($r) == 503 && header($r, 'Retry-After') eq '3',
	'c: Retry-After capped at max_open') or diag($r);

# d: good probes close it, one per probe_interval; a good probe is not
# followed by a retry either

%d = (1 => hits(qr!^/d/!), 2 => hits2(qr!^/d/!));
$r = http_get('/d/?probe=good1');
is(status($r), 200, 'd: good probe 1');
$r = http_get('/d/?after=good1');
ok(status($r) == 503 && header($r, 'X-Circuit-State') eq 'half_open'
	&& header($r, 'Retry-After') eq '1', 'd: half-open between probes')
	or diag($r);
is(hits(qr!^/d/!) + hits2(qr!^/d/!) - $d{1} - $d{2}, 1,
	'd: one hit for probe 1');

sleep(0.55);
$r = http_get('/d/?probe=good2');
is(status($r), 200, 'd: good probe 2');
my @s = map { status(http_get("/d/?closed=$_")) } 1 .. 4;
is("@s", '200 200 200 200', 'd: closed');
is(hits(qr!^/d/!) + hits2(qr!^/d/!) - $d{1} - $d{2}, 6, 'd: traffic flows');
ok((hits(qr!^/d/\?closed!) == 4) != (hits2(qr!^/d/\?closed!) == 4),
	'd: the server its failed probe ejected stays out, the other serves');

sleep($t_c2 + 2.5 - time());
$r = http_get('/c/?probe=early2');
ok(status($r) == 503 && header($r, 'Retry-After') eq '1',
	'c: still open 2.5s after the capped reopen') or diag($r);

sleep($t_c2 + 3.05 - time());

my $c = hits(qr!^/c/!);
$r = http_get('/c/?probe=good1');
is(status($r), 200, 'c: good probe 1');
$r = http_get('/c/?after=good1');
ok(status($r) == 503 && header($r, 'X-Circuit-State') eq 'half_open',
	'c: half-open after one good probe') or diag($r);

sleep(0.55);
$r = http_get('/c/?probe=good2');
is(status($r), 200, 'c: good probe 2');
@s = map { status(http_get("/c/?closed=$_")) } 1 .. 3;
is("@s", '200 200 200', 'c: closed');
is(hits(qr!^/c/!) - $c, 5, 'c: origin hits');

is(log_count($t, qr/circuit breaker "c\/default" opened/), 3,
	'c: opened logged once per opening');
is(log_count($t, qr/circuit breaker "c\/default" opened: probe failed.*retry in 2s/),
	1, 'c: failed probe logged, retry in 2s');
is(log_count($t, qr/circuit breaker "c\/default" opened: probe failed.*retry in 3s/),
	1, 'c: failed probe logged, retry in 3s');
is(log_count($t, qr/circuit breaker "c\/default" closed/), 1, 'c: closed logged once');

###############################################################################
