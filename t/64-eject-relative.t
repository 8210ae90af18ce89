#!/usr/bin/perl

# Relative ejection: a server judged against its pool.  Four servers at two
# worker processes, the defaults (relative=on, latency_factor=3).  One server
# ten times slower than its three siblings, answering correctly, is ejected
# as a latency outlier (the log line and the status page say by how much),
# gets no request while out, and its probes are judged against the pool's
# latency: too slow while it is slow, back once it is fast.  A pool whose
# servers are all slow, or one twice as slow as the others, ejects nobody; a
# hash balancer (a key a client may choose) judges nobody unless asked to.
# One server of five failing 10 % of its calls while the others never fail is
# ejected as a failure outlier; five servers all failing 10 % eject nobody.
# Each origin counts what reaches it.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Status qw/ breaker_at /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $root = "$FindBin::Bin/..";
my $replay = $ENV{TEST_CB_REPLAY} // "$root/target/release/cb-replay";

my $t = Test::Nginx->new()->has(qw/http proxy upstream_hash/)->plan(25);

my @four = map { "        server 127.0.0.1:%%PORT_$_%% max_fails=0;\n" } 8081 .. 8084;
my @five = map { "        server 127.0.0.1:%%PORT_$_%% max_fails=0;\n" } 8085 .. 8089;

$t->write_file_expand('nginx.conf', conf(2, <<"EOF"));
    log_format circuit_breaker_replay
        '\$msec \$request_time "\$proxy_host" "\$circuit_breaker_route" '
        '"\$upstream_addr" "\$upstream_status" "\$upstream_response_time" '
        '"\$upstream_header_time" "\$circuit_breaker_state" "\$circuit_breaker_msec" '
        '"\$request_uri"';
    access_log %%TESTDIR%%/replay.log circuit_breaker_replay;

    upstream slow {
@four        circuit_breaker jitter=0%;
        circuit_breaker_eject time=2s;
    }

    upstream uniform {
@four        circuit_breaker jitter=0%;
    }

    upstream keyed {
        hash \$arg_k;
@four        circuit_breaker jitter=0%;
    }

    upstream failing {
@five        circuit_breaker jitter=0%;
        circuit_breaker_eject time=60s;
    }

    upstream allfail {
@five        circuit_breaker jitter=0%;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /slow/ { proxy_pass http://slow; }
        location /uniform/ { proxy_pass http://uniform; }
        location /keyed/ { proxy_pass http://keyed; }
        location /failing/ { proxy_pass http://failing; }
        location /allfail/ { proxy_pass http://allfail; }
        location = /status { circuit_breaker_status; }
    }
EOF

my @hits = start($t, 8081 .. 8089);
my ($p4) = map { port($_) } 8084;

sub ejected_lines {
	my ($t, $up) = @_;
	my @l = ($t->read_file('error.log')
		=~ /^.*circuit breaker "$up" server \S+ ejected: .*$/mg);
	return @l;
}

# requests to /UP/ until error.log has an ejection line of UP or N were sent;
# returns how many were sent

our $seq = 0;

sub drive {
	my ($t, $up, $n, %o) = @_;
	my $sent = 0;
	while ($sent < $n) {
		http_get("/$up/x?n=" . $main::seq++);
		$sent++;
		last if !$o{all} && ejected_lines($t, $up);
	}
	return $sent;
}

###############################################################################

# a latency outlier: 8084 takes 200 ms, the others 20 ms

CB::Origin::behave($hits[$_], '* delay=20') for 0 .. 2;
CB::Origin::behave($hits[3], '* delay=200');

my $start = time();
my $sent = drive($t, 'slow', 600);
my @lines = ejected_lines($t, 'slow');
is(scalar @lines, 1, 'slow: one server ejected') or diag("after $sent requests");
like($lines[0] // '',
	qr/server 127\.0\.0\.1:$p4 ejected: latency p90 \d+ms is \d+\.\dx the pool's \d+ms/,
	'slow: the slow server, as a latency outlier, with its figures');
my ($x) = ($lines[0] // '') =~ /is (\d+\.\d)x/;
ok(defined $x && $x >= 3, 'slow: at least 3x the pool') or diag($lines[0]);
ok(time() - $start < 60, 'slow: within a minute of traffic');

my $b = breaker_at('/status?upstream=slow');
my ($s4) = grep { $_->{address} eq "127.0.0.1:$p4" } @{$b->{servers} // []};
is($s4->{state}, 'ejected', 'slow: the status page says ejected');
is($s4->{tripped}{by}, 'latency_outlier', 'slow: tripped by latency_outlier');
ok(($s4->{latency_ms}{p90} // 0) >= 150, 'slow: its p90 is on the status page')
	or diag(explain($s4->{latency_ms}));
is($b->{state}, 'closed', 'slow: the upstream stays closed');

# out of the pool: none of 40 requests reaches it before its ejection time ends

# cb-replay: the same server, for the same reason, at nearly the same request

my $d = $t->testdir();
my $conf = `$Test::Nginx::NGINX -p $d/ -c nginx.conf -e error-t.log -T 2>/dev/null`;
$t->write_file('nginx-T.conf', $conf);
my $out = `$replay --config $d/nginx-T.conf --transitions $d/transitions.txt $d/replay.log 2>&1`;
is($?, 0, 'replay: cb-replay ran') or diag($out);
my @uri = map { /"\/\w+\/x\?n=(\d+)"$/ ? $1 : undef } split /\n/, $t->read_file('replay.log');
my ($rline, $rwhy) = (eval { $t->read_file('transitions.txt') } // '')
	=~ /^(\d+) \S+ \+\S+ circuit breaker "slow" server 127\.0\.0\.1:$p4 ejected: (.*)$/m;
my ($lreq) = ($lines[0] // '') =~ /request: "GET \/slow\/x\?n=(\d+) /;
like($rwhy // '', qr/^latency p90 \d+ms is \d+\.\dx the pool's \d+ms/,
	'replay: the slow server, as a latency outlier') or diag($out);
my $rreq = defined $rline ? $uri[$rline - 1] : undef;
# The same request as a rule: the replay judges in each second of the module's clock at
# the first attempt to end in it, as live does; but it reads nginx's upstream response
# time, not the module's origin time, and a p90 on a bin's edge may cross a second later.
ok(defined $rreq && defined $lreq && abs($rreq - $lreq) <= 20,
	'replay: within a second\'s requests of the live ejection')
	or diag('live at request ' . ($lreq // '?') . ', replay at ' . ($rreq // '?'));
diag('live ejection at request ' . ($lreq // '?') . ', replay at ' . ($rreq // '?'))
	if $ENV{TEST_NGINX_VERBOSE};
is(() = (eval { $t->read_file('transitions.txt') } // '')
	=~ /circuit breaker "slow" server 127\.0\.0\.1:(?!$p4)\d+ ejected/g, 0,
	'replay: no other server');

my $before = CB::Origin::hits($hits[3]);
http_get('/slow/x') for 1 .. 40;
is(CB::Origin::hits($hits[3]) - $before, 0, 'slow: no request while out');

# still slow once its time is out: its probe is too slow against the pool's
# latency, and it stays out

sleep 2.5;
my $end = time() + 20;
http_get('/slow/x') while time() < $end
	&& $t->read_file('error.log') !~ /server 127\.0\.0\.1:$p4 ejected: probe too slow: \d+ms > \d+ms/;
like($t->read_file('error.log'),
	qr/server 127\.0\.0\.1:$p4 ejected: probe too slow: \d+ms > \d+ms/,
	'slow: a still-slow probe keeps it out');

# fast again: probes return it

CB::Origin::behave($hits[3], '* delay=20');
$end = time() + 60;
http_get('/slow/x') while time() < $end
	&& $t->read_file('error.log') !~ /server 127\.0\.0\.1:$p4 returned: /;
like($t->read_file('error.log'), qr/server 127\.0\.0\.1:$p4 returned: 20 good probes/,
	'slow: fast probes return it');

# a uniformly slow pool, and one server twice as slow: nobody

CB::Origin::behave($hits[$_], '* delay=60') for 0 .. 3;
drive($t, 'uniform', 200, all => 1);
is(scalar ejected_lines($t, 'uniform'), 0, 'uniform: all slow, nobody ejected');

CB::Origin::behave($hits[$_], '* delay=30') for 0 .. 2;
CB::Origin::behave($hits[3], '* delay=60');
drive($t, 'uniform', 200, all => 1);
is(scalar ejected_lines($t, 'uniform'), 0, 'uniform: one twice as slow, nobody ejected');

my $u = breaker_at('/status?upstream=uniform');
my ($u4) = grep { $_->{address} eq "127.0.0.1:$p4" } @{$u->{servers} // []};
ok(($u4->{latency_ms}{p90} // 0) >= 45, 'uniform: the slower server\'s p90 is shown')
	or diag(explain($u4));

# a hash balancer: the key picks the server, and a client picks the key

CB::Origin::behave($hits[3], '* delay=300');
http_get("/keyed/x?k=$_") for 1 .. 200;
is(scalar ejected_lines($t, 'keyed'), 0, 'keyed: hash judges nobody by default');
ok(CB::Origin::hits($hits[3], qr!^/keyed/!) >= 20, 'keyed: the slow server had its share');

# failures: one of five fails 10 % of its calls at random, the others never

CB::Origin::behave($hits[$_], '* delay=1') for 0 .. 3;
CB::Origin::behave($hits[$_], '* delay=1') for 4 .. 8;
CB::Origin::behave($hits[6], '* fail=10');
$sent = drive($t, 'failing', 2500);
@lines = ejected_lines($t, 'failing');
my $p7 = port(8087);
is(scalar @lines, 1, 'failing: one server ejected') or diag("after $sent requests");
like($lines[0] // '',
	qr/server 127\.0\.0\.1:$p7 ejected: failure rate \d+\.\d% \(\d+\/\d+\) is \d+\.\dx the pool's 0\.0%/,
	'failing: the failing server, as a failure outlier');
my $f = breaker_at('/status?upstream=failing');
my ($s7) = grep { $_->{address} eq "127.0.0.1:$p7" } @{$f->{servers} // []};
is($s7->{tripped}{by}, 'failure_outlier', 'failing: tripped by failure_outlier');
is($f->{state}, 'closed', 'failing: the upstream stays closed');

# five failing alike: the upstream's breaker's business, not ejection's

CB::Origin::behave($hits[$_], '* fail=10') for 4 .. 8;
drive($t, 'allfail', 1500, all => 1);
is(scalar ejected_lines($t, 'allfail'), 0, 'allfail: all failing 10 %, nobody ejected');

###############################################################################
