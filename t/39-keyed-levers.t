#!/usr/bin/perl

# What a client can shape cannot steer a key's breaker: a trickling upload is never its
# half-open probe (the body is read first), the time a body takes to arrive is not the
# origin's (uploads passed on as they arrive never make a key slow), and a client that stops
# reading does not hold the probe (it is settled at the response header, not once the whole
# answer has gone).

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use IO::Socket::INET;
use Socket qw/ SOL_SOCKET SO_RCVBUF /;
use Time::HiRes qw/ sleep time /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start uploads /;
use CB::Origin;
use CB::Response qw/ status /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(10);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    server {
        listen       127.0.0.1:8080;
        server_name  localhost;
        proxy_request_buffering off;
        client_body_timeout 30s;

        location /k/ {
            circuit_breaker_key $http_x_tenant min_requests=3 failure_rate=50% open=1s
                                jitter=0% probes=2 slow=500ms slow_rate=50%;
            proxy_pass http://127.0.0.1:8081;
        }

        location /kb/ {
            proxy_request_buffering on;
            client_max_body_size 8m;
            circuit_breaker_key $http_x_tenant min_requests=3 failure_rate=50% open=1s
                                jitter=0% probes=2 slow=500ms slow_rate=50%;
            proxy_pass http://127.0.0.1:8081;
        }

        location = /status { circuit_breaker_status; }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

sub get {
	my ($tenant, $uri) = @_;
	return http(<<EOF);
GET $uri HTTP/1.0
Host: localhost
X-Tenant: $tenant

EOF
}

# a POST of LEN bytes for TENANT whose first byte is sent now
sub upload {
	my ($tenant, $uri, $len) = @_;
	my $s = IO::Socket::INET->new('127.0.0.1:' . port(8080)) or die "connect: $!\n";
	$s->autoflush(1);
	print $s "POST $uri HTTP/1.0\r\nHost: localhost\r\nX-Tenant: $tenant\r\n"
		. "Content-Length: $len\r\n\r\nx";
	return $s;
}

# the rest of an upload's LEN bytes, one every STEP seconds, then its answer
sub trickle_to_end {
	my ($s, $len, $step) = @_;
	for (2 .. $len) {
		sleep $step;
		print $s 'x';
	}
	local $/;
	my $r = <$s> // '';
	close $s;
	return $r;
}

###############################################################################

# A trickling upload after the cooldown does not take the probe: the next request does.

my @trip = map { status(get('up', "/k/t$_?status=500")) } 1 .. 4;
is(join(' ', @trip), '500 500 500 503', 'upload: the key trips');
sleep 1.2;
my $s = upload('up', '/k/upload', 20);
sleep 0.3;
is(status(get('up', '/k/ok')), 200, 'upload: the next request is the probe');
my $r = trickle_to_end($s, 20, 0.02);
ok(status($r) == 200 || status($r) == 503, 'upload: answered once whole') or diag($r);

# Uploads that take 1.5 s each, answered at once by the origin, are not slow calls.

my @up = map { upload('body', "/k/u$_", 16) } 1 .. 3;
my @answers;
for my $i (2 .. 16) {
	sleep 0.1;
	print $_ 'x' for @up;
}
for my $u (@up) {
	local $/;
	push @answers, status(<$u> // '');
	close $u;
}
is(join(' ', @answers), '200 200 200', 'slow uploads: answered by the origin');
is(status(get('body', '/k/after')), 200, 'slow uploads: the key did not open');
unlike(http_get('/status'), qr/"route":"body"/, 'slow uploads: nothing to promote the key for');

# A client that stops reading a long answer does not hold the probe: the next probe goes a
# probe interval later.

http_get('/status');
my @trip2 = map { status(get('reader', "/k/r$_?status=500")) } 1 .. 4;
is(join(' ', @trip2), '500 500 500 503', 'reader: the key trips');
sleep 1.2;
my $slow = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080)) or die "connect: $!\n";
setsockopt($slow, SOL_SOCKET, SO_RCVBUF, 4096);
$slow->autoflush(1);
print $slow "GET /k/big?size=20000000 HTTP/1.0\r\nHost: localhost\r\nX-Tenant: reader\r\n\r\n";
my $head = '';
sysread($slow, $head, 64);
like($head, qr!^HTTP/1.1 200!, 'reader: the probe is answered, and not read further');
sleep 1.2;
is(status(get('reader', '/k/next')), 200, 'reader: the next probe is not held by the reader');
close $slow;

# Uploads of 4 MB the origin refuses with 413 and closes without reading (nginx's send
# fails: 502, but for the 413s it reads first) count nothing against the key.

my $said = uploads(8, '/kb/u%d?refuse_body=1', 4 << 20, 'X-Tenant: upl');
is(status(get('upl', '/kb/after')) . ' ' . CB::Origin::hits($hits, qr!^/kb/!), '200 9',
	"refused uploads do not trip the key ($said)");

###############################################################################
