#!/usr/bin/perl

# The client's levers on a breaker, measured as issue 36 measured them on the build before
# its fix: each scenario is an attack a client can make with the default configuration (or
# the one the issue names), and prints what it did to the breaker and to everyone else.
# Run by scripts/measure-levers, which says which module it loads; the figures, not pass or
# fail, are its output (t/21, t/32..38 and t/87 are the tests).

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use IO::Socket::INET;
use Socket qw/ SOL_SOCKET SO_RCVBUF inet_aton pack_sockaddr_in /;
use Time::HiRes qw/ sleep time /;

BEGIN { push @INC, "$FindBin::Bin/../t/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start /;
use CB::GrpcPeer qw/ grpc_peer /;
use CB::Origin;
use CB::Response qw/ status /;
use CB::Status qw/ breaker_at /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my ($python, $peer) = grpc_peer();

my $t = Test::Nginx->new()->has(qw/http proxy http_v2 grpc/);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    upstream g { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream gl {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker;
        circuit_breaker_limit adaptive max=20;
    }
    upstream hdr { server 127.0.0.1:%%PORT_8082%%; circuit_breaker; }
    upstream rd {
        server 127.0.0.1:%%PORT_8082%%;
        circuit_breaker slow=500ms slow_rate=50%;
    }
    upstream vol {
        server 127.0.0.1:%%PORT_8082%%;
        circuit_breaker min_requests=5 open=2s;
    }

    upstream up {
        server 127.0.0.1:%%PORT_8082%%;
        circuit_breaker min_requests=5 open=2s;
    }

    upstream held { server 127.0.0.1:%%PORT_8082%%; circuit_breaker; }
    upstream sse  { server 127.0.0.1:%%PORT_8082%%; circuit_breaker; }

    server {
        listen       127.0.0.1:8084;
        http2        on;
        server_name  localhost;
        client_body_timeout 60s;

        location /test.Echo/Deadline { grpc_pass grpc://g; }
        location /test.Echo/ { grpc_pass grpc://gl; }
    }

    server {
        listen       127.0.0.1:8085;
        http2        on;
        server_name  localhost;

        location / {
            grpc_pass grpc://127.0.0.1:%%PORT_8084%%;
            grpc_set_header grpc-timeout 1n;
        }
    }

    server {
        listen       127.0.0.1:8080 sndbuf=16k;
        server_name  localhost;
        client_body_timeout 60s;

        location /hdr/ { proxy_pass http://hdr; }
        location /rd/ { proxy_pass http://rd; proxy_buffering off; }
        location /up/ { proxy_pass http://up; proxy_request_buffering off; }
        location /vol/ { proxy_pass http://vol; }
        location /held/ { proxy_pass http://held; proxy_buffering off; }
        location /sse/ { proxy_pass http://sse; proxy_buffering off; proxy_read_timeout 1s; }
        location = /status { circuit_breaker_status; }
    }
EOF

my $dir = $t->testdir();
$t->write_file('grpc-8081.hits.mode', "/test.Echo/Deadline 0 sleep100\n");
$t->run_daemon($python, $peer, 'serve', port(8081), "$dir/grpc-8081.hits");
my $hits = start($t, 8082);
$t->waitforsocket('127.0.0.1:' . port(8081)) or die "no grpc backend\n";

sub b { breaker_at("/status?upstream=$_[0]") }

# a GET of PATH on a socket with a 4 KB receive buffer, not read yet
sub reader {
	my ($path) = @_;
	my $s = IO::Socket::INET->new(Proto => 'tcp') or die "socket: $!\n";
	setsockopt($s, SOL_SOCKET, SO_RCVBUF, 4096);
	$s->connect(pack_sockaddr_in(port(8080), inet_aton('127.0.0.1'))) or die "connect: $!\n";
	print $s "GET $path HTTP/1.0\r\nHost: localhost\r\n\r\n";
	return $s;
}
sub said { my $b = b($_[0]); "$b->{state}" . ($b->{last_transition} ? ": $b->{last_transition}" : '') }
sub calls {
	my ($port, $n, $method) = @_;
	map { /^(\d+) / ? $1 : -1 } `$python $peer call @{[ port($port) ]} $n test.Echo/$method`;
}

# 1. ten gRPC calls with the client's own 1-ns deadline (default configuration)

my @c = calls(8085, 10, 'Deadline');
my @after = calls(8084, 20, 'Deadline');
printf "grpc-timeout 1n: 10 calls, codes %s; breaker %s; 20 other calls then: %d got 14\n",
	join(' ', @c), said('g'), scalar grep { $_ == 14 } @after;

# 2. 25 gRPC client streams trickling for 10 s beside an adaptive limit of 20, 36 unary
# calls meanwhile

# the controller's first intervals set its initial limit (20)
for (1 .. 3) { calls(8084, 2, 'Warm'); sleep 0.15; }
my $limit_start = b('gl')->{limit}{limit};
open my $fh, '-|', $python, $peer, 'streams', port(8084), 25, 34, 300, 'test.Echo/StreamSlow'
	or die "streams: $!\n";
sleep 1;
my $limit_before = b('gl')->{limit}{limit};
my @legit;
for (1 .. 36) { push @legit, calls(8084, 1, 'Unary'); sleep 0.2; }
my @ends = <$fh>;
close $fh;
sleep 1;
printf "25 trickling gRPC streams: %d of 36 unary calls got RESOURCE_EXHAUSTED; "
	. "limit %s before, %s during, %s after; streams ended: %s\n",
	scalar(grep { $_ == 8 } @legit), $limit_start // '-', $limit_before // '-',
	b('gl')->{limit}{limit} // '-',
	join(' ', map { chomp; $_ } @ends);

# 3. a 6000-byte path the origin echoes into Location, 22 times (default configuration)

my $long = 'a' x 6000;
my @h = map { status(http_get("/hdr/r$_?hdr=Location:/$long")) } 1 .. 22;
printf "reflected header: 22 requests, statuses %s; breaker %s; then /hdr/ok: %s\n",
	join(' ', @h), said('hdr'), status(http_get('/hdr/ok'));

# 4. 20 clients reading a 4 MB answer slowly and hanging up (slow=500ms slow_rate=50%),
# beside 8 ordinary requests

status(http_get("/rd/ok$_")) for 1 .. 8;
my @s = map { reader("/rd/big$_?size=4000000") } 1 .. 20;
sleep 1.5;
close $_ for @s;
my $end = time() + 10;
sleep 0.1 while (b('rd')->{totals}{requests} // 0) < 28 && time() < $end;
printf "slow readers: 20 readers + 8 requests; breaker %s\n", said('rd');

# 5. one upload trickling a byte every 0.5 s after the cooldown (proxy_request_buffering
# off), 50 legitimate requests over 25 s

status(http_get("/up/f$_?status=500")) for 1 .. 5;
sleep 2.5;
my $u = IO::Socket::INET->new('127.0.0.1:' . port(8080)) or die "connect: $!\n";
$u->autoflush(1);
print $u "POST /up/upload HTTP/1.0\r\nHost: localhost\r\nContent-Length: 100\r\n\r\nx";
my ($sent, @st) = (1);
for my $i (1 .. 50) {
	sleep 0.5;
	print $u 'x' if $sent++ < 99;
	push @st, status(http_get("/up/ok$i"));
}
close $u;
printf "trickling upload at the probe: %d of 50 requests got 503; breaker %s\n",
	scalar(grep { $_ == 503 } @st), said('up');

# 6. the user-request probe taken by volume (which no jitter hides: the README's recipe is
# probe_uri): a client asks a URL the origin fails on every 20 ms for 25 s, 50 legitimate
# requests meanwhile

status(http_get("/vol/f$_?status=500")) for 1 .. 5;
my $pid = fork() // die "fork: $!\n";
if ($pid == 0) {
	my $until = time() + 25;
	while (time() < $until) { http_get('/vol/fail?status=500'); sleep 0.02; }
	exit 0;
}
my @v;
for my $i (1 .. 50) { sleep 0.5; push @v, status(http_get("/vol/ok$i")); }
waitpid($pid, 0);
printf "probe by volume (a failing URL every 20 ms): %d of 50 requests got 503; "
	. "breaker %s, cooldown %s ms\n", scalar(grep { $_ == 503 } @v), said('vol'),
	b('vol')->{cooldown_ms} // '-';

# 7. 24 clients hold an answer up for 2.5 s (read nothing of 16 MB, then all of it) behind
# proxy_buffering off, where the origin gives up on an answer not written within 1 s (a
# write deadline of its own); then 20 requests (default configuration)

my @holders = map { reader("/held/r$_?size=16000000&write_timeout=1000") } 1 .. 24;
sleep 2.5;
for my $s (@holders) {
	my $buf;
	my $until = time() + 20;
	while (time() < $until) { last unless sysread($s, $buf, 1 << 16); }
	close $s;
}
my @then = map { status(http_get("/held/ok$_")) } 1 .. 20;
printf "held answers (origin's write deadline 1 s): 24 held 2.5 s; breaker %s; "
	. "then %d of 20 requests got 503\n", said('held'), scalar(grep { $_ == 503 } @then);

# 8. 12 clients subscribe to a quiet topic (an event stream: one event, then nothing) behind
# proxy_buffering off, ended by proxy_read_timeout (1 s here, 60 s by default); then 20
# requests (default configuration)

my @subs = map {
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080)) or die "connect: $!\n";
	print $s "GET /sse/s$_?stream=text/event-stream HTTP/1.1\r\nHost: localhost\r\n\r\n";
	$s;
} 1 .. 12;
sleep 1.6;
close $_ for @subs;
@then = map { status(http_get("/sse/ok$_")) } 1 .. 20;
printf "quiet subscriptions (event stream, proxy_read_timeout 1 s): 12 ended by the timeout; "
	. "breaker %s; then %d of 20 requests got 503\n", said('sse'),
	scalar(grep { $_ == 503 } @then);

done_testing();

###############################################################################
