#!/usr/bin/perl

# A reload that changes a half-open breaker's window length moves it into other memory
# while its probe is in flight: the probe's outcome still reaches it.  A good probe
# (probes=1) closes it at once; before, the outcome was lost and the breaker stayed
# half-open, its probe held by the finished probe until the old worker exited or
# the probe's lease (120 s) ran out.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT http_end /;
use CB::Nginx qw/ start reload log_size log_since /;
use CB::Origin;
use CB::Response qw/ status /;
use CB::Status qw/ breaker_at /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(7);

sub conf {
	my ($len) = @_;

	return CB::Nginx::conf(1, <<"EOF");
    circuit_breaker_zone cb:256k;

    upstream len {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=$len open=2s jitter=0% probes=1;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /len/ {
            proxy_pass http://len;
        }

        location = /status {
            circuit_breaker_status;
        }
    }
EOF
}

$t->write_file_expand('nginx.conf', conf('10s'));

my $hits = start($t, 8081);

sub b {
	return breaker_at('/status?upstream=len', route => 'default');
}

###############################################################################

status(http_get("/len/?status=500&trip=$_")) for 1 .. 20;
is(b()->{state}, 'open', 'open');
sleep(2.3);

my $s = http_get('/len/?status=200&delay=2500&probe=1', start => 1);
sleep(0.3);
is(b()->{state}, 'half_open', 'half-open, its probe in flight');

my $size = log_size($t);
$t->write_file_expand('nginx.conf', conf('20s'));
ok(reload($t), 'reloaded with another window length');
like(log_since($t, $size), qr/circuit breaker "len\/default": parameters changed on reload while half-open.*window emptied/,
	'moved into other memory');

is(status(http_end($s)), 200, 'the probe succeeds');
sleep(0.2);
my $b = b();
is($b->{state}, 'closed', 'its outcome closes the breaker') or diag(explain($b));
is($b->{window}{seconds}, 20, 'the new window length');

###############################################################################
