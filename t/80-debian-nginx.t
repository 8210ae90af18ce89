#!/usr/bin/perl

# The module built for another nginx (scripts/build-for-nginx --debian) loads into Debian's
# stock /usr/sbin/nginx 1.22.1 and serves through a breaker-enabled upstream: the breaker
# trips and short-circuits there too.  Its stream module, built beside it, loads after
# Debian's own ngx_stream_module.so (libnginx-mod-stream) — and only after it, as the README
# says — and opens a stream upstream whose server refuses connections.
#
# Needs TEST_NGINX_DEBIAN_MODULE (the .so; scripts/test sets it) and /usr/sbin/nginx.

###############################################################################

use warnings;
use strict;

use Test::More;


use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

my $so = $ENV{TEST_NGINX_DEBIAN_MODULE};
my $bin = '/usr/sbin/nginx';
plan(skip_all => 'TEST_NGINX_DEBIAN_MODULE not set') unless $so;
plan(skip_all => "no $so") unless -f $so;
plan(skip_all => "no $bin") unless -x $bin;

# Before Test::Nginx reads it: this file runs another nginx.
$ENV{TEST_NGINX_BINARY} = $bin;

require Test::Nginx;
Test::Nginx->import(qw/ :DEFAULT /);
require CB::Nginx;
require CB::Debian;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(11);

like(`$bin -v 2>&1`, qr{nginx/1\.22\.}, 'Debian nginx 1.22');

(my $stream_so = $so) =~ s{[^/]*$}{ngx_stream_circuit_breaker_module.so};
my $debian_stream = '/usr/lib/nginx/modules/ngx_stream_module.so';
ok(-f $stream_so && -f $debian_stream, 'both stream modules are there');

# loaded before Debian's stream module, it cannot be
$t->write_file('early.conf', "load_module $stream_so;\nload_module $debian_stream;\n"
	. "events {}\n");
my $dir = $t->testdir();
like(`$bin -t -p $dir/ -c $dir/early.conf -g 'error_log stderr; pid $dir/early.pid;' 2>&1`,
	qr/undefined symbol: ngx_stream_/, 'stream module: needs ngx_stream_module.so first');

$t->write_file_expand('nginx.conf',
	CB::Debian::conf("load_module $so;\nload_module $debian_stream;\n"
		. "load_module $stream_so;") . CB::Debian::stream_block());

my $hits = CB::Nginx::start($t, 8081);

###############################################################################

my ($ok, $failed, $r, $open) = CB::Debian::trip($hits);

like($ok, qr!^HTTP/1.1 200.*origin \d+ ok!s, 'served through the breaker');
is($failed, 4, 'failures reached the origin');
like($r, qr!^HTTP/1.1 503!, 'open: 503');
like($r, qr!X-Circuit-State: open!, 'open: header');
like($r, qr!Retry-After: (\d+)!, 'open: Retry-After');
is($open, 4, 'open: origin untouched');

like(http_get('/status'), qr!"state":"open"!, 'status page');

is(CB::Debian::stream_trip($t), '502 502 502 502 503 503 503 503 503 503',
	'stream: refused connections open it, then sessions are refused');

###############################################################################
