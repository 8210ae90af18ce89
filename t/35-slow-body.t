#!/usr/bin/perl

# A slow request body holds nothing the breaker grants, where nginx would pass the body on
# as it arrives (proxy_request_buffering off, as gRPC always does): a request that may
# become the half-open probe, or take a slot of the adaptive limit, has its whole body read
# first (PRECONTENT), and where that phase does not decide (an upstream named by a
# variable), a request whose body is still arriving is never the probe.  Uploads that
# trickle a byte every 0.3 s neither keep a breaker half-open nor fill a limit, and their
# time is not the origin's: the limit does not fall.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use IO::Socket::INET;
use Time::HiRes qw/ sleep time /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Response qw/ status header /;
use CB::Status qw/ breaker_at /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(12);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    upstream p {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=30s min_requests=3 failure_rate=50% open=1s jitter=0%
                        probes=1;
    }

    upstream v {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=30s min_requests=3 failure_rate=50% open=1s jitter=0%
                        probes=1;
    }

    upstream l {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker limit=adaptive limit_min=2 limit_max=4 limit_initial=4;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        proxy_request_buffering off;
        client_body_timeout 30s;

        location /p/ { proxy_pass http://p; }
        location /v/ { set $up v; proxy_pass http://$up; }
        location /l/ { proxy_pass http://l; }
        location = /status { circuit_breaker_status; }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

# a POST of LEN bytes whose first byte is sent now; trickle() sends one more byte of each,
# finish() the rest, and reads the answer

my (%sent, %len);

sub upload {
	my ($uri, $len) = @_;
	my $s = IO::Socket::INET->new('127.0.0.1:' . port(8080))
		or die "connect: $!\n";
	$s->autoflush(1);
	print $s "POST $uri HTTP/1.0\r\nHost: localhost\r\n"
		. "Content-Length: $len\r\n\r\nx";
	($sent{$s}, $len{$s}) = (1, $len);
	return $s;
}

sub trickle {
	for my $s (@_) {
		next if $sent{$s} >= $len{$s} - 1;
		print $s 'x';
		$sent{$s}++;
	}
}

# requests of URI every 0.1 s for SECONDS while UPLOADS trickle a byte each 0.3 s: the
# statuses

sub meanwhile {
	my ($uri, $seconds, @uploads) = @_;
	my (@st, $next);
	my $end = time() + $seconds;
	$next = time();
	while (time() < $end) {
		push @st, status(http_get($uri));
		if (time() >= $next) {
			trickle(@uploads);
			$next = time() + 0.3;
		}
		sleep 0.1;
	}
	return @st;
}

sub finish {
	my ($s) = @_;
	print $s 'x' x ($len{$s} - $sent{$s});
	local $/;
	my $r = <$s> // '';
	close $s;
	return $r;
}

# the probe: a slow upload after the cooldown does not take it; the next request does, and
# closes the breaker

for my $c ([ p => 'fixed upstream' ], [ v => 'upstream named by a variable' ]) {
	my ($u, $what) = @$c;

	my @trip = map { status(http_get("/$u/t$_?status=500")) } 1 .. 4;
	is(join(' ', @trip), '500 500 500 503', "$u: trips");
	sleep 1.2;

	my $s = upload("/$u/upload", 40);
	sleep 0.3;
	my @st = meanwhile("/$u/ok", 1.5, $s);
	is($st[0], 200, "$what: the next request is the probe")
		or diag(join ' ', @st);
	is(breaker_at("/status?upstream=$u")->{state}, 'closed',
		"$what: the breaker closed on it");
	my $up = finish($s);
	ok(status($up) == 200 || status($up) == 503, "$what: the upload is answered")
		or diag($up);
}

# the limit: four slow uploads, then requests: none shed

my @up = map { upload("/l/up$_", 30) } 1 .. 4;
sleep 0.3;
my @st = meanwhile('/l/ok', 2, @up);
is(scalar(grep { $_ != 200 } @st), 0, 'limit: no request shed while uploads trickle')
	or diag(join ' ', @st);
my $b = breaker_at('/status?upstream=l');
is($b->{limit}{limit} // $b->{limit}{current}, 4, 'limit: not lowered')
	or diag(explain($b->{limit}));

my @done = map { status(finish($_)) } @up;
is(join(' ', @done), '200 200 200 200', 'limit: the uploads are served');
is(CB::Origin::hits($hits, qr!^/l/up!), 4, 'limit: and reached the origin');

###############################################################################
