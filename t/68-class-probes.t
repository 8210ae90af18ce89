#!/usr/bin/perl

# A half-open breaker risks the cheapest request (circuit_breaker_class): while
# sheddable requests come, the probes are theirs, and critical requests are
# answered as while open rather than carry a probe; with no sheddable request
# lately, a critical one probes.  Traffic is four critical requests, then one
# sheddable, one at a time (a critical request first after every pause);
# what reached the origin is counted there.  A breaker whose cooldown is
# shorter than the second a class stays present (open=200ms) still leaves its
# probe to a sheddable request admitted just before it opened, with the
# adaptive limit and without it.

###############################################################################

use warnings;
use strict;

use Test::More;

use FindBin;
use Time::HiRes qw/ time sleep /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx;
use CB::Nginx qw/ conf start /;
use CB::Origin;
use CB::Status qw/ breaker_at /;
use CB::Response qw/ status /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy map/)->plan(19);

$t->write_file_expand('nginx.conf', conf(1, <<"EOF"));
    upstream u {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=4 open=1s jitter=0% probes=2
                        probe_interval=200ms;
    }

    upstream short {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=4 open=200ms jitter=0% probes=1
                        probe_interval=1s;
        circuit_breaker_limit adaptive;
    }
    upstream brief {
        server 127.0.0.1:%%PORT_8081%%;
        circuit_breaker min_requests=4 open=200ms jitter=0% probes=1
                        probe_interval=1s;
    }
    map \$uri \$cb_class {
        ~^/c/     critical;
        ~^/s/     sheddable;
        ~^/(short|brief)/c/  critical;
        ~^/(short|brief)/s/  sheddable;
        default   "";
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        circuit_breaker_class \$cb_class;

        location / { proxy_pass http://u; }
        location /short/ { proxy_pass http://short; }
        location /brief/ { proxy_pass http://brief; }
        location = /status { circuit_breaker_status; }
    }
EOF

my $hits = start($t, 8081);

###############################################################################

sub state { breaker_at('/status?upstream=u')->{state} // '' }

# trips the breaker with failing critical requests; returns how many lines the
# origin's hits file had then

sub trip {
	my ($tag) = @_;
	status(http_get("/c/$tag$_?status=500")) for 1 .. 6;
	return CB::Origin::hits($hits);
}

# the origin's hits after line FROM, in order

sub hits_after {
	my ($from) = @_;
	open my $fh, '<', $hits or return ();
	my @lines = <$fh>;
	chomp @lines;
	return @lines[$from .. $#lines];
}

# sends PATTERN (a list of "c" and "s") round and round, one request at a time,
# until the breaker is closed again or SECONDS pass: true when closed

sub until_closed {
	my ($seconds, @pattern) = @_;
	my $end = time() + $seconds;
	my $n = 0;
	while (time() < $end) {
		for my $k (@pattern) {
			status(http_get("/$k/r" . $n++));
		}
		return 1 if state() eq 'closed';
		sleep 0.01;
	}
	return state() eq 'closed';
}

###############################################################################

my $from = trip('trip');
is(state(), 'open', 'tripped');

ok(until_closed(20, qw/ c c c c s /), 'closed again by probes');
is(status(http_get('/c/after')), 200, 'a critical request passes once closed');
my @after = hits_after($from);
# the probes are the hits before the breaker closed: the first two after the trip
my @probes = @after[0, 1];
is(scalar(grep { m!^/s/! } @probes), 2, 'both probes were sheddable requests')
	or diag("origin after the trip: @after[0 .. ($#after < 5 ? $#after : 5)]");
is($after[-1], '/c/after', 'and reaches the origin');

# no sheddable request for over a second: a critical request probes

$from = trip('again');
is(state(), 'open', 'tripped again');
ok(until_closed(20, qw/ c /), 'closed by critical probes alone');
@after = hits_after($from);
is(scalar(grep { m!^/c/! } @after[0, 1]), 2, 'the probes were critical requests');

# A cooldown shorter than a class's second of presence: the sheddable request
# admitted just before the breaker opened is still present when the cooldown
# ends, so a critical request is answered as while open and the sheddable one
# that follows takes the probe.
for my $up (qw/ short brief /) {
	my $at = sub { breaker_at("/status?upstream=$up")->{state} // '' };
	# the first request of a location is asked under the breaker's lock (which
	# notes its class); the sheddable one after it passes without
	status(http_get("/$up/c/first"));
	is(status(http_get("/$up/s/warm")), 200, "$up: a sheddable request admitted");
	status(http_get("/$up/c/trip$_?status=500")) for 1 .. 4;
	my $opened = CB::Origin::hits($hits);
	is($at->(), 'open', "$up: tripped");
	# the cooldown (200 ms, no jitter) is over; the sheddable request is under a
	# second old
	sleep 0.3;
	is(status(http_get("/$up/c/after")), 503,
		"$up: a critical request is answered as while open");
	is(status(http_get("/$up/s/probe")), 200, "$up: a sheddable request probes");
	my @after = hits_after($opened);
	is(join(' ', @after), "/$up/s/probe",
		"$up: the origin saw the sheddable probe alone");
}
$t->stop();

unlike($t->read_file('error.log'), qr/\[(alert|crit|error)\]/, 'no errors');
