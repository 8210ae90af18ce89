#!/usr/bin/perl

# A replay of a log in which breakers refused requests (no dry run): nginx runs two
# breakers with their default jitter and a circuit_breaker_jitter_key in front of an origin
# that works, fails, then recovers, and logs in the documented circuit_breaker_replay format
# (nginx-conf/replay-log.conf, as the README quotes it).  Every refused request's line names
# its breaker's upstream and reads as refused (none unparseable), counted as such; and
# cb-replay, given the nginx -T output (which names the key file), makes the live transitions,
# each at the same request, in the same words.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT /;
use CB::Nginx qw/ conf start /;
use CB::Response qw/ status /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $root = "$FindBin::Bin/..";
my $replay = $ENV{TEST_CB_REPLAY} // "$root/target/release/cb-replay";
plan(skip_all => "no $replay (scripts/replay --build makes it)") unless -x $replay;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(15);

# The format as documented, then the request (to find the live log line's request).
open my $fh, '<', "$root/nginx-conf/replay-log.conf" or die "replay-log.conf: $!\n";
my $format = join '', <$fh>;
close $fh;
$format =~ s/';\s*\z/ "\$request_uri"';\n/ or die "replay-log.conf: no format\n";

$t->write_file('jitter.key', "00112233445566778899aabbccddeeff" x 2 . "\n");

$t->write_file_expand('nginx.conf', conf(1, <<"EOF"));
    $format
    circuit_breaker_jitter_key %%TESTDIR%%/jitter.key;

    upstream api {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=5 failure_rate=50% open=1s
                        max_open=4s probes=2 probe_interval=200ms consecutive=off;
    }

    upstream gw {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=100 consecutive=3 open=1s probes=1;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        access_log %%TESTDIR%%/replay.log circuit_breaker_replay;

        location /a/ {
            proxy_pass http://api;
            circuit_breaker_route a;
        }

        location /g/ {
            proxy_pass http://gw;
        }
    }
EOF

start($t, 8081);

###############################################################################

my ($n, $refused) = (0, 0);
sub get {
	my ($route, $q) = @_;
	$n++;
	$q = "status=$q" if $q =~ /^\d+$/;
	my $s = status(http_get("/$route/?$q&n=$n"));
	$refused++ if $s == 503;
	return $s;
}

# api/a: works, fails (opens), refuses while open, fails its first probe (reopens), then
# the origin recovers and probes close it
get('a', 200) for 1 .. 5;
get('a', 500) for 1 .. 5;
for (1 .. 30) {
	get('a', 500);
	sleep 0.05;
}
for (1 .. 60) {
	get('a', 200);
	sleep 0.05;
}

# gw: closed connections open it; refused; then it recovers
get('g', 'close=1') for 1 .. 3;
for (1 .. 30) {
	get('g', 200);
	sleep 0.05;
}

$t->stop();

cmp_ok($refused, '>=', 20, "the live breakers refused requests ($refused)");

###############################################################################

# the live transitions: (request number, message)

my @live;
for (split /\n/, $t->read_file('error.log')) {
	next unless /\[warn\].*?(circuit breaker "[^"]+" [a-z-]+: .*?), client: .*request: "GET \/\w+\/\?\S*?&n=(\d+) /;
	my ($req, $msg) = ($2, $1);
	$msg =~ s/ while [^,]*$//;
	push @live, "$req $msg";
}

my $log = $t->read_file('replay.log');
my @uri;
for (split /\n/, $log) {
	push @uri, /"\/\w+\/\?\S*?&n=(\d+)"$/ ? $1 : '?';
}
my @refused_lines = grep { / "-" "-" "-" "-" "(?:open|half_open)" "\d+" / } split /\n/, $log;
is(scalar @refused_lines, $refused, 'every refused request logged as refused');
unlike(join("\n", @refused_lines), qr/^\S+ \S+ "-"/m,
	'$circuit_breaker_upstream names the breaker of a refused request');
like($log, qr/^\S+ \S+ "api" "a" "-" "-" "-" "-" "open" "\d+" "-" "\/a\/\?status=500&n=\d+"$/m,
	'a refused line: upstream, route, state, time, no class');
like($log, qr/^\S+ \S+ "api" "a" "127\.0\.0\.1:\d+" "200" \S+ \S+ "closed" "\d+\+\d+" /m,
	'a passed line: judged and recorded at the module\'s times');
unlike($log, qr/^\S+ \S+ "[^"]+" "[^"]+" "127\.0\.0\.1:\d+" "\d+" \S+ \S+ "\w+" "\d+" /m,
	'every request sent has the time of its record (successes recorded without the lock too)');

my $d = $t->testdir();
my $conf = `$Test::Nginx::NGINX -p $d/ -c nginx.conf -e error-t.log -T 2>/dev/null`;
$t->write_file('nginx-T.conf', $conf);
like($conf, qr/circuit_breaker_jitter_key/, 'nginx -T names the key file');

my $out = `$replay --config $d/nginx-T.conf --transitions $d/transitions.txt $d/replay.log 2>&1`;
is($?, 0, 'cb-replay ran') or diag($out);
like($out, qr/^\d+ lines: \d+ replayed \($refused refused live\), 0 unparseable, 0 without an upstream attempt/,
	'refused requests counted as such, none unparseable') or diag($out);
like($out, qr/times: the module's \(\$circuit_breaker_msec\); jitter: the live draws/,
	'the module\'s times, the live draws') or diag($out);

my @replayed;
for (split /\n/, $t->read_file('transitions.txt')) {
	my ($line, $msg) = /^(\d+) \S+ \+\d+\.\d{3} (.*)$/ or next;
	push @replayed, ($uri[$line - 1] // '?') . " $msg";
}

like(join("\n", @live), qr/"api\/a" opened: failure rate 50% \(5\/10\).*\n(?:.*\n)*.*"api\/a" opened: probe failed(?:.*\n)*.*"api\/a" closed/,
	'live: opened, reopened on a failed probe, closed') or diag(join "\n", @live);
like(join("\n", @live), qr/"gw\/default" opened: 3 gateway failures in a row(?:.*\n)*.*"gw\/default" closed/,
	'live: gw opened and closed') or diag(join "\n", @live);
is(scalar @replayed, scalar @live, 'as many transitions')
	or diag(join "\n", 'live:', @live, 'replayed:', @replayed);
is_deeply(\@replayed, \@live, 'each at the same request, in the same words');
like($out, qr/breaker "api\/a"\n(?:.*\n)*?  refused live \d+: refused again by the replay \d+, let through 0/,
	'the replay refused what the live breaker refused') or diag($out);

###############################################################################
