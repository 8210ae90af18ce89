package CB::Redis;

# Debian's redis-server as a real origin of nginx's stream proxy, started by a test on
# 127.0.0.1 without persistence, and what the tests do to it: stop it (SIGSTOP: the kernel
# still accepts connections, nothing answers), let it go on, kill it (connections refused)
# and start it again on the same port.  Its own count of the connections it accepted
# (INFO stats: total_connections_received) is what "the origin saw" means in the tests.
#
#	my $redis = CB::Redis->start($t, port(8091));
#	$redis->stop; ...; $redis->cont;
#	my $n = $redis->accepted;		# connections accepted so far, this one not counted
#
# The object sends SIGCONT and SIGTERM to its server when it goes (END of the test too), so a
# test that dies with the server stopped leaves nothing behind.

use warnings;
use strict;

use IO::Socket::INET;
use POSIX qw/ WNOHANG /;
use Time::HiRes qw/ sleep time /;

my %running;

sub start {
	my ($class, $t, $port) = @_;
	my $self = bless { port => $port, dir => $t->testdir() }, $class;
	$self->_spawn();
	return $self;
}

sub _spawn {
	my ($self) = @_;
	my $pid = fork() // die "fork: $!\n";
	if ($pid == 0) {
		open STDOUT, '>>', "$self->{dir}/redis-$self->{port}.log";
		open STDERR, '>&', \*STDOUT;
		exec 'redis-server', '--port', $self->{port}, '--bind', '127.0.0.1',
			'--save', '', '--appendonly', 'no', '--dir', $self->{dir},
			'--protected-mode', 'no'
			or POSIX::_exit(127);
	}
	$self->{pid} = $pid;
	$self->{asked} = 0;
	$running{$pid} = 1;
	my $end = time() + 10;
	until ($self->_ask("PING\r\n") =~ /^\+PONG/) {
		die "redis-server on port $self->{port} did not start\n" if time() > $end;
		sleep 0.05;
	}
}

# one command to the server directly (not through nginx); its raw reply, '' on failure

sub _ask {
	my ($self, $command) = @_;
	$self->{asked}++;
	my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$self->{port}",
		Timeout => 2) or return '';
	$s->autoflush(1);
	print $s $command;
	my $reply = '';
	$s->blocking(0);
	my $end = time() + 2;
	while (time() < $end) {
		my $n = sysread($s, my $buf, 65536);
		if (defined $n && $n > 0) {
			$reply .= $buf;
			# a bulk string's length, then itself
			last if $reply =~ /^\$(\d+)\r\n/ && length($reply) >= length($&) + $1 + 2;
			last if $reply =~ /^[+\-:].*\r\n/;
			next;
		}
		last if defined $n;
		sleep 0.01;
	}
	return $reply;
}

# the connections the server accepted since it started, by its own count, ours to ask it
# questions left out

sub accepted {
	my ($self) = @_;
	my ($n) = $self->_ask("INFO stats\r\n") =~ /total_connections_received:(\d+)/;
	die "no INFO from redis-server on port $self->{port}\n" unless defined $n;
	return $n - $self->{asked};
}

sub pid { $_[0]{pid} }

sub stop { CORE::kill('STOP', $_[0]{pid}) }

sub cont { CORE::kill('CONT', $_[0]{pid}) }

# killed: connections to its port are refused until started again

sub kill {
	my ($self) = @_;
	my $pid = delete $self->{pid} or return;
	CORE::kill('CONT', $pid);
	CORE::kill('TERM', $pid);
	waitpid $pid, 0;
	delete $running{$pid};
}

sub restart {
	my ($self) = @_;
	$self->_spawn();
}

sub DESTROY {
	my ($self) = @_;
	local $?;
	$self->kill();
}

END {
	local $?;
	for my $pid (keys %running) {
		CORE::kill('CONT', $pid);
		CORE::kill('TERM', $pid);
		waitpid $pid, 0;
	}
}

1;
