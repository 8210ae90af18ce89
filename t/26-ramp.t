#!/usr/bin/perl

# The recovery ramp (ramp=4s ramp_start=20%), after a close by active
# probes, worker_processes 4:
#
# - the share of requests let through rises from 20 % to 100 % over the ramp,
#   counted at the origin second by second;
# - the others are turned away as when open: 503 with Retry-After: 1 and
#   X-Circuit-State: recovering ($circuit_breaker_state too), or the stale
#   cache entry when there is one;
# - failures during the ramp are judged by the live window: it reopens;
# - the status page shows the share (JSON and Prometheus) and counts the
#   requests turned away.
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/26-ramp.t

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Status qw/ breaker_at wait_state /;
use CB::Response qw/ status header body /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy cache/)->plan(28);

$t->write_file_expand('nginx.conf', conf(4, <<'EOF'));
    circuit_breaker_zone cb:1m;
    circuit_breaker_header on;

    proxy_cache_path %%TESTDIR%%/cache keys_zone=one:1m;

    log_format cb '$uri $status "$circuit_breaker_state"';
    access_log %%TESTDIR%%/cb.log cb;

    upstream r {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=10 failure_rate=50%
                        probes=1 probe_interval=200ms
                        probe_uri=/health ramp=4s ramp_start=20%;
    }

    server {
        listen       127.0.0.1:8080 reuseport;
        server_name  localhost;

        location /r/ {
            proxy_pass http://r;
        }

        location /c/ {
            proxy_pass http://r;
            circuit_breaker_route c;
            proxy_cache one;
            proxy_cache_valid 200 1s;
            proxy_cache_use_stale error timeout;
            proxy_no_cache $http_x_nocache;
        }

        location = /cb {
            circuit_breaker_status;
        }
    }

EOF

my $hits = start($t, 8081);

###############################################################################

# the breaker that the status location shows (see CB::Status)

sub breaker { breaker_at("/cb?upstream=r&route=$_[0]") }

sub get_nocache {
	my ($uri) = @_;
	return http(<<EOF);
GET $uri HTTP/1.0
Host: localhost
X-NoCache: 1

EOF
}

# trips a route with failing requests: true once a request is answered open

sub trip {
	my ($prefix, $max) = @_;
	for my $i (1 .. $max // 30) {
		my $r = get_nocache("${prefix}trip$i");
		return 1 if (header($r, 'X-Circuit-State') // '') eq 'open';
	}
	return 0;
}

###############################################################################

# the ramp's share, counted at the origin

CB::Origin::behave($hits, '* status=500');
ok(trip('/r/'), 'r: opens');

CB::Origin::behave($hits);
my $closed = wait_state('/cb?upstream=r&route=default', 'closed', 3);
my $t0 = $closed ? $closed->{since} : time();
like($closed && $closed->{last_transition}, qr/^1 good probe$/, 'r: closed by a probe');

my (@sent, $mid);
while (time() < $t0 + 4.8) {
	my $s = time();
	my $r = http_get(sprintf('/r/s?ts=%.6f', $s));
	push @sent, [ $s, status($r), header($r, 'X-Circuit-State') // '-',
		header($r, 'Retry-After') // '-' ];
	$mid //= breaker('default') if $s > $t0 + 2;
}

# expected share at time T after the close

sub share {
	my ($d) = @_;
	return 1 if $d >= 4;
	return 0.2 + 0.8 * ($d < 0 ? 0 : $d / 4);
}

my %origin = map { /ts=([\d.]+)/ ? ($1 => 1) : () }
	grep { m!^/r/s\?! } do {
		open my $fh, '<', $hits or die "$!";
		<$fh>;
	};

for my $w ([0, 1], [1, 2], [2, 3], [3, 4], [4.05, 4.8]) {
	my @in = grep { $_->[0] - $t0 >= $w->[0] && $_->[0] - $t0 < $w->[1] } @sent;
	my ($exp, $var) = (0, 0);
	for (@in) {
		my $p = share($_->[0] - $t0);
		$exp += $p;
		$var += $p * (1 - $p);
	}
	my $got = grep { $origin{sprintf('%.6f', $_->[0])} } @in;
	my $tol = 4 * sqrt($var) + 0.03 * @in + 1;
	ok(@in >= 20 && abs($got - $exp) <= $tol,
		"r: share in [$w->[0], $w->[1]) s counted at the origin")
		or diag(sprintf('%d of %d reached the origin, %.1f expected',
			$got, scalar @in, $exp));
}

my @passed = grep { $_->[1] == 200 } @sent;
my @away = grep { $_->[1] != 200 } @sent;
is(scalar(keys %origin), scalar @passed, 'r: every pass reached the origin');
ok(!grep({ $_->[1] != 503 || $_->[2] ne 'recovering' || $_->[3] ne '1' } @away),
	'r: turned away with 503, recovering, Retry-After: 1')
	or diag(join ' ', map { "@$_[1 .. 3]" } @away[0 .. 2]);
cmp_ok(scalar @away, '>=', 100, 'r: many turned away');
ok(!grep({ $_->[2] ne 'closed' } @passed), 'r: passes say closed');

my $log_rec = () = $t->read_file('cb.log') =~ m!^/r/s 503 "recovering"$!mg;
is($log_rec, scalar @away, 'r: $circuit_breaker_state is recovering');

ok($mid && $mid->{state} eq 'closed' && $mid->{state_code} == 0
	&& $mid->{ramp_share} > 0.5 && $mid->{ramp_share} < 0.8,
	'r: status shows the share mid-ramp')
	or diag(explain $mid);

my $b = breaker('default');
is($b->{ramp_share}, 1, 'r: share 1 after the ramp');
my $shed = $b->{totals}{ramp_shed};
is($shed, scalar @away, 'r: ramp_shed counts them');
is($b->{totals}{short_circuited}, $closed && $closed->{totals}{short_circuited},
	'r: not counted as short-circuited');

my $p = http_get('/cb?format=prometheus');
my $l = 'zone="cb",upstream="r",route="default"';
like($p, qr/^nginx_circuit_breaker_ramp_share\{\Q$l\E\} 1\.0$/m,
	'prometheus: ramp_share');
like($p, qr/^nginx_circuit_breaker_ramp_shed_total\{\Q$l\E\} \Q$shed\E$/m,
	'prometheus: ramp_shed_total');
like($p, qr/^nginx_circuit_breaker_probes_needed\{\Q$l\E\} 0$/m,
	'prometheus: probes_needed');

###############################################################################

# route c: stale served to the requests the ramp turns away

my $item = '/c/item?body=stale+one';
is(body(http_get($item)), 'stale one', 'c: cached');

# "proxy_cache_valid 1s" keeps it fresh until the end of the next second
sleep 2.1;

CB::Origin::behave($hits, '/c/ status=500', '/health status=500');
ok(trip('/c/'), 'c: opens');
my $r = get_nocache($item);
ok(status($r) == 200 && body($r) eq 'stale one'
	&& header($r, 'X-Circuit-State') eq 'open', 'c: stale while open');

CB::Origin::behave($hits);
ok(wait_state('/cb?upstream=r&route=c', 'closed', 3), 'c: closed by probes');

my ($stale, $through) = (0, 0);
my $before = CB::Origin::hits($hits, qr!^/c/item!);
for (1 .. 30) {
	$r = get_nocache($item);
	if ((header($r, 'X-Circuit-State') // '') eq 'recovering') {
		$stale++ if status($r) == 200 && body($r) eq 'stale one';
		last if $stale >= 3;
	} else {
		$through++;
	}
}
is($stale, 3, 'c: stale served to requests the ramp turns away');
is(CB::Origin::hits($hits, qr!^/c/item!) - $before, $through,
	'c: the others reached the origin');

# failures during the ramp reopen it

CB::Origin::behave($hits, '/c/ status=500', '/health status=500');
ok(trip('/c/', 300), 'c: failures during the ramp reopen it');
$b = breaker('c');
ok($b->{state} eq 'open' && $b->{totals}{opened} == 2
	&& $b->{last_transition} =~ /^failure rate/ && $b->{ramp_share} == 1,
	'c: open again, no ramp') or diag(explain $b);
is($b->{probes_needed}, 1, 'c: probes needed');

###############################################################################
