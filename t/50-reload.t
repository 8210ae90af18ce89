#!/usr/bin/perl

# nginx -s reload and the breakers in the shared zone.
#
# The zone survives a reload; each breaker keeps its window and state
# when its parameters are unchanged, keeps its state, episode, totals and
# window when they changed (retuned: see t/51-reload-incident.t), and is
# dropped when it no longer exists.  The reload logs at notice level:
# circuit breaker zone "cb": N breaker(s) dropped, M retuned by the new
# configuration (and a line per retuned breaker, warn for an open one).
#
# Three upstreams, each with a 15s cooldown so that breakers opened at the
# start stay open for the whole test:
#	a	parameters never change: stays open across every reload
#	b	min_requests changes 2 -> 3 in the first reload: retuned, stays open
#	c	removed by the first reload, re-added by the second: fresh
# then two configurations that fail (nginx -t fails, the old configuration
# keeps serving; state must be intact), and finally a zone size change.
#
# nginx's rule for shared zones: a zone is carried over a reload only if
# its name AND size are unchanged.  Another size makes nginx map a new
# zone (the old one is unmapped once the old workers exit), so all breaker
# state is lost then; that is expected, not a module bug.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use POSIX qw/ floor /;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT http_end /;
use CB::Nginx qw/ start reload nginx_t log_size log_since /;
use CB::Origin;
use CB::Response qw/ status /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(36);

# generation, zone size, b's min_requests, c present, extra server lines

sub conf {
	my (%o) = @_;

	my $gen = $o{gen};
	my $size = $o{size} // '64k';
	my $bmin = $o{bmin} // 2;
	my $extra = $o{extra} // '';
	my $abad = $o{abad} // '';

	my ($cup, $cloc) = ('', '');
	if ($o{c} // 1) {
		$cup = <<'EOF';
    upstream c {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=2 failure_rate=50%
                        open=15s jitter=0% probes=1;
    }
EOF
		$cloc = <<'EOF';
        location /c/ {
            proxy_pass http://c;
        }
EOF
	}

	return CB::Nginx::conf(2, <<"EOF");
    circuit_breaker_zone cb:$size;

    upstream a {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=2 failure_rate=50%
                        open=15s jitter=0% probes=1 $abad;
    }

    upstream b {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=$bmin failure_rate=50%
                        open=15s jitter=0% probes=1;
    }

$cup
    server {
        listen       127.0.0.1:8080;
        $extra
        server_name  localhost;

        location /a/ {
            proxy_pass http://a;
        }

        location /ar/ {
            proxy_pass http://a;
            circuit_breaker_route ar;
        }

        location /b/ {
            proxy_pass http://b;
        }

$cloc
        location = /gen {
            return 200 "generation $gen\\n";
        }
    }
EOF
}

$t->write_file_expand('nginx.conf', conf(gen => 1));

my $hits = start($t, 8081);

###############################################################################


# statuses of n requests to a location, failing at the origin

sub statuses {
	my ($loc, $n, $tag) = @_;
	return join ' ', map { status(http_get("/$loc/?status=500&$tag=$_")) }
		1 .. $n;
}

sub retry_after {
	my ($r) = @_;
	return undef unless defined $r && status($r) eq '503'
		&& $r =~ /^X-Circuit-State: open\x0d?$/m;
	return $r =~ /^Retry-After: (\d+)\x0d?$/m ? $1 : undef;
}

# n requests; all must be 503 "open" without reaching the origin

sub still_open {
	my ($loc, $tag) = @_;
	my $before = CB::Origin::hits($hits, qr!^/\Q$loc\E/!);
	my @ra = map { retry_after(http_get("/$loc/?status=200&$tag=$_")) }
		1 .. 4;
	my $after = CB::Origin::hits($hits, qr!^/\Q$loc\E/!);
	return 0 if grep { !defined } @ra;
	return $after == $before;
}

sub generations {
	return join '', map { http_get('/gen') =~ /generation (\w+)/ ? $1 : 'x' }
		1 .. 6;
}

# the reconciliation notices (not the one a new zone logs at start)
sub notices {
	my ($t) = @_;
	return $t->read_file('error.log') =~ /^.*\[notice\].*circuit breaker zone "[^"]*": .*$/gm;
}

# open all three

is(statuses('a', 3, 'open'), '500 500 503', 'a opens');
is(statuses('b', 3, 'open'), '500 500 503', 'b opens');
is(statuses('c', 3, 'open'), '500 500 503', 'c opens');

my $t0 = time();
my $ra0 = retry_after(http_get('/a/?ra=0'));
ok(defined $ra0 && $ra0 >= 14 && $ra0 <= 15, 'a: Retry-After before reload')
	or diag("Retry-After: " . ($ra0 // 'undef'));
$ra0 //= 15;

sleep(2);

###############################################################################

# reload 1: a unchanged, b's min_requests changed, c removed

$t->write_file_expand('nginx.conf', conf(gen => 2, bmin => 3, c => 0));
reload($t);

is(generations(), '222222', 'reload 1: new configuration');

ok(still_open('a', 'r1'), 'reload 1: a stays open, no origin hits');

my $r = http_get('/a/?ra=1');
my $elapsed = time() - $t0;
my $ra1 = retry_after($r);
ok(defined $ra1 && $ra1 >= 1 && $ra1 <= $ra0 - floor($elapsed),
	'reload 1: a Retry-After keeps counting down')
	or diag(sprintf("before %s, after %s, %.2fs later", $ra0,
		$ra1 // 'undef', $elapsed));

# retuned: still open, no request reaches the origin, and the reload's
# log names it at warn

ok(still_open('b', 'r1'), 'reload 1: b retuned, stays open, no origin hits');
like($t->read_file('error.log'),
	qr/\[warn\].*circuit breaker "b\/default": parameters changed on reload while open, kept open until its probe, window kept/,
	'reload 1: b named at warn');

my @n = notices($t);
is(scalar @n, 1, 'reload 1: one notice');
like($n[0] // '',
	qr/circuit breaker zone "cb": 1 breaker\(s\) dropped, 1 retuned by the new configuration/,
	'reload 1: notice text');

###############################################################################

# reload 2: c back, with the same parameters as before its removal

$t->write_file_expand('nginx.conf', conf(gen => 3, bmin => 3));
reload($t);

is(generations(), '333333', 'reload 2: new configuration');
is(statuses('c', 3, 'r2'), '500 500 503', 'reload 2: c re-added starts fresh');
ok(still_open('a', 'r2'), 'reload 2: a still open');
ok(still_open('b', 'r2'), 'reload 2: b (unchanged now) still open');

###############################################################################

# bad configuration 1: an invalid directive value.  nginx -t fails, and
# so does the reload: the old configuration keeps serving.

$t->write_file_expand('nginx.conf',
	conf(gen => 4, bmin => 3, abad => 'max_open=forever'));

my ($rc, $out) = nginx_t($t, 'nginx.conf');
ok($rc != 0 && $out =~ /\[emerg\].*max_open=forever.*circuit_breaker/,
	'bad config 1: nginx -t fails') or diag("rc $rc: $out");

my $size = log_size($t);
reload($t);
like(log_since($t, $size), qr/\[emerg\]/, 'bad config 1: reload rejected');

is(generations(), '333333', 'bad config 1: old configuration serves');
ok(still_open('a', 'bad1'), 'bad config 1: a still open');
ok(still_open('b', 'bad1'), 'bad config 1: b still open');
ok(still_open('c', 'bad1'), 'bad config 1: c still open');

# bad configuration 2: valid syntax, rejected later in the reload (a
# listen socket nginx cannot bind, after the shared zones were set up).
# It also changes b and drops c: the rejected configuration must not
# touch the zone the running one uses.

$t->write_file_expand('nginx.conf', conf(gen => 5, bmin => 5, c => 0,
	extra => 'listen unix:%%TESTDIR%%/no/such/dir/nginx.sock;'));

($rc, $out) = nginx_t($t, 'nginx.conf');
ok($rc != 0 && $out =~ /\[emerg\].*bind\(\)/,
	'bad config 2: nginx -t fails') or diag("rc $rc: $out");

$size = log_size($t);
reload($t);
like(log_since($t, $size), qr/\[emerg\]/, 'bad config 2: reload rejected');

is(generations(), '333333', 'bad config 2: old configuration serves');
ok(still_open('a', 'bad2'), 'bad config 2: a still open');
ok(still_open('b', 'bad2'), 'bad config 2: b still open');
ok(still_open('c', 'bad2'), 'bad config 2: c still open');

# the old configuration's workers still create new breakers (route "ar"
# of upstream a was never used so far)

is(statuses('ar', 3, 'bad2'), '500 500 503',
	'bad config 2: a new route breaker still works');
@n = notices($t);
is(scalar @n, 1, 'bad configs: no reconcile notice');

$r = http_get('/a/?ra=2');
$elapsed = time() - $t0;
my $ra2 = retry_after($r);
ok(defined $ra2 && $ra2 >= 1 && $ra2 <= $ra0 - floor($elapsed),
	'bad configs: a Retry-After keeps counting down')
	or diag(sprintf("before %s, after %s, %.2fs later", $ra0,
		$ra2 // 'undef', $elapsed));

###############################################################################

# zone size changed: nginx creates a new zone, every breaker starts fresh

$t->write_file_expand('nginx.conf', conf(gen => 6, bmin => 3, size => '128k'));
reload($t);

is(generations(), '666666', 'new zone size: new configuration');

CB::Origin::clear($hits);

is(statuses('a', 3, 'z'), '500 500 503', 'new zone size: a fresh');
is(statuses('b', 4, 'z'), '500 500 500 503', 'new zone size: b fresh');
is(statuses('c', 3, 'z'), '500 500 503', 'new zone size: c fresh');
is(statuses('ar', 3, 'z'), '500 500 503', 'new zone size: ar fresh');
is(CB::Origin::hits($hits), 9, 'new zone size: origin hits');

###############################################################################
