#!/usr/bin/perl

# prove: alone
# The dashboard at 10 000 breakers, in headless Chromium: the list holds
# them all (aria-rowcount) but draws only the rows on screen, the open ones
# come first, the filter finds one among them, the keyboard reaches the
# last, and the page is up within a generous bound (scripts/measure-status
# measures it).
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/93-dashboard-many.t

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ time /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Browser;
use CB::Nginx qw/ conf start req /;
use CB::Response qw/ status /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/);
CB::Browser::plan($t, 11);

# 1000 upstreams, each with its own breaker and nine routes': 10 000
# breakers (10 000 upstreams would take nginx seconds to start: each
# upstream's name is compared with every other's)

my $n = 10000;
my $ups = join "\n", map {
	"    upstream u$_ { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }"
} 1 .. 1000;
my $locations = join "\n", map {
	my $u = $_;
	map { "        location /u$u/r$_/ { proxy_pass http://u$u; "
		. "circuit_breaker_route r$_; }" } 1 .. 9
} 1 .. 1000;

$t->write_file_expand('nginx.conf', conf(1, <<"EOF"));
    circuit_breaker_zone cb:48m;

$ups

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location = /circuit_breaker {
            circuit_breaker_status control=on;
        }

$locations
    }
EOF

start($t, 8081);

###############################################################################

# three forced open, far apart in name order

for my $b (qw{ u17/default u500/r5 u999/r9 }) {
	my ($u, $r) = split m!/!, $b;
	is(status(req('POST', "/circuit_breaker?upstream=$u&route=$r"
		. '&action=force_open', 'X-Circuit-Breaker-Control: 1')), 200,
		"$b forced open");
}

my $b = CB::Browser->new($t);
my $r = $b->drive('firstrender', url => $b->url('/circuit_breaker'),
	rows => $n, timeout_ms => 60000);
ok($r->{ok} && $r->{rows} == $n, "all $n breakers in the list")
	or diag(explain($r));
cmp_ok($r->{ms} // 1e9, '<', 15000, "up in $r->{ms} ms (generous bound)");

$r = $b->drive('rows');
is($r->{rowcount}, $n, "aria-rowcount $n");
cmp_ok($r->{drawn}, '<', 80, "only the rows on screen drawn ($r->{drawn})");
is(join(', ', @{ $r->{rows} || [] }[0 .. 3]),
	'u17/default open, u500/r5 open, u999/r9 open, u1/default closed',
	'the open ones first, then by name');

$b->drive('fill', selector => '#filter', value => 'u777/r7');
is(join(', ', @{ $b->drive('rows')->{rows} || [] }), 'u777/r7 closed',
	'the filter finds one of 10 000');
$b->drive('fill', selector => '#filter', value => '');

# from the (empty) filter, Esc goes to the list
$b->drive('press', key => 'Escape');
$r = $b->drive('press', key => 'End');
is($r->{active}, 'u1000/r9 closed', 'End: the last of 10 000')
	or diag(explain($r));
$r = $b->drive('press', key => 'Home');
is($r->{active}, 'u17/default open', 'Home: the first');

$b->keep('many');
$b->quit;

###############################################################################
