#!/usr/bin/perl

# Routes (bulkheads): circuit_breaker_route gives a location its own breaker
# on the same upstream; one route opening leaves the others and the default
# breaker alone.  $circuit_breaker_route / $circuit_breaker_state in
# log_format, circuit_breaker_header, inheritance from the server level.
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/40-routes.t

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT http_end http_content /;
use CB::Nginx qw/ conf start log_count /;
use CB::Origin;
use CB::Response qw/ status header /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy rewrite/)->plan(53);

$t->write_file_expand('nginx.conf', conf(2, <<'EOF'));
    log_format cb '$server_port $uri $status '
                  'route="$circuit_breaker_route" '
                  'state="$circuit_breaker_state"';
    access_log %%TESTDIR%%/cb.log cb;

    upstream up {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 failure_rate=50%
                        open=5s jitter=0%;
    }

    upstream plain {
        server 127.0.0.1:%%PORT_8081%%;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /checkout/ {
            proxy_pass http://up;
            circuit_breaker_route checkout;
        }

        location /catalog/ {
            proxy_pass http://up;
            circuit_breaker_route catalog;
            circuit_breaker_header on;
        }

        location /default/ {
            proxy_pass http://up;
        }

        location /nobreaker/ {
            proxy_pass http://plain;
            circuit_breaker_header on;
            circuit_breaker_route nb;
        }

        location /static {
            circuit_breaker_header on;
            return 200 "static\n";
        }
    }

    server {
        listen       127.0.0.1:8085;
        server_name  localhost;

        circuit_breaker_route srv;
        circuit_breaker_header on;

        location /inh/ {
            proxy_pass http://up;
        }

        location /own/ {
            proxy_pass http://up;
            circuit_breaker_route own;
            circuit_breaker_header off;
        }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

sub nheaders {
	my ($r, $name) = @_;
	my ($head) = split /\x0d?\x0a\x0d?\x0a/, $r // '', 2;
	my @h = $head =~ /^\Q$name\E:/mgi;
	return scalar @h;
}
sub hits { CB::Origin::hits($hits, @_) }
sub get8085 { http_get($_[0], PeerAddr => '127.0.0.1:' . port(8085)) }

# lines of cb.log (the access log) that match

sub access {
	my ($t, $re) = @_;
	return grep { $_ =~ $re } split /\n/, $t->read_file('cb.log');
}

###############################################################################

# closed: header only where circuit_breaker_header is on

my $r = http_get('/catalog/a');
ok(status($r) == 200 && header($r, 'X-Circuit-State') eq 'closed',
	'header on: X-Circuit-State closed') or diag($r);
is(nheaders($r, 'X-Circuit-State'), 1, 'header on: once');

$r = http_get('/default/a');
ok(status($r) == 200 && !defined header($r, 'X-Circuit-State'),
	'header off (default): no X-Circuit-State') or diag($r);

$r = http_get('/nobreaker/a');
ok(status($r) == 200 && !defined header($r, 'X-Circuit-State'),
	'no breaker on the upstream: no X-Circuit-State') or diag($r);

$r = http_get('/static');
ok(status($r) == 200 && !defined header($r, 'X-Circuit-State'),
	'no upstream: no X-Circuit-State') or diag($r);

# checkout fails and opens; the failures pass through with no header

my @r = map { http_get("/checkout/fail?status=500&n=$_") } 1 .. 4;
is(join(' ', map { status($_) } @r), '500 500 500 500',
	'checkout: failures passed through');
is(scalar(grep { defined header($_, 'X-Circuit-State') } @r), 0,
	'checkout: no X-Circuit-State on passed-through responses');
is(hits(qr!^/checkout/!), 4, 'checkout: origin hits');

$r = http_get('/checkout/b');
is(status($r), 503, 'checkout: open');
is(header($r, 'X-Circuit-State'), 'open',
	'checkout: short-circuit carries X-Circuit-State with header off');
is(nheaders($r, 'X-Circuit-State'), 1, 'checkout: X-Circuit-State once');
like(header($r, 'Retry-After') // '', qr/^[45]$/, 'checkout: Retry-After');

my @s = map { status(http_get("/checkout/c?n=$_")) } 1 .. 5;
is("@s", '503 503 503 503 503', 'checkout: stays open');
is(hits(qr!^/checkout/!), 4, 'checkout: no origin hits while open');

is(log_count($t, qr/\[warn\].*circuit breaker "up\/checkout" opened: failure rate 100% \(4\/4\) >= 50% in 10s, retry in 5s/),
	1, 'warn line names "up/checkout"');

# catalog and the default breaker of the same upstream are unaffected

my $h = hits(qr!^/catalog/!);
@r = map { http_get("/catalog/d?n=$_") } 1 .. 5;
is(join(' ', map { status($_) } @r), '200 200 200 200 200',
	'catalog: served');
is(join(' ', map { header($_, 'X-Circuit-State') // '-' } @r),
	'closed closed closed closed closed', 'catalog: closed');
is(hits(qr!^/catalog/!) - $h, 5, 'catalog: origin hits continue');

$h = hits(qr!^/default/!);
@s = map { status(http_get("/default/d?n=$_")) } 1 .. 5;
is("@s", '200 200 200 200 200', 'default: served');
is(hits(qr!^/default/!) - $h, 5, 'default: origin hits continue');

# failures on catalog below the rate keep it closed (1 of 7 now)

$r = http_get('/catalog/e?status=500');
ok(status($r) == 500 && header($r, 'X-Circuit-State') eq 'closed',
	'catalog: one failure, still closed');
is(status(http_get('/catalog/f')), 200, 'catalog: still served');

unlike($t->read_file('error.log'), qr/circuit breaker "up\/(catalog|default)"/,
	'no transition logged for catalog or default');

# now the default breaker opens: catalog is still served, checkout still open

# (6 successes so far)

@s = map { status(http_get("/default/fail?status=500&n=$_")) } 1 .. 7;
is("@s", '500 500 500 500 500 500 503', 'default: opens at 6/12');
is(log_count($t, qr/circuit breaker "up\/default" opened: failure rate 50% \(6\/12\)/),
	1, 'default: warn line');

$r = http_get('/default/g');
ok(status($r) == 503 && header($r, 'X-Circuit-State') eq 'open',
	'default: short-circuited with X-Circuit-State');

$h = hits(qr!^/catalog/!);
is(status(http_get('/catalog/g')), 200, 'catalog: served while default open');
is(hits(qr!^/catalog/!) - $h, 1, 'catalog: origin hit');
is(status(http_get('/checkout/g')), 503, 'checkout: still open');

# server-level route, inherited by /inh/; /own/ has its own

$r = get8085('/inh/a');
ok(status($r) == 200 && header($r, 'X-Circuit-State') eq 'closed',
	'server level: header inherited') or diag($r);
$r = get8085('/own/a');
ok(status($r) == 200 && !defined header($r, 'X-Circuit-State'),
	'location: header off overrides server level') or diag($r);

@s = map { status(get8085("/inh/fail?status=500&n=$_")) } 1 .. 4;
is("@s", '500 500 500 503', 'server level: opens at 3/4');
$r = get8085('/inh/b');
ok(status($r) == 503 && header($r, 'X-Circuit-State') eq 'open',
	'server level route: open') or diag($r);
is(nheaders($r, 'X-Circuit-State'), 1,
	'X-Circuit-State once with header on and short-circuited');
like($t->read_file('error.log'), qr/circuit breaker "up\/srv" opened: failure rate 75% \(3\/4\)/,
	'server level route: warn line names "up/srv"');

$r = get8085('/own/b');
ok(status($r) == 200 && !defined header($r, 'X-Circuit-State'),
	'own route: still closed') or diag($r);
$h = hits(qr!^/catalog/!);
is(status(http_get('/catalog/h')), 200, 'catalog: still served');
is(hits(qr!^/catalog/!) - $h, 1, 'catalog: still reaches origin');

# the access log: $circuit_breaker_route and $circuit_breaker_state

my $p = port(8080);
my $p2 = port(8085);

is(scalar(access($t, qr!^$p /catalog/d 200 route="catalog" state="closed"$!)), 5,
	'log: catalog closed');
is(scalar(access($t, qr!^$p /checkout/fail 500 route="checkout" state="closed"$!)),
	3, 'log: checkout closed before opening');
is(scalar(access($t, qr!^$p /checkout/c 503 route="checkout" state="open"$!)), 5,
	'log: checkout open');
is(scalar(access($t, qr!^$p /default/d 200 route="default" state="closed"$!)), 5,
	'log: default route name');
is(scalar(access($t, qr!^$p /default/g 503 route="default" state="open"$!)), 1,
	'log: default open');
is(scalar(access($t, qr!^$p /nobreaker/a 200 route="" state=""$!)), 1,
	'log: empty without a breaker on the upstream');
is(scalar(access($t, qr!^$p /static 200 route="" state=""$!)), 1,
	'log: empty without an upstream');
is(scalar(access($t, qr!^$p2 /inh/a 200 route="srv" state="closed"$!)), 1,
	'log: route inherited from server level');
is(scalar(access($t, qr!^$p2 /inh/b 503 route="srv" state="open"$!)), 1,
	'log: inherited route open');
is(scalar(access($t, qr!^$p2 /own/b 200 route="own" state="closed"$!)), 1,
	'log: own route');

# each breaker opened exactly once

is(log_count($t, qr/circuit breaker "up\/checkout" opened/), 1,
	'checkout opened once');
is(log_count($t, qr/circuit breaker "up\/srv" opened/), 1, 'srv opened once');
is(log_count($t, qr/circuit breaker "[^"]*" opened/), 3, 'three openings in all');
unlike($t->read_file('error.log'), qr/circuit breaker "up\/(catalog|own)"/,
	'catalog and own never transitioned');
unlike($t->read_file('error.log'), qr/circuit breaker "plain/, 'no breaker on "plain"');

###############################################################################
