#!/usr/bin/perl

# prove: alone
# Pools judged right, with the default breaker: one bad server of a pool never takes the
# pool down, whatever the pool's size, the balancer, the server that gets the first request,
# min_requests, and whether requests come one at a time or many at once.  For each case an
# upstream of its own (2, 3 or 4 servers, one of them answering 500, refusing connections
# or hanging; round robin, least_conn or hash; the bad server listed first or last;
# circuit_breaker with its defaults or min_requests=5, 20 or 100), a warm-up (see client()),
# then 100 more requests: at least 99 of those succeed and the upstream's own breaker is
# closed.
#
# Then a pool that is down entirely: every server refusing, with nginx's default
# max_fails=1 (nginx itself answers "no live upstreams") and with max_fails=0: the breaker
# opens within min_requests requests, clients then get 503 with Retry-After, and the error
# log stops growing.  And an open upstream with probe_uri whose servers heal but one: the
# probes that fail on the bad server eject it, and the upstream closes on the good servers'
# probes within probe_interval x (probes + 1).

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use POSIX qw//;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start log_count /;
use CB::Client;
use CB::Origin;
use CB::Status qw/ breaker_at wait_state /;
use CB::Response qw/ status header /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my @sizes = (2, 3, 4);
my @faults = qw/ 500 refused hang /;
my @balancers = ([ rr => '' ], [ lc => 'least_conn;' ],
	[ hash => 'hash $request_uri;' ]);
my @firsts = qw/ bad good /;
my @mins = ([ def => '' ], [ m5 => 'min_requests=5' ],
	[ m20 => 'min_requests=20' ], [ m100 => 'min_requests=100' ]);
my @modes = qw/ seq conc /;

my @cases;
for my $n (@sizes) {
	for my $f (@faults) {
		for my $b (@balancers) {
			for my $first (@firsts) {
				for my $m (@mins) {
					for my $mode (@modes) {
						push @cases, {
							name => "p${n}_${f}_$b->[0]_${first}_$m->[0]_$mode",
							n => $n, fault => $f, balancer => $b->[1],
							first => $first, params => $m->[1], mode => $mode,
						};
					}
				}
			}
		}
	}
}

my $t = Test::Nginx->new()->has(qw/http proxy upstream_least_conn upstream_hash/)
	->plan(2 * @cases + 13);

# Origins: three good servers, one answering 500 to everything, one that never answers;
# port 8090 has no listener (connections refused).
my %bad = (500 => 8084, hang => 8085, refused => 8090);

my ($upstreams, $locations) = ('', '');
for my $c (@cases) {
	my @servers = map { "127.0.0.1:%%PORT_808${_}%%" } 1 .. $c->{n} - 1;
	my $bad = "127.0.0.1:%%PORT_$bad{$c->{fault}}%%";
	@servers = $c->{first} eq 'bad' ? ($bad, @servers) : (@servers, $bad);
	my $lines = join '', map { "        server $_;\n" } @servers;
	# One at a time with nginx's proxy defaults (a connection per attempt); many at once
	# over kept-alive upstream connections, as a busy site has them.
	my ($keepalive, $http11) = $c->{mode} eq 'seq' ? ('', '')
		: ('keepalive 8; keepalive_timeout 1s;',
			' proxy_http_version 1.1; proxy_set_header Connection "";');
	$upstreams .= <<"EOF";
    upstream $c->{name} {
$lines        $c->{balancer}
        $keepalive
        circuit_breaker $c->{params};
    }
EOF
	# The hanging server is judged at a 1 s read timeout: nginx's 60 s would make the test
	# wait minutes for what it shows in seconds, and a shorter one could time out a good
	# server on a busy machine (nginx's max_fails=1 then marks it down too).
	my $timeout = $c->{fault} eq 'hang' ? ' proxy_read_timeout 1s;' : '';
	$locations .= "        location /$c->{name}/ { proxy_pass http://$c->{name};$timeout$http11 }\n";
}

$t->write_file_expand('nginx.conf', conf(2, <<"EOF"));
    circuit_breaker_zone cb:16m;

$upstreams
    upstream down1 {
        server 127.0.0.1:%%PORT_8090%%;
        server 127.0.0.1:%%PORT_8091%%;
        circuit_breaker;
    }
    upstream down0 {
        server 127.0.0.1:%%PORT_8090%% max_fails=0;
        server 127.0.0.1:%%PORT_8091%% max_fails=0;
        circuit_breaker;
    }
    upstream probed {
        server 127.0.0.1:%%PORT_8086%%;
        server 127.0.0.1:%%PORT_8087%%;
        circuit_breaker probe_uri=/health probe_interval=500ms;
        circuit_breaker_eject min_requests=100;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

$locations
        location /down1/ { proxy_pass http://down1; }
        location /down0/ { proxy_pass http://down0; }
        location /probed/ { proxy_pass http://probed; }
        location = /status { circuit_breaker_status; }
    }
EOF

my @hits = start($t, 8081, 8082, 8083, 8084, 8085, 8086, 8087);
CB::Origin::behave($hits[3], '* status=500');
CB::Origin::behave($hits[4], '* hang=1');

###############################################################################

# One case's client: a warm-up, then COUNT requests to the case's location, one at a time
# (seq) or eight at once (conc); the measured requests' statuses.  The warm-up is 80
# requests, and with a server answering 500 as many more as it takes to eject it (up to
# 300): least_conn sends few requests to a server that fails fast, and until it has had
# circuit_breaker_eject's min_requests it is not ejected.

sub client {
	my ($c, $count) = @_;
	my $conc = $c->{mode} eq 'seq' ? 1 : 8;
	my $k = 0;
	my $batch = sub {
		my @paths = map { "/$c->{name}/x?k=" . $k++ } 1 .. $_[0];
		return CB::Client::statuses(port(8080), \@paths, $conc);
	};
	$batch->(80);
	while ($c->{fault} eq '500' && $k < 300 && !ejected($c)) {
		$batch->(20);
	}
	my $first = $k;
	return ($first, $batch->($count));
}

# The measured requests (from the K-th on) that reached the server answering 500 after its
# ejection: the probes ejection sends it, one a user request each time its ejection time
# (10 s, then 20 s) is over — few unless a busy machine slows the case down.

sub probes {
	my ($t, $c, $first) = @_;
	return 0 unless $c->{fault} eq '500';
	my $re = qr!^/\Q$c->{name}\E/x\?k=(\d+)$!;
	return scalar grep { /$re/ && $1 >= $first } split /\n/, $t->read_file('origin-8084.hits');
}

sub ejected {
	my ($c) = @_;
	my $b = breaker_at("/status?upstream=$c->{name}", route => 'default');
	my $bad = '127.0.0.1:' . port($bad{$c->{fault}});
	return grep { $_->{address} eq $bad && $_->{state} eq 'ejected' } @{$b->{servers} // []};
}

# Cases run four at a time, each with its own client(s): a worker process forked per case
# writes "NAME OK TOTAL" to its result file.

my $dir = $t->testdir();
my $t0 = time();
my @queue = @cases;
my %running;
while (@queue || %running) {
	while (@queue && keys %running < 4) {
		my $c = shift @queue;
		my $pid = fork();
		die "fork: $!\n" unless defined $pid;
		if ($pid == 0) {
			my ($first, @s) = client($c, 100);
			my $ok = grep { $_ == 200 } @s;
			open my $fh, '>', "$dir/$c->{name}.result" or POSIX::_exit(1);
			my %other;
			$other{$_}++ for grep { $_ != 200 } @s;
			print $fh "$ok " . scalar(@s) . ' ' . probes($t, $c, $first) . ' '
				. join(',', map { "$_:$other{$_}" } sort keys %other);
			close $fh;
			POSIX::_exit(0);
		}
		$running{$pid} = $c;
	}
	my $pid = waitpid(-1, 0);
	delete $running{$pid};
}

note(sprintf('%d cases in %.1f s', scalar @cases, time() - $t0));

for my $c (@cases) {
	my ($ok, $total, $probes, $other) =
		eval { split ' ', $t->read_file("$c->{name}.result") };
	$ok //= 0;
	$total //= 0;
	$probes //= 0;
	# At least 99 of the 100 that were not the ejected server's probes.
	ok($total == 100 && $probes <= 3 && $ok >= 99 - $probes, "$c->{name}: at least 99 % served")
		or diag("$ok of $total served, $probes probes; others: " . ($other // 'none'));
	my $b = breaker_at("/status?upstream=$c->{name}", route => 'default');
	is($b->{state} // 'none', 'closed', "$c->{name}: the upstream's breaker is closed")
		or diag($b->{last_transition} // '');
}

###############################################################################

# Every server refusing: the breaker opens within min_requests (20) requests; then 503
# with Retry-After, and no more error lines.

for my $u (qw/ down1 down0 /) {
	my ($n, $first503) = (0, undef);
	while ($n++ < 40) {
		my $r = http_get("/$u/x");
		if (status($r) == 503) {
			$first503 = $n;
			last;
		}
	}
	ok(defined $first503 && $first503 <= 21,
		"$u: every server refusing opens the breaker within min_requests")
		or diag('first 503 at ' . ($first503 // 'never'));

	my $b = breaker_at("/status?upstream=$u", route => 'default');
	is($b->{state} // 'none', 'open', "$u: open");

	my $errors = log_count($t, qr/\[error\]/);
	my @r = map { http_get("/$u/x") } 1 .. 50;
	is(scalar(grep { status($_) == 503 && defined header($_, 'Retry-After') } @r), 50,
		"$u: 503 with Retry-After while open");
	is(log_count($t, qr/\[error\]/), $errors, "$u: no error line per request while open");
}

like($t->read_file('error.log'),
	qr/circuit breaker "down1\/default" opened: 10 gateway failures in a row, the last: (no live upstreams|error)/,
	'down1: "no live upstreams" counted: opened on the tenth');

###############################################################################

# probe_uri: both servers fail until the upstream opens, then one heals; the other's
# failed probe ejects it, and the healed one's probes close the upstream.

CB::Origin::behave($hits[5], '* status=500');
CB::Origin::behave($hits[6], '* status=500');
http_get('/probed/x') for 1 .. 30;
ok(wait_state('/status?upstream=probed', 'open', 3), 'probed: open on a failing pool');

CB::Origin::behave($hits[5]);
my $healed = time();
my $closed = wait_state('/status?upstream=probed', 'closed', 5);
my $took = time() - $healed;
ok($closed && $took <= 0.5 * 4,
	'probed: closed within probe_interval x (probes + 1) of the heal')
	or diag(sprintf('took %.2f s', $took));

my $b = breaker_at('/status?upstream=probed', route => 'default');
my ($s) = grep { $_->{address} eq '127.0.0.1:' . port(8087) } @{$b->{servers} // []};
is($s->{state} // 'none', 'ejected', 'probed: the bad server is ejected by its failed probe');
like($t->read_file('error.log'),
	qr/server 127\.0\.0\.1:${\ port(8087)} ejected: probe of "probed\/default" failed: status 500/,
	'probed: the ejection names the probe');

###############################################################################
