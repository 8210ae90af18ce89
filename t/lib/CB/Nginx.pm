package CB::Nginx;

# What the t/*.t files share around Test::Nginx: the frame of their nginx.conf, starting
# nginx with its CB::Origin daemons, waiting for a reload, the worker processes, "nginx -t",
# self-signed certificates, and reading error.log.  Everything here behaves the same with our harness (t/lib/Test/
# Nginx.pm) and with nginx-tests' own lib/Test/Nginx.pm, whose reload() sends HUP and
# returns at once and whose run() waits only for the pid file.
#
#	$t->write_file_expand('nginx.conf', conf(2, <<'EOF'));
#	    upstream u { ... }
#	    server { ... }
#	EOF
#	my ($hits) = start($t, 8081);
#
# Subroutines take $t as an argument (as nginx-tests' own do), never close over a file's
# "my $t": a named sub that does keeps the object alive until global destruction, after
# Test::More has ended, so nginx-tests' library stops nginx and adds its two last checks
# too late and the file fails ("planned N but ran N-2", exit 255).
#
# The process helpers read Linux's /proc (through CB::Proc), as the tests that signal workers do.
#
# This module does not load Test::Nginx (t/80-debian-nginx.t must set its environment
# before that is loaded); it calls Test::Nginx::port() at run time.

use warnings;
use strict;

use Exporter qw/ import /;
our @EXPORT_OK = qw/ conf stream_conf env_globals start req uploads reload master masters workers
	workers_up nginx_t self_signed log_size log_since log_count /;

use IO::Socket::INET;
use POSIX qw//;
use Time::HiRes qw/ sleep time /;

use CB::Origin;
use CB::Proc qw/ pids children cmdline alive started kill_same /;

###############################################################################

# The configuration every test runs: N worker processes, HTTP inside http {} after the
# harness's own http-level lines.  GLOBALS replaces %%TEST_GLOBALS%% (the main-level lines
# the harness writes: pid, error_log, TEST_NGINX_GLOBALS).

sub conf {
	my ($workers, $http, %opts) = @_;

	my $globals = $opts{globals} // '%%TEST_GLOBALS%%';

	return <<"EOF";

$globals

daemon off;
worker_processes $workers;

events {
}

http {
    %%TEST_GLOBALS_HTTP%%

${http}}

EOF
}

# The same frame for a test of stream breakers: STREAM inside stream {} after the harness's
# stream-level lines, no http block.

sub stream_conf {
	my ($workers, $stream) = @_;

	return <<"EOF";

%%TEST_GLOBALS%%

daemon off;
worker_processes $workers;

events {
}

stream {
    %%TEST_GLOBALS_STREAM%%

${stream}}

EOF
}

# TEST_NGINX_GLOBALS without its load_module lines: what a test that runs another nginx (Debian's,
# whose dynamic modules are not installed here) writes as GLOBALS with its own modules, since
# %%TEST_GLOBALS%% would load every module that nginx was built with as dynamic (nginx-tests'
# library writes a load_module line for each).  pid and error_log then come from the library's
# command line (-g).

sub env_globals {
	(my $g = $ENV{TEST_NGINX_GLOBALS} // '') =~ s/load_module\s+[^;]*;\s*//g;
	return $g;
}

###############################################################################

# Starts a CB::Origin on port(P) for each port number P (e.g. 8081), then nginx, and waits
# until every origin listens; returns the origins' hits files ("origin-P.hits" in the test
# directory), in the order of the ports.  A watchdog goes along: see _watchdog.

sub start {
	my ($t, @ports) = @_;

	$t->run_daemon(\&_watchdog, $$, $t->testdir());

	my @hits = map { $t->testdir() . "/origin-$_.hits" } @ports;
	for my $i (0 .. $#ports) {
		$t->run_daemon(\&CB::Origin::run, Test::Nginx::port($ports[$i]),
			$hits[$i]);
	}

	$t->run();

	for my $p (@ports) {
		$t->waitforsocket('127.0.0.1:' . Test::Nginx::port($p))
			or die "origin on port $p did not start\n";
	}

	return wantarray ? @hits : $hits[0];
}

# The watchdog: once the test process is gone (killed, even by SIGKILL, or ended without its
# library stopping nginx: nginx-tests' run() dies and leaves a slow-starting nginx running,
# its stop() dies without a pid file and skips stop_daemons()), or once stop_daemons() stops
# it, an nginx of this test directory that still runs is stopped: TERM to the master, then
# KILL to it and its workers.  The origins go by themselves (see CB::Origin).

sub _watchdog {
	my ($test, $dir) = @_;

	my $stop = 0;
	local $SIG{TERM} = sub { $stop = 1 };
	local $SIG{INT} = sub { $stop = 1 };

	sleep 0.2 while !$stop && getppid() == $test;

	for my $m (masters($dir)) {
		# each with its start time: a pid that ends may be another process's by the
		# time KILL comes
		my @procs = map { [ $_, started($_) ] } $m, children($m);
		kill 'TERM', $m;

		my $end = time() + 3;
		sleep 0.05 while alive($m) && time() < $end;

		kill_same('KILL', @procs, map { [ $_, started($_) ] } children($m));
	}

	POSIX::_exit(0);
}

# A request with METHOD and an empty body (HTTP/1.0, Host: localhost), HEADERS ("Name: value")
# added; the raw response, as Test::Nginx's http() gives it.

sub req {
	my ($method, $uri, @headers) = @_;
	my $h = join '', map { "$_\n" } @headers;
	return Test::Nginx::http(<<EOF);
$method $uri HTTP/1.0
Host: localhost
Content-Length: 0
$h
EOF
}

# N POSTs of BYTES to port(8080), one after the other, each to sprintf(URI, its number) with
# HEADERS ("Name: value") added: their statuses counted, as "STATUS:COUNT ..."

sub uploads {
	my ($n, $uri, $bytes, @headers) = @_;
	my $body = 'x' x $bytes;
	my $h = join '', map { "$_\r\n" } @headers;
	my %n;
	for my $i (1 .. $n) {
		my $s = IO::Socket::INET->new('127.0.0.1:' . Test::Nginx::port(8080))
			or die "connect: $!\n";
		binmode $s;
		print $s 'POST ' . sprintf($uri, $i) . " HTTP/1.0\r\nHost: localhost\r\n$h"
			. "Content-Length: $bytes\r\n\r\n" . $body;
		local $/;
		my $r = <$s> // '';
		$n{$r =~ m!^HTTP/1\.[01] (\d{3})! ? $1 : 'none'}++;
		close $s;
	}
	return join ' ', map { "$_:$n{$_}" } sort keys %n;
}

###############################################################################
# processes

# the nginx master of this test (from nginx.pid), or undef

sub master {
	my ($t) = @_;

	my $pid = eval { $t->read_file('nginx.pid') } // '';
	return $pid =~ /^(\d+)/ ? $1 : undef;
}

# running nginx masters of a test directory, found by their command line (no pid file
# needed: it may be gone, or not written yet)

sub masters {
	my ($dir) = @_;

	return grep {
		my $c = cmdline($_);
		$c =~ /^nginx: master process / && index($c, " -p $dir/ ") >= 0
	} pids();
}

# the worker processes serving now: children of the master titled "nginx: worker process"
# (a new worker takes that title once initialised; an old one, told to quit, retitles
# itself "... is shutting down")

sub workers {
	my ($t) = @_;

	my $m = master($t) or return ();
	my @w = sort { $a <=> $b }
		grep { cmdline($_) eq 'nginx: worker process' } children($m);
	return @w;
}

# the worker processes once N of them serve (a worker takes its title when its
# initialisation is done, a little after nginx answers), or what there is after
# 5 s

sub workers_up {
	my ($t, $n) = @_;

	my @w;
	for (1 .. 100) {
		@w = workers($t);
		last if @w >= $n;
		sleep 0.05;
	}
	return @w;
}

###############################################################################
# reload

# Sends HUP (the library's reload()) and waits until the new configuration serves: as many
# new workers as the configuration's worker_processes (or WORKERS) are up, and none of the
# old ones still listens.  Returns 1 then, 0 when the master rejected the configuration
# ([emerg] in error.log; the old workers go on serving) or after 10 s.

sub reload {
	my ($t, %opts) = @_;

	my %old = map { $_ => 1 } workers($t);
	my $want = $opts{workers} // _conf_workers($t) // scalar keys %old;
	my $log = log_size($t);

	$t->reload();

	my $end = time() + 10;

	while (time() < $end) {
		return 0 if log_since($t, $log) =~ /\[emerg\]/;

		my @new = grep { !$old{$_} } workers($t);

		# an old worker retitles itself, then closes its listening
		# sockets: wait for the sockets
		return 1 if @new >= $want && !grep { _listens($_) } keys %old;

		sleep 0.02;
	}

	Test::More::diag('reload: no new workers after 10s');
	return 0;
}

sub _conf_workers {
	my ($t) = @_;

	my $conf = eval { $t->read_file('nginx.conf') } // '';
	return $conf =~ /^\s*worker_processes\s+(\d+)\s*;/m ? $1
		: $conf =~ /^\s*worker_processes\s/m ? undef : 1;
}

# whether a process is an nginx worker that still accepts: its title says so, or it holds
# a listening TCP socket

sub _listens {
	my ($pid) = @_;

	return 0 unless alive($pid);
	return 1 if cmdline($pid) eq 'nginx: worker process';

	my %listen;
	for my $f ('/proc/net/tcp', '/proc/net/tcp6') {
		open my $fh, '<', $f or next;
		while (<$fh>) {
			my @f = split;
			$listen{$f[9]} = 1 if @f > 9 && $f[3] eq '0A';
		}
	}

	opendir my $dh, "/proc/$pid/fd" or return 0;
	for my $fd (grep { /^\d+$/ } readdir $dh) {
		my $l = readlink("/proc/$pid/fd/$fd") // next;
		return 1 if $l =~ /^socket:\[(\d+)\]$/ && $listen{$1};
	}

	return 0;
}

###############################################################################
# nginx -t

# "nginx -t" of FILE in the test directory: (exit status, output).  nginx -t creates the
# pid file (empty) to see that it can; one it created is removed again, or nginx-tests'
# run() would take it for a started nginx and return before nginx listens.

sub nginx_t {
	my ($t, $file) = @_;

	my $dir = $t->testdir();
	my $pidfile = "$dir/nginx.pid";
	my $had = -e $pidfile;

	my $pid = open(my $fh, '-|');
	die "Unable to fork(): $!\n" unless defined $pid;

	if ($pid == 0) {
		open STDERR, '>&', \*STDOUT;
		no warnings 'once';
		exec($Test::Nginx::NGINX, '-p', "$dir/", '-c', $file,
			'-e', 'error-t.log', '-t')
			or print "exec: $!\n";
		POSIX::_exit(1);
	}

	local $/;
	my $out = <$fh> // '';
	close $fh;
	my $rc = $? >> 8;

	unlink $pidfile if !$had;

	return ($rc, $out);
}

###############################################################################
# TLS

# For each NAME, a self-signed certificate for CN=NAME and its key, NAME.crt and NAME.key in
# the test directory (openssl's output goes to openssl.out); dies when openssl fails.

sub self_signed {
	my ($t, @names) = @_;

	$t->write_file('openssl.conf', <<EOF);
[ req ]
default_bits = 2048
encrypt_key = no
distinguished_name = req_distinguished_name
[ req_distinguished_name ]
EOF

	my $d = $t->testdir();

	for my $name (@names) {
		system('openssl req -x509 -new '
			. "-config $d/openssl.conf -subj /CN=$name/ "
			. "-out $d/$name.crt -keyout $d/$name.key "
			. ">>$d/openssl.out 2>&1") == 0
			or die "Can't create certificate for $name: $!\n";
	}
}

###############################################################################
# error.log

sub log_size {
	my ($t) = @_;
	return -s $t->testdir() . '/error.log' || 0;
}

# error.log from byte OFFSET on

sub log_since {
	my ($t, $offset) = @_;
	my $log = eval { $t->read_file('error.log') } // '';
	return substr($log, $offset // 0);
}

# how many times RE matches in error.log

sub log_count {
	my ($t, $re) = @_;
	my $log = $t->read_file('error.log');
	my $n = 0;
	$n++ while $log =~ /$re/g;
	return $n;
}

1;
