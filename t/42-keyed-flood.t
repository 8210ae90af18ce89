#!/usr/bin/perl

# Keys come from clients. A flood of distinct keys — healthy ones and failing ones, which
# are promoted to breakers of their own — into a small table never pushes out a key whose
# breaker is open (its origin sees nothing more), keeps the table and the zone within their
# bounds, and does not grow a worker; a key longer than 256 bytes is not judged at all. The
# flood's promoted keys, which never opened, hold the zone's room for promotions only while
# their failures are in their window: a new failing key once the window has passed gets a
# breaker that opens (a review saw 167 such keys leave a new failing one unchecked for as
# long as their `max_open`, here an hour).

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT /;
use CB::Nginx qw/ conf start workers /;
use CB::Origin;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(19);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    circuit_breaker_zone cb:1m keys=256;

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;
        keepalive_requests 100000;

        location /t/ {
            circuit_breaker_key $http_x_tenant min_requests=3 open=1h jitter=0%;
            proxy_pass http://127.0.0.1:8081;
        }

        location /status {
            circuit_breaker_status;
        }
    }
EOF

my ($hits) = start($t, 8081);

# COUNT requests over one keep-alive connection, each with a tenant of its own (PREFIX and a
# number), every other one failing (or, with a fifth argument "all", every one); prints the
# count of 503s.
$t->write_file('flood.py', <<'EOF');
import http.client, sys
port, prefix, first, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
every = len(sys.argv) > 5 and sys.argv[5] == "all"
c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
refused = 0
for i in range(first, first + count):
    path = "/t/x?status=500" if every or i % 2 else "/t/x"
    c.request("GET", path, headers={"X-Tenant": f"{prefix}-{i}"})
    r = c.getresponse()
    r.read()
    refused += r.status == 503
print(refused)
EOF

sub flood {
	my ($t, $first, $count, $all) = @_;
	my $py = $t->testdir() . '/flood.py';
	my $out = `python3 $py @{[ port(8080) ]} flood $first $count @{[ $all ? 'all' : '' ]}`;
	return $out =~ /(\d+)/ ? $1 : -1;
}

sub tenant {
	my ($tenant, $query) = @_;
	return http(<<EOF);
GET /t/x?$query HTTP/1.0
Host: localhost
X-Tenant: $tenant

EOF
}

sub rss_kb {
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/status" or return 0;
	my ($kb) = join('', <$fh>) =~ /^VmRSS:\s+(\d+)/m;
	return $kb // 0;
}

###############################################################################

tenant('victim', 'status=500&who=victim') for 1 .. 3;
like(tenant('victim', 'who=victim'), qr!^HTTP/1.1 503!, 'the victim tenant is open');
is(CB::Origin::hits($hits, qr/who=victim/), 3, 'its three failures reached the origin');

# Ten times the table's keys, half of them failing once (promoted, closed), twice over.

is(flood($t, 0, 2560), 0, 'flood: no flooding key was refused');
like(tenant('victim', 'who=victim'), qr!^HTTP/1.1 503!, 'the victim is still open after 2 560 keys');

my ($worker) = workers($t);
my $rss = rss_kb($worker);

is(flood($t, 2560, 2560), 0, 'second flood: no flooding key was refused');
like(tenant('victim', 'who=victim'), qr!^HTTP/1.1 503!, 'the victim is still open after 5 120 keys');
is(CB::Origin::hits($hits, qr/who=victim/), 3, 'the victim origin saw nothing more');

my $status = http_get('/status');
my ($used, $cap, $promoted) = $status =~ /"keys":\{"used":(\d+),"capacity":(\d+),"promoted":(\d+),/;
is($cap, 304, 'the table has the places 256 keys need (20 for 17)');
ok(defined $used && $used <= $cap, "keys in the table within its size ($used)");
ok(defined $promoted && $promoted >= 1 && $promoted <= $cap, "promoted keys bounded ($promoted)");
my ($zused, $zsize) = $status =~ /"size":(\d+),"used":(\d+)/ ? ($2, $1) : (0, 0);
ok($zused <= $zsize * 3 / 4 + 65536, "a quarter of the zone left to other breakers ($zused of $zsize)");

my $grew = rss_kb($worker) - $rss;
ok($grew < 2048, "the worker did not grow over 2 560 more keys ($grew KiB)");

# Failing keys use up the room for promotions: 600 new ones, each failing, take every
# place the earlier floods' keys give back once their failures are out of their window
# (10 s: waited for whole, so that none gives one back later, after the 600, however long
# the floods took), and then find none. A new failing key finds none either while their
# failures are in their window, and one once they are out of it.

sleep 10.5;
is(flood($t, 5120, 600, 1), 0, 'failing flood: no flooding key was refused');
tenant('early', 'status=500&who=early') for 1 .. 4;
is(CB::Origin::hits($hits, qr/who=early/), 4, 'a new failing key meanwhile passes unchecked');

sleep 11;
tenant('late', 'status=500&who=late') for 1 .. 3;
like(tenant('late', 'who=late'), qr!^HTTP/1.1 503!,
	'a window later, a new failing key opens on its third failure');
is(CB::Origin::hits($hits, qr/who=late/), 3, 'its fourth request did not reach the origin');
like(tenant('victim', 'who=victim'), qr!^HTTP/1.1 503!, 'the victim is still open');

# A key longer than 256 bytes is not judged: its failures pass, said once in the log.

my $long = 'x' x 300;
tenant($long, 'status=500&who=long') for 1 .. 5;
like(tenant($long, 'who=long'), qr!^HTTP/1.1 200!, 'a 300-byte key is not judged');
is(() = $t->read_file('error.log') =~ /a key longer than 256 bytes, not judged/g, 1,
	'said once');

###############################################################################
