#!/usr/bin/perl

# The status page with many breakers: the zone is walked in batches (the lock is let go
# between them), and every breaker still appears exactly once, in configuration order.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use JSON::PP;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT /;
use CB::Nginx qw/ conf start /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(6);

my $n = 1000;
my $ups = join "\n", map {
	"    upstream u$_ { server 127.0.0.1:8081; circuit_breaker; }"
} 1 .. $n;

$t->write_file_expand('nginx.conf', conf(2, <<"EOF"));
    circuit_breaker_zone cb:4m;

$ups

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location / {
            proxy_pass http://u7;
        }

        location = /status {
            circuit_breaker_status;
        }
    }

    server {
        listen       127.0.0.1:8081;
        return 200 "ok\\n";
    }
EOF

start($t);

###############################################################################

my $s = status();
is(scalar @{$s->{breakers}}, $n, "$n breakers listed");
is(scalar(keys %{{ map { $_->{upstream} => 1 } @{$s->{breakers}} }}), $n,
	'each once');
is(join(',', map { $_->{upstream} } @{$s->{breakers}}[0 .. 2]), 'u1,u2,u3',
	'configuration order');
is($s->{alloc_failures}, 0, 'all fit');

like(http_get('/x'), qr/^HTTP\/1.1 200/, 'traffic served');
is((grep { $_->{upstream} eq 'u7' } @{status()->{breakers}})[0]{window}{requests},
	1, 'the request counted');

###############################################################################

sub status {
	my ($body) = http_get('/status') =~ /\x0d\x0a\x0d\x0a(.*)/s;
	return decode_json($body);
}

###############################################################################
