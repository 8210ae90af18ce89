#!/usr/bin/perl

# Time: windows, cooldowns and probe spacing run on the monotonic clock.  nginx
# runs under libfaketime with its wall clock stepped back one hour mid-test
# (the monotonic clock left alone): an open breaker still half-opens after
# its cooldown, a closed breaker's window still forgets old seconds, and the
# status page shows instants on the stepped wall clock.

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
use CB::Response qw/ status /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $lib = (grep { -e } map { "/usr/lib/$_/faketime/libfaketime.so.1" }
	qw/ x86_64-linux-gnu aarch64-linux-gnu /)[0];

if (!$lib) {
	plan(skip_all => 'libfaketime is not installed (Debian package "faketime")')
		unless $ENV{TEST_NGINX_FAKETIME_REQUIRED};
	BAIL_OUT('libfaketime is not installed (Debian package "faketime"), '
		. 'and TEST_NGINX_FAKETIME_REQUIRED is set');
}

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(9);

# the master and workers read the fake clock's offset from this file at every
# clock reading; nginx passes workers only the variables "env" names

my $offset = $t->testdir() . '/faketime';
$t->write_file('faketime', "+0\n");

my $globals = <<'GLOBALS';
%%TEST_GLOBALS%%
env LD_PRELOAD;
env FAKETIME_TIMESTAMP_FILE;
env FAKETIME_NO_CACHE;
env FAKETIME_DONT_FAKE_MONOTONIC;
GLOBALS

$t->write_file_expand('nginx.conf', conf(2, <<'EOF', globals => $globals));
    upstream ck {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=5s min_requests=3 failure_rate=50% open=2s
                        jitter=0% probes=1;
    }

    upstream win {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=2s min_requests=4 failure_rate=50% open=30s
                        jitter=0%;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /ck/  { proxy_pass http://ck; }
        location /win/ { proxy_pass http://win; }
        location = /status { circuit_breaker_status; }
    }
EOF

{
	local $ENV{LD_PRELOAD} = $lib;
	local $ENV{FAKETIME_TIMESTAMP_FILE} = $offset;
	local $ENV{FAKETIME_NO_CACHE} = 1;
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = 1;
	start($t, 8081);
}

###############################################################################

sub codes {
	my ($path, $n) = @_;
	return join ' ', map { status(http_get($path)) } 1 .. $n;
}

sub breaker { breaker_at('/status', upstream => $_[0]) }

# before the step: "win" sees two failures, "ck" trips

is(codes('/win/x?status=500', 2), '500 500', 'win: two failures');
is(codes('/ck/x?status=500', 4), '500 500 500 503', 'ck: trips');

# the wall clock steps back one hour

$t->write_file('faketime', "-3600\n");
sleep 2.5;

is(codes('/ck/x?probe=1', 1), '200',
	'ck: half-opens after its 2s cooldown, whatever the wall clock did');
is(codes('/ck/x?after=1', 1), '200', 'ck: closed by its probe');

# the two failures before the step left the 2s window

is(codes('/win/x?status=500', 3), '500 500 500',
	'win: failures 2.5s apart share no window');
is(breaker('win')->{window}{failures}, 3,
	'win: its window holds the failures since the step only');

# instants on the status page follow the stepped wall clock

is(codes('/win/x?status=500', 1), '500', 'win: opens on the fourth');
my $b = breaker('win');
my $wall = time() - 3600;
ok(abs(($b->{since} // 0) - $wall) < 5, 'since is on the stepped wall clock')
	or diag("since " . ($b->{since} // 'none') . ", stepped clock $wall");
ok(abs(($b->{retry_at} // 0) - ($wall + 30)) < 5,
	'retry_at is 30s later, on the stepped wall clock')
	or diag("retry_at " . ($b->{retry_at} // 'none'));

###############################################################################
