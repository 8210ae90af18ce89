#!/usr/bin/perl

# Stream breakers in the fleet: three instances whose stream upstream "kv"
# (min_requests=20, suspect_min=3) points at a port where nothing listens, so
# every session fails to connect (502).  Instance 0 opens "kv" on 20 failures of
# its own; instance 1, which has seen none, hears of it from the exchange and
# opens on 3 failures of its own, while suspected; instance 2, whose "kv" judges
# by another first_byte, counts the others' records as disagreeing and still
# needs its 20.  Each instance also has 60 stream breakers with long names, so
# that its fleet zone holds their records only if it was sized for them, with the
# stream block read after the http block (instances 0 and 2) and before it
# (instance 1), and after a reload.  An http upstream named "stream:kv" stays out of
# the fleet.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ sleep time /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT /;
use Test::Nginx::Stream qw/ stream /;
use CB::Nginx qw/ start /;
use CB::Origin;
use CB::Fleet;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy stream/)->plan(20);

my ($module, $stream_module) =
	($ENV{TEST_NGINX_GLOBALS} // '') =~ /load_module\s+([^;\s]+)/g;
plan(skip_all => 'no modules in TEST_NGINX_GLOBALS') unless $stream_module;

$t->write_file_expand('nginx.conf', CB::Nginx::conf(1, <<'EOF'));
    server {
        listen       127.0.0.1:8080;
        server_name  localhost;
        return 204;
    }
EOF

my $hits = start($t, 8081);
my $closed = port(8089);

# the many: names of 120 bytes, each breaker made at start (nothing reaches them)
my $many = join '', map {
	sprintf("    upstream many_%s_%03d { server 127.0.0.1:$closed; circuit_breaker; }\n",
		'x' x 112, $_)
} 1 .. 60;

sub stream_block {
	my ($breaker) = @_;
	return <<"EOF" . $many;
    log_format s '\$status \$circuit_breaker_state';
    access_log stream.log s;

    upstream kv {
        server 127.0.0.1:$closed;
        circuit_breaker $breaker;
    }

    server { listen 127.0.0.1:STREAM_PORT; proxy_pass kv; }
EOF
}

my $kv = 'window=60s min_requests=20 failure_rate=50% consecutive=100 open=1h '
	. 'jitter=0% suspect_min=3';

my $f = CB::Fleet->new(
	dir => $t->testdir() . '/fleet',
	nginx => $Test::Nginx::NGINX,
	module => $module,
	stream_module => $stream_module,
	ports => [ port(8090), port(8091), port(8092) ],
	stream_ports => [ port(8093), port(8094), port(8095) ],
	origin => port(8081),
	stream => stream_block($kv),
);

$f->start(0, fleet => 1);
# instance 1 also has an http upstream named as the fleet names its stream breaker: it
# stays out of the fleet, and the stream breaker takes its place
$f->start(1, fleet => 1, stream_first => 1,
	http => "    upstream stream:kv { server 127.0.0.1:$closed; circuit_breaker; }\n");
$f->start(2, fleet => 1, stream => stream_block("$kv first_byte=1s"));

# instance I's stream log: its statuses, in order
sub statuses {
	my ($i) = @_;
	open my $fh, '<', $f->dir($i) . '/stream.log' or return ();
	return map { (split)[0] } <$fh>;
}

# sessions through instance I, one at a time, until one is refused (503) or MAX
# were sent; returns how many failed (502) on the way
sub fail_kv {
	my ($i, $max) = @_;
	my $before = () = statuses($i);
	for (1 .. $max) {
		my $s = stream('127.0.0.1:' . $f->{stream_ports}[$i]);
		$s->io("PING\r\n", read => 1, read_timeout => 3);
		undef $s;
		# the session is logged as it ends; the exchange worker reads the
		# failure, and writes its advice, between two sessions
		sleep 0.2;
		my @st = statuses($i);
		last if @st && $st[-1] eq '503';
	}
	my @st = statuses($i);
	splice @st, 0, $before;
	return (scalar(grep { $_ eq '502' } @st), (grep { $_ eq '503' } @st) ? 1 : 0);
}

# instance I's fleet record of the stream breaker "kv"
sub fleet_kv {
	my ($i) = @_;
	my $fleet = (($f->status($i) // {})->{fleet}) // {};
	my ($b) = grep { $_->{upstream} eq 'stream:kv' } @{$fleet->{breakers} // []};
	return $b // {};
}

sub error_log {
	my ($i) = @_;
	open my $fh, '<', $f->dir($i) . '/error.log' or return '';
	local $/;
	return <$fh>;
}

# a few rounds of healthy exchange first
sleep 2.5;

###############################################################################

for my $i (0 .. 2) {
	my $fleet = ($f->status($i) // {})->{fleet} // {};
	my $listed = grep { $_->{upstream} =~ /^stream:many_/ } @{$fleet->{breakers} // []};
	my ($prom) = ($f->get($i, '/circuit_breaker?format=prometheus'))[1] // '';
	my ($short) = $prom =~ /^nginx_circuit_breaker_fleet_publish_short_total\{[^}]*\} (\d+)/m;
	ok($listed == 60 && defined $short && $short == 0,
		"instance $i: the fleet zone holds every stream breaker")
		or diag("listed $listed, short " . ($short // 'none'));
}

my ($failed, $refused) = fail_kv(0, 25);
is($failed, 20, 'instance 0: "kv" opened on 20 failures of its own');
ok($refused, 'instance 0: then refused');

my $end = time() + 10;
while (time() < $end) {
	last if (fleet_kv(1)->{peers_open} // 0) >= 1;
	sleep 0.1;
}
is(fleet_kv(1)->{peers_open}, 1, 'instance 1: its peer\'s "kv" is open');
ok(fleet_kv(1)->{suspicious}, 'instance 1: "kv" suspected');

($failed, $refused) = fail_kv(1, 20);
ok($failed >= 3 && $failed <= 5, "instance 1: opened on $failed failures of its own");
ok($refused, 'instance 1: then refused');
like(error_log(1), qr/"kv" opened: .* while suspected/, 'instance 1: opened while suspected');
like(error_log(1), qr/"stream:kv\/default" stays out of the fleet: names beginning with/,
	'instance 1: the http upstream "stream:kv" stays out of the fleet');

# instance 2 judges by another first_byte: its peers' word is not about its "kv"

$end = time() + 10;
while (time() < $end) {
	last if (fleet_kv(2)->{peers_disagreeing} // 0) >= 1;
	sleep 0.1;
}
ok((fleet_kv(2)->{peers_disagreeing} // 0) >= 1, 'instance 2: its peers disagree');
is(fleet_kv(2)->{peers_open} // 0, 0, 'instance 2: no open peer it agrees with');
($failed, $refused) = fail_kv(2, 6);
is("$failed $refused", '6 0', 'instance 2: six failures, still closed');

# a reload of each order reads the stream breakers again (the modules find each other in
# the new cycle), and the fleet zone still holds them all
for my $i (0, 1) {
	my $before = ($f->status($i) // {})->{fleet}{published} // 0;
	kill 'HUP', $f->master($i);
	my ($listed, $end) = (0, time() + 15);
	while (time() < $end) {
		my $fleet = ($f->status($i) // {})->{fleet} // {};
		$listed = grep { $_->{upstream} =~ /^stream:/ } @{$fleet->{breakers} // []};
		last if ($fleet->{published} // 0) > $before + 1 && $listed == 61;
		sleep 0.2;
	}
	is($listed, 61, "instance $i: after a reload, the fleet carries every stream breaker");
}

# the status page's stream breaker shows the fingerprint the fleet compares
my $page = ((($f->status(1) // {})->{stream}) // [])->[0] // {};
my ($shown) = grep { $_->{upstream} eq 'kv' } @{$page->{breakers} // []};
ok(defined $shown->{fingerprint}
	&& $shown->{fingerprint} eq (fleet_kv(1)->{fingerprint} // ''),
	'status: the stream breaker shows its fleet fingerprint');

# the http breakers' records are apart from the stream ones'
my $fleet = $f->status(1)->{fleet};
is(scalar(grep { $_->{upstream} eq 'origin' } @{$fleet->{breakers}}), 1,
	'the http upstream "origin" keeps its own record');
is(CB::Origin::hits($hits), 0, 'the http origin saw nothing');

$f->stop_all();
is(join('', $f->alerts()), '', 'no alerts in the fleet');

###############################################################################
