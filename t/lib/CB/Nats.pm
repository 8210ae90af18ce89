package CB::Nats;

# Debian's nats-server, a real NATS server (never a stand-in), for the fleet on a bus
# (t/83-fleet-nats.t, t/84-fleet-nats-tls.t, scripts/fleet-measure --transport nats): one
# server, a cluster of three with routes between them, a server with TLS and one asking for
# a user and a password, each on 127.0.0.1 ports the caller gives, from a configuration file
# written in DIR; started and waited for (its client port sends INFO; a cluster's routes are
# up by each server's monitoring port, /routez, and a message published on each server
# reaches a subscriber on another), killed (SIGKILL: its clients see their connection
# closed) or stopped (TERM), and started again on the same ports.
#
#	my $n = CB::Nats->start(dir => $d, name => 'n1', port => port(8200),
#		http_port => port(8201));
#	my @s = CB::Nats->cluster(dir => $d, names => [qw/ c1 c2 c3 /],
#		ports => [...], cluster_ports => [...], http_ports => [...]);
#	my $t = CB::Nats->start(dir => $d, name => 'tls', port => port(8210),
#		tls => { cert => "$d/nats.crt", key => "$d/nats.key" });
#	my $a = CB::Nats->start(dir => $d, name => 'auth', port => port(8211),
#		user => 'edge', password => 'sesame');
#	my $p = CB::Nats->start(dir => $d, name => 'pinned', port => port(8212),
#		users => [ { user => 'i0', password => 'sesame',
#			permissions => CB::Nats::pinned_permissions('i0') } ]);
#	$n->url;		# nats://127.0.0.1:PORT (tls:// for a TLS server)
#	$n->kill; $n->restart;
#
# Each server is a child of the process that started it; only what this module started is
# signalled, by its pid and its start time (CB::Proc), never by name.  An END block stops the
# servers still running, and a watchdog process beside each one kills it if the creating
# process is gone (killed, even by SIGKILL), so that a test that dies leaves none behind.
#
# Also, in core Perl: the fleet's bus seal (HMAC-SHA-256 with Digest::SHA) to read, forge and
# alter what members publish, and CB::Nats::Client below, a tiny NATS client (INFO, CONNECT,
# SUB, PUB, PING/PONG, MSG frames with their payload) to record what the instances publish
# and publish what a test wants heard: recordings again, altered ones, forgeries, garbage.

use warnings;
use strict;

use Digest::SHA qw/ hmac_sha256_hex sha256_hex /;
use File::Spec;
use IO::Select;
use IO::Socket::INET;
use JSON::PP qw//;
use POSIX qw//;
use Time::HiRes qw/ sleep time /;

use CB::Proc qw/ started kill_same /;

my @all;

# the server binary: TEST_NATS_SERVER, else nats-server on the PATH or where Debian puts it

sub binary {
	return $ENV{TEST_NATS_SERVER} if $ENV{TEST_NATS_SERVER};
	for my $d (File::Spec->path(), '/usr/sbin', '/usr/bin') {
		my $f = File::Spec->catfile($d, 'nats-server');
		return $f if -f $f && -x _;
	}
	return undef;
}

# the version the server says (nats-server --version), or ''

sub version {
	my $bin = binary() // return '';
	my $v = `$bin --version 2>&1` // '';
	return $v =~ /(v\d+\.\d+\.\d+)/ ? $1 : '';
}

###############################################################################
# a server

# Starts one server and waits until it sends INFO (dies if it does not within 10 s):
#
#	dir		where its configuration (nats-NAME.conf) and log (nats-NAME.log) go
#	name		its server_name (default: its port)
#	port		its client port on 127.0.0.1
#	http_port	its monitoring port (/varz, /routez, /connz)
#	cluster_port	its route port, and routes => [ other servers' route ports ]
#	tls		{ cert => FILE, key => FILE }: TLS required of every client
#	user, password	the credentials required of every client
#	users		[ { user, password, permissions } ]: several users instead, each with
#			its permissions (nats-server's syntax, e.g. pinned_permissions()); or
#			{ nkey => PUBLIC KEY } for an NKey user
#	operator	{ jwt => FILE, accounts => { PUBLIC KEY => JWT } }: decentralized
#			authentication (JWTs), the accounts preloaded in a memory resolver
#	debug		the server's debug log

sub start {
	my ($class, %o) = @_;
	my $self = $class->new(%o);
	$self->_spawn();
	$self->wait_listening(10)
		or die "nats-server $self->{name} did not start (see $self->{log})\n";
	return $self;
}

sub new {
	my ($class, %o) = @_;
	die "nats-server not found (scripts/setup installs Debian's)\n" unless binary();
	my $self = bless { %o, owner => $$ }, $class;
	$self->{name} //= $o{port};
	$self->{conf} = "$o{dir}/nats-$self->{name}.conf";
	$self->{log} = "$o{dir}/nats-$self->{name}.log";
	$self->_write_conf();
	push @all, $self;
	return $self;
}

# A cluster: one server per entry of PORTS (with NAMES, CLUSTER_PORTS and HTTP_PORTS at the
# same place, and the other options for each), every one routing to every other; returns
# them once every server has a route to each other one and a message published on each
# server reaches a subscriber on the next (dies after 20 s otherwise).

sub cluster {
	my ($class, %o) = @_;
	my @ports = @{$o{ports}};
	my @cports = @{$o{cluster_ports}};
	my @s;
	for my $i (0 .. $#ports) {
		my %one = %o;
		delete @one{qw/ ports cluster_ports http_ports names /};
		push @s, $class->new(%one,
			name => ($o{names} // [])->[$i] // "c$i",
			port => $ports[$i],
			cluster_port => $cports[$i],
			http_port => ($o{http_ports} // [])->[$i],
			routes => [ map { $cports[$_] } grep { $_ != $i } 0 .. $#ports ]);
	}
	$_->_spawn() for @s;
	for my $s (@s) {
		$s->wait_listening(10)
			or die "nats-server $s->{name} did not start (see $s->{log})\n";
	}
	wait_routes(20, @s) or die "the nats-server cluster's routes did not come up\n";
	return @s;
}

# Waits until each of SERVERS has a route to every other (by /routez where it has a
# monitoring port) and a message published on each reaches a subscriber on the next one;
# true then, false after TIMEOUT seconds.

sub wait_routes {
	my ($timeout, @s) = @_;
	my $end = time() + $timeout;

	while (time() < $end) {
		last unless grep { defined $_->{http_port} && $_->routes() < @s - 1 } @s;
		sleep 0.1;
	}

	for my $i (0 .. $#s) {
		my $to = $s[($i + 1) % @s];
		my $sub = CB::Nats::Client->new(port => $to->{port}, %{$to->_credentials()})
			or return 0;
		my $pub = CB::Nats::Client->new(port => $s[$i]{port}, %{$s[$i]->_credentials()})
			or return 0;
		my $subject = "cbtest.routes.$$.$i";
		$sub->subscribe($subject);
		$sub->flush(5);
		my $got;
		# interest crosses the route a moment after SUB: published until heard
		while (!$got && time() < $end) {
			$pub->publish($subject, "route $i");
			$pub->flush(2);
			$got = $sub->wait_msg(0.2, sub { $_[0]{subject} eq $subject });
		}
		$sub->close();
		$pub->close();
		return 0 unless $got;
	}
	return 1;
}

sub _credentials {
	my ($self) = @_;
	return {} unless defined $self->{user};
	return { user => $self->{user}, password => $self->{password} };
}

sub _write_conf {
	my ($self) = @_;
	my $conf = "server_name: \"$self->{name}\"\n"
		. "listen: \"127.0.0.1:$self->{port}\"\n"
		. "log_file: \"$self->{log}\"\n"
		. "logtime: true\n"
		. ($self->{debug} ? "debug: true\n" : '');
	$conf .= "http: \"127.0.0.1:$self->{http_port}\"\n" if defined $self->{http_port};
	if (defined $self->{cluster_port}) {
		$conf .= "cluster {\n"
			. "  name: \"cbtest\"\n"
			. "  listen: \"127.0.0.1:$self->{cluster_port}\"\n"
			. "  routes: [\n"
			. join('', map { "    \"nats-route://127.0.0.1:$_\"\n" }
				@{$self->{routes} // []})
			. "  ]\n"
			. "}\n";
	}
	if (my $tls = $self->{tls}) {
		$conf .= "tls {\n"
			. "  cert_file: \"$tls->{cert}\"\n"
			. "  key_file: \"$tls->{key}\"\n"
			. "  timeout: 5\n"
			. "}\n";
	}
	if (defined $self->{user}) {
		$conf .= "authorization {\n"
			. "  user: \"$self->{user}\"\n"
			. "  password: \"$self->{password}\"\n"
			. "}\n";
	}
	if (my $users = $self->{users}) {
		$conf .= "authorization {\n  users: [\n"
			. join('', map {
				'    { ' . (defined $_->{nkey} ? "nkey: \"$_->{nkey}\""
					: "user: \"$_->{user}\", password: \"$_->{password}\"")
				. (defined $_->{permissions} ? ", permissions: $_->{permissions}" : '')
				. " }\n"
			} @$users)
			. "  ]\n}\n";
	}
	if (my $op = $self->{operator}) {
		$conf .= "operator: \"$op->{jwt}\"\n"
			. "resolver: MEMORY\n"
			. "resolver_preload: {\n"
			. join('', map { "  $_: \"$op->{accounts}{$_}\"\n" } sort keys %{$op->{accounts}})
			. "}\n";
	}
	open my $fh, '>', $self->{conf} or die "$self->{conf}: $!\n";
	print $fh $conf;
	close $fh;
}

sub _spawn {
	my ($self) = @_;
	my $bin = binary();
	my $pid = fork() // die "fork: $!\n";
	if ($pid == 0) {
		open STDOUT, '>>', "$self->{dir}/nats-$self->{name}.out";
		open STDERR, '>&', \*STDOUT;
		exec $bin, '-c', $self->{conf} or POSIX::_exit(127);
	}
	$self->{pid} = $pid;
	$self->{started} = undef;
	# its start time, once exec has replaced our fork (the same pid, a new program)
	my $end = time() + 5;
	until (defined $self->{started}) {
		my $cmd = CB::Proc::cmdline($pid);
		$self->{started} = started($pid) if $cmd =~ /nats-server/;
		last if time() > $end || !CB::Proc::alive($pid);
		sleep 0.01 unless defined $self->{started};
	}
	$self->{watchdog} = _watchdog($self->{owner}, $pid, $self->{started});
}

# a process that kills the server PID (started at START) once OWNER is gone, and ends by
# itself once the server is gone

sub _watchdog {
	my ($owner, $pid, $start) = @_;
	return undef unless defined $start;
	my $w = fork() // die "fork: $!\n";
	if ($w == 0) {
		my $stop = 0;
		local $SIG{TERM} = sub { $stop = 1 };
		while (!$stop) {
			if (getppid() != $owner) {
				kill_same('KILL', [ $pid, $start ]);
				last;
			}
			my $now = started($pid);
			last if !defined $now || $now ne $start || _zombie($pid);
			sleep 0.2;
		}
		POSIX::_exit(0);
	}
	return $w;
}

sub _zombie {
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or return 1;
	my $stat = <$fh> // '';
	return $stat =~ /\)\s+Z\s/;
}

# true once its client port sends INFO (within TIMEOUT seconds); the INFO is kept (info())

sub wait_listening {
	my ($self, $timeout) = @_;
	my $end = time() + $timeout;
	while (time() < $end) {
		return 0 unless $self->{pid} && CB::Proc::alive($self->{pid});
		my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$self->{port}",
			Timeout => 1);
		if ($s) {
			my $line = _read_line($s, 2);
			CORE::close($s);
			if (defined $line && $line =~ /^INFO\s+(\{.*\})/) {
				$self->{info} = eval { JSON::PP::decode_json($1) };
				return 1;
			}
		}
		sleep 0.05;
	}
	return 0;
}

sub _read_line {
	my ($s, $timeout) = @_;
	my $sel = IO::Select->new($s);
	my $buf = '';
	my $end = time() + $timeout;
	while ($buf !~ /\r\n/) {
		my $left = $end - time();
		return undef if $left <= 0 || !$sel->can_read($left);
		my $n = sysread($s, $buf, 4096, length $buf);
		return undef unless $n;
	}
	return (split /\r\n/, $buf, 2)[0];
}

sub info { $_[0]{info} // {} }
sub name { $_[0]{name} }
sub port { $_[0]{port} }
sub pid { $_[0]{pid} }
sub addr { "127.0.0.1:$_[0]{port}" }

# how an instance lists it: tls:// for a TLS server

sub url {
	my ($self) = @_;
	return ($self->{tls} ? 'tls://' : 'nats://') . $self->addr();
}

sub running {
	my ($self) = @_;
	return $self->{pid} && CB::Proc::alive($self->{pid}) ? 1 : 0;
}

# the monitoring port's answer to GET PATH, decoded, or undef

sub monitor {
	my ($self, $path) = @_;
	return undef unless defined $self->{http_port};
	my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$self->{http_port}",
		Timeout => 2) or return undef;
	print $s "GET $path HTTP/1.0\r\nHost: localhost\r\n\r\n";
	my $sel = IO::Select->new($s);
	my $buf = '';
	my $end = time() + 3;
	while (time() < $end) {
		last unless $sel->can_read($end - time());
		my $n = sysread($s, $buf, 65536, length $buf);
		last unless $n;
	}
	close $s;
	my (undef, $body) = split /\r\n\r\n/, $buf, 2;
	return eval { JSON::PP::decode_json($body // '') };
}

# routes up, by /routez (0 without a monitoring port)

sub routes {
	my ($self) = @_;
	return (($self->monitor('/routez') // {})->{num_routes}) // 0;
}

# the client connections the server has now, by /connz: [ { name, ... } ]

sub connections {
	my ($self) = @_;
	return [ @{(($self->monitor('/connz?limit=1024') // {})->{connections}) // []} ];
}

# SIGKILL: gone at once, its clients' connections closed by the kernel; connections to its
# port are refused until restart()

sub kill {
	my ($self) = @_;
	$self->_end('KILL');
}

# TERM: the server closes its connections and exits (KILL after 10 s)

sub stop {
	my ($self) = @_;
	$self->_end('TERM');
}

sub _end {
	my ($self, $sig) = @_;
	my $pid = delete $self->{pid} or return;
	if (defined $self->{started}) {
		kill_same($sig, [ $pid, $self->{started} ]);
		my $end = time() + 10;
		while (CB::Proc::alive($pid) && time() < $end) {
			sleep 0.02;
		}
		kill_same('KILL', [ $pid, $self->{started} ]);
	} else {
		# exec never happened (or the pid is our own fork still): ours alone
		CORE::kill('KILL', $pid);
	}
	waitpid($pid, 0);
	if (my $w = delete $self->{watchdog}) {
		CORE::kill('TERM', $w);
		waitpid($w, 0);
	}
}

# starts it again on the same ports, with the same configuration; dies if it does not answer

sub restart {
	my ($self) = @_;
	die "nats-server $self->{name} still runs\n" if $self->{pid};
	$self->_spawn();
	$self->wait_listening(10)
		or die "nats-server $self->{name} did not start again (see $self->{log})\n";
	return $self;
}

END {
	local $?;
	for my $s (@all) {
		next unless $s->{owner} == $$;
		$s->_end('TERM');
	}
}

###############################################################################
# the fleet's bus messages (core/src/fleet/bus/frame.rs), as a test reads and makes them

# a member's id as a subject token: the id itself when it is made of letters, digits, _ and
# -, at most 32 bytes, and not spelled as a digest; else x and the first 16 hex digits of its
# SHA-256

sub token {
	my ($id) = @_;
	return $id if $id =~ /\A[A-Za-z0-9_-]{1,32}\z/ && $id !~ /\Ax[0-9a-f]{16}\z/;
	return 'x' . substr(sha256_hex($id), 0, 16);
}

# the subjects of a fleet under PREFIX (default circuit_breaker.fleet): all of them, and
# those member ID publishes on: its opinions, its hello to everyone, and (code references,
# given the member addressed) its hello to one member and its reply to one

sub subjects {
	my ($prefix, $id) = @_;
	$prefix //= 'circuit_breaker.fleet';
	my %s = (prefix => $prefix, all => "$prefix.>");
	if (defined $id) {
		my $me = token($id);
		$s{opinions} = "$prefix.opinions.$me";
		$s{hello} = "$prefix.hello.$me";
		$s{ask} = sub { "$prefix.ask." . token($_[0]) . ".$me" };
		$s{reply} = sub { "$prefix.reply." . token($_[0]) . ".$me" };
	}
	return \%s;
}

# the permissions docs/fleet.md grants member ID on a bus that pins each member to its own
# subjects, in nats-server's configuration syntax

sub pinned_permissions {
	my ($id, $prefix) = @_;
	$prefix //= 'circuit_breaker.fleet';
	my $me = token($id);
	return "{ publish: [\"$prefix.*.$me\", \"$prefix.*.*.$me\"], "
		. "subscribe: [\"$prefix.opinions.*\", \"$prefix.hello.*\", "
		. "\"$prefix.ask.$me.*\", \"$prefix.reply.$me.*\"] }";
}

# SIGNED (a header line and a body) sealed with SECRET for the fleet of subject PREFIX
# (circuit_breaker.fleet by default): its auth line appended

sub seal {
	my ($secret, $signed, $prefix) = @_;
	$prefix //= 'circuit_breaker.fleet';
	return $signed . 'auth ' . hmac_sha256_hex("cbfleet bus $prefix\n$signed", $secret) . "\n";
}

# what a sealed PAYLOAD signs when its auth line verifies under SECRET (and PREFIX), else undef

sub open_sealed {
	my ($secret, $payload, $prefix) = @_;
	return undef unless defined $payload && length $payload >= 70;
	my $signed = substr($payload, 0, -70);
	return $payload eq seal($secret, $signed, $prefix) ? $signed : undef;
}

# a payload's header: { kind, sender, seq, nonce, body } (undef when the first line is not
# a bus header); the body is what stands between the header line and the auth line

sub header {
	my ($payload) = @_;
	return undef unless defined $payload
		&& $payload =~ /\Acbbus 1 (opinions|hello|reply) (\S+)((?: \S+)*)\n/;
	my ($kind, $sender, @rest) = ($1, $2, split ' ', $3);
	my $body = substr($payload, length $&);
	$body = substr($body, 0, -70) if length $body >= 70;
	my %h = (kind => $kind, sender => $sender, body => $body);
	@h{qw/ seq every /} = @rest if $kind eq 'opinions';
	@h{qw/ seq nonce /} = @rest if $kind eq 'hello';
	@h{qw/ seq nonce every /} = @rest if $kind eq 'reply';
	return \%h;
}

# the state a message's body gives SENDER's own breaker UPSTREAM (route default), or undef

sub state_of {
	my ($payload, $upstream) = @_;
	my $h = header($payload) // return undef;
	return $h->{body} =~ /^\Q$h->{sender}\E \Q$upstream\E default [0-9a-f]{16} (\w+) /m
		? $1 : undef;
}

# a fresh sequence as members write them: the wall clock in microseconds

sub now_seq {
	return sprintf('%d', time() * 1e6);
}

sub nonce {
	return join '', map { sprintf '%02x', int rand 256 } 1 .. 16;
}

###############################################################################

package CB::Nats::Client;

# A NATS client for tests, in core Perl, over plain TCP: what the protocol needs to publish
# and to record (INFO, CONNECT without echo, SUB, PUB, PING/PONG, MSG with its payload of
# any bytes).  Every message received is kept, in order, in msgs().
#
#	my $c = CB::Nats::Client->new(port => $port) or die;
#	$c->subscribe('circuit_breaker.fleet.>');
#	$c->flush(5);				# the server took all so far
#	$c->poll(0.5);				# what arrived within 0.5 s
#	my $m = $c->wait_msg(5, sub { $_[0]{subject} eq ... });	# one to come
#	my $m = $c->find(5, sub { ... });	# or one received already
#	$c->publish($subject, $payload);

use IO::Select;
use IO::Socket::INET;
use JSON::PP qw//;
use Time::HiRes qw/ sleep time /;

# connects, reads INFO, says CONNECT and waits for the PONG to its PING; undef (and $@ the
# reason: the server's -ERR) when that fails within TIMEOUT seconds

sub new {
	my ($class, %o) = @_;
	my $self = bless { buf => '', msgs => [], sids => 0, pongs => 0, errors => [] }, $class;
	my $timeout = $o{timeout} // 5;
	my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$o{port}", Timeout => $timeout);
	unless ($s) {
		$@ = "connect: $!";
		return undef;
	}
	binmode $s;
	$s->autoflush(1);
	$self->{s} = $s;
	$self->{sel} = IO::Select->new($s);
	my $end = time() + $timeout;
	$self->_read(0.1) while !defined $self->{info} && !$self->{closed} && time() < $end;
	unless ($self->{info}) {
		$@ = 'no INFO';
		return undef;
	}
	my %c = (verbose => JSON::PP::false, pedantic => JSON::PP::false,
		echo => JSON::PP::false, name => $o{name} // 'cb-test', lang => 'perl',
		version => '0', protocol => 1);
	@c{qw/ user pass /} = @o{qw/ user password /} if defined $o{user};
	$self->_send('CONNECT ' . JSON::PP->new->canonical->encode(\%c) . "\r\n");
	unless ($self->flush($timeout)) {
		$@ = join('; ', @{$self->{errors}}) || 'no PONG';
		return undef;
	}
	return $self;
}

sub info { $_[0]{info} }

sub _send {
	my ($self, $bytes) = @_;
	return 0 if $self->{closed};
	local $SIG{PIPE} = 'IGNORE';
	my $off = 0;
	while ($off < length $bytes) {
		my $n = syswrite($self->{s}, $bytes, length($bytes) - $off, $off);
		if (!defined $n) {
			next if $!{EINTR} || $!{EAGAIN};
			$self->{closed} = 1;
			return 0;
		}
		$off += $n;
	}
	return 1;
}

# subscribes to SUBJECT (wildcards allowed); its sid

sub subscribe {
	my ($self, $subject) = @_;
	my $sid = ++$self->{sids};
	$self->_send("SUB $subject $sid\r\n");
	return $sid;
}

sub publish {
	my ($self, $subject, $payload) = @_;
	return $self->_send("PUB $subject " . length($payload) . "\r\n$payload\r\n");
}

# PING, then reads until its PONG (the server has taken everything sent before); false
# after TIMEOUT seconds, or on -ERR

sub flush {
	my ($self, $timeout) = @_;
	my $want = $self->{pongs} + 1;
	my $errors = @{$self->{errors}};
	$self->_send("PING\r\n") or return 0;
	my $end = time() + ($timeout // 5);
	while ($self->{pongs} < $want && time() < $end && !$self->{closed}) {
		$self->_read($end - time());
		return 0 if @{$self->{errors}} > $errors;
	}
	return $self->{pongs} >= $want;
}

# reads what arrives within SECONDS; the messages taken now

sub poll {
	my ($self, $seconds) = @_;
	my $from = @{$self->{msgs}};
	my $end = time() + ($seconds // 0);
	do {
		$self->_read($end - time());
	} while (time() < $end && !$self->{closed});
	return @{$self->{msgs}}[$from .. $#{$self->{msgs}}];
}

# the first message, from now on, for which CHECK holds, within TIMEOUT seconds; undef
# otherwise

sub wait_msg {
	my ($self, $timeout, $check) = @_;
	my $from = @{$self->{msgs}};
	my $end = time() + $timeout;
	while (1) {
		for my $m (@{$self->{msgs}}[$from .. $#{$self->{msgs}}]) {
			return $m if $check->($m);
		}
		$from = @{$self->{msgs}};
		last if time() >= $end || $self->{closed};
		$self->_read($end - time());
	}
	return undef;
}

# the first message received, since the client connected, for which CHECK holds, reading
# on for up to TIMEOUT seconds; undef if none

sub find {
	my ($self, $timeout, $check) = @_;
	$self->drain();
	my ($m) = grep { $check->($_) } @{$self->{msgs}};
	return $m // $self->wait_msg($timeout, $check);
}

# reads all that waits, for at most a second

sub drain {
	my ($self) = @_;
	my $end = time() + 1;
	while (time() < $end && !$self->{closed}) {
		last unless $self->_read(0);
	}
}

# every message received so far (each { subject, sid, reply, payload, at }), or those
# CHECK holds for

sub msgs {
	my ($self, $check) = @_;
	return grep { !$check || $check->($_) } @{$self->{msgs}};
}

sub errors { @{$_[0]{errors}} }
sub closed { $_[0]{closed} }

sub close {
	my ($self) = @_;
	CORE::close($self->{s}) if $self->{s};
	$self->{closed} = 1;
}

# one read (waiting up to WAIT seconds for it), then every whole operation in the buffer;
# the bytes read

sub _read {
	my ($self, $wait) = @_;
	return 0 if $self->{closed};
	$wait = 0 if !defined $wait || $wait < 0;
	my $n = 0;
	if ($self->{sel}->can_read($wait)) {
		$n = sysread($self->{s}, $self->{buf}, 65536, length $self->{buf});
		if (!$n) {
			$self->{closed} = 1 unless !defined $n && ($!{EINTR} || $!{EAGAIN});
		}
	}
	$self->_parse();
	return $n // 0;
}

sub _parse {
	my ($self) = @_;
	while (1) {
		my $i = index($self->{buf}, "\r\n");
		return if $i < 0;
		my $line = substr($self->{buf}, 0, $i);
		if ($line =~ /^MSG\s+(\S+)\s+(\S+)\s+(?:(\S+)\s+)?(\d+)$/i) {
			my ($subject, $sid, $reply, $len) = ($1, $2, $3, $4);
			# the payload and its CRLF, whole
			return if length($self->{buf}) < $i + 2 + $len + 2;
			my $payload = substr($self->{buf}, $i + 2, $len);
			substr($self->{buf}, 0, $i + 2 + $len + 2, '');
			push @{$self->{msgs}}, { subject => $subject, sid => $sid,
				reply => $reply, payload => $payload, at => time() };
			next;
		}
		substr($self->{buf}, 0, $i + 2, '');
		if ($line =~ /^PING\s*$/i) {
			$self->_send("PONG\r\n");
		} elsif ($line =~ /^PONG\s*$/i) {
			$self->{pongs}++;
		} elsif ($line =~ /^INFO\s+(\{.*\})\s*$/i) {
			$self->{info} = eval { JSON::PP::decode_json($1) } // {};
		} elsif ($line =~ /^-ERR\s*(.*)$/i) {
			push @{$self->{errors}}, $1;
		}
	}
}

1;
