#!/usr/bin/perl

# prove: alone
# The live dashboard in a real browser: Debian's chromium, headless, driven
# by t/browser/drive.mjs (playwright-core, no browser download). The page is
# asked for as a browser asks (Accept: text/html) under a prefix location; a
# breaker shows closed, the origin fails until it opens and the page shows it
# open (state text, colour, sorted first, history strip), a dismissed confirm
# changes nothing, reset (confirmed) closes it, the filter box filters, the
# keyboard alone filters, moves between rows and acts, a location without
# control=on shows no buttons, and the page loads nothing from elsewhere.
# Screenshots go to the test's directory (keep it with TEST_NGINX_LEAVE=1;
# a failure's is kept in build/screenshots/).
#
# Skips when chromium, node or t/browser/node_modules (scripts/setup) are
# missing, unless TEST_NGINX_BROWSER_REQUIRED is set: then it fails.
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/90-dashboard.t

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Browser;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Status qw/ breakers /;
use CB::Response qw/ status header /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/);
CB::Browser::plan($t, 48);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    circuit_breaker_zone cb:1m;

    # opens on the 4th request when 3 of them failed; stays open well past
    # the test's steps (no half-open while the page is looked at)
    upstream up {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 failure_rate=50% open=60s
                        jitter=0%;
    }

    upstream other {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 open=60s jitter=0%;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        proxy_read_timeout 5s;

        location /d/ {
            proxy_pass http://up;
        }

        location /o/ {
            proxy_pass http://other;
            circuit_breaker_route shop;
        }

        # a prefix location: the page at /ops/breakers/ polls and posts to
        # its own path
        location /ops/ {
            circuit_breaker_status control=on;
        }

        location = /ro {
            circuit_breaker_status;
        }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

my $b = CB::Browser->new($t);

sub drive { $b->drive(@_) }
sub url { $b->url(@_) }

# a breaker's row once it shows $state (within a few polls)

sub row {
	my ($upstream, $route, $state) = @_;
	return $b->row(upstream => $upstream, route => $route,
		($state ? (state => $state) : ()));
}

sub breaker {
	my ($upstream, $route) = @_;
	my @b = breakers("/ops/x?format=json&upstream=$upstream&route=$route");
	return @b == 1 ? $b[0] : {};
}

sub png_ok {
	my ($path, $name) = @_;
	open my $fh, '<:raw', $path or return fail("$name: $path: $!");
	read $fh, my $magic, 8;
	ok($magic eq "\x89PNG\x0d\x0a\x1a\x0a" && -s $path > 10000,
		"$name: $path") or diag(-s $path);
}

my $green = 'rgb(46, 125, 50)';
my $red = 'rgb(211, 47, 47)';

###############################################################################

# one request to the route creates its breaker

is(status(http_get('/o/x')), 200, 'route shop: 200');

# the page, asked for as a browser asks (Accept: text/html, no format=)

my $r = drive('open', url => url('/ops/breakers/'));
ok($r->{ok} && $r->{status} == 200
	&& $r->{contentType} eq 'text/html; charset=utf-8',
	'browser Accept: the page') or diag(explain($r));

$r = row('up', 'default', 'closed');
ok($r->{found} && $r->{label} eq 'closed', 'up/default shows closed');
is($r->{color}, $green, 'closed is green');
is(join(' ', @{ $r->{buttons} || [] }), 'force_open force_close reset',
	'control=on: the three buttons');

$r = drive('rows');
is(join(', ', @{ $r->{rows} || [] }),
	'other/default closed, other/shop closed, up/default closed',
	'all closed: sorted by name');

# the origin fails: the breaker opens, and the page follows

is(join(' ', map { status(http_get("/d/fail?status=500&n=$_")) } 1 .. 5),
	'500 500 500 500 503', 'origin fails: the 4th failure opens');
is(breaker('up', 'default')->{state}, 'open', 'status JSON: open');

$r = row('up', 'default', 'open');
ok($r->{found} && $r->{label} eq 'open', 'up/default shows open');
is($r->{color}, $red, 'open is red');
like($r->{text}, qr/100% · 0% of 4/, 'failure and slow rates of the window');
like($r->{text}, qr/failure rate 100% \(4\/4\) >= 50%/,
	'the last transition');
ok($r->{spark}{'p-open'} && $r->{spark}{'p-fail'} =~ /^M/,
	'history: open, and the failure rate');

$r = drive('rows');
is($r->{rows}[0], 'up/default open', 'worst first: the open breaker on top');
is($r->{counts}, '1 open, 2 closed', 'counts: 1 open, 2 closed');
like($r->{status}, qr/^updated /, 'polling');

png_ok($b->keep('dashboard-open') // '', 'screenshot, open');

# a dismissed confirm changes nothing

my $log = $t->read_file('error.log');
$r = drive('click', upstream => 'up', route => 'default',
	action => 'force_open', confirm => 0);
like($r->{dialog}{message} // '', qr!^force open: up / default\?!,
	'force open asks first');
sleep(1.2);
ok(!defined breaker('up', 'default')->{forced}
	&& $t->read_file('error.log') !~ /forced open/,
	'dismissed: nothing forced, nothing logged');

# reset, confirmed: closed again

$r = drive('click', upstream => 'up', route => 'default',
	action => 'reset', confirm => 1);
is($r->{dialog}{type}, 'confirm', 'reset asks with a confirm dialog');
like($r->{dialog}{message} // '', qr!^reset: up / default\?!,
	'the dialog names the breaker');

$r = row('up', 'default', 'closed');
ok($r->{found} && $r->{label} eq 'closed', 'after reset: shows closed');
is($r->{color}, $green, 'after reset: green');
like(substr($t->read_file('error.log'), length $log),
	qr/circuit breaker "up\/default" reset by 127\.0\.0\.1/,
	'reset: done by the module, logged');
is(status(http_get('/d/fine')), 200, 'after reset: traffic passes');

$r = drive('rows');
is($r->{counts}, '0 open, 3 closed', 'counts: 0 open, 3 closed');

# the filter box

drive('fill', selector => '#filter', value => 'shop');
is(join(', ', @{ drive('rows')->{rows} || [] }), 'other/shop closed',
	'filter "shop": one row');
drive('fill', selector => '#filter', value => 'up/ closed');
is(join(', ', @{ drive('rows')->{rows} || [] }), 'up/default closed',
	'filter "up/ closed": every word matches');
drive('fill', selector => '#filter', value => '');

png_ok($b->keep('dashboard') // '', 'screenshot, after reset');

# the keyboard: / goes to the filter, Esc clears it and then leaves it for
# the list, the arrows and End move the active row, o and r act on it (each
# asking first), Tab reaches its buttons

$r = drive('press', key => '/');
is($r->{focus}, 'filter', '/: the filter has the focus');
drive('press', key => $_) for qw/ s h o p /;
is(join(', ', @{ drive('rows')->{rows} || [] }), 'other/shop closed',
	'typed "shop": one row');
drive('press', key => 'Escape');
is(scalar @{ drive('rows')->{rows} || [] }, 3, 'Esc: the filter cleared');
$r = drive('press', key => 'Escape');
is($r->{focus}, 'list', 'Esc again: the list has the focus');
is($r->{active}, 'other/default closed', 'the first row is the active one');
$r = drive('press', key => 'ArrowDown');
is($r->{active}, 'other/shop closed', 'ArrowDown: the next row');
$r = drive('press', key => 'End');
is($r->{active}, 'up/default closed', 'End: the last row');

$r = drive('press', key => 'o', confirm => 1);
like($r->{dialog}{message} // '', qr!^force open: up / default\?!,
	'o: force open, asked first');
is(breaker('up', 'default')->{forced}, 'open', 'o: forced open');
$r = row('up', 'default', 'open');
ok($r->{found} && $r->{active}, 'the active row follows its breaker to the top');
$r = drive('press', key => 'r', confirm => 1);
like($r->{dialog}{message} // '', qr!^reset: up / default\?!, 'r: reset, asked');
ok(!defined breaker('up', 'default')->{forced}, 'r: not forced any more');

$r = drive('press', key => 'Tab');
is($r->{focus}, 'button[force_open]', 'Tab: the active row\'s first button');
$r = drive('press', key => 'Enter', confirm => 0);
like($r->{dialog}{message} // '', qr!^force open: up / default\?!,
	'Enter on it: asks');
ok(!defined breaker('up', 'default')->{forced}, 'dismissed: nothing forced');

# nothing from elsewhere, no script error

$r = drive('report');
is_deeply([ @{ $r->{offsite} || [] }, @{ $r->{csp} || [] } ], [],
	'no request outside the location\'s origin, no CSP violation');
is_deeply([ @{ $r->{consoleErrors} || [] }, @{ $r->{pageErrors} || [] } ],
	[], 'no script errors');

# without control=on: no buttons, and ?format=html asks for the page

$r = drive('open', url => url('/ro?format=html'));
ok($r->{ok} && $r->{status} == 200, '/ro?format=html: the page');
$r = row('up', 'default', 'closed');
ok($r->{found} && !@{ $r->{buttons} || [1] }, 'control off: no buttons');

$b->keep('control-off');
$b->quit;

###############################################################################
