#!/usr/bin/perl

# circuit_breaker_fleet: every bad use fails "nginx -t" with nginx's own
# "[emerg] ... in FILE:LINE" wording; good ones pass.  Then one instance
# with a fleet serves its message at "?format=fleet" of its status location,
# only with the shared secret (403 without or with a wrong one), only where
# allow/deny let the client in, read-only; shows the fleet on the status page
# (JSON "fleet" member, each breaker's fingerprint, Prometheus families); a
# peer that is down and one that answers nonsense only move its counters;
# after a reload the new worker 0 takes the exchange over.

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
use CB::Response qw/ status header body /;
use JSON::PP qw//;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy access/)->plan(40);

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
my $peers = '127.0.0.1:8091 127.0.0.1:8092';

bad($t, 'a name, not an address', { HTTP => "$f peer.example:80 id=127.0.0.1:8090;" },
	$f, qq{invalid value "peer.example:80" $in, }
	. 'must be an address such as 10.0.0.5:8080');

bad($t, 'port 0', { HTTP => "$f 127.0.0.1:0 id=127.0.0.1:8090;" },
	$f, qq{invalid value "127.0.0.1:0" $in, }
	. 'must be an address such as 10.0.0.5:8080');

bad($t, 'peer twice', { HTTP => "$f $peers 127.0.0.1:8091 id=127.0.0.1:8090;" },
	$f, qq{invalid value "127.0.0.1:${\ port(8091)}" $in, is listed twice});

bad($t, 'no id', { HTTP => "$f $peers;" },
	$f, qq{"$f" must have "id" parameter});

bad($t, 'id not an address', { HTTP => "$f $peers id=edge-1;" },
	$f, qq{invalid value "id=edge-1" $in, }
	. q{must be this instance's address as its peers list it});

bad($t, 'only itself', { HTTP => "$f 127.0.0.1:8090 id=127.0.0.1:8090;" },
	$f, qq{"$f" must list at least one peer besides "id"});

bad($t, 'interval too short', { HTTP => "$f $peers id=127.0.0.1:8090 interval=10ms;" },
	$f, qq{invalid value "interval=10ms" $in, must be from 100ms to 1h});

bad($t, 'interval not a time', { HTTP => "$f $peers id=127.0.0.1:8090 interval=soon;" },
	$f, qq{invalid value "interval=soon" $in});

bad($t, 'fanout 0', { HTTP => "$f $peers id=127.0.0.1:8090 fanout=0;" },
	$f, qq{invalid value "fanout=0" $in, must be at least 1});

bad($t, 'uri not a path', { HTTP => "$f $peers id=127.0.0.1:8090 uri=status;" },
	$f, qq{invalid value "uri=status" $in, must be a path from "/"});

bad($t, 'empty secret', { HTTP => "$f $peers id=127.0.0.1:8090 secret=;" },
	$f, qq{invalid value "secret=" $in, }
	. 'must be 1 to 256 visible ASCII characters');

bad($t, 'unknown parameter', { HTTP => "$f $peers id=127.0.0.1:8090 gossip=on;" },
	$f, 'invalid parameter "gossip=on"');

bad($t, 'parameter twice', { HTTP => "$f $peers id=127.0.0.1:8090 interval=1s interval=2s;" },
	$f, qq{duplicate parameter "interval" $in});

bad($t, 'directive twice', { HTTP => "$f $peers id=127.0.0.1:8090;\n"
	. "    $f $peers id=127.0.0.1:8090 interval=2s;" },
	'interval=2s', qq{"$f" directive is duplicate});

bad($t, 'not in server', { SERVER => "$f $peers id=127.0.0.1:8090;" },
	$f, qq{"$f" directive is not allowed here});

bad($t, 'no arguments', { HTTP => "$f;" },
	$f, qq{invalid number of arguments in "$f" directive});

good($t, 'the same list on every instance', { HTTP =>
	"$f 127.0.0.1:8090 $peers id=127.0.0.1:8090;" });

good($t, 'every parameter', { HTTP => "$f $peers [::1]:8093 10.0.0.9 "
	. 'id=127.0.0.1:8090 interval=500ms fanout=2 uri=/cb secret=s3cr3t;' });

###############################################################################

# One instance in a fleet of three: one peer is down, the other is the
# origin, which answers anything with "200 origin ... ok" (a peer that lies).
# It acts alone, and says so only in its counters.

$t->write_file_expand('nginx.conf', fill($template,
	HTTP => "$f 127.0.0.1:%%PORT_8090%% 127.0.0.1:%%PORT_8091%% "
		. '127.0.0.1:%%PORT_8081%% id=127.0.0.1:%%PORT_8090%% '
		. 'interval=200ms secret=s3cr3t;',
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

start($t, 8081);

my $secret = 'X-Circuit-Breaker-Fleet-Secret';

# the exchange worker publishes within its first round
my $msg;
my $end = time() + 5;
while (time() < $end) {
	$msg = req('GET', '/circuit_breaker?format=fleet', "$secret: s3cr3t");
	last if status($msg) == 200;
	sleep 0.1;
}

my $id = '127.0.0.1:' . port(8090);

is(status($msg), 200, 'fleet message served');
like(header($msg, 'Content-Type'), qr!^text/plain!, 'as text');
like(body($msg), qr/^cbfleet 1 \Q$id\E 0 \d+\n\z/,
	'header line: version, sender, no records yet, delay');

my $r = req('GET', '/circuit_breaker?format=fleet');
is(status($r), 403, 'no secret: 403');
like(body($r), qr/the fleet secret is missing or wrong in "$secret"/,
	'says why');
is(status(req('GET', '/circuit_breaker?format=fleet', "$secret: s3cr3T")), 403,
	'wrong secret: 403');
is(status(req('GET', '/circuit_breaker?format=fleet', "$secret: s3cr3t!")), 403,
	'longer secret: 403');
is(status(req('GET', '/closed?format=fleet', "$secret: s3cr3t")), 403,
	'deny all: 403 even with the secret');
is(status(req('POST', '/circuit_breaker?format=fleet', "$secret: s3cr3t")), 405,
	'read-only: POST is refused');

# the status page: fleet member, fingerprints; a peer down counts failures,
# a lying one parse errors
sleep 0.5;

my $json = body(req('GET', '/circuit_breaker'));
like($json, qr/"fingerprint":"[0-9a-f]{16}","suspicious":false,"suspicious_until":null\}/,
	'breaker shows its fingerprint and suspicion');
like($json, qr/,"fleet":\{"published":\d+\.\d+,"instance":"\Q$id\E"/,
	'fleet member, with its publication time');

my $page = eval { JSON::PP::decode_json($json) } // {};
my %peer = map { $_->{id} => $_ } @{$page->{fleet}{peers} // []};
my ($down, $liar) = map { $peer{'127.0.0.1:' . port($_)} // {} } 8091, 8081;
ok(!$down->{reachable} && $down->{failures} >= 1 && !$down->{parse_errors},
	"a peer down: unreachable, $down->{failures} failed pulls")
	or diag($json);
ok(!$liar->{reachable} && $liar->{parse_errors} >= 1 && !$liar->{exchanges},
	"a lying peer: unreachable, $liar->{parse_errors} messages refused")
	or diag($json);
ok(CB::Nginx::log_count($t, qr/\[info\].*circuit breaker fleet: message of peer "127\.0\.0\.1:\d+" refused/),
	'the refusal is logged at info');
like($json, qr/"breakers":\[\{"upstream":"u","route":"default",
	"fingerprint":"[0-9a-f]{16}","suspicious":false/x,
	'fleet breaker object');

my $prom = body(req('GET', '/circuit_breaker?format=prometheus'));
like($prom, qr/^nginx_circuit_breaker_fleet_peer_reachable\{zone="circuit_breaker",peer="127\.0\.0\.1:\d+"\} 0$/m,
	'prometheus: peer_reachable');
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
is(CB::Nginx::log_count($t, qr/circuit breaker fleet: "\Q$id\E" exchanges with 2 peer\(s\) about 1 breaker\(s\)/),
	2, 'started once per configuration');

###############################################################################
