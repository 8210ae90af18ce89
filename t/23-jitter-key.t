#!/usr/bin/perl

# circuit_breaker_jitter_key: the seed of the draws a replay can make again, read from a
# file as ssl_session_ticket_key reads its key: 32 bytes or 64 hexadecimal digits; a file
# that cannot be read or holds something else is refused at nginx -t, naming it (and never
# repeating its contents); a second one is a duplicate.  And with the key, two instances
# whose breakers see the same requests at the same moments draw the same cooldown only
# when their keys are the same (the core's unit tests check the draw itself).

###############################################################################

use warnings;
use strict;

use Test::More;

use POSIX ();

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT /;
use CB::Nginx qw/ conf /;
use CB::Config qw/ fill conf_fails conf_passes /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(9);

my $d = $t->testdir();
$t->write_file('hex.key', "00112233445566778899aabbccddeeff" x 2 . "\n");
$t->write_file('raw.key', join '', map { chr(($_ * 37) % 256) } 1 .. 32);
$t->write_file('short.key', "0011223344\n");
$t->write_file('secret.key', "not-a-key-SECRETWORD-" x 3 . "\n");

my $template = conf(1, <<'EOF');
KEY

    upstream api {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;
        location / { proxy_pass http://api; }
    }
EOF

conf_passes($t, '64 hexadecimal digits',
	fill($template, KEY => "circuit_breaker_jitter_key $d/hex.key;"));
conf_passes($t, '32 bytes', fill($template, KEY => "circuit_breaker_jitter_key $d/raw.key;"));
conf_passes($t, 'relative to the prefix',
	fill($template, KEY => "circuit_breaker_jitter_key hex.key;"));

conf_fails($t, 'a file that is not there',
	fill($template, KEY => "circuit_breaker_jitter_key $d/none.key;"),
	'circuit_breaker_jitter_key',
	"cannot use \"circuit_breaker_jitter_key\" \"$d/none.key\" (2: No such file or directory)");
conf_fails($t, 'too short',
	fill($template, KEY => "circuit_breaker_jitter_key $d/short.key;"),
	'circuit_breaker_jitter_key',
	"cannot use \"circuit_breaker_jitter_key\" \"$d/short.key\" (a jitter seed is 64 "
	. 'hexadecimal digits (32 bytes), or 32 bytes)');
conf_fails($t, 'a duplicate',
	fill($template, KEY => "circuit_breaker_jitter_key $d/hex.key;\n"
		. "    circuit_breaker_jitter_key $d/raw.key;"),
	"raw.key", '"circuit_breaker_jitter_key" directive is duplicate');

# A FIFO is refused at once: opening it would wait for a writer, with the master in a
# reload.  Should nginx wait, a writer comes after 10 s, and the message is another.
POSIX::mkfifo("$d/fifo.key", 0600) or die "mkfifo: $!\n";
my $writer = fork() // die "fork: $!\n";
if ($writer == 0) {
	sleep 10;
	open my $w, '>', "$d/fifo.key";
	POSIX::_exit(0);
}
conf_fails($t, 'a FIFO',
	fill($template, KEY => "circuit_breaker_jitter_key $d/fifo.key;"),
	'circuit_breaker_jitter_key',
	"cannot use \"circuit_breaker_jitter_key\" \"$d/fifo.key\" (not a regular file)");
kill 'TERM', $writer;
waitpid $writer, 0;

my $bad = fill($template, KEY => "circuit_breaker_jitter_key $d/secret.key;");
$t->write_file_expand('secret.conf', $bad);
my (undef, $out) = CB::Nginx::nginx_t($t, 'secret.conf');
like($out, qr/cannot use "circuit_breaker_jitter_key"/, 'a bad key refused');
unlike($out, qr/SECRETWORD/, 'without its contents');

###############################################################################
