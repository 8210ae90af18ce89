package Test::Nginx::Stream;

# Our own implementation of the part of nginx-tests' Test::Nginx::Stream API the t/*.t
# files use: a TCP (stream) or UDP (dgram) client of 127.0.0.1, with write, read, io and the
# socket's local port.  Written from the API's behaviour, not copied: a file that runs under
# this harness runs the same under nginx-tests' own lib/.
#
#	my $s = stream('127.0.0.1:' . port(8090));
#	my $reply = $s->io("PING\r\n");		# writes, then reads until EOF or quiet
#	my $d = dgram('127.0.0.1:' . port(8095));
#	$d->io('ping');				# one datagram back

use warnings;
use strict;

use Exporter qw/ import /;
our @EXPORT_OK = qw/ stream dgram /;

use IO::Select;
use IO::Socket::INET;

sub stream {
	return Test::Nginx::Stream->new(@_);
}

sub dgram {
	unshift @_, 'PeerAddr' if @_ == 1;
	return Test::Nginx::Stream->new(Proto => 'udp', @_);
}

sub new {
	my ($class, @args) = @_;
	unshift @args, 'PeerAddr' if @args == 1;

	my $self = bless {}, $class;
	eval {
		local $SIG{ALRM} = sub { die "timeout\n" };
		alarm(8);
		$self->{_socket} = IO::Socket::INET->new(Proto => 'tcp',
			PeerAddr => '127.0.0.1', @args)
			or die "cannot connect: $!\n";
		alarm(0);
	};
	alarm(0);
	Test::More::note("stream connect: $@") if $@;
	$self->{_socket}->autoflush(1) if $self->{_socket};
	return $self;
}

sub DESTROY {
	my ($self) = @_;
	$self->{_socket}->close() if $self->{_socket};
}

# writes MESSAGE as the socket takes it (within write_timeout seconds, 1.5 by default);
# closes the socket if it cannot take it all

sub write {
	my ($self, $message, %extra) = @_;
	my $s = $self->{_socket} or return;

	local $SIG{PIPE} = 'IGNORE';
	$s->blocking(0);
	while (length $message
		&& IO::Select->new($s)->can_write($extra{write_timeout} || 1.5))
	{
		my $n = $s->syswrite($message);
		last unless $n;
		substr($message, 0, $n) = '';
	}
	$s->close() if length $message;
}

# what one read gives within read_timeout seconds (8 by default): bytes, '' at EOF, undef
# when nothing came or the read failed

sub read {
	my ($self, %extra) = @_;
	my $s = $self->{_socket} or return undef;

	$s->blocking(0);
	my $buf;
	while (IO::Select->new($s)->can_read($extra{read_timeout} || 8)) {
		my $n = $s->sysread($buf, 1024);
		next if !defined $n && $!{EWOULDBLOCK};
		last;
	}
	return $buf;
}

# writes DATA, then reads until EOF, quiet, LENGTH bytes or READ reads (a datagram socket
# reads once unless told otherwise); what was read

sub io {
	my ($self, $data, %extra) = @_;
	my $reads = $extra{read};
	$reads = 1 if !defined $reads && $self->{_socket}
		&& $self->{_socket}->socktype() == SOCK_DGRAM;

	$self->write($data, %extra);

	my $got = '';
	while (!defined $reads || $reads-- > 0) {
		my $buf = $self->read(%extra);
		last unless defined $buf && length $buf;
		$got .= $buf;
		last if defined $extra{length} && length($got) >= $extra{length};
	}
	return $got;
}

sub sockport {
	my ($self) = @_;
	return $self->{_socket}->sockport();
}

sub sockhost {
	my ($self) = @_;
	return $self->{_socket}->sockhost();
}

sub socket {
	my ($self) = @_;
	return $self->{_socket};
}

1;
