#!/usr/bin/perl

# What a client can send as its class when an operator takes it from a header
# (circuit_breaker_class $http_x_class): exactly "critical", "default" or
# "sheddable" names a class; anything else — another case, a value of 4000
# bytes, control and high bytes, quotes, 300 distinct bogus values — is
# "default", answered as usual, and said at most once per worker, cut at 32
# bytes and escaped, so that a client cannot write into or flood the error
# log.  Two workers; the origin counts what reaches it.

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

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(12);

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

$t->stop();

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
