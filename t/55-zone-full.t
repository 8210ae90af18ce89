#!/usr/bin/perl

# Zone full: more breakers than the smallest zone (32k) can hold.
#
# One upstream with a breaker (min_requests=2, failure_rate=50%) and many
# circuit_breaker_route locations, each of which wants its own breaker
# (up, rN).  Breakers are created on a route's first request, so the zone
# fills up after the first few routes.  A breaker that cannot be allocated
# must fail open: its traffic still reaches the origin (even a failing one:
# it never trips), and the module logs one [error] line per worker and
# breaker, not one per request.  Breakers that did fit work as usual.
#
# worker_processes 1, so that "once per worker" means exactly once.
# The harness adds "no [alert]/[crit] lines" (nginx's own slab allocator
# would log "ngx_slab_alloc() failed: no memory" at [crit]).

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT http_end /;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Response qw/ status /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $N = 40;

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(16);

my $routes = join '', map { <<"EOF" } 1 .. $N;
        location /r$_ {
            proxy_pass http://up;
            circuit_breaker_route r$_;
        }
EOF

$t->write_file_expand('nginx.conf', conf(1, <<"EOF"));
    circuit_breaker_zone cb:32k;
    circuit_breaker_header on;

    upstream up {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker window=10s min_requests=2 failure_rate=50%
                        open=10s jitter=0% probes=1;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location / {
            proxy_pass http://up;
        }

$routes
    }
EOF

my $hits = start($t, 8081);

###############################################################################


sub from_origin {
	my ($r) = @_;
	return defined $r && $r =~ /^X-Origin: \d+\x0d?$/m;
}

# two failures per route: every route whose breaker exists is open now

my $first = '';
for my $n (1 .. $N) {
	for (1 .. 2) {
		my $r = http_get("/r$n?status=500&n=$n");
		$first .= "r$n:" . status($r) . ' ' unless status($r) eq '500'
			&& from_origin($r);
	}
}
is($first, '', 'first two requests of every route reach the origin');
is(CB::Origin::hits($hits), 2 * $N, 'first two requests - origin hits');

# third request: 503 without an origin hit where the breaker exists,
# the origin's 500 where it could not be created

CB::Origin::clear($hits);

my (@have, @missing, $bad);
for my $n (1 .. $N) {
	my $r = http_get("/r$n?status=500&n=$n&third=1");
	my $s = status($r);

	if ($s eq '503' && !from_origin($r)
		&& $r =~ /^X-Circuit-State: open\x0d?$/m
		&& $r =~ /^Retry-After: \d+\x0d?$/m)
	{
		push @have, $n;

	} elsif ($s eq '500' && from_origin($r)) {
		push @missing, $n;

	} else {
		$bad .= "r$n: " . ($r // 'undef') . "\n";
	}
}

is($bad, undef, 'third request: either short-circuited or passed');
ok(@have >= 1 && $have[0] == 1, 'some breakers were created (r1 first)')
	or diag("created: @have");
cmp_ok(scalar @missing, '>=', $N / 2, 'the zone ran out')
	or diag("created: @have; missing: @missing");
is(CB::Origin::hits($hits, qr/third=1/), scalar @missing,
	'third request: origin hit only for routes without a breaker');

diag(scalar(@have) . " of $N route breakers fit into 32k") if @have;

# routes without a breaker fail open: a failing origin never trips them,
# and their responses do not claim to have gone through a breaker

CB::Origin::clear($hits);

my @probe = grep { defined } @missing[0, 1, -1];
my $leak = '';
for my $n (@probe) {
	for my $i (1 .. 5) {
		my $r = http_get("/r$n?status=500&more=$i");
		$leak .= "r$n/$i:" . status($r) . ' '
			unless status($r) eq '500' && from_origin($r);
		$leak .= "r$n/$i:header "
			if defined $r && $r =~ /^X-Circuit-State:/mi;
	}
}
is($leak, '', 'missing breakers never trip');
is(CB::Origin::hits($hits, qr/more=/), 5 * @probe,
	'missing breakers - every request reaches the origin');

my $r = http_get("/r$missing[0]?body=passed");
ok(status($r) eq '200' && from_origin($r) && $r =~ /\x0d\x0a\x0d\x0apassed\z/,
	'missing breaker - 200 from the origin');

# the created breakers are still open, and the upstream's own (default)
# breaker, allocated when the zone was created, works too

CB::Origin::clear($hits);

$r = http_get("/r$have[0]?status=200&again=1");
ok(status($r) eq '503' && !from_origin($r)
	&& $r =~ /^X-Circuit-State: open\x0d?$/m, 'created breaker still open');

my @d = map { status(http_get("/default?status=500&d=$_")) } 1 .. 3;
is("@d", '500 500 503', 'default breaker trips');
is(CB::Origin::hits($hits), 2, 'origin hits while open - none');

# error.log: exactly one [error] line per missing breaker (one worker),
# none for the created ones; one "opened" line per created breaker

$t->stop();

my $log = $t->read_file('error.log');

my %full;
for ($log =~ /^.*not created.*$/gm) {
	if (/\[error\] .*circuit breaker "up\/r(\d+)" not created: the zone is full, its traffic passes unchecked/) {
		$full{$1}++;
	} else {
		$full{"bad line: $_"}++;
	}
}

is(join(',', sort { $a <=> $b } grep { /^\d+$/ } keys %full),
	join(',', @missing), 'one error line per missing breaker - which');
is(join(',', grep { $_ != 1 } values %full), '',
	'one error line per missing breaker - not per request');

my %opened;
$opened{$_}++ for $log =~ /\[warn\] .*circuit breaker "up\/(\w+)" opened:/g;

is(join(',', map { "r$_" } grep { ($opened{"r$_"} // 0) == 1 } 1 .. $N),
	join(',', map { "r$_" } @have), 'created breakers opened once each');
is($opened{default}, 1, 'default breaker opened once');

###############################################################################
