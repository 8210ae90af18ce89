package CB::Client;

# A small HTTP/1.1 client for the tests that send many requests: CONCURRENCY keep-alive
# connections to 127.0.0.1:PORT, each sending its next request when its last answer is
# whole, so that exactly that many requests are in flight (1: one at a time).  Answers
# framed by Content-Length or chunked, or by the end of a connection that says close; a
# connection nginx closes is opened again.  Returns the statuses, in the order the
# requests were sent (0 for a request that got no answer within TIMEOUT seconds of being
# sent, 30 by default: generous, as a busy machine may take seconds).
#
#	my @s = CB::Client::statuses(port(8080), [ map { "/u/x?k=$_" } 1 .. 100 ], 8);
#
# Only core Perl modules are used.

use warnings;
use strict;

use Errno qw/ EAGAIN EWOULDBLOCK EINPROGRESS /;
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw/ time /;

sub statuses {
	my ($port, $paths, $concurrency, $timeout) = @_;
	$concurrency ||= 1;
	$timeout //= 30;

	my @status = (0) x @$paths;
	my $next = 0;
	my (%conn, $sel) = ();
	$sel = IO::Select->new();

	my $send = sub {
		my ($c) = @_;
		if ($next >= @$paths) {
			$sel->remove($c->{sock});
			close $c->{sock};
			delete $conn{$c->{sock}};
			return;
		}
		$c->{req} = $next++;
		$c->{buf} = '';
		$c->{sent} = time();
		my $sock = $c->{sock};
		print $sock "GET $paths->[$c->{req}] HTTP/1.1\r\nHost: localhost\r\n\r\n";
	};
	my $open = sub {
		my $sock = IO::Socket::INET->new(
			PeerAddr => "127.0.0.1:$port", Proto => 'tcp')
			or return;
		$sock->autoflush(1);
		my $c = { sock => $sock };
		$conn{$sock} = $c;
		$sel->add($sock);
		$send->($c);
	};

	$open->() for 1 .. ($concurrency < @$paths ? $concurrency : scalar @$paths);

	while ($sel->count()) {
		# a request unanswered for TIMEOUT seconds: 0, and its connection dropped
		for my $c (grep { time() - $_->{sent} > $timeout } values %conn) {
			$sel->remove($c->{sock});
			close $c->{sock};
			delete $conn{$c->{sock}};
			$open->() if $next < @$paths;
		}
		for my $sock ($sel->can_read(0.5)) {
			my $c = $conn{$sock} or next;
			my $n = sysread($sock, my $chunk, 65536);
			if (!$n) {
				next if !defined $n && ($! == EAGAIN || $! == EWOULDBLOCK);
				# closed: an answer framed by the close is whole now
				my $st = _answer($c->{buf}, 1);
				$status[$c->{req}] = $st->[0] if $st;
				$sel->remove($sock);
				close $sock;
				delete $conn{$sock};
				$open->() if $next < @$paths;
				next;
			}
			$c->{buf} .= $chunk;
			my $st = _answer($c->{buf}, 0) or next;
			$status[$c->{req}] = $st->[0];
			if ($st->[1]) {
				$sel->remove($sock);
				close $sock;
				delete $conn{$sock};
				$open->() if $next < @$paths;
			} else {
				$send->($c);
			}
		}
	}
	close $_->{sock} for values %conn;
	return @status;
}

# [status, closes] once BUF holds a whole answer (at EOF when ENDED), else undef.

sub _answer {
	my ($buf, $ended) = @_;
	my $i = index($buf, "\r\n\r\n");
	return undef if $i < 0;
	my $head = substr($buf, 0, $i);
	my $body = substr($buf, $i + 4);
	my ($status) = $head =~ m!^HTTP/1\.[01] (\d{3})! or return [0, 1];
	my $close = $head =~ /^Connection:\s*close/mi || $head =~ m!^HTTP/1\.0!;
	if ($head =~ /^Content-Length:\s*(\d+)/mi) {
		return length($body) >= $1 ? [$status, $close] : undef;
	}
	if ($head =~ /^Transfer-Encoding:\s*chunked/mi) {
		return $body =~ /(?:^|\r\n)0\r\n\r\n\z/ ? [$status, $close] : undef;
	}
	return $ended ? [$status, 1] : undef;
}

1;
