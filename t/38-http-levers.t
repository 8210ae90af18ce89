#!/usr/bin/perl

# Hostile HTTP clients against breakers of a healthy origin (CB::Origin; its hdr= parameter
# stands for an origin that echoes something of the request into a response header): uploads
# that stall until the origin gives up reading them, an HTTP/2 client whose windows are 0
# behind proxy_buffering off, slow readers where the spool is bounded, probes answered with
# a header too big for nginx's buffer, a slow reader of a probe whose origin says
# X-Accel-Buffering: no; WebSocket tunnels (101) held idle until proxy_read_timeout ends
# them behind proxy_buffering off, held longer than slow=, or taking the half-open probe;
# subscriptions to a quiet event stream ended by proxy_read_timeout. None opens or holds a
# breaker: a tunnel's answer is its 101, and how it ends is the client's, as is how long a
# stream by design stays quiet (downloads that stall the same way do open one). Uploads of 4 MB to an origin that refuses them with 413 and closes without
# reading them: nginx's send fails (a 502 but for the few 413s it reads first), and nothing
# is counted. Each check states the claim: a failure is a client lever that works. About
# 45 s, most of it CB::Origin's 30-s body read timeout.
# prove: alone

###############################################################################

use warnings;
use strict;

use Test::More;

use IO::Socket::INET;
use POSIX ();
use Socket qw/ SOL_SOCKET SO_RCVBUF inet_aton pack_sockaddr_in /;
use Time::HiRes qw/ sleep time /;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start uploads /;
use CB::Origin;
use CB::Response qw/ status /;
use CB::Status qw/ breaker_at /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy http_v2/)->plan(15);

my $half = 'window=30s min_requests=3 failure_rate=50% open=1s probes=1';

$t->write_file_expand('nginx.conf', conf(1, <<"EOF"));
    upstream up  { server 127.0.0.1:%%PORT_8081%%; circuit_breaker min_requests=5; }
    upstream inv { server 127.0.0.1:%%PORT_8081%%; circuit_breaker min_requests=5; }
    upstream nb  { server 127.0.0.1:%%PORT_8081%%; keepalive 4; circuit_breaker min_requests=5; }
    upstream sl  {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=5 slow=300ms slow_rate=50%;
    }
    upstream h1  { server 127.0.0.1:%%PORT_8081%%; circuit_breaker $half; }
    upstream h2  { server 127.0.0.1:%%PORT_8081%%; circuit_breaker $half; }
    upstream h3  { server 127.0.0.1:%%PORT_8081%%; circuit_breaker $half; }
    upstream lim {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker limit=adaptive limit_min=2 limit_max=4 limit_initial=4;
    }
    upstream l2  { server 127.0.0.1:%%PORT_8081%%; circuit_breaker limit=adaptive; }
    upstream ws  { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream big { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream sse { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream dl  { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream sseb { server 127.0.0.1:%%PORT_8081%%; circuit_breaker slow=300ms; }
    upstream wss {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=5 slow=300ms slow_rate=50%;
    }
    upstream wsh { server 127.0.0.1:%%PORT_8081%%; circuit_breaker $half slow=300ms; }

    server {
        listen       127.0.0.1:8080;
        http2        on;
        server_name  localhost;

        proxy_read_timeout 3s;
        proxy_http_version 1.1;
        proxy_set_header Connection "";

        location /up/  { proxy_request_buffering off; proxy_pass http://up; }
        location /inv/ { proxy_pass http://inv; }
        location /nb/  { proxy_buffering off; proxy_pass http://nb; }
        location /sl/  { proxy_max_temp_file_size 32k; proxy_pass http://sl; }
        location /h1/  { proxy_pass http://h1; }
        location /h2/  { proxy_pass http://h2; }
        location /h3/  { proxy_max_temp_file_size 0; proxy_pass http://h3; }
        location /lim/ { proxy_max_temp_file_size 32k; proxy_pass http://lim; }
        location /l2/  { proxy_pass http://l2; }
        location /ws/  {
            proxy_buffering off;
            proxy_read_timeout 1s;
            proxy_set_header Upgrade \$http_upgrade;
            proxy_set_header Connection "upgrade";
            proxy_pass http://ws;
        }
        location /wss/ {
            proxy_set_header Upgrade \$http_upgrade;
            proxy_set_header Connection "upgrade";
            proxy_pass http://wss;
        }
        location /wsh/ {
            proxy_set_header Upgrade \$http_upgrade;
            proxy_set_header Connection "upgrade";
            proxy_pass http://wsh;
        }
        location /big/ { client_max_body_size 8m; proxy_pass http://big; }
        location /sse/ { proxy_buffering off; proxy_read_timeout 1s; proxy_pass http://sse; }
        location /dl/  { proxy_buffering off; proxy_read_timeout 1s; proxy_pass http://dl; }
        location /sseb/ { proxy_read_timeout 1s; proxy_pass http://sseb; }
        location = /status { circuit_breaker_status; }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

sub b { breaker_at("/status?upstream=$_[0]") }
sub state_of { b($_[0])->{state} // 'none' }
sub why { b($_[0])->{last_transition} // '' }

sub conn {
	my ($rcvbuf) = @_;
	my $s = IO::Socket::INET->new(Proto => 'tcp') or die "socket: $!\n";
	setsockopt($s, SOL_SOCKET, SO_RCVBUF, $rcvbuf) if $rcvbuf;
	$s->connect(pack_sockaddr_in(port(8080), inet_aton('127.0.0.1'))) or die "connect: $!\n";
	$s->autoflush(1);
	return $s;
}

# a GET whose answer nobody reads (4 KB receive buffer)
sub reader {
	my $s = conn(4096);
	print $s "GET $_[0] HTTP/1.0\r\nHost: localhost\r\n\r\n";
	return $s;
}

sub trip {
	my ($u) = @_;
	http_get("/$u/trip$_?status=500") for 1 .. 4;
	sleep 1.3;
}

# statuses of a legitimate GET every 0.5 s for SECONDS
sub legit {
	my ($uri, $seconds) = @_;
	my @st;
	my $end = time() + $seconds;
	while (time() < $end) { push @st, status(http_get($uri)); sleep 0.5; }
	return @st;
}

# 1. slow uploads, proxy_request_buffering off, closed breaker, no limit: ten POSTs announce
# 100 bytes and send one; the origin gives up reading the body after 30 s and closes

http_get('/up/prime');	# a fresh breaker's first requests have their body read first

my @up = map {
	my $s = conn();
	print $s "POST /up/u$_ HTTP/1.0\r\nHost: localhost\r\nContent-Length: 100\r\n\r\nx";
	$s;
} 1 .. 10;

# meanwhile (the 30 s): the other attacks

# 2. an HTTP/2 client with zero stream windows, proxy_buffering off: ten tiny GETs

system("/usr/bin/python3 $FindBin::Bin/lib/CB/levers.py zerowin_get " . port(8080) . " /nb/x 10 5");
is(state_of('nb'), 'closed', 'nb: ten zero-window HTTP/2 GETs do not open the breaker') or diag(why('nb'));

# 4. slow readers where the temp file is bounded (proxy_max_temp_file_size 32k): 8 readers
# of 4 MB, read nothing for 2 s

my @r = map { reader("/sl/big$_?size=4000000") } 1 .. 8;
sleep 2;
close $_ for @r;
sleep 1;
is(state_of('sl'), 'closed', 'sl: slow readers do not open the breaker') or diag(why('sl'));

# 6. half-open held by probes answered with a header too big for nginx's buffer (the origin
# echoes 5000 bytes of the query): no verdict, the breaker stays half-open

trip('h1');
my $pid = fork() // die "fork: $!\n";
if ($pid == 0) {
	my $end = time() + 6;
	while (time() < $end) { http_get('/h1/a?hdr=X-Echo:' . ('y' x 5000)); sleep 0.05; }
	POSIX::_exit(0);
}
sleep 0.2;
my @st = legit('/h1/legit', 5.5);
waitpid($pid, 0);
cmp_ok(scalar(grep { $_ == 200 } @st), '>=', @st - 3, 'h1: too-big-header probes do not hold the breaker')
	or diag("@st");

# 7. the probe held by a slow reader: X-Accel-Buffering: no (the origin streams; the probe's
# answer is read whole all the same)

for my $c ([ 'h2', 'hdr=X-Accel-Buffering:no&' ]) {
	my ($u, $q) = @$c;
	trip($u);
	my $r = reader("/$u/big?${q}size=4000000");
	sleep 0.3;
	@st = legit("/$u/legit", 3);
	close $r;
	cmp_ok(scalar(grep { $_ == 200 } @st), '>=', @st - 1, "$u: a slow reader does not hold the probe")
		or diag("@st");
}

# 8. WebSocket tunnels: the origin answers 101 and says nothing more

# a tunnel to PATH (the origin's upgrade=1): its socket, and the status nginx answered
sub tunnel {
	my ($path) = @_;
	my $s = conn();
	print $s "GET $path?upgrade=1 HTTP/1.1\r\nHost: localhost\r\n"
		. "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
	return ($s, first_status($s));
}

# a GET of PATH whose answer stays open: its socket, and the status nginx answered
sub subscription {
	my ($path) = @_;
	my $s = conn();
	print $s "GET $path HTTP/1.1\r\nHost: localhost\r\n\r\n";
	return ($s, first_status($s));
}

# the status of the first answer on socket S, within 3 s
sub first_status {
	my ($s) = @_;
	my $head = '';
	my $end = time() + 3;
	while (time() < $end && $head !~ /\r\n\r\n/) {
		my $rin = '';
		vec($rin, fileno($s), 1) = 1;
		select($rin, undef, undef, 0.1) or next;
		sysread($s, $head, 1024, length $head) or last;
	}
	return status($head) // 0;
}

# twelve idle tunnels behind proxy_buffering off, ended by proxy_read_timeout (1 s): nginx
# says "upstream timed out", and ten in a row would open the default breaker
my @ws = map { [ tunnel("/ws/t$_") ] } 1 .. 12;
sleep 1.6;
my $up = grep { $_->[1] == 101 } @ws;
close $_->[0] for @ws;
is("$up " . state_of('ws'), '12 closed', 'ws: idle tunnels timed out do not open the breaker')
	or diag(why('ws'));

# ten tunnels held 0.6 s, twice slow=300ms, then closed by their clients
@ws = map { [ tunnel("/wss/t$_") ] } 1 .. 10;
sleep 0.6;
close $_->[0] for @ws;
sleep 0.3;
is(state_of('wss'), 'closed', 'wss: tunnels held past slow= are no slow calls')
	or diag(why('wss'));

# the half-open probe taken by a tunnel held 0.6 s: its 101 closes the breaker
trip('wsh');
my ($probe, $st) = tunnel('/wsh/probe');
sleep 0.6;
close $probe;
sleep 0.3;
is("$st " . state_of('wsh'), '101 closed', 'wsh: a tunnel as the probe is judged at its 101')
	or diag(why('wsh'));
is(status(http_get('/wsh/after')), 200, 'wsh: answering after');

# twelve subscriptions to a quiet topic (an event stream whose origin sends one event, then
# nothing) behind proxy_buffering off, ended by proxy_read_timeout (1 s): nginx says
# "upstream timed out", and so does it for the control, downloads that stall; ten in a row
# open the default breaker
# (and buffered, before a breaker with slow=300ms: timed to its header, as a tunnel is)
for my $c ([ 'sse', 'text/event-stream', 'closed' ], [ 'dl', 'text/plain', 'open' ],
	[ 'sseb', 'text/event-stream', 'closed' ])
{
	my ($u, $type, $want) = @$c;
	my @sub = map { [ subscription("/$u/s$_?stream=$type") ] } 1 .. 12;
	sleep 1.6;
	my $ok = grep { $_->[1] == 200 } @sub;
	close $_->[0] for @sub;
	is("$ok " . state_of($u), "12 $want", "$u: $type ended by proxy_read_timeout: $want")
		or diag(why($u));
}

# 9. uploads the origin refuses unread: 30 POSTs of 4 MB (the default breaker opens on 20
# requests at 50 %)

my $said = uploads(30, '/big/u%d?refuse_body=1', 4 << 20);
is(CB::Origin::hits($hits, qr!^/big/u\d+!), 30, "big: each reached the origin ($said)");
is(state_of('big') . ' ' . (b('big')->{totals}{failures} // -1), 'closed 0',
	"big: refused uploads count nothing ($said)") or diag(why('big'));
is(status(http_get('/big/ok')), 200, 'big: answering after');

# 1, the end: the uploads

my @ans = map { local $/; my $a = <$_> // ''; close $_; status($a) // 'none' } @up;
is(state_of('up'), 'closed', "up: stalled uploads do not open the breaker (answers: @ans)")
	or diag(why('up'));

###############################################################################
