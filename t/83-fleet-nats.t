#!/usr/bin/perl

# prove: alone
# The fleet on a bus: instances of nginx with the module (one worker each)
# that exchange through a real NATS server (Debian's nats-server, started
# here; circuit_breaker_fleet nats://... id=iN), in front of one origin that
# counts every request, and a NATS client of the test's own (CB::Nats::Client)
# that records every message on the fleet's subjects and publishes its own.
#
# On one server:
#   a. opinions cross: i0's breaker opens on min_requests=20 failures at the
#      origin; i1 hears it (suspicious on its status page) and opens on
#      suspect_min=3 failures of its own, "while suspected";
#   b. i2, started later, says hello on connecting and i0 answers on i2's
#      reply subject with its nonce: i2 is suspicious within an interval or so;
#   c. with every instance started afresh (breakers closed), what the test
#      publishes is refused and counted on the status page (fleet.bus.refused)
#      and moves no breaker: i0's recorded open opinions replayed (replayed),
#      its recorded reply to i2's hello replayed to i2 and to i1
#      (unknown_nonce), i1's own recording played back to it (own_id), the
#      same opinions with a fresh sequence written over the recorded one or a
#      byte flipped, and every kind forged under another key on every subject
#      (auth), garbage, nothing and text on every subject, and a sealed
#      message on another kind's subject or out of form (malformed), and
#      i0's messages, recorded or freshly sealed with the fleet's key, on
#      another member's subjects (subject) -- the recording being one that
#      said i0's breaker open, with i1's own fingerprint, and had made i1
#      suspicious when it was news;
#   c2. i2's hellos, recorded, replayed in turn on its hello subject every few
#      milliseconds while i2 restarts: i2 still hears both members at once (a
#      hello is answered only when newer than every one taken from its sender;
#      the recordings used up every turn of i0's and i1's before);
#   d. members are listed (fleet.peers, fleet.bus.members) as they speak, and
#      one that stops is gone three intervals after it was last heard;
#   g. i0, quiet among 19 members the test plays (holding the key, each
#      speaking every interval and answering i0's asks), speaks every two
#      intervals and says so in its messages (every=2000); after a failure at
#      the origin it speaks at the next interval and every interval after.
# On a cluster of three servers with routes between them:
#   e. i0 and i1 on different servers exchange (i1 suspicious of i0's open
#      breaker); the server i0 uses (bus.server) killed, i0 connects to
#      another within seconds (connects 2, failures >= 1, one warn) while i1
#      notices nothing, and i0's opinions still cross: i2, started then on a
#      third server, is suspicious and opens on 3 failures;
#   f. every server killed: no breaker moves, requests through the closed
#      breakers all succeed (counted at the client and at the origin),
#      bus.state leaves "connected", the word of others expires, and each
#      instance logs one warn for the outage however many tries fail; one
#      server started again, all connect to it and hear each other again.

###############################################################################

use warnings;
use strict;

use Test::More;

use POSIX ();

use FindBin;
use Time::HiRes qw/ sleep time /;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT /;
use CB::Nginx qw/ start /;
use CB::Origin;
use CB::Fleet;
use CB::Nats;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $t = Test::Nginx->new()->has(qw/http proxy access/)->plan(48);

my ($module) = ($ENV{TEST_NGINX_GLOBALS} // '') =~ /load_module\s+([^;\s]+)/;
plan(skip_all => 'no module in TEST_NGINX_GLOBALS') unless $module;

my $MIN = 20;
my $SUSPECT = 3;

$t->write_file_expand('nginx.conf', CB::Nginx::conf(1, <<'EOF'));
    server {
        listen       127.0.0.1:8080;
        server_name  localhost;
        return 204;
    }
EOF

my $hits = start($t, 8081);
my $d = $t->testdir();

my $T0 = time();
sub mark { diag(sprintf('%s at %.1fs (%s)', $_[0], time() - $T0, CB::Nats::version())) }

# the fleet's view on instance I's status page, its bus, its members' ids

sub fleet_breaker {
	my ($f, $i) = @_;
	my ($b) = grep { $_->{upstream} eq 'origin' } @{$f->fleet_status($i)->{breakers} // []};
	return $b // {};
}

sub member {
	my ($f, $i, $id) = @_;
	my ($m) = grep { $_->{id} eq $id } @{$f->fleet_status($i)->{peers} // []};
	return $m;
}

# CHECK's first true value within TIMEOUT seconds, or undef

# failing requests to instance I, one at a time, until one is answered 503 (the breaker's)
# or MAX were sent; the statuses

# warn lines of an outage ("bus server ...: ...; reconnecting") in LOG

sub outage_warns {
	my ($log) = @_;
	return scalar(() = $log =~ /\[warn\] [^\n]*circuit breaker fleet: bus server [^\n]*reconnecting/g);
}

# the breakers of instances I..., as [state, opened, failures, suspicious]

sub breakers {
	my ($f, @i) = @_;
	return map {
		my $b = $f->breaker($_) // {};
		join '/', $b->{state} // '?', $b->{totals}{opened} // '?',
			$b->{totals}{failures} // '?', $b->{suspicious} ? 'suspicious' : '-'
	} @i;
}

###############################################################################
# one server

my $n = CB::Nats->start(dir => $d, name => 'one', port => port(8200),
	http_port => port(8201));

# the test's own client records every message on the fleet's subjects
my $S = CB::Nats::subjects();
my $rec = CB::Nats::Client->new(port => $n->port) or die "nats client: $@\n";
$rec->subscribe($S->{all});
$rec->flush(5) or die "nats client: no PONG\n";

my $f = CB::Fleet->new(
	dir => "$d/fleet",
	nginx => $Test::Nginx::NGINX,
	module => $module,
	ports => [ map { port(8090 + $_) } 0 .. 2 ],
	origin => port(8081),
	bus => [ $n->url ],
	breaker => "window=60s min_requests=$MIN failure_rate=50% open=1h "
		. "max_open=1h suspect_min=$SUSPECT",
);

mark('one server');

$f->start($_, fleet => 1) for 0 .. 1;

my $met = CB::Fleet::within(10, sub {
	$f->members(0) eq 'i1' && $f->members(1) eq 'i0'
});
my @b = map { $f->bus($_) } 0 .. 1;
ok($met && !grep({ $_->{state} ne 'connected' || $_->{server} ne $n->addr
	|| ($_->{server_name} // '') ne 'one' || $_->{members} != 1 } @b),
	'i0 and i1 connected to the server, each the other\'s member')
	or diag(explain(\@b));
is(join(' ', map { $f->fleet_status($_)->{transport} } 0 .. 1), 'nats nats',
	'the transport is nats');

###############################################################################
# a. opinions cross

my @st = $f->fail_until_open(0, $MIN + 5);
is(CB::Origin::hits($hits), $MIN, "i0 opened on its $MIN failures at the origin");
is($st[-1], 503, 'i0: then 503');

my $t1 = time();
my $sus = CB::Fleet::within(10, sub { ($f->breaker(1) // {})->{suspicious} });
ok($sus, sprintf('i1 suspicious %.2fs after i0 opened', time() - $t1));
is(CB::Fleet::within(5, sub { fleet_breaker($f, 1)->{peers_open} }), 1, 'i1: one member open');

CB::Origin::clear($hits);
@st = $f->fail_until_open(1, $MIN + 5);
is(CB::Origin::hits($hits), $SUSPECT, "i1 opened on $SUSPECT failures of its own");
like(($f->breaker(1) // {})->{last_transition} // '', qr/while suspected$/,
	'i1: while suspected');

###############################################################################
# b. a member that comes later learns at once

mark('b. i2 later');

$f->start(2, fleet => 1);
my $started = time();
$sus = CB::Fleet::within(10, sub { ($f->breaker(2) // {})->{suspicious} });
my $took = time() - $started;
ok($sus && $took <= 1 + 3, sprintf('i2 suspicious %.2fs after it started '
	. '(an interval is 1s)', $took));

# on the bus: i2's hello, and i0's reply in i2's inbox with that hello's nonce, sealed,
# saying its breaker is open
my %O = map { $_ => CB::Nats::subjects(undef, $_) } qw/ i0 i1 i2 /;
my $inbox2 = $O{i0}{reply}->('i2');
my $reply = $rec->find(5, sub {
	my $h = CB::Nats::header($_[0]{payload});
	$_[0]{subject} eq $inbox2 && $h && $h->{kind} eq 'reply' && $h->{sender} eq 'i0'
});
my $rh = CB::Nats::header($reply ? $reply->{payload} : undef) // {};
my $hello = $rec->find(0, sub {
	my $h = CB::Nats::header($_[0]{payload});
	$_[0]{subject} eq $O{i2}{hello} && $h && $h->{kind} eq 'hello'
		&& $h->{sender} eq 'i2' && $h->{nonce} eq ($rh->{nonce} // '')
});
ok($hello && $reply && (CB::Nats::state_of($reply->{payload}, 'origin') // '') eq 'open'
	&& CB::Nats::open_sealed($f->{secret}, $reply->{payload}),
	'i2 said hello, i0 answered in its inbox with its nonce, sealed: open')
	or diag(explain([ map { $_->{subject} . ' ' . $_->{payload} } $rec->msgs() ]));
ok(CB::Fleet::within(5, sub { $f->members(2) eq 'i0 i1' }), 'i2 knows both');
is(($f->breaker(2) // {})->{state}, 'closed', 'i2 itself stays closed');

###############################################################################
# c. recordings, forgeries and garbage

mark('c. attacks');

# i0's opinions saying its breaker open (what made i1 suspicious), and i1's own
$rec->drain();
my ($open0) = $rec->msgs(sub {
	my $h = CB::Nats::header($_[0]{payload});
	$_[0]{subject} eq $O{i0}{opinions} && $h && $h->{sender} eq 'i0'
		&& (CB::Nats::state_of($_[0]{payload}, 'origin') // '') eq 'open'
});
my ($own1) = $rec->msgs(sub {
	my $h = CB::Nats::header($_[0]{payload});
	$_[0]{subject} eq $O{i1}{opinions} && $h && $h->{sender} eq 'i1'
});
die "no recording of i0's open opinions or of i1's\n" unless $open0 && $own1 && $reply;
my $rec_open = $open0->{payload};
my $rec_reply = $reply->{payload};
my ($fp) = $rec_open =~ /^i0 origin default ([0-9a-f]{16}) open /m;

# everything afresh: breakers closed, no member known
$f->stop($_) for 0 .. 2;
$f->start($_, fleet => 1) for 0 .. 2;
$met = CB::Fleet::within(10, sub {
	$f->members(0) eq 'i1 i2' && $f->members(1) eq 'i0 i2' && $f->members(2) eq 'i0 i1'
});
ok($met, 'afresh: each knows the other two') or diag(explain([ map { $f->fleet_status($_) } 0 .. 2 ]));
my $fresh = $f->breaker(1) // {};
ok($fresh->{fingerprint} eq $fp && !$fresh->{suspicious} && $fresh->{state} eq 'closed',
	'the recording says i0 open with i1\'s own fingerprint; i1 closed, unsuspicious');

my %before = map { $_ => $f->bus($_)->{refused} // {} } 0 .. 2;
my $body = CB::Nats::header($rec_open)->{body};

my $fresh_seq = CB::Nats::now_seq();
(my $reseq = $rec_open) =~ s/^(cbbus 1 opinions i0 )\d+/$1$fresh_seq/;
my $flipped = $rec_open;
my $k = index($flipped, ' open ') + 1;
substr($flipped, $k, 1) = chr(ord(substr($flipped, $k, 1)) ^ 1);
my $garbage = join '', map { chr int rand 256 } 1 .. 200;
my $other = 'not-the-fleet-key-0123456789abcdef';

my ($op0, $hello0) = @{$O{i0}}{qw/ opinions hello /};
my @attack = (
	# replayed: to i1 (and i2) i0 said more since
	[ $op0, $rec_open ],
	[ $op0, $rec_open ],
	# own_id: i1's words played back to it
	[ $O{i1}{opinions}, $own1->{payload} ],
	# unknown_nonce: a reply to a hello no one awaits, in its inbox and another
	[ $O{i0}{reply}->('i2'), $rec_reply ],
	[ $O{i0}{reply}->('i1'), $rec_reply ],
	# auth: a fresh sequence over the recorded one, a byte flipped; each kind forged
	# under another key, on every subject i1 hears
	[ $op0, $reseq ],
	[ $op0, $flipped ],
	[ $op0, CB::Nats::seal($other,
		"cbbus 1 opinions i0 " . CB::Nats::now_seq() . "\n$body") ],
	[ $hello0, CB::Nats::seal($other, "cbbus 1 hello i0 " . CB::Nats::now_seq() . ' '
		. CB::Nats::nonce() . "\n") ],
	[ $O{i0}{ask}->('i1'), CB::Nats::seal($other, "cbbus 1 hello i0 "
		. CB::Nats::now_seq() . ' ' . CB::Nats::nonce() . "\n") ],
	[ $O{i0}{reply}->('i1'), CB::Nats::seal($other, "cbbus 1 reply i0 "
		. CB::Nats::now_seq() . ' ' . CB::Nats::nonce() . "\n$body") ],
	# malformed, at a glance: garbage, nothing, text, a bare auth line, on every subject
	[ $op0, $garbage ],
	[ $op0, '' ],
	[ $hello0, "hello\n" ],
	[ $O{i0}{ask}->('i1'), substr($garbage, 0, 100) ],
	[ $O{i0}{reply}->('i1'), 'auth ' . ('0' x 64) . "\n" ],
	# malformed: sealed, but on another kind's subject, or out of form
	[ $hello0, $rec_open ],
	[ $op0, CB::Nats::seal($f->{secret}, "cbbus 1 opinions i0 0123\n") ],
	# subject: sealed, but on another member's subject than its sender's (i0's recording
	# on i2's, the same news freshly sealed with the key on a stranger's, i0's reply on
	# i2's way to i1)
	[ $O{i2}{opinions}, $rec_open ],
	[ CB::Nats::subjects(undef, 'mallory')->{opinions}, CB::Nats::seal($f->{secret},
		"cbbus 1 opinions i0 " . CB::Nats::now_seq() . " 1000\n$body") ],
	[ $O{i2}{reply}->('i1'), $rec_reply ],
);
$rec->publish(@$_) for @attack;
$rec->flush(5) or die "nats client: no PONG\n";

my %want1 = (replayed => 2, own_id => 1, unknown_nonce => 1, auth => 6, malformed => 7,
	subject => 3);
my $delta = sub {
	my ($i, $r) = @_;
	my $now = $f->bus($i)->{refused} // {};
	return join ' ', map { "$_=" . (($now->{$_} // 0) - ($before{$i}{$_} // 0)) }
		sort keys %$r;
};
my $want = join ' ', map { "$_=$want1{$_}" } sort keys %want1;
CB::Fleet::within(10, sub { $delta->(1, \%want1) eq $want });
is($delta->(1, \%want1), $want, 'i1 refused and counted each');
CB::Fleet::within(10, sub { $delta->(2, { unknown_nonce => 1 }) eq 'unknown_nonce=1' });
is($delta->(2, { unknown_nonce => 1 }), 'unknown_nonce=1',
	'i2 refused the reply replayed into its inbox')
	or diag(explain($f->bus(2)));

# two more rounds of i0's word after them: anything believed would show by then
my $ex = (member($f, 1, 'i0') // {})->{exchanges} // 0;
CB::Fleet::within(10, sub { ((member($f, 1, 'i0') // {})->{exchanges} // 0) >= $ex + 2 });
is(join(' ', breakers($f, 0 .. 2)), join(' ', ('closed/0/0/-') x 3),
	'no breaker moved, none suspicious');
is(join(' ', map { fleet_breaker($f, $_)->{peers_open} // '?' } 0 .. 2),
	'0 0 0', 'no member open in anyone\'s view');

###############################################################################
# c2. recorded hellos replayed in turn

mark('c2. hellos replayed');

my @hellos2 = map { $_->{payload} } $rec->msgs(sub {
	my $h = CB::Nats::header($_[0]{payload});
	$_[0]{subject} eq $O{i2}{hello} && $h && $h->{kind} eq 'hello' && $h->{sender} eq 'i2'
});
die "fewer than two recorded hellos of i2\n" unless @hellos2 >= 2;
$f->stop(2);
# the recordings are older than a round of their hellos: i2 awaits no answer to them
sleep 1.2;
my $replayer = fork() // die "fork: $!\n";
if ($replayer == 0) {
	my $c = CB::Nats::Client->new(port => $n->port) or POSIX::_exit(1);
	my $end = time() + 8;
	my $i = 0;
	while (time() < $end) {
		$c->publish($O{i2}{hello}, $hellos2[$i++ % 2]);
		$c->flush(5) if $i % 50 == 0;
		sleep 0.002;
	}
	POSIX::_exit(0);
}
my $restarted = time();
$f->start(2, fleet => 1);
my $knows = CB::Fleet::within(6, sub { $f->members(2) eq 'i0 i1' && time() });
kill 'TERM', $replayer;
waitpid($replayer, 0);
ok($knows, sprintf('recorded hellos replayed in turn: i2 restarted knows both within %.1fs',
	($knows // time()) - $restarted)) or diag(explain($f->fleet_status(2)));

###############################################################################
# d. members come and go as they speak

mark('d. members');

is(join(' ', map { $f->bus($_)->{members} } 0 .. 2), '2 2 2', 'bus.members: 2 each');

# i2 stops: gone from the others' lists three intervals after they last heard it (the
# latest last_exchange they showed, from before it stopped on)
my $last = 0;
my $heard = sub {
	my @still;
	for my $i (0, 1) {
		my $m = member($f, $i, 'i2');
		$last = $m->{last_exchange} if $m && $m->{last_exchange} > $last;
		push @still, $i if $m;
	}
	return @still;
};
$heard->();
my $stopped = time();
$f->stop(2);
my $gone = CB::Fleet::within(15, sub { !$heard->() && time() });
ok($gone, sprintf('i2 gone from i0 and i1, %.1fs after it stopped', ($gone // time()) - $stopped));
ok($gone && $gone - $last >= 3 - 0.05,
	sprintf('not before the expiry: %.2fs after last heard (3 intervals)',
		($gone // 0) - $last));
is(join(' ', $f->members(0), '/', $f->members(1), '/',
	map { $f->bus($_)->{members} } 0, 1), 'i1 / i0 / 1 1', 'i0 and i1: each other alone');

###############################################################################
# g. a quiet member of a larger fleet speaks less often

mark('g. quiet');

$f->stop(1);

# 19 members of the test's own, which hold the fleet's key: each speaks every interval, and
# answers i0's asks (on P.ask.fK.i0) with a reply sealed with that hello's nonce
my @fake = map { "f$_" } 1 .. 19;
my %F = map { $_ => CB::Nats::subjects(undef, $_) } @fake;
my %answered;
my $said = sub {
	my ($kind, $id, $rest) = @_;
	return CB::Nats::seal($f->{secret}, "cbbus 1 $kind $id " . CB::Nats::now_seq()
		. "$rest\ncbfleet 1 $id 0 0\n");
};
my $speak = sub {
	$rec->publish($F{$_}{opinions}, $said->('opinions', $_, ' 1000')) for @fake;
	$rec->flush(5);
	# i0's asks, answered at once: a reply counts only within a second of its hello
	$rec->poll(0.3);
	for my $m ($rec->msgs(sub { $_[0]{subject} =~ /\.ask\.f\d+\.i0$/ })) {
		my ($id) = $m->{subject} =~ /\.ask\.(f\d+)\.i0$/;
		my $h = CB::Nats::header($m->{payload}) or next;
		next if $answered{$h->{nonce}}++;
		$rec->publish($F{$id}{reply}->('i0'), $said->('reply', $id, " $h->{nonce} 1000"));
	}
	$rec->flush(5);
};
# speaks each second until CHECK holds (at most SECONDS); what CHECK said last
my $speaking = sub {
	my ($seconds, $check) = @_;
	my $end = time() + $seconds;
	my $r;
	while (time() < $end) {
		my $next = time() + 1;
		$speak->();
		last if $r = $check->();
		sleep(0.05) while time() < $next;
	}
	return $r;
};

my $joined = $speaking->(15, sub { $f->bus(0)->{members} == 19 && $f->members(0) !~ /i1/ });
ok($joined, 'i0 counts the 19 members of the test, and i1 is gone');

# i0's messages on its opinions subject since FROM: [sent at (its sequence, the sender's
# clock in microseconds), every]
my $sent = sub {
	my ($from) = @_;
	return map { [ $_->{seq} / 1e6, $_->{every} ] } grep { $_->{seq} / 1e6 >= $from }
		map { CB::Nats::header($_->{payload}) }
		$rec->msgs(sub { $_[0]{subject} eq $O{i0}{opinions} });
};

# quiet (closed, nothing failed), among 19: i0 speaks every 2 intervals, and says so
my $from = time();
$speaking->(9, sub { 0 });
my @said = $sent->($from + 1);
my @gaps = map { sprintf '%.2f', $said[$_][0] - $said[$_ - 1][0] } 1 .. $#said;
ok(@said >= 3 && @said <= 5 && !grep({ $_->[1] != 2000 } @said)
	&& !grep({ $_ < 1.9 || $_ > 3 } @gaps),
	sprintf('quiet among 20: %d heartbeats in 8 s, every=%s, gaps %s', scalar @said,
		join(',', map { $_->[1] } @said), join(' ', @gaps)));

# a failure: no longer quiet, i0 speaks at the next interval and each interval after
my ($failed) = $f->get(0, '/u?status=500&q=1', 3);
my $at = time();
$speaking->(4.5, sub { 0 });
my @loud = map { [ $_->[0] - $at, $_->[1] ] } $sent->($at);
@gaps = map { $loud[$_][0] - $loud[$_ - 1][0] } 1 .. $#loud;
ok($failed == 500 && @loud >= 3 && $loud[0][0] < 1.6 && !grep({ $_->[1] != 1000 } @loud)
	&& !grep({ $_ > 1.6 } @gaps),
	sprintf('after a failure: %s', join(' ', map { sprintf '%.2fs:%s', @$_ } @loud)));

$f->stop_all();
is(join('', $f->alerts()), '', 'no alerts on one server');
$rec->close();
$n->kill();

###############################################################################
# a cluster of three

mark('e. cluster');

my @c = CB::Nats->cluster(dir => $d, names => [qw/ c1 c2 c3 /],
	ports => [ map { port(8210 + $_) } 0 .. 2 ],
	cluster_ports => [ map { port(8215 + $_) } 0 .. 2 ],
	http_ports => [ map { port(8220 + $_) } 0 .. 2 ]);
my %by = map { $_->addr => $_ } @c;

CB::Origin::clear($hits);

my $g = CB::Fleet->new(
	dir => "$d/cluster",
	nginx => $Test::Nginx::NGINX,
	module => $module,
	ports => [ map { port(8095 + $_) } 0 .. 2 ],
	local_ports => [ map { port(8105 + $_) } 0 .. 2 ],
	origin => port(8081),
	bus => [ map { $_->url } @c ],
	breaker => "window=60s min_requests=$MIN failure_rate=50% open=1h "
		. "max_open=1h suspect_min=$SUSPECT",
);

# i0 on any server, i1 on the two others
$g->start(0, fleet => 1);
my $x = CB::Fleet::within(10, sub { my $b = $g->bus(0); $b->{state} eq 'connected' && $b->{server} });
die "i0 did not connect to the cluster\n" unless $x;
$g->start(1, fleet => 1, bus => [ map { $_->url } grep { $_->addr ne $x } @c ]);

$met = CB::Fleet::within(10, sub { $g->members(0) eq 'i1' && $g->members(1) eq 'i0' });
my $y = $g->bus(1)->{server} // '';
ok($met && $y && $y ne $x, "i0 on $x and i1 on $y: members of each other");

@st = $g->fail_until_open(0, $MIN + 5);
is(CB::Origin::hits($hits), $MIN, "i0 opened on its $MIN failures");
$sus = CB::Fleet::within(10, sub { ($g->breaker(1) // {})->{suspicious} });
ok($sus, 'i1, on another server, suspicious of it');

# the server i0 uses dies
my $log0 = length $g->error_log(0);
my $killed = time();
$by{$x}->kill();
my $back = CB::Fleet::within(15, sub {
	my $b = $g->bus(0);
	$b->{state} eq 'connected' && $b->{connects} == 2 && $b
});
ok($back && $back->{server} ne $x && $back->{failures} >= 1,
	sprintf('i0 connected to %s, %.2fs after %s died (connects %s, failures %s)',
		$back->{server} // '-', time() - $killed, $x, $back->{connects} // '-',
		$back->{failures} // '-'))
	or diag(explain($g->bus(0)));
my $w = $back ? $back->{server} : '';
# the outage is over once the new connection has held a ping interval: then, and not at
# every reconnection, it is said at notice
my $again = qr/\[notice\] [^\n]*connected to the bus at \Q$w\E again \(server "c\d"\)/;
CB::Fleet::within(10, sub { substr($g->error_log(0), $log0) =~ $again });
my $since0 = substr($g->error_log(0), $log0);
is(outage_warns($since0), 1, 'i0: one warn');
like($since0, $again, 'i0: connected again, said at notice once the connection held');
my $b1 = $g->bus(1);
ok($b1->{state} eq 'connected' && $b1->{connects} == 1 && $b1->{failures} == 0,
	'i1 noticed nothing') or diag(explain($b1));

# i2, started now on a server i0 is not on: it hears i0 (the only one open)
$g->start(2, fleet => 1, bus => [ map { $_->url } grep { $_->addr ne $w } @c ]);
my $v = CB::Fleet::within(10, sub { my $b = $g->bus(2); $b->{state} eq 'connected' && $b->{server} });
$sus = CB::Fleet::within(10, sub { ($g->breaker(2) // {})->{suspicious} });
ok($v && $v ne $w && $sus, "i2 on " . ($v // '-') . ": suspicious of i0 (on $w)");
CB::Origin::clear($hits);
@st = $g->fail_until_open(2, $MIN + 5);
is(CB::Origin::hits($hits), $SUSPECT, "i2 opened on $SUSPECT failures of its own");
like(($g->breaker(2) // {})->{last_transition} // '', qr/while suspected$/,
	'i2: while suspected');

###############################################################################
# f. every server down

mark('f. all down');

# an outage ends once a connection has held a ping interval (1s): each connection has,
# before this one begins
my $held_up = CB::Fleet::within(15, sub {
	!grep {
		my $b = $g->bus($_);
		$b->{state} ne 'connected' || !defined $b->{since} || time() - $b->{since} < 2.5
	} 0 .. 2
});
ok($held_up, 'every connection held 2.5s before the servers die');

my @held = breakers($g, 0 .. 2);
my @logs = map { length $g->error_log($_) } 0 .. 2;
my @fails = map { $g->bus($_)->{failures} } 0 .. 2;
my @connects = map { $g->bus($_)->{connects} } 0 .. 2;
my $down = time();
$_->kill() for grep { $_->running } @c;

# each has tried every server of its own twice or more since
my $tried = CB::Fleet::within(20, sub {
	!grep {
		my $b = $g->bus($_);
		$b->{state} eq 'connected' || $b->{failures} < $fails[$_] + 6
	} 0 .. 2
});
ok($tried, sprintf('all three try again and again, none connected (%s) after %.1fs',
	join(' ', map { my $b = $g->bus($_); "$b->{state}:$b->{failures}" } 0 .. 2),
	time() - $down));

# requests meanwhile: through i1's closed breaker to the origin, and through every
# instance's breaker of a server of its own
CB::Origin::clear($hits);
my (%codes, $n200);
for my $k (1 .. 20) {
	my ($st) = $g->get(1, "/u?status=200&k=$k", 3);
	$codes{$st}++;
}
for my $i (0 .. 2) {
	for (1 .. 10) {
		my ($st) = $g->get($i, '/l', 3);
		$codes{"l$st"}++;
	}
}
is(join(' ', map { "$_:$codes{$_}" } sort keys %codes), '200:20 l200:30',
	'requests all answered by their origin');
is(CB::Origin::hits($hits), 20, 'the origin had each');

my $expired = CB::Fleet::within(10, sub { !($g->breaker(1) // {})->{suspicious} });
ok($expired, 'i1: i0\'s word expired, it acts alone');
is(join(' ', map { outage_warns(substr($g->error_log($_), $logs[$_])) } 0 .. 2), '1 1 1',
	'one warn each for the outage');

# one server back, the one every instance lists
my ($u) = grep { $_->addr ne $x && $_->addr ne $w } @c;
$u->restart();
my $server_back = time();
my $up = CB::Fleet::within(20, sub {
	!grep {
		my $b = $g->bus($_);
		$b->{state} ne 'connected' || $b->{server} ne $u->addr
	} 0 .. 2
});
ok($up, sprintf('all three connected to %s again, %.1fs after it started', $u->addr,
	time() - $server_back));
is(join(' ', map { $g->bus($_)->{connects} - $connects[$_] } 0 .. 2), '1 1 1',
	'one connection each');
$sus = CB::Fleet::within(10, sub { ($g->breaker(1) // {})->{suspicious} });
ok($sus, 'i1 hears i0 again: suspicious');
my @after = breakers($g, 0 .. 2);
s/\/suspicious$|\/-$// for @held, @after;
is("@after", "@held", "no breaker moved: @after");

$g->stop_all();
is(join('', $g->alerts()), '', 'no alerts on the cluster');
$_->kill() for @c;

###############################################################################
