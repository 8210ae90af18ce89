#!/usr/bin/perl

# Active probes to upstreams reached with proxy_pass https://: the probe
# speaks TLS from the first byte with the location's proxy_ssl_* settings
# (verification, name, SNI exactly when nginx sends it); of locations that
# differ, the strictest; a certificate the location would refuse keeps the
# breaker open, said once at "error"; a plain upstream whose location shares
# its TLS settings with an https one is probed in plain HTTP, and the TLS
# origin never sees a plain-HTTP probe, before the heal or after.
#
# The TLS origin is a server block of the same nginx in front of CB::Origin,
# so one behaviour file drives both.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start self_signed log_count /;
use CB::Origin;
use CB::Status qw/ breaker_at wait_state /;
use CB::Response qw/ header /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy http_ssl/)
	->has_daemon('openssl')->plan(19);

$t->write_file_expand('nginx.conf', conf(2, <<'EOF'));
    circuit_breaker_zone cb:1m;
    circuit_breaker_header on;

    log_format sni '$uri "$ssl_server_name" "$http_host" "$http_user_agent"';

    upstream sec {
        server 127.0.0.1:%%PORT_8084%%;
        circuit_breaker window=5s min_requests=4 failure_rate=50%
                        probes=2 probe_interval=200ms
                        probe_uri=/sec/health probe_host=api.test;
    }

    upstream bad {
        server 127.0.0.1:%%PORT_8084%%;
        circuit_breaker window=5s min_requests=4 failure_rate=50%
                        probes=2 probe_interval=200ms probe_uri=/bad/health;
    }

    upstream plain {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=5s min_requests=4 failure_rate=50%
                        probes=2 probe_interval=200ms probe_uri=/plain/health;
    }

    upstream anon {
        server 127.0.0.1:%%PORT_8084%%;
        circuit_breaker window=5s min_requests=4 failure_rate=50%
                        probes=2 probe_interval=200ms probe_uri=/anon/health;
    }

    upstream nosni {
        server 127.0.0.1:%%PORT_8084%%;
        circuit_breaker window=5s min_requests=4 failure_rate=50%
                        probes=2 probe_interval=200ms probe_uri=/nosni/health;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        # verified, by name, with SNI
        location /sec/ {
            proxy_pass https://sec;
            proxy_ssl_verify on;
            proxy_ssl_name localhost;
            proxy_ssl_server_name on;
            proxy_ssl_trusted_certificate localhost.crt;
        }

        # two locations passing to "bad" differ: the strictest, which verifies
        # a name the certificate does not have, sets its probes' TLS, although
        # it comes second; users pass through the first
        location /bad/ {
            proxy_pass https://bad;
        }

        location /badv/ {
            proxy_pass https://bad;
            proxy_ssl_verify on;
            proxy_ssl_name wrong.test;
            proxy_ssl_trusted_certificate localhost.crt;
        }

        # verified by name, without SNI (proxy_ssl_server_name off), as nginx
        location /nosni/ {
            proxy_pass https://nosni;
            proxy_ssl_verify on;
            proxy_ssl_name localhost;
            proxy_ssl_trusted_certificate localhost.crt;
        }

        # no proxy_ssl_* of their own: both share the server's TLS settings
        location /plain/ {
            proxy_pass http://plain;
        }

        location /anon/ {
            proxy_pass https://anon;
        }

        location = /cb {
            circuit_breaker_status;
        }
    }

    server {
        listen       127.0.0.1:%%PORT_8084%% ssl;
        server_name  localhost;

        ssl_certificate     localhost.crt;
        ssl_certificate_key localhost.key;

        access_log %%TESTDIR%%/tls.log sni;

        location / {
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }
    }
EOF

self_signed($t, 'localhost');

my $hits = start($t, 8081);

###############################################################################

# the breaker that the status location shows (see CB::Status)

sub breaker { breaker_at("/cb?upstream=$_[0]") }

sub trip {
	my ($prefix) = @_;
	for my $i (1 .. 20) {
		my $r = http_get("${prefix}trip$i");
		return 1 if (header($r, 'X-Circuit-State') // '') eq 'open';
	}
	return 0;
}

###############################################################################

CB::Origin::behave($hits, '* status=500');
ok(trip("/$_/"), "$_: opens") for qw/ sec bad plain anon nosni /;

CB::Origin::behave($hits);

my $b = wait_state('/cb?upstream=sec', 'closed', 3);
is($b && $b->{last_transition}, '2 good probes', 'sec: closed by probes over TLS');
my $tls = $t->read_file('tls.log');
like($tls, qr!^/sec/health "localhost" "api\.test" "nginx circuit breaker probe"$!m,
	'sec: TLS with SNI, probe_host');

ok(wait_state('/cb?upstream=plain', 'closed', 3), 'plain: closed by probes');
is(CB::Origin::hits($hits, qr!^/plain/health!), 2, 'plain: probed in plain HTTP');

ok(wait_state('/cb?upstream=anon', 'closed', 3), 'anon: closed by probes');
like($t->read_file('tls.log'), qr!^/anon/health "-" !m, 'anon: probed over TLS, no SNI');

ok(wait_state('/cb?upstream=nosni', 'closed', 3), 'nosni: closed by verified probes');
$tls = $t->read_file('tls.log');
ok($tls =~ m!^/nosni/health "-" !m && $tls !~ m!^/nosni/health "localhost"!m,
	'nosni: no SNI, as nginx sends none') or diag($tls);

sleep 1;
$b = breaker('bad');
ok($b->{state} eq 'open' && $b->{totals}{probes} >= 3 && $b->{totals}{tls_errors} >= 3,
	'bad: a refused certificate keeps it open, counted in tls_errors')
	or diag(explain $b);
my $errors = log_count($t, qr/\[error\].*circuit breaker "bad\/default" probe to 127\.0\.0\.1:\d+ failed: SSL certificate does not match/);
ok($errors >= 1 && $errors <= 2, 'bad: said at error once per worker')
	or diag($errors);
cmp_ok(log_count($t, qr/\[info\].*circuit breaker "bad\/default" probe to .* failed: SSL certificate does not match/),
	'>=', 2, 'bad: then at info');
like($t->read_file('error.log'),
	qr/\[warn\].*circuit breaker: locations passing to upstream "bad" over TLS differ in their "proxy_ssl_\*" settings, its probes take those of location "\/badv\/" \(proxy_ssl_verify on, proxy_ssl_server_name off\)/,
	'bad: the strictest location named');

# The TLS port never received plain HTTP: no probe asked in clear, before the
# heal (the 500s) or after.
is(log_count($t, qr/plain HTTP request was sent to HTTPS port|client sent plain HTTP request to HTTPS port/), 0,
	'no plain-HTTP probe reached the TLS origin');
cmp_ok(CB::Origin::hits($hits, qr!^/(sec|anon|nosni)/health!), '>=', 6,
	'the TLS probes reached the origin');

###############################################################################
