#!/usr/bin/perl

# Stream breakers with a real Redis (Debian's redis-server, started here) behind nginx's
# stream proxy, two workers sharing the zone.  Stopped (SIGSTOP: the kernel still accepts,
# nothing answers), the breaker opens within min_requests sessions on the first-byte bound,
# the next sessions are refused at once (status 503, one log line per transition, not per
# session), and Redis — counting the connections it accepted itself — sees none of them but
# the probes; let go on, the probes close it and clients get +PONG again.  Killed (connections
# refused): the same on 502s, and a reload during the incident keeps it open.  What a client
# alone decides opens nothing: connecting and saying nothing, sending and closing at once,
# leaving before the bound, idle subscriptions and silent connections that outlive
# proxy_timeout; a client that takes the probe and says nothing holds it no longer than the
# bound.  An upstream with a backup server hands its sessions to the backup while open, and
# its primary sees none of them but the probes.  With active probes (circuit_breaker_probe
# send=PING\r\n expect=+PONG), no client's session is ever let through while open, past
# every cooldown, and the module's own probes alone close it once Redis answers again, even
# when another of the upstream's servers is dead; a probe expecting another answer keeps it
# open; a probe without a breaker, or with no server to probe, fails nginx -t.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Time::HiRes qw/ sleep time /;

use JSON::PP qw//;

use Test::Nginx;
use CB::Response;
use Test::Nginx::Stream qw/ stream /;
use CB::Nginx qw/ stream_conf start reload log_count /;
use CB::Redis;
use CB::Config qw/ conf_fails /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/stream stream_map http/)->plan(59);

# min_requests=4 for short runs; consecutive=20 so that the rate opens them (the run of
# gateway failures has its own tests).  Each scenario has its own upstream over one Redis.
# One expansion: a second would remap the addresses the first wrote.
my $stream = stream_conf(2, <<'EOF');
    log_format s '$server_port $status $upstream_addr $session_time '
                 '$circuit_breaker_state $circuit_breaker_upstream';
    access_log %%TESTDIR%%/stream.log s;

    log_format circuit_breaker_stream_replay
        '$msec $session_time $protocol $status "$circuit_breaker_upstream" "$upstream_addr" '
        '"$upstream_connect_time" "$upstream_first_byte_time" "$upstream_session_time" '
        '"$upstream_bytes_sent" "$upstream_bytes_received" "$circuit_breaker_state"';
    access_log %%TESTDIR%%/replay.log circuit_breaker_stream_replay;

    circuit_breaker_zone cbs:1m;

    upstream redis {
        server 127.0.0.1:%%PORT_8091%%;
        circuit_breaker min_requests=4 consecutive=20 first_byte=300ms open=2s;
    }
    upstream shaped {
        server 127.0.0.1:%%PORT_8091%%;
        circuit_breaker min_requests=4 consecutive=20 first_byte=300ms;
    }
    upstream idle {
        server 127.0.0.1:%%PORT_8091%%;
        circuit_breaker min_requests=4 consecutive=20 first_byte=300ms;
    }

    # reached through a variable: nothing listens on 8095
    upstream byvar {
        server 127.0.0.1:%%PORT_8095%%;
        circuit_breaker min_requests=4 consecutive=20;
    }
    map $server_port $target {
        default byvar;
    }

    # a primary and a backup, each a Redis of its own
    upstream pair {
        server 127.0.0.1:%%PORT_8096%%;
        server 127.0.0.1:%%PORT_8097%% backup;
        circuit_breaker min_requests=4 consecutive=20 first_byte=300ms open=3s jitter=0%;
    }

    # active probes: PING, +PONG expected
    upstream probed {
        server 127.0.0.1:%%PORT_8099%%;
        circuit_breaker min_requests=4 consecutive=20 first_byte=300ms probe_interval=500ms
                        probes=2 jitter=0%;
        circuit_breaker_probe send=PING\r\n expect=+PONG timeout=300ms;
    }

    server { listen 127.0.0.1:%%PORT_8090%%; proxy_pass redis; proxy_timeout 30s; }
    # the same server, probed for an answer it never gives
    upstream wrong {
        server 127.0.0.1:%%PORT_8099%%;
        circuit_breaker min_requests=4 consecutive=20 first_byte=300ms probe_interval=500ms
                        probes=2 jitter=0%;
        circuit_breaker_probe send=PING\r\n expect=+PANG timeout=300ms;
    }

    server { listen 127.0.0.1:%%PORT_8100%%; proxy_pass probed; proxy_timeout 30s; }
    # the same server, and one that refuses every connection
    upstream mixed {
        server 127.0.0.1:%%PORT_8099%%;
        server 127.0.0.1:%%PORT_8095%%;
        circuit_breaker min_requests=4 consecutive=20 first_byte=300ms probe_interval=300ms
                        probes=3 jitter=0%;
        circuit_breaker_probe send=PING\r\n expect=+PONG timeout=300ms;
        # the upstream's own probes, not the pool's ejection (t/63)
        circuit_breaker_eject off;
    }

    server { listen 127.0.0.1:%%PORT_8101%%; proxy_pass wrong; proxy_timeout 30s; }
    server { listen 127.0.0.1:%%PORT_8102%%; proxy_pass mixed; proxy_timeout 30s; }

    # a dry run: nothing listens on 8095
    upstream dry {
        server 127.0.0.1:%%PORT_8095%%;
        circuit_breaker min_requests=4 consecutive=20 dry_run;
    }
    server { listen 127.0.0.1:%%PORT_8104%%; proxy_pass dry; }
    server { listen 127.0.0.1:%%PORT_8098%%; proxy_pass pair; proxy_timeout 30s; }
    server { listen 127.0.0.1:%%PORT_8094%%; proxy_pass $target; }
    server { listen 127.0.0.1:%%PORT_8092%%; proxy_pass shaped; proxy_timeout 5s; }
    server { listen 127.0.0.1:%%PORT_8093%%; proxy_pass idle; proxy_timeout 1s; }
EOF
$t->write_file_expand('nginx.conf', $stream . <<'EOF');
http {
    %%TEST_GLOBALS_HTTP%%

    server {
        listen 127.0.0.1:8080;
        location = /status { circuit_breaker_status; }
    }
}
EOF

my $redis = CB::Redis->start($t, port(8091));
my $primary = CB::Redis->start($t, port(8096));
my $backup = CB::Redis->start($t, port(8097));
my $probed = CB::Redis->start($t, port(8099));
start($t);

###############################################################################

my ($main, $shaped, $idle) = map { port($_) } 8090, 8092, 8093;

# one session: PING, the reply (or '' when refused or silent) and the client's wait in ms
sub ping {
	my ($p, $wait) = @_;
	my $start = time();
	my $s = stream("127.0.0.1:$p");
	my $reply = $s->io("PING\r\n", read => 1, read_timeout => $wait // 3);
	return ($reply, (time() - $start) * 1000);
}

is((ping($main))[0], "+PONG\r\n", 'healthy: +PONG through the breaker');

# what a client alone decides
for (1 .. 8) {
	my $s = stream("127.0.0.1:$shaped");		# says nothing, goes
}
for (1 .. 8) {
	stream("127.0.0.1:$shaped")->write("PING\r\n");	# sends, closes at once
}
for (1 .. 8) {
	my $s = stream("127.0.0.1:$shaped");		# blocks Redis for 5 s, leaves after 0.1
	$s->write("BLPOP cb:none 5\r\n");
	sleep 0.1;
}
sleep 0.5;
is((ping($shaped))[0], "+PONG\r\n", 'client-shaped sessions: still passes');
is(log_count($t, qr/"shaped" opened/), 0, 'client-shaped sessions: never opened');

# six idle subscriptions and six silent connections outlive proxy_timeout (1s)
my @held;
for (1 .. 6) {
	my $s = stream("127.0.0.1:$idle");
	$s->write("SUBSCRIBE cb:news\r\n");
	push @held, $s;
	push @held, stream("127.0.0.1:$idle");
}
my $subscribed = grep { defined $_ && /subscribe/ }
	map { $_->read(read_timeout => 2) } @held[grep { $_ % 2 == 0 } 0 .. $#held];
is($subscribed, 6, 'idle: six subscriptions answered');
sleep 2;
is((ping($idle))[0], "+PONG\r\n", 'idle past proxy_timeout: still passes');
is(log_count($t, qr/"idle" opened/), 0, 'idle past proxy_timeout: never opened');
undef @held;

# an upstream a variable leads to has its breaker too
my $byvar = port(8094);
ping($byvar, 1) for 1 .. 8;
is(join(' ', map { (split)[1] } session_lines($t, 0, $byvar)), '502 502 502 502 503 503 503 503',
	'through a variable: refused connections open it, then sessions are refused');

###############################################################################

# stopped: accepts, never answers

my $before = $redis->accepted();
my $log_before = log_lines($t);
$redis->stop();

my $waited = 0;
while ($waited < 10) {
	my ($reply, $ms) = ping($main, 1);
	last if $ms < 200;			# refused at once (counted below)
	$waited++;
}
ok($waited >= 1 && $waited <= 4, "stopped: opened within min_requests sessions ($waited)");

my @ms;
for (1 .. 25) {
	my ($reply, $ms) = ping($main, 1);
	push @ms, $ms if $reply eq '';
}
is(scalar @ms, 25, 'open: every session refused');
my $median = (sort { $a <=> $b } @ms)[12];
note(sprintf 'open: refused in %.3f ms (median of 25, client-measured)', $median);
ok($median < 20, 'open: refused at once');
is(log_count($t, qr/"redis" opened/), 1, 'open: one log line per transition');

# the http status location shows the stream block's breakers, each zone a page of its own
my $page = eval { JSON::PP->new->decode(CB::Response::body(http_get('/status')) // '') } || {};
my ($cbs) = grep { $_->{zone} eq 'cbs' } @{ $page->{stream} || [] };
my ($shown) = grep { $_->{upstream} eq 'redis' } @{ $cbs->{breakers} || [] };
is($shown && $shown->{state}, 'open', 'status: the stream breaker, open');
is(refused_since($t, $log_before, $main), 26, 'open: status 503 in the access log');
is(scalar(grep { / 503 - \S+ open redis$/ } session_lines($t, $log_before, $main)), 26,
	'open: $circuit_breaker_state open, $circuit_breaker_upstream redis');
like((session_lines($t, 0, $main))[0], qr/ 200 \S+ \S+ closed redis$/,
	'closed: $circuit_breaker_state closed');

$redis->cont();
is(recover($t, $main, 1), "+PONG\r\n", 'let go on: probes close it, +PONG again');
is($redis->accepted() - $before, sent_since($t, $log_before, $main),
	'stopped: Redis accepted exactly the sessions nginx sent (none while open)');

###############################################################################

# killed: connections refused

$log_before = log_lines($t);
$redis->kill();
$waited = 0;
for (1 .. 10) {
	my ($reply, $ms) = ping($main, 1);
	last if log_count($t, qr/"redis" opened/) == 2;
	$waited++;
}
ok($waited < 4, "killed: opened within min_requests sessions ($waited)");
is((ping($main, 1))[0], '', 'killed: refused');

# a reload during the incident keeps it open: the new workers refuse too
ok(reload($t), 'reloaded while open');
is((ping($main, 1))[0], '', 'after the reload: still refused');
is(log_count($t, qr/"redis" closed/), 1, 'the reload closed nothing');

$redis->restart();

# past the cooldown (2 s, jitter 20 %), a client that says nothing takes the probe; its
# bound (300 ms) gives it back, and the next sessions probe
sleep 2.6;
my $holder = stream("127.0.0.1:$main");
my $end = time() + 5;
sleep 0.05 while time() < $end && log_count($t, qr/"redis" half-opened/) < 2;
is(log_count($t, qr/"redis" half-opened/), 2, 'a silent client takes the probe');
sleep 0.5;
is(recover($t, $main, 2), "+PONG\r\n", 'started again: probes close it');
is(log_count($t, qr/"redis" closed/), 2, 'closed while the silent client still holds its session');
undef $holder;

###############################################################################

# a backup server: while open, sessions go to it, and the primary sees none but the probes

my $pair = port(8098);
my ($pa, $ba) = map { '127.0.0.1:' . port($_) } 8096, 8097;
is((ping($pair))[0], "+PONG\r\n", 'backup: the primary answers');
my ($p0, $b0) = ($primary->accepted(), $backup->accepted());
$log_before = log_lines($t);
$primary->stop();
$waited = 0;
for (1 .. 10) {
	last if log_count($t, qr/"pair" opened/) == 1;
	ping($pair, 1);
	$waited++;
}
ok($waited >= 1 && $waited <= 4, "backup: the primary stopped, opened within min_requests ($waited)");
my @replies = map { (ping($pair, 2))[0] } 1 .. 10;
is(scalar(grep { $_ eq "+PONG\r\n" } @replies), 10, 'open: every session answered, by the backup');
# a session's line is written when nginx sees it end, in any order: wait for all ten
$end = time() + 5;
sleep 0.05 while time() < $end
	&& (grep { / 200 \Q$ba\E / } session_lines($t, $log_before, $pair)) < 10;
my @open = session_lines($t, $log_before, $pair);
is(scalar(grep { / 200 \Q$ba\E / } @open), 10, 'open: the log says the backup served them');
is(scalar(grep { / 200 \Q$ba\E \S+ backup pair$/ } @open), 10,
	'open: $circuit_breaker_state backup');
is(scalar(grep { / 503 / } @open), 0, 'open: none refused');
$primary->cont();
is($primary->accepted() - $p0, $waited, 'open: the primary saw only the sessions that opened it');
is($backup->accepted() - $b0, 10, 'open: the backup saw the ten');
is(recover_pair($t, $pair), "+PONG\r\n", 'let go on: probes to the primary close it');
my $pn = $primary->accepted();
is((ping($pair))[0], "+PONG\r\n", 'closed: answered');
is($primary->accepted() - $pn, 1, 'closed: by the primary again');


###############################################################################

# active probes: while open, no client's session reaches the server, however long it stays
# open; the module's probes do, and close it once Redis answers

my $pp = port(8100);
my $pr = '127.0.0.1:' . port(8099);
is((ping($pp))[0], "+PONG\r\n", 'active probes: healthy, +PONG');
my $q0 = $probed->accepted();
$log_before = log_lines($t);
$probed->stop();
$waited = 0;
for (1 .. 10) {
	last if log_count($t, qr/"probed" opened/) == 1;
	ping($pp, 1);
	$waited++;
}
ok($waited >= 1 && $waited <= 4, "active probes: stopped, opened within min_requests ($waited)");
my $pw = port(8101);
ping($pw, 1) for 1 .. 4;
is(log_count($t, qr/"wrong" opened/), 1, 'active probes: the other upstream of the server, open');
ping(port(8102), 1) for 1 .. 6;
is(log_count($t, qr/"mixed" opened/), 1, 'active probes: the upstream with a dead server, open');
# the sessions that opened it are logged when their clients leave
$end = time() + 5;
sleep 0.05 while time() < $end && session_lines($t, $log_before, $pp) < $waited;
my $opened_at = log_lines($t);
# three seconds open: six probe intervals, each of which would have let a client through
my ($tried, $answered) = (0, 0);
my $until = time() + 3;
while (time() < $until) {
	$tried++;
	$answered++ if (ping($pp, 1))[0] ne '';
	sleep 0.1;
}
is($answered, 0, "open: none of $tried clients' sessions answered");
$end = time() + 5;
sleep 0.05 while time() < $end && session_lines($t, $opened_at, $pp) < $tried;
is(scalar(grep { !/ 503 - / } session_lines($t, $opened_at, $pp)), 0,
	'open: every client session refused, none sent to the server');
cmp_ok(log_count($t, qr/"probed" probe failed: timeout to \Q$pr\E/), '>=', 2,
	'open: the module probed the stopped server itself');
is(log_count($t, qr/"probed" half-opened/), 0, 'open: no client took a probe');
$probed->cont();
cmp_ok($probed->accepted() - $q0 - $waited, '>=', 2,
	'open: Redis accepted the probes, and no client session');
# nothing but the probes: no client connects while it recovers
$end = time() + 10;
sleep 0.1 while time() < $end && log_count($t, qr/"probed" closed/) < 1;
is(log_count($t, qr/"probed" closed/), 1, 'let go on: the probes alone closed it');
is((ping($pp))[0], "+PONG\r\n", 'closed: +PONG through it');
$end = time() + 10;
sleep 0.1 while time() < $end && log_count($t, qr/"mixed" closed/) < 1;
is(log_count($t, qr/"mixed" closed/), 1, 'a dead server beside a live one: the probes closed it');
cmp_ok(log_count($t, qr/"wrong" probe failed: invalid response to \Q$pr\E/), '>=', 1,
	'probed for +PANG: every answer refused');
is((ping($pw, 1))[0] . log_count($t, qr/"wrong" (?:half-opened|closed)/), '0',
	'probed for +PANG: still open, and refusing');

###############################################################################

# a dry run's breaker that would refuse: the session goes on, and the log says open

my $dp = port(8104);
my $dry_before = log_lines($t);
ping($dp, 1) for 1 .. 6;
is(log_count($t, qr/"dry" opened/), 1, 'dry run: it would have opened');
$end = time() + 5;
sleep 0.05 while time() < $end && session_lines($t, $dry_before, $dp) < 6;
like((session_lines($t, $dry_before, $dp))[-1], qr/ 502 \S+ \S+ open dry$/,
	'dry run: the session went on, $circuit_breaker_state open');

###############################################################################

# cb-replay reads this configuration (stream breakers, first_byte=, a stream probe, and an
# http block) as nginx -T prints it, passing over the stream upstreams

my $d = $t->testdir();
my $root = "$FindBin::Bin/..";
my $replay = $ENV{TEST_CB_REPLAY} // "$root/target/release/cb-replay";
my $conf = `$Test::Nginx::NGINX -p $d/ -c nginx.conf -e error-t.log -T 2>/dev/null`;
$t->write_file('nginx-T.conf', $conf);
$t->write_file('empty.log', '');
my $out = `$replay --config $d/nginx-T.conf --breaker min_requests=5 $d/empty.log 2>&1`;
is($? >> 8, 0, 'cb-replay --config of nginx -T with stream breakers') or diag($out);

# and replays this run's own stream log in circuit_breaker_stream_replay, by these breakers:
# every line reads; the upstreams the live breakers opened open, the sessions a client
# shaped and the idle subscriptions open nothing, as they did live
$out = `$replay --config $d/nginx-T.conf --json $d/replay.log 2>&1`;
my $r = eval { JSON::PP::decode_json($out) } // {};
my $b = ($r->{settings} // [{}])->[0]{breakers} // {};
is($r->{lines}{unparseable} // -1, 0, 'cb-replay of the live stream log: every line reads')
	or diag($out);
my $live = join ' ', map { "$_:" . log_count($t, qr/"$_" opened/) } qw/redis byvar/;
is(join(' ', map { "$_:" . ($b->{"stream $_"}{opens} // 'none') } qw/redis byvar/), $live,
	'cb-replay: the stopped, killed and unreachable servers open as often as they did live');
is(join(' ', map { $b->{"stream $_"}{opens} // 'none' } qw/shaped idle/), '0 0',
	'cb-replay: what clients shaped, and idle subscriptions, open nothing');

###############################################################################

# what nginx -t refuses

my $probe = 'circuit_breaker_probe send=PING\r\n expect=+PONG;';
conf_fails($t, 'a probe without a breaker', stream_conf(1, <<"EOF"), 'upstream lone {',
    upstream lone {
        server 127.0.0.1:%%PORT_8099%%;
        $probe
    }
    server { listen 127.0.0.1:%%PORT_8103%%; proxy_pass lone; }
EOF
	'"circuit_breaker_probe" requires "circuit_breaker" in upstream "lone"');
conf_fails($t, 'a probe with no server to probe', stream_conf(1, <<"EOF"), 'upstream none {',
    upstream none {
        server 127.0.0.1:%%PORT_8099%% down;
        circuit_breaker;
        $probe
    }
    server { listen 127.0.0.1:%%PORT_8103%%; proxy_pass none; }
EOF
	'"circuit_breaker_probe" has no server to probe (every one is down, a backup, or '
	. 'resolved at run time) in upstream "none"');
conf_fails($t, 'a probe\'s bad byte', stream_conf(1, <<'EOF'), 'send=',
    upstream bad {
        server 127.0.0.1:%%PORT_8099%%;
        circuit_breaker;
        circuit_breaker_probe send=\x4;
    }
    server { listen 127.0.0.1:%%PORT_8103%%; proxy_pass bad; }
EOF
	'invalid value "send=\\x4" in "circuit_breaker_probe" directive, \\x must be followed '
	. 'by two hex digits');

###############################################################################

# sessions every 0.2 s until the breaker's Nth "closed" line (20 s at most); the reply after

sub recover {
	my ($t, $p, $n) = @_;
	my $end = time() + 20;
	while (time() < $end && log_count($t, qr/"redis" closed/) < $n) {
		ping($p, 1);
		sleep 0.2;
	}
	return (ping($p, 1))[0];
}

sub recover_pair {
	my ($t, $p) = @_;
	my $end = time() + 20;
	while (time() < $end && log_count($t, qr/"pair" closed/) < 1) {
		ping($p, 1);
		sleep 0.2;
	}
	return (ping($p, 1))[0];
}

sub log_lines {
	my ($t) = @_;
	my $log = eval { $t->read_file('stream.log') } // '';
	return scalar(() = $log =~ /\n/g);
}

sub session_lines {
	my ($t, $from, $port) = @_;
	my @l = split /\n/, (eval { $t->read_file('stream.log') } // '');
	return grep { /^$port / } @l[$from .. $#l];
}

sub refused_since {
	my ($t, $from, $port) = @_;
	return scalar grep { / 503 - / } session_lines($t, $from, $port);
}

sub sent_since {
	my ($t, $from, $port) = @_;
	return scalar grep { !/ 503 - / } session_lines($t, $from, $port);
}

###############################################################################
