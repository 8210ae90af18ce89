#!/usr/bin/perl

# Keys counted without the zone's lock: a compact key's requests pass on its
# mark, and its successes are counted in the mark while the mark is of their
# second, by whichever worker serves them.  Two workers, one connection per
# request (either worker takes it): a key with min_requests=10 and
# failure_rate=50% that had 6 successes, spread over two seconds, opens on
# exactly its 6th failure (6 of 12) — no success lost, none counted twice —
# and another key whose successes all came in one second does the same.  A
# failure is counted before its answer leaves nginx: the request after a key's
# 10th failure, whichever worker takes it, is refused (forty keys in a row; the
# origin's connections are kept alive, which is when the log phase comes last).

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use IO::Socket::INET;
use Time::HiRes qw/ sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT /;
use CB::Nginx qw/ conf start /;
use CB::Origin;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(9);

$t->write_file_expand('nginx.conf', conf(2, <<'EOF'));
    circuit_breaker_zone cb:4m;

    upstream origin {
        server 127.0.0.1:8081;
        keepalive 8;
    }

    # an origin that is nginx itself: its connections kept, its answers at once
    upstream self {
        server 127.0.0.1:8082;
        keepalive 8;
    }

    server {
        listen       127.0.0.1:8082;
        server_name  localhost;
        keepalive_requests 100000;

        location / {
            return 500;
        }
    }

    server {
        listen       127.0.0.1:8080 reuseport;
        server_name  localhost;

        location /k/ {
            circuit_breaker_key $arg_k window=60s min_requests=10 failure_rate=50%
                                open=1h jitter=0%;
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }

        location /kk/ {
            circuit_breaker_key $arg_k window=60s min_requests=10 failure_rate=50%
                                open=1h jitter=0%;
            proxy_pass http://self;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
EOF

my ($hits) = start($t, 8081);

# KEY's statuses for N requests of STATUS, one connection each
sub send_key {
	my ($key, $status, $n) = @_;
	return map { http_get("/k/x?k=$key&status=$status") =~ m!^HTTP/1.1 (\d+)! ? $1 : 0 }
		1 .. $n;
}

# the failures KEY takes until it answers 503 (at most 20), as statuses
sub fail_until_open {
	my ($key) = @_;
	my @st;
	for (1 .. 20) {
		my ($st) = send_key($key, 500, 1);
		push @st, $st;
		last if $st == 503;
	}
	return @st;
}

###############################################################################

# successes in two seconds: the mark's count of the first is taken in when the
# second's first success takes the lock

is(join(' ', send_key('a', 200, 3)), '200 200 200', 'a: three successes');
sleep 1.1;
is(join(' ', send_key('a', 200, 3)), '200 200 200', 'a: three more, a second later');
my @st = fail_until_open('a');
is(scalar(@st), 7, 'a: opened on its 6th failure (6 of 12)')
	or diag("statuses: @st");
is(CB::Origin::hits($hits), 12, 'a: 12 requests at the origin');
is($st[-1], 503, 'a: then 503');

# all successes in one second: taken in when the first failure promotes the key

CB::Origin::clear($hits);
is(join(' ', send_key('b', 200, 6)), '200 200 200 200 200 200', 'b: six successes');
@st = fail_until_open('b');
is(scalar(@st), 7, 'b: opened on its 6th failure (6 of 12)')
	or diag("statuses: @st");
is(CB::Origin::hits($hits), 12, 'b: 12 requests at the origin');

# the failure that opens a key is counted at its answer's header: the next
# request, on a new connection (either worker), finds the key open

# one HTTP/1.1 request on a connection of its own, its answer read to the end of its
# Content-Length and the connection closed at once: the client moves on without waiting
# for nginx to finish with the request (its log phase), as a keep-alive client does
sub get11 {
	my ($uri) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080))
		or return 0;
	print $s "GET $uri HTTP/1.1\r\nHost: localhost\r\n\r\n";
	my $buf = '';
	while ($buf !~ /\r\n\r\n/) {
		sysread($s, $buf, 4096, length $buf) or last;
	}
	my ($head, $body) = split /\r\n\r\n/, $buf, 2;
	my ($len) = ($head // '') =~ /Content-Length: (\d+)/i;
	$body //= '';
	while (defined $len && length $body < $len) {
		sysread($s, $body, 4096, length $body) or last;
	}
	close $s;
	return ($head // '') =~ m!^HTTP/1.1 (\d+)! ? $1 : 0;
}

my @late;
for my $n (1 .. 40) {
	my @st = map { get11("/kk/x?k=c$n") } 1 .. 11;
	push @late, "c$n: @st" unless $st[-1] == 503 && !grep { $_ != 500 } @st[0 .. 9];
}
is(join('; ', @late), '', 'the request after the opening failure is refused, every time');

###############################################################################
