#!/usr/bin/perl

# Ejection of a server that refuses connections or hangs (with and without
# an upstream zone), of a bad primary in front of a backup, the max_ejected
# cap when every server is bad (the upstream breaker opens instead), an
# ejection that survives a reload, the operator's eject and restore, and the
# servers in the Prometheus page.  Four worker processes.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use JSON::PP;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start req reload /;
use CB::Origin;
use CB::Status qw/ breaker_at /;
use CB::Response qw/ status header /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy upstream_zone/)->plan(43);

# 8081 good, 8082 answers 500 until told otherwise, 8083 refuses connections
# until an origin is started there, 8084 hangs until told otherwise, 8085
# answers 500 throughout.  max_fails=0: nginx's own quiet period would take a
# refusing or hanging server out of each worker for 10s after one failure.

my $eject = 'circuit_breaker_eject min_requests=4 time=1s;';

$t->write_file_expand('nginx.conf', conf(4, <<"EOF"));
    log_format ua '\$uri \$upstream_addr \$status';
    access_log %%TESTDIR%%/ua.log ua;

    proxy_connect_timeout 1s;
    proxy_read_timeout 2s;

    upstream refused {
        server 127.0.0.1:%%PORT_8083%% max_fails=0;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        circuit_breaker jitter=0%;
        $eject
    }

    upstream refusedz {
        zone refusedz 64k;
        server 127.0.0.1:%%PORT_8083%% max_fails=0;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        circuit_breaker jitter=0%;
        $eject
    }

    upstream hang {
        server 127.0.0.1:%%PORT_8084%% max_fails=0;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        circuit_breaker jitter=0%;
        $eject
    }

    upstream hangz {
        zone hangz 64k;
        server 127.0.0.1:%%PORT_8084%% max_fails=0;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        circuit_breaker jitter=0%;
        $eject
    }

    upstream backup {
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        server 127.0.0.1:%%PORT_8081%% max_fails=0 backup;
        circuit_breaker jitter=0%;
        $eject
    }

    upstream backupz {
        zone backupz 64k;
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        server 127.0.0.1:%%PORT_8081%% max_fails=0 backup;
        circuit_breaker jitter=0%;
        $eject
    }

    # every server bad: one of two may go, then the upstream breaker decides
    upstream all {
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        server 127.0.0.1:%%PORT_8085%% max_fails=0;
        circuit_breaker min_requests=10 jitter=0% open=30s;
        $eject
    }

    # stays out across the reload below
    upstream kept {
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        circuit_breaker jitter=0%;
        circuit_breaker_eject min_requests=4 time=30s;
    }

    # a dry run: the server's breaker runs, the balancer is left alone
    upstream dry {
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        circuit_breaker jitter=0% dry_run;
        $eject
    }

    upstream ctl {
        zone ctl 64k;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        server 127.0.0.1:%%PORT_8085%% max_fails=0;
        circuit_breaker;
        circuit_breaker_eject off;
    }

    upstream ctl2 {
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        server 127.0.0.1:%%PORT_8086%% max_fails=0;
        circuit_breaker;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location /refused/ { proxy_pass http://refused; }
        location /refusedz/ { proxy_pass http://refusedz; }
        location /hang/ { proxy_pass http://hang; proxy_read_timeout 200ms; }
        location /hangz/ { proxy_pass http://hangz; proxy_read_timeout 200ms; }
        location /backup/ { proxy_pass http://backup; }
        location /backupz/ { proxy_pass http://backupz; }
        location /all/ { proxy_pass http://all; }
        location /kept/ { proxy_pass http://kept; }
        location /dry/ { proxy_pass http://dry; }
        location /ctl2/ { proxy_pass http://ctl2; }

        location = /status { circuit_breaker_status control=on; }
    }
EOF

my %hits;
@hits{8081, 8082, 8084, 8085, 8086} = start($t, 8081, 8082, 8084, 8085, 8086);
$hits{8083} = $t->testdir() . '/origin-8083.hits';
CB::Origin::behave($hits{8082}, '* status=500');
CB::Origin::behave($hits{8084}, '* hang=1');
CB::Origin::behave($hits{8085}, '* status=500');

###############################################################################

my %p = map { $_ => port($_) } keys %hits;

sub ejected_line {
	my ($name, $port) = @_;
	return qr/circuit breaker "$name" server 127\.0\.0\.1:$port ejected: /;
}

# requests until the server is ejected (at most 20); returns their statuses
# (subroutines take $t: one that closed over it would keep it alive too long)

sub until_ejected {
	my ($t, $name, $port) = @_;
	my @s;
	for (1 .. 20) {
		push @s, status(http_get("/$name/x"));
		last if $t->read_file('error.log') =~ ejected_line($name, $port);
	}
	return @s;
}

# attempts that went to PORT since the access log had OFFSET bytes

sub tried {
	my ($t, $name, $port, $offset) = @_;
	my $log = substr($t->read_file('ua.log'), $offset);
	my @l = grep { m!^/$name/! && /127\.0\.0\.1:$port\b/ } split /\n/, $log;
	return scalar @l;
}

sub breaker { breaker_at("/status?upstream=$_[0]&route=default") }

sub place {
	my ($b, $port) = @_;
	my ($s) = grep { $_->{address} eq "127.0.0.1:$port" } @{$b->{servers}};
	return $s ? $s->{state} : 'none';
}

# refused and hanging servers: retried at once on the good one (the default
# proxy_next_upstream error timeout), so clients never see them fail; after
# the ejection no attempt is made at all

for my $name (qw/ refused refusedz hang hangz /) {
	my $port = $name =~ /^refused/ ? $p{8083} : $p{8084};
	my @s = until_ejected($t, $name, $port);
	like($t->read_file('error.log'),
		qr/"$name" server 127\.0\.0\.1:$port ejected: failure rate 100% \(4\/4\) >= 50% in 10s, back in 1s/,
		"$name: ejected");
	is(join(' ', grep { $_ != 200 } @s), '', "$name: clients saw no error");

	sleep 0.3 if $name =~ /^hang/; # the log line comes before the access log's
	my $offset = length $t->read_file('ua.log');
	my $start = time();
	@s = map { status(http_get("/$name/x")) } 1 .. 12;
	ok(!grep({ $_ != 200 } @s) && tried($t, $name, $port, $offset) == 0
		&& time() - $start < 1, "$name: no attempt to it after ejection");
	is(breaker($name)->{state}, 'closed', "$name: upstream breaker closed");
}

# a bad primary: the backup takes over

for my $name (qw/ backup backupz /) {
	until_ejected($t, $name, $p{8082});
	my $before = CB::Origin::hits($hits{8082}, qr!^/$name/!);
	my @o = map { header(http_get("/$name/x"), 'X-Origin') // 'none' } 1 .. 8;
	is("@o", join(' ', ($p{8081}) x 8), "$name: the backup answers");
	is(CB::Origin::hits($hits{8082}, qr!^/$name/!), $before,
		"$name: nothing to the ejected primary");
}

# every server bad: only one goes, the other stays and the upstream breaker
# opens

my @s = map { status(http_get("/all/x")) } 1 .. 20;
my @ej = $t->read_file('error.log') =~ /"all" server (\S+) ejected/g;
is(scalar @ej, 1, 'all bad: one server ejected (max_ejected 50% of 2)');
like($t->read_file('error.log'), qr/circuit breaker "all\/default" opened/,
	'all bad: the upstream breaker opened');
is($s[-1], 503, 'all bad: short-circuited');
my $b = breaker('all');
is(join(' ', sort map { $_->{state} } @{$b->{servers}}), 'ejected in',
	'all bad: the other server stays in');

# a dry run: ejected as far as its breaker and the log say, but still sent
# traffic

until_ejected($t, 'dry', $p{8082});
my $dry = CB::Origin::hits($hits{8082}, qr!^/dry/!);
http_get('/dry/x') for 1 .. 8;
ok(place(breaker('dry'), $p{8082}) eq 'ejected'
	&& CB::Origin::hits($hits{8082}, qr!^/dry/!) > $dry,
	'dry run: ejected, and still used');

# an ejection survives a reload with the same servers

until_ejected($t, 'kept', $p{8082});
is(place(breaker('kept'), $p{8082}), 'ejected', 'kept: ejected');
ok(reload($t), 'reloaded');
my $kept = CB::Origin::hits($hits{8082}, qr!^/kept/!);
@s = map { status(http_get("/kept/x")) } 1 .. 16;
is(join(' ', grep { $_ != 200 } @s), '', 'kept: no errors after the reload');
is(CB::Origin::hits($hits{8082}, qr!^/kept/!), $kept,
	'kept: still out after the reload');

# the servers answer again: each returns after its ejection time, by a probe

$t->run_daemon(\&CB::Origin::run, port(8083), $hits{8083});
$t->waitforsocket('127.0.0.1:' . port(8083));
CB::Origin::behave($hits{8084});
CB::Origin::behave($hits{8082});
sleep 1.1;

for my $name (qw/ refused refusedz hang hangz backup backupz dry /) {
	http_get("/$name/x") for 1 .. 4;
	my $port = $name =~ /^refused/ ? $p{8083}
		: $name =~ /^hang/ ? $p{8084} : $p{8082};
	like($t->read_file('error.log'),
		qr/"$name" server 127\.0\.0\.1:$port returned: 1 good probe/,
		"$name: returned");
}

# the operator's eject and restore (here the pool has no breakers of its
# own: circuit_breaker_eject off)

my $p86 = $p{8086};
my $r = req('POST', "/status?upstream=ctl2&action=eject&server=127.0.0.1:$p{8086}",
	'X-Circuit-Breaker-Control: 1');
my ($body) = $r =~ /\r\n\r\n(.*)\z/s;
my $j = eval { decode_json($body) } // {};
ok(status($r) == 200 && $j->{servers}[0]{state} eq 'ejected'
	&& $j->{servers}[0]{forced} eq 'open', 'eject: answered') or diag($r);
like($t->read_file('error.log'),
	qr/circuit breaker "ctl2" server 127\.0\.0\.1:$p86 ejected by 127\.0\.0\.1/,
	'eject: logged');
my @o = map { header(http_get("/ctl2/x"), 'X-Origin') } 1 .. 6;
is("@o", join(' ', ($p{8081}) x 6), 'eject: held out');
$r = req('POST', "/status?upstream=ctl2&action=restore&server=127.0.0.1:$p{8086}",
	'X-Circuit-Breaker-Control: 1');
@o = map { header(http_get("/ctl2/x"), 'X-Origin') } 1 .. 6;
ok(status($r) == 200 && grep({ $_ eq $p{8086} } @o), 'restore: back in')
	or diag("@o");
is(status(req('POST', "/status?upstream=ctl&action=eject&server=127.0.0.1:$p{8081}",
	'X-Circuit-Breaker-Control: 1')),
	404, 'eject: 404 without a pool');

# Prometheus

$r = http_get('/status?format=prometheus&upstream=ctl2');
like($r, qr/^nginx_circuit_breaker_server_state\{zone="circuit_breaker",upstream="ctl2",server="127\.0\.0\.1:$p86"\} 0$/m,
	'prometheus: server state');
like($r, qr/^nginx_circuit_breaker_retries_total\{zone="circuit_breaker",upstream="ctl2"\} \d+$/m,
	'prometheus: retries');

###############################################################################
