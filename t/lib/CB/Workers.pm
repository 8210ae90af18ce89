package CB::Workers;

# Client connections as the tests that kill worker processes need them (t/60-worker-kill.t,
# t/65-limit.t): a GET on a connection of its own, its response read with a deadline
# (select, no alarm: the harness's http() times out by SIGALRM), and which worker process
# holds the server side of a connection, found through Linux's /proc.
#
#	my $s = send_get('/slow');
#	kill 'KILL', owner_of($t, $s->sockport());
#	my ($r, $why) = read_response($s, time() + 5);
#
# All talk to the test's nginx at 127.0.0.1:port(8080).  This module does not load
# Test::Nginx (see CB::Nginx); it calls Test::Nginx::port() at run time.

use warnings;
use strict;

use Exporter qw/ import /;
our @EXPORT_OK = qw/ send_get read_response owner_of /;

use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw/ time /;

use CB::Nginx qw/ workers /;

###############################################################################

# GET URI (HTTP/1.0, Host: localhost) on a new connection: the socket, or undef when
# connecting or writing failed ($! says why)

sub send_get {
	my ($uri) = @_;

	my $s = IO::Socket::INET->new(
		Proto => 'tcp',
		PeerAddr => '127.0.0.1:' . Test::Nginx::port(8080),
		Timeout => 2,
	) or return;

	local $SIG{PIPE} = 'IGNORE';
	syswrite($s, "GET $uri HTTP/1.0\r\nHost: localhost\r\n\r\n") or return;

	return $s;
}

# reads from socket S until nginx closes the connection, and closes S: the raw response,
# or (undef, why) when DEADLINE (a time()) passes first ("timeout") or reading fails
# ("read:ERROR")

sub read_response {
	my ($s, $deadline) = @_;

	my $sel = IO::Select->new($s);
	my $buf = '';

	while (1) {
		my $left = $deadline - time();
		return (undef, 'timeout') if $left <= 0;
		next unless $sel->can_read($left);
		my $n = sysread($s, $buf, 65536, length $buf);
		next if !defined $n && $!{EINTR};
		return (undef, "read:$!") unless defined $n;
		last if $n == 0;
	}

	close $s;
	return $buf;
}

# the worker process holding the server side of the connection from CLIENT_PORT, or undef:
# /proc/net/tcp gives the socket's inode, and a worker's fd links to it

sub owner_of {
	my ($t, $client_port) = @_;
	my $np = Test::Nginx::port(8080);
	my $inode;

	open my $fh, '<', '/proc/net/tcp' or return;
	# not $_: a caller may call this in a map over its sockets
	while (my $line = <$fh>) {
		my @f = split ' ', $line;
		next unless @f > 9 && $f[1] =~ /:([0-9A-F]{4})$/;
		next unless hex($1) == $np;
		next unless $f[2] =~ /:([0-9A-F]{4})$/ && hex($1) == $client_port;
		$inode = $f[9];
		last;
	}
	close $fh;
	return unless $inode;

	for my $w (workers($t)) {
		opendir my $dh, "/proc/$w/fd" or next;
		for my $fd (grep { /^\d+$/ } readdir $dh) {
			my $l = readlink("/proc/$w/fd/$fd") // next;
			return $w if $l eq "socket:[$inode]";
		}
	}

	return;
}

###############################################################################

1;
