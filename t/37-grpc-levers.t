#!/usr/bin/perl

# Hostile gRPC clients (raw HTTP/2, t/lib/CB/levers.py) against breakers of a healthy origin
# (grpc_peer.py; /test.Echo/Fail only trips a breaker): grpc-timeout fields read as the origin
# reads them (several, leading zeros, spaces), calls on a connection whose windows are 0
# (nginx cannot pass the answer on, the upstream's read timer runs out), quiet watches ended
# at their clients' deadlines, a flood of 1-ns deadlines while half-open; none opens, holds
# or fails a breaker.  A hung origin behind
# clients' short deadlines is still seen, as slow.  Each check states the claim: a failure is
# a client lever that works.
# prove: alone

###############################################################################

use warnings;
use strict;

use Test::More;

use POSIX ();
use Time::HiRes qw/ sleep time /;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf /;
use CB::GrpcPeer qw/ grpc_peer /;
use CB::Status qw/ breaker_at /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my ($python, $peer) = grpc_peer();
my $levers = "$FindBin::Bin/lib/CB/levers.py";

my $t = Test::Nginx->new()->has(qw/http http_v2 grpc/)->plan(10);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    upstream d1 { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream d2 { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream d3 { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream z  { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream w  { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream s  { server 127.0.0.1:%%PORT_8081%%; circuit_breaker min_requests=5 slow=200ms; }
    upstream p  {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=30s min_requests=3 failure_rate=50% open=1s probes=1;
    }
    upstream h  {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=30s min_requests=3 failure_rate=50% open=1s probes=1;
    }

    server {
        listen       127.0.0.1:8084;
        http2        on;
        server_name  localhost;

        location /d1/ { rewrite ^/d1(/.*)$ $1 break; grpc_pass grpc://d1; }
        location /d2/ { rewrite ^/d2(/.*)$ $1 break; grpc_pass grpc://d2; }
        location /d3/ { rewrite ^/d3(/.*)$ $1 break; grpc_pass grpc://d3; }
        location /z/  { rewrite ^/z(/.*)$ $1 break; grpc_read_timeout 3s; grpc_pass grpc://z; }
        location /s/  { rewrite ^/s(/.*)$ $1 break; grpc_pass grpc://s; }
        location /w/  { rewrite ^/w(/.*)$ $1 break; grpc_read_timeout 1s; grpc_pass grpc://w; }
        location /p/  { rewrite ^/p(/.*)$ $1 break; grpc_read_timeout 3s; grpc_pass grpc://p; }
        location /h/  { rewrite ^/h(/.*)$ $1 break; grpc_pass grpc://h; }
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location = /status { circuit_breaker_status; }
    }
EOF

my $hits = $t->testdir() . '/grpc-8081.hits';
$t->write_file('grpc-8081.hits.mode', "/test.Echo/Fail 14 only\n/test.Echo/Slow 0 sleep100\n/test.Echo/Hang 0 sleep3000\n");

# as many calls at once as the watches hold
$ENV{GRPC_PEER_WORKERS} = 16;
$t->run_daemon($python, $peer, 'serve', port(8081), $hits);
$t->run();
$t->waitforsocket('127.0.0.1:' . port(8081)) or die "no grpc backend\n";

###############################################################################

sub state_of { breaker_at("/status?upstream=$_[0]")->{state} // 'none' }
sub why { breaker_at("/status?upstream=$_[0]")->{last_transition} // '' }
sub lever { my $cmd = join ' ', $python, $levers, $_[0], port(8084), @_[1 .. $#_]; return `$cmd`; }

# 1. two grpc-timeout fields: the module reads the first (99999999H: a call that ends at once
# is the origin's), the origin obeys the last (1n: DEADLINE_EXCEEDED at once)

lever('timeout', '/d1/test.Echo/Slow', 10, "'99999999H|1n'");
is(state_of('d1'), 'closed', 'two grpc-timeout fields (99999999H, 1n) x10 do not open the breaker')
	or diag(why('d1'));

# 2. one field the module cannot parse but grpc-core can: ten digits, a space before the unit

lever('timeout', '/d2/test.Echo/Slow', 10, "'0000000001n'");
is(state_of('d2'), 'closed', 'grpc-timeout: 0000000001n x10 does not open the breaker')
	or diag(why('d2'));

lever('timeout', '/d3/test.Echo/Slow', 10, "'1 n'");
is(state_of('d3'), 'closed', "grpc-timeout: '1 n' x10 does not open the breaker")
	or diag(why('d3'));

# 3. ten calls on one connection whose stream windows are 0: nginx cannot pass the answer on,
# the upstream read timer runs out (grpc_read_timeout, here 3 s; 60 s by default)

lever('zerowin', '/z/test.Echo/Unary', 10, 5);
is(state_of('z'), 'closed', 'ten zero-window calls do not open the breaker')
	or diag(why('z'));

# 3b. twelve watches with nothing to report after their first message, whose clients set a
# deadline (500 ms) below grpc_read_timeout (1 s here): the origin ends each at the client's
# deadline, the client's doing (without one, nginx's timeout ends them as it ends a hung
# call: docs/behaviour.md)

my $w = lever('grpc_wait', '/w/test.Echo/Quiet', 12, 2.5, '500m');
chomp $w;
is(state_of('w'), 'closed', "twelve quiet watches with client deadlines do not open the breaker ($w)")
	or diag(why('w'));

# 4. half-open, held by calls with grpc-timeout 1n (no verdict: the probe is freed, the
# breaker stays half-open): 20 calls/s (50 calls/s) beside a legitimate client's 2 calls/s

lever('timeout', '/h/test.Echo/Fail', 4, '-');
is(state_of('h'), 'open', 'h: tripped');
my $pid = fork() // die "fork: $!\n";
if ($pid == 0) { lever('flood', '/h/test.Echo/Slow', 50, 12, '1n'); POSIX::_exit(0); }
sleep 1.5;
my ($served, $n) = lever('legit', '/h/test.Echo/Legit', 2, 10) =~ /served (\d+) of (\d+)/;
waitpid($pid, 0);
cmp_ok($served // 0, '>=', ($n // 0) - 3, 'h: the legitimate client is served (' . ($served // 0)
	. ' of ' . ($n // 0) . ')');
is(state_of('h'), 'closed', 'h: the breaker closed on a healthy origin')
	or diag(breaker_at('/status?upstream=h')->{totals}{probes} . ' probes');


# 5. a hung origin (every call takes 3 s) behind clients with a 500-ms deadline: the origin
# answers DEADLINE_EXCEEDED at the client's deadline; with slow=200ms, is it seen at all?

lever('timeout', '/s/test.Echo/Hang', 8, '500m');
my $s = breaker_at('/status?upstream=s');
cmp_ok($s->{window}{requests} // 0, '>', 0, 'a hung origin behind client deadlines is seen ('
	. ($s->{window}{requests} // 0) . ' requests, ' . ($s->{window}{slow} // 0) . ' slow)');

# 6. the half-open probe taken by a zero-window call: held until grpc_read_timeout (3 s
# here, 60 s by default: a gRPC answer cannot be read whole), then freed, not failed

lever('timeout', '/p/test.Echo/Fail', 4, '-');
sleep 1.3;
$pid = fork() // die "fork: $!\n";
if ($pid == 0) { lever('zerowin', '/p/test.Echo/Unary', 1, 5); POSIX::_exit(0); }
sleep 0.5;
waitpid($pid, 0);
unlike(why('p'), qr/probe failed: timeout/, 'p: a zero-window call that took the probe did not fail it ('
	. why('p') . ')');

###############################################################################
