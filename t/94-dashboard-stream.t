#!/usr/bin/perl

# The dashboard shows stream breakers beside the http block's (Debian's chromium, headless): a
# stream upstream's row is marked stream and told apart from an http upstream of the same
# name, and its force_open button changes the stream breaker alone (the page sends
# proxy=stream).

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use Test::Nginx::Stream qw/ stream /;
use CB::Browser;
use CB::Nginx qw/ stream_conf start req /;
use CB::Response qw/ status json /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy stream/);
CB::Browser::plan($t, 8);

# nothing listens on 8095: the one session and the one request each fail, and make their
# breakers, which stay closed
# One expansion: a second would remap the addresses the first wrote.
my $stream = stream_conf(1, <<'EOF');
    circuit_breaker_zone cbs:1m;

    upstream kv {
        server 127.0.0.1:%%PORT_8095%%;
        circuit_breaker;
    }

    server { listen 127.0.0.1:%%PORT_8090%%; proxy_pass kv; }
EOF
$t->write_file_expand('nginx.conf', $stream . <<'EOF');
http {
    %%TEST_GLOBALS_HTTP%%

    circuit_breaker_zone cb:1m;

    upstream kv {
        server 127.0.0.1:%%PORT_8095%%;
        circuit_breaker;
    }

    server {
        listen 127.0.0.1:8080;
        location = /circuit_breaker { circuit_breaker_status control=on; }
        location / { proxy_pass http://kv; }
    }
}
EOF
start($t);

###############################################################################

# the page's JSON: a stream breaker's (zone cbs) and the http one's forced state
sub forced {
	my ($stream) = @_;
	my $page = json(req('GET', '/circuit_breaker')) || {};
	my @b = $stream
		? map { @{ $_->{breakers} || [] } } @{ $page->{stream} || [] }
		: @{ $page->{breakers} || [] };
	my ($kv) = grep { $_->{upstream} eq 'kv' } @b;
	return $kv ? $kv->{forced} // 'no' : 'none';
}

stream('127.0.0.1:' . port(8090))->io("PING\r\n", read => 1, read_timeout => 2);
is(status(req('GET', '/')), 502, 'the http kv: 502, its breaker made');

my $b = CB::Browser->new($t);
$b->drive('open', url => $b->url('/circuit_breaker'));
my $s = $b->row(upstream => 'kv', route => 'default', proxy => 'stream', state => 'closed');
ok($s->{found}, 'the stream kv: a row of its own');
like($s->{cells}{name} // '', qr/^kv\s*stream$/, 'the stream kv: marked stream');
my $h = $b->row(upstream => 'kv', route => 'default', proxy => 'http', state => 'closed');
like($h->{cells}{name} // '', qr/^kv\s*default$/, 'the http kv: its own row, its route');

my $c = $b->drive('click', upstream => 'kv', route => 'default', proxy => 'stream',
	action => 'force_open', confirm => 1);
like(($c->{dialog} || {})->{message} // '', qr/: stream kv\?/,
	'force_open: the dialog names the stream breaker');
ok($b->row(upstream => 'kv', route => 'default', proxy => 'stream', state => 'open')->{found},
	'force_open: the stream row, open');
is(forced(1), 'open', 'force_open: the stream breaker forced open');
is(forced(0), 'no', 'the http kv: untouched');

$b->keep('stream');
$b->quit;

###############################################################################
