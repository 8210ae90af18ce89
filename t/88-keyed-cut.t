#!/usr/bin/perl

# A breaker keyed by a variable (circuit_breaker_key) sees answers its origin cuts short behind
# proxy_buffering off.  Such a breaker is judged at the log phase, when the upstream's
# connection is gone; nginx passed the answer on as it arrived, so only what is left of its
# Content-Length says it ended early (a stream without one may end where its client chose).  With the default breaker (10 gateway failures in a
# row): an origin that closes, resets, or falls silent past proxy_read_timeout halfway
# through a 1 MB answer opens its key.  The controls: whole answers, and clients that end the
# answer themselves -- HTTP/1.1 clients that close their connection, HTTP/2 clients that
# cancel their stream, clients that stop reading past send_timeout, clients whose upload
# nginx stops sending once the answer's header went to them -- open nothing, and the origin
# saw each of their requests.  About 20 s.

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
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Response qw/ status /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy http_v2/)->plan(21);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    server {
        listen       127.0.0.1:8080;
        http2        on;
        server_name  localhost;

        proxy_buffering off;
        proxy_http_version 1.1;
        proxy_set_header Connection "";

        location /k/ {
            circuit_breaker_key $http_x_tenant;
            proxy_read_timeout 1s;
            send_timeout 500ms;
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }

        # 3 gateway failures in a row open a key: uploads are slow to send
        location /up/ {
            circuit_breaker_key $http_x_upload consecutive=3;
            proxy_read_timeout 1s;
            client_max_body_size 64m;
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }

        # buffered: an event stream's end read once the connection is gone
        location /kb/ {
            proxy_buffering on;
            circuit_breaker_key $http_x_tenant;
            proxy_read_timeout 1s;
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }

        location = /status { circuit_breaker_status; }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

# a request of tenant T: its status
sub get {
	my ($path, $tenant) = @_;
	return status(http("GET $path HTTP/1.0\r\nHost: localhost\r\nX-Tenant: $tenant\r\n\r\n"))
		// 'none';
}

sub promoted { http_get('/status') =~ /"route":"$_[0]"/ ? 'promoted' : 'compact' }

# a connection of its own, with REQUEST sent (a 4 KB receive buffer with RCVBUF)
sub sent {
	my ($request, $rcvbuf) = @_;
	my $s = IO::Socket::INET->new(Proto => 'tcp') or die "socket: $!\n";
	setsockopt($s, SOL_SOCKET, SO_RCVBUF, 4096) if $rcvbuf;
	$s->connect(Socket::pack_sockaddr_in(port(8080), Socket::inet_aton('127.0.0.1')))
		or die "connect: $!\n";
	print $s $request;
	return $s;
}

# N clients of tenant T on connections of their own at once: each GETs PATH$i, and after
# SECONDS reads what there is; the statuses
sub together {
	my ($n, $path, $tenant, $seconds) = @_;
	my @s = map {
		sent("GET $path$_ HTTP/1.0\r\nHost: localhost\r\nX-Tenant: $tenant\r\n\r\n");
	} 1 .. $n;
	sleep $seconds;
	return map {
		my ($all, $buf) = ('', '');
		$all .= $buf while length $all < 64 && sysread($_, $buf, 65536);
		close $_;
		status($all) // 'none';
	} @s;
}

my $cut = 'size=1000000&truncate=500000';

###############################################################################

# The origin closes halfway: after 10 in a row the key is open and answers 503 itself

my @said = map { get("/k/close$_?$cut", 'closer') } 1 .. 12;
is(CB::Origin::hits($hits, qr!^/k/close!), 10, "close: the origin saw 10 ( @said )");
is("@said[10, 11]", '503 503', 'close: then the key answers 503');
is(promoted('closer'), 'promoted', 'close: the key is a breaker of its own');

# The origin resets the connection halfway

@said = map { get("/k/reset$_?$cut&then=reset", 'resetter') } 1 .. 12;
is(CB::Origin::hits($hits, qr!^/k/reset!), 10, "reset: the origin saw 10 ( @said )");
is("@said[10, 11]", '503 503', 'reset: then the key answers 503');

# The origin falls silent halfway, past proxy_read_timeout (1 s): 12 at once, then one more

@said = together(12, "/k/hang?$cut&then=hang&n=", 'hanger', 2.5);
my $next = get('/k/hang-after', 'hanger');
is(CB::Origin::hits($hits, qr!^/k/hang\?!), 12, "silent: the origin saw the 12 ( @said )");
is($next, 503, 'silent: then the key answers 503');

# The controls: nothing of theirs opens or promotes a key

@said = map { get("/k/whole$_?size=1000000", 'whole') } 1 .. 24;
is(join(' ', grep { $_ ne '200' } @said), '', 'whole answers: each 200');
is(promoted('whole'), 'compact', 'whole answers: no failure');

# HTTP/1.1 clients that close their connection after 64 KB of a 16 MB answer

my $left = 0;
for my $i (1 .. 24) {
	my $s = sent("GET /k/leave$i?size=16000000 HTTP/1.0\r\nHost: localhost\r\n"
		. "X-Tenant: leaver\r\n\r\n");
	my ($got, $buf) = (0, '');
	while ($got < 65536) {
		my $n = sysread($s, $buf, 65536) or last;
		$got += $n;
	}
	$left++ if $got >= 65536;
	close $s;
}
is($left, 24, 'clients that leave: each left mid-answer');
is(CB::Origin::hits($hits, qr!^/k/leave!), 24, 'clients that leave: the origin saw each');
is(promoted('leaver'), 'compact', 'clients that leave: no failure');

# HTTP/2 clients that cancel their stream after 64 KB of a 16 MB answer

my $lev = "/usr/bin/python3 $FindBin::Bin/lib/CB/levers.py";
my $cancel = `$lev cancel_get ${\ port(8080)} '/k/cancel?size=16000000&n=' 24 X-Tenant:canceller`;
chomp $cancel;
is($cancel, 'cancelled 24 of 24', 'streams cancelled: each mid-answer');
is(CB::Origin::hits($hits, qr!^/k/cancel!), 24, 'streams cancelled: the origin saw each');
is(promoted('canceller'), 'compact', 'streams cancelled: no failure');

# Clients that read nothing of a 16 MB answer past send_timeout (500 ms: shorter than a
# hold that makes an answer judged by its header), 4 KB receive buffers

my @slow = map {
	sent("GET /k/stuck$_?size=16000000 HTTP/1.0\r\nHost: localhost\r\nX-Tenant: stuck\r\n\r\n",
		1);
} 1 .. 24;
sleep 3;
close $_ for @slow;
is(CB::Origin::hits($hits, qr!^/k/stuck!), 24, 'clients past send_timeout: the origin saw each');
is(promoted('stuck'), 'compact', 'clients past send_timeout: no failure');

# Uploads of 32 MB to an origin that answers at once and reads the upload before the rest of
# its answer: nginx stops sending the upload once the answer's header has gone to the client,
# and the origin, waiting for it, falls silent past proxy_read_timeout (1 s).  The client
# chose the body's size: no failure.  Four in a row, where three failures open this key.

my $mb32 = 'b' x (32 << 20);
@said = map {
	my $s = sent("POST /up/early$_?early=1000 HTTP/1.0\r\nHost: localhost\r\n"
		. "X-Upload: uploader\r\nContent-Length: " . length($mb32) . "\r\n\r\n" . $mb32);
	my ($all, $buf) = ('', '');
	$all .= $buf while sysread($s, $buf, 65536);
	close $s;
	(status($all) // 'none') . '/' . length $all;
} 1 .. 4;
is(CB::Origin::hits($hits, qr!^/up/early!), 4, "uploads: the origin saw each ( @said )");
is(promoted('uploader'), 'compact', 'uploads: no failure');

# Twelve subscriptions to a quiet event stream (one event, then nothing) where nginx buffers
# the answer, ended by proxy_read_timeout (1 s): what ends a stream by design is its
# client's, and a key's reader cannot tell a timeout from a reset

my @sub = map {
	sent("GET /kb/s$_?stream=text/event-stream HTTP/1.0\r\nHost: localhost\r\n"
		. "X-Tenant: subscriber\r\n\r\n");
} 1 .. 12;
sleep 1.6;
close $_ for @sub;
is(CB::Origin::hits($hits, qr!^/kb/s!), 12, 'quiet subscriptions: the origin saw each');
is(promoted('subscriber'), 'compact', 'quiet subscriptions: no failure');

###############################################################################
