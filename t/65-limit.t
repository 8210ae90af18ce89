#!/usr/bin/perl

# prove: alone
# The adaptive in-flight limit (circuit_breaker ... limit=adaptive), with four
# worker processes sharing it.
#
# 1. A fixed limit of 2 (limit_min = limit_max): of 8 simultaneous slow
#    requests, exactly 2 reach the origin (counted there, concurrently) and
#    6 are shed at once: 503, Retry-After: 1, X-Circuit-State: limited,
#    $circuit_breaker_state "limited"; the breaker does not count them.  In
#    dry run all 8 pass and the 6 would-be sheds are counted.
# 2. A client that goes away gives its slot back; so does a worker killed
#    with SIGKILL while its requests hold both slots.  A request retried on
#    another server (proxy_next_upstream) keeps its one slot through the
#    retry.  Where the location can serve a stale cache entry, a shed
#    request gets it (200, X-Circuit-State: limited).
# 3. An adaptive limit in front of an origin of 4 "cores" (its latency
#    grows with the requests in progress past 4), under 32 clients:
#    healthy (20 ms): nothing shed, unless a stall of the machine slowed
#    the answers first; the service time rises six-fold: the
#    limit falls and sheds the excess, the new floor is measured from the
#    first answers at the pin once they agree (not a full interval of them),
#    and the origin never has more requests in progress than the limit let
#    in; healthy again: the shedding stops, and under a burst the limit
#    rises back to its maximum, which the origin's concurrency reaches and
#    never exceeds.  Then another upstream's origin stops for 400 ms and
#    comes back as it was: the limit, pinned by the slowdown, is back where
#    it was within a second.
# 4. Status: the "limit" object and the Prometheus families; a reload with
#    the same parameters keeps the controller, changed ones restart it.
#
# nginx logs "[alert] ... worker process N exited on signal 9" for the
# kill: the harness's "no alerts" check is marked TODO, and this test
# checks that the kills are the only alerts.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use POSIX qw//;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT /;
use CB::Nginx qw/ conf start reload workers /;
use CB::Proc qw/ reap /;
use CB::Origin;
use CB::Response qw/ json /;
use CB::Workers qw/ send_get read_response owner_of /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

plan(skip_all => 'needs Linux /proc') unless -d '/proc/self/fd';

my $t = Test::Nginx->new()->has(qw/http proxy cache/)->plan(53)
	->todo_alerts();

sub http_conf {
	my ($fixed) = @_;
	return conf(4, <<"EOF");
    circuit_breaker_zone cb:1m;

    log_format cb '\$request_uri \$status "\$circuit_breaker_state" '
                  '\$upstream_addr';
    access_log %%TESTDIR%%/access.log cb;

    log_format timing '\$msec \$upstream_response_time';

    # the breaker itself never opens here
    upstream fixed {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=10000 limit=adaptive $fixed;
    }

    # the first server refuses: every request is retried on the second
    upstream retry {
        server 127.0.0.1:%%PORT_8082%% weight=100 max_fails=0;
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=10000 limit=adaptive
                        limit_min=2 limit_max=2 limit_initial=2;
    }

    proxy_cache_path %%TESTDIR%%/cache keys_zone=c:1m;

    upstream dry {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=10000 limit=adaptive
                        limit_min=2 limit_max=2 limit_initial=2 dry_run;
    }

    upstream adaptive {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=10000 limit=adaptive
                        limit_min=2 limit_max=16 limit_initial=8
                        limit_interval=100ms limit_remeasure=2s;
        keepalive 32;
    }

    upstream paused {
        server 127.0.0.1:%%PORT_8083%%;
        circuit_breaker min_requests=10000 limit=adaptive
                        limit_min=2 limit_max=16 limit_initial=16
                        limit_interval=100ms;
        keepalive 32;
    }

    server {
        listen       127.0.0.1:8080 reuseport;
        server_name  localhost;

        proxy_read_timeout 30s;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        add_header X-Pid \$pid always;

        location /f/ { proxy_pass http://fixed; }
        location /d/ { proxy_pass http://dry; }
        location /r/ { proxy_pass http://retry; }
        location /c/ {
            proxy_pass http://fixed;
            proxy_cache c;
            proxy_cache_valid 200 1s;
            proxy_cache_use_stale error;
            add_header X-Cache-Status \$upstream_cache_status always;
        }
        location /a/ {
            proxy_pass http://adaptive;
            access_log %%TESTDIR%%/timing.log timing;
        }
        location /p/ { proxy_pass http://paused; }

        location = /status { circuit_breaker_status; }
    }
EOF
}

$t->write_file_expand('nginx.conf',
	http_conf('limit_min=2 limit_max=2 limit_initial=2'));

my ($hits, $paused_hits) = start($t, 8081, 8083);

###############################################################################

# one request on its own connection: (status, X-Circuit-State, Retry-After,
# X-Pid), or (failure reason)

sub request {
	my ($uri, $timeout) = @_;
	my $s = send_get($uri) or return ('connect');
	return finish($s, $timeout);
}

sub finish {
	my ($s, $timeout) = @_;
	my ($buf, $why) = read_response($s, time() + ($timeout // 10));
	return ($why) unless defined $buf;
	return ('empty') unless $buf =~ m!^HTTP/1\.1 (\d{3}) !;
	my $status = $1;
	my ($state) = $buf =~ /^X-Circuit-State: (\w+)\x0d?$/m;
	my ($ra) = $buf =~ /^Retry-After: (\d+)\x0d?$/m;
	my ($pid) = $buf =~ /^X-Pid: (\d+)\x0d?$/m;
	my ($cache) = $buf =~ /^X-Cache-Status: (\w+)\x0d?$/m;
	return ($status, $state // '', $ra // '', $pid // 0, $cache // '');
}

# the status page's breaker of an upstream

sub breaker {
	my ($upstream) = @_;
	my $s = send_get("/status?upstream=$upstream") or return {};
	my ($r) = read_response($s, time() + 10);
	return (json($r) // {})->{breakers}[0] // {};
}

# waits until COND holds, up to SECONDS

sub wait_for {
	my ($cond, $seconds) = @_;
	my $end = time() + $seconds;
	while (time() < $end) {
		return 1 if $cond->();
		sleep 0.05;
	}
	return $cond->();
}

###############################################################################

# 1. a fixed limit of 2: exactly two in flight, the rest shed at once

my @kept;

sub burst {
	my ($prefix, $n) = @_;
	CB::Origin::clear_concurrency($hits);
	my @s = map { send_get("/$prefix/?conc=1&delay=800&b=$_") } 1 .. $n;
	my @r = map { [finish($_)] } @s;
	return @r;
}

my $t0 = time();
my @r = burst('f', 8);
my $took = time() - $t0;
my @st = sort map { $_->[0] } @r;
is("@st", '200 200 503 503 503 503 503 503', 'fixed: 2 of 8 passed');
is((CB::Origin::concurrency($hits))[1], 2,
	'fixed: 2 in progress at the origin, never more');
my @shed = grep { $_->[0] eq '503' } @r;
is(scalar(grep { $_->[1] eq 'limited' && $_->[2] eq '1' } @shed), 6,
	'fixed: X-Circuit-State: limited, Retry-After: 1');
cmp_ok($took, '<', 3, 'fixed: shed at once, not queued');

my $b = breaker('fixed');
is($b->{totals}{requests}, 2, 'fixed: sheds are no samples of the breaker');
is($b->{limit}{shed}, 6, 'fixed: shed counted');
is($b->{limit}{in_flight}, 0, 'fixed: every slot back');

my $log = $t->read_file('access.log');
is(scalar(() = $log =~ m!^/f/\S+ 503 "limited" -$!gm), 6,
	'$circuit_breaker_state is "limited"');

@r = burst('d', 8);
@st = sort map { $_->[0] } @r;
is("@st", '200 200 200 200 200 200 200 200', 'dry run: every request passes');
is((CB::Origin::concurrency($hits))[1], 8, 'dry run: 8 at the origin');
$b = breaker('dry');
is($b->{limit}{shed}, 6, 'dry run: would-be sheds counted');
is($b->{limit}{in_flight}, 0, 'dry run: in-flight counted, back to 0');

###############################################################################

# 2. slots come back from a client that went away and from a killed worker

my @a = map { send_get("/f/?delay=5000&abort=$_") } 1 .. 2;
wait_for(sub { CB::Origin::hits($hits, qr/abort=/) == 2 }, 5);
my ($s, $state) = request('/f/?abort=3');
is("$s $state", '503 limited', 'abort: both slots taken');
close $_ for @a;
ok(wait_for(sub { (breaker('fixed')->{limit}{in_flight} // -1) == 0 }, 3),
	'abort: clients gone, slots back');
($s) = request('/f/?abort=4');
is($s, '200', 'abort: next request passes');

my @h = map { send_get("/f/?hang=1&kill=$_") } 1 .. 2;
wait_for(sub { CB::Origin::hits($hits, qr/hang=1/) == 2 }, 5);
($s, $state) = request('/f/?kill=3');
is("$s $state", '503 limited', 'kill: both slots taken');

my %owners = map { (owner_of($t, $_->sockport()) // 0) => 1 } grep { $_ } @h;
delete $owners{0};
my @killed = keys %owners;
ok(@killed && kill('KILL', @killed) == @killed, 'kill: holders killed')
	or diag('owners: ' . join ' ', @killed);
ok(wait_for(sub {
	my @w = workers($t);
	my %dead = map { $_ => 1 } @killed;
	@w == 4 && !grep { $dead{$_} } @w;
}, 5), 'kill: workers replaced');

# the next shed finds the dead owners and returns their slots

my $back = wait_for(sub { (request('/f/?after_kill=1'))[0] eq '200' }, 3);
ok($back, 'kill: slots of the killed worker returned');
is(breaker('fixed')->{limit}{in_flight}, 0, 'kill: in-flight back to 0');
close $_ for grep { $_ } @h;

# a retry keeps its slot: two requests refused by the first server and
# served by the second hold both slots, and a third is shed

my @rt = map { send_get("/r/?delay=1000&retry=$_") } 1 .. 2;
wait_for(sub { CB::Origin::hits($hits, qr/retry=/) == 2 }, 5);
is(breaker('retry')->{limit}{in_flight}, 2, 'retry: each request holds its slot');
($s, $state) = request('/r/?retry=3');
is("$s $state", '503 limited', 'retry: the third is shed');
is(join(' ', map { (finish($_))[0] } @rt), '200 200', 'retry: both served');
$log = $t->read_file('access.log');
is(scalar(() = $log =~ m!^/r/\?delay=1000&retry=\d 200 "closed" \S+, \S+$!gm), 2,
	'retry: each after a refused attempt');
is(breaker('retry')->{limit}{in_flight}, 0, 'retry: one slot back each');

# stale instead of a 503

($s) = request('/c/entry');
is($s, '200', 'stale: cached');
sleep 2.1;
my @hold = map { send_get("/f/?delay=1000&hold=$_") } 1 .. 2;
wait_for(sub { CB::Origin::hits($hits, qr/hold=/) == 2 }, 5);
my ($cs, $cstate, undef, undef, $cache) = request('/c/entry');
is("$cs $cstate $cache", '200 limited STALE', 'stale: served stale when shed');
finish($_) for @hold;

###############################################################################

# 3. an adaptive limit under 32 clients: healthy, six times slower, healthy,
# then a burst

my $phase_file = $t->testdir() . '/phase';

sub phase {
	my ($uri) = @_;
	open my $fh, '>', "$phase_file.tmp" or die "phase: $!\n";
	print $fh $uri;
	close $fh;
	rename "$phase_file.tmp", $phase_file;
}

# named subs take what they need as arguments: one that closed over $t
# would keep it alive until global destruction, too late for its last checks

sub client {
	my ($c, $until, $dir) = @_;
	my $out = '';
	my $i = 0;
	srand($$);
	# not all at once
	sleep(rand(0.3));
	while (time() < $until) {
		open my $fh, '<', $phase_file or last;
		my ($uri, $think) = split ' ', <$fh> // '';
		close $fh;
		last if $uri eq 'stop';
		$i++;
		my $t0 = time();
		my ($s, $state) = request("$uri&c=$c&i=$i", 20);
		$out .= sprintf("%.3f %s %s %.3f\n", $t0, $s, $state || '-', time());
		sleep(($think // 0) / 1000 * (0.5 + rand()));
	}
	open my $fh, '>', "$dir/client-$c.log" or POSIX::_exit(1);
	print $fh $out;
	close $fh;
	POSIX::_exit(0);
}

my @timeline = (
	[healthy => 3, '/a/?cores=4&delay=20 380'],
	[sick => 4, '/a/?cores=4&delay=120 380'],
	[healed => 4, '/a/?cores=4&delay=20 380'],
	[burst => 3, '/a/?cores=64&delay=20 10'],
	[paused => 3, '/p/?cores=4&delay=20 380', 'paused'],
);
my $total = 0;
$total += $_->[1] for @timeline;

phase($timeline[0][2]);
CB::Origin::clear_concurrency($hits);

# the clients stop at the last phase's end ("stop"), or at this bound

my $start = time();
my $until = $start + $total + 60;
my @kids;
for my $c (1 .. 32) {
	my $pid = fork();
	die "fork: $!\n" unless defined $pid;
	client($c, $until, $t->testdir()) if $pid == 0;
	push @kids, $pid;
}

# the phases, and a poll of the limit and the origin every 50 ms; a phase
# lasts its time from when it began, however late the machine made that

my (@polls, %phase_at, @pause);
for my $p (@timeline) {
	my ($name, $secs, $uri, $upstream) = @$p;
	phase($uri);
	my $from = time();
	$phase_at{$name} = $from - $start;
	my $end = $from + $secs;
	while (time() < $end) {
		# once the limit has measured the origin, and with 2.5 s after it
		if ($name eq 'paused' && !@pause && time() >= $from + 1.5
			&& $polls[-1][1] eq 'paused' && $polls[-1][6] > 0)
		{
			push @pause, time() - $start;
			CB::Origin::pause($paused_hits, 0.4);
			push @pause, time() - $start;
			$end = time() + 2.5 if $end < time() + 2.5;
		}
		my $l = breaker($upstream // 'adaptive')->{limit} // {};
		my $read = time();
		my ($cur, $max) = CB::Origin::concurrency($hits);
		push @polls, [time() - $start, $name, $l->{limit} // 0,
			$l->{in_flight} // 0, $l->{shed} // 0, $cur,
			$l->{min_latency_ms} // 0, $read - $start];
		sleep 0.05;
	}
}
phase('stop');

reap($_, 30) for @kids;

my $origin_max = (CB::Origin::concurrency($hits))[1];

my @answers;
for my $c (1 .. 32) {
	for (split /\n/, eval { $t->read_file("client-$c.log") } // '') {
		my ($t0, $s, $state, $t1) = split / /;
		push @answers, [$t0 - $start, $s, $state, $t1 - $start];
	}
}

sub phase_of {
	my ($when) = @_;
	my $name = $timeline[0][0];
	for my $p (@timeline) {
		$name = $p->[0] if $when >= $phase_at{$p->[0]};
	}
	return $name;
}

# the first second warms the controller up

my %count;
for my $a (grep { $_->[0] >= 1 } @answers) {
	my $ph = phase_of($a->[0]);
	$count{$ph}{all}++;
	$count{$ph}{$a->[1] eq '503' && $a->[2] eq 'limited' ? 'shed'
		: $a->[1] eq '200' ? 'ok' : 'other'}++;
}

# the last 1.5 s of the healed phase

my $tail_from = $phase_at{burst} - 1.5;
my ($tail, $tail_shed) = (0, 0);
for my $a (grep { $_->[0] >= $tail_from && $_->[0] < $phase_at{burst} } @answers) {
	$tail++;
	$tail_shed++ if $a->[2] eq 'limited';
}

my %lim;
for my $p (@polls) {
	my $l = $lim{$p->[1]} //= { min => 1e9, max => 0 };
	$l->{min} = $p->[2] if $p->[2] < $l->{min};
	$l->{max} = $p->[2] if $p->[2] > $l->{max};
	$l->{last} = $p->[2];
}

diag(join '; ', map {
	my $c = $count{$_} // {};
	sprintf('%s: %d answers, %d ok, %d shed, %d other, limit %s..%s',
		$_, $c->{all} // 0, $c->{ok} // 0, $c->{shed} // 0,
		$c->{other} // 0, $lim{$_}{min} // '-', $lim{$_}{max} // '-')
	} map { $_->[0] } @timeline);
diag("healed tail: $tail_shed of $tail shed; origin at most $origin_max");

# A shed while healthy needs evidence, as the limit sees it: an answer that
# took 100 ms or more from the origin, in progress or ended in the 2 s before.
# This origin takes at most 80 ms at limit_max: only a stall of the machine
# takes longer, and the limit is right to shed then (the stalled requests
# hold it, and their latency cuts it).

my @slow;
for (split /\n/, $t->read_file('timing.log')) {
	my ($at, $took) = split / /;
	push @slow, [$at - $took - $start, $at - $start]
		if $took ne '-' && $took >= 0.1;
}
my @unexplained = grep {
	my ($t0, $t1) = @$_[0, 3];
	!grep { $_->[1] >= $t0 - 2 && $_->[0] <= $t1 } @slow;
} grep {
	$_->[0] >= 1 && phase_of($_->[0]) eq 'healthy' && $_->[2] eq 'limited'
} @answers;
diag(sprintf('healthy: %d shed after answers slowed by a stall',
	($count{healthy}{shed} // 0) - @unexplained)) if $count{healthy}{shed};

cmp_ok($count{healthy}{all} // 0, '>=', 60, 'healthy: clients were served');
is(scalar @unexplained, 0, 'healthy: nothing shed without slow answers first');
is($count{$_}{other} // 0, 0, "$_: only 200 and 503 limited")
	for qw/ healthy sick /;
cmp_ok($lim{sick}{min}, '<', $lim{healthy}{last},
	'sick: the limit fell');
cmp_ok($count{sick}{shed} // 0, '>=', ($count{sick}{all} // 0) * 0.2,
	'sick: the excess shed');
cmp_ok($lim{sick}{min}, '<=', 10, 'sick: down to about the origin\'s cores');

# The new floor is measured from the first answers at the pin, once the queue
# of the old limit has drained below it: they agree, so the measurement ends
# on 5 of them instead of an interval of 20 (three rounds of 120 ms at the pin
# of 2, against ten).  From the first poll that shows the drain (in flight
# within the pin) to the first that shows the floor.

my @sick = grep { $_->[1] eq 'sick' } @polls;
my ($drained) = grep { $_->[2] == 2 && $_->[3] <= 2 } @sick;
my ($floor) = grep { $_->[6] >= 100 } @sick;
my $took_floor = $drained && $floor ? $floor->[0] - $drained->[0] : -1;
diag(sprintf('sick: pin drained %.2f s in, floor of %s ms %.2f s later',
	$drained ? $drained->[0] - $phase_at{sick} : -1, $sick[-1][6], $took_floor));
ok($took_floor >= 0 && $took_floor < 0.9, 'sick: the new floor measured at once');

# Admissions never exceed the limit: what the origin has in progress was let
# in by a limit in effect since its oldest client sent it.  That is the last
# second, unless the machine stalled the origin, nginx or this poller: then
# the window reaches back to the oldest request (not shed) whose client was
# still waiting when the origin's count was read, and to the last poll before.

my (@over, $widest, $first);
for my $i (0 .. $#polls) {
	my $p = $polls[$i];
	# another upstream, another origin
	next if $p->[1] eq 'paused';
	my $from = $p->[0] - 1;
	for my $a (@answers) {
		$from = $a->[0] if $a->[0] < $from && $a->[3] >= $p->[7]
			&& $a->[1] ne '503';
	}
	$widest = $p->[0] - $from if !defined $widest || $p->[0] - $from > $widest;
	my $allowed = 0;
	for my $j (0 .. $i) {
		my $q = $polls[$j];
		next if $q->[0] < $from
			&& !($j < $i && $polls[$j + 1][0] >= $from);
		$allowed = $q->[2] if $q->[2] > $allowed;
	}
	next unless $p->[5] > $allowed;
	push @over, sprintf('%.2fs: %d > %d (since %.2fs)', $p->[0], $p->[5],
		$allowed, $from);
	$first //= [$from - 0.5, $p->[0]];
}
diag(sprintf('limit checked over windows of up to %.2f s', $widest // 0));
is(join(', ', @over), '', 'origin in progress never above the limit')
	or diag(map { sprintf("poll %.2fs %s: limit %d, in flight %d, origin %d\n",
		@$_[0, 1, 2, 3, 5]) }
		grep { $_->[0] >= $first->[0] && $_->[0] <= $first->[1] } @polls);

cmp_ok($tail_shed, '<=', $tail * 0.05, 'healed: the shedding stopped');
cmp_ok($lim{burst}{max}, '>=', 2 * $lim{sick}{min}, 'burst: the limit rose back');
ok($origin_max >= 8 && $origin_max <= 16,
	"burst: origin at most limit_max ($origin_max)");

# The origin stopped for 400 ms and came back as it was: the limit, pinned by
# the slowdown, comes back to where it was once the pin has measured the old
# floor, in one step, instead of to the pin's own rate of answers (2 to 5, and
# then up by the gradient's steps, more than a second).  How soon depends on
# how busy the machine is: 0.3 to 0.5 s alone, up to 1 s beside two busy loops.

@pause = (-1, -1) unless @pause;
my @before = grep { $_->[1] eq 'paused' && $_->[0] < $pause[0] } @polls;
my $pre = @before ? $before[-1][2] : 0;
my @after = grep { $_->[1] eq 'paused' && $_->[0] >= $pause[1] } @polls;
my ($low, $rise, $back) = (1e9);
for my $p (@after) {
	last if $p->[0] > $pause[1] + 2;
	if ($p->[2] < $low) {
		$low = $p->[2];
		next;
	}
	next unless $low < $pre && $p->[2] > $low;
	$rise //= $p->[2];
	$back //= $p->[0] if $p->[2] >= $pre;
}
diag(sprintf('paused %.2f..%.2f s: limit %d before, %d at its lowest, %s',
	@pause, $pre, $low, defined $back
	? sprintf('back %.2f s after', $back - $pause[1]) : 'not back in 2 s'));
cmp_ok($low, '<', $pre, 'paused: the pause pinned the limit');
cmp_ok($rise // 0, '>=', $pre, 'paused: the limit came back in one step')
	or diag(join ' ', map { sprintf('%.2f:%d/%d/%s', @$_[0, 2, 3, 6]) }
		grep { $_->[1] eq 'paused' } @polls);
ok(defined $back, 'paused: the limit back within 2 s');

###############################################################################

# 4. status and Prometheus; reloads

$b = breaker('adaptive');
my $l = $b->{limit};
ok($l && $l->{min_latency_ms} > 0 && $l->{last_latency_ms} > 0
	&& $l->{shed} > 0, 'status: limit object')
	or diag(explain($l));
ok(!exists breaker('fixed')->{limit}{probing}, 'status: the five fields');

my $prom = http_get('/status?format=prometheus');
my $lb = 'zone="cb",upstream="adaptive",route="default"';
like($prom, qr/^nginx_circuit_breaker_limit\{$lb\} \d+$/m,
	'prometheus: limit');
like($prom, qr/^nginx_circuit_breaker_in_flight\{$lb\} \d+$/m,
	'prometheus: in_flight');
like($prom, qr/^nginx_circuit_breaker_limited_total\{$lb\} [1-9]\d*$/m,
	'prometheus: limited_total');

my $fixed_shed = breaker('fixed')->{limit}{shed};
ok(reload($t), 'reload: serving');
is(breaker('fixed')->{limit}{shed}, $fixed_shed,
	'reload, same parameters: the controller kept');

$t->write_file_expand('nginx.conf',
	http_conf('limit_min=3 limit_max=3 limit_initial=3'));
ok(reload($t), 'reload, new parameters: serving');
is(breaker('fixed')->{limit}{limit}, 3, 'reload, new parameters: the new limit');
is(breaker('fixed')->{limit}{shed}, 0, 'reload, new parameters: counts afresh');

###############################################################################

$t->stop();

my $errors = $t->read_file('error.log');
my @alerts = $errors =~ /^.*\[(?:alert|crit|emerg)\].*$/gm;
my @unexpected = grep {
	my $line = $_;
	!grep { $line =~ /worker process $_ exited on signal 9/ } @killed
} @alerts;
is(join("\n", @unexpected), '', 'no alerts but the kills');

###############################################################################
