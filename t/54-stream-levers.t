#!/usr/bin/perl

# What a client can shape opens no stream breaker (a real Redis behind nginx's stream proxy,
# two workers).  A client cannot fail a healthy server: unfinished commands held past
# first_byte while the upstream answers other sessions; a PROXY protocol header nginx sends
# for clients that say nothing, to a server that waits for them; a client's own pause before
# it speaks, with slow= set; a slow upload; idle clients that fill max_conns, so that nginx
# finds no server free (502 without a connect); unfinished commands on new sessions while
# the server answers only an application's pooled connections, opened and answered before
# (their later replies are answers too).  Each would have opened its breaker.  In a quiet
# spell, with nobody else answered, unfinished commands held past first_byte do look like a
# hung server and open a breaker without circuit_breaker_probe; with one, the trip asks the
# probe first, which Redis answers: nothing opens, however often the clients come back, and
# sessions pass.  A server that really hangs (stopped: the kernel accepts, nothing answers)
# still opens the probed breaker, its probe failing too, and the log line says both; a probe
# that only connects (which a stopped server's kernel answers) does not ask.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw/ sleep time /;

use Test::Nginx;
use Test::Nginx::Stream qw/ stream /;
use CB::Nginx qw/ stream_conf start log_count /;
use CB::Redis;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/stream/)->plan(26);

# Every breaker would open on its 4th bad session of 4 (consecutive=20: the rate decides).
$t->write_file_expand('nginx.conf', stream_conf(2, <<'EOF'));
    log_format s '$server_port $status $upstream_addr';
    access_log %%TESTDIR%%/stream.log s;

    upstream partial {
        server 127.0.0.1:%%PORT_8091%%;
        circuit_breaker min_requests=4 consecutive=20 first_byte=300ms;
    }
    upstream proxied {
        server 127.0.0.1:%%PORT_8096%%;
        circuit_breaker min_requests=4 consecutive=20 first_byte=300ms;
    }
    upstream pause {
        server 127.0.0.1:%%PORT_8091%%;
        circuit_breaker min_requests=4 consecutive=20 slow=500ms slow_rate=50%;
    }
    upstream upload {
        server 127.0.0.1:%%PORT_8091%%;
        circuit_breaker min_requests=4 consecutive=20 first_byte=300ms;
    }
    upstream full {
        zone full 64k;
        server 127.0.0.1:%%PORT_8091%% max_conns=1;
        circuit_breaker min_requests=4 consecutive=20;
    }

    server { listen 127.0.0.1:%%PORT_8090%%; proxy_pass partial; }
    server { listen 127.0.0.1:%%PORT_8092%%; proxy_pass proxied; proxy_protocol on; }
    server { listen 127.0.0.1:%%PORT_8093%%; proxy_pass pause; }
    server { listen 127.0.0.1:%%PORT_8094%%; proxy_pass upload; }
    server { listen 127.0.0.1:%%PORT_8095%%; proxy_pass full; }

    upstream pooled {
        server 127.0.0.1:%%PORT_8091%%;
        circuit_breaker min_requests=4 consecutive=20 first_byte=300ms;
    }
    server { listen 127.0.0.1:%%PORT_8097%%; proxy_pass pooled; proxy_timeout 1m; }

    upstream quiet {
        server 127.0.0.1:%%PORT_8091%%;
        circuit_breaker min_requests=4 consecutive=20 first_byte=300ms jitter=0%;
        circuit_breaker_probe send=PING\r\n expect=+PONG timeout=2s;
    }
    upstream unprobed {
        server 127.0.0.1:%%PORT_8091%%;
        circuit_breaker min_requests=4 consecutive=20 first_byte=300ms;
    }
    upstream hung {
        server 127.0.0.1:%%PORT_8101%%;
        circuit_breaker min_requests=4 consecutive=20 first_byte=300ms jitter=0%;
        circuit_breaker_probe send=PING\r\n expect=+PONG timeout=300ms;
    }
    server { listen 127.0.0.1:%%PORT_8098%%; proxy_pass quiet; proxy_timeout 5s; }
    server { listen 127.0.0.1:%%PORT_8099%%; proxy_pass unprobed; proxy_timeout 5s; }
    server { listen 127.0.0.1:%%PORT_8100%%; proxy_pass hung; proxy_timeout 5s; }
    # a probe that connects and expects nothing: a stopped server still accepts
    upstream connects {
        server 127.0.0.1:%%PORT_8101%%;
        circuit_breaker min_requests=4 consecutive=20 first_byte=300ms jitter=0%;
        circuit_breaker_probe timeout=300ms;
    }
    server { listen 127.0.0.1:%%PORT_8102%%; proxy_pass connects; proxy_timeout 5s; }
EOF

my $redis = CB::Redis->start($t, port(8091));
my $stopped = CB::Redis->start($t, port(8101));
# a server that waits for its client to speak first, and never answers what it is sent
$t->run_daemon(\&listener, port(8096));
start($t);
$t->waitforsocket('127.0.0.1:' . port(8096)) or die "no listener\n";

###############################################################################

sub ping {
	my ($p) = @_;
	return stream("127.0.0.1:$p")->io("PING\r\n", read => 1, read_timeout => 3);
}

sub opened {
	my ($t, $name) = @_;
	return log_count($t, qr/"$name" opened/);
}

# six unfinished commands held past first_byte, while others' PINGs are answered
my @held = map { my $s = stream('127.0.0.1:' . port(8090)); $s->write("*2\r\n"); $s } 1 .. 6;
my $answered = 0;
for (1 .. 10) {
	$answered++ if ping(port(8090)) eq "+PONG\r\n";
	sleep 0.1;
}
sleep 0.5;
undef @held;
is($answered, 10, 'unfinished commands: others answered meanwhile');
is(opened($t, 'partial'), 0, 'unfinished commands past first_byte: never opened');

# six clients that say nothing, with proxy_protocol on: nginx's PROXY header is no client's
@held = map { stream('127.0.0.1:' . port(8092)) } 1 .. 6;
sleep 0.8;
undef @held;
is(opened($t, 'proxied'), 0, 'proxy_protocol, silent clients: never opened');

# six clients that pause a second before their PING, with slow=500ms
my @paused = map { stream('127.0.0.1:' . port(8093)) } 1 .. 6;
sleep 1;
my @replies = map { $_->io("PING\r\n", read => 1, read_timeout => 3) } @paused;
is(scalar(grep { $_ eq "+PONG\r\n" } @replies), 6, 'a pause before speaking: answered');
is(opened($t, 'pause'), 0, 'a pause before speaking is not the server\'s slowness');

# four uploads of 200 KB, each sent over a second (past first_byte), answered +OK
my $ok = 0;
for (1 .. 4) {
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8094)) or next;
	my $value = 'x' x 200_000;
	my $cmd = "*3\r\n\$3\r\nSET\r\n\$2\r\nup\r\n\$" . length($value) . "\r\n$value\r\n";
	my $chunk = int(length($cmd) / 10) + 1;
	for my $i (0 .. 9) {
		syswrite($s, substr($cmd, $i * $chunk, $chunk)) if $i * $chunk < length $cmd;
		sleep 0.1;
	}
	$s->blocking(0);
	my $reply = '';
	my $end = time() + 3;
	while (time() < $end && $reply !~ /\r\n/) {
		my $n = sysread($s, my $buf, 64);
		$reply .= $buf if $n;
		sleep 0.01;
	}
	$ok++ if $reply eq "+OK\r\n";
}
is($ok, 4, 'slow uploads: answered');
is(opened($t, 'upload'), 0, 'slow uploads: never opened');

# one idle client holds the only connection max_conns allows; six more find no server free
my $idle = stream('127.0.0.1:' . port(8095));
sleep 0.3;
my @busy = map { ping(port(8095)) } 1 .. 6;
is(scalar(grep { $_ eq '' } @busy), 6, 'max_conns full: sessions turned away');
my $log = $t->read_file('stream.log');
my $p = port(8095);
is(scalar(() = $log =~ /^$p 502 /mg), 6, 'max_conns full: status 502');
is(opened($t, 'full'), 0, 'max_conns filled by an idle client: never opened');
undef $idle;
sleep 0.3;
is(ping(port(8095)), "+PONG\r\n", 'max_conns free again: answered');
is(ping(port(8090)), "+PONG\r\n", 'the first upstream still answers');

# an application's pool of four connections, each answered once; then eight unfinished
# commands on new sessions held past first_byte while only the pool's PINGs are answered

my @pool = map { stream('127.0.0.1:' . port(8097)) } 1 .. 4;
my $pooled = grep { $_->io("PING\r\n", read => 1, read_timeout => 3) eq "+PONG\r\n" } @pool;
@held = map { my $s = stream('127.0.0.1:' . port(8097)); $s->write("*2\r\n"); $s } 1 .. 8;
my $end = time() + 0.8;
while (time() < $end) {
	$pooled += grep { $_->io("PING\r\n", read => 1, read_timeout => 3) eq "+PONG\r\n" }
		@pool;
	sleep 0.05;
}
undef @held;
undef @pool;
cmp_ok($pooled, '>=', 20, "pooled connections: answered meanwhile ($pooled)");
is(opened($t, 'pooled'), 0, 'unfinished commands while only pooled connections answer');

# a quiet spell: six clients at once send an unfinished command, hold it past first_byte and
# leave, with nobody else to answer

sub unfinished {
	my ($p) = @_;
	my @held = map { my $s = stream("127.0.0.1:$p"); $s->write("*2\r\n"); $s } 1 .. 6;
	sleep 0.8;
}

sub wait_log {
	my ($t, $re, $n) = @_;
	my $end = time() + 5;
	sleep 0.05 while time() < $end && log_count($t, $re) < $n;
	return log_count($t, $re);
}

# where the probe cannot be asked, the lever is there
unfinished(port(8099));
is(wait_log($t, qr/"unprobed" opened/, 1), 1, 'quiet spell, no probe: unfinished commands open it');

# with a probe: asked, answered, not opened
my $before = $redis->accepted();
unfinished(port(8098));
is(wait_log($t, qr/"quiet" stays closed: its window would open it, but \S+ answered its probe/,
	1), 1, 'quiet spell, probed: the question answered, and said');
is(opened($t, 'quiet'), 0, 'quiet spell, probed: not opened');
is(ping(port(8098)), "+PONG\r\n", 'quiet spell, probed: sessions pass');
# Redis's own count: six clients, the probe, the PING
cmp_ok($redis->accepted() - $before, '>=', 8, 'quiet spell, probed: the probe reached Redis');

# again and again: each window of silence asks again, at most one probe an interval
unfinished(port(8098)) for 1 .. 3;
cmp_ok(wait_log($t, qr/"quiet" stays closed/, 3), '>=', 2,
	'quiet spell, probed: asked again on a new window');
is(opened($t, 'quiet'), 0, 'quiet spell, probed: no window of silence opened it');
is(ping(port(8098)), "+PONG\r\n", 'quiet spell, probed: sessions still pass');

# a server that hangs: the probe fails too, and the breaker opens on its window
$stopped->stop();
my $start = time();
@held = map { my $s = stream('127.0.0.1:' . port(8100)); $s->write("PING\r\n"); $s } 1 .. 6;
my $opened = wait_log($t, qr/"hung" opened/, 1);
my $took = time() - $start;
undef @held;
is($opened, 1, 'hung, probed: opened');
like($t->read_file('error.log'),
	qr/"hung" opened: failure rate \d+% \(\d+\/\d+\) >= 50% in 10s, then probe failed: timeout/,
	'hung, probed: the window and the probe, both said');
cmp_ok($took, '<', 3, sprintf('hung, probed: opened %.1f s after the first silent session', $took));
# a probe that only connects does not ask: the stopped server's kernel would answer it
@held = map { my $s = stream('127.0.0.1:' . port(8102)); $s->write("PING\r\n"); $s } 1 .. 6;
is(wait_log($t, qr/"connects" opened: failure rate \d+% \(\d+\/\d+\) >= 50% in 10s, retry in/, 1), 1,
	'hung, a connect-only probe: opened on the window, unasked');
undef @held;
$stopped->cont();

###############################################################################

# accepts, reads what it is sent, answers nothing; each connection closes when its client does

sub listener {
	my ($port) = @_;
	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port", Listen => 64,
		ReuseAddr => 1) or die "listener: $!\n";
	my $sel = IO::Select->new($l);
	while (1) {
		for my $fh ($sel->can_read(1)) {
			if ($fh == $l) {
				my $c = $l->accept or next;
				$sel->add($c);
				next;
			}
			my $n = sysread($fh, my $buf, 4096);
			if (!$n) {
				$sel->remove($fh);
				close $fh;
			}
		}
	}
}

###############################################################################
