#!/usr/bin/perl

# Configuration errors that teach: every refusal of "nginx -t" says what would
# be valid (the units of a time, the failure classes, a near parameter's name,
# the name=value form, the directive a companion's parameter moved to); the
# breaker's companions as directives of their own (circuit_breaker_probe,
# circuit_breaker_limit, circuit_breaker_retry_budget), in any order with
# circuit_breaker, refused without it or beside the deprecated parameter that
# says the same; and the one warning the deprecated spelling gets.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT /;
use CB::Nginx qw/ nginx_t /;
use CB::Config qw/ fill conf_fails conf_passes /;
use CB::Status qw/ breaker_at /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(41);

###############################################################################

my $template = CB::Nginx::conf(1, <<'EOF');
HTTP

    upstream u {
        server 127.0.0.1:%%PORT_8081%%;
UPSTREAM
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location / {
            proxy_pass http://u;
LOCATION
        }
    }
EOF

sub bad {
	my ($t, $name, $parts, @emerg) = @_;
	conf_fails($t, $name, fill($template, %$parts), @emerg);
}

my $cb = 'circuit_breaker';
my $time = 'a time is expected (e.g. 30s, 500ms, 2m; units: ms, s, m, h, d, w)';
my $own = 'expected one of: window, min_requests, failure_rate, slow, '
	. 'slow_rate, consecutive, open, max_open, jitter, probes, probe_interval, '
	. 'probe_latency, ramp, ramp_start, suspect_min, dry_run';

###############################################################################

# values: what is valid

bad($t, 'a time with a unit nginx does not know',
	{ UPSTREAM => "$cb open=30sec;" }, "$cb open",
	qq{invalid value "open=30sec" in "$cb" directive, $time});

bad($t, 'slow neither a time nor off', { UPSTREAM => "$cb slow=fast;" },
	"$cb slow",
	qq{invalid value "slow=fast" in "$cb" directive, a time (e.g. 800ms, }
	. '30s; units: ms, s, m, h, d, w) or "off" is expected');

bad($t, 'a count that is no number', { UPSTREAM => "$cb min_requests=many;" },
	"$cb min_requests",
	qq{invalid value "min_requests=many" in "$cb" directive, }
	. 'a whole number of at least 1 is expected');

bad($t, 'consecutive=0', { UPSTREAM => "$cb consecutive=0;" },
	"$cb consecutive",
	qq{invalid value "consecutive=0" in "$cb" directive, }
	. 'must be a number of at least 1, or "off"');

bad($t, 'a failure class nginx has no such status for', {
	UPSTREAM => "$cb;\n        ${cb}_failure error http_404;" },
	"${cb}_failure",
	qq{invalid value "http_404" in "${cb}_failure" directive, expected one }
	. 'of: error, timeout, invalid_header, http_500 to http_599 (e.g. '
	. 'http_502), http_429, http_503_retry_after, grpc_unknown, '
	. 'grpc_deadline_exceeded, grpc_resource_exhausted, grpc_internal, '
	. 'grpc_unavailable, grpc_data_loss');

bad($t, 'an eject time', { UPSTREAM => "$cb;\n        ${cb}_eject time=soon;" },
	"${cb}_eject",
	qq{invalid value "time=soon" in "${cb}_eject" directive, $time});

# parameters: a near name, the name=value form, the list

bad($t, 'a misspelled parameter', { UPSTREAM => "$cb failure_rte=20%;" },
	"$cb failure_rte",
	qq{invalid parameter "failure_rte=20%" in "$cb" directive, }
	. 'did you mean "failure_rate"?');

bad($t, 'a parameter without its "="', {
	UPSTREAM => "$cb failure_rate 20%;" }, "$cb failure_rate",
	qq{invalid parameter "failure_rate" in "$cb" directive, parameters are }
	. 'given as name=value, e.g. "failure_rate=50%"');

bad($t, 'a value without its name', { UPSTREAM => "$cb 20%;" }, "$cb 20%",
	qq{invalid parameter "20%" in "$cb" directive, parameters are given as }
	. 'name=value: "failure_rate=20%", "slow_rate=20%", "jitter=20%" or '
	. '"ramp_start=20%"');

bad($t, 'nothing near', { UPSTREAM => "$cb colour=red;" }, "$cb colour",
	qq{invalid parameter "colour=red" in "$cb" directive, $own});

bad($t, 'a misspelled companion parameter names its directive', {
	UPSTREAM => "$cb probe_ur=/health;" }, "$cb probe_ur",
	qq{invalid parameter "probe_ur=/health" in "$cb" directive, }
	. qq{did you mean "${cb}_probe uri=..."?});

bad($t, 'a companion directive\'s parameter', {
	UPSTREAM => "$cb uri=/health;" }, "$cb uri",
	qq{invalid parameter "uri=/health" in "$cb" directive, "uri" is a }
	. qq{parameter of its own directive: "${cb}_probe uri=/health"});

bad($t, 'an eject parameter misspelled', {
	UPSTREAM => "$cb;\n        ${cb}_eject tme=5s;" }, "${cb}_eject",
	qq{invalid parameter "tme=5s" in "${cb}_eject" directive, }
	. 'did you mean "time"?');

# the companions' directives

bad($t, 'probe without uri or grpc', {
	UPSTREAM => "$cb;\n        ${cb}_probe timeout=1s;" }, "${cb}_probe",
	qq{"${cb}_probe" must have "uri" or "grpc" parameter, }
	. qq{e.g. "${cb}_probe uri=/healthz"});

bad($t, 'probe with the old parameter name', {
	UPSTREAM => "$cb;\n        ${cb}_probe probe_uri=/health;" },
	"${cb}_probe",
	qq{invalid parameter "probe_uri=/health" in "${cb}_probe" directive, }
	. 'did you mean "uri"?');

bad($t, 'probe timeout', {
	UPSTREAM => "$cb;\n        ${cb}_probe uri=/h timeout=3sec;" },
	"${cb}_probe",
	qq{invalid value "timeout=3sec" in "${cb}_probe" directive, $time});

bad($t, 'probe uri and grpc', {
	UPSTREAM => "$cb;\n        ${cb}_probe uri=/h grpc=;" },
	"${cb}_probe",
	qq{"uri" and "grpc" are mutually exclusive in "${cb}_probe" directive, }
	. 'a probe is HTTP or gRPC');

bad($t, 'probe twice', {
	UPSTREAM => "$cb;\n        ${cb}_probe uri=/a;\n"
		. "        ${cb}_probe uri=/b;" },
	"${cb}_probe uri=/b", qq{"${cb}_probe" directive is duplicate});

bad($t, 'limit mode', { UPSTREAM => "$cb;\n        ${cb}_limit static;" },
	"${cb}_limit",
	qq{invalid value "static" in "${cb}_limit" directive, must be "adaptive"});

bad($t, 'limit bounds', {
	UPSTREAM => "$cb;\n        ${cb}_limit adaptive min=10 max=5;" },
	"${cb}_limit",
	qq{"max" must be between "min" and 16777215 in "${cb}_limit" directive});

bad($t, 'retry budget rate', {
	UPSTREAM => "$cb;\n        ${cb}_retry_budget lots;" },
	"${cb}_retry_budget",
	qq{invalid value "lots" in "${cb}_retry_budget" directive, }
	. 'must be a percentage from 0% to 100%, or "off"');

bad($t, 'retry budget parameter misspelled', {
	UPSTREAM => "$cb;\n        ${cb}_retry_budget 20% mn=1;" },
	"${cb}_retry_budget",
	qq{invalid parameter "mn=1" in "${cb}_retry_budget" directive, }
	. 'did you mean "min"?');

bad($t, 'probe in a location', { UPSTREAM => "$cb;",
	LOCATION => "${cb}_probe uri=/h;" }, "${cb}_probe",
	qq{"${cb}_probe" directive is not allowed here});

# a companion without the breaker: found once the upstream block is parsed

bad($t, 'probe without circuit_breaker', {
	UPSTREAM => "${cb}_probe uri=/health;" }, 'upstream u {',
	qq{"${cb}_probe" requires "$cb" in upstream "u"});

bad($t, 'limit without circuit_breaker', {
	UPSTREAM => "${cb}_limit adaptive;" }, 'upstream u {',
	qq{"${cb}_limit" requires "$cb" in upstream "u"});

bad($t, 'eject without circuit_breaker', {
	UPSTREAM => "${cb}_eject time=5s;" }, 'upstream u {',
	qq{"${cb}_eject" requires "$cb" in upstream "u"});

bad($t, 'retry budget without circuit_breaker', {
	UPSTREAM => "${cb}_retry_budget 10%;" }, 'upstream u {',
	qq{"${cb}_retry_budget" requires "$cb" in upstream "u"});

# both spellings for one upstream, in either order

bad($t, 'probe_uri, then circuit_breaker_probe', {
	UPSTREAM => "$cb probe_uri=/a;\n        ${cb}_probe uri=/b;" },
	"${cb}_probe",
	qq{"${cb}_probe" duplicates the "probe_uri" parameter of "$cb", }
	. qq{keep "${cb}_probe" only});

bad($t, 'circuit_breaker_limit, then limit=adaptive', {
	UPSTREAM => "${cb}_limit adaptive;\n        $cb limit=adaptive;" },
	"$cb limit",
	qq{the "limit" parameter of "$cb" duplicates "${cb}_limit", }
	. qq{keep "${cb}_limit" only});

bad($t, 'retry_budget=off, then circuit_breaker_retry_budget', {
	UPSTREAM => "$cb retry_budget=off;\n        ${cb}_retry_budget 10%;" },
	"${cb}_retry_budget",
	qq{"${cb}_retry_budget" duplicates the "retry_budget" parameter of }
	. qq{"$cb", keep "${cb}_retry_budget" only});

###############################################################################

# the new spelling, before or after circuit_breaker: no complaint

conf_passes($t, 'companions after circuit_breaker', fill($template,
	UPSTREAM => "$cb window=5s;\n"
		. "        ${cb}_probe uri=/health host=api status=200-299 "
		. "timeout=500ms;\n"
		. "        ${cb}_limit adaptive min=2 max=50 initial=10 "
		. "tolerance=30% interval=200ms samples=10 remeasure=20s;\n"
		. "        ${cb}_retry_budget 10% min=1;"));

conf_passes($t, 'companions before circuit_breaker', fill($template,
	UPSTREAM => "${cb}_retry_budget off;\n"
		. "        ${cb}_probe grpc=pkg.Health timeout=1s;\n"
		. "        ${cb}_limit adaptive;\n"
		. "        $cb window=5s;"));

# the old spelling: still taken, with one warning per circuit_breaker that
# names the new directives

$t->write_file_expand('old.conf', fill($template,
	UPSTREAM => "$cb window=5s probe_uri=/health probe_timeout=1s "
		. "limit=adaptive limit_max=50 retry_budget=10% retry_min=1;",
	HTTP => "upstream v {\n        server 127.0.0.1:%%PORT_8081%%;\n"
		. "        $cb probe_grpc= probes=2;\n    }"));

my ($rc, $out) = nginx_t($t, 'old.conf');
my @warn = $out =~ /^nginx: \[warn\] (.*)$/mg;
my $file = $t->testdir() . '/old.conf';
my @lines = split /\n/, $t->read_file('old.conf');
my ($v) = grep { $lines[$_ - 1] =~ /probe_grpc/ } 1 .. @lines;
my ($u) = grep { $lines[$_ - 1] =~ /probe_uri/ } 1 .. @lines;

is($rc, 0, 'old spelling: nginx -t passes') or diag($out);
unlike($out, qr/\[emerg\]/, 'old spelling: no error');
is(scalar @warn, 2, 'old spelling: one warning per circuit_breaker')
	or diag($out);
is($warn[0], qq{the "probe_grpc" parameter of "$cb" is deprecated, use }
	. qq{"${cb}_probe grpc=..." instead in $file:$v},
	'old spelling: the warning names circuit_breaker_probe');
is($warn[1], qq{the "probe_uri", "limit" and "retry_budget" parameters of }
	. qq{"$cb" are deprecated, use "${cb}_probe uri=...", }
	. qq{"${cb}_limit adaptive ..." and "${cb}_retry_budget RATE ..." }
	. qq{instead in $file:$u},
	'old spelling: one warning names every new directive');

# the breaker's own probes= and probe_interval= are no companions

conf_passes($t, 'probes and probe_interval are the breaker\'s own',
	fill($template, UPSTREAM => "$cb probes=2 probe_interval=2s "
		. 'probe_latency=1s;'));

###############################################################################

# both spellings mean the same: two upstreams, one in each, show the same
# probe, limit and retry budget on the status page

$t->write_file_expand('nginx.conf', CB::Nginx::conf(1, <<'EOF'));
    upstream old {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=5s probe_uri=/health?deep=1 probe_timeout=500ms
                        limit=adaptive limit_initial=7 limit_max=40
                        retry_budget=50% retry_min=2;
    }

    upstream new {
        circuit_breaker_retry_budget 50% min=2;
        circuit_breaker_limit adaptive initial=7 max=40;
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=5s;
        circuit_breaker_probe uri=/health?deep=1 timeout=500ms;
    }

    upstream plain {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=5s;
        circuit_breaker_retry_budget off;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /old/ { proxy_pass http://old; }
        location /new/ { proxy_pass http://new; }
        location /plain/ { proxy_pass http://plain; }
        location = /status { circuit_breaker_status; }
    }
EOF

$t->run();

sub shown {
	my $b = breaker_at("/status?upstream=$_[0]&route=default");
	return join ' ', map { $_ // 'none' } $b->{probe_uri},
		$b->{limit} && $b->{limit}{limit},
		$b->{retries} && $b->{retries}{window}{allowance};
}

like(shown('old'), qr!^/health\?deep=1 \d+ 20$!, 'old spelling: probe, limit, budget');
is(shown('new'), shown('old'), 'new spelling: the same');
is(shown('plain'), 'none none none', 'circuit_breaker_retry_budget off');
