#!/usr/bin/perl

# Configuration: every bad directive fails "nginx -t" with nginx's own
# "[emerg] ... in FILE:LINE" wording; good configurations (the README's
# example, any directive order inside upstream {}) pass, and the order of
# directives in an upstream block does not change what the breaker does.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT /;
use CB::Nginx qw/ start /;
use CB::Config qw/ fill conf_fails conf_passes /;
use CB::Origin;
use CB::Response qw/ status /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy cache upstream_keepalive/)
	->has(qw/upstream_least_conn upstream_hash/)->plan(70);

###############################################################################

# A configuration around the parts under test: UPSTREAM (inside
# "upstream u"), HTTP (http level), LOCATION (inside "location /").

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

# a configuration that "nginx -t" must refuse: the template with PARTS
# filled in (see CB::Config::conf_fails for the rest)

sub bad {
	my ($t, $name, $parts, @emerg) = @_;
	conf_fails($t, $name, fill($template, %$parts), @emerg);
}

###############################################################################

my $cb = 'circuit_breaker';

# circuit_breaker parameters

bad($t, 'window not a duration', { UPSTREAM => "$cb window=abc;" },
	"$cb window=abc",
	qq{invalid value "window=abc" in "$cb" directive, }
	. 'must be whole seconds from 1s to 300s');

bad($t, 'window not whole seconds', { UPSTREAM => "$cb window=1500ms;" },
	"$cb window=",
	qq{invalid value "window=1500ms" in "$cb" directive, }
	. 'must be whole seconds from 1s to 300s');

bad($t, 'window over 300s', { UPSTREAM => "$cb window=301s;" },
	"$cb window=",
	qq{invalid value "window=301s" in "$cb" directive, }
	. 'must be whole seconds from 1s to 300s');

bad($t, 'window 0s', { UPSTREAM => "$cb window=0s;" },
	"$cb window=",
	qq{invalid value "window=0s" in "$cb" directive, }
	. 'must be whole seconds from 1s to 300s');

bad($t, 'min_requests=0', { UPSTREAM => "$cb window=5s min_requests=0;" },
	"$cb window=",
	qq{invalid value "min_requests=0" in "$cb" directive, }
	. 'must be at least 1');

bad($t, 'probes not a number', { UPSTREAM => "$cb probes=x;" },
	"$cb probes",
	qq{invalid value "probes=x" in "$cb" directive, }
	. 'a whole number of at least 1 is expected');

bad($t, 'failure_rate over 100%', { UPSTREAM => "$cb failure_rate=150%;" },
	"$cb failure_rate",
	qq{invalid value "failure_rate=150%" in "$cb" directive, }
	. 'must be a percentage from 0% to 100%');

bad($t, 'failure_rate without %', { UPSTREAM => "$cb failure_rate=50;" },
	"$cb failure_rate",
	qq{invalid value "failure_rate=50" in "$cb" directive, }
	. 'must be a percentage from 0% to 100%');

bad($t, 'slow_rate without %', { UPSTREAM => "$cb slow=1s slow_rate=50;" },
	"$cb slow",
	qq{invalid value "slow_rate=50" in "$cb" directive, }
	. 'must be a percentage from 0% to 100%');

bad($t, 'failure_rate=0%', { UPSTREAM => "$cb failure_rate=0%;" },
	"$cb failure_rate=0%",
	qq{invalid value "failure_rate=0%" in "$cb" directive, must be more than 0%});

bad($t, 'slow_rate=0%', { UPSTREAM => "$cb slow=1s slow_rate=0%;" },
	"$cb slow=1s slow_rate=0%",
	qq{invalid value "slow_rate=0%" in "$cb" directive, must be more than 0%});

# nginx's own time parser: a millisecond value refuses years and months, as
# proxy_read_timeout does

bad($t, 'probe_interval=1y', { UPSTREAM => "$cb probe_interval=1y;" },
	"$cb probe_interval=1y",
	qq{invalid value "probe_interval=1y" in "$cb" directive, }
	. 'a time is expected (e.g. 30s, 500ms, 2m; units: ms, s, m, h, d, w)');

bad($t, 'probe_status out of range', {
	UPSTREAM => "$cb probe_uri=/health probe_status=200-600;" },
	"$cb probe_uri",
	qq{invalid value "probe_status=200-600" in "$cb" directive, }
	. 'must be statuses or ranges from 100 to 599, such as 200-399');

bad($t, 'probe_timeout without probe_uri', {
	UPSTREAM => "$cb probe_timeout=1s;" },
	"$cb probe_timeout",
	qq{"probe_timeout" requires "probe_uri" in "$cb" directive, }
	. qq{or use "${cb}_probe uri=... timeout=..."});

bad($t, 'limit_max below limit_min', {
	UPSTREAM => "$cb limit=adaptive limit_min=10 limit_max=5;" },
	"$cb limit=adaptive",
	qq{"limit_max" must be between "limit_min" and 16777215 in "$cb" directive});

bad($t, 'limit_max above what the shared word holds', {
	UPSTREAM => "$cb limit=adaptive limit_max=16777216;" },
	"$cb limit=adaptive",
	qq{"limit_max" must be between "limit_min" and 16777215 in "$cb" directive});

bad($t, 'eject twice', { UPSTREAM => "$cb;\n        ${cb}_eject;\n"
		. "        ${cb}_eject off;" },
	"${cb}_eject off",
	qq{"${cb}_eject" directive is duplicate});

bad($t, 'eject time 0', { UPSTREAM => "$cb;\n        ${cb}_eject time=0s;" },
	"${cb}_eject",
	qq{invalid value "time=0s" in "${cb}_eject" directive, must be positive});

bad($t, 'eject in a location', { UPSTREAM => "$cb;",
	LOCATION => "${cb}_eject off;" },
	"${cb}_eject",
	qq{"${cb}_eject" directive is not allowed here});

bad($t, 'open=0s', { UPSTREAM => "$cb open=0s;" },
	"$cb open",
	qq{invalid value "open=0s" in "$cb" directive, must be positive});

bad($t, 'max_open below open', { UPSTREAM => "$cb open=1m max_open=30s;" },
	"$cb open",
	qq{"max_open" must not be less than "open" in "$cb" directive, }
	. 'or be left out to follow "open"');

bad($t, 'slow_rate without slow', { UPSTREAM => "$cb slow_rate=10%;" },
	"$cb slow_rate",
	qq{"slow_rate" requires "slow" in "$cb" directive});

bad($t, 'unknown parameter', { UPSTREAM => "$cb window=5s colour=red;" },
	"$cb window",
	qq{invalid parameter "colour=red" in "$cb" directive, }
	. 'expected one of: window, min_requests, failure_rate, slow, slow_rate, consecutive, open, max_open, jitter, probes, probe_interval, probe_latency, ramp, ramp_start, suspect_min, dry_run');

bad($t, 'unknown flag', { UPSTREAM => "$cb dry;" },
	"$cb dry",
	qq{invalid parameter "dry" in "$cb" directive, did you mean "dry_run"?});

bad($t, 'duplicate parameter', { UPSTREAM => "$cb open=1s open=2s;" },
	"$cb open",
	qq{duplicate parameter "open" in "$cb" directive});

# the directive itself: twice, outside an upstream

bad($t, 'circuit_breaker twice', {
	UPSTREAM => "$cb window=5s;\n        $cb window=6s;" },
	"$cb window=6s",
	qq{"$cb" directive is duplicate});

bad($t, 'circuit_breaker in a location', { UPSTREAM => "$cb;",
	LOCATION => "$cb window=7s;" },
	"$cb window=7s",
	qq{"$cb" directive is not allowed here});

bad($t, 'circuit_breaker at http level', { HTTP => "$cb window=7s;" },
	"$cb window=7s",
	qq{"$cb" directive is not allowed here});

# circuit_breaker_failure

bad($t, 'circuit_breaker_failure twice', {
	UPSTREAM => "$cb;\n        ${cb}_failure error;\n"
		. "        ${cb}_failure http_500;" },
	"${cb}_failure http_500",
	qq{"${cb}_failure" directive is duplicate});

bad($t, 'unknown failure class', {
	UPSTREAM => "$cb;\n        ${cb}_failure error http_404 timeout;" },
	"${cb}_failure",
	qq{invalid value "http_404" in "${cb}_failure" directive, }
	. 'expected one of: error, timeout, invalid_header, http_500 to http_599 (e.g. http_502), http_429, http_503_retry_after, grpc_unknown, grpc_deadline_exceeded, grpc_resource_exhausted, grpc_internal, grpc_unavailable, grpc_data_loss');

bad($t, 'failure class http_600', {
	UPSTREAM => "$cb;\n        ${cb}_failure http_600;" },
	"${cb}_failure",
	qq{invalid value "http_600" in "${cb}_failure" directive, }
	. 'expected one of: error, timeout, invalid_header, http_500 to http_599 (e.g. http_502), http_429, http_503_retry_after, grpc_unknown, grpc_deadline_exceeded, grpc_resource_exhausted, grpc_internal, grpc_unavailable, grpc_data_loss');

# found once the upstream block is parsed: named at the block, as nginx's own
# "no servers are inside upstream"

bad($t, 'circuit_breaker_failure without circuit_breaker', {
	UPSTREAM => "${cb}_failure error timeout;" },
	'upstream u {',
	qq{"${cb}_failure" requires "$cb" in upstream "u"});

# circuit_breaker_zone

bad($t, 'zone bad size', { UPSTREAM => "$cb;", HTTP => "${cb}_zone cb:lots;" },
	"${cb}_zone",
	'invalid zone size "lots", a size is expected (e.g. 1m, 512k; units: k, m)');

# nginx's own size parser: no "g", as limit_req_zone says

bad($t, 'zone of 100g', { UPSTREAM => "$cb;", HTTP => "${cb}_zone cb:100g;" },
	"${cb}_zone",
	'invalid zone size "100g", a size is expected (e.g. 1m, 512k; units: k, m)');

bad($t, 'zone too small', { UPSTREAM => "$cb;", HTTP => "${cb}_zone cb:8k;" },
	"${cb}_zone",
	'zone "cb" is too small, it must be at least 32k');

bad($t, 'zone without size', { UPSTREAM => "$cb;", HTTP => "${cb}_zone cb;" },
	"${cb}_zone",
	qq{invalid value "cb" in "${cb}_zone" directive, }
	. 'must be name:size, e.g. "circuit_breaker:1m"');

bad($t, 'zone without name', { UPSTREAM => "$cb;", HTTP => "${cb}_zone :1m;" },
	"${cb}_zone",
	'invalid zone name ":1m", must be name:size, e.g. "circuit_breaker:1m"');

bad($t, 'zone keys not a number', { UPSTREAM => "$cb;", HTTP => "${cb}_zone cb:1m keys=lots;" },
	"${cb}_zone",
	qq{invalid value "keys=lots" in "${cb}_zone" directive, }
	. 'must be a number of keys from 8 to 16777216');

bad($t, 'zone keys over half the zone', { UPSTREAM => "$cb;",
	HTTP => "${cb}_zone cb:1m keys=8192;" },
	"${cb}_zone",
	'"keys=8192" needs 602 KiB, more than half of the zone: give the zone at least 1204k');

# circuit_breaker_key

bad($t, 'key without a variable', { LOCATION => "${cb}_key origin;" },
	"${cb}_key",
	qq{invalid value "origin" in "${cb}_key" directive, the key must name a variable, such as \$host});

bad($t, 'key with an upstream companion', { LOCATION => "${cb}_key \$host limit=adaptive;" },
	"${cb}_key",
	qq{"limit" is an upstream's, not a parameter of "${cb}_key"});

bad($t, 'one key, two sets of parameters', { HTTP => "${cb}_key \$host min_requests=5;",
	LOCATION => "${cb}_key \$host min_requests=6;" },
	"${cb}_key \$host min_requests=6",
	qq{"${cb}_key \$host" is given with other parameters elsewhere: every }
	. qq{"${cb}_key \$host" judges the same breakers, give them the same parameters});

# circuit_breaker_class

bad($t, 'class not a variable', { LOCATION => "${cb}_class critical;" },
	"${cb}_class",
	qq{invalid value "critical" in "${cb}_class" directive, the class must be one variable, }
	. qq{such as \$cb_class, or "off"});

bad($t, 'class from the module itself', { LOCATION => "${cb}_class \$circuit_breaker_state;" },
	"${cb}_class",
	qq{invalid value "\$circuit_breaker_state" in "${cb}_class" directive, the class }
	. qq{cannot be one of the module's own variables});

bad($t, 'zone twice', { UPSTREAM => "$cb;",
	HTTP => "${cb}_zone cb:1m;\n    ${cb}_zone cb2:1m;" },
	"${cb}_zone cb2",
	qq{"${cb}_zone" directive is duplicate});

bad($t, 'zone name used by limit_req', { UPSTREAM => "$cb;",
	HTTP => "${cb}_zone cb:1m;\n"
		. '    limit_req_zone $binary_remote_addr zone=cb:1m rate=1r/s;' },
	'limit_req_zone',
	'the shared memory zone "cb" is already declared for a different use');

bad($t, 'zone in a location', { UPSTREAM => "$cb;",
	LOCATION => "${cb}_zone cb:1m;" },
	"${cb}_zone",
	qq{"${cb}_zone" directive is not allowed here});

# circuit_breaker_route

bad($t, 'bad route name', { UPSTREAM => "$cb;",
	LOCATION => "${cb}_route \"a b\";" },
	"${cb}_route",
	qq{invalid value "a b" in "${cb}_route" directive, }
	. 'a route is 1 to 64 letters, digits, "_", "-" or "."');

bad($t, 'route name too long', { UPSTREAM => "$cb;",
	LOCATION => "${cb}_route " . ('r' x 65) . ';' },
	"${cb}_route",
	qq{invalid value "} . ('r' x 65) . qq{" in "${cb}_route" directive, }
	. 'a route is 1 to 64 letters, digits, "_", "-" or "."');

bad($t, 'route twice', { UPSTREAM => "$cb;",
	LOCATION => "${cb}_route a;\n            ${cb}_route b;" },
	"${cb}_route b",
	qq{"${cb}_route" directive is duplicate});

bad($t, 'route named default', { UPSTREAM => "$cb;",
	LOCATION => "${cb}_route default;" },
	"${cb}_route",
	qq{invalid value "default" in "${cb}_route" directive, }
	. q{"default" names the upstream's own breaker});

# circuit_breaker_status, circuit_breaker_header

bad($t, 'status control=maybe', { UPSTREAM => "$cb;",
	LOCATION => "${cb}_status control=maybe;" },
	"${cb}_status",
	qq{invalid parameter "control=maybe" in "${cb}_status" directive, }
	. 'expected "control=on" or "control=off"');

bad($t, 'status twice', { UPSTREAM => "$cb;",
	HTTP => "server {\n        listen 127.0.0.1:8082;\n"
		. "        location /s {\n            ${cb}_status;\n"
		. "            ${cb}_status control=on;\n        }\n    }" },
	"${cb}_status control=on",
	qq{"${cb}_status" directive is duplicate});

# the status location answers itself: no other content handler, whichever
# directive comes first

bad($t, 'status after proxy_pass', { UPSTREAM => "$cb;",
	LOCATION => "${cb}_status;" },
	"${cb}_status",
	qq{"${cb}_status" cannot share a location with another content handler, }
	. 'give it a location of its own');

bad($t, 'status before proxy_pass', { UPSTREAM => "$cb;",
	HTTP => "server {\n        listen 127.0.0.1:8082;\n"
		. "        location /s {\n            ${cb}_status;\n"
		. "            proxy_pass http://u;\n        }\n    }" },
	"${cb}_status;",
	qq{"${cb}_status" cannot share a location with another content handler, }
	. 'give it a location of its own');

bad($t, 'status at http level', { UPSTREAM => "$cb;",
	HTTP => "${cb}_status;" },
	"${cb}_status",
	qq{"${cb}_status" directive is not allowed here});

bad($t, 'eject relative unknown', { UPSTREAM => "$cb;\n${cb}_eject relative=yes;" },
	"${cb}_eject relative=",
	qq{invalid value "relative=yes" in "${cb}_eject" directive, }
	. 'expected "on", "off", "latency" or "failures"');

bad($t, 'eject latency_factor too small',
	{ UPSTREAM => "$cb;\n${cb}_eject latency_factor=1.2;" },
	"${cb}_eject latency_factor=",
	qq{invalid value "latency_factor=1.2" in "${cb}_eject" directive, }
	. 'must be a factor from 1.5 to 100, e.g. "3" or "2.5x"');

bad($t, 'eject latency_factor with the rule off',
	{ UPSTREAM => "$cb;\n${cb}_eject relative=failures latency_factor=4;" },
	"${cb}_eject relative=",
	qq{"latency_factor" needs the latency rule, which "relative" turns off, }
	. qq{in "${cb}_eject" directive});

bad($t, 'eject ramp of no time', { UPSTREAM => "$cb;\n${cb}_eject ramp=0s;" },
	"${cb}_eject ramp=",
	qq{invalid value "ramp=0s" in "${cb}_eject" directive, }
	. 'must be positive, or "off"');

# a key's server passed over would move the key

bad($t, 'eject ramp with hash', { UPSTREAM => "server 127.0.0.1:%%PORT_8082%%;\n"
		. "hash \$uri;\n$cb;\n${cb}_eject ramp=5s;" },
	'upstream u {',
	qq{"ramp" of "${cb}_eject" needs round robin or least_conn, not a balancer }
	. 'that picks by a key or at random, in upstream "u"');

bad($t, 'header maybe', { UPSTREAM => "$cb;",
	LOCATION => "${cb}_header maybe;" },
	"${cb}_header",
	qq{invalid value "maybe" in "${cb}_header" directive, }
	. 'it must be "on" or "off"');

###############################################################################

# good configurations

conf_passes($t, 'the README\'s example', CB::Nginx::conf(1, <<'EOF'));
    proxy_cache_path %%TESTDIR%%/catalog keys_zone=catalog:1m;

    circuit_breaker_zone cb:10m;          # optional; without it a 1m zone named
                                          # "circuit_breaker" is created on first use
    upstream api {
        server 10.0.0.1:8080;
        server 10.0.0.2:8080;
        circuit_breaker window=10s min_requests=20 failure_rate=50%
                        slow=800ms slow_rate=50%
                        open=30s max_open=5m jitter=20%
                        probes=3 probe_interval=1s probe_latency=800ms;
        circuit_breaker_failure error timeout http_500 http_502 http_503 http_504;
    }
    server {
        listen 127.0.0.1:8080;
        location /checkout/ { proxy_pass http://api; circuit_breaker_route checkout; }
        location /catalog/  {
            proxy_pass http://api; circuit_breaker_route catalog;
            proxy_cache catalog; proxy_cache_use_stale error timeout updating;
        }
        location = /circuit_breaker { circuit_breaker_status; allow 127.0.0.1; deny all; }
    }
EOF

conf_passes($t, 'every parameter and class, default zone', fill($template,
	UPSTREAM => "$cb window=300s min_requests=1 failure_rate=0.01% "
		. 'slow=off slow_rate=100% open=1h max_open=2h jitter=0% '
		. 'probes=1 probe_interval=500ms probe_latency=off dry_run;'
		. "\n        ${cb}_failure error timeout invalid_header "
		. 'http_500 http_501 http_599 http_429 http_503_retry_after;',
	HTTP => "${cb}_header on;\n    ${cb}_route main;",
	LOCATION => "${cb}_route r-1.x_Y;\n            ${cb}_header off;"
		. "\n        }\n        location /s {\n"
		. "            ${cb}_status control=on;\n"
		. "        }\n        location /s2 {\n"
		. "            ${cb}_status control=off;"));

conf_passes($t, 'open above max_open default raises the cap', fill($template,
	UPSTREAM => "$cb open=10m;"));

###############################################################################

# directive order inside upstream {} does not matter: the breaker is in
# front of whatever balancer and keepalive the upstream has, whether
# circuit_breaker comes first or last

my $order = CB::Nginx::conf(1, <<'EOF');
    upstream first {
        circuit_breaker_failure http_500;
        circuit_breaker window=5s min_requests=2 open=10s jitter=0%;
        least_conn;
        keepalive 4;
        server 127.0.0.1:%%PORT_8081%%;
    }

    upstream last {
        least_conn;
        server 127.0.0.1:%%PORT_8081%%;
        keepalive 4;
        circuit_breaker window=5s min_requests=2 open=10s jitter=0%;
        circuit_breaker_failure http_500;
    }

    upstream middle {
        least_conn;
        circuit_breaker window=5s min_requests=2 open=10s jitter=0%;
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker_failure http_500;
        keepalive 4;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        proxy_http_version 1.1;
        proxy_set_header Connection "";

        location /first/ {
            proxy_pass http://first;
        }

        location /last/ {
            proxy_pass http://last;
        }

        location /middle/ {
            proxy_pass http://middle;
        }
    }
EOF

conf_passes($t, 'order: nginx -t', $order);

# "nginx -t" creates the pid file; left there, nginx-tests' run() would
# take it for a started nginx

ok(!-e $t->testdir() . '/nginx.pid', 'nginx -t leaves no pid file');

$t->write_file_expand('nginx.conf', $order);

my $hits = start($t, 8081);

for my $u (qw/ first last middle /) {
	my @s = map { status(http_get("/$u/?status=500")) } 1 .. 2;
	my $r = http_get("/$u/?status=200");

	ok("@s" eq '500 500' && $r =~ m!^HTTP/1\.1 503 !
		&& $r =~ /^X-Circuit-State: open\x0d?$/m
		&& CB::Origin::hits($hits, qr!^/$u/!) == 2,
		"order: $u trips") or diag("@s\n" . ($r // 'undef'));
}

###############################################################################
