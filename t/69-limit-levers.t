#!/usr/bin/perl

# What a client can do to an adaptive limit.  Two workers; the origin counts
# what reaches it.
#
# 1. Its class, when an operator takes it from a header (circuit_breaker_class
#    $http_x_class): exactly "critical", "default" or "sheddable" names a
#    class; anything else — another case, a value of 4000 bytes, control and
#    high bytes, quotes, 300 distinct bogus values — is "default", answered as
#    usual, and said at most once per worker, cut at 32 bytes and escaped, so
#    that a client cannot write into or flood the error log.
# 2. Its share of the slots.  A limit of 8; clients told apart by address
#    (real_ip from X-Client, as behind a trusted proxy).  A client that holds
#    slow requests while another asks gets 6 of them (the last quarter stays
#    for the others): its 7th and 8th are shed (counted "capped"), and the
#    other client's requests all pass meanwhile.  The same client alone gets
#    the whole limit.
# 3. Its quota at the origin.  The origin answers one client 429 (a client
#    over its own quota), ten times, while another client asks: the limit of
#    32 is not cut, where each 429 halved it for everyone; nor while the other
#    client holds a dozen slow requests and has not asked for over a second
#    (a heavy client leaves no mark, but its requests in flight are there).
#    A 429 to each of two clients within a second is the origin's word on its
#    load, and cuts it.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use IO::Socket::INET;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Response;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy realip/)->plan(28);

$t->write_file_expand('nginx.conf', conf(2, <<"EOF"));
    upstream u {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=10000;
        circuit_breaker_limit adaptive min=50 max=50 initial=50;
    }

    log_format cls '\$request_uri \$circuit_breaker_class';

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        access_log %%TESTDIR%%/class.log cls;
        large_client_header_buffers 4 16k;

        circuit_breaker_class \$http_x_class;

        location / { proxy_pass http://u; }
    }

    upstream shared {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=10000;
        circuit_breaker_limit adaptive min=8 max=8 initial=8;
    }

    server {
        listen       127.0.0.1:8082;
        server_name  localhost;

        set_real_ip_from 127.0.0.1;
        real_ip_header X-Client;

        location / { proxy_pass http://shared; }
    }

    upstream quota {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=10000;
        circuit_breaker_limit adaptive min=1 max=32 initial=32;
    }

    server {
        listen       127.0.0.1:8084;
        server_name  localhost;

        set_real_ip_from 127.0.0.1;
        real_ip_header X-Client;

        location / { proxy_pass http://quota; }
    }

    server {
        listen       127.0.0.1:8083;
        location /status { circuit_breaker_status; }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

# a request with the raw header line "X-Class: VALUE" (bytes as given): its status

sub with_class {
	my ($uri, $value) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080))
		or return 0;
	binmode $s;
	print $s "GET $uri HTTP/1.0\r\nHost: localhost\r\nX-Class: $value\r\n\r\n";
	local $/;
	my $r = <$s> // '';
	return $r =~ m!^HTTP/1\.[01] (\d{3})! ? $1 : 0;
}

is(with_class('/critical', 'critical'), 200, 'critical');
is(with_class('/upper', 'CRITICAL'), 200, 'another case: answered');
is(with_class('/long', 'x' x 4000), 200, '4000 bytes: answered');
is(with_class('/bytes', "crit\x01\x7f\xff\"ical\\"), 200, 'control, high bytes, quotes: answered');

my $ok = 0;
$ok += with_class("/many/$_", "bogus$_") == 200 for 1 .. 300;
is($ok, 300, '300 distinct bogus values: all answered');

is(CB::Origin::hits($hits), 304, 'the origin received every request');

###############################################################################

# 2. A client's share of the slots.

# sends GET URI as client ADDR on a new connection to PORT (8082), without reading the
# answer

sub ask {
	my ($uri, $addr, $port) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port($port // 8082))
		or die "connect: $!";
	binmode $s;
	print $s "GET $uri HTTP/1.0\r\nHost: localhost\r\nX-Client: $addr\r\n\r\n";
	return $s;
}

# the status of the answer on S (0: none)

sub status_of {
	my ($s) = @_;
	local $/;
	my $r = <$s> // '';
	return $r =~ m!^HTTP/1\.[01] (\d{3})! ? $1 : 0;
}

sub statuses {
	my %n;
	$n{status_of($_)}++ for @_;
	return join ' ', map { "$_:$n{$_}" } sort keys %n;
}

sub capped {
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8083))
		or return -1;
	print $s "GET /status HTTP/1.0\r\nHost: localhost\r\n\r\n";
	local $/;
	my $r = <$s> // '';
	my ($c) = $r =~ /"upstream":"shared".*?"capped":(\d+)/s;
	return $c // -1;
}

is(status_of(ask('/v/0', '10.0.0.7')), 200, 'the other client asks');

# one after the other, so that each is counted before the next is judged
my @held = map { my $s = ask("/slow/$_?delay=6000", '10.9.9.9'); sleep 0.05; $s } 1 .. 8;
sleep 0.5;
my $passed = 0;
for (1 .. 10) {
	$passed++ if status_of(ask("/v/$_", '10.0.0.7')) == 200;
}
is($passed, 10, 'the other client passes while the heavy one holds its share');
is(CB::Origin::hits($hits, qr!^/slow/!), 6,
	'the heavy client got 6 of the 8 slots');
is(capped(), 2, 'its 7th and 8th were capped');
is(statuses(@held), '200:6 503:2', 'its answers');
is(CB::Origin::hits($hits, qr!^/v/!), 11,
	'every request of the other client reached the origin');

# nobody else for over a second: the same client is alone, and has the whole
# limit

sleep 1.5;
my @alone = map { my $s = ask("/alone/$_?delay=2000", '10.9.9.9'); sleep 0.05; $s } 1 .. 9;
is(statuses(@alone), '200:8 503:1', 'alone, the whole limit');
is(CB::Origin::hits($hits, qr!^/alone/!), 8, 'alone: 8 reached the origin');
is(capped(), 2, 'alone: nothing capped');

###############################################################################

# 3. A client over its own quota at the origin.

sub quota_ask { ask(@_, 8084) }
sub quota_get { status_of(quota_ask(@_)) }

sub quota_limit {
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8083))
		or return -1;
	print $s "GET /status?upstream=quota HTTP/1.0\r\nHost: localhost\r\n\r\n";
	local $/;
	my $j = CB::Response::json(<$s> // '') // {};
	my ($b) = grep { $_->{upstream} eq 'quota' } @{$j->{breakers} // []};
	return $b->{limit}{limit} // -1;
}

# each 429 150 ms after the last, past the one cut an interval allows; the
# other client asks between them, present within the second
my ($over, $served) = (0, 0);
for my $i (1 .. 10) {
	$served++ if quota_get("/q/v$i", '10.0.0.7') == 200;
	$over++ if quota_get("/q/over$i?status=429", '10.9.9.9') == 429;
	sleep 0.15;
}
is("$over $served", '10 10', 'quota: 429s passed on, the other client served');
is(quota_limit(), 32, 'quota: one client\'s 429s cut nothing');

# the other client holds 12 slow requests, heavy (a quarter of 32 and more
# than the others), and asks nothing for over a second
is(quota_get('/q/hello', '10.9.9.9'), 200, 'heavy: the first client asks');
my @slow = map { my $s = quota_ask("/q/slow$_?delay=4000", '10.0.0.7'); sleep 0.05; $s } 1 .. 12;
sleep 1.2;
$over = 0;
for my $i (1 .. 3) {
	$over++ if quota_get("/q/again$i?status=429", '10.9.9.9') == 429;
	sleep 0.15;
}
is("$over " . quota_limit(), '3 32', 'heavy: one client\'s 429s beside it cut nothing');
status_of($_) for @slow;

# the origin says the same to both clients: its load, cut at once
is(quota_get('/q/busy1?status=429', '10.9.9.9'), 429, 'load: a 429 to one client');
is(quota_get('/q/busy2?status=429', '10.0.0.7'), 429, 'load: and to the other');
ok(quota_limit() < 32, 'load: two clients\' 429s cut the limit') or diag(quota_limit());

###############################################################################

$t->stop();

# 1. what the class log and the error log say

my $cls = $t->read_file('class.log');
like($cls, qr!^/critical critical$!m, 'exactly "critical" is critical');
like($cls, qr!^/upper default$!m, 'another case is default');
like($cls, qr!^/long default$!m, 'a long value is default');
like($cls, qr!^/bytes default$!m, 'a value of odd bytes is default');

my $log = $t->read_file('error.log');
my @said = $log =~ /^(.*circuit breaker class .*)$/mg;
ok(@said >= 1 && @said <= 2, 'said at most once per worker') or diag(join "\n", @said);
ok(!grep({ /[\x00-\x1f\x7f-\xff]/ || /x{33}/ } @said),
	'cut at 32 bytes, escaped: no raw bytes, no long value') or diag(join "\n", @said);

###############################################################################
