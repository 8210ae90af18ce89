#!/usr/bin/perl

# Keyed breakers in the fleet: two instances with circuit_breaker_key $arg_k
# (min_requests=20, suspect_min=3) in front of one origin that counts every
# request.  One instance opens a key on 20 failures of its own; the other,
# which has never judged that key, learns of it from the exchange and opens
# the same key on 3 failures of its own (while suspected), while another key
# of the same family still needs its 20.  The fleet's status counts the keys
# it holds without listing them.  A third instance, whose family has other
# parameters, takes none of the others' keys and counts their records as
# disagreeing.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use JSON::PP;
use Time::HiRes qw/ sleep time /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT /;
use CB::Nginx qw/ start /;
use CB::Origin;
use CB::Fleet;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy access/)->plan(14);

my ($module) = ($ENV{TEST_NGINX_GLOBALS} // '') =~ /load_module\s+([^;\s]+)/;
plan(skip_all => 'no module in TEST_NGINX_GLOBALS') unless $module;

$t->write_file_expand('nginx.conf', CB::Nginx::conf(1, <<'EOF'));
    server {
        listen       127.0.0.1:8080;
        server_name  localhost;
        return 204;
    }
EOF

my $hits = start($t, 8081);

my $f = CB::Fleet->new(
	dir => $t->testdir() . '/fleet',
	nginx => $Test::Nginx::NGINX,
	module => $module,
	ports => [ port(8090), port(8091), port(8092) ],
	origin => port(8081),
	keyed => 'window=60s min_requests=20 failure_rate=50% open=1h jitter=0% '
		. 'suspect_min=3',
);

$f->start($_, fleet => 1) for 0 .. 1;
$f->start(2, fleet => 1, keyed => 'window=60s min_requests=30 failure_rate=50% open=1h '
	. 'jitter=0% suspect_min=3');

# the keyed breaker of KEY on instance I, as its status page lists it (every
# key, closed ones too), or undef
sub key_breaker {
	my ($i, $key) = @_;
	my ($st, $body) = $f->get($i, '/circuit_breaker?keys=all', 2);
	return undef unless $st == 200;
	my $s = eval { decode_json($body) } or return undef;
	my ($b) = grep { $_->{upstream} eq '$arg_k' && $_->{route} eq $key }
		@{$s->{breakers}};
	return $b;
}

# fails KEY on instance I, one request at a time, until it answers 503 or
# MAX requests were sent; returns the statuses
sub fail_key {
	my ($i, $key, $max) = @_;
	my @st;
	for (1 .. $max) {
		my ($st) = $f->get($i, "/k?k=$key&status=500", 3);
		push @st, $st;
		last if $st == 503;
		# the exchange worker reads the failure, and writes its advice,
		# between two requests
		sleep 0.2;
	}
	return @st;
}

# a few rounds of healthy exchange first
sleep 2.5;

###############################################################################

my @st = fail_key(0, 'shop.example', 25);
is(CB::Origin::hits($hits), 20, 'instance 0: the key opened on 20 failures of its own');
is($st[-1], 503, 'instance 0: then 503');

# instance 1 has never seen the key: it learns of it from the exchange

my $end = time() + 10;
my $held = 0;
while (time() < $end) {
	$held = (($f->status(1) // {})->{fleet}{keyed} // {})->{held} // 0;
	last if $held >= 1;
	sleep 0.1;
}
is($held, 1, 'instance 1 holds the key its peer opened');
ok(!defined key_breaker(1, 'shop.example'),
	'instance 1 has no breaker for the key yet');

CB::Origin::clear($hits);
@st = fail_key(1, 'shop.example', 20);
my $paid = CB::Origin::hits($hits);
ok($paid >= 3 && $paid <= 5, "instance 1: the key opened on $paid failures of its own")
	or diag("statuses: @st");
is((key_breaker(1, 'shop.example') // {})->{state}, 'open', 'instance 1: the key is open');
like($f->error_log(1), qr/key "shop\.example" opened: .* while suspected/,
	'instance 1: opened while suspected');

# another key of the same family hears nothing of shop.example

CB::Origin::clear($hits);
@st = fail_key(1, 'blog.example', 5);
is(CB::Origin::hits($hits), 5, 'another key: every failure passed');
is((key_breaker(1, 'blog.example') // {})->{state}, 'closed',
	'another key: closed after 5 failures (its bar is 20)');

# the fleet's object counts keys, and lists only the configuration's breakers

my $fleet = $f->status(1)->{fleet};
ok(!grep({ $_->{upstream} eq '$arg_k' } @{$fleet->{breakers}}),
	'fleet status: keyed breakers counted, not listed');
is(join(' ', map { "$_->{name}:$_->{disagreeing}" } @{$fleet->{keyed}{families}}),
	'$arg_k:0', 'fleet status: the family, no peer disagreeing');

# the third instance's family has other parameters: it holds no key of its
# peers', and counts their records against its family

my $other = $f->status(2)->{fleet}{keyed};
is($other->{held}, 0, 'another configuration: no key taken from peers');
ok(($other->{families}[0]{disagreeing} // 0) >= 1,
	'another configuration: its peers\' records counted as disagreeing');

$f->stop_all();
is(join('', $f->alerts()), '', 'no alerts in the fleet');

###############################################################################
