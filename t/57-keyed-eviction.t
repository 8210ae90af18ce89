#!/usr/bin/perl

# A compact key whose requests pass on its mark, without the zone's lock, is
# still used: its clients going away before the origin answers (no verdict,
# nothing counted) between new keys in a table of a few places do not push it
# out, and it keeps the successes its window holds — with min_requests=5 and
# 10 successes, it opens on its 10th failure (10 of 20), not its 5th.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT /;
use CB::Nginx qw/ conf start /;
use CB::Origin;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(3);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    circuit_breaker_zone cb:1m keys=8;

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /k/ {
            circuit_breaker_key $arg_k window=60s min_requests=5 failure_rate=50%
                                open=1h jitter=0%;
            proxy_pass http://127.0.0.1:8081;
        }
    }
EOF

my ($hits) = start($t, 8081);

sub status_of { my ($r) = @_; ($r // '') =~ m!^HTTP/1.1 (\d+)! ? $1 : 0 }

###############################################################################

my @ok = map { status_of(http_get("/k/x?k=v&status=200")) } 1 .. 10;
is("@ok", join(' ', (200) x 10), 'v: ten successes');
sleep 1.1;

# v's clients go away before its origin answers (no verdict), between new keys
for my $n (1 .. 24) {
	my $s = http_get("/k/x?k=v&status=200&delay=400", start => 1);
	sleep 0.05;
	close $s;
	http_get("/k/x?k=flood$n&status=200");
}
sleep 0.5;

CB::Origin::clear($hits);
my @st;
for (1 .. 20) {
	my $st = status_of(http_get("/k/x?k=v&status=500"));
	push @st, $st;
	last if $st == 503;
}
is(scalar(@st), 11, 'v kept its successes: opened on its 10th failure (10 of 20)')
	or diag("statuses: @st");
is(CB::Origin::hits($hits), 10, 'v: ten failures at the origin');

###############################################################################
