package CB::Origin;

# A controllable HTTP/1.1 origin server for integration tests.
#
#	$t->run_daemon(\&CB::Origin::run, port(8081),
#		$t->testdir() . '/origin-8081.hits');
#	$t->waitforsocket('127.0.0.1:' . port(8081));
#
# (CB::Nginx::start does this for the test files.)  run() never returns: it
# is a daemon's body, and nginx-tests' run_daemon() would go on running the
# rest of the test script in the forked child if it did.  The daemon exits
# on TERM/INT, and by itself once the test process that forked it is gone
# (killed, or its library did not stop its daemons).
#
# Forks one process per connection (so slow/hanging responses do not block
# other connections), supports keep-alive (Content-Length framing, chunked
# request bodies are accepted too), and appends one line per request to the
# hits file ("$path?$query", or just "$path" without a query string).
#
# The response is controlled by the query string (URL-decoded, "+" is a
# space; unknown parameters are ignored):
#
#	status=N	response status (default 200)
#	delay=MS	wait MS milliseconds before responding
#	retry_after=S	add "Retry-After: S"
#	body=TEXT	response body (default "origin $port ok\n")
#	size=N		response body of N bytes ("x" repeated), overrides body
#	hdr=Name:Value	extra response header (repeatable)
#	close=1		close the connection without any response
#	reset=1		reset the connection (RST) without any response
#	upgrade=1	answer "101 Switching Protocols" (Upgrade: websocket),
#			then say nothing more: a tunnel its client holds open
#			until it closes, or for 60 seconds
#	stream=TYPE	a chunked answer of Content-Type TYPE, its first chunk an
#			event ("data: hello"), then nothing more until the client
#			closes, or for 60 seconds: a quiet subscription
#			(text/event-stream), or a download that stalls
#	hang=1		never respond; the process exits when the client
#			closes the connection, or after 60 seconds
#	garbage=1	valid status line followed by an invalid header line
#			(nginx: "upstream sent invalid header", i.e.
#			invalid_header, 502)
#	garbage=status	invalid status line (note: nginx proxy treats this
#			as an HTTP/0.9 response, not as invalid_header)
#	partial=1	a status line and half a header, then close (nginx:
#			"upstream prematurely closed connection", error)
#	truncate=N	a whole header announcing the body, then only N bytes
#			of it, then what then= says: close (default), reset,
#			or hang
#	drop_next=1	answer keep-alive, then close the connection as soon
#			as the next request on it arrives, unanswered (what a
#			kept-alive connection the origin had closed looks like)
#	conc=1		count this request in the origin's concurrency: from
#			when it is read until its response is sent, in
#			"$hits_file.conc" (see concurrency())
#	cores=C		an origin of C cores: counted as conc=1, and the
#			delay is stretched by the requests in progress at
#			arrival, delay * max(1, K / C) with K counting this
#			one (a processor-sharing server: latency grows with
#			concurrency past C)
#	fail=P		answer "status=500" to P percent of requests, at random
#	write_timeout=MS
#			give up on the response (close the connection) if it is
#			not all written MS milliseconds after it began, as Go's
#			http.Server WriteTimeout does: an origin's own deadline,
#			which a client that stops reading an answer nginx passes
#			on as it comes can make it miss
#	early=N		answer "200" with a 100000-byte body as soon as the header
#			is read: the whole header and N bytes of the body, then
#			read the request body whole, then the rest (a streaming
#			answer to an upload; nginx stops sending the upload once
#			the answer's header has gone to its client)
#	refuse_body=1	answer "413" as soon as the header is read, and close
#			without reading the request body (the kernel resets the
#			connection over the unread bytes): an origin that refuses
#			a too-large upload
#
# Every response carries "X-Origin: $port", "X-Origin-Seq: N" (N-th request
# on this connection, to check upstream keepalive) and
# "X-Origin-Body-Length: N" (request body bytes received).
#
# run($port, sub { my ($socket) = @_; ... }) serves every connection with that
# code instead, for peers no HTTP origin plays (a server that resets every
# connection, a memcached that answers SERVER_ERROR).
#
# Behaviour over time, without restarting the origin: the file
# "$hits_file.mode" (see behave()), re-read for every request, holds lines
# "PREFIX QUERY": a request whose path starts with PREFIX ("*" matches any)
# gets QUERY's parameters on top of its own (the first matching line wins).
# A line "refuse" makes the daemon close its listening socket, so that
# connections are refused, until the line is gone.  Each request also
# appends "START END PATH" (Unix seconds, when its head was read and when
# the origin was done with it) to "$hits_file.times", to measure how many
# were in flight at once (in_flight()).  pause() stops the whole origin for a
# while (its pid is in "$hits_file.pid").
#
# Only core Perl modules are used.

use warnings;
use strict;

use Fcntl qw/ :flock SEEK_END /;
use IO::Select;
use IO::Socket::INET;
use POSIX qw/ WNOHANG /;
use Socket qw/ SOL_SOCKET SO_LINGER /;
use Time::HiRes qw/ sleep time /;

use CB::Proc qw//;

my %reason = (
	100 => 'Continue', 200 => 'OK', 201 => 'Created',
	202 => 'Accepted', 204 => 'No Content', 206 => 'Partial Content',
	301 => 'Moved Permanently', 302 => 'Found', 303 => 'See Other',
	304 => 'Not Modified', 307 => 'Temporary Redirect',
	308 => 'Permanent Redirect', 400 => 'Bad Request',
	401 => 'Unauthorized', 403 => 'Forbidden', 404 => 'Not Found',
	405 => 'Method Not Allowed', 408 => 'Request Timeout',
	409 => 'Conflict', 410 => 'Gone', 413 => 'Payload Too Large',
	429 => 'Too Many Requests', 500 => 'Internal Server Error',
	501 => 'Not Implemented', 502 => 'Bad Gateway',
	503 => 'Service Unavailable', 504 => 'Gateway Timeout',
);

our $IDLE_TIMEOUT = 60;

# in a connection process: the pid of the daemon that forked it
our $DAEMON;

###############################################################################

sub run {
	my ($port, $hits_file) = @_;

	my $test = getppid();

	my $server = _listen($port)
		or _fail("can't listen on 127.0.0.1:$port: $!");
	my $mode = defined $hits_file && !ref $hits_file
		? "$hits_file.mode" : undef;

	# for pause()
	if (defined $mode) {
		open my $fh, '>', "$hits_file.pid" or _fail("$hits_file.pid: $!");
		print $fh $$;
		close $fh;
	}

	my %kids;

	local $SIG{CHLD} = sub {
		while ((my $pid = waitpid(-1, WNOHANG)) > 0) {
			delete $kids{$pid};
		}
	};

	# on TERM/INT, take the connection processes down too: only those still ours (waitpid
	# says 0 for a live child).  A child that exited before fork()'s caller noted it was
	# reaped first and is noted for ever after; its pid may since be another process's,
	# another test's even (pids wrap at 32768 here, and every connection forks)

	my $quit = sub {
		kill 'KILL', grep { waitpid($_, WNOHANG) == 0 } keys %kids;
		POSIX::_exit(0);
	};
	local $SIG{TERM} = $quit;
	local $SIG{INT} = $quit;

	local $SIG{PIPE} = 'IGNORE';

	my $sel = IO::Select->new($server);

	while (1) {
		$quit->() if getppid() != $test;

		if (defined $mode) {
			# "refuse": no listening socket, connections are refused
			my $refuse = _refusing($mode);
			if ($refuse && $server) {
				close $server;
				undef $server;
			} elsif (!$refuse && !$server) {
				$server = _listen($port);
				$sel = IO::Select->new($server) if $server;
			}
			if (!$server) {
				sleep 0.02;
				next;
			}
		}

		next unless $sel->can_read(defined $mode ? 0.05 : 0.5);

		my $client = $server->accept();

		if (!defined $client) {
			next if $!{EINTR} || $!{ECONNABORTED} || $!{EAGAIN};
			_fail("accept() failed: $!");
		}

		my $daemon = $$;
		my $pid = fork();

		if (!defined $pid) {
			close $client;
			next;
		}

		if ($pid == 0) {
			$SIG{CHLD} = 'DEFAULT';
			$SIG{TERM} = 'DEFAULT';
			$SIG{INT} = 'DEFAULT';
			close $server;
			$DAEMON = $daemon;
			eval {
				ref $hits_file eq 'CODE' ? $hits_file->($client)
					: _connection($client, $port, $hits_file);
			};
			POSIX::_exit(0);
		}

		$kids{$pid} = 1;
		close $client;
	}
}

sub _fail {
	my ($msg) = @_;
	print STDERR "CB::Origin: $msg\n";
	POSIX::_exit(1);
}

# in a connection process: the daemon that forked it has gone

sub _orphan {
	return defined $DAEMON && getppid() != $DAEMON;
}

sub _listen {
	my ($port) = @_;

	return IO::Socket::INET->new(
		Proto => 'tcp',
		LocalAddr => "127.0.0.1:$port",
		Listen => 128,
		ReuseAddr => 1,
	);
}

###############################################################################

# Sets the origin's behaviour from now on (see "Behaviour over time" above):
#
#	CB::Origin::behave($hits, '/health hang=1', '* status=500');
#	CB::Origin::behave($hits, 'refuse');
#	CB::Origin::behave($hits);		# back to the query strings alone

sub behave {
	my ($hits_file, @lines) = @_;

	my $tmp = "$hits_file.mode.$$";
	open my $fh, '>', $tmp or die "Can't write $tmp: $!\n";
	print $fh map { "$_\n" } @lines;
	close $fh;
	rename $tmp, "$hits_file.mode" or die "Can't rename $tmp: $!\n";

	return 1;
}

sub _mode_lines {
	my ($mode) = @_;

	open my $fh, '<', $mode or return ();
	my @lines = grep { /\S/ } map { s/^\s+|\s+$//gr } <$fh>;
	close $fh;

	return @lines;
}

sub _refusing {
	my ($mode) = @_;
	return grep { $_ eq 'refuse' } _mode_lines($mode);
}

# the parameters the mode file adds to a request for PATH

sub _mode_query {
	my ($hits_file, $path) = @_;

	return '' unless defined $hits_file;

	for (_mode_lines("$hits_file.mode")) {
		my ($prefix, $query) = split ' ', $_, 2;
		next if $prefix eq 'refuse';
		return $query // ''
			if $prefix eq '*' || index($path, $prefix) == 0;
	}

	return '';
}

# [START, END, PATH] of each request for a path matching RE, from the times
# file, in the order they ended

sub timings {
	my ($hits_file, $re) = @_;

	open my $fh, '<', "$hits_file.times" or return ();
	flock($fh, LOCK_SH);
	my @r = grep { defined $_->[2] && $_->[2] =~ $re }
		map { chomp; [ split ' ', $_, 3 ] } <$fh>;
	close $fh;

	return @r;
}

# The most requests for paths matching RE that were in flight at the origin at
# once, from the times file.  Options: since => T (only requests that ended
# after T), slack => S (each request counts as ending S seconds earlier: the
# origin sees a connection close a little after the client closed it, while
# the next request may already be on its way).

sub in_flight {
	my ($hits_file, $re, %opts) = @_;

	my $slack = $opts{slack} // 0;

	open my $fh, '<', "$hits_file.times" or return 0;
	flock($fh, LOCK_SH);
	my @iv;
	for (<$fh>) {
		my ($start, $end, $path) = split ' ', $_, 3;
		next unless defined $path && $path =~ $re;
		next if defined $opts{since} && $end < $opts{since};
		$end -= $slack;
		push @iv, [ $start, $end > $start ? $end : $start ];
	}
	close $fh;

	my @ev = sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] }
		(map { [ $_->[0], 1 ] } @iv), (map { [ $_->[1], -1 ] } @iv);
	my ($now, $max) = (0, 0);
	for (@ev) {
		$now += $_->[1];
		$max = $now if $now > $max;
	}

	return $max;
}

###############################################################################

# stops the origin of the hits file HITS (its daemon, then its connection processes) for
# SECS seconds, as a collector's pause or a stalled machine would; the number of processes
# stopped

sub pause {
	my ($hits, $secs) = @_;
	open my $fh, '<', "$hits.pid" or die "pause: $hits.pid: $!\n";
	my $daemon = <$fh>;
	close $fh;
	# the daemon first: it forks no connection process after that
	kill 'STOP', $daemon or die "pause: $daemon: $!\n";
	my @stopped = ($daemon, CB::Proc::children($daemon));
	kill 'STOP', @stopped[1 .. $#stopped];
	sleep $secs;
	kill 'CONT', reverse @stopped;
	return scalar @stopped;
}

sub hits {
	my ($hits_file, $re) = @_;

	open my $fh, '<', $hits_file or return 0;
	flock($fh, LOCK_SH);
	my @lines = <$fh>;
	close $fh;

	@lines = grep { $_ =~ $re } @lines if defined $re;

	return scalar @lines;
}

# (requests in progress, most ever in progress) of the requests counted with
# conc=1 or cores=C

sub concurrency {
	my ($hits_file) = @_;

	open my $fh, '<', "$hits_file.conc" or return (0, 0);
	flock($fh, LOCK_SH);
	my $line = <$fh> // '';
	close $fh;

	my ($cur, $max) = split ' ', $line;
	return ($cur // 0, $max // 0);
}

# starts the high-water mark again from the requests in progress

sub clear_concurrency {
	my ($hits_file) = @_;
	_conc($hits_file, 0);
	return 1;
}

sub clear {
	my ($hits_file) = @_;

	open my $fh, '>>', $hits_file or die "Can't open $hits_file: $!\n";
	flock($fh, LOCK_EX);
	truncate($fh, 0);
	close $fh;

	return 1;
}

###############################################################################

# adds $d to the requests in progress (0: resets the high-water mark);
# returns the count after

sub _conc {
	my ($hits_file, $d) = @_;

	open my $fh, '+>>', "$hits_file.conc" or return 0;
	flock($fh, LOCK_EX);
	seek($fh, 0, 0);
	my ($cur, $max) = split ' ', (<$fh> // '');
	$cur = ($cur // 0) + $d;
	$cur = 0 if $cur < 0;
	$max = $d ? ($max // 0) : $cur;
	$max = $cur if $cur > $max;
	truncate($fh, 0);
	print $fh "$cur $max\n";
	close $fh;

	return $cur;
}

sub _log_hit {
	my ($hits_file, $line) = @_;

	return unless defined $hits_file;

	open my $fh, '>>', $hits_file or return;
	flock($fh, LOCK_EX);
	seek($fh, 0, SEEK_END);
	print $fh "$line\n";
	close $fh;
}

# read more data into $$buf; returns bytes read, 0 on EOF, undef on timeout
# or error; gives up if the daemon has gone

sub _fill {
	my ($sock, $buf, $timeout) = @_;

	my $sel = IO::Select->new($sock);
	my $end = time() + $timeout;

	while (1) {
		my $left = $end - time();
		return undef if $left <= 0;
		return undef if _orphan();

		next unless $sel->can_read($left > 1 ? 1 : $left);

		my $n = sysread($sock, $$buf, 65536, length $$buf);
		next if !defined $n && $!{EINTR};
		return $n;
	}
}

sub _connection {
	my ($sock, $port, $hits_file) = @_;

	# a fork of the daemon: its own random numbers ("fail")
	srand();

	binmode $sock;
	my $buf = '';
	my $seq = 0;
	my $drop = 0;

	while (1) {

		# request line and headers

		while ($buf !~ /\r?\n\r?\n/) {
			return unless _fill($sock, \$buf, $IDLE_TIMEOUT);
		}

		$buf =~ s/^(.*?)\r?\n\r?\n//s;
		my ($line, @headers) = split /\r?\n/, $1;

		my ($method, $uri, $version) = split / +/, $line // '';
		return unless defined $uri;
		$version //= 'HTTP/0.9';

		my %h;
		for (@headers) {
			next unless /^([^:\s]+)\s*:\s*(.*?)\s*$/;
			$h{lc $1} = defined $h{lc $1} ? "$h{lc $1}, $2" : $2;
		}

		if ($uri =~ /[?&]refuse_body=1(?:&|$)/) {
			_log_hit($hits_file, $uri);
			_write($sock, "HTTP/1.1 413 Payload Too Large\r\n"
				. "Connection: close\r\nContent-Length: 0\r\n"
				. "X-Origin: $port\r\n\r\n");
			close $sock;
			return;
		}

		if ($uri =~ /[?&]early=(\d+)(?:&|$)/) {
			my ($n, $size) = ($1, 100000);
			_log_hit($hits_file, $uri);
			_write($sock, "HTTP/1.1 200 OK\r\nConnection: close\r\n"
				. "Content-Length: $size\r\nX-Origin: $port\r\n\r\n"
				. ('z' x $n)) or return;
			my $cl = $h{'content-length'} // 0;
			while (length $buf < $cl) {
				return unless _fill($sock, \$buf, 30);
			}
			_write($sock, 'z' x ($size - $n));
			close $sock;
			return;
		}

		# request body

		my $body_len = 0;

		if (($h{'transfer-encoding'} // '') =~ /chunked/i) {
			while (1) {
				while ($buf !~ /^([0-9a-fA-F]+)[^\n]*\n/) {
					return unless _fill($sock, \$buf, 30);
				}
				$buf =~ /^([0-9a-fA-F]+)[^\n]*\n/;
				my ($len, $hl) = (hex $1, length $&);
				if ($len == 0) {
					# trailers up to an empty line
					while ($buf !~ /^[0-9a-fA-F]+[^\n]*\n(?:[^\r\n][^\n]*\n)*\r?\n/) {
						return unless _fill($sock, \$buf, 30);
					}
					$buf =~ s/^[0-9a-fA-F]+[^\n]*\n(?:[^\r\n][^\n]*\n)*\r?\n//;
					last;
				}
				while (length $buf < $hl + $len + 2) {
					return unless _fill($sock, \$buf, 30);
				}
				substr($buf, 0, $hl + $len) = '';
				$buf =~ s/^\r?\n//;
				$body_len += $len;
			}

		} elsif (my $cl = $h{'content-length'}) {
			while (length $buf < $cl) {
				return unless _fill($sock, \$buf, 30);
			}
			substr($buf, 0, $cl) = '';
			$body_len = $cl;
		}

		$seq++;

		my ($path, $query) = split /\?/, $uri, 2;
		_log_hit($hits_file, defined $query ? "$path?$query" : $path);

		# the request's times are logged when this goes out of scope,
		# however it ends
		my $timing = CB::Origin::Timing->new($hits_file, $path);

		my %q;
		my @hdr;
		my $mode = _mode_query($hits_file, $path);
		for my $pair (split(/&/, $query // ''), split(/&/, $mode)) {
			my ($k, $v) = split /=/, $pair, 2;
			next unless defined $k && length $k;
			$v = _unescape($v // '');
			$k = _unescape($k);
			if ($k eq 'hdr') {
				push @hdr, $v;
			} else {
				$q{$k} = $v;
			}
		}

		my $counted = $q{conc} || $q{cores};
		my $k = $counted ? _conc($hits_file, 1) : 0;
		my $delay = $q{delay} // 0;
		$delay *= $k / $q{cores} if $q{cores} && $k > $q{cores};

		my $done = sub { _conc($hits_file, -1) if $counted; $counted = 0 };

		sleep($delay / 1000) if $delay;

		# out of the count before a byte of the answer leaves: the
		# client can never see it in progress after its answer (a hung
		# request counts until its client goes away)

		$done->() unless $q{hang};

		if ($drop || $q{close}) {
			close $sock;
			return;
		}

		if ($q{reset}) {
			setsockopt($sock, SOL_SOCKET, SO_LINGER, pack('ii', 1, 0));
			close $sock;
			return;
		}

		if ($q{upgrade}) {
			_write($sock, "HTTP/1.1 101 Switching Protocols\r\n"
				. "Upgrade: websocket\r\nConnection: Upgrade\r\n"
				. "X-Origin: $port\r\n\r\n") or return;
		}

		if (defined $q{stream}) {
			my $first = "data: hello\n\n";
			_write($sock, "HTTP/1.1 200 OK\r\nContent-Type: $q{stream}\r\n"
				. "Transfer-Encoding: chunked\r\nX-Origin: $port\r\n\r\n"
				. sprintf("%x\r\n%s\r\n", length $first, $first)) or return;
		}

		if ($q{hang} || $q{upgrade} || defined $q{stream}) {
			# wait for the client to go away, discarding input
			my $end = time() + $IDLE_TIMEOUT;
			while (time() < $end) {
				my $n = _fill($sock, \$buf, $end - time());
				last if defined $n && $n == 0;
				$buf = '';
				last if _orphan();
			}
			$done->();
			return;
		}

		$q{status} = 500 if $q{fail} && rand(100) < $q{fail};

		my $status = $q{status} || 200;
		my $body = defined $q{body} ? $q{body} : "origin $port ok\n";
		$body = 'x' x $q{size} if defined $q{size};

		my $keepalive = $version eq 'HTTP/1.1'
			? ($h{connection} // '') !~ /\bclose\b/i
			: ($h{connection} // '') =~ /\bkeep-alive\b/i;

		my $reason = $reason{$status} // 'Status';
		my $r = '';

		if (($q{garbage} // '') eq 'status') {
			$r .= "HTTP/1.1 abc\r\nX-Origin: $port\r\n\r\n";
			$keepalive = 0;

		} elsif ($q{partial}) {
			_write($sock, "HTTP/1.1 $status $reason\r\nX-Origin: $port\r\n");
			close $sock;
			return;

		} else {
			$r .= "HTTP/1.1 $status $reason\r\n";
			$r .= "X-Bad\0Header: garbage\r\n" if $q{garbage};
			$r .= "X-Origin: $port\r\n";
			$r .= "X-Origin-Seq: $seq\r\n";
			$r .= "X-Origin-Body-Length: $body_len\r\n";
			$r .= "Retry-After: $q{retry_after}\r\n"
				if defined $q{retry_after};
			for (@hdr) {
				my ($n, $v) = split /:/, $_, 2;
				$r .= "$n: " . ($v // '') . "\r\n";
			}

			my $no_body = $status =~ /^(1\d\d|204|304)$/;
			$body = '' if $no_body;

			$r .= "Content-Length: " . length($body) . "\r\n"
				unless $no_body;
			$r .= "Connection: " . ($keepalive ? 'keep-alive' : 'close')
				. "\r\n";
			$r .= "\r\n";
			$r .= $body unless $method eq 'HEAD';
		}

		if (defined $q{truncate}) {
			my $cut = length($r) - length($body) + $q{truncate};
			_write($sock, substr($r, 0, $cut)) or return;
			my $then = $q{then} // 'close';
			if ($then eq 'reset') {
				setsockopt($sock, SOL_SOCKET, SO_LINGER,
					pack('ii', 1, 0));
			} elsif ($then eq 'hang') {
				my $end = time() + $IDLE_TIMEOUT;
				while (time() < $end && !_orphan()) {
					my $n = _fill($sock, \$buf, 1);
					last if defined $n && $n == 0;
				}
			}
			close $sock;
			return;
		}

		if ($q{write_timeout}) {
			_write_by($sock, $r, time() + $q{write_timeout} / 1000);
			close $sock;
			return;
		}

		_write($sock, $r) or return;

		$drop = 1 if $q{drop_next};
		return unless $keepalive;
	}
}

sub _write {
	my ($sock, $data) = @_;

	while (length $data) {
		my $n = syswrite($sock, $data);
		if (!defined $n) {
			next if $!{EINTR};
			return 0;
		}
		substr($data, 0, $n) = '';
	}

	return 1;
}

# _write, given up at DEADLINE (a time()): whether it was all written
sub _write_by {
	my ($sock, $data, $deadline) = @_;

	$sock->blocking(0);
	my $sel = IO::Select->new($sock);

	while (length $data) {
		my $left = $deadline - time();
		return 0 if $left <= 0;
		next unless $sel->can_write($left);
		my $n = syswrite($sock, $data, 1 << 16);
		if (!defined $n) {
			next if $!{EINTR} || $!{EAGAIN};
			return 0;
		}
		substr($data, 0, $n) = '';
	}

	return 1;
}

sub _unescape {
	my ($s) = @_;
	$s =~ tr/+/ /;
	$s =~ s/%([0-9a-fA-F]{2})/chr(hex($1))/ge;
	return $s;
}

###############################################################################

# A request's start, and its end once the object goes: "START END PATH" in the
# times file.

package CB::Origin::Timing;

use Fcntl qw/ :flock SEEK_END /;
use Time::HiRes qw/ time /;

sub new {
	my ($class, $hits_file, $path) = @_;
	return bless [ $hits_file, $path, time() ], $class;
}

sub DESTROY {
	my ($self) = @_;
	my ($hits_file, $path, $start) = @$self;

	return unless defined $hits_file;

	open my $fh, '>>', "$hits_file.times" or return;
	flock($fh, LOCK_EX);
	seek($fh, 0, SEEK_END);
	printf $fh "%.6f %.6f %s\n", $start, time(), $path;
	close $fh;
}

1;
