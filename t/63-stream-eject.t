#!/usr/bin/perl

# Ejecting a bad server from a stream pool, with two real Redis servers (Debian's
# redis-server, started here) behind one upstream with active probes, two workers:
# stopped with SIGSTOP (accepts, never answers), one server's silence past
# first_byte ejects it within a few of its sessions while the other answers, every
# later session goes to the other, and the upstream's own breaker never opens; let go
# on, the module's probe of it returns it.  Killed (refused connects), nginx moves on
# to the other server, and those tries eject it.  What a client shapes (unfinished
# commands held past first_byte, while both servers answer others) ejects nothing.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Time::HiRes qw/ sleep time /;

use Test::Nginx;
use Test::Nginx::Stream qw/ stream /;
use CB::Nginx qw/ stream_conf start req log_count /;
use CB::Response qw/ status json /;
use CB::Redis;
use CB::Config qw/ conf_fails /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/stream http/)->plan(25);

# One expansion: a second would remap the addresses the first wrote.
my $stream = stream_conf(2, <<'EOF');
    log_format s '$server_port $status $upstream_addr $session_time';
    access_log %%TESTDIR%%/stream.log s;

    circuit_breaker_zone cbs:1m;

    upstream pool {
        server 127.0.0.1:%%PORT_8091%% max_fails=0;
        server 127.0.0.1:%%PORT_8096%% max_fails=0;
        circuit_breaker window=3s min_requests=4 consecutive=20 first_byte=300ms
                        probe_interval=500ms;
        circuit_breaker_probe send=PING\r\n expect=+PONG timeout=500ms;
        circuit_breaker_eject min_requests=3 time=1s;
    }

    server { listen 127.0.0.1:%%PORT_8090%%; proxy_pass pool; proxy_timeout 30s; }

    # the same pool for what a client shapes: a bound (1s) that other sessions' answers come
    # well within, however busy the machine
    upstream lever {
        server 127.0.0.1:%%PORT_8091%%;
        server 127.0.0.1:%%PORT_8096%%;
        circuit_breaker min_requests=4 consecutive=20 first_byte=1s probe_interval=500ms;
        circuit_breaker_probe send=PING\r\n expect=+PONG timeout=500ms;
        circuit_breaker_eject min_requests=3 time=1s;
    }

    server { listen 127.0.0.1:%%PORT_8097%%; proxy_pass lever; proxy_timeout 30s; }

    # nothing listens on 8098; nginx does not move on from a refused connect here
    upstream half {
        server 127.0.0.1:%%PORT_8098%% max_fails=0;
        server 127.0.0.1:%%PORT_8096%% max_fails=0;
        server 127.0.0.1:%%PORT_8091%% backup;
        circuit_breaker window=3s min_requests=4 consecutive=20 first_byte=300ms
                        probe_interval=500ms;
        circuit_breaker_probe send=PING\r\n expect=+PONG timeout=500ms;
        circuit_breaker_eject min_requests=3 time=1s;
    }

    server {
        listen 127.0.0.1:%%PORT_8099%%;
        proxy_pass half;
        proxy_next_upstream off;
    }
EOF
$t->write_file_expand('nginx.conf', $stream . <<'EOF');
http {
    %%TEST_GLOBALS_HTTP%%

    server {
        listen 127.0.0.1:8080;
        location = /status { circuit_breaker_status control=on; }
    }
}
EOF

my $ra = CB::Redis->start($t, port(8091));
my $rb = CB::Redis->start($t, port(8096));
start($t);

my $main = port(8090);
my ($aa, $ba) = map { '127.0.0.1:' . port($_) } 8091, 8096;

sub ping {
	my ($wait, $port) = @_;
	my $s = stream('127.0.0.1:' . ($port // $main));
	return $s->io("PING\r\n", read => 1, read_timeout => $wait // 3) // '';
}

sub lines {
	my ($t) = @_;
	return scalar(() = (eval { $t->read_file('stream.log') } // '') =~ /\n/g);
}

# the servers (last try) of the sessions logged since line FROM
sub served {
	my ($t, $from) = @_;
	my @l = split /\n/, (eval { $t->read_file('stream.log') } // '');
	# "$upstream_addr" lists every try: "A, B"; the last is the server
	return map {
		my $addr = (split / /, $_, 3)[2];
		$addr =~ s/ [\d.]+$//;
		$addr =~ s/.*, //;
		$addr
	} @l[$from .. $#l];
}

# the stream upstream "pool" as the status page shows it
sub pool_view {
	my ($name) = @_;
	my $page = json(req('GET', '/status')) || {};
	my ($cbs) = grep { $_->{zone} eq 'cbs' } @{ $page->{stream} || [] };
	my ($b) = grep { $_->{upstream} eq ($name // 'pool') } @{ ($cbs || {})->{breakers} || [] };
	return $b || {};
}

# waits until the stream log has N lines (sessions are logged as they end)
sub logged {
	my ($t, $n) = @_;
	my $end = time() + 5;
	sleep 0.05 while time() < $end && lines($t) < $n;
}

###############################################################################

my @r = map { ping() } 1 .. 6;
is(scalar(grep { $_ eq "+PONG\r\n" } @r), 6, 'healthy: every session answered');
logged($t, 6);
my %by = map { $_ => 1 } served($t, 0);
ok($by{$aa} && $by{$ba}, 'healthy: both servers served');

# what a client shapes: unfinished commands held past first_byte on both servers, while
# both answer other sessions

my $lever = port(8097);
my @held;
for (1 .. 6) {
	my $s = stream("127.0.0.1:$lever");
	$s->write("*2\r\n");
	push @held, $s;
}
# others' sessions all along, on both servers (each worker's round robin alternates)
my $until = time() + 1.6;
ping(3, $lever) while time() < $until;
undef @held;
sleep 0.3;
is(log_count($t, qr/server \S+ ejected/), 0, 'unfinished commands: no server ejected');

# server A stopped: its sessions keep silent past first_byte while B answers

# a window (3s) without those sessions
sleep 3.2;

$ra->stop();
my $before = lines($t);
my ($ok, $sent) = (0, 0);
for (1 .. 20) {
	$sent++;
	# the client waits 0.6s: past first_byte, so that each of A's sessions is judged
	$ok++ if ping(0.6) eq "+PONG\r\n";
	last if log_count($t, qr/"pool" server \Q$aa\E ejected/);
}
ok(log_count($t, qr/"pool" server \Q$aa\E ejected/) == 1,
	"stopped: server A ejected ($sent sessions)");
ok($sent <= 10, "stopped: within a few of its sessions ($sent)");

logged($t, $before + $sent);
my $after = lines($t);
@r = map { ping() } 1 .. 10;
is(scalar(grep { $_ eq "+PONG\r\n" } @r), 10, 'ejected: every later session answered');
logged($t, $after + 10);
is(join(' ', sort keys %{{ map { $_ => 1 } served($t, $after) }}), $ba,
	'ejected: every later session went to B');
is(log_count($t, qr/"pool" opened/), 0, 'the upstream\'s own breaker never opened');
is(join(' ', map { "$_->{address}:$_->{state}" } @{ pool_view()->{servers} || [] }),
	"$aa:ejected $ba:in", 'status: the pool\'s servers, A ejected');

# let go on: the module's probe of A returns it

$ra->cont();
my $end = time() + 10;
sleep 0.1 while time() < $end && !log_count($t, qr/"pool" server \Q$aa\E returned/);
is(log_count($t, qr/"pool" server \Q$aa\E returned/), 1, 'let go on: a probe returned A');
$after = lines($t);
@r = map { ping() } 1 .. 8;
is(scalar(grep { $_ eq "+PONG\r\n" } @r), 8, 'returned: every session answered');
logged($t, $after + 8);
ok((grep { $_ eq $aa } served($t, $after)), 'returned: A serves again');

# a window without its answers, then killed: refused connects (no max_fails: nginx's own
# marking would skip it first); nginx moves on to B, and those tries eject A
sleep 3.2;
$ra->kill();
$after = lines($t);
@r = ();
for (1 .. 20) {
	push @r, ping(1);
	last if log_count($t, qr/"pool" server \Q$aa\E ejected/) == 2;
}
is(log_count($t, qr/"pool" server \Q$aa\E ejected/), 2, 'killed: A ejected again');
is(scalar(grep { $_ ne "+PONG\r\n" } @r), 0, 'killed: clients saw only answers');

$ra->restart();

# a dead server whose refused connects nginx does not move on from (proxy_next_upstream off):
# the sessions' 502s are its failures, it is ejected, and the upstream never opens

my $dead = '127.0.0.1:' . port(8098);
my @half;
for (1 .. 12) {
	my $s = stream('127.0.0.1:' . port(8099));
	push @half, $s->io("PING\r\n", read => 1, read_timeout => 2) // '';
}
is(log_count($t, qr/"half" server \Q$dead\E ejected/), 1, 'no next upstream: the dead server ejected');
is(log_count($t, qr/"half" opened/), 0, 'no next upstream: the upstream never opened');
is(join('', @half[-6 .. -1]), "+PONG\r\n" x 6, 'no next upstream: then every session answered');
is(join(' ', map { "$_->{address}:$_->{state}" . ($_->{backup} ? ':backup' : '') }
	@{ pool_view('half')->{servers} || [] }), "$dead:ejected $ba:in $aa:in:backup",
	'status: a pool\'s servers in configuration order, the backup said');

# an operator's eject and restore, through the http status location's control

my $CTL = 'X-Circuit-Breaker-Control: 1';
sleep 3.2;
my $r = req('POST', "/status?proxy=stream&upstream=pool&server=$ba&action=eject", $CTL);
is(status($r), 200, 'control: B ejected by hand');
$after = lines($t);
@r = map { ping() } 1 .. 6;
logged($t, $after + 6);
is(join(' ', sort keys %{{ map { $_ => 1 } served($t, $after) }}), $aa,
	'control: every session went to A');
$r = req('POST', "/status?proxy=stream&upstream=pool&server=$ba&action=restore", $CTL);
is(status($r), 200, 'control: B restored');
$r = req('POST', "/status?proxy=stream&upstream=pool&server=127.0.0.1:1&action=eject", $CTL);
is(status($r), 404, 'control: a server not in the pool');

###############################################################################

# ejection returns servers through the module's probes: it needs them

conf_fails($t, 'circuit_breaker_eject without circuit_breaker_probe',
	stream_conf(1, <<'EOF'), 'upstream nope',
    upstream nope {
        server 127.0.0.1:%%PORT_8091%%;
        server 127.0.0.1:%%PORT_8096%%;
        circuit_breaker;
        circuit_breaker_eject;
    }
    server { listen 127.0.0.1:%%PORT_8097%%; proxy_pass nope; }
EOF
	'"circuit_breaker_eject" requires "circuit_breaker_probe" in upstream "nope"');

conf_fails($t, 'relative ejection in stream',
	stream_conf(1, <<'EOF'), 'circuit_breaker_eject relative',
    upstream rel {
        server 127.0.0.1:%%PORT_8091%%;
        server 127.0.0.1:%%PORT_8096%%;
        circuit_breaker;
        circuit_breaker_eject relative=on;
    }
    server { listen 127.0.0.1:%%PORT_8097%%; proxy_pass rel; }
EOF
	'"relative" and "latency_factor" of "circuit_breaker_eject" are not supported in '
	. 'stream: a session\'s time to the first byte is the client\'s to shape');

conf_fails($t, 'a returning server\'s ramp in stream',
	stream_conf(1, <<'EOF'), 'circuit_breaker_eject ramp',
    upstream ramped {
        server 127.0.0.1:%%PORT_8091%%;
        server 127.0.0.1:%%PORT_8096%%;
        circuit_breaker;
        circuit_breaker_eject ramp=10s;
    }
    server { listen 127.0.0.1:%%PORT_8097%%; proxy_pass ramped; }
EOF
	'"ramp" of "circuit_breaker_eject" is not supported in stream: a returning server '
	. 'takes its share of sessions at once');

###############################################################################
