#!/usr/bin/perl

# prove: alone
# The fleet on loopback: 8 instances of nginx with the module (one worker
# each) in front of one origin that counts every request, each instance with
# its own users, exchanging every second (circuit_breaker_fleet).
#
# The users' rate is 1 request per second per instance while the origin
# fails, so that min_requests=20 alone takes 20 intervals: what the fleet
# saves is what its exchange learns in between.  The baseline, the same 8
# instances without the directive, needs no such rate: each instance sends
# exactly min_requests failures, whatever the rate (5/s here, to be quick).
#
#   A. baseline: the origin receives 8 x min_requests = 160 failing requests
#      before every instance is open, then about one probe per instance per
#      cooldown;
#   B. fleet: a worker 0 that dies is respawned and exchanges again; then
#      at most 2 x min_requests = 40 failing requests, and each instance
#      still opens on failures of its own (suspect_min=3);
#   C. while open, at most 2 probes per cooldown (open=4s) from the fleet;
#   D. the origin recovers: the fleet closes; then a failure seen by one
#      instance only (its users' requests fail) opens that one alone, and
#      the others, suspicious, stay closed;
#   E. three peers killed and four hanging (SIGSTOP): requests to the last
#      instance take no longer (measured), its breaker does not move, only
#      its peer counters do, and it opens on exactly min_requests failures
#      of its own, as if alone.
#
# scripts/fleet-measure runs A and B at other sizes.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ sleep time /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT /;
use CB::Nginx qw/ start /;
use CB::Origin;
use CB::Fleet;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy access/)->plan(21);

my ($module) = ($ENV{TEST_NGINX_GLOBALS} // '') =~ /load_module\s+([^;\s]+)/;
plan(skip_all => 'no module in TEST_NGINX_GLOBALS') unless $module;

my $N = 8;
my $MIN = 20;
my $RATE = $ENV{TEST_FLEET_RATE} || 1;
my $COOL = 4;

# the test's own nginx only stands by (the fleet's instances are CB::Fleet's);
# start() brings the origin and the watchdog
$t->write_file_expand('nginx.conf', CB::Nginx::conf(1, <<'EOF'));
    server {
        listen       127.0.0.1:8080;
        server_name  localhost;
        return 204;
    }
EOF

my $hits = start($t, 8081);

my $f = CB::Fleet->new(
	dir => $t->testdir() . '/fleet',
	nginx => $Test::Nginx::NGINX,
	module => $module,
	ports => [ map { port(8090 + $_) } 0 .. $N - 1 ],
	local_ports => [ map { port(8110 + $_) } 0 .. $N - 1 ],
	origin => port(8081),
	breaker => "window=30s min_requests=$MIN failure_rate=50% "
		. "open=${COOL}s max_open=${COOL}s suspect_min=3",
);

my $T0 = time();
sub mark { diag(sprintf('%s at %.1fs', $_[0], time() - $T0)) }

my $open = sub { $_[0]{state} eq 'open' };
my $closed = sub { $_[0]{state} eq 'closed' };

# a transition on local evidence only: min_requests or more, not suspected
sub alone {
	my ($reason) = @_;
	return $reason =~ /^failure rate \d+% \(\d+\/(\d+)\) >= 50% in 30s$/
		&& $1 >= $MIN;
}

###############################################################################
# A. baseline: no fleet

$f->start($_, fleet => 0) for 0 .. $N - 1;

is(($f->get(0, '/circuit_breaker?format=fleet'))[0], 404,
	'no fleet: ?format=fleet is 404');

my $users = $f->users(rate => 5, seconds => 15, query => 'status=500',
	spread => 1);
my $base_open = $f->wait_all(10, $open);
my $base = CB::Origin::hits($hits);
ok($base_open, 'baseline: every instance opened');
ok($base >= $N * $MIN, "baseline: $base failing requests before all open")
	or diag("expected at least " . $N * $MIN);

# one cooldown (jittered by 20%) later: one probe per instance
sleep($COOL * 1.2 + 0.2 - (time() - ($base_open // time())));
my $base_probes = CB::Origin::hits($hits) - $base;
$f->stop_users($users);
ok($base_probes >= $N - 2,
	"baseline: $base_probes probes in the first cooldown");

$f->stop($_) for 0 .. $N - 1;
CB::Origin::clear($hits);

###############################################################################
# B. fleet: convergence

mark(q{B. fleet});

$f->start($_, fleet => 1) for 0 .. $N - 1;

# a few rounds of healthy exchange first
sleep 2.5;
my @peers = map { scalar @{$f->status($_)->{fleet}{peers} // []} } 0 .. $N - 1;
is("@peers", join(' ', (7) x $N), 'each instance knows its 7 peers');

# worker 0 dies: nginx respawns it with the same number, and it takes the
# exchange over
my ($master, $worker) = $f->pids(0);
kill 'KILL', $worker;
my $killed = time();
my $resumed;
my $until = time() + 5;
while (time() < $until) {
	my $fl = ($f->status(0) // {})->{fleet} // {};
	my $up = grep { $_->{reachable} && $_->{last_exchange} > $killed }
		@{$fl->{peers} // []};
	$resumed = time(), last if ($fl->{published} // 0) > $killed && $up;
	sleep 0.1;
}
ok($resumed, sprintf('a respawned worker 0 exchanges again, after %.1fs',
	($resumed // time()) - $killed));

my $start = time();
$users = $f->users(rate => $RATE, seconds => 60, query => 'status=500',
	spread => 1);
my $all_open = $f->wait_all(20 / $RATE + 5, $open);
my $fleet = CB::Origin::hits($hits);
ok($all_open, sprintf('fleet: every instance opened, after %.1fs',
	($all_open // time()) - $start));
ok($fleet <= 2 * $MIN,
	"fleet: $fleet failing requests before all open (baseline $base)");

my @b = map { $f->breaker($_) } 0 .. $N - 1;
my @own = map { $_->{totals}{failures} } @b;
my $suspected = grep { $_->{last_transition} =~ /while suspected/ } @b;
ok(!grep({ $_ < 3 } @own), "each opened on failures of its own: @own")
	or diag(explain(\@b));
diag("fleet: $suspected of $N opened while suspected, failures @own");

###############################################################################
# C. while open: probes from the whole fleet

mark(q{C. while open});

my $cooldowns = 3;
sleep($cooldowns * $COOL + 0.5 - (time() - ($all_open // time())));
my @probes = grep { $_->[0] > ($all_open // 0) } $f->hits($hits);
$f->stop_users($users);

my $most = 0;
for my $p (@probes) {
	my $in = grep { $_->[0] >= $p->[0] && $_->[0] < $p->[0] + $COOL } @probes;
	$most = $in if $in > $most;
}
diag(sprintf('probes: %s', join ', ',
	map { sprintf('%.1fs by %d', $_->[0] - $all_open, $_->[1]) } @probes));
ok($most <= 2, "at most 2 probes per cooldown (most: $most, "
	. scalar(@probes) . " in $cooldowns cooldowns)");
ok(@probes >= 1, 'the fleet still probes');

###############################################################################
# D. recovery, then a failure seen by one instance only

mark(q{D. recovery});

$users = $f->users(rate => 2, seconds => 20, query => 'status=200',
	spread => 1);
my $t0 = time();
my $all_closed = $f->wait_all(20, $closed);
ok($all_closed, sprintf('origin recovered: every instance closed after %.1fs',
	($all_closed // time()) - $t0));
$f->stop_users($users);

my @opened = map { $f->breaker($_)->{totals}{opened} } 0 .. $N - 1;

# until the last open opinions of the outage have expired everywhere
$f->wait_all(8, sub { !$_[0]{suspicious} });

$users = $f->users(rate => 2, seconds => 12, query => 'status=200',
	spread => 1, instances => [ 1 .. $N - 1 ]);
my $broken = $f->users(rate => 10, seconds => 12, query => 'status=500',
	instances => [ 0 ]);
$f->wait_all(8, $open, 0);
my $b0 = $f->breaker(0);
ok($b0->{state} eq 'open' && alone($b0->{last_transition}),
	"one instance opens alone: $b0->{last_transition}");

# three intervals for its opinion to reach everyone
my %suspicious;
my $end = time() + 3;
while (time() < $end) {
	for my $i (1 .. $N - 1) {
		$suspicious{$i} = 1 if ($f->breaker($i) // {})->{suspicious};
	}
	sleep 0.2;
}
my @moved = grep {
	my $b = $f->breaker($_);
	$b->{state} ne 'closed' || $b->{totals}{opened} != $opened[$_]
} 1 .. $N - 1;
ok(!@moved, 'the others stay closed') or diag("moved: @moved");
ok(keys %suspicious >= 1, 'though suspicious: '
	. join(' ', sort keys %suspicious));
$f->stop_users($users);
$f->stop_users($broken);

###############################################################################
# E. peers dead or hanging

mark(q{E. peers dead});

my $A = $N - 1;
my @before = map { $f->breaker($A, $_) } qw/ origin local /;
my $failed_before = 0;
$failed_before += $_->{failures} for @{$f->status($A)->{fleet}{peers}};

# requests through a breaker to an origin inside the same nginx: what they
# take is nginx's own time, not the test origin's (it forks per connection)
my $s1 = time();
$users = $f->users(rate => 50, seconds => 3, query => 'x=1', path => '/l',
	instances => [ $A ]);
waitpid($_, 0) for @$users;
my @alive = $f->latencies($A, $s1, time());

$f->signal($_, 'KILL') for 0 .. 2;
$f->signal($_, 'STOP') for 3 .. $N - 2;

my $s2 = time();
$users = $f->users(rate => 50, seconds => 5, query => 'x=1', path => '/l',
	instances => [ $A ]);
waitpid($_, 0) for @$users;
my @dead = $f->latencies($A, $s2, time());

my @after = map { $f->breaker($A, $_) } qw/ origin local /;
my $failed_after = 0;
$failed_after += $_->{failures} for @{$f->status($A)->{fleet}{peers}};

my ($p50a, $p99a, $maxa) = map { CB::Fleet::percentile($_, @alive) } 50, 99, 100;
my ($p50d, $p99d, $maxd) = map { CB::Fleet::percentile($_, @dead) } 50, 99, 100;
diag(sprintf('latency ms, peers alive (%d): p50 %.1f p99 %.1f max %.1f; '
	. 'dead or hanging (%d): p50 %.1f p99 %.1f max %.1f',
	scalar @alive, $p50a, $p99a, $maxa, scalar @dead, $p50d, $p99d, $maxd));

ok(!grep({
	$after[$_]{state} ne 'closed'
	|| $after[$_]{totals}{opened} != $before[$_]{totals}{opened}
	|| $after[$_]{totals}{failures} != $before[$_]{totals}{failures}
} 0, 1), 'peers gone: no decision moves');
# a request held by a pull would wait out its timeout (500ms): the margins
# below are for a machine shared with other work
ok($p99d <= $p99a + 50, 'peers gone: p99 latency unchanged');
ok($maxd < 250, 'peers gone: no request waits for a pull');
ok($failed_after >= $failed_before + 3,
	"peers gone: only counters move ($failed_before -> $failed_after "
	. 'failed pulls)');

# its own failures open it on min_requests, as if it were alone
$users = $f->users(rate => 10, seconds => 8, query => 'status=500',
	instances => [ $A ]);
$f->wait_all(8, $open, $A);
$f->stop_users($users);
my $a = $f->breaker($A);
ok(alone($a->{last_transition}),
	"alone: opens on min_requests: $a->{last_transition}");

mark('end');
$f->signal($_, 'CONT') for 3 .. $N - 2;
$f->stop_all();

is(join('', grep { !/worker process $worker exited on signal 9/ } $f->alerts()),
	'', 'no alerts in the fleet but the killed worker\'s');

###############################################################################
