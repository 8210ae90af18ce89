#!/usr/bin/perl

# Subrequests share their main request's pool; a request's state is found
# only for that very request.  A static page that mirrors to, includes (SSI)
# or authorizes against (auth_request) a breaker-protected location reports
# no breaker in its own log line, whatever its subrequests met.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Response qw/ status body /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy mirror ssi auth_request/)
	->plan(10);

$t->write_file_expand('nginx.conf', conf(2, <<'EOF'));
    log_format cb '$uri $status route="$circuit_breaker_route" '
                  'state="$circuit_breaker_state"';
    access_log %%TESTDIR%%/cb.log cb;

    upstream up {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=1 failure_rate=1% open=30s;
    }

    upstream ok {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /fixed/ {
            proxy_pass http://up;
        }

        location /mir/ {
            mirror /fixed/m;
            root %%TESTDIR%%/html;
        }

        location /ssi/ {
            ssi on;
            root %%TESTDIR%%/html;
        }

        location /auth/ {
            auth_request /authz;
            root %%TESTDIR%%/html;
        }

        location = /authz {
            internal;
            proxy_pass http://ok/authz;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
        }

        location /pass/ {
            proxy_pass http://up;
            circuit_breaker_route pass;
        }
    }
EOF

mkdir $t->testdir() . "/html";
mkdir $t->testdir() . "/html/$_" for qw/ mir ssi auth /;
$t->write_file('html/mir/index.html', "static mirror page\n");
$t->write_file('html/ssi/page.html',
	"a<!--# include virtual=\"/fixed/s\" -->b\n");
$t->write_file('html/auth/index.html', "authorized page\n");

start($t, 8081);

###############################################################################

sub line {
	my ($t, $uri) = @_;
	my $log = $t->read_file('cb.log');
	my @l = grep { index($_, "$uri ") == 0 } split /\n/, $log;
	return $l[-1] // '';
}

# open the breaker of "up"

is(status(http_get('/fixed/x?status=500')), '500', 'trips on one failure');
is(status(http_get('/fixed/x')), '503', 'open');

my $r = http_get('/mir/index.html');
is(status($r), '200', 'mirror: the static page is served');
like(body($r) // '', qr/^a?<!--|^static mirror page/, 'mirror: its content');

$r = http_get('/ssi/page.html');
is(status($r), '200', 'ssi: the page is served');

$r = http_get('/auth/index.html');
is(status($r), '200', 'auth_request: authorized by a closed breaker');

# the access log is written when each request ends; let the mirror finish

sleep 0.3;

is(line($t, '/mir/index.html'), '/mir/index.html 200 route="" state=""',
	'mirror: the main request met no breaker');
is(line($t, '/ssi/page.html'), '/ssi/page.html 200 route="" state=""',
	'ssi: the main request met no breaker');
is(line($t, '/auth/index.html'), '/auth/index.html 200 route="" state=""',
	'auth_request: the main request met no breaker');

# a request that did meet one still says so

http_get('/pass/x');
is(line($t, '/pass/x'), '/pass/x 200 route="pass" state="closed"',
	'a proxied request reports its own breaker');

###############################################################################
