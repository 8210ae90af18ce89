#!/usr/bin/perl

# The fleet on a bus the bus's own way of trust: a real nats-server (Debian's,
# started here) that requires TLS, with a certificate from a private CA for
# 127.0.0.1 and nats.test, and another that requires a user and a password.
#
#   a. i0 (the certificate verified by IP address) and i1 (by ssl_name)
#      connect over TLS (the server's /connz says so), are members of
#      each other, and opinions cross: i0 opens on min_requests=20 failures at
#      the origin, i1 is suspicious and opens on suspect_min=3 of its own;
#   b. i2, which trusts another CA, and i6, whose ssl_name is not the
#      certificate's, never connect: bus.state stays off "connected",
#      bus.failures grows, last_error says why, one warn however many tries,
#      and though i0 is open their breakers are not suspicious;
#   c. i3, which lists the TLS server as nats://, is told it requires TLS;
#   d. on the server with a password, i4's nats_credentials file (user,
#      password) connects; i5's, with another password, is refused with the
#      server's "Authorization Violation", and the password is nowhere in
#      its log or status page;
#   e. Prometheus says what the JSON says of the bus, with the families
#      docs/fleet.md lists;
#   f. on a server whose users are each pinned to their member's subjects
#      (the permissions docs/fleet.md gives), i7 and i8 exchange with nothing
#      denied; i9, whose user is pinned to another id, stays connected but is
#      denied (bus.denied, one warn) and never becomes a member; "mallory",
#      who holds the fleet's key and a pinned user of its own, cannot make i8
#      believe a forged "i7 says open": on i7's subject the server refuses it,
#      on its own subject i8 does (refused.subject) -- while the same forgery,
#      published by a user with every permission on i7's subject, makes i8
#      suspicious;
#   g. the TLS server listed by name (tls://localhost:PORT, resolved when the
#      configuration is read): i10, without ssl_name, checks the certificate
#      against "localhost", which it does not carry, and never connects; i11,
#      with ssl_name=nats.test, connects to 127.0.0.1 and hears i0;
#   h. NKeys (made by tools/nats-keys with NATS's own library): on a server
#      that lists i12's public key, i12's seed file signs the server's nonce
#      and connects, i13's (another key) is refused; on a server in operator
#      mode (JWTs, its account preloaded), i14's .creds file connects and i15's,
#      a user of an account the server does not know, is refused; no seed is
#      in a log or on a status page.

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
use CB::Nats;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy access http_ssl/)
	->has_daemon('openssl')->plan(37);

my ($module) = ($ENV{TEST_NGINX_GLOBALS} // '') =~ /load_module\s+([^;\s]+)/;
plan(skip_all => 'no module in TEST_NGINX_GLOBALS') unless $module;

my $MIN = 20;
my $SUSPECT = 3;

$t->write_file_expand('nginx.conf', CB::Nginx::conf(1, <<'EOF'));
    server {
        listen       127.0.0.1:8080;
        server_name  localhost;
        return 204;
    }
EOF

my $hits = start($t, 8081);
my $d = $t->testdir();

# a private CA and the server's certificate from it, for 127.0.0.1 and nats.test; and
# another CA, which signed nothing here
$t->write_file('openssl.conf', <<'EOF');
[ req ]
distinguished_name = dn
[ dn ]
[ leaf ]
basicConstraints = CA:FALSE
subjectAltName = IP:127.0.0.1, DNS:nats.test
EOF

for my $ca (qw/ ca other-ca /) {
	CB::Fleet::openssl($d, "req -x509 -new -nodes -newkey rsa:2048 -days 2 -config $d/openssl.conf "
		. "-subj /CN=$ca/ -addext basicConstraints=critical,CA:TRUE "
		. "-addext keyUsage=keyCertSign,cRLSign -keyout $d/$ca.key -out $d/$ca.crt");
}
CB::Fleet::openssl($d, "req -new -nodes -newkey rsa:2048 -config $d/openssl.conf "
	. "-subj /CN=nats/ -keyout $d/nats.key -out $d/nats.csr");
CB::Fleet::openssl($d, "x509 -req -days 2 -in $d/nats.csr -CA $d/ca.crt -CAkey $d/ca.key "
	. "-CAcreateserial -extfile $d/openssl.conf -extensions leaf -out $d/nats.crt");

# the password server's credentials, right and wrong
my $password = 'pw-' . join '', map { sprintf '%02x', int rand 256 } 1 .. 12;
my $wrong = 'pw-' . join '', map { sprintf '%02x', int rand 256 } 1 .. 12;
$t->write_file('right.cred', "# the bus's own credentials\nuser edge\npassword $password\n");
$t->write_file('wrong.cred', "user edge\npassword $wrong\n");

my $tls = CB::Nats->start(dir => $d, name => 'tls', port => port(8200),
	http_port => port(8201), tls => { cert => "$d/nats.crt", key => "$d/nats.key" });
my $pw = CB::Nats->start(dir => $d, name => 'auth', port => port(8202),
	user => 'edge', password => $password);

# each member's user pinned to its subjects; i9's user pinned to another id's; mallory's to
# its own; and one user with every permission
my %pass = map { $_ => 'pw-' . join '', map { sprintf '%02x', int rand 256 } 1 .. 12 }
	qw/ i7 i8 i9 mallory admin /;
$t->write_file("$_.cred", "user $_\npassword $pass{$_}\n") for qw/ i7 i8 i9 /;
my $pin = CB::Nats->start(dir => $d, name => 'pinned', port => port(8203),
	users => [
		(map { { user => $_, password => $pass{$_},
			permissions => CB::Nats::pinned_permissions($_) } } qw/ i7 i8 mallory /),
		{ user => 'i9', password => $pass{i9},
			permissions => CB::Nats::pinned_permissions('i6') },
		{ user => 'admin', password => $pass{admin} },
	]);

my $f = CB::Fleet->new(
	dir => "$d/fleet",
	nginx => $Test::Nginx::NGINX,
	module => $module,
	ports => [ map { port(8090 + $_) } 0 .. 15 ],
	origin => port(8081),
	bus => [ $tls->url ],
	bus_params => "ssl_trusted_certificate=$d/ca.crt",
	breaker => "window=60s min_requests=$MIN failure_rate=50% open=1h "
		. "max_open=1h suspect_min=$SUSPECT",
);

# tools/nats-keys (TEST_CB_NATS_KEYS, else built here): the NKeys and JWTs of section h

sub nats_keys {
	my $bin = $ENV{TEST_CB_NATS_KEYS};
	return $bin if $bin && -x $bin;
	my $root = "$FindBin::Bin/..";
	system("cd $root && cargo build --release --quiet --locked -p nats-keys") == 0
		or die "cannot build tools/nats-keys\n";
	return ($ENV{CARGO_TARGET_DIR} // "$root/target") . '/release/nats-keys';
}

# an instance that cannot connect: after at least FAILURES failures, its bus; undef if it
# connected or failed fewer times within 20 s

sub refused {
	my ($f, $i, $failures) = @_;
	return CB::Fleet::within(20, sub {
		my $b = $f->bus($i);
		return undef if ($b->{connects} // 1) != 0 || $b->{state} eq 'connected';
		return ($b->{failures} // 0) >= $failures && $b;
	});
}

###############################################################################

# those that will not get in first, so that they have tried for a while when asked
$f->start(2, fleet => 1, bus_params => "ssl_trusted_certificate=$d/other-ca.crt");
$f->start(6, fleet => 1, bus_params => "ssl_trusted_certificate=$d/ca.crt "
	. 'ssl_name=wrong.test');
$f->start(3, fleet => 1, bus => [ 'nats://' . $tls->addr ], bus_params => '');
$f->start(4, fleet => 1, bus => [ $pw->url ], bus_params => "nats_credentials=$d/right.cred");
$f->start(5, fleet => 1, bus => [ $pw->url ], bus_params => "nats_credentials=$d/wrong.cred");
my $by_name = 'tls://localhost:' . port(8200);
$f->start(10, fleet => 1, bus => [ $by_name ], bus_params => "ssl_trusted_certificate=$d/ca.crt");

$f->start(0, fleet => 1);
$f->start(1, fleet => 1, bus_params => "ssl_trusted_certificate=$d/ca.crt ssl_name=nats.test");

###############################################################################
# a. over TLS

my $met = CB::Fleet::within(10, sub { $f->members(0) eq 'i1' && $f->members(1) eq 'i0' });
my @b = map { $f->bus($_) } 0, 1;
ok($met && !grep({ $_->{state} ne 'connected' || $_->{server} ne $tls->addr
	|| ($_->{server_name} // '') ne 'tls' } @b),
	'i0 and i1 connected to the TLS server, members of each other')
	or diag(explain(\@b));

# the server's own view of their connections
my %conn = map { ($_->{name} // '') => $_ } @{$tls->connections()};
my @tv = map { ($conn{"nginx circuit breaker i$_"} // {})->{tls_version} // 'none' } 0, 1;
ok(!grep({ !/^1\.[23]$/ } @tv), "over TLS, by the server's /connz: @tv")
	or diag(explain(\%conn));

my @st = $f->fail_until_open(0, $MIN + 5);
is(CB::Origin::hits($hits), $MIN, "i0 opened on its $MIN failures at the origin");
my $sus = CB::Fleet::within(10, sub { ($f->breaker(1) // {})->{suspicious} });
ok($sus, 'i1 suspicious of it');
CB::Origin::clear($hits);
@st = $f->fail_until_open(1, $MIN + 5);
is(CB::Origin::hits($hits), $SUSPECT, "i1 opened on $SUSPECT failures of its own");
like(($f->breaker(1) // {})->{last_transition} // '', qr/while suspected$/,
	'i1: while suspected');

###############################################################################
# b. a certificate that does not verify

my $b2 = refused($f, 2, 3) // $f->bus(2);
ok(($b2->{failures} // 0) >= 3 && $b2->{state} ne 'connected' && !$b2->{connects},
	"another CA: never connected, $b2->{failures} failures ($b2->{state})");
like($b2->{last_error} // '', qr/^\Q${\ $tls->addr}\E: SSL certificate verify error \(\d+\)$/,
	"last_error: $b2->{last_error}");

my $b6 = refused($f, 6, 3) // $f->bus(6);
ok(($b6->{failures} // 0) >= 3 && $b6->{state} ne 'connected' && !$b6->{connects},
	"another name: never connected, $b6->{failures} failures ($b6->{state})");
like($b6->{last_error} // '', qr/^\Q${\ $tls->addr}\E: SSL certificate does not match/,
	"last_error: $b6->{last_error}");

is(join(' ', map { scalar(() = $f->error_log($_)
		=~ /\[warn\] [^\n]*circuit breaker fleet: bus server [^\n]*reconnecting/g) } 2, 6),
	'1 1', 'one warn each, however many tries');

my @alone = map { $f->breaker($_) // {} } 2, 6;
ok(!grep({ $_->{state} ne 'closed' || $_->{suspicious} } @alone)
	&& $f->members(2) eq '' && $f->members(6) eq '',
	'they hear no one: closed, not suspicious though i0 is open');

###############################################################################
# c. nats:// to a server that requires TLS

my $b3 = refused($f, 3, 2) // $f->bus(3);
ok(($b3->{failures} // 0) >= 2 && !$b3->{connects}, "nats://: never connected, "
	. "$b3->{failures} failures");
like($b3->{last_error} // '', qr/requires TLS/, "last_error: $b3->{last_error}");

###############################################################################
# d. the bus's own credentials

my $b4 = CB::Fleet::within(10, sub { my $b = $f->bus(4); $b->{state} eq 'connected' && $b }) // {};
ok(($b4->{connects} // 0) == 1 && ($b4->{failures} // 1) == 0
	&& ($b4->{server_name} // '') eq 'auth',
	'the right user and password: connected') or diag(explain($b4));

my $b5 = refused($f, 5, 2) // $f->bus(5);
ok(($b5->{failures} // 0) >= 2 && !$b5->{connects},
	"a wrong password: never connected, $b5->{failures} failures");
like($b5->{last_error} // '', qr/Authorization Violation/, "last_error: $b5->{last_error}");

my (undef, $page5) = $f->get(5, '/circuit_breaker', 2);
my (undef, $page4) = $f->get(4, '/circuit_breaker?format=prometheus', 2);
my $logs = join '', map { $f->error_log($_) } 4, 5;
ok(index($logs . ($page5 // '') . ($page4 // ''), $password) < 0
	&& index($logs . ($page5 // ''), $wrong) < 0,
	'no password in the logs or on the status pages');

###############################################################################
# e. Prometheus

my (undef, $prom) = $f->get(0, '/circuit_breaker?format=prometheus', 2);
my $j0 = $f->bus(0);
my %p;
$p{$1} = $2 while ($prom // '') =~ /^(nginx_circuit_breaker_fleet_bus_\S+) (\S+)$/mg;
my $z = 'zone="circuit_breaker"';
is(join(' ', map { $p{$_} // '-' }
		"nginx_circuit_breaker_fleet_bus_connected{$z,server=\"${\ $tls->addr}\"}",
		"nginx_circuit_breaker_fleet_bus_connects_total{$z}",
		"nginx_circuit_breaker_fleet_bus_failures_total{$z}",
		"nginx_circuit_breaker_fleet_bus_members{$z}",
		"nginx_circuit_breaker_fleet_bus_refused_total{$z,reason=\"auth\"}"),
	join(' ', 1, $j0->{connects}, $j0->{failures}, $j0->{members}, $j0->{refused}{auth}),
	'i0: connected, connects, failures, members and refusals as the JSON says');

my (undef, $prom2) = $f->get(2, '/circuit_breaker?format=prometheus', 2);
my $addr = $tls->addr;
like($prom2 // '',
	qr/^nginx_circuit_breaker_fleet_bus_connected\{\Q$z\E,server="\Q$addr\E"\} 0$/m,
	'i2: not connected');

# docs/fleet.md: "…_bus_dropped_out_total, …_bus_dropped_in_total"
is(join(' ', grep { !defined $p{"nginx_circuit_breaker_fleet_bus_${_}{$z}"} }
		qw/ dropped_out_total dropped_in_total /),
	'', 'the dropped families docs/fleet.md lists');

###############################################################################
# f. members pinned to their subjects

my $log9 = length $f->error_log(9);
$f->start($_, fleet => 1, bus => [ $pin->url ], bus_params => "nats_credentials=$d/i$_.cred")
	for 7 .. 9;
my $pinned = CB::Fleet::within(10, sub { $f->members(7) eq 'i8' && $f->members(8) eq 'i7' });
ok($pinned && !grep({ ($f->bus($_)->{denied} // 1) != 0 } 7, 8),
	'pinned: i7 and i8 members of each other, nothing denied')
	or diag(explain([ map { $f->bus($_) } 7, 8 ]));

my $b9 = CB::Fleet::within(10, sub { my $b = $f->bus(9); ($b->{denied} // 0) >= 2 && $b }) // {};
ok(($b9->{state} // '') eq 'connected' && ($b9->{connects} // 0) == 1
	&& ($b9->{failures} // 1) == 0,
	"i9, pinned to another id: denied $b9->{denied} times, still connected")
	or diag(explain($b9));
my @warned = substr($f->error_log(9), $log9) =~ /\[warn\] [^\n]*said: Permissions Violation [^\n]*/g;
is(scalar @warned, 1, 'i9: one warn') or diag(explain(\@warned));
ok($f->members(7) eq 'i8' && $f->members(8) eq 'i7', 'i9 is no one\'s member');

# mallory, with the fleet's key, forges "i7 says open" for i8's breaker
my $fp = ($f->breaker(8) // {})->{fingerprint} // '';
my $forged = sub {
	return CB::Nats::seal($f->{secret}, 'cbbus 1 opinions i7 ' . CB::Nats::now_seq() . " 1000\n"
		. "cbfleet 1 i7 1 0\ni7 origin default $fp open 0 1000 20 20 0 0 - p\n");
};
my $i7 = CB::Nats::subjects(undef, 'i7')->{opinions};
my $mine = CB::Nats::subjects(undef, 'mallory')->{opinions};
my $before = $f->bus(8)->{refused} // {};
my $m = CB::Nats::Client->new(port => $pin->port, user => 'mallory',
	password => $pass{mallory}) or die "nats client: $@\n";
$m->publish($i7, $forged->());
$m->flush(5);
like(join(' ', @{$m->{errors}}), qr/Permissions Violation for Publish to "\Q$i7\E"/,
	'mallory on i7\'s subject: the server refuses');
$m->publish($mine, $forged->());
$m->flush(5);
# watched all along: believed, the forgery would make i8 suspicious until i7's next word
my $seen = 0;
my $suspicious = sub { $seen++ if ($f->breaker(8) // {})->{suspicious} };
my $words = sub {
	my ($p) = grep { $_->{id} eq 'i7' } @{$f->fleet_status(8)->{peers} // []};
	return $p ? $p->{exchanges} : 0;
};
my $sub = CB::Fleet::within(10, sub {
	$suspicious->();
	(($f->bus(8)->{refused} // {})->{subject} // 0) - ($before->{subject} // 0) == 1
});
ok($sub, 'mallory on its own subject, as i7: i8 refuses it (refused.subject)');
my $ex = $words->();
CB::Fleet::within(10, sub { $suspicious->(); $words->() >= $ex + 2 });
ok($fp && !$seen, 'i8 never suspicious until two words of i7 later');
$m->close();

# the same forgery, by a user the bus lets publish anywhere, on i7's subject: believed
my $a = CB::Nats::Client->new(port => $pin->port, user => 'admin',
	password => $pass{admin}) or die "nats client: $@\n";
$a->publish($i7, $forged->());
$a->flush(5);
ok(CB::Fleet::within(10, sub { ($f->breaker(8) // {})->{suspicious} }),
	'unpinned, the same forgery makes i8 suspicious');
$a->close();

###############################################################################
# g. a server listed by name

my $b10 = refused($f, 10, 2) // $f->bus(10);
ok(($b10->{failures} // 0) >= 2 && !$b10->{connects}
	&& $f->error_log(10) =~ /SSL certificate does not match/,
	"$by_name, checked against \"localhost\": never connected, $b10->{failures} failures");

$f->start(11, fleet => 1, bus => [ $by_name ],
	bus_params => "ssl_trusted_certificate=$d/ca.crt ssl_name=nats.test");
my $b11 = CB::Fleet::within(10, sub {
	my $b = $f->bus(11);
	$b->{state} eq 'connected' && $f->members(11) =~ /\bi0\b/ && $b
}) // $f->bus(11);
ok(($b11->{state} // '') eq 'connected' && ($b11->{server} // '') eq $tls->addr,
	"$by_name with ssl_name=nats.test: connected to " . ($b11->{server} // '-')
	. ', hears i0') or diag(explain($b11));

###############################################################################
# h. NKeys and .creds files

my $keys = nats_keys();
chomp(my $pub12 = `$keys nkey $d i12`);
`$keys nkey $d i13`;
system($keys, 'operator', $d) == 0 or die "nats-keys operator failed\n";
my $read = sub { open my $fh, '<', "$d/$_[0]" or die "$_[0]: $!\n"; local $/; <$fh> };
my $nk = CB::Nats->start(dir => $d, name => 'nkey', port => port(8204),
	users => [ { nkey => $pub12 } ]);
my $op = CB::Nats->start(dir => $d, name => 'operator', port => port(8205),
	operator => { jwt => "$d/operator.jwt",
		accounts => { $read->('account.pub') => $read->('account.jwt') } });
$f->start(12, fleet => 1, bus => [ $nk->url ], bus_params => "nats_credentials=$d/i12.nk");
$f->start(13, fleet => 1, bus => [ $nk->url ], bus_params => "nats_credentials=$d/i13.nk");
$f->start(14, fleet => 1, bus => [ $op->url ], bus_params => "nats_credentials=$d/user.creds");
$f->start(15, fleet => 1, bus => [ $op->url ],
	bus_params => "nats_credentials=$d/stranger.creds");

my $connected = sub {
	my ($i) = @_;
	return CB::Fleet::within(10, sub { my $b = $f->bus($i); $b->{state} eq 'connected' && $b })
		// $f->bus($i);
};
my $b12 = $connected->(12);
ok(($b12->{state} // '') eq 'connected' && ($b12->{failures} // 1) == 0,
	'an NKey user\'s seed: the nonce signed, connected') or diag(explain($b12));
my $b13 = refused($f, 13, 2) // $f->bus(13);
ok(!$b13->{connects} && ($b13->{last_error} // '') =~ /Authorization Violation/,
	"another NKey: refused ($b13->{last_error})");
my $b14 = $connected->(14);
ok(($b14->{state} // '') eq 'connected' && ($b14->{failures} // 1) == 0,
	'a .creds file, its account known to the server: connected') or diag(explain($b14));
my $b15 = refused($f, 15, 2) // $f->bus(15);
ok(!$b15->{connects} && ($b15->{last_error} // '') =~ /Authorization Violation/,
	"a .creds file of an unknown account: refused ($b15->{last_error})");

my @seeds = map { $read->($_) =~ /^(SU[A-Z2-7]+)$/m ? $1 : die "no seed in $_\n" }
	qw/ i12.nk i13.nk user.creds stranger.creds /;
my $shown = join '', map {
	my (undef, $page) = $f->get($_, '/circuit_breaker', 2);
	my (undef, $prom) = $f->get($_, '/circuit_breaker?format=prometheus', 2);
	$f->error_log($_) . ($page // '') . ($prom // '')
} 12 .. 15;
ok(!grep({ index($shown, $_) >= 0 } @seeds), 'no seed in the logs or on the status pages');

$f->stop_all();
is(join('', $f->alerts()), '', 'no alerts in the fleet');
$_->kill() for $tls, $pw, $pin, $nk, $op;

###############################################################################
