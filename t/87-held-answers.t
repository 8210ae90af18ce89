#!/usr/bin/perl

# A client that holds an answer up until the origin gives up on it opens no breaker: behind
# proxy_buffering off nginx reads the origin only as fast as the client takes the answer, and
# an origin with its own write deadline (CB::Origin's write_timeout=, 1 s here) closes the
# connection mid-answer.  nginx sees that close only once the client has taken what it had
# ("upstream prematurely closed connection"), when the client no longer holds anything up,
# so the module remembers how long the client kept nginx's writes waiting, and judges an
# answer held a second or more by its header.  Default breakers (20 requests at 50 %, or 10
# gateway failures in a row): 24 HTTP/1.1 clients that read nothing of a 16 MB answer until
# the origin gave up on all of them, then 1.5 s more, then read it all; 24 HTTP/2 streams
# whose windows stay 0 as long; 24 HTTP/2 streams with the largest windows on a connection
# whose socket is not read as long; the same HTTP/1.1 readers behind a spool bounded at 64 KB,
# over TLS, and against a breaker keyed by a header, where nginx buffers the answer in memory
# only, and where it does not buffer it; and a half-open probe so held, which is only freed.  The controls: 24 answers the
# origin cuts short while their clients read at once open the same kinds of breakers.
# About 20 s.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use IO::Socket::INET;
use Socket qw/ SOL_SOCKET SO_RCVBUF inet_aton pack_sockaddr_in /;
use Time::HiRes qw/ sleep time /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start self_signed /;
use CB::Origin;
use CB::Response qw/ status /;
use CB::Status qw/ breaker_at /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy http_v2 http_ssl/)->plan(23);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    upstream held { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream h2   { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream tcp  { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream tls  { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream sp   { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }
    upstream hp {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=3 failure_rate=50% open=1s jitter=0% probes=1;
    }
    upstream cut  { server 127.0.0.1:%%PORT_8081%%; circuit_breaker; }

    server {
        listen       127.0.0.1:8080;
        http2        on;
        server_name  localhost;

        proxy_buffering off;
        proxy_http_version 1.1;
        proxy_set_header Connection "";

        location /held/ { proxy_pass http://held; }
        location /h2/   { proxy_pass http://h2; }
        location /tcp/  { proxy_pass http://tcp; }
        location /sp/   {
            proxy_buffering on;
            proxy_max_temp_file_size 64k;
            proxy_pass http://sp;
        }
        location /hp/   {
            proxy_buffering on;
            proxy_max_temp_file_size 0;
            proxy_pass http://hp;
        }
        location /cut/  { proxy_pass http://cut; }
        location /ku/ {
            circuit_breaker_key $http_x_tenant;
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }
        location /k/ {
            proxy_buffering on;
            proxy_max_temp_file_size 0;
            circuit_breaker_key $http_x_tenant;
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }

        location = /status { circuit_breaker_status; }
    }

    server {
        listen       127.0.0.1:8443 ssl;
        server_name  localhost;

        ssl_certificate     localhost.crt;
        ssl_certificate_key localhost.key;

        proxy_buffering off;
        proxy_http_version 1.1;
        proxy_set_header Connection "";

        location /tls/ { proxy_pass http://tls; }
    }
EOF

self_signed($t, 'localhost');

my $hits = start($t, 8081);

###############################################################################

sub b { breaker_at("/status?upstream=$_[0]") }

# the breaker's state, failures and requests
sub summary {
	my $b = b($_[0]);
	return join ' ', $b->{state} // 'none', $b->{totals}{failures} // -1,
		$b->{totals}{requests} // -1;
}

# until the origin has given up on (or ended) N requests whose path starts with PREFIX
sub gave_up {
	my ($n, $prefix) = @_;
	my $end = time() + 30;
	# (a list assigned in scalar context counts it, none before the times file exists)
	sleep 0.1 while (() = CB::Origin::timings($hits, qr!^\Q$prefix\E!)) < $n && time() < $end;
}

# N clients of PATH (PATH1, PATH2, ...) with 4 KB receive buffers that read nothing until the
# origin gave up on all of them, then SECONDS more, then read to the end: how many got the
# answer's header
sub held {
	my ($n, $path, $seconds, $extra) = @_;
	my @s = map {
		my $s = IO::Socket::INET->new(Proto => 'tcp') or die "socket: $!\n";
		setsockopt($s, SOL_SOCKET, SO_RCVBUF, 4096);
		$s->connect(pack_sockaddr_in(port(8080), inet_aton('127.0.0.1')))
			or die "connect: $!\n";
		$s->autoflush(1);
		print $s "GET $path$_ HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
			. ($extra // '') . "\r\n";
		$s;
	} 1 .. $n;
	gave_up($n, $path =~ s/\?.*//r);
	sleep $seconds;
	my ($answered, $bytes) = (0, 0);
	for my $s (@s) {
		my ($all, $buf) = ('', '');
		my $end = time() + 20;
		while (time() < $end) {
			my $got = sysread($s, $buf, 1 << 16);
			last unless $got;
			$all .= $buf if length $all < 64;
			$bytes += $got;
		}
		$answered++ if $all =~ m!^HTTP/1.1 200!;
		close $s;
	}
	return "$answered answered";
}

my $big = 'size=16000000&write_timeout=1000';

###############################################################################

# HTTP/1.1: the origin gives up on each answer while its client reads nothing; each is
# judged by its header, a success

my $said = held(24, "/held/r?$big&n=", 1.5);
is(CB::Origin::hits($hits, qr!^/held/!), 24, "held: each reached the origin ($said)");
is(summary('held'), 'closed 0 24', "held: answers the clients held up are judged by their header ($said)");
is(status(http_get('/held/after')), 200, 'held: answering after');

# HTTP/2: stream windows of 0

my $o = $t->testdir() . '/origin-8081.hits.times';
my $lev = "/usr/bin/python3 $FindBin::Bin/lib/CB/levers.py";
my $h2 = `$lev stall_get ${\ port(8080)} '/h2/r?$big&n=' 24 1.5 $o /h2/r`;
chomp $h2;
like($h2, qr/^ended 24 of 24/, "h2: every stream ended ($h2)");
is(CB::Origin::hits($hits, qr!^/h2/!), 24, 'h2: each reached the origin');
is(summary('h2'), 'closed 0 24', "h2: answers the streams held up are judged by their header ($h2)");

# HTTP/2: windows as large as can be, the connection's socket not read

my $tcp = `$lev stall_tcp_get ${\ port(8080)} '/tcp/r?$big&n=' 24 1.5 $o /tcp/r`;
chomp $tcp;
like($tcp, qr/^ended 24 of 24/, "tcp: every stream ended ($tcp)");
is(CB::Origin::hits($hits, qr!^/tcp/!), 24, 'tcp: each reached the origin');
is(summary('tcp'), 'closed 0 24', "tcp: answers held up behind the connection are judged by their header ($tcp)");

# A spool bounded at 64 KB: nginx stops reading the origin once the spool is full

$said = held(24, "/sp/r?$big&n=", 1.5);
is(CB::Origin::hits($hits, qr!^/sp/!), 24, "spool: each reached the origin ($said)");
is(summary('sp'), 'closed 0 24', "spool: answers held past the spool are judged by their header ($said)");

# The half-open probe, held up until the origin gives up on it (answers buffered in memory
# only, so that it goes at the client's pace): only freed, neither a good probe nor a failed
# one; the next request is the probe

http_get("/hp/t$_?status=500") for 1 .. 3;
my $tripped = b('hp')->{state} // 'none';
sleep 1.2;
$said = held(1, "/hp/probe?$big&n=", 1.5);
my $after = b('hp')->{state} // 'none';
my $next = status(http_get('/hp/next'));
is("$tripped $after $next " . (b('hp')->{state} // 'none'), 'open half_open 200 closed',
	"probe: a held probe is only freed, the next request probes ($said)");

# HTTP/1.1 over TLS, where what the client holds up may sit in TLS's own buffer

my $tls = `$lev held_tls ${\ port(8443)} '/tls/r?$big&n=' 24 1.5 $o /tls/r`;
chomp $tls;
is(CB::Origin::hits($hits, qr!^/tls/!), 24, "tls: each reached the origin ($tls)");
is(summary('tls'), 'closed 0 24', "tls: answers held up over TLS are judged by their header ($tls)");

# A breaker keyed by a header, judged at the log phase, where nginx buffers the answer in
# memory only (proxy_max_temp_file_size 0), so that it reads the origin at the client's pace
# once its buffers are full: a key that failed would be promoted, and listed

$said = held(24, "/k/r?$big&n=", 1.5, "X-Tenant: slow\r\n");
is(CB::Origin::hits($hits, qr!^/k/!), 24, "keyed: each reached the origin ($said)");
unlike(http_get('/status'), qr/"route":"slow"/, "keyed: no failure to promote the key for ($said)");

# The same key behind proxy_buffering off, where what nginx has of an answer cut short is
# only what is left of its length (t/88-keyed-cut.t): held up, it is judged by its header too

$said = held(24, "/ku/r?$big&n=", 1.5, "X-Tenant: uslow\r\n");
is(CB::Origin::hits($hits, qr!^/ku/!), 24, "keyed, unbuffered: each reached the origin ($said)");
unlike(http_get('/status'), qr/"route":"uslow"/, "keyed, unbuffered: no failure to promote the key for ($said)");

# The controls: the origin cuts 24 answers short (1 MB announced, 500 KB sent) while their
# clients read at once; the same ending counts when no client held it up

my @cut = map { status(http_get("/cut/c$_?size=1000000&truncate=500000")) // 'none' } 1 .. 24;
is(CB::Origin::hits($hits, qr!^/cut/c!), 10, "cut: the breaker let through 10 ( @cut )");
is(summary('cut'), 'open 10 10', 'cut: answers cut short open the breaker, 10 in a row');
is(status(http_get('/cut/after')), 503, 'cut: refused after');

my @kcut = map {
	status(http("GET /k/c$_?size=1000000&truncate=500000 HTTP/1.0\r\nHost: localhost\r\n"
		. "X-Tenant: cutter\r\n\r\n")) // 'none'
} 1 .. 24;
like(join(' ', @kcut), qr/ 503$/, "keyed cut: answers cut short open the key ( @kcut )");
like(http_get('/status'), qr/"route":"cutter"/, 'keyed cut: the key is promoted');

###############################################################################
