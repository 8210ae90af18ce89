#!/usr/bin/perl

# The breaker wraps whatever balancer the upstream uses: least_conn,
# hash $arg_k, random, keepalive (and least_conn + keepalive), with the
# circuit_breaker directive before or after the balancer directive.  Traffic
# is still balanced, keepalive connections are still reused, and the breaker
# still trips and short-circuits.
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/45-balancers.t

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT http_end /;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Response qw/ status header /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

# name => [ balancer directives, breaker first? ]

my @ups = (
	[ lc1 => 'least_conn;', 1 ],
	[ lc2 => 'least_conn;', 0 ],
	[ hash1 => 'hash $arg_k;', 1 ],
	[ hash2 => 'hash $arg_k;', 0 ],
	[ hashc => 'hash $arg_k consistent;', 0 ],
	[ rnd1 => 'random;', 1 ],
	[ rnd2 => 'random;', 0 ],
	[ rndtwo => 'random two least_conn;', 0 ],
	[ ka1 => 'keepalive 8;', 1 ],
	[ ka2 => 'keepalive 8;', 0 ],
	[ lcka1 => 'least_conn; keepalive 8;', 1 ],
	[ lcka2 => 'least_conn; keepalive 8;', 0 ],
	[ hashka => 'hash $arg_k; keepalive 8;', 0 ],
);

my %ka = map { $_->[0] => 1 } grep { $_->[1] =~ /keepalive/ } @ups;
my %hash = map { $_->[0] => 1 } grep { $_->[1] =~ /hash/ } @ups;

my @has = qw/ http proxy upstream_least_conn upstream_hash upstream_random
	upstream_keepalive /;

my $t = Test::Nginx->new()->has(@has)->plan(
	scalar(@ups) * 5 + scalar(keys %ka) + scalar(keys %hash) + 1);

my $breaker = 'circuit_breaker window=30s min_requests=4 failure_rate=20% '
	. 'open=30s jitter=0%;';

my ($upstreams, $locations) = ('', '');

for (@ups) {
	my ($name, $bal, $first) = @$_;
	my $servers = "        server 127.0.0.1:%%PORT_8081%%;\n"
		. "        server 127.0.0.1:%%PORT_8082%%;\n";
	$upstreams .= "    upstream $name {\n"
		. ($first ? "        $breaker\n" : '')
		. $servers
		. "        $bal\n"
		. ($first ? '' : "        $breaker\n")
		. "    }\n\n";
	$locations .= "        location /$name/ {\n"
		. "            proxy_pass http://$name;\n"
		. ($ka{$name} ? "            proxy_http_version 1.1;\n"
			. "            proxy_set_header Connection \"\";\n" : '')
		. "        }\n\n";
}

$t->write_file_expand('nginx.conf', conf(1, <<"EOF"));
$upstreams
    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

$locations    }
EOF

my ($hits1, $hits2) = start($t, 8081, 8082);

###############################################################################


my ($p1, $p2) = (port(8081), port(8082));

for (@ups) {
	my ($name) = @$_;
	my $re = qr!^/$name/!;

	# closed: balanced over both servers

	my (%origin, @seq);
	for my $k (1 .. 16) {
		my $r = http_get("/$name/ok?k=$k");
		$origin{header($r, 'X-Origin') // 'none'}++;
		push @seq, header($r, 'X-Origin-Seq') // 0;
	}

	ok(CB::Origin::hits($hits1, $re) >= 1
		&& CB::Origin::hits($hits2, $re) >= 1
		&& ($origin{$p1} // 0) + ($origin{$p2} // 0) == 16,
		"$name: both servers used")
		or diag(join ', ', map { "$_=$origin{$_}" } keys %origin);

	if ($ka{$name}) {
		my $reused = grep { $_ > 1 } @seq;
		cmp_ok($reused, '>=', 8, "$name: upstream keepalive")
			or diag("@seq");
	}

	my %same;
	for (1 .. 3) {
		my $r = http_get("/$name/ok?k=same");
		$same{header($r, 'X-Origin') // 'none'}++;
	}
	if ($hash{$name}) {
		is(join(',', values %same), '3', "$name: same key, same server");
	}

	# 19 successes: 5 failures counted make 5/24 >= 20% (4/23 does not).  Both
	# servers fail; until both show it, a failure of the one whose own window does
	# (each server's breaker ejects at the same 20 %) is the pool's to fix, not
	# counted, and the pool may lose one server, after at most its min_requests
	# (10) attempts: the breaker opens on the 5th to 15th failure, as the balancer
	# spreads them (round robin: the 6th).

	my (@s, $r);
	for my $k (1 .. 20) {
		$r = http_get("/$name/fail?status=500&k=$k");
		push @s, status($r);
		last if status($r) == 503;
	}
	ok(status($r) == 503 && header($r, 'X-Circuit-State') eq 'open'
		&& (header($r, 'Retry-After') // '') =~ /^(29|30)$/,
		"$name: short-circuit headers") or diag($r);
	my $failed = grep { $_ == 500 } @s;
	ok($failed >= 5 && $failed <= 15 && "@s" eq join(' ', ('500') x $failed, '503'),
		"$name: opened by the 5th to 15th failure") or diag("@s");

	my ($h1, $h2) = (CB::Origin::hits($hits1, $re),
		CB::Origin::hits($hits2, $re));
	is($h1 + $h2, 16 + 3 + $failed, "$name: origin hits before opening");

	@s = map { status(http_get("/$name/open?k=$_")) } 1 .. 10;
	is(join(' ', @s), join(' ', ('503') x 10)
		. (CB::Origin::hits($hits1, $re) == $h1
		&& CB::Origin::hits($hits2, $re) == $h2 ? '' : ' (origin hit)'),
		"$name: no origin hits while open");
}

my @opened = $t->read_file('error.log') =~ /circuit breaker "(\w+)\/default" opened/g;
is(join(' ', sort @opened), join(' ', sort map { $_->[0] } @ups),
	'each breaker opened once');

###############################################################################
