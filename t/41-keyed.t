#!/usr/bin/perl

# circuit_breaker_key: a breaker per value of a variable, for origins reached through a
# variable (no upstream {} block) and for tenants. The variable location opens on its
# min_requests-th failure and answers 503 with Retry-After (or stale), two keys never affect
# each other, a key's half-open probe closes only its own breaker, an empty key is unchecked,
# the operator controls a breaker by its key, and a reload keeps them. Every count is taken
# at the origin.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT /;
use CB::Nginx qw/ conf start reload /;
use CB::Origin;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy map/)->plan(64);

my $conf = <<'EOF';
    circuit_breaker_zone cb:1m;

    map $arg_o $origin {
        a       127.0.0.1:8081;
        b       127.0.0.1:8082;
        default "";
    }

    map $uri $by_uri {
        ~^/mv/b/  127.0.0.1:8082;
        default   127.0.0.1:8081;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /o/ {
            circuit_breaker_key $origin min_requests=5 failure_rate=50% open=%%OPEN%% jitter=0%;
            proxy_pass http://$origin;
        }

        location /tenant/ {
            circuit_breaker_key $http_x_tenant min_requests=3 open=1h jitter=0%;
            proxy_pass http://127.0.0.1:8083;
        }

        # an error page passed to another origin (a closed port): its failure is not the key's
        location /fb/ {
            circuit_breaker_key $http_x_tenant min_requests=3 open=1h jitter=0%;
            proxy_pass http://127.0.0.1:8083;
            proxy_intercept_errors on;
            error_page 404 = @down;
        }

        location @down {
            proxy_pass http://127.0.0.1:8084;
        }

        # an error page that answers for a failing origin: the failure is the key's
        location /ef/ {
            circuit_breaker_key $http_x_tenant min_requests=3 open=1h jitter=0%;
            proxy_pass http://127.0.0.1:8083;
            proxy_intercept_errors on;
            error_page 500 = @ok;
        }

        location @ok {
            rewrite ^ /ok? break;
            proxy_pass http://127.0.0.1:8083;
        }

        # an error page in the same location, of another key
        location /mv/ {
            circuit_breaker_key $by_uri min_requests=3 open=1h jitter=0%;
            proxy_pass http://$by_uri;
            proxy_intercept_errors on;
            error_page 404 = /mv/b/fallback?status=500;
        }

        location /d/ {
            circuit_breaker_key $http_x_site;
            proxy_pass http://127.0.0.1:8083;
        }

        location /ep/ {
            circuit_breaker_key $http_x_tenant min_requests=3 open=1h jitter=0%;
            error_page 503 /ep-sorry;
            proxy_pass http://127.0.0.1:8083;
        }

        location = /ep-sorry {
            circuit_breaker_key $http_x_tenant min_requests=3 open=1h jitter=0%;
            return 200 "sorry\n";
        }

        location /status {
            circuit_breaker_status control=on;
        }
    }
EOF

sub write_conf {
	my ($t, $open) = @_;
	(my $c = $conf) =~ s/%%OPEN%%/$open/g;
	$t->write_file_expand('nginx.conf', conf(1, $c));
}

write_conf($t, '2s');
my ($a, $b, $tenants) = start($t, 8081, 8082, 8083);

# the keys as nginx sees them: the origins' addresses, ports as the harness gives them
my ($ka, $kb) = map { quotemeta('127.0.0.1:' . port($_)) } 8081, 8082;

###############################################################################

# Origin a fails; the breaker of key a opens on the fifth failure, and b is untouched.

for (1 .. 4) {
	like(http_get('/o/x?o=a&status=500'), qr!^HTTP/1.1 500!, "a: failure $_ reaches a");
}
like(http_get('/o/x?o=a&status=500'), qr!^HTTP/1.1 500!, 'a: fifth failure reaches a');
is(CB::Origin::hits($a), 5, 'a: five requests at the origin');

my $r = http_get('/o/x?o=a&status=500');
like($r, qr!^HTTP/1.1 503!, 'a: open, 503');
like($r, qr!Retry-After: \d+\x0d!, 'a: Retry-After');
like($r, qr!X-Circuit-State: open\x0d!, 'a: X-Circuit-State');
http_get('/o/x?o=a') for 1 .. 5;
is(CB::Origin::hits($a), 5, 'a: nothing more reaches a while open');

like(http_get('/o/x?o=b'), qr!^HTTP/1.1 200!, 'b: its own key passes');
is(CB::Origin::hits($b), 1, 'b: reached');
like($t->read_file('error.log'), qr/circuit breaker "\$origin" key "$ka" opened/,
	'the transition is logged with the key');

# The status page shows the open key's breaker, and the table's figures.

$r = http_get('/status');
like($r, qr/"upstream":"\$origin","route":"$ka","state":"open"/, 'status: the key is open');
like($r, qr/"keys":\{"used":2,"capacity":\d+,"promoted":1,"listed":1,"unlisted":0,"open":1\}/,
	'status: two keys, one promoted, listed and open');
unlike($r, qr/"route":"$kb"/, 'status: a healthy key has no breaker to show');

# Half-open: one probe at a time goes to a, which has healed, a probe interval (1 s) apart;
# three good ones (the default `probes`) close only a's breaker.

select undef, undef, undef, 2.3;
like(http_get('/o/x?o=a'), qr!^HTTP/1.1 200!, 'a: the probe after the cooldown');
for (1 .. 2) {
	select undef, undef, undef, 1.1;
	http_get('/o/x?o=a');
}
like(http_get('/o/x?o=a'), qr!^HTTP/1.1 200!, 'a: closed again');
is(CB::Origin::hits($a), 9, 'a: three probes and the next request reached a');
like($t->read_file('error.log'), qr/"\$origin" key "$ka" closed/, 'a: closed, logged');

# An empty key (no "o") passes unchecked: nginx answers 500 itself for an empty host, and
# nothing is judged.

for (1 .. 8) {
	http_get('/o/x?status=500');
}
like(http_get('/status'), qr/"keys":\{"used":2,/, 'an empty key makes no key');

# Tenants: one tenant's failures never open another's breaker.

for (1 .. 3) {
	http(<<EOF);
GET /tenant/x?status=500 HTTP/1.0
Host: localhost
X-Tenant: acme

EOF
}
like(http(<<EOF), qr!^HTTP/1.1 503!, 'tenant acme: open');
GET /tenant/x HTTP/1.0
Host: localhost
X-Tenant: acme

EOF
like(http(<<EOF), qr!^HTTP/1.1 200!, 'tenant globex: unaffected');
GET /tenant/x HTTP/1.0
Host: localhost
X-Tenant: globex

EOF
is(CB::Origin::hits($tenants), 4, 'tenants: three failures of acme, one request of globex');

# The error page's origin fails (nothing listens on 8084): the tenant's key counts nothing of
# it, so the fourth request still reaches the tenant's origin.

my @fb = map { http(<<EOF) =~ m!^HTTP/1.1 (\d+)! } 1 .. 4;
GET /fb/x?status=404 HTTP/1.0
Host: localhost
X-Tenant: fallback

EOF
is("@fb", '502 502 502 502', 'error page to another origin: its failures answered');
is(CB::Origin::hits($tenants, qr!^/fb/!), 4, 'error page to another origin: not the key\'s');

# An error page passed to a healthy origin answers for the failing one: the key counts the
# failures it replaced (settled as the request leaves for the error page), and opens.

my @ef = map { http(<<EOF) =~ m!^HTTP/1.1 (\d+)! } 1 .. 4;
GET /ef/x?status=500 HTTP/1.0
Host: localhost
X-Tenant: ef

EOF
is("@ef", '200 200 200 503', 'error page for a failing origin: the key opens on its failures');
is(CB::Origin::hits($tenants, qr!^/ef/!), 3, 'error page for a failing origin: three reached it');

# The error page stays in the location but goes to another key's origin (b, which fails):
# a's key counts none of b's failures.

my @mv = map { http_get("/mv/x$_?status=404") =~ m!^HTTP/1.1 (\d+)! } 1 .. 4;
is("@mv", '500 500 500 500', 'error page of another key: b\'s failures answered');
like(http_get('/mv/ok?status=200'), qr!^HTTP/1.1 200!, 'error page of another key: a not opened');


# The status page lists open keys; closed ones on request, by prefix, up to a limit, and
# counts the rest. a's breaker is closed now, acme's and ef's open (ef's the newer).

$r = http_get('/status');
like($r, qr/"route":"acme","state":"open"/, 'status: the open key is listed');
unlike($r, qr/"route":"$ka"/, 'status: the closed key is not');
like($r, qr/"promoted":3,"listed":2,"unlisted":1,"open":2\}/, 'status: the closed key is counted');
$r = http_get('/status?keys=all');
ok($r =~ /"route":"acme","state":"open"/ && $r =~ /"route":"$ka","state":"closed"/,
	'status: keys=all lists the closed key too');
$r = http_get('/status?keys=all&key_prefix=ac');
ok($r =~ /"route":"acme"/ && $r !~ /"route":"$ka"/, 'status: key_prefix');
$r = http_get('/status?keys=all&key_limit=1');
ok($r =~ /"route":"ef"/ && $r !~ /"route":"(acme|$ka)"/
	&& $r =~ /"listed":1,"unlisted":2,"open":2\}/,
	'status: key_limit keeps the newest open key first, and counts both open');
like(http_get('/status?key_limit=0'), qr!^HTTP/1.1 400.*from 1 to 100000!s,
	'status: a bad key_limit is refused');
$r = http_get('/status?format=prometheus');
ok($r =~ /route="acme"/ && $r !~ /route="\Q$ka\E"/
	&& $r =~ /^nginx_circuit_breaker_zone_keys_unlisted\{[^}]*\} 1$/m
	&& $r =~ /^nginx_circuit_breaker_zone_keys_open\{[^}]*\} 2$/m,
	'prometheus: series for the open keys only, the rest counted, the open ones too');

# A key of bytes that are not UTF-8 is written \xNN on the status page, and control takes it
# as written.

for (1 .. 3) {
	http("GET /tenant/x?status=500 HTTP/1.0\r\nHost: localhost\r\nX-Tenant: t\xffz\r\n\r\n");
}
like(http("GET /tenant/x HTTP/1.0\r\nHost: localhost\r\nX-Tenant: t\xffz\r\n\r\n"),
	qr!^HTTP/1.1 503!, 'a key not UTF-8: open');
like(http_get('/status'), qr/"route":"t\\\\xffz","state":"open"/, 'status: the key written \\xff');
$r = http(<<EOF);
POST /status?upstream=\$http_x_tenant&route=t%5Cxffz&action=force_close HTTP/1.0
Host: localhost
X-Circuit-Breaker-Control: 1

EOF
like($r, qr/"route":"t\\\\xffz","state":"closed"/, 'control: the key as written');
like(http("GET /tenant/x HTTP/1.0\r\nHost: localhost\r\nX-Tenant: t\xffz\r\n\r\n"),
	qr!^HTTP/1.1 200!, 'control: that very key closed');
like(http(<<EOF), qr!^HTTP/1.1 400.*xNN!s, 'control: a stray backslash refused');
POST /status?upstream=\$http_x_tenant&route=t%5Cq&action=reset HTTP/1.0
Host: localhost
X-Circuit-Breaker-Control: 1

EOF

# Control by key: force the tenant globex's breaker open, then reset acme's.

$r = http(<<EOF);
POST /status?upstream=\$http_x_tenant&route=globex&action=force_open HTTP/1.0
Host: localhost
X-Circuit-Breaker-Control: 1

EOF
like($r, qr!^HTTP/1.1 200!, 'control: force_open by key');
like($r, qr/"state":"open"/, 'control: its breaker is open');
like(http(<<EOF), qr!^HTTP/1.1 503!, 'control: globex short-circuited');
GET /tenant/x HTTP/1.0
Host: localhost
X-Tenant: globex

EOF
$r = http(<<EOF);
POST /status?upstream=\$http_x_tenant&route=acme&action=reset HTTP/1.0
Host: localhost
X-Circuit-Breaker-Control: 1

EOF
like($r, qr/"state":"closed"/, 'control: reset acme');
like(http(<<EOF), qr!^HTTP/1.1 200!, 'control: acme passes again');
GET /tenant/x HTTP/1.0
Host: localhost
X-Tenant: acme

EOF
like(http(<<EOF), qr!^HTTP/1.1 403!, 'control: by key, refused without the control header');
POST /status?upstream=\$http_x_tenant&route=acme&action=force_open HTTP/1.0
Host: localhost

EOF
like(http(<<EOF), qr!^HTTP/1.1 403!, 'control: by key, refused from another site');
POST /status?upstream=\$http_x_tenant&route=acme&action=force_open HTTP/1.0
Host: localhost
X-Circuit-Breaker-Control: 1
Origin: http://evil.example
Sec-Fetch-Site: cross-site

EOF
like(http(<<EOF), qr!^HTTP/1.1 400!, 'control: a key has no servers to eject');
POST /status?upstream=\$http_x_tenant&route=acme&action=eject HTTP/1.0
Host: localhost
X-Circuit-Breaker-Control: 1

EOF

# An error_page after a key's 503 shows its page: the request is not judged again there.

$r = http(<<EOF);
GET /ep/x HTTP/1.0
Host: localhost
X-Tenant: globex

EOF
like($r, qr!^HTTP/1.1 503!, 'error_page: the status stays 503');
like($r, qr!sorry!, 'error_page: its page, not judged again');

# A key's bytes are written safely in the log.

for (1 .. 3) {
	http(<<EOF);
GET /tenant/x?status=500 HTTP/1.0
Host: localhost
X-Tenant: q"x\\y

EOF
}
like($t->read_file('error.log'), qr/key "q\\x22x\\x5cy" opened/, 'a key is escaped in the log');

like(http(<<EOF), qr!^HTTP/1.1 404!, 'control: an unknown key family is not found');
POST /status?upstream=\$nope&route=x&action=reset HTTP/1.0
Host: localhost
X-Circuit-Breaker-Control: 1

EOF

# A reload with the same parameters keeps an open key open.

for (1 .. 10) {
	last if http_get('/o/x?o=a&status=500') =~ /^HTTP\/1.1 503/;
}
like(http_get('/o/x?o=a'), qr!^HTTP/1.1 503!, 'a: open again');
my $before = CB::Origin::hits($a);
write_conf($t, '1h');
ok(reload($t), 'reloaded');
like(http_get('/o/x?o=a'), qr!^HTTP/1.1 503!, 'a: still open after a reload that retuned it');
is(CB::Origin::hits($a), $before, 'a: no request reached a across the reload');
like($t->read_file('error.log'), qr/circuit breaker "\$origin" key "$ka": /,
	'the reload names the retuned key');

# The defaults, with many requests in flight: 40 failing calls of one site at once, each
# answered after 500 ms. Those judged before 20 failures were recorded reach the origin
# (at least the default min_requests, at most all); then the key is open and the origin
# sees no more.

$t->write_file('burst.py', <<'EOF');
import http.client, sys, threading
port, n = int(sys.argv[1]), int(sys.argv[2])
codes = []
def one():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/d/x?status=500&delay=500", headers={"X-Site": "burst"})
    codes.append(c.getresponse().status)
ts = [threading.Thread(target=one) for _ in range(n)]
[t.start() for t in ts]
[t.join() for t in ts]
print(" ".join(str(c) for c in sorted(set(codes))), len(codes))
EOF
my $burst = `python3 @{[ $t->testdir() ]}/burst.py @{[ port(8080) ]} 40`;
like($burst, qr/^500(?: 503)? 40$/, 'defaults: 40 calls in flight at once, each answered');
my $burst_hits = CB::Origin::hits($tenants, qr!^/d/!);
ok($burst_hits >= 20 && $burst_hits <= 40, "defaults: $burst_hits of 40 reached the origin");
like(http(<<EOF), qr!^HTTP/1.1 503!, 'defaults: then the key is open');
GET /d/x HTTP/1.0
Host: localhost
X-Site: burst

EOF
is(CB::Origin::hits($tenants, qr!^/d/!), $burst_hits, 'defaults: and its origin sees no more');

###############################################################################
