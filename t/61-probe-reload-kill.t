#!/usr/bin/perl

# Active probes across a reload and a SIGKILL of the probing worker
# (worker_processes 4): a probe hangs at the origin (probe_timeout=10s) when
#
# 1. nginx reloads: the old worker closes the probe's connection and exits at
#    once, and the new workers probe: the breaker closes soon after the heal,
#    not after the 10 s probe_timeout;
# 2. the worker that holds the probe is killed: the others reclaim the probe
#    at once, and the breaker closes soon after.
#
# No [alert] but the kill's own, no connection left to the origin.
#
#	TEST_NGINX_BINARY=... TEST_NGINX_GLOBALS="load_module ...so;" \
#	prove -v -I t/lib t/61-probe-reload-kill.t

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start reload master workers /;
use CB::Origin;
use CB::Status qw/ breaker_at /;
use CB::Proc qw/ children cmdline /;
use CB::Response qw/ header /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

plan(skip_all => 'needs Linux /proc') unless -e '/proc/net/tcp';

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(15)->todo_alerts();

$t->write_file_expand('nginx.conf', conf(4, <<'EOF'));
    circuit_breaker_zone cb:1m;
    circuit_breaker_header on;

    upstream k {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=5s min_requests=4 failure_rate=50%
                        probes=2 probe_interval=300ms
                        probe_uri=/health probe_timeout=10s;
    }

    server {
        listen       127.0.0.1:8080 reuseport;
        server_name  localhost;

        proxy_connect_timeout 1s;

        location /k/ {
            proxy_pass http://k;
        }

        location = /cb {
            circuit_breaker_status;
        }
    }

EOF

my $hits = start($t, 8081);

###############################################################################

my $master = master($t) or die "no master\n";

# the master's nginx children: its workers, new or shutting down

sub nginx_children {
	return grep { cmdline($_) =~ /^nginx: / } children($master);
}

# the nginx processes holding a connection to the origin (the probes in
# flight): /proc/net/tcp gives the sockets' inodes, a process's fds link to
# them

sub origin_peers {
	my $op = port(8081);
	my %inode;

	open my $fh, '<', '/proc/net/tcp' or return ();
	while (<$fh>) {
		my @f = split;
		next unless @f > 9 && $f[3] eq '01';
		next unless $f[2] =~ /:([0-9A-F]{4})$/ && hex($1) == $op;
		$inode{$f[9]} = 1;
	}
	close $fh;

	my @owners;
	for my $w (nginx_children()) {
		opendir my $dh, "/proc/$w/fd" or next;
		for my $fd (grep { /^\d+$/ } readdir $dh) {
			my $l = readlink("/proc/$w/fd/$fd") // next;
			push @owners, $w if $l =~ /^socket:\[(\d+)\]$/ && $inode{$1};
		}
	}

	return @owners;
}

sub breaker { breaker_at('/cb?upstream=k') }

sub wait_for {
	my ($cond, $timeout) = @_;
	my $end = time() + $timeout;
	while (time() < $end) {
		my $v = $cond->();
		return $v if $v;
		sleep 0.01;
	}
	return;
}

# opens the breaker (refused connections), then makes the origin hang and
# waits for a probe to hang there: the process that sent it

sub hanging_probe {
	CB::Origin::behave($hits, 'refuse');
	for my $i (1 .. 20) {
		last if (header(http_get("/k/trip$i"), 'X-Circuit-State') // '') eq 'open';
	}
	CB::Origin::behave($hits, '* hang=1');
	return wait_for(sub { (origin_peers())[0] }, 3);
}

###############################################################################

# 1. a reload with a probe in flight

my $owner = hanging_probe();
ok($owner, 'reload: a probe hangs at the origin');
is(breaker()->{state}, 'open', 'reload: open');

CB::Origin::behave($hits);
my $reloaded = time();
reload($t);

ok(wait_for(sub { !grep({ $_ == $owner } nginx_children()) }, 2),
	'reload: the old worker exits at once');
my $hung = wait_for(sub {
	(grep { $_->[0] < $reloaded && $_->[1] > $reloaded }
		CB::Origin::timings($hits, qr!^/health!))[0]
}, 2);
ok($hung && $hung->[1] < $reloaded + 1, 'reload: its probe connection closed')
	or diag(explain $hung);

my $b = wait_for(sub { my $b = breaker(); $b->{state} eq 'closed' && $b }, 3);
ok($b && $b->{last_transition} eq '2 good probes',
	'reload: the new workers probe and close it');
cmp_ok(time() - $reloaded, '<', 2.5, 'reload: soon after the heal');

###############################################################################

# 2. SIGKILL of the worker holding the probe

$owner = hanging_probe();
ok($owner && cmdline($owner) eq 'nginx: worker process',
	'kill: a probe hangs at the origin');

CB::Origin::behave($hits);
my $killed = time();
kill 'KILL', $owner;

ok(wait_for(sub {
	my @w = workers($t);
	return @w == 4 && !grep { $_ == $owner } @w;
}, 3), 'kill: the master replaces the worker');

$b = wait_for(sub { my $b = breaker(); $b->{state} eq 'closed' && $b }, 3);
ok($b && $b->{last_transition} eq '2 good probes',
	'kill: the probe is reclaimed, probes close it');
cmp_ok(time() - $killed, '<', 2.5, 'kill: soon after the kill');
is($b && $b->{totals}{opened} . '/' . $b->{totals}{closed}, '2/2', 'two cycles');

###############################################################################

# no connection left, no alert but the kill's

is(scalar(origin_peers()), 0, 'no connection left to the origin');

my $log = $t->read_file('error.log');
my @alerts = $log =~ /^.*\[(?:alert|crit|emerg)\].*$/gm;
is(scalar @alerts, 1, 'one alert') or diag(join "\n", @alerts);
like($alerts[0] // '', qr/worker process $owner exited on signal 9/,
	'the kill\'s own');
unlike($log, qr/open socket|left in connection/, 'no socket left open');

###############################################################################
