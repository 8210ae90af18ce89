#!/usr/bin/perl

# prove: alone
# The dashboard shows the whole decision, in headless Chromium, each figure
# checked against the JSON of the same moment (a wrong value fails):
#
#  - an open breaker whose live window has aged out: the numbers that
#    tripped it, the window now, short-circuited requests per second;
#  - a half-open breaker: the probe's latency as its origin p95, the probes
#    needed;
#  - a pool with a server ejected: a row per server under the upstream, its
#    state, the window that ejected it, when it comes back, its ejections;
#    and in another pool the same server back by its probes, ramping: the
#    share of its picks it takes now;
#  - an adaptive limit while it sheds: limit, in flight, shed per second,
#    the measured floor, and in flight and shed by request class;
#  - the fleet with a peer down: each peer's reachability and last
#    exchange, a breaker a peer made suspicious, the designated prober;
#  - all of it worst first: open, half-open, then closed ones with
#    something amiss (a server out, a limit shedding, suspicion), then the
#    rest.
#
# A screenshot of each part goes to the test's directory; a failure's is
# kept in build/screenshots/.
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/92-dashboard-parts.t

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT http_end /;
use CB::Browser;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::FleetPeer;
use CB::Status qw/ breakers /;
use CB::Response qw/ status header json /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/);
CB::Browser::plan($t, 49);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    circuit_breaker_zone cb:1m;

    # this instance, a peer that answers (8083) and one that is down (8084)
    circuit_breaker_fleet 127.0.0.1:%%PORT_8080%% 127.0.0.1:%%PORT_8083%%
                          127.0.0.1:%%PORT_8084%% id=127.0.0.1:%%PORT_8080%%
                          interval=200ms secret=0123456789abcdef-dashboard;

    # trips on 4 failures in a 2 s window and stays open: its window empties
    upstream up {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=2s min_requests=4 failure_rate=50% open=60s
                        jitter=0%;
    }

    # half-open as long as no second request comes: three probes close it;
    # the window (3 s) has let the trip's answers go when the probe comes
    upstream hp {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=3s min_requests=2 open=3s jitter=0% probes=3
                        probe_interval=1s;
    }

    # its second server fails and is ejected for a minute
    upstream pool {
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
        circuit_breaker jitter=0%;
        circuit_breaker_eject min_requests=4 time=60s;
    }

    # the same server fails there too, is ejected for a second, and comes
    # back through a ramp of two minutes
    upstream rpool {
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
        circuit_breaker jitter=0%;
        circuit_breaker_eject min_requests=4 time=1s ramp=120s;
    }

    # two requests in flight at most
    upstream lim {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker limit=adaptive limit_min=2 limit_max=2
                        limit_initial=2;
    }

    # the peer thinks its origin is down
    upstream calm {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        proxy_read_timeout 10s;

        location /up/ { proxy_pass http://up; }
        location /hp/ { proxy_pass http://hp; }
        location /pool/ { proxy_pass http://pool; }
        location /rpool/ { proxy_pass http://rpool; }
        location /lim/ {
            proxy_pass http://lim;
            circuit_breaker_class $arg_class;
        }

        location = /circuit_breaker {
            circuit_breaker_status control=on;
        }
    }
EOF

# the peer that answers: what peer.msg says (once the test wrote it), else
# a message with no opinion

my $peer_id = '127.0.0.1:' . port(8083);
my $fleet_key = '0123456789abcdef-dashboard';
my $msgfile = $t->testdir() . '/peer.msg';
$t->run_daemon(\&CB::Origin::run, port(8083), sub {
	my ($c) = @_;
	local $/ = "\r\n\r\n";
	my $head = <$c> // '';
	my ($nonce) = $head =~ /^X-Circuit-Breaker-Fleet: pull \S+ (\S+) /mi;
	my $body = "cbfleet 1 $peer_id 0 0\n";
	if (open my $fh, '<', $msgfile) {
		local $/;
		$body = <$fh>;
	}
	# sealed for the pull's nonce under the fleet's key, as a genuine peer does
	$body = CB::FleetPeer::seal($fleet_key, $nonce // '', $body);
	print $c "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
		. 'Content-Length: ' . length($body) . "\r\n"
		. "Connection: close\r\n\r\n$body";
	close $c;
});
my ($hits, $bad) = start($t, 8081, 8082);
$t->waitforsocket("$peer_id") or die "the peer did not start\n";

###############################################################################

# the page's own formats

sub pct {
	my ($v) = @_;
	return '–' unless defined $v;
	my $d = $v > 0 && $v < 0.1 ? 1 : 0;
	return sprintf("%.${d}f%%", $v * 100);
}

sub ms {
	my ($v) = @_;
	return '–' unless defined $v;
	return ($v < 10 ? sprintf('%.2f', $v) =~ s/\.?0+$//r : int($v + 0.5))
		. ' ms';
}

sub status_json {
	return json(http_get('/circuit_breaker')) || {};
}

sub breaker {
	my ($upstream) = @_;
	my @b = breakers("/circuit_breaker?upstream=$upstream&route=default");
	return @b == 1 ? $b[0] : {};
}

sub server_of {
	my ($b, $port) = @_;
	my ($s) = grep { $_->{address} eq '127.0.0.1:' . port($port) }
		@{ $b->{servers} || [] };
	return $s || {};
}

sub wait_for {
	my ($what, $seconds) = @_;
	my $end = time() + $seconds;
	while (time() < $end) {
		my $v = $what->();
		return $v if $v;
		sleep(0.1);
	}
	return undef;
}

my $red = 'rgb(211, 47, 47)';
my $green = 'rgb(46, 125, 50)';
my $amber = 'rgb(242, 169, 0)';

###############################################################################

# the states: up opens and its window ages out, hp is half-open after one
# slow probe, pool's second server is ejected

is(join(' ', map { status(http_get("/up/x?status=500&n=$_")) } 1 .. 5),
	'500 500 500 500 503', 'up: the 4th failure opens it');
is(join(' ', map { status(http_get("/hp/x?status=500&n=$_")) } 1 .. 2),
	'500 500', 'hp: the 2nd failure opens it');

CB::Origin::behave($bad, '* status=500');
wait_for(sub {
	http_get("/pool/x?n=" . rand());
	server_of(breaker('pool'), 8082)->{state} eq 'ejected';
}, 10);
is(server_of(breaker('pool'), 8082)->{state}, 'ejected', 'pool: 8082 ejected');

# in rpool too; then it heals, and a request returns it there (in pool it stays out a minute)
wait_for(sub {
	http_get("/rpool/x?n=" . rand());
	server_of(breaker('rpool'), 8082)->{state} eq 'ejected';
}, 10);
CB::Origin::behave($bad);
my $ramping = wait_for(sub {
	http_get("/rpool/x?n=" . rand());
	my $s = server_of(breaker('rpool'), 8082);
	($s->{state} // '') eq 'in' && ($s->{ramp_share} // 1) < 1;
}, 15);
ok($ramping, 'rpool: 8082 back, ramping');

my $b = CB::Browser->new($t);
my $r = $b->drive('open', url => $b->url('/circuit_breaker'));
ok($r->{ok} && $r->{status} == 200, 'the dashboard');

# short-circuited at a known pace while the page polls: 8 in about 2 s

for (1 .. 8) {
	http_get('/up/sc');
	sleep(0.25);
}
sleep(1.2);

# an open breaker whose window aged out: the numbers that tripped it

$r = $b->row(upstream => 'up', route => 'default', state => 'open');
my $j = breaker('up');
my $tr = $j->{tripped} || {};
my $tw = $tr->{window} || {};
is($j->{window}{requests}, 0, 'up: its live window is empty (JSON)');
is($r->{cells}{failures}, "tripped at $tw->{failures}/$tw->{requests} = "
	. pct($tw->{failure_rate}) . ' ≥ ' . pct($tr->{threshold})
	. ' window now 0% · 0% of 0 in 2s', 'up: the trip\'s numbers, the window now');
is($tw->{failures} . '/' . $tw->{requests}, '4/4', 'up: tripped by 4 of 4 (JSON)');
is($r->{color}, $red, 'up: red');
my ($rate, $all) = ($r->{cells}{shorted} // '') =~ m!^([\d.]+)/s (\d+) in all$!;
is($all, $j->{totals}{short_circuited}, 'up: short-circuited in all, as the JSON');
ok(defined $rate && $rate >= 0.3 && $rate <= 8,
	'up: short-circuited per second near the pace sent')
	or diag($r->{cells}{shorted});
$b->keep('open');

# half-open: the probe is the origin's latency (in a fleet the instance
# probes once the fleet's order lets it: ask until a request is let through
# as the probe)

my $probe = wait_for(sub {
	my $x = http_get('/hp/probe?delay=700');
	status($x) == 200 ? $x : undef;
}, 15);
is(status($probe), 200, 'hp: a slow good probe');
is(breaker('hp')->{state}, 'half_open', 'hp: half-open, 1 of 3 probes');
sleep(1.2);

$r = $b->row(upstream => 'hp', route => 'default', state => 'half_open');
$j = breaker('hp');
ok($j->{latency_ms}{p95} >= 700 * 0.828 - 0.5, 'hp: the probe\'s 700 ms (JSON)')
	or diag(explain($j->{latency_ms}));
is((split / p50 /, $r->{cells}{latency} // '')[0], 'probes ' . ms($j->{latency_ms}{p95}),
	'hp: origin p95 from the probes');
like($r->{cells}{when}, qr/^open since \d\d:\d\d:\d\d \((?:\d+m )?\d+s\) half-open \d+s · 1\/3 good probes · probe (?:in \d+s|due)$/,
	'hp: the probes needed');
is($r->{color}, $amber, 'hp: amber');
$b->keep('half-open');

# the pool: a row per server, under the upstream

$r = $b->row(upstream => 'pool', server => '127.0.0.1:' . port(8082),
	state => 'ejected');
$j = breaker('pool');
my $s = server_of($j, 8082);
$tr = $s->{tripped} || {};
$tw = $tr->{window} || {};
ok($r->{found} && $r->{label} eq 'ejected' && $r->{color} eq $red,
	'pool: the ejected server, red');
like($r->{cells}{failures}, qr/^ejected at \Q$tw->{failures}\/$tw->{requests}\E = \Q@{[ pct($tw->{failure_rate}) ]}\E ≥ \Q@{[ pct($tr->{threshold}) ]}\E window now /,
	'pool: the window that ejected it');
ok($tw->{requests} >= 4, "pool: ejected on $tw->{requests} requests (JSON)");
my $back = int($s->{returns_at} - time() + 0.5);
my ($shown) = ($r->{cells}{when} // '') =~ /back in (\d+)s/;
ok(defined $shown && abs($shown - $back) <= 2,
	"pool: back in ${back}s") or diag($r->{cells}{when});
like($r->{cells}{when}, qr/ ejections $s->{ejections} · returned $s->{totals}{returns}$/,
	'pool: its ejections and returns');
is(join(' ', @{ $r->{buttons} || [] }), 'eject restore', 'pool: eject, restore');
$r = $b->row(upstream => 'pool', server => '127.0.0.1:' . port(8081),
	state => 'in');
ok($r->{found} && $r->{label} eq 'in' && $r->{color} eq $green,
	'pool: the good server, in, green');
$b->keep('pool');

# rpool's returning server: in, and the share of its picks it takes now, as the JSON says
$r = $b->row(upstream => 'rpool', server => '127.0.0.1:' . port(8082), state => 'in');
my $share = server_of(breaker('rpool'), 8082)->{ramp_share} // 1;
my ($ramp) = ($r->{cells}{when} // '') =~ / · ramp (\d+)%/;
ok($r->{found} && $r->{label} eq 'in' && $r->{color} eq $green && defined $ramp
	&& abs($ramp - 100 * $share) <= 3 && $share >= 0.1 && $share < 0.5,
	sprintf('rpool: the returning server ramps: %s (JSON %.3f)', $r->{cells}{when} // '-',
		$share)) or diag(explain($r));
$b->keep('ramp');

# the limit while it sheds: floor measured first, then two slow requests
# hold both slots and twelve more are shed at a known pace

wait_for(sub {
	http_get('/lim/fast');
	defined breaker('lim')->{limit}{min_latency_ms};
}, 10);
my @slow = map { http_get("/lim/slow?delay=8000&n=$_&class=critical", start => 1) } 1 .. 2;
wait_for(sub { breaker('lim')->{limit}{in_flight} == 2 }, 5);
my $shed = 0;
for (1 .. 12) {
	my $x = http_get("/lim/over?n=$_&class=sheddable");
	$shed++ if status($x) == 503
		&& (header($x, 'X-Circuit-State') // '') eq 'limited';
	sleep(0.25);
}
is($shed, 12, 'lim: 12 shed');
sleep(1.2);

$r = $b->row(upstream => 'lim', route => 'default');
$j = breaker('lim');
my $l = $j->{limit} || {};
ok($l->{limit} == 2 && $l->{in_flight} == 2 && $l->{shed} == 12,
	'lim: limit 2, 2 in flight, 12 shed (JSON)') or diag(explain($l));
my ($l1, $srate, $floor) = ($r->{cells}{limit} // '')
	=~ m!^(.*? in flight) shed ([\d.]+)/s · floor (.*)$!;
is($l1, '2 · 2 in flight', 'lim: the limit and in flight');
ok(defined $srate && $srate >= 0.5 && $srate <= 12,
	'lim: shed per second near the pace sent') or diag($r->{cells}{limit});
is($floor, ms($l->{min_latency_ms}), 'lim: the measured floor');

# by class: the two slow requests are critical, the twelve shed sheddable,
# the fast ones that measured the floor of no class (default); the cell names
# the classes in flight and those shed, the tooltip every figure

my $c = $l->{classes} || {};
ok(($c->{critical}{in_flight} // -1) == 2 && ($c->{sheddable}{shed} // -1) == 12
	&& ($c->{default}{admitted} // 0) > 0 && !$c->{default}{in_flight}
	&& !$c->{critical}{shed} && !$c->{default}{shed},
	'lim: by class (JSON)') or diag(explain($c));
is($r->{cells}{classes}, 'in flight critical 2 shed sheddable 12',
	'lim: in flight and shed by class');
like($r->{titles}{classes} // '',
	qr/^critical: 2 in flight, \d+ admitted, 0 shed\ndefault: 0 in flight, $c->{default}{admitted} admitted, 0 shed\nsheddable: 0 in flight, \d+ admitted, 12 shed$/,
	'lim: every class\'s figures in the tooltip');
$b->keep('limit');

# the fleet: the peer that answers says calm's origin is down

$j = status_json();
my ($calm) = grep { $_->{upstream} eq 'calm' } @{ $j->{breakers} || [] };
ok($calm && $calm->{fingerprint}, 'calm: its fingerprint (JSON)');
open my $fh, '>', "$msgfile.tmp" or die "$msgfile: $!\n";
print $fh "cbfleet 1 $peer_id 1 0\n"
	. "$peer_id calm default $calm->{fingerprint} open 0 4100 31 29 0 0 - p\n";
close $fh;
rename "$msgfile.tmp", $msgfile or die "$msgfile: $!\n";

my $f = wait_for(sub {
	my $f = status_json()->{fleet} || {};
	my %p = map { $_->{id} => $_ } @{ $f->{peers} || [] };
	my ($fb) = grep { $_->{upstream} eq 'calm' } @{ $f->{breakers} || [] };
	$f if $fb && $fb->{suspicious} && $p{$peer_id}{reachable}
		&& ($p{'127.0.0.1:' . port(8084)}{failures} // 0) >= 1;
}, 10);
ok($f, 'fleet: the peer reachable, calm suspicious, the other peer down (JSON)')
	or diag(explain(status_json()->{fleet}));
$f ||= {};
sleep(1.2);

$r = $b->drive('fleet');
my %peer = map { $_->{id} => $_ } @{ $r->{peers} || [] };
my $down = '127.0.0.1:' . port(8084);
ok($r->{shown}, 'fleet: shown');
like($r->{summary}, qr/^instance 127\.0\.0\.1:\d+ · 1 of 2 peers reachable · suspicious breakers: 1 ·/,
	'fleet: 1 of 2 peers reachable, 1 suspicious breaker') or diag($r->{summary});
ok($peer{$peer_id} && $peer{$peer_id}{label} eq 'reachable'
	&& $peer{$peer_id}{color} eq $green, 'fleet: the peer that answers, green');
like($peer{$peer_id}{text} // '', qr/^reachable \Q$peer_id\E · last exchange [01]s ago · [1-9]\d* exchanges, \d+ failed, 0 refused$/,
	'fleet: its last exchange, just now');
ok($peer{$down} && $peer{$down}{label} eq 'unreachable'
	&& $peer{$down}{color} eq $red, 'fleet: the peer that is down, red');
like($peer{$down}{text} // '', qr/^unreachable \Q$down\E · last exchange never · 0 exchanges, [1-9]\d* failed/,
	'fleet: never exchanged with, pulls failed');

$r = $b->row(upstream => 'calm', route => 'default');
my ($fb) = grep { $_->{upstream} eq 'calm' } @{ $f->{breakers} || [] };
$fb ||= {};
my $prober = !defined $fb->{designated_prober} ? ''
	: $fb->{designated_prober} eq $f->{instance} ? ' prober: this instance'
	: " prober: $fb->{designated_prober}";
is($r->{cells}{fleet}, "suspicious · $fb->{peers_open} peer open$prober",
	'calm: suspicious, the peer open, the prober');
like($r->{cells}{state}, qr/^closed suspicious$/, 'calm: closed, suspicious');
$b->keep('fleet');

# worst first: open, half-open, closed with something amiss, the rest

$r = $b->drive('rows');
is(join(', ', @{ $r->{rows} || [] }),
	'up/default open, hp/default half_open, calm/default closed, '
	. 'lim/default closed, pool/default closed, '
	. 'pool server 127.0.0.1:' . port(8082) . ' ejected, '
	. 'pool server 127.0.0.1:' . port(8081) . ' in, '
	. 'rpool/default closed, '
	. 'rpool server 127.0.0.1:' . port(8081) . ' in, '
	. 'rpool server 127.0.0.1:' . port(8082) . ' in',
	'worst first, servers under their upstream');
like($r->{counts}, qr/^1 open, 1 half-open, 4 closed, 1 servers ejected, 1 limits shedding, 1 suspicious$/,
	'the counts') or diag($r->{counts});

$b->drive('fill', selector => '#filter', value => 'ejected');
is(join(', ', @{ $b->drive('rows')->{rows} || [] }),
	'pool server 127.0.0.1:' . port(8082) . ' ejected', 'filter "ejected"');
$b->drive('fill', selector => '#filter', value => 'ramping');
is(join(', ', @{ $b->drive('rows')->{rows} || [] }),
	'rpool server 127.0.0.1:' . port(8082) . ' in', 'filter "ramping"');
$b->drive('fill', selector => '#filter', value => 'shedding');
is(join(', ', @{ $b->drive('rows')->{rows} || [] }), 'lim/default closed',
	'filter "shedding"');
$b->drive('fill', selector => '#filter', value => '');

$r = $b->drive('report');
is_deeply([ @{ $r->{offsite} || [] }, @{ $r->{csp} || [] },
	@{ $r->{consoleErrors} || [] }, @{ $r->{pageErrors} || [] } ], [],
	'nothing from elsewhere, no CSP violation, no script error');
$b->keep('all');
$b->quit;

http_end($_) for @slow;

###############################################################################
