package CB::Fleet;

# A fleet of nginx instances with the module on loopback, one directory each under DIR,
# for t/78-fleet.t and scripts/fleet-measure: their configuration (with or without
# circuit_breaker_fleet), start and stop, signals to an instance's processes (kill, hang
# with SIGSTOP), each instance's status page, and users: one process per instance sending
# requests at a fixed rate, each logged with its time, status and latency.
#
#	my $f = CB::Fleet->new(dir => $dir, nginx => $bin, module => $so,
#		ports => [ ... ], origin => $origin_port);
#	$f->start($_, fleet => 1) for 0 .. $f->size - 1;
#	my $users = $f->users(rate => 2, seconds => 10, query => 'status=500');
#	...
#	$f->stop_users($users);
#
# With bus => [ 'nats://127.0.0.1:PORT', ... ] (and bus_params => '...' added to the
# directive) the instances exchange on a NATS bus instead (t/83-fleet-nats.t,
# t/84-fleet-nats-tls.t): each names the servers, and is "iI" there; start() takes the same
# two per instance.
#
# Instances are daemons (master and one worker); an END block stops those still running,
# and a watchdog process stops them if the creating process is killed, so that a test
# that dies leaves none behind.  Only core Perl modules are used.

use warnings;
use strict;

use IO::Select;
use IO::Socket::INET;
use JSON::PP qw//;
use POSIX qw/ WNOHANG /;
use Time::HiRes qw/ sleep time /;

use CB::Proc ();

my @all;

sub new {
	my ($class, %o) = @_;
	my $self = bless { %o, started => {}, owner => $$ }, $class;
	$self->{breaker} //= 'window=30s min_requests=20 failure_rate=50% '
		. 'open=5s max_open=5s suspect_min=3';
	$self->{interval} //= '1s';
	# the fleet's key, the same on every instance
	$self->{secret} //= 'cbfleet-test-' . join '', map { sprintf '%02x', int rand 256 } 1 .. 16;
	push @all, $self;
	$self->_watchdog();
	return $self;
}

# once the creating process is gone, or told to (TERM), stops every instance whose pid
# file is still there

sub _watchdog {
	my ($self) = @_;
	my $owner = $$;
	my $pid = fork();
	die "fork: $!\n" unless defined $pid;
	if ($pid == 0) {
		my $stop = 0;
		local $SIG{TERM} = sub { $stop = 1 };
		sleep 0.2 while !$stop && getppid() == $owner;
		if (!$stop) {
			for my $i (0 .. $self->size - 1) {
				my @p = $self->pids($i);
				kill 'CONT', @p;
				kill 'KILL', @p;
			}
		}
		POSIX::_exit(0);
	}
	$self->{watchdog} = $pid;
}

sub size { scalar @{$_[0]{ports}} }
sub port { $_[0]{ports}[$_[1]] }
sub dir { "$_[0]{dir}/i$_[1]" }

# with tls_ports, an instance exchanges over TLS on its own port: its id is that address;
# on a bus, its id is a name, iI

sub tls_port { ($_[0]{tls_ports} // [])->[$_[1]] }
sub id {
	my ($self, $i) = @_;
	return "i$i" if $self->{bus};
	return '127.0.0.1:' . ($self->tls_port($i) // $self->port($i));
}
sub peer { ($_[0]->tls_port($_[1]) ? 'https://' : '') . $_[0]->id($_[1]) }

# nginx.conf of instance I: one worker, an upstream with a breaker in front of the origin,
# the status location, and with fleet => 1 the fleet of every instance (the same list on
# each, ids included; peers => [...] lists others instead).  With tls_ports, and the
# certificates CERTS/iI.crt, iI.key and CERTS/ca.crt: the instance also listens on its TLS
# port, asks its clients for a certificate from the CA (mutual TLS), and pulls its peers
# over TLS with its own certificate.  FLEET_PARAMS are added to the directive.  With BUS
# (the instance's, or the fleet's), the directive names those NATS servers instead, with
# id=iI and BUS_PARAMS (the instance's, or the fleet's).

sub conf {
	my ($self, $i, %o) = @_;

	my $dir = $self->dir($i);
	my $port = $self->port($i);
	my $fleet = '';
	my $certs = $self->{certs} // '';
	my $tls = $self->tls_port($i);
	my $bus = $o{bus} // $self->{bus};

	if ($o{fleet} && $bus) {
		my $params = $o{bus_params} // $self->{bus_params};
		$fleet = "circuit_breaker_fleet\n        "
			. join("\n        ", @$bus)
			. "\n        id=i$i"
			. " interval=$self->{interval}"
			. ($params ? "\n        $params" : '')
			. ($o{fleet_params} ? " $o{fleet_params}" : '')
			. "\n        secret=$self->{secret};";
	} elsif ($o{fleet}) {
		my @peers = @{$o{peers} // [ map { $self->peer($_) } 0 .. $self->size - 1 ]};
		my $ssl = '';
		if (grep { m!^https://! } @peers) {
			$ssl = "\n        ssl_trusted_certificate=$certs/ca.crt"
				. "\n        ssl_certificate=$certs/i$i.crt"
				. " ssl_certificate_key=$certs/i$i.key";
		}
		$fleet = "circuit_breaker_fleet\n        "
			. join("\n        ", @peers)
			. "\n        id=" . $self->id($i)
			. " interval=$self->{interval}"
			. ($o{fleet_params} ? " $o{fleet_params}" : '')
			. $ssl
			. "\n        secret=$self->{secret};";
	}

	my $tls_server = !$tls ? '' : <<"EOF";
        listen 127.0.0.1:$tls ssl;
        ssl_certificate $certs/i$i.crt;
        ssl_certificate_key $certs/i$i.key;
        ssl_client_certificate $certs/ca.crt;
        ssl_verify_client on;
EOF

	# with local_ports: "/l" passes through a breaker of its own to a server
	# of the same nginx, an origin that never forks nor waits
	my ($local, $local_location) = ('', '');
	if (my $lp = $self->{local_ports}) {
		$local = <<"EOF";

    upstream local {
        server 127.0.0.1:$lp->[$i];
        circuit_breaker;
    }

    server {
        listen 127.0.0.1:$lp->[$i];
        return 200 "local\\n";
    }
EOF
		$local_location = <<"EOF";

        location /l {
            proxy_pass http://local;
        }
EOF
	}

	# with keyed: "/k" judges each request by a breaker of its own "k" argument
	# (circuit_breaker_key $arg_k KEYED, or the instance's own keyed => ...), straight
	# to the origin
	my $keyed = $o{keyed} // $self->{keyed};
	my $keyed_location = !$keyed ? '' : <<"EOF";

        location /k {
            circuit_breaker_key \$arg_k $keyed;
            proxy_pass http://127.0.0.1:$self->{origin};
        }
EOF

	# with origin_keepalive: connections to the origin are kept, so that an origin
	# that forks per connection (or any) is not the bottleneck at high rates
	my ($keepalive, $proxy_keepalive) = ('', '');
	if (my $k = $self->{origin_keepalive}) {
		$keepalive = "\n        keepalive $k;";
		$proxy_keepalive = "\n            proxy_http_version 1.1;"
			. "\n            proxy_set_header Connection \"\";";
	}

	# with stream (and stream_module, the stream module's .so): a stream {} block of
	# its own text, the instance's stream breakers (STREAM_PORT in it is the instance's
	# stream_ports entry)
	my ($stream_module, $stream) = ('', '');
	if (my $text = $o{stream} // $self->{stream}) {
		$stream_module = "load_module $self->{stream_module};\n";
		$text =~ s/STREAM_PORT/$self->{stream_ports}[$i]/g;
		$stream = "stream {\n$text}\n";
	}
	# with http: more of the http block's text
	my $http = $o{http} // '';

	# stream_first: the stream block read before the http block
	my $stream_first = $o{stream_first} ? $stream : '';
	$stream = '' if $o{stream_first};

	return <<"EOF";
load_module $self->{module};
${stream_module}pid $dir/nginx.pid;
error_log $dir/error.log info;
worker_processes 1;

events {
    worker_connections 1024;
}
$stream_first
http {
    access_log off;

    $fleet

$http
    upstream origin {
        server 127.0.0.1:$self->{origin};
        circuit_breaker $self->{breaker};$keepalive
    }
$local
    server {
        listen 127.0.0.1:$port;
$tls_server
        location / {
            proxy_pass http://origin;$proxy_keepalive
        }
$local_location$keyed_location
        location = /circuit_breaker {
            circuit_breaker_status;
            allow 127.0.0.1;
            deny all;
        }
    }
}
$stream
EOF
}

# starts instance I (fleet => 0|1, and conf()'s other options) and waits until it answers;
# dies if it does not

sub start {
	my ($self, $i, %o) = @_;

	my $dir = $self->dir($i);
	mkdir $self->{dir};
	mkdir $dir;
	chmod 0755, $self->{dir}, $dir;
	unlink "$dir/nginx.pid";

	open my $fh, '>', "$dir/nginx.conf" or die "$dir/nginx.conf: $!\n";
	print $fh $self->conf($i, %o);
	close $fh;

	my $rc = system($self->{nginx}, '-p', "$dir/", '-c', 'nginx.conf',
		'-e', 'error.log');
	die "instance $i did not start (see $dir/error.log)\n" if $rc != 0;
	$self->{started}{$i} = 1;

	my $end = time() + 10;
	while (time() < $end) {
		if (defined $self->status($i)) {
			my $m = $self->master($i);
			$self->{masters}{$i} = [ $m, CB::Proc::started($m) // '' ] if defined $m;
			return 1;
		}
		sleep 0.05;
	}
	die "instance $i does not answer\n";
}

sub master {
	my ($self, $i) = @_;
	if (open my $fh, '<', $self->dir($i) . '/nginx.pid') {
		my $pid = <$fh> // '';
		return $1 if $pid =~ /^(\d+)/;
	}
	# the pid file gone with the test's directory (the harness removes it before END
	# blocks run): the master remembered at start, if that process is still the one
	my ($pid, $started) = @{$self->{masters}{$i} // []};
	return defined $pid && (CB::Proc::started($pid) // '') eq $started ? $pid : undef;
}

# the master and its children (the worker)

sub pids {
	my ($self, $i) = @_;
	my $m = $self->master($i) // return ();
	return ($m, _children($m));
}

sub _children {
	my ($ppid) = @_;
	my @kids;
	opendir my $dh, '/proc' or return ();
	for my $p (grep { /^\d+$/ } readdir $dh) {
		open my $fh, '<', "/proc/$p/stat" or next;
		my $stat = <$fh> // '';
		push @kids, $p if $stat =~ /\)\s+\S+\s+(\d+)/ && $1 == $ppid;
	}
	return @kids;
}

# sends SIG to every process of instance I (KILL: it is gone; STOP: it hangs, its
# listening socket still accepting connections into the backlog; CONT: it goes on)

sub signal {
	my ($self, $i, $sig) = @_;
	my @p = $self->pids($i);
	kill $sig, @p;
	delete $self->{started}{$i} if $sig eq 'KILL';
	return scalar @p;
}

# stops instance I: QUIT, then KILL after 20 s (a graceful exit takes seconds on a
# machine busy with other work; a worker that never exits is still caught, by its alert)

sub stop {
	my ($self, $i) = @_;
	my @p = $self->pids($i);
	delete $self->{started}{$i};
	return unless @p;
	# each with its start time: a pid that ends may be another process's within 20 s
	my @procs = map { [ $_, CB::Proc::started($_) ] } @p;
	kill 'CONT', @p;
	kill 'QUIT', $p[0];
	my $end = time() + 20;
	sleep 0.02 while time() < $end && grep { _alive($_) } @p;
	CB::Proc::kill_same('KILL', grep { _alive($_->[0]) } @procs);
}

# a process that exists and is not a zombie (a daemon's master is no child of ours)

sub _alive {
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or return 0;
	my $stat = <$fh> // '';
	return $stat !~ /\)\s+Z\s/;
}

sub stop_all {
	my ($self) = @_;
	$self->stop($_) for sort keys %{$self->{started}};
}

END {
	for my $f (@all) {
		next unless $f->{owner} == $$;
		local $?;
		$f->stop_all();
		if (my $w = $f->{watchdog}) {
			kill 'TERM', $w;
			waitpid($w, 0);
		}
	}
}

# [alert] and [crit] lines of every instance's error.log

sub alerts {
	my ($self) = @_;
	my @lines;
	for my $i (0 .. $self->size - 1) {
		open my $fh, '<', $self->dir($i) . '/error.log' or next;
		push @lines, grep { /\[(?:alert|crit)\]/ } <$fh>;
	}
	return @lines;
}

###############################################################################
# HTTP

# GET URI from instance I: (status, body, milliseconds); status 0 on no answer within
# TIMEOUT seconds

sub get {
	my ($self, $i, $uri, $timeout) = @_;
	return _get($self->port($i), $uri, $timeout // 3);
}

sub _get {
	my ($port, $uri, $timeout) = @_;

	my $t0 = time();
	my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
		Timeout => $timeout) or return (0, undef, (time() - $t0) * 1000);
	print $s "GET $uri HTTP/1.0\r\nHost: localhost\r\n\r\n";

	my $sel = IO::Select->new($s);
	my $buf = '';
	my $end = $t0 + $timeout;
	while (1) {
		my $left = $end - time();
		last if $left <= 0 || !$sel->can_read($left);
		my $n = sysread($s, $buf, 65536, length $buf);
		last if !$n;
	}
	close $s;

	my $ms = (time() - $t0) * 1000;
	return (0, undef, $ms) unless $buf =~ m!^HTTP/1\.[01] (\d{3})!;
	my $status = $1;
	my (undef, $body) = split /\r\n\r\n/, $buf, 2;
	return ($status, $body, $ms);
}

# the status page of instance I, decoded, or undef

sub status {
	my ($self, $i) = @_;
	my ($st, $body) = $self->get($i, '/circuit_breaker', 2);
	return undef unless $st == 200;
	return eval { JSON::PP::decode_json($body) };
}

# the breaker of instance I in front of the origin (or of UPSTREAM), or undef

sub breaker {
	my ($self, $i, $upstream) = @_;
	my $s = $self->status($i) or return undef;
	my ($b) = grep { $_->{upstream} eq ($upstream // 'origin') }
		@{$s->{breakers}};
	return $b;
}

###############################################################################
# users

# Starts one user process per instance of INSTANCES (default: all): RATE requests per
# second for SECONDS, each "GET PATH?QUERY&i=I&t=MS" (PATH: /u unless given; MS: Unix
# milliseconds when sent),
# one at a time; the first at a random point of the first period when SPREAD, so that the
# instances' users are not in step.  Each request is logged to DIR/users-I.log as
# "time status milliseconds".  Returns the user processes.

sub users {
	my ($self, %o) = @_;
	my @pids;
	for my $i (@{$o{instances} // [0 .. $self->size - 1]}) {
		my $pid = fork();
		die "fork: $!\n" unless defined $pid;
		if ($pid == 0) {
			@all = ();
			$SIG{TERM} = 'DEFAULT';
			eval { $self->_user($i, %o) };
			POSIX::_exit(0);
		}
		push @pids, $pid;
	}
	return \@pids;
}

sub _user {
	my ($self, $i, %o) = @_;
	my $period = 1 / $o{rate};
	my $start = time() + ($o{spread} ? rand($period) : 0);
	my $end = time() + $o{seconds};
	my $parent = getppid();

	open my $log, '>>', "$self->{dir}/users-$i.log" or die;
	$log->autoflush(1);

	for (my $k = 0; ; $k++) {
		my $at = $start + $k * $period;
		last if $at >= $end || getppid() != $parent;
		my $wait = $at - time();
		sleep $wait if $wait > 0;
		my $sent = time();
		my ($st, undef, $ms) = $self->get($i,
			($o{path} // '/u') . "?$o{query}&i=$i&t=" . int($sent * 1000), 3);
		printf $log "%.3f %d %.2f\n", $sent, $st, $ms;
	}
}

sub stop_users {
	my ($self, $pids) = @_;
	kill 'TERM', @$pids;
	waitpid($_, 0) for @$pids;
}

# latencies (ms) of instance I's users' requests sent in [FROM, TO)

sub latencies {
	my ($self, $i, $from, $to) = @_;
	open my $fh, '<', "$self->{dir}/users-$i.log" or return ();
	my @ms;
	while (<$fh>) {
		my ($t, $st, $ms) = split;
		push @ms, $ms if $t >= $from && $t < $to && $st > 0;
	}
	return @ms;
}

# the origin's hits (CB::Origin's hits file) from these users: [time, instance, query]
# sorted by time

sub hits {
	my ($self, $file) = @_;
	open my $fh, '<', $file or return ();
	my @h;
	while (<$fh>) {
		next unless /^\/u\?(\S*)&i=(\d+)&t=(\d+)/;
		push @h, [ $3 / 1000, $2, $1 ];
	}
	return sort { $a->[0] <=> $b->[0] } @h;
}

# the PCT-th percentile of a list

sub percentile {
	my ($pct, @v) = @_;
	return 0 unless @v;
	@v = sort { $a <=> $b } @v;
	my $k = int($pct / 100 * $#v + 0.5);
	return $v[$k];
}

# polls until CHECK(breaker of instance I, I) holds for every instance of INSTANCES
# (default: all), or TIMEOUT seconds; returns the time the round that saw it hold
# ended, or undef

sub wait_all {
	my ($self, $timeout, $check, @instances) = @_;
	@instances = 0 .. $self->size - 1 unless @instances;
	my $end = time() + $timeout;
	while (time() < $end) {
		my $ok = 1;
		for my $i (@instances) {
			my $b = $self->breaker($i);
			$ok = 0, last unless $b && $check->($b, $i);
		}
		# it held by the end of the round: the last instance was read then
		return time() if $ok;
		sleep 0.05;
	}
	return undef;
}


# instance I's error log, whole ('' when there is none)

sub error_log {
	my ($self, $i) = @_;
	open my $fh, '<', $self->dir($i) . '/error.log' or return '';
	local $/;
	return <$fh>;
}

# the fleet's object on instance I's status page, its bus, and its members' ids (sorted,
# space-separated)

sub fleet_status {
	my ($self, $i) = @_;
	return (($self->status($i) // {})->{fleet}) // {};
}

sub bus {
	my ($self, $i) = @_;
	return $self->fleet_status($i)->{bus} // {};
}

sub members {
	my ($self, $i) = @_;
	return join ' ', sort map { $_->{id} } @{$self->fleet_status($i)->{peers} // []};
}

# failing requests to instance I (the origin answers 500), one at a time, until one is
# answered 503 (a breaker's) or MAX were sent; the statuses

sub fail_until_open {
	my ($self, $i, $max) = @_;
	my @st;
	for (1 .. $max) {
		my ($st) = $self->get($i, "/u?status=500&i=$i", 3);
		push @st, $st;
		last if $st == 503;
	}
	return @st;
}

# CHECK's first true value within TIMEOUT seconds (looked at every 50 ms), or undef

sub within {
	my ($timeout, $check) = @_;
	my $end = time() + $timeout;
	while (1) {
		my $r = $check->();
		return $r if $r;
		last if time() >= $end;
		sleep 0.05;
	}
	return undef;
}

# runs openssl with CMD's arguments, its output appended to DIR/openssl.out; dies if it fails

sub openssl {
	my ($dir, $cmd) = @_;
	system("openssl $cmd >>$dir/openssl.out 2>&1") == 0
		or die "openssl $cmd failed, see openssl.out\n";
}

1;
