#!/usr/bin/perl

# circuit_breaker_fleet: every bad use fails "nginx -t" with nginx's own
# "[emerg] ... in FILE:LINE" wording (a fleet without a secret among them,
# and no error repeats a secret); good ones pass.  Then one instance with a
# fleet serves its message at "?format=fleet" of its status location only to
# a pull authenticated under the secret, sealed with the puller's nonce (403
# without, with a wrong MAC, or from no peer), only where allow/deny let the
# client in, read-only, and takes an authenticated poke (204); shows the
# fleet on the status page (JSON "fleet" member, each breaker's fingerprint,
# Prometheus families).  Peers that answer a forged message (no MAC, another
# secret), one altered by a byte, or an earlier answer replayed are refused
# and counted (auth_failures, logged once each at warn) and change nothing;
# a peer that is down only moves its counters; after a reload the new
# worker 0 takes the exchange over.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ sleep time /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT /;
use CB::Nginx qw/ start req /;
use CB::Config qw/ fill conf_fails conf_passes /;
use CB::Origin;
use CB::FleetPeer;
use CB::Response qw/ status header body /;
use JSON::PP qw//;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy access/)->plan(77);

my $template = CB::Nginx::conf(1, <<'EOF');
HTTP

    upstream u {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=5;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

SERVER
        location / {
            proxy_pass http://u;
        }
    }
EOF

# configurations that "nginx -t" must refuse or pass: the template with
# PARTS filled in (see CB::Config)

sub bad {
	my ($t, $name, $parts, @emerg) = @_;
	conf_fails($t, $name, fill($template, %$parts), @emerg);
}

sub good {
	my ($t, $name, $parts) = @_;
	conf_passes($t, $name, fill($template, %$parts));
}

###############################################################################

my $f = 'circuit_breaker_fleet';
my $in = qq{in "$f" directive};
my $S = 'secret=0123456789abcdef0123456789abcdef';
my $peers = '127.0.0.1:8091 127.0.0.1:8092';

bad($t, 'a name, not an address', { HTTP => "$f peer.example:80 id=127.0.0.1:8090 $S;" },
	$f, qq{invalid value "peer.example:80" $in, }
	. 'must be an address such as 10.0.0.5:8080');

bad($t, 'port 0', { HTTP => "$f 127.0.0.1:0 id=127.0.0.1:8090 $S;" },
	$f, qq{invalid value "127.0.0.1:0" $in, }
	. 'must be an address such as 10.0.0.5:8080');

bad($t, 'peer twice', { HTTP => "$f $peers 127.0.0.1:8091 id=127.0.0.1:8090 $S;" },
	$f, qq{invalid value "127.0.0.1:${\ port(8091)}" $in, is listed twice});

bad($t, 'no id', { HTTP => "$f $peers $S;" },
	$f, qq{"$f" must have "id" parameter});

bad($t, 'id not an address', { HTTP => "$f $peers id=edge-1 $S;" },
	$f, qq{invalid value "id=edge-1" $in, }
	. q{must be this instance's address as its peers list it});

bad($t, 'only itself', { HTTP => "$f 127.0.0.1:8090 id=127.0.0.1:8090 $S;" },
	$f, qq{"$f" must list at least one peer besides "id"});

bad($t, 'interval too short', { HTTP => "$f $peers id=127.0.0.1:8090 interval=10ms $S;" },
	$f, qq{invalid value "interval=10ms" $in, must be from 100ms to 1h});

bad($t, 'interval not a time', { HTTP => "$f $peers id=127.0.0.1:8090 interval=soon $S;" },
	$f, qq{invalid value "interval=soon" $in, a time is expected (e.g. 30s, }
	. '500ms, 2m; units: ms, s, m, h, d, w)');

bad($t, 'fanout 0', { HTTP => "$f $peers id=127.0.0.1:8090 fanout=0 $S;" },
	$f, qq{invalid value "fanout=0" $in, must be from 1 to 16});

bad($t, 'fanout over the ceiling', { HTTP => "$f $peers id=127.0.0.1:8090 fanout=17 $S;" },
	$f, qq{invalid value "fanout=17" $in, must be from 1 to 16});

bad($t, 'fanout over the peers', { HTTP => "$f $peers id=127.0.0.1:8090 fanout=3 $S;" },
	$f, qq{invalid value "fanout=3" $in, must be at most the 2 peer(s) listed});

bad($t, 'uri not a path', { HTTP => "$f $peers id=127.0.0.1:8090 uri=status $S;" },
	$f, qq{invalid value "uri=status" $in, must be a path from "/"});

bad($t, 'no secret', { HTTP => "$f $peers id=127.0.0.1:8090;" },
	$f, qq{"$f" must have "secret" or "secret_file" parameter (or "auth=off" in a lab)});

bad($t, 'short secret', { HTTP => "$f $peers id=127.0.0.1:8090 secret=s3cr3t;" },
	$f, qq{invalid "secret" $in, must be 16 to 1024 characters});
sub nginx_t_out {
	my ($t, $file, $http) = @_;
	$t->write_file_expand($file, fill($template, HTTP => $http));
	return (CB::Nginx::nginx_t($t, $file))[1];
}

unlike(nginx_t_out($t, 'secret.conf', "$f $peers id=127.0.0.1:8090 secret=s3cr3t;"),
	qr/s3cr3t/, 'the secret is not repeated');

bad($t, 'secret file missing', { HTTP => "$f $peers id=127.0.0.1:8090 "
	. 'secret_file=no-such.key;' },
	$f, q{cannot read "secret_file" "} . $t->testdir()
	. '/no-such.key" (2: No such file or directory)');

$t->write_file('short.key', "sh0rt-key-here\n");
bad($t, 'secret file too short', { HTTP => "$f $peers id=127.0.0.1:8090 "
	. 'secret_file=short.key;' },
	$f, q{invalid secret in "secret_file" "} . $t->testdir()
	. '/short.key": its first line must be 16 to 1024 characters');
unlike(nginx_t_out($t, 'secret-file.conf', "$f $peers id=127.0.0.1:8090 secret_file=short.key;"),
	qr/sh0rt-key-here/, 'nor what its file holds');

bad($t, 'two secrets', { HTTP => "$f $peers id=127.0.0.1:8090 $S auth=off;" },
	$f, qq{"$f" takes one of "secret", "secret_file" and "auth=off"});

bad($t, 'https without a trusted certificate', { HTTP =>
	"$f https://127.0.0.1:8091 id=127.0.0.1:8090 $S;" },
	$f, qq{"$f" must have "ssl_trusted_certificate" parameter for "https://" peers});

bad($t, 'ssl_* without https', { HTTP =>
	"$f $peers id=127.0.0.1:8090 $S ssl_trusted_certificate=ca.crt;" },
	$f, qq{"$f" has "ssl_*" parameters but no "https://" peer});

bad($t, 'unknown parameter', { HTTP => "$f $peers id=127.0.0.1:8090 gossip=on $S;" },
	$f, qq{invalid parameter "gossip=" $in, expected peer addresses (or nats:// servers) }
	. 'and one of: id, interval, fanout, uri, secret, secret_file, auth, '
	. 'ssl_trusted_certificate, ssl_certificate, ssl_certificate_key, ssl_name, subject, '
	. 'nats_credentials');
unlike(nginx_t_out($t, 'typo.conf', "$f $peers id=127.0.0.1:8090 secrte=0123456789abcdef-typo;"),
	qr/abcdef-typo/, 'a mistyped secret= is not repeated');

# a bus server by name: resolved when the configuration is read, and refused when it does not
bad($t, 'a bus server whose name does not resolve', { HTTP =>
	"$f nats://cb-no-such-host.invalid id=a $S;" },
	$f, q{host not found in "cb-no-such-host.invalid:4222" of the "circuit_breaker_fleet" }
	. 'directive');
good($t, 'a bus server by name', { HTTP => "$f nats://localhost:4222 id=a $S;" });

bad($t, 'parameter twice', { HTTP => "$f $peers id=127.0.0.1:8090 interval=1s interval=2s $S;" },
	$f, qq{duplicate parameter "interval" $in});

bad($t, 'directive twice', { HTTP => "$f $peers id=127.0.0.1:8090 $S;\n"
	. "    $f $peers id=127.0.0.1:8090 interval=2s $S;" },
	'interval=2s', qq{"$f" directive is duplicate});

bad($t, 'not in server', { SERVER => "$f $peers id=127.0.0.1:8090 $S;" },
	$f, qq{"$f" directive is not allowed here});

bad($t, 'no arguments', { HTTP => "$f;" },
	$f, qq{invalid number of arguments in "$f" directive});

good($t, 'the same list on every instance', { HTTP =>
	"$f 127.0.0.1:8090 $peers id=127.0.0.1:8090 $S;" });

$t->write_file('fleet.key', "0123456789abcdef0123456789abcdef\n");
good($t, 'every parameter', { HTTP => "$f $peers [::1]:8093 10.0.0.9 "
	. 'id=127.0.0.1:8090 interval=500ms fanout=2 uri=/cb secret_file=fleet.key;' });

$t->write_file_expand('lab.conf', fill($template,
	HTTP => "$f $peers id=127.0.0.1:8090 auth=off;"));
my ($lab_rc, $lab_out) = CB::Nginx::nginx_t($t, 'lab.conf');
ok($lab_rc == 0 && $lab_out =~ /\[warn\] "circuit_breaker_fleet" with "auth=off" believes any message/,
	'auth=off, in a lab: passes, warned of') or diag($lab_out);

###############################################################################

# One instance in a fleet: one peer is down, the origin answers anything with
# "200 origin ... ok" (no MAC), and four stand-ins answer a message saying
# the breaker is open: without a MAC, under another secret, altered by a
# byte, and (after one genuine answer) that answer replayed.  The instance
# merges the genuine answer only, and its breaker does not move.

my $key = '0123456789abcdef0123456789abcdef';
my %mode = (8092 => 'nomac', 8093 => 'wrongkey', 8094 => 'altered', 8095 => 'replay');
my $fpfile = $t->testdir() . '/fingerprint';

$t->write_file_expand('nginx.conf', fill($template,
	HTTP => "$f 127.0.0.1:%%PORT_8090%% 127.0.0.1:%%PORT_8091%% "
		. '127.0.0.1:%%PORT_8081%% '
		. join(' ', map { "127.0.0.1:%%PORT_${_}%%" } sort keys %mode)
		. ' id=127.0.0.1:%%PORT_8090%% interval=500ms fanout=6 '
		. "secret=$key;",
	SERVER => <<'EOF'));
        location = /circuit_breaker {
            circuit_breaker_status;
            allow 127.0.0.1;
            deny all;
        }

        location = /closed {
            circuit_breaker_status;
            deny all;
        }

EOF

for my $p (sort keys %mode) {
	$t->run_daemon(\&CB::Origin::run, port($p), CB::FleetPeer::serve(
		secret => $key, id => '127.0.0.1:' . port($p), mode => $mode{$p},
		fingerprint => $fpfile, log => $t->testdir() . "/peer-$p.log"));
}

start($t, 8081);
$t->waitforsocket('127.0.0.1:' . port($_)) for sort keys %mode;

my $id = '127.0.0.1:' . port(8090);
my $from = '127.0.0.1:' . port(8091);
my $H = 'X-Circuit-Breaker-Fleet';

sub pull {
	my ($secret, $who, $nonce) = @_;
	return req('GET', '/circuit_breaker?format=fleet',
		"$H: " . CB::FleetPeer::header($secret, 'pull', $who, $nonce));
}

# the exchange worker publishes within its first round
my ($msg, $nonce);
my $end = time() + 5;
while (time() < $end) {
	$nonce = CB::FleetPeer::nonce();
	$msg = pull($key, $from, $nonce);
	last if status($msg) == 200;
	sleep 0.1;
}

is(status($msg), 200, 'fleet message served to an authenticated pull');
like(header($msg, 'Content-Type'), qr!^text/plain!, 'as text');
my $opened = CB::FleetPeer::open_answer($key, $nonce, body($msg));
like($opened // '', qr/^cbfleet 1 \Q$id\E \d+ \d+\n/,
	'sealed with the nonce: header line, version, sender, records, delay');
ok(!defined CB::FleetPeer::open_answer($key, CB::FleetPeer::nonce(), body($msg)),
	'and with that nonce only');
unlike(body($msg), qr/\Q$key\E/, 'the secret does not cross the wire');

# the peers' stand-ins say this breaker is open, with its fingerprint
my $json = body(req('GET', '/circuit_breaker'));
my ($fp) = $json =~ /"fingerprint":"([0-9a-f]{16})"/;
$t->write_file('fingerprint', ($fp // '') . "\n");

my $r = req('GET', '/circuit_breaker?format=fleet');
is(status($r), 403, 'no authentication: 403');
like(body($r), qr/the fleet authentication is missing or wrong in "$H"/,
	'says why');
is(status(pull('another-secret-0123456789abcdef', $from, CB::FleetPeer::nonce())), 403,
	'another secret: 403');
(my $altered = CB::FleetPeer::header($key, 'pull', $from, CB::FleetPeer::nonce()))
	=~ s/ (\S)(\S*)$/' ' . ($1 eq 'a' ? 'b' : 'a') . $2/e;
is(status(req('GET', '/circuit_breaker?format=fleet', "$H: $altered")), 403,
	'a MAC altered by a byte: 403');
is(status(pull($key, '127.0.0.1:1', CB::FleetPeer::nonce())), 403,
	'from no peer: 403');
is(status(pull($key, $id, CB::FleetPeer::nonce())), 403,
	'from this instance itself: 403');
is(status(req('GET', '/closed?format=fleet',
	"$H: " . CB::FleetPeer::header($key, 'pull', $from, CB::FleetPeer::nonce()))), 403,
	'deny all: 403 even authenticated');
is(status(req('POST', '/circuit_breaker?format=fleet',
	"$H: " . CB::FleetPeer::header($key, 'pull', $from, CB::FleetPeer::nonce()))), 405,
	'read-only: POST is refused');

# a poke: the peer is pulled at once
sub pokes_of {
	my ($want) = @_;
	my $n = 0;
	my $end = time() + 3;
	while (time() < $end) {
		my $pg = eval { JSON::PP::decode_json(body(req('GET', '/circuit_breaker'))) } // {};
		($n) = map { $_->{pokes} } grep { $_->{id} eq $from } @{$pg->{fleet}{peers} // []};
		last if ($n // 0) >= $want;
		sleep 0.05;
	}
	return $n // 0;
}
my $poke_h = "$H: " . CB::FleetPeer::header($key, 'poke', $from, CB::FleetPeer::poke_nonce(1000));
my $poke = req('GET', '/circuit_breaker?format=fleet', $poke_h);
is(status($poke), 204, 'an authenticated poke: 204');
is(pokes_of(1), 1, 'the poke is counted');
# the same poke replayed, and an older one: answered alike, and nothing moves
is(status(req('GET', '/circuit_breaker?format=fleet', $poke_h)), 204, 'a replayed poke: 204');
is(status(req('GET', '/circuit_breaker?format=fleet', "$H: "
	. CB::FleetPeer::header($key, 'poke', $from, CB::FleetPeer::poke_nonce(999)))), 204,
	'an older poke: 204');
sleep 0.5;
is(pokes_of(2), 1, 'a replayed or older poke moves nothing');
is(status(req('GET', '/circuit_breaker?format=fleet', "$H: "
	. CB::FleetPeer::header($key, 'poke', $from, CB::FleetPeer::poke_nonce(2000)))), 204,
	'a later poke: 204');
is(pokes_of(2), 2, 'a later poke is counted');
is(status(req('GET', '/circuit_breaker?format=fleet',
	"$H: " . CB::FleetPeer::header('another-secret-0123456789abcdef', 'poke', $from,
		CB::FleetPeer::nonce()))), 403, 'a poke under another secret: 403');

# a few rounds, and longer than the replayed answer's expiry (3 rounds)
sleep 3;

$json = body(req('GET', '/circuit_breaker'));
like($json, qr/"fingerprint":"[0-9a-f]{16}","suspicious":false,"suspicious_until":null\}/,
	'breaker shows its fingerprint, and is not suspicious');
like($json, qr/,"fleet":\{"published":\d+\.\d+,"auth":"hmac-sha256","instance":"\Q$id\E"/,
	'fleet member, with its publication time and authentication');

my $page = eval { JSON::PP::decode_json($json) } // {};
my %peer = map { $_->{id} => $_ } @{$page->{fleet}{peers} // []};
my ($down, $liar) = map { $peer{'127.0.0.1:' . port($_)} // {} } 8091, 8081;
ok(!$down->{reachable} && $down->{failures} >= 1 && !$down->{auth_failures},
	"a peer down: unreachable, $down->{failures} failed pulls")
	or diag($json);
ok(!$liar->{reachable} && $liar->{auth_failures} >= 1 && !$liar->{exchanges},
	"a peer answering without a MAC: unreachable, $liar->{auth_failures} answers refused")
	or diag($json);
for my $p (sort keys %mode) {
	my $s = $peer{'127.0.0.1:' . port($p)} // {};
	# the replayed answer was genuine once (merged, unless that pull timed out)
	my $genuine = $mode{$p} eq 'replay' ? 1 : 0;
	ok(!$s->{reachable} && ($s->{auth_failures} // 0) >= 2
		&& defined $s->{exchanges} && $s->{exchanges} <= $genuine && !$s->{parse_errors},
		"$mode{$p}: refused and counted (" . ($s->{auth_failures} // '-')
		. ' auth failures, ' . ($s->{exchanges} // '-') . ' merged)')
		or diag(explain($s));
	my $pp = port($p);
	my $why = $mode{$p} eq 'nomac' ? 'no authentication' : 'authentication does not verify';
	is(CB::Nginx::log_count($t, qr/\[warn\] .*circuit breaker fleet: answer of peer "127\.0\.0\.1:$pp" refused: $why/),
		1, "$mode{$p}: logged once at warn");
}
my ($b) = @{$page->{breakers} // []};
ok($b && $b->{state} eq 'closed' && !$b->{totals}{opened} && !$b->{suspicious},
	'no breaker moved') or diag($json);
like($json, qr/"breakers":\[\{"upstream":"u","route":"default",
	"fingerprint":"[0-9a-f]{16}","suspicious":false/x,
	'fleet breaker object');
unlike($json, qr/\Q$key\E/, 'the status page does not show the secret');
ok(!CB::Nginx::log_count($t, qr/\Q$key\E/), 'nor does the log');

my $prom = body(req('GET', '/circuit_breaker?format=prometheus'));
like($prom, qr/^nginx_circuit_breaker_fleet_peer_reachable\{zone="circuit_breaker",peer="127\.0\.0\.1:\d+"\} 0$/m,
	'prometheus: peer_reachable');
my $p94 = port(8094);
like($prom, qr/^nginx_circuit_breaker_fleet_peer_auth_failures_total\{zone="circuit_breaker",peer="127\.0\.0\.1:$p94"\} [1-9]\d*$/m,
	'prometheus: peer_auth_failures_total');
like($prom, qr/^nginx_circuit_breaker_fleet_fingerprint_info\{.*upstream="u",route="default".*fingerprint="[0-9a-f]{16}"\} 1$/m,
	'prometheus: fingerprint_info');
like($prom, qr/^nginx_circuit_breaker_fleet_published_seconds\{zone="circuit_breaker"\} \d+\.\d+$/m,
	'prometheus: published_seconds');

# the request path is unchanged
is(status(req('GET', '/')), 200, 'requests pass');

# a reload: the new configuration's worker 0 takes the exchange over
my $before = $page->{fleet}{published};
ok(CB::Nginx::reload($t), 'reloaded');
my $after;
$end = time() + 5;
while (time() < $end) {
	$after = (eval { JSON::PP::decode_json(body(req('GET', '/circuit_breaker'))) }
		// {})->{fleet}{published} // 0;
	last if $after > time() - 0.1;
	sleep 0.1;
}
ok($after > $before && $after > time() - 1, 'the exchange goes on after it');
is(CB::Nginx::log_count($t, qr/circuit breaker fleet: "\Q$id\E" exchanges with 6 peer\(s\) about 1 breaker\(s\)/),
	2, 'started once per configuration');

###############################################################################
