#!/usr/bin/perl

# The replay's fidelity: nginx runs a breaker in dry_run in front of an origin that works,
# fails, then recovers, and logs every request in the circuit_breaker_replay format; cb-replay
# then reads that access log with the configuration nginx -T prints, and its transitions must
# be the live ones: as many, each made by the same request, with the same words.  And
# $circuit_breaker_upstream, the upstream's name whether or not a breaker applies.

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

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(21);

# The README's format, plus the request (to find the live log line's request).
$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    log_format circuit_breaker_replay
        '$msec $request_time "$proxy_host" "$circuit_breaker_route" '
        '"$upstream_addr" "$upstream_status" "$upstream_response_time" '
        '"$upstream_header_time" "$request_uri"';

    upstream dry {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=5 failure_rate=50% open=1s
                        max_open=4s jitter=0% probes=2 probe_interval=100ms
                        consecutive=off dry_run;
        circuit_breaker_failure error timeout http_500 http_502;
    }

    # a run of gateway failures, a probe that times out, one good probe
    upstream gw {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=100 consecutive=3 open=1s jitter=0%
                        probes=1 dry_run;
    }

    # slow calls
    upstream slow {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=4 slow=100ms slow_rate=50% consecutive=off
                        open=1s jitter=0% dry_run;
    }

    upstream plain {
        server 127.0.0.1:%%PORT_8081%%;
    }

    log_format up '$request_uri $circuit_breaker_upstream';
    log_format keyed
        '$msec $request_time "$circuit_breaker_upstream" "$circuit_breaker_route" '
        '"$upstream_addr" "$upstream_status" "$upstream_response_time" '
        '"$upstream_header_time" "$circuit_breaker_state" "$circuit_breaker_msec" '
        '"$request_uri"';

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        access_log %%TESTDIR%%/replay.log circuit_breaker_replay;
        access_log %%TESTDIR%%/upstream.log up;

        location /a/ {
            proxy_pass http://dry;
            circuit_breaker_route a;
        }

        location /b/ {
            proxy_pass http://dry;
        }

        location /g/ {
            proxy_pass http://gw;
            proxy_read_timeout 300ms;
        }

        location /s/ {
            proxy_pass http://slow;
        }

        location /plain/ {
            proxy_pass http://plain;
            access_log %%TESTDIR%%/upstream.log up;
        }

        location /var/ {
            set $u plain;
            proxy_pass http://$u;
            access_log %%TESTDIR%%/upstream.log up;
        }

        location /none/ {
            return 204;
            access_log %%TESTDIR%%/upstream.log up;
        }

        # a key's breakers, logged in the README's format, and the request
        location /k/ {
            circuit_breaker_key $arg_k window=10s min_requests=5 failure_rate=50%
                                open=1s max_open=4s jitter=0% probes=2
                                probe_interval=100ms consecutive=off dry_run;
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
            access_log %%TESTDIR%%/keyed.log keyed;
        }
    }

EOF

start($t, 8081);

###############################################################################

my $n = 0;
sub get {
	my ($route, $status) = @_;
	$n++;
	my $q = $status =~ /^\d+$/ ? "status=$status" : $status;
	return status(http_get("/$route/?$q&n=$n"));
}

# A breaker's story: works, then fails (opens at the 10th request, 5 of 10 failed), fails
# on its first probe (reopens), then recovers: probes 100 ms apart until enough are good.
sub story {
	my ($send) = @_;
	$send->(200) for 1 .. 5;
	$send->(500) for 1 .. 8;
	sleep 1.3;
	$send->(500);
	sleep 2.4;
	for (1 .. 20) {
		$send->(200);
		sleep 0.15;
	}
}

# route a
story(sub { get('a', $_[0]) });

# route b, the upstream's own breaker: a few failures, never enough
get('b', 500) for 1 .. 2;
get('b', 200) for 1 .. 5;

# gw: closed connections (error), then a probe that hangs (timeout), then a good one
get('g', 'close=1') for 1 .. 3;
sleep 1.3;
get('g', 'hang=1');
sleep 2.3;
get('g', 200);

# slow: 4 slow calls of 4
get('s', 'delay=200') for 1 .. 4;

# the upstream's name, with or without a breaker, and none without an upstream
http_get("/$_/?n=0") for qw/ plain var none /;

# a key's breaker, as route a's: opens, fails its first probe, recovers; another key of the
# same variable never opens
sub key {
	my ($k, $status) = @_;
	$n++;
	return status(http_get("/k/?status=$status&k=$k&n=$n"));
}
key('y', 500) for 1 .. 2;
key('y', 200) for 1 .. 5;
story(sub { key('x', $_[0]) });

$t->stop();

like($t->read_file('upstream.log'), qr{^/a/\?status=200&n=1 dry$}m,
	'$circuit_breaker_upstream: a breaker\'s upstream');
like($t->read_file('upstream.log'),
	qr{^/plain/\?n=0 plain\n/var/\?n=0 plain\n/none/\?n=0 -$}m,
	'$circuit_breaker_upstream: without a breaker, through a variable, none');

###############################################################################

# the live transitions: (request number, message)

my @live;
for (split /\n/, $t->read_file('error.log')) {
	next unless /\[warn\].*?(circuit breaker "[^"]+" [a-z-]+: .*?), client: .*request: "GET \/\w+\/\?\S*?&n=(\d+) /;
	my ($req, $msg) = ($2, $1);
	# nginx's context ("while reading upstream") is not the breaker's
	$msg =~ s/ while [^,]*$//;
	push @live, "$req $msg";
}

# the replay's: (log line → request number, message)

my @uri;
for (split /\n/, $t->read_file('replay.log')) {
	push @uri, /"\/\w+\/\?\S*?&n=(\d+)"$/ ? $1 : '?';
}

my $d = $t->testdir();
my $conf = `$Test::Nginx::NGINX -p $d/ -c nginx.conf -e error-t.log -T 2>/dev/null`;
$t->write_file('nginx-T.conf', $conf);
like($conf, qr/# configuration file .*nginx\.conf:/, 'nginx -T');

my $out = `$replay --config $d/nginx-T.conf --transitions $d/transitions.txt $d/replay.log 2>&1`;
is($?, 0, 'cb-replay ran') or diag($out);
like($out, qr/^\d+ lines: \d+ replayed, 0 unparseable/, 'every line parsed')
	or diag($out);

my @replayed;
for (split /\n/, $t->read_file('transitions.txt')) {
	my ($line, $msg) = /^(\d+) \S+ \+\d+\.\d{3} (.*)$/ or next;
	push @replayed, ($uri[$line - 1] // '?') . " $msg";
}

cmp_ok(scalar @live, '>=', 4, 'live: opened, half-opened, reopened, closed at least')
	or diag(join "\n", @live);
is(scalar @replayed, scalar @live, 'as many transitions')
	or diag(join "\n", 'live:', @live, 'replayed:', @replayed);
is_deeply(\@replayed, \@live, 'each at the same request, in the same words');

like(join("\n", @live), qr/"dry\/a" opened: failure rate 50% \(5\/10\)/, 'the trip');
unlike(join("\n", @live, @replayed), qr/"dry\/default"/, 'route b never opened');
like(join("\n", @live), qr/(?x)"gw\/default"\ opened:\ 3\ gateway\ failures\ in\ a\ row,
	\ the\ last:\ error.*\n.*\n.*"gw\/default"\ opened:\ probe\ failed:\ timeout
	.*\n.*\n.*"gw\/default"\ closed:\ 1\ good\ probe/, 'error, timeout, recovery');
like(join("\n", @live), qr/"slow\/default" opened: slow rate 100% \(4\/4\)/, 'slow calls');

# a key's breakers: the live transitions and the replay's of the key's own log

my (@klive, @kuri, @kreplayed);
for (split /\n/, $t->read_file('error.log')) {
	next unless /\[warn\].*?(circuit breaker "\$arg_k" key "[^"]+" [a-z-]+: .*?), client: .*request: "GET \/k\/\?\S*?&n=(\d+) /;
	my ($req, $msg) = ($2, $1);
	$msg =~ s/ while [^,]*$//;
	push @klive, "$req $msg";
}
for (split /\n/, $t->read_file('keyed.log')) {
	push @kuri, /"\/k\/\?\S*?&n=(\d+)"$/ ? $1 : '?';
}
like($t->read_file('keyed.log'), qr/^\S+ \S+ "\$arg_k" "x" "127\.0\.0\.1:\d+" "200" "\S+" "\S+" "closed" "\d+\+\d+"/m,
	'a key\'s log line: its variable, key, state and times');
my $kout = `$replay --config $d/nginx-T.conf --transitions $d/ktransitions.txt $d/keyed.log 2>&1`;
is($?, 0, "cb-replay ran on the key's log") or diag($kout);
like($kout, qr/^\d+ lines: \d+ replayed, 0 unparseable/, "key: every line parsed") or diag($kout);
like($kout, qr/^times: the module's/m, 'key: on the module\'s clock') or diag($kout);
for (split /\n/, $t->read_file('ktransitions.txt')) {
	my ($line, $msg) = /^(\d+) \S+ \+\d+\.\d{3} (.*)$/ or next;
	push @kreplayed, ($kuri[$line - 1] // '?') . " $msg";
}
cmp_ok(scalar @klive, '>=', 4, 'key live: opened, half-opened, reopened, closed at least')
	or diag(join "\n", @klive);
is_deeply(\@kreplayed, \@klive, 'key: each at the same request, in the same words')
	or diag(join "\n", 'live:', @klive, 'replayed:', @kreplayed);
like(join("\n", @klive), qr/"\$arg_k" key "x" opened: failure rate 50% \(5\/10\)/,
	'key: the trip');
unlike(join("\n", @klive, @kreplayed), qr/key "y"/, 'key: y never opened');

# the counterfactual: what the breaker would have refused while open
like($out, qr/breaker "dry\/a"\n.*\n.*refused [1-9]\d*: \d+ failures spared/,
	'refused requests counted') or diag($out);

###############################################################################
