#!/usr/bin/perl

# A fleet across networks: instances that exchange over mutual TLS
# (https:// peers, a private CA, each instance's own certificate, verified
# by IP address one way and by ssl_name with SNI the other), and pushes.
#
#   A. the two instances pull each other over TLS once, at start (their
#      interval is an hour);
#   B. a peer that answers in plain HTTP where TLS is configured, and one
#      whose certificate does not verify, are refused and counted
#      (tls_failures, logged once each at warn), and move nothing;
#   C. when one instance's breaker starts failing and opens, it pushes: the
#      other pulls it at once and is suspicious within a second or two, an
#      hour before its next pull would have come.

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

my $t = Test::Nginx->new()->has(qw/http proxy access http_ssl/)
	->has_daemon('openssl')->plan(14);

my ($module) = ($ENV{TEST_NGINX_GLOBALS} // '') =~ /load_module\s+([^;\s]+)/;
plan(skip_all => 'no module in TEST_NGINX_GLOBALS') unless $module;

$t->write_file_expand('nginx.conf', CB::Nginx::conf(1, <<'EOF'));
    server {
        listen       127.0.0.1:8080;
        server_name  localhost;
        return 204;
    }
EOF

my $hits = start($t, 8081);

# a private CA; instances 0, 1 and 2 have certificates from it for 127.0.0.1 and
# fleet.test, instance 3 a self-signed one
my $d = $t->testdir();
$t->write_file('openssl.conf', <<'EOF');
[ req ]
distinguished_name = dn
[ dn ]
[ leaf ]
basicConstraints = CA:FALSE
subjectAltName = IP:127.0.0.1, DNS:fleet.test
EOF

CB::Fleet::openssl($d,
	"req -x509 -new -nodes -newkey rsa:2048 -days 2 -config $d/openssl.conf "
	. "-subj /CN=fleet-ca/ -addext basicConstraints=critical,CA:TRUE "
	. "-addext keyUsage=keyCertSign,cRLSign -keyout $d/ca.key -out $d/ca.crt");
for my $i (0 .. 2) {
	CB::Fleet::openssl($d, "req -new -nodes -newkey rsa:2048 -config $d/openssl.conf "
		. "-subj /CN=edge$i/ -keyout $d/i$i.key -out $d/i$i.csr");
	CB::Fleet::openssl($d, "x509 -req -days 2 -in $d/i$i.csr -CA $d/ca.crt -CAkey $d/ca.key "
		. "-CAcreateserial -extfile $d/openssl.conf -extensions leaf -out $d/i$i.crt");
}
CB::Fleet::openssl($d,
	"req -x509 -new -nodes -newkey rsa:2048 -days 2 -config $d/openssl.conf "
	. "-extensions leaf -subj /CN=impostor/ -keyout $d/i3.key -out $d/i3.crt");

my $f = CB::Fleet->new(
	dir => "$d/fleet",
	nginx => $Test::Nginx::NGINX,
	module => $module,
	ports => [ map { port(8090 + $_) } 0 .. 3 ],
	tls_ports => [ port(8100), port(8101), undef, port(8103) ],
	certs => $d,
	origin => port(8081),
	interval => '1h',
	breaker => 'window=30s min_requests=10 failure_rate=50% open=30s suspect_min=3',
);

my $plain = '127.0.0.1:' . port(8092);

# the plain peer and the impostor first, so that instance 0's one round meets them
$f->start(2, fleet => 0);
$f->start(3, fleet => 0);
$f->start(1, fleet => 1, peers => [ $f->peer(0), $f->peer(1) ]);
$f->start(0, fleet => 1, fleet_params => 'ssl_name=fleet.test',
	peers => [ $f->peer(1), "https://$plain", $f->peer(3) ]);

###############################################################################
# A. over mutual TLS

# the fleet's own peer records on each side, once the first rounds are done
sub peers {
	my ($i) = @_;
	my $s = $f->status($i) // {};
	return map { $_->{id} => $_ } @{$s->{fleet}{peers} // []};
}

my %p0;
my $end = time() + 5;
while (time() < $end) {
	%p0 = peers(0);
	last if ($p0{$f->id(1)} // {})->{exchanges}
		&& ($p0{$plain} // {})->{tls_failures}
		&& ($p0{$f->id(3)} // {})->{tls_failures};
	sleep 0.1;
}
# instance 1 started first: its one round found instance 0 down; a pull from
# instance 0 is not a push, so it asks for none.  Instance 0's round:
ok(($p0{$f->id(1)} // {})->{exchanges} == 1 && !$p0{$f->id(1)}{tls_failures},
	'pulled over mutual TLS, by ssl_name with SNI') or diag(explain(\%p0));

###############################################################################
# B. refused at TLS

my ($pl, $im) = ($p0{$plain} // {}, $p0{$f->id(3)} // {});
ok($pl->{tls_failures} == 1 && !$pl->{exchanges} && !$pl->{reachable},
	'a plain-HTTP answer where TLS is configured: refused, counted')
	or diag(explain($pl));
ok($im->{tls_failures} == 1 && !$im->{exchanges} && !$im->{reachable},
	'a certificate that does not verify: refused, counted')
	or diag(explain($im));

my $log0 = do { local $/; open my $fh, '<', $f->dir(0) . '/error.log'; <$fh> } // '';
my $pp = port(8092);
my $ip = port(8103);
is(scalar(() = $log0 =~ /\[warn\] .*circuit breaker fleet: pull from peer "127\.0\.0\.1:$pp" refused: SSL handshake failed/g),
	1, 'the plain peer: logged once at warn');
is(scalar(() = $log0 =~ /\[warn\] .*circuit breaker fleet: pull from peer "127\.0\.0\.1:$ip" refused: SSL certificate verify error \(\d+\)/g),
	1, 'the impostor: logged once at warn');

my $b0 = $f->breaker(0);
ok($b0 && $b0->{state} eq 'closed' && !$b0->{suspicious}, 'nothing moved');

###############################################################################
# C. a push, an hour before the next pull

my $users = $f->users(rate => 20, seconds => 5, query => 'status=500',
	instances => [ 1 ]);
my $start = time();
my $open1 = $f->wait_all(5, sub { $_[0]{state} eq 'open' }, 1);
ok($open1, sprintf('instance 1 opened, after %.1fs', ($open1 // time()) - $start));

my $suspicious;
$end = time() + 3;
while (time() < $end) {
	my $b = $f->breaker(0) // {};
	$suspicious = time(), last if $b->{suspicious};
	sleep 0.05;
}
$f->stop_users($users);
ok($suspicious, sprintf('instance 0 suspicious %.2fs after instance 1 opened',
	($suspicious // time()) - ($open1 // time())));

# the status pages follow within a second
my $s1 = {};
$end = time() + 3;
while (time() < $end) {
	%p0 = peers(0);
	$s1 = ($f->status(1) // {})->{fleet} // {};
	last if $s1->{pushes} && ($p0{$f->id(1)} // {})->{pokes};
	sleep 0.1;
}
ok(($s1->{pushes} // 0) >= 1, "instance 1 pushed ($s1->{pushes})");
ok(($p0{$f->id(1)}{pokes} // 0) >= 1 && $p0{$f->id(1)}{exchanges} >= 2,
	"instance 0 was poked ($p0{$f->id(1)}{pokes}) and pulled at once "
	. "($p0{$f->id(1)}{exchanges} exchanges)");
ok(!$p0{$f->id(1)}{tls_failures} && !$p0{$f->id(1)}{auth_failures},
	'over the same authenticated TLS');
my $fl0 = {};
$end = time() + 2;
while (time() < $end) {
	$fl0 = ($f->status(0) // {})->{fleet}{breakers}[0] // {};
	last if $fl0->{peers_open};
	sleep 0.05;
}
is($fl0->{peers_open}, 1, 'instance 0 knows instance 1 open');

my $b1 = $f->breaker(0);
ok($b1->{state} eq 'closed', 'instance 0 itself stays closed: no failure of its own');

$f->stop_all();
is(join('', $f->alerts()), '', 'no alerts');

###############################################################################
