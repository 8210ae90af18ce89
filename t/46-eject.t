#!/usr/bin/perl

# Ejection with every balancer that keeps nginx's round-robin peers: round
# robin, least_conn, hash, ip_hash and random, each with and without an
# upstream zone, at four worker processes.  One server of two answers 500:
# it is ejected on the attempt that crosses its threshold (the line is in the
# log at once), clients then see no error from it and it gets no request,
# the upstream's own breaker stays closed; once it answers again, the one
# probe after its ejection time returns it, and it gets traffic again.

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
use CB::Status qw/ breaker_at /;
use CB::Response qw/ status header /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

# name => balancer directives; ip_hash sends every client of 127.0.0.1 to
# the first server, so the bad server comes first everywhere.

my @bal = (
	[ rr => '' ],
	[ lc => 'least_conn;' ],
	[ hash => 'hash $arg_k;' ],
	[ iph => 'ip_hash;' ],
	[ rnd => 'random;' ],
);

my @ups;
for my $b (@bal) {
	push @ups, [ $b->[0], $b->[1], '' ],
		[ "$b->[0]z", $b->[1], "zone $b->[0]z 64k;" ];
}

my $t = Test::Nginx->new()
	->has(qw/http proxy upstream_least_conn upstream_hash upstream_ip_hash
		upstream_random upstream_zone/)
	->plan(scalar(@ups) * 7);

my ($upstreams, $locations) = ('', '');

for (@ups) {
	my ($name, $bal, $zone) = @$_;
	$upstreams .= <<"EOF";
    upstream $name {
        $zone
        $bal
        server 127.0.0.1:%%PORT_8082%%;
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker jitter=0%;
        circuit_breaker_eject min_requests=4 time=3s;
    }

EOF
	$locations .= "        location /$name/ { proxy_pass http://$name; }\n";
}

$t->write_file_expand('nginx.conf', conf(4, <<"EOF"));
$upstreams
    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

$locations
        location = /status { circuit_breaker_status; }
    }
EOF

my ($good, $bad) = start($t, 8081, 8082);

###############################################################################

my ($pg, $pb) = (port(8081), port(8082));

sub status_of { breaker_at("/status?upstream=$_[0]") }

sub server_state {
	my ($b, $port) = @_;
	my ($s) = grep { $_->{address} eq "127.0.0.1:$port" } @{$b->{servers}};
	return $s ? $s->{state} : 'none';
}

CB::Origin::behave($bad, '* status=500');

my $k = 0;

for (@ups) {
	my ($name) = @$_;
	my $re = qr!^/$name/!;

	# until the ejection line: each request on a connection of its own, so
	# that the four workers share the traffic

	my $line = qr/circuit breaker "$name" server 127\.0\.0\.1:$pb ejected: /;
	my ($n, $ejected_at) = (0, undef);
	while ($n++ < 40) {
		http_get("/$name/x?k=" . $k++);
		if ($t->read_file('error.log') =~ $line) {
			$ejected_at = CB::Origin::hits($bad, $re);
			last;
		}
	}
	is($ejected_at, 4, "$name: ejected on the attempt that crossed 4 failures")
		or diag("after $n requests");
	like($t->read_file('error.log'),
		qr/server 127\.0\.0\.1:$pb ejected: failure rate 100% \(4\/4\) >= 50% in 10s, back in 3s/,
		"$name: ejection logged with its numbers");

	# at once: every worker skips it

	my @s = map { status(http_get("/$name/x?k=" . $k++)) } 1 .. 16;
	is(join(' ', grep { $_ != 200 } @s), '', "$name: no errors after ejection");
	is(CB::Origin::hits($bad, $re), $ejected_at, "$name: no request to it");

	my $b = status_of($name);
	ok($b->{state} eq 'closed' && server_state($b, $pb) eq 'ejected'
		&& server_state($b, $pg) eq 'in',
		"$name: upstream closed, server ejected")
		or diag(encode_json($b));
}

# the bad server answers again: one probe after 3s returns it everywhere

CB::Origin::behave($bad);
sleep 3.1;

for (@ups) {
	my ($name) = @$_;
	my $re = qr!^/$name/!;
	my $before = CB::Origin::hits($bad, $re);

	# round robin and least_conn bring it back through the ramp (t/49's
	# shares); a balancer that picks by a key or at random gives it its
	# share at once

	my $ramps = $name =~ /^(rr|lc)z?$/;
	my @s = map { status(http_get("/$name/x?k=" . $k++)) } 1 .. 12;
	my ($ramp) = $t->read_file('error.log') =~
		/circuit breaker "$name" server 127\.0\.0\.1:$pb returned: 1 good probe(, ramp from 10% over 10s)?/;
	is($ramp // '-', $ramps ? ', ramp from 10% over 10s' : '-',
		"$name: returned by its probe");
	ok(CB::Origin::hits($bad, $re) >= $before + ($ramps ? 1 : 2)
		&& !grep({ $_ != 200 } @s),
		"$name: back in the pool")
		or diag("@s; " . (CB::Origin::hits($bad, $re) - $before));
}

###############################################################################
