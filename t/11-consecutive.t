#!/usr/bin/perl

# A run of gateway failures opens the breaker at once, whatever the window's rate
# (consecutive=10 by default): ten 502s, refused connections or timeouts in a row open it
# on the tenth, long before min_requests; a success breaks the run; a 500 (the
# application's error) is no gateway failure; consecutive=off turns it off.  A server of
# a pool is ejected by its own run the same way.  Counted at the origin.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start log_count /;
use CB::Origin;
use CB::Status qw/ breaker_at /;
use CB::Response qw/ status header /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(17);

$t->write_file_expand('nginx.conf', conf(2, <<'EOF'));
    circuit_breaker_zone cb:1m;
    circuit_breaker_header on;

    upstream run { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream broken { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream apperr { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream off {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker consecutive=off;
    }
    upstream three {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker consecutive=3;
    }
    upstream refused { server 127.0.0.1:%%PORT_8090%%; circuit_breaker; }
    upstream pool {
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
        circuit_breaker;
        circuit_breaker_eject min_requests=100;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /run/ { proxy_pass http://run; }
        location /broken/ { proxy_pass http://broken; }
        location /apperr/ { proxy_pass http://apperr; }
        location /off/ { proxy_pass http://off; }
        location /three/ { proxy_pass http://three; }
        location /refused/ { proxy_pass http://refused; }
        location /pool/ { proxy_pass http://pool; }
        location = /status { circuit_breaker_status; }
    }
EOF

my ($h1, $h2) = start($t, 8081, 8082);

###############################################################################

sub hits { CB::Origin::hits($h1, $_[0]) + CB::Origin::hits($h2, $_[0]) }

sub states {
	my ($path, $n) = @_;
	return join ' ', map { status(http_get("$path?status=502&i=$_")) } 1 .. $n;
}

# ten 502s in a row: the tenth opens it, the eleventh is short-circuited

is(states('/run/x', 11), join(' ', ('502') x 10, '503'), 'run: opened by the tenth 502 in a row');
is(hits(qr!^/run/!), 10, 'run: ten requests reached the origin');
like($t->read_file('error.log'),
	qr/circuit breaker "run\/default" opened: 10 gateway failures in a row, the last: http_502, retry in \d+s/,
	'run: the log line says so');
my $r = http_get('/run/x');
ok(status($r) == 503 && header($r, 'Retry-After') && header($r, 'X-Circuit-State') eq 'open',
	'run: 503 with Retry-After');
is(breaker_at('/status?upstream=run')->{probes_needed}, 3, 'run: a hard trip, probes will do');

# a success breaks the run: 9 + 1 + 9 is no run of ten, and 19 < min_requests

my @s = (states('/broken/a', 9), status(http_get('/broken/ok')), states('/broken/b', 9));
is("@s", join(' ', ('502') x 9, '200', ('502') x 9), 'broken: a success breaks the run');
is(breaker_at('/status?upstream=broken')->{state}, 'closed', 'broken: closed');

# a 500 is the application's error, not the gateway's

is(join(' ', map { status(http_get("/apperr/x?status=500&i=$_")) } 1 .. 15),
	join(' ', ('500') x 15), 'apperr: fifteen 500s are no gateway run');

# off

is(states('/off/x', 15), join(' ', ('502') x 15), 'off: no run trips it');
is(hits(qr!^/off/!), 15, 'off: every request reached the origin');

# consecutive=3

is(states('/three/x', 4), '502 502 502 503', 'three: opened by the third');

# refused connections (nginx: connect() failed)

is(join(' ', map { status(http_get("/refused/x?i=$_")) } 1 .. 11),
	join(' ', ('502') x 10, '503'), 'refused: opened by the tenth refused connection');
like($t->read_file('error.log'),
	qr/circuit breaker "refused\/default" opened: 10 gateway failures in a row, the last: error/,
	'refused: logged');

# a server of a pool, ejected by its own run (min_requests=100: its rate would not do)

CB::Origin::behave($h2, '* status=502');
my $line = qr/circuit breaker "pool" server 127\.0\.0\.1:${\ port(8082)} ejected: 10 gateway failures in a row, the last: http_502/;
my $n = 0;
while ($n++ < 40) {
	http_get("/pool/x?i=$n");
	last if $t->read_file('error.log') =~ $line;
}
is(CB::Origin::hits($h2, qr!^/pool/!), 10, 'pool: the bad server ejected on its tenth 502 in a row');
my $before = CB::Origin::hits($h2, qr!^/pool/!);
is(join(' ', map { status(http_get("/pool/y?i=$_")) } 1 .. 10), join(' ', ('200') x 10),
	'pool: the others serve');
is(CB::Origin::hits($h2, qr!^/pool/!), $before, 'pool: no request to the ejected server');
is(breaker_at('/status?upstream=pool')->{state}, 'closed', 'pool: the upstream stays closed');

###############################################################################
