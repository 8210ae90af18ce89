#!/usr/bin/perl

# The README's recipes, read from the files it quotes (docs/recipes/*.conf), so that what
# the README shows is what runs here, with no copy to drift: each file's text must be in
# the README verbatim, in an nginx code block, and each passes "nginx -t" with no complaint
# once its addresses and paths are made local (10.0.0.N:PORT becomes 127.0.0.1:808N,
# "listen 80" a test port, /var/log/nginx/, /var/cache/nginx/ and /etc/nginx/ the test
# directory).  Then, running: the minimal configuration creates its zone on its own and
# opens with the defaults; stale pages while open, a soft dependency that fails open to
# reviewed defaults, and a JSON 503 for API clients, each opened by its origin's failures,
# then answering without touching the origin; an origin's own 503 is passed through
# untouched; the status location lists the breakers.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT http_content /;
use CB::Nginx qw/ conf stream_conf start /;
use CB::Config qw/ conf_passes /;
use CB::Origin;
use CB::Response qw/ status header /;
use JSON::PP qw//;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

sub slurp {
	my ($path) = @_;
	open my $fh, '<', $path or die "$path: $!\n";
	local $/;
	return scalar <$fh>;
}

my $root = "$FindBin::Bin/..";
my @names = qw/ minimal routes slow probes eject limit dry-run fleet fleet-nats status
	stale defaults json-503 origins tenants stream /;
my %recipe = map { $_ => slurp("$root/docs/recipes/$_.conf") } @names;
my $readme = slurp("$root/README.md");

# the recipes of an upstream (with the directives around it), and those of a location
my %upstream = map { $_ => 1 } qw/ slow probes eject limit dry-run /;
my %location = map { $_ => 1 } qw/ routes status stale defaults json-503 /;

my $t = Test::Nginx->new()->has(qw/http proxy cache/)->plan(2 * @names + 31);

###############################################################################

# the recipe's text made local: the test's addresses, ports and paths

sub local_conf {
	my ($c, $listen) = @_;
	$c =~ s/\b10\.0\.0\.(\d+):\d+/'127.0.0.1:' . (8080 + $1)/ge;
	$c =~ s/\blisten 80;/listen 127.0.0.1:$listen;/g;
	$c =~ s!/(?:var/log|var/cache|etc)/nginx/!%%TESTDIR%%/!g;
	return $c;
}

# the minimal configuration's http{} block, without its load_module line (the harness's
# globals load the module), its server listening on LISTEN

sub minimal_http {
	my ($listen) = @_;
	my $c = $recipe{minimal};
	$c =~ s/\Aload_module modules\/ngx_http_circuit_breaker_module\.so;\n\s*//
		or die "minimal.conf: no load_module line first\n";
	$c =~ /\Ahttp \{\n(.*)\}\n\z/s or die "minimal.conf: no http block\n";
	return local_conf($1, $listen);
}

# the stream recipe's stream{} block, without its load_module lines (the harness's globals
# load the stream module; this nginx has the stream proxy built in), its servers listening on
# test ports

sub stream_recipe {
	my $c = $recipe{stream};
	$c =~ s/\A(?:load_module [^\n]*\n)+\s*//
		or die "stream.conf: no load_module lines first\n";
	$c =~ /\Astream \{\n(.*)\}\n\z/s or die "stream.conf: no stream block\n";
	$c = local_conf($1, 8080);
	my $port = 8090;
	$c =~ s/\blisten \d+;/'listen 127.0.0.1:' . $port++ . ';'/ge;
	return stream_conf(1, $c);
}

# a location recipe's http-level lines (proxy_cache_path), and its locations

sub split_http {
	my ($c) = @_;
	my @http = $c =~ /^(proxy_cache_path .*\n)/mg;
	$c =~ s/^proxy_cache_path .*\n\n?//mg;
	return (join('', @http), $c);
}

# the upstreams the location recipes pass to, each opened by two failures of three

my $upstreams = join '', map { <<"EOF" } qw/ api pages flags /;
    upstream $_ {
        server 127.0.0.1:8081;
        circuit_breaker min_requests=3 failure_rate=50% open=30s;
    }
EOF

# a whole nginx.conf around a recipe

sub whole {
	my ($name) = @_;

	return conf(1, minimal_http(8080)) if $name eq 'minimal';
	return stream_recipe() if $name eq 'stream';

	my $c = local_conf($recipe{$name}, 8080);
	return conf(1, $c) if !$upstream{$name} && !$location{$name};

	return conf(1, $c . <<'EOF') if $upstream{$name};

    server {
        listen 127.0.0.1:8080;
        location / { proxy_pass http://api; }
    }
EOF

	my ($http, $locations) = split_http($c);
	return conf(1, $http . $upstreams . <<"EOF");

    server {
        listen 127.0.0.1:8080;

$locations
    }
EOF
}

$t->write_file('fleet.key', '0123456789abcdef' x 4 . "\n");
$t->write_file('nats.cred', "user edge\npassword 0123456789abcdef\n");
$t->write_file('cb-jitter.key', 'fedcba9876543210' x 4 . "\n");

# The replay's log format is written once more, in nginx-conf/replay-log.conf, which a
# configuration includes and the replay's own tests load: the two must not drift.
my ($recipe_format) = $recipe{'dry-run'} =~ /^(log_format circuit_breaker_replay\b.*?;)$/ms;
my ($shipped_format) = slurp("$root/nginx-conf/replay-log.conf")
	=~ /^(log_format circuit_breaker_replay\b.*?;)$/ms;
ok($recipe_format && $shipped_format && $recipe_format eq $shipped_format,
	'the dry-run recipe logs in nginx-conf/replay-log.conf\'s format');

for my $name (@names) {
	ok(index($readme, "```nginx\n$recipe{$name}```\n") >= 0,
		"README quotes docs/recipes/$name.conf verbatim");
	conf_passes($t, "docs/recipes/$name.conf: nginx -t", whole($name));
}

###############################################################################

# running: the minimal configuration (its server on port 8082) beside the recipes that
# answer while open and the status location (on 8080); the stale page's validity is a
# second instead of the recipe's minute, so that it expires within the test

my ($cache_path, $stale) = split_http(local_conf($recipe{stale}, 8080));
my $answers = join "\n", $stale,
	map { local_conf($recipe{$_}, 8080) } qw/ defaults json-503 status /;
$answers =~ s/proxy_cache_valid 200 1m;/proxy_cache_valid 200 1s;/
	or die "stale.conf: no proxy_cache_valid 200 1m\n";

$t->write_file_expand('nginx.conf', conf(1, minimal_http(8082) . $cache_path . $upstreams
	. <<"EOF"));

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

$answers
    }
EOF

my $hits = start($t, 8081);

###############################################################################

sub hits { CB::Origin::hits($hits, @_) }

sub trip {
	my ($prefix) = @_;
	return join ' ', map { status(http_get("$prefix/fail?status=500&n=$_")) } 1 .. 4;
}

# stale pages: a page cached, expired, then served stale while open

my $page = '/catalog/item?body=a+page';
my $r = http_get($page);
my $cached = time();
is(status($r) . ' ' . http_content($r), '200 a page', 'stale: cached');
# expired once the second after the one of the store has passed (nginx's
# validity counts whole seconds)
sleep(int($cached) + 2.05 - $cached);
is(trip('/catalog'), '500 500 503 503', 'stale: opened by the second failure (with the cached page, 2 of 3)');
my $before = hits(qr!^/catalog/!);
$r = http_get($page);
is(status($r) . ' ' . http_content($r), '200 a page', 'stale: the page served while open');
is(header($r, 'X-Circuit-State'), 'open', 'stale: marked open') or diag($r);
is(hits(qr!^/catalog/!), $before, 'stale: no origin request');

# fail open to defaults

$r = http_get('/flags/all?status=503');
is(status($r), 503, 'defaults: the origin\'s own 503 is passed through');
is(trip('/flags'), '500 500 200 200', 'defaults: opened by the second failure, answered by the defaults');
$before = hits(qr!^/flags/!);
$r = http_get('/flags/all');
is(status($r), 200, 'defaults: 200 while open');
like(header($r, 'Content-Type') // '', qr!^application/json!, 'defaults: JSON');
my $body = eval { JSON::PP::decode_json(http_content($r)) };
is_deeply($body, { new_checkout => JSON::PP::false, recommendations => JSON::PP::true },
	'defaults: the reviewed defaults');
is(hits(qr!^/flags/!), $before, 'defaults: no origin request');

# a JSON 503

$r = http_get('/api/x?status=503&body=origin+says+no');
is(status($r) . ' ' . http_content($r), '503 origin says no',
	'json: the origin\'s own 503 is passed through');
is(trip('/api'), '500 500 503 503', 'json: opened by the second failure');
$before = hits(qr!^/api/!);
$r = http_get('/api/orders');
is(status($r), 503, 'json: 503 while open');
like(header($r, 'Content-Type') // '', qr!^application/json!, 'json: JSON');
my $ra = header($r, 'Retry-After');
ok(defined $ra && $ra =~ /^\d+$/ && $ra >= 1 && $ra <= 37, 'json: Retry-After kept (open=30s, jittered)')
	or diag($r);
is(header($r, 'X-Circuit-State'), 'open', 'json: X-Circuit-State kept');
$body = eval { JSON::PP::decode_json(http_content($r)) };
is($body->{error}, 'unavailable', 'json: error');
is($body->{circuit}, 'open', 'json: the breaker\'s state');
is($body->{retry_after}, $ra, 'json: the wait, as Retry-After says');
is(hits(qr!^/api/!), $before, 'json: no origin request');
is(hits(qr!^/flags/!), 3, 'defaults: the origin saw only the 503 and the two failures');


# the minimal configuration: its zone made on its own, opened by the defaults (20
# requests in the window, half of them failing), then 503 without the origin

my %m = (PeerAddr => '127.0.0.1:' . port(8082));
like($t->read_file('error.log'), qr/circuit breaker zone "circuit_breaker" initialized/,
	'minimal: its zone created on its own');
is(join(' ', map { status(http_get("/m/fail?status=500&n=$_", %m)) } 1 .. 20),
	join(' ', ('500') x 20), 'minimal: 20 failures reach the origin');
$r = http_get('/m/x', %m);
is(status($r), 503, 'minimal: open after them');
like(header($r, 'Retry-After') // '', qr/^[1-9]\d*$/, 'minimal: Retry-After');
is(header($r, 'X-Circuit-State'), 'open', 'minimal: X-Circuit-State');
is(hits(qr!^/m/!), 20, 'minimal: the origin saw the 20 failures only');

# the status location

$r = http_get('/circuit_breaker');
my $status = eval { JSON::PP::decode_json(http_content($r)) } // {};
is($status->{zone}, 'circuit_breaker', 'status: the zone made on its own');
is(join(' ', sort map { "$_->{upstream}/$_->{route}" } @{$status->{breakers} // []}),
	'api/default backend/default flags/default pages/default', 'status: every breaker');

###############################################################################
