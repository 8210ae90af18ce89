#!/usr/bin/perl

# A stream breaker over UDP: an echo server (a small DNS-like origin here, one datagram back
# per datagram) that stops answering opens it — nginx's 502 when the expected response does
# not come within proxy_timeout — and while open no datagram reaches the origin (it counts
# what it receives), the sessions' status is 503; answering again, the probes close it.  A
# send-only UDP upstream (syslog, statsd: nginx's default proxy_responses expects no answer)
# is never judged by silence.  Datagrams a healthy server drops by its protocol cannot open
# it while the server answers others, nor fail its probe: a UDP session's silence is judged
# as a TCP one's past first_byte.  With a UDP probe (circuit_breaker_probe udp: a datagram
# the module sends, and the first one back), no client's datagram is ever the probe: a client
# that sprays datagrams the server drops, from a new port each time, cannot hold the
# recovery, and the module's own probes close the breaker; once closed, the spray's silence
# asks the probe before it opens anything, and the probe, answered, keeps it closed.  A server with nothing on its port
# (each datagram refused by its host, which nginx takes for an answer) opens it, and the
# probes then fail, and it stays open.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use IO::Socket::INET;
use Time::HiRes qw/ sleep time /;

use Test::Nginx;
use Test::Nginx::Stream qw/ dgram /;
use CB::Nginx qw/ stream_conf start log_count /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/stream udp/)->plan(25);

$t->write_file_expand('nginx.conf', stream_conf(2, <<'EOF'));
    log_format s '$status $upstream_addr';
    access_log %%TESTDIR%%/stream.log s;

    upstream dns {
        server 127.0.0.1:%%PORT_8981_UDP%%;
        circuit_breaker min_requests=4 consecutive=20 open=5s;
    }

    server {
        listen 127.0.0.1:%%PORT_8980_UDP%% udp;
        proxy_pass dns;
        proxy_responses 1;
        proxy_timeout 300ms;
    }

    # a server that drops what its protocol ignores ("junk"), beside one that answers
    upstream picky {
        server 127.0.0.1:%%PORT_8985_UDP%%;
        circuit_breaker min_requests=4 consecutive=20 open=1s;
    }
    server {
        listen 127.0.0.1:%%PORT_8984_UDP%% udp;
        proxy_pass picky; proxy_responses 1; proxy_timeout 300ms;
    }

    # recovered by the module's own UDP probes
    upstream probed {
        server 127.0.0.1:%%PORT_8987_UDP%%;
        circuit_breaker min_requests=4 consecutive=20 open=1s probe_interval=200ms;
        circuit_breaker_probe udp send=ping expect=ping timeout=300ms;
    }
    server {
        listen 127.0.0.1:%%PORT_8986_UDP%% udp;
        proxy_pass probed; proxy_responses 1; proxy_timeout 300ms;
    }

    # nothing on the upstream's port: every datagram refused
    upstream gone {
        server 127.0.0.1:%%PORT_8989_UDP%%;
        circuit_breaker min_requests=4 consecutive=20 open=1s probe_interval=200ms;
        circuit_breaker_probe udp send=ping expect=ping timeout=300ms;
    }
    server {
        listen 127.0.0.1:%%PORT_8988_UDP%% udp;
        proxy_pass gone; proxy_responses 1; proxy_timeout 300ms;
    }

    upstream sink {
        server 127.0.0.1:%%PORT_8983_UDP%%;
        circuit_breaker min_requests=4 consecutive=20 first_byte=100ms;
    }

    server {
        listen 127.0.0.1:%%PORT_8982_UDP%% udp;
        proxy_pass sink;
        proxy_timeout 300ms;
    }
EOF

my $dir = $t->testdir();
$t->run_daemon(\&echo, port(8981), "$dir/mute", "$dir/received");
$t->write_file('sink-mute', '');
$t->run_daemon(\&echo, port(8983), "$dir/sink-mute", "$dir/sink-received");
$t->run_daemon(\&echo, port(8985), "$dir/picky-mute", "$dir/picky-received", 'junk');
$t->write_file('probed-mute', '');
$t->run_daemon(\&echo, port(8987), "$dir/probed-mute", "$dir/probed-received", 'junk');
start($t);
$t->waitforfile("$dir/received") or die "no echo server\n";
$t->waitforfile("$dir/sink-received") or die "no sink\n";
$t->waitforfile("$dir/picky-received") or die "no picky server\n";
$t->waitforfile("$dir/probed-received") or die "no probed server\n";

###############################################################################

my $front = port(8980);

sub ask {
	my ($wait) = @_;
	my $d = dgram("127.0.0.1:$front");
	return $d->io('ping', read_timeout => $wait // 0.6) // '';
}

sub received {
	return -s "$dir/received" || 0;
}

is(ask(), 'ping', 'answering: echoed through the breaker');

# a send-only upstream: eight datagrams, none answered, none expected
for (1 .. 8) {
	dgram('127.0.0.1:' . port(8982))->write('metric:1|c');
}
sleep 0.8;
is(-s "$dir/sink-received", 8, 'send-only: every datagram delivered');
is(log_count($t, qr/"sink" opened/), 0, 'send-only: never judged by silence');

$t->write_file('mute', '');
my $sent = 0;
while ($sent < 10 && log_count($t, qr/"dns" opened/) == 0) {
	ask();
	$sent++;
}
ok($sent >= 1 && $sent <= 4, "silent: opened within min_requests sessions ($sent)");

# a refused datagram gets no answer: a short wait each, well within the cooldown
my $got = received();
ask(0.05) for 1 .. 10;
is(received(), $got, 'open: no datagram reached the origin');
my $refused = () = $t->read_file('stream.log') =~ /^503 -$/mg;  # the sink logs 200s
ok($refused >= 10, "open: status 503 ($refused)");

unlink "$dir/mute";
my $end = time() + 20;
while (time() < $end && log_count($t, qr/"dns" closed/) == 0) {
	ask();
	sleep 0.2;
}
is(log_count($t, qr/"dns" closed/), 1, 'answering again: closed by probes');
is(ask(), 'ping', 'answering again: echoed');
is(log_count($t, qr/"dns" opened/), 1, 'one opened line for the whole episode');

# datagrams the server drops (two to each answered one, each from a port of its own): their
# sessions time out after others were answered
my $picky = port(8984);
my $good = 0;
for (1 .. 5) {
	dgram("127.0.0.1:$picky")->write('junk') for 1 .. 2;
	$good++ if (dgram("127.0.0.1:$picky")->io('ping', read_timeout => 0.6) // '') eq 'ping';
	sleep 0.4;
}
is($good, 5, 'dropped datagrams beside answered ones: answered');
is(log_count($t, qr/"picky" opened/), 0, 'dropped datagrams beside answered ones: never opened');

# alone, they open it (nobody else to answer: a quiet spell looks like a dead server); the
# probe taken by a dropped datagram is no verdict, and the next answered one closes it
for (1 .. 6) {
	dgram("127.0.0.1:$picky")->write('junk');
	sleep 0.05;
}
$end = time() + 3;
sleep 0.1 while time() < $end && log_count($t, qr/"picky" opened/) == 0;
is(log_count($t, qr/"picky" opened/), 1, 'dropped datagrams alone: opened');
sleep 1.2;
dgram("127.0.0.1:$picky")->write('junk');
sleep 0.5;
$end = time() + 10;
while (time() < $end && log_count($t, qr/"picky" closed/) == 0) {
	dgram("127.0.0.1:$picky")->io('ping', read_timeout => 0.6);
	sleep 0.1;
}
ok(log_count($t, qr/"picky" closed/) == 1 && log_count($t, qr/"picky" (re)?opened/) == 1,
	'a dropped datagram as the probe: no verdict, closed by the next');

# The UDP probe.  The server is mute from the start: its breaker opens on the clients'
# silent sessions; then a client sprays datagrams the server drops, each from a port of its
# own, every 100 ms, and none is the probe: while the server stays mute the breaker stays
# open and no client's datagram reaches it (the module's probes do, each a "ping"); once it
# answers again the probes close it, the spray going on

# min_requests sessions, then the opened line (a silent one is judged at proxy_timeout,
# 300 ms; a refused one as silence at first_byte, 3 s)
sub opened_by {
	my ($t, $port, $name) = @_;
	dgram("127.0.0.1:$port")->io('ping', read_timeout => 0.4) for 1 .. 4;
	my $end = time() + 10;
	sleep 0.1 while time() < $end && log_count($t, qr/"$name" opened/) == 0;
	return log_count($t, qr/"$name" opened/);
}

my $probed = port(8986);
is(opened_by($t, $probed, 'probed'), 1, 'udp probe: opened on silence, by min_requests sessions');

my $spray = fork() // die "fork: $!\n";
if ($spray == 0) {
	my $end = time() + 20;
	while (time() < $end && getppid() > 1) {
		dgram("127.0.0.1:$probed")->write('junk');
		sleep 0.1;
	}
	exit 0;
}

my $refused_before = refused_count($t);
sleep 1.5;
my $mute = probed_received();
sleep 1.5;
my $more = probed_received();
my $sprayed = refused_count($t) - $refused_before;
is(log_count($t, qr/"probed" closed/), 0, 'udp probe: mute, the breaker stays open');
is(($mute =~ tr/j//) . ' ' . ($more =~ tr/j//), '0 0',
	"udp probe: no sprayed datagram reached the server ($sprayed refused)");
cmp_ok($sprayed, '>=', 10, 'udp probe: the spray went on, each refused at once');
ok(($more =~ tr/p//) > ($mute =~ tr/p//), 'udp probe: its probes did');
like($t->read_file('error.log'), qr/"probed" probe failed: timeout to 127\.0\.0\.1:\d+/,
	'udp probe: each failed, unanswered');

unlink "$dir/probed-mute";
my $back = time();
$end = $back + 10;
sleep 0.1 while time() < $end && log_count($t, qr/"probed" closed/) == 0;
is(log_count($t, qr/"probed" closed/), 1, sprintf('udp probe: answering again, closed by the '
	. 'probes in %.1f s, the spray going on', time() - $back));
# The spray goes on after the close, in a quiet spell: its silence would open the breaker
# again, but the module's probe is asked first and answered, so nothing opens.
$end = time() + 10;
sleep 0.1 while time() < $end && log_count($t, qr/"probed" stays closed/) < 2;
cmp_ok(log_count($t, qr/"probed" stays closed/), '>=', 2,
	'udp probe: the spray after the close, its silence asked the probe, answered');
is(log_count($t, qr/"probed" opened/), 1, 'udp probe: the spray opened it no more');
kill 'TERM', $spray;
waitpid $spray, 0;
my $through = '';
$end = time() + 10;
while (time() < $end && $through ne 'ping') {
	$through = dgram("127.0.0.1:$probed")->io('ping', read_timeout => 0.6) // '';
}
is($through, 'ping', 'udp probe: answered through it, the spray over');

# To a port with nothing on it: every datagram is refused (the host's ICMP error, which nginx
# takes for a response, and ends the session as done), judged as silence at first_byte (a
# refusal comes at once, before a live server slow to answer others has), the module's
# probes' too

is(opened_by($t, port(8988), 'gone'), 1, 'refused: opened by min_requests sessions');
$end = time() + 3;
sleep 0.1 while time() < $end && log_count($t, qr/"gone" probe failed/) < 3;
ok(log_count($t, qr/"gone" probe failed: error to 127\.0\.0\.1:\d+/) >= 3
	&& log_count($t, qr/"gone" closed/) == 0,
	'udp probe: refused, each probe failed, still open');

###############################################################################

# sessions the breakers refused (the stream log's "503 -" lines)
sub refused_count {
	my ($t) = @_;
	return scalar(() = $t->read_file('stream.log') =~ /^503 -$/mg);
}

# what the server behind "probed" received: a datagram's first byte each
sub probed_received {
	open my $fh, '<', "$dir/probed-received" or return '';
	local $/;
	return <$fh> // '';
}

# one datagram back per datagram, unless MUTE exists or it is DROP; the datagram's first
# byte appended to RECEIVED per datagram received

sub echo {
	my ($port, $mute, $received, $drop) = @_;
	my $s = IO::Socket::INET->new(Proto => 'udp', LocalAddr => "127.0.0.1:$port")
		or die "echo: $!\n";
	open my $fh, '>', $received or die "echo: $!\n";
	$fh->autoflush(1);
	while (1) {
		my $from = $s->recv(my $buf, 512) // next;
		print $fh substr($buf . '.', 0, 1);
		next if defined $drop && $buf eq $drop;
		$s->send($buf, 0, $from) unless -e $mute;
	}
}

###############################################################################
