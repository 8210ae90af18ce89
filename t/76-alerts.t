#!/usr/bin/perl

# contrib/ for Prometheus users: contrib/prometheus/alerts.yml passes
# "promtool check rules" and its unit tests ("promtool test rules
# alerts_test.yml"), which make each alert fire and not fire; every query of
# the Grafana dashboard parses (contrib/grafana/check-queries); and every
# metric the rules and the dashboard name is one the module really exposes.
#
# Skips without promtool, unless TEST_NGINX_PROMTOOL_REQUIRED is set.
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/76-alerts.t

###############################################################################

use warnings;
use strict;

use Test::More;

use File::Spec;
use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Response qw/ status body /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my ($promtool) = grep { -f && -x _ }
	map { File::Spec->catfile($_, 'promtool') } File::Spec->path();

if (!$promtool) {
	if ($ENV{TEST_NGINX_PROMTOOL_REQUIRED}) {
		plan(tests => 1);
		fail('promtool is required (TEST_NGINX_PROMTOOL_REQUIRED) but not in PATH');
		exit;
	}
	plan(skip_all => 'no promtool in PATH (Debian package "prometheus")');
}

my $contrib = "$FindBin::Bin/../contrib";
my $alerts = "$contrib/prometheus/alerts.yml";
my $alerts_test = "$contrib/prometheus/alerts_test.yml";
my $dashboard = "$contrib/grafana/nginx-circuit-breaker.json";

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(11);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    circuit_breaker_zone cb:1m;

    upstream up {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 open=30s jitter=0%;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /d/ {
            proxy_pass http://up;
        }

        location /r/ {
            proxy_pass http://up;
            circuit_breaker_route checkout;
        }

        location = /status {
            circuit_breaker_status;
        }
    }
EOF

start($t, 8081);

###############################################################################

sub slurp {
	my ($file) = @_;
	open my $fh, '<', $file or die "$file: $!\n";
	local $/;
	return <$fh>;
}

# promtool on the rules and their unit tests

my $out = `$promtool check rules $alerts 2>&1`;
ok($? == 0 && $out =~ /SUCCESS: 5 rules found/,
	'promtool check rules alerts.yml') or diag($out);

# promtool resolves rule_files relative to the test file
$out = `$promtool test rules $alerts_test 2>&1`;
ok($? == 0 && $out =~ /SUCCESS/, 'promtool test rules alerts_test.yml')
	or diag($out);

# each alert is tested firing and not firing

my $rules = slurp($alerts);
my $tests = slurp($alerts_test);
my @names = $rules =~ /^\s*-\s*alert:\s*(\w+)/mg;
is(join(' ', sort @names), join(' ', sort qw/ CircuitBreakerStuckOpen
	CircuitBreakerFlapping CircuitBreakerZoneNearlyFull
	CircuitBreakerAllocationFailures CircuitBreakerDryRunWouldShortCircuit /),
	'the five alerts');
my @untested = grep {
	$tests !~ /alertname:\s*$_\s*\n\s*exp_alerts:\s*\[\]/
	|| $tests !~ /alertname:\s*$_\s*\n\s*exp_alerts:\s*\n\s*-\s*exp_labels/
} @names;
is("@untested", '', 'every alert tested firing and not firing');

# every Grafana query parses

$out = `$^X $contrib/grafana/check-queries $dashboard 2>&1`;
ok($? == 0 && $out =~ /(\d+) queries from 1 dashboard\(s\): all valid/
	&& $1 >= 10, 'contrib/grafana/check-queries: every query valid')
	or diag($out);

# ... and it fails on a query that does not parse

my $bad = slurp($dashboard);
$bad =~ s/nginx_circuit_breaker_failure_rate\{/nginx_circuit_breaker_failure_rate{x=\$zone,/
	or die "no failure_rate query in the dashboard\n";
$t->write_file('bad.json', $bad);
$out = `$^X $contrib/grafana/check-queries @{[ $t->testdir() ]}/bad.json 2>&1`;
ok($? != 0 && $out =~ /INVALID/, 'check-queries refuses a bad query')
	or diag($out);

# the metrics they name are the module's: an open breaker with latency
# samples and a scheduled probe exposes every family

is(join(' ', map { status(http_get("/d/x?status=500&n=$_")) } 1 .. 5),
	'500 500 500 500 503', 'origin fails: open');
is(status(http_get('/r/x')), 200, 'a route breaker');

my $text = body(http_get('/status?format=prometheus')) // '';
my %family = map { $_ => 1 } $text =~ /^# TYPE (\w+) /mg;
ok($family{nginx_circuit_breaker_retry_at_seconds}
	&& $family{nginx_circuit_breaker_latency_seconds},
	'every family present') or diag($text);

for my $what ([ 'alerts.yml', $rules ], [ 'the dashboard', slurp($dashboard) ]) {
	my ($name, $source) = @$what;
	my %used = map { $_ => 1 } $source =~ /\b(nginx_circuit_breaker_\w+)/g;
	my @unknown = grep { !$family{$_} } sort keys %used;
	ok(keys %used >= 5 && !@unknown, "$name names real metrics only")
		or diag("not exposed: @unknown");
}

###############################################################################
