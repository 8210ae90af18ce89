#!/usr/bin/perl

# Another site's page in the operator's browser (headless Chromium) cannot
# change a breaker or a server: a page served from another port submits
# hidden forms (urlencoded and text/plain) and sends fetch(..., {mode:
# 'no-cors'}) requests (with and without the control header, which no-cors
# drops), a CORS fetch with the header (its preflight is refused) and a
# beacon to a control=on location that allow/deny lets the operator's
# machine reach; once from localhost (cross-site), once from 127.0.0.1 on
# another port (same-site). Every request that arrived is refused (counted
# in error.log, so the test cannot pass by sending nothing), no breaker and
# no server changes, and then the dashboard's own buttons still force open,
# reset, eject and restore.
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/97-dashboard-cross-site.t

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Browser;
use CB::Nginx qw/ conf start log_size log_since /;
use CB::Origin;
use CB::Status qw/ breakers /;
use CB::Response qw/ status /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy access/);
CB::Browser::plan($t, 36);

$t->write_file_expand('nginx.conf', conf(1, <<'EOF'));
    circuit_breaker_zone cb:1m;

    upstream up {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=4 open=60s jitter=0%;
    }

    upstream pool {
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
        circuit_breaker window=10s min_requests=4 open=60s jitter=0%;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /d/ {
            proxy_pass http://up;
        }

        # docs/status.md's control location: the operator's machine may
        location = /circuit_breaker {
            circuit_breaker_status control=on;
            allow 127.0.0.1;
            deny all;
        }
    }

    # another site: its page, on another port
    server {
        listen       127.0.0.1:8085;
        server_name  localhost;

        location = /attack.html {
            default_type text/html;
            alias %%TESTDIR%%/attack.html;
        }
    }
EOF

my $target = 'http://127.0.0.1:' . port(8080) . '/circuit_breaker';
my $s2 = '127.0.0.1:' . port(8082);

$t->write_file('attack.html', <<"EOF");
<!DOCTYPE html>
<html><body>
<iframe name="sink1"></iframe><iframe name="sink2"></iframe><iframe name="sink3"></iframe>
<form id="f1" method="POST" target="sink1"
      action="$target?upstream=up&amp;action=force_open">
<input name="x" value="1"></form>
<form id="f2" method="POST" target="sink2" enctype="text/plain"
      action="$target?upstream=pool&amp;server=$s2&amp;action=eject">
<input name="x" value="1"></form>
<form id="f3" method="POST" target="sink3" enctype="multipart/form-data"
      action="$target?upstream=up&amp;action=force_close">
<input name="X-Circuit-Breaker-Control" value="1"></form>
<pre id="result"></pre>
<script>
const target = '$target';
const tries = [
  ['no-cors fetch', () => fetch(target + '?upstream=up&action=force_open',
    {method: 'POST', mode: 'no-cors', body: 'x=1',
     headers: {'Content-Type': 'application/x-www-form-urlencoded'}})],
  ['no-cors fetch with the header', () => fetch(target + '?upstream=up&action=force_open',
    {method: 'POST', mode: 'no-cors', headers: {'X-Circuit-Breaker-Control': '1'}})],
  ['no-cors fetch, eject', () => fetch(target + '?upstream=pool&server=$s2&action=eject',
    {method: 'POST', mode: 'no-cors', credentials: 'include'})],
  ['cors fetch with the header', () => fetch(target + '?upstream=up&action=force_open',
    {method: 'POST', headers: {'X-Circuit-Breaker-Control': '1'}})],
  ['beacon', async () => navigator.sendBeacon(target + '?upstream=up&action=force_open', 'x')],
];
(async () => {
  for (const id of ['f1', 'f2', 'f3']) document.getElementById(id).submit();
  const log = [];
  for (const [name, send] of tries) {
    try {
      const r = await send();
      log.push(name + ': ' + (r && r.type ? r.type + ' ' + r.status : String(r)));
    } catch (e) {
      log.push(name + ': refused ' + e.name);
    }
  }
  document.getElementById('result').textContent = log.join('\\n') + '\\ndone';
})();
</script>
</body></html>
EOF

start($t, 8081, 8082);

###############################################################################

sub breaker {
	my ($upstream) = @_;
	my @b = breakers("/circuit_breaker?upstream=$upstream&route=default");
	return @b == 1 ? $b[0] : {};
}

sub unchanged {
	my ($name, $opened) = @_;
	my ($b, $pool) = (breaker('up'), breaker('pool'));
	my @out = grep { $_->{state} ne 'in' || defined $_->{forced} }
		@{ $pool->{servers} || [] };
	ok($b->{state} eq 'closed' && !defined $b->{forced}
		&& $b->{totals}{opened} == $opened
		&& @{ $pool->{servers} || [] } == 2 && !@out,
		"$name: no breaker, no server changed") or diag(explain([ $b, $pool ]));
}

my $b = CB::Browser->new($t);

for my $case ([ 'cross-site', 'localhost' ], [ 'same-site', '127.0.0.1' ]) {
	my ($site, $host) = @$case;
	my $log0 = log_size($t);

	my $r = $b->drive('open',
		url => "http://$host:" . port(8085) . '/attack.html');
	ok($r->{ok} && $r->{status} == 200, "$site: the other site's page");
	$r = $b->drive('text', selector => '#result:not(:empty)');
	my $result = $r->{text} // '';
	like($result, qr/done$/, "$site: it sent everything") or diag($result);
	like($result, qr/^cors fetch with the header: refused TypeError$/m,
		"$site: the CORS fetch with the header: no answer (preflight)");
	# Cross-Origin-Resource-Policy: the browser withholds even the opaque answer
	like($result, qr/^no-cors fetch: refused TypeError$/m,
		"$site: a no-cors fetch gets no answer at all");

	# 3 forms, 3 no-cors fetches, a beacon: 7 requests, each refused
	my @refused;
	my $end = time() + 10;
	while (time() < $end) {
		@refused = log_since($t, $log0)
			=~ /^(.*circuit breaker control (?:refused|needs).*)$/mg;
		last if @refused >= 7;
		sleep(0.2);
	}
	is(scalar @refused, 7, "$site: all 7 requests arrived, all refused")
		or diag(join "\n", log_since($t, $log0));
	is(scalar(grep { /\[warn\]/ } @refused), 7, "$site: at warn");
	my $why = $site eq 'cross-site'
		? qr/"Sec-Fetch-Site: cross-site"/ : qr/"Sec-Fetch-Site: same-site"/;
	is(scalar(grep { $_ =~ $why } @refused), 7,
		"$site: the browser said where they came from");
	unlike(log_since($t, $log0), qr/forced open by|forced closed by|ejected by/,
		"$site: no action taken");
	unchanged($site, 0);
	$b->keep("attack-$site");
}

# the dashboard's own buttons still work (the driver's report starts afresh
# with each page)

my $r = $b->drive('open', url => $b->url('/circuit_breaker'));
ok($r->{ok} && $r->{status} == 200, 'the dashboard');
$r = $b->row(upstream => 'up', route => 'default', state => 'closed');
ok($r->{found}, 'up/default closed');

my $log0 = log_size($t);
$r = $b->drive('click', upstream => 'up', route => 'default',
	action => 'force_open', confirm => 1);
like($r->{dialog}{message} // '', qr!^force open: up / default\?!,
	'force open asks first');
$r = $b->row(upstream => 'up', route => 'default', state => 'open');
ok($r->{found} && $r->{cells}{state} =~ /forced open/, 'forced open shown');
is(breaker('up')->{forced}, 'open', 'the module forced it open');
like(log_since($t, $log0), qr/circuit breaker "up\/default" forced open by 127\.0\.0\.1/,
	'logged');
is(status(http_get('/d/x')), 503, 'traffic short-circuited');

$b->drive('click', upstream => 'up', route => 'default', action => 'reset',
	confirm => 1);
$r = $b->row(upstream => 'up', route => 'default', state => 'closed');
ok($r->{found}, 'reset: closed');
ok(!defined breaker('up')->{forced}, 'reset: not forced');

$r = $b->row(upstream => 'pool', server => $s2, state => 'in');
ok($r->{found}, "server $s2 in");
is(join(' ', @{ $r->{buttons} || [] }), 'eject restore',
	'a server row: eject and restore');
$r = $b->drive('click', upstream => 'pool', server => $s2, action => 'eject',
	confirm => 1);
like($r->{dialog}{message} // '', qr!^eject: server \Q$s2\E of pool\?!,
	'eject asks first');
$r = $b->row(upstream => 'pool', server => $s2, state => 'ejected');
ok($r->{found}, 'ejected: shown');
my ($srv) = grep { $_->{address} eq $s2 } @{ breaker('pool')->{servers} || [] };
ok($srv && $srv->{state} eq 'ejected' && $srv->{forced} eq 'open',
	'the module ejected it');

$b->drive('click', upstream => 'pool', server => $s2, action => 'restore',
	confirm => 1);
$r = $b->row(upstream => 'pool', server => $s2, state => 'in');
ok($r->{found}, 'restored: shown in');
unchanged('after reset and restore', 1);

$r = $b->drive('report');
is_deeply([ @{ $r->{csp} || [] } ], [], 'no CSP violation on the dashboard');
is_deeply([ @{ $r->{consoleErrors} || [] }, @{ $r->{pageErrors} || [] } ],
	[], 'no script errors');
$b->keep('dashboard');

$b->quit;

###############################################################################
