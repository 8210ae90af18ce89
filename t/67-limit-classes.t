#!/usr/bin/perl

# Classes under the adaptive limit (circuit_breaker_class): with a fixed limit
# of 10, sheddable requests take at most 8 slots, default ones 9 and critical
# ones all 10, and past it as long as they hold fewer than their guarantee (2).  Slow requests are held while each class is asked for one more:
# what the origin received is counted there, and what was turned away is a
# fast 503 "limited".  A value that names no class is "default", said once at
# warn.  The status page and Prometheus count admitted, shed and in-flight
# requests per class; an upstream whose requests have no class shows none;
# $circuit_breaker_class logs each request's class.

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
use CB::Workers qw/ send_get read_response /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy map/)->plan(30);

$t->write_file_expand('nginx.conf', conf(2, <<"EOF"));
    upstream fixed {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=10000;
        circuit_breaker_limit adaptive min=10 max=10 initial=10;
    }

    upstream plain {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=10000;
        circuit_breaker_limit adaptive min=2 max=2 initial=2;
    }

    # the route names the class, as the README's recipe does
    map \$uri \$cb_class {
        ~^/c/     critical;
        ~^/s/     sheddable;
        ~^/x/     bogus;
        default   "";
    }

    log_format cls '\$uri \$circuit_breaker_class';

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        access_log %%TESTDIR%%/class.log cls;
        proxy_read_timeout 30s;

        circuit_breaker_class \$cb_class;

        location /c/ { proxy_pass http://fixed; }
        location /s/ { proxy_pass http://fixed; }
        location /d/ { proxy_pass http://fixed; }
        location /x/ { proxy_pass http://fixed; }
        location /p/ {
            circuit_breaker_class off;
            proxy_pass http://plain;
        }

        location = /status { circuit_breaker_status; }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

# one request held at the origin (answered after DELAY ms): its socket

my @held;

sub hold {
	my ($uri, $delay) = @_;
	my $s = send_get("$uri?delay=" . ($delay // 8000) . "&held=" . @held);
	push @held, $s if $s;
	return $s;
}

# waits until the origin has received N held requests

sub held_at_origin {
	my ($n) = @_;
	my $end = time() + 10;
	while (time() < $end) {
		return 1 if CB::Origin::hits($hits, qr/held=/) >= $n;
		sleep 0.02;
	}
	return CB::Origin::hits($hits, qr/held=/) >= $n;
}

# one request answered at once: "status state"

sub asked {
	my ($uri) = @_;
	my $s = send_get($uri) or return 'connect';
	my ($r, $why) = read_response($s, time() + 5);
	return $why unless defined $r;
	my ($status) = $r =~ m!^HTTP/1\.1 (\d{3}) !;
	my ($state) = $r =~ /^X-Circuit-State: (\w+)\x0d?$/m;
	return ($status // 'empty') . ' ' . ($state // '-');
}

sub classes { breaker_at('/status?upstream=fixed')->{limit}{classes} // {} }

###############################################################################

hold("/s/$_") for 1 .. 8;
ok(held_at_origin(8), 'sheddable: 8 held at the origin');

is(asked('/s/more'), '503 limited', 'sheddable: the 9th is shed');
is(asked('/x/bogus'), '200 -', 'a value of no class is default: admitted');
hold('/d/1');
ok(held_at_origin(9), 'default: the 9th slot taken by a default request');
is(asked('/d/more'), '503 limited', 'default: the 10th is shed');
is(asked('/s/again'), '503 limited', 'sheddable: still shed');
hold('/c/1');
ok(held_at_origin(10), 'critical: the last slot taken by a critical request');
hold('/c/2');
ok(held_at_origin(11), 'critical: one more, past the limit, within its guarantee (2)');
is(asked('/c/more'), '503 limited', 'critical: shed once its guarantee is held');
is(asked('/s/last'), '503 limited', 'sheddable: shed');

my $c = classes();
is($c->{sheddable}{in_flight}, 8, 'status: sheddable in flight');
is($c->{default}{in_flight}, 1, 'status: default in flight');
is($c->{critical}{in_flight}, 2, 'status: critical in flight');
is($c->{sheddable}{shed}, 3, 'status: sheddable shed');
is($c->{default}{shed}, 1, 'status: default shed');
is($c->{critical}{shed}, 1, 'status: critical shed');
is($c->{default}{admitted}, 2, 'status: default admitted (the bogus one too)');

my $prom = Test::Nginx::http_get('/status?format=prometheus');
like($prom, qr/^nginx_circuit_breaker_limit_class_shed_total\{[^}]*upstream="fixed"[^}]*class="sheddable"\} 3$/m,
	'prometheus: sheddable shed');
like($prom, qr/^nginx_circuit_breaker_limit_class_in_flight\{[^}]*upstream="fixed"[^}]*class="critical"\} 2$/m,
	'prometheus: critical in flight');

my @done = map { scalar read_response($_, time() + 20) } @held;
is(scalar(grep { defined && m!^HTTP/1\.1 200 ! } @done), 11,
	'every held request answered 200');
is(CB::Origin::hits($hits, qr{/[scdx]/}), 12,
	'the origin received the held eleven and the bogus one, nothing shed');

$c = classes();
is(join(' ', map { $c->{$_}{in_flight} } qw/ critical default sheddable /),
	'0 0 0', 'status: every class back to 0 in flight');

is(asked('/p/1'), '200 -', 'no class: admitted');
ok(!exists breaker_at('/status?upstream=plain')->{limit}{classes},
	'no class: no classes on the status page');

$t->stop();

my $cls = $t->read_file('class.log');
like($cls, qr!^/s/more sheddable$!m, '$circuit_breaker_class: sheddable, shed too');
like($cls, qr!^/c/1 critical$!m, '$circuit_breaker_class: critical');
like($cls, qr!^/x/bogus default$!m, '$circuit_breaker_class: a bogus value is default');
like($cls, qr!^/p/1 -$!m, '$circuit_breaker_class: none with circuit_breaker_class off');

my $log = $t->read_file('error.log');
is(scalar(() = $log =~ /\[warn\].*circuit breaker class "bogus" is not/g), 1,
	'warn once for a value of no class');
unlike($log, qr/\[(alert|crit|error)\]/, 'no errors');
