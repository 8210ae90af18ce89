package Test::Nginx;

# Integration-test harness for this project.
#
# This is an independent implementation of the subset of the Test::Nginx API
# found in the nginx-tests suite (lib/Test/Nginx.pm there).  Only names and
# observable semantics are shared, so that our t/*.t files also run unchanged
# with "prove -I <nginx-tests>/lib t/".  Only core Perl modules are used
# (IO::Socket::SSL is loaded lazily, and only for SSL => 1 requests).
#
# Differences from the original are marked "DIFF:" below and summarised in
# the POD at the end of this file.

use warnings;
use strict;

use base qw/ Exporter /;

# Same export lists as the original: :DEFAULT is @EXPORT.
our @EXPORT = qw/ log_in log_out http http_get http_head port /;
our @EXPORT_OK = qw/
	http_gzip_request http_gzip_like http_start http_end http_content
/;
our %EXPORT_TAGS = (
	gzip => [ qw/ http_gzip_request http_gzip_like / ],
);

use File::Path qw/ rmtree /;
use File::Spec;
use File::Temp qw/ tempdir /;
use IO::Socket::INET;
use POSIX qw/ WNOHANG /;
use Scalar::Util qw/ weaken /;
use Socket qw/ CRLF /;
use Test::More qw//;
use Time::HiRes qw/ sleep time /;

use CB::Proc;

our $NGINX = _find_binary();
our %ports = ();

# objects still alive, for the END block safety net (weak references)
my @instances;

sub _find_binary {
	return $ENV{TEST_NGINX_BINARY} if defined $ENV{TEST_NGINX_BINARY};

	my $default = '../nginx/objs/nginx';
	return $default if -x $default;

	# DIFF: the original insists on ../nginx/objs/nginx; we fall back
	# to "nginx" found in PATH.

	for my $dir (File::Spec->path()) {
		my $f = File::Spec->catfile($dir, 'nginx');
		return $f if -f $f && -x _;
	}

	return $default;
}

###############################################################################

sub new {
	my $class = shift;
	my $self = bless {}, ref($class) || $class || __PACKAGE__;

	$self->{_pid} = $$;
	$self->{_alerts} = 1;

	$self->{_testdir} = tempdir('nginx-test-XXXXXXXXXX', TMPDIR => 1)
		or die "Can't create temp directory: $!\n";

	# Running as root: nginx master runs as root, workers (and cache
	# manager/loader) switch to the default "user" (nobody).  They must
	# be able to traverse the test directory to reach the temp/cache
	# paths, which the master creates and chowns to the worker user
	# itself.  So make the directory world-searchable instead of
	# forcing "user root;" (that would change the tested configuration
	# and conflict with configs having their own "user" directive).
	# Files created by write_file() are world-readable (umask 022).

	chmod 0755, $self->{_testdir} if $> == 0;

	Test::More::BAIL_OUT("no $NGINX binary found")
		unless -x $NGINX;

	# make sure nginx and daemons are cleaned up on ^C / TERM too

	for my $sig (qw/ INT TERM /) {
		next if defined $SIG{$sig} && $SIG{$sig} ne ''
			&& $SIG{$sig} ne 'DEFAULT';
		$SIG{$sig} = sub { exit(128 + ($sig eq 'INT' ? 2 : 15)) };
	}

	push @instances, $self;
	weaken($instances[-1]);

	return $self;
}

# As the original, the object is finished (nginx and daemons stopped, the
# "no alerts" and "no sanitizer errors" checks, the directory removed) when
# it is destroyed: normally when the test file's "my $t" goes out of scope,
# before Test::More's END block checks the plan.

sub DESTROY {
	my ($self) = @_;
	$self->_finish();
}

END {
	# An object still alive here outlives the file (a named sub closing
	# over "my $t", a package variable, a reference cycle): the original
	# destroys it only in global destruction, after Test::More has ended,
	# so its last checks come too late and the file fails.  So it does
	# here: we only stop nginx and the daemons now, so that nothing is
	# left running, and say why.
	#
	# DIFF: the original stops them in global destruction, if at all.

	local $?;
	for my $t (grep { defined($_) && $_->{_pid} == $$ } @instances) {
		next if $t->{_finished};
		Test::More::diag('Test::Nginx object still alive at END '
			. '(a named sub closing over "my $t"?): its checks '
			. 'come too late');
		local $@;
		eval { $t->stop(); };
		eval { $t->stop_daemons(); };
	}
}

sub _finish {
	my ($self) = @_;
	local $?;
	local $@;

	return if !defined $self->{_pid} || $self->{_pid} != $$;
	return if $self->{_finished}++;

	eval { $self->stop(); };
	eval { $self->stop_daemons(); };

	my $log = $self->_read_file_safe('error.log');

	# in global destruction Test::More is gone (the original dies here)
	my $late = ${^GLOBAL_PHASE} eq 'DESTRUCT';

	if (!$late && Test::More->builder->expected_tests) {
		local $Test::Nginx::TODO = 'alerts' unless $self->{_alerts};

		# DIFF: the original only looks for [alert]
		my @alerts = $log =~ /^.*\[(?:alert|crit)\].*$/gm;
		Test::More::is(join("\n", @alerts), '', 'no alerts');
	}

	if (!$late && Test::More->builder->expected_tests) {
		local $Test::Nginx::TODO;
		my $errors = join "\n", $log =~ /^.*Sanitizer.*$/gm;
		Test::More::is($errors, '', 'no sanitizer errors');
	}

	if ($ENV{TEST_NGINX_CATLOG}) {
		print $log;
	}

	if ($ENV{TEST_NGINX_LEAVE}) {
		Test::More::diag("test directory left: $self->{_testdir}");
	} else {
		eval { rmtree($self->{_testdir}); };
	}
}

###############################################################################
# feature detection

# Same feature names and patterns as the original; any other name is used
# as a regular expression against "nginx -V" output (e.g. "http_ssl",
# "http_v2", "--with-threads").

my %module_regex = (
	sni	=> 'TLS SNI support enabled',
	mail	=> '--with-mail((?!\S)|=dynamic)',
	flv	=> '--with-http_flv_module',
	perl	=> '--with-http_perl_module',
	auth_request => '--with-http_auth_request_module',
	realip	=> '--with-http_realip_module',
	sub	=> '--with-http_sub_module',
	json	=> '--with-http_json_module',
	control_api => '--with-control-api',
	stream	=> '--with-stream((?!\S)|=dynamic)',
	stream_ssl => '--with-stream_ssl_module',
	http	=> '(?s)^(?!.*--without-http(?!\S))',
	cache	=> '(?s)^(?!.*--without-http-cache)',
	pcre	=> '(?s)^(?!.*--without-pcre)',
);

# built in unless disabled: "(?s)^(?!.*--without-<name>)"; configure
# truncates long names, so do the original's patterns

my @without = (
	(map { "http_${_}_module" } qw/ charset gzip ssi mirror userid access
		auth_basic autoindex geo map referer rewrite proxy fastcgi
		uwsgi scgi grpc memcached limit_conn limit_req empty_gif
		browser upstream_hash upstream_ip_hash upstream_random
		upstream_zone split_clients tunnel /),
	'http_upstream_least_conn_mod', 'http_upstream_least_time_mod',
	'http_upstream_keepalive_modu', 'http_upstream_sticky',
	(map { "mail_${_}_module" } qw/ pop3 imap smtp /),
	(map { "stream_${_}_module" } qw/ access geo limit_conn map pass
		return set split_clients upstream_hash upstream_zone /),
	'stream_upstream_least_conn_m', 'stream_upstream_least_time_m',
	'stream_upstream_random_modul',
);

for my $w (@without) {
	my $name = $w;
	$name =~ s/^(?:http|mail)_//;
	$name =~ s/_(?:m|mo|mod|modu|modul|module)$//;
	$module_regex{$name} = "(?s)^(?!.*--without-$w)";
}

my %dynamic_module = (
	http_geoip	=> 'ngx_http_geoip_module',
	image_filter	=> 'ngx_http_image_filter_module',
	perl		=> 'ngx_http_perl_module',
	xslt		=> 'ngx_http_xslt_filter_module',
	mail		=> 'ngx_mail_module',
	stream		=> 'ngx_stream_module',
	stream_geoip	=> 'ngx_stream_geoip_module',
);

sub _configure_args {
	my ($self) = @_;
	$self->{_configure_args} = `$NGINX -V 2>&1`
		if !defined $self->{_configure_args};
	return $self->{_configure_args};
}

sub has {
	my ($self, @features) = @_;

	foreach my $feature (@features) {
		Test::More::plan(skip_all => "no $feature available")
			unless $self->has_module($feature)
			or $self->has_feature($feature);
	}

	return $self;
}

sub has_module {
	my ($self, $feature) = @_;

	my $re = $module_regex{$feature};
	$re = $feature if !defined $re;

	return 1 if $self->_configure_args() =~ $re;

	my $module = $dynamic_module{$feature};
	if (defined $module && defined $ENV{TEST_NGINX_GLOBALS}) {
		$re = qr/load_module\s+[^;]*\Q$module\E[-\w]*\.so\s*;/;
		return 1 if $ENV{TEST_NGINX_GLOBALS} =~ $re;
	}

	return 0;
}

sub has_feature {
	my ($self, $feature) = @_;

	return $^O ne 'MSWin32'
		if $feature eq 'symlink' || $feature eq 'unix'
		|| $feature eq 'udp';

	if ($feature =~ /^socket_ssl/) {
		eval { require IO::Socket::SSL; IO::Socket::SSL::SSL_VERIFY_NONE(); };
		return 0 if $@;
		return 1 if $feature eq 'socket_ssl';
		return eval { IO::Socket::SSL->can_client_sni() } ? 1 : 0
			if $feature eq 'socket_ssl_sni';
		return eval { IO::Socket::SSL->can_alpn() } ? 1 : 0
			if $feature eq 'socket_ssl_alpn';
		return IO::Socket::SSL->can('get_sslversion') ? 1 : 0
			if $feature eq 'socket_ssl_sslversion';
		return IO::Socket::SSL->can('get_session_reused') ? 1 : 0
			if $feature eq 'socket_ssl_reused';
		return 0;
	}

	if ($feature =~ /^(openssl|libressl):([0-9.]+)([a-z]*)/) {
		my ($library, $need, $patch) = ($1, $2, $3);

		return 0 unless $self->_configure_args()
			=~ /with $library ([0-9.]+)([a-z]*)/i;

		return _version_ge([ split(/\./, $1), unpack('C*', $2) ],
			[ split(/\./, $need), unpack('C*', $patch) ]);
	}

	if ($feature eq 'cryptx') {
		eval { require Crypt::Misc; };
		return 0 if $@;
		return ($Crypt::Misc::VERSION >= 0.067) ? 1 : 0;
	}

	return 0;
}

sub _version_ge {
	my ($have, $need) = @_;
	my @v = @$have;

	for my $n (@$need) {
		my $v = shift @v || 0;
		return 0 if $n > $v;
		return 1 if $v > $n;
	}

	return 1;
}

sub has_version {
	my ($self, $need) = @_;

	my ($version) = $self->_configure_args()
		=~ m!nginx version: nginx/([0-9.]+)!;
	return 0 unless defined $version;

	return _version_ge([ split(/\./, $version) ], [ split(/\./, $need) ]);
}

sub has_daemon {
	my ($self, $daemon) = @_;

	my $found = grep { -f && -x _ }
		map { File::Spec->catfile($_, $daemon) } File::Spec->path();

	Test::More::plan(skip_all => "$daemon not found") unless $found;

	return $self;
}

###############################################################################
# running nginx

sub try_run {
	my ($self, $message) = @_;

	eval {
		open my $olderr, '>&', \*STDERR;
		close STDERR;
		my $ok = eval { $self->run(); 1 };
		my $err = $@;
		open STDERR, '>&', $olderr;
		die $err unless $ok;
	};

	return $self unless $@;

	if ($ENV{TEST_NGINX_VERBOSE}) {
		log_core($_) for split /^/m, $self->_read_file_safe('error.log');
	}

	Test::More::plan(skip_all => $message);
	return $self;
}

sub plan {
	my ($self, $plan) = @_;

	Test::More::plan(tests => $plan + 2);

	return $self;
}

sub todo_alerts {
	my ($self) = @_;
	$self->{_alerts} = 0;
	return $self;
}

sub _globals_args {
	my ($self) = @_;
	my $testdir = $self->{_testdir};

	return () if $self->{_test_globals};
	return ('-g', "pid $testdir/nginx.pid; "
		. "error_log $testdir/error.log debug;");
}

sub run {
	my ($self, $conf) = @_;

	my $testdir = $self->{_testdir};

	if (defined $conf) {
		open my $fh, '<', $conf or die "Can't open $conf: $!\n";
		local $/;
		$self->write_file_expand('nginx.conf', scalar <$fh>);
	}

	# As the original, a pid file already there (e.g. the empty one
	# "nginx -t" leaves) counts as started: remove it before run().

	my @cmd = ($NGINX, '-p', "$testdir/", '-c', 'nginx.conf',
		'-e', 'error.log', @{$self->{_args} || []},
		$self->_globals_args());

	my $pid = fork();
	die "Unable to fork(): $!\n" unless defined $pid;

	if ($pid == 0) {
		exec(@cmd) or print STDERR "Unable to exec(): $!\n";
		POSIX::_exit(1);
	}

	$self->{_nginx_pid} = $pid;

	# wait for nginx to start (pid file) or for it to exit

	unless ($self->waitforfile("$testdir/nginx.pid", $pid)) {
		if (CB::Proc::alive($pid)) {
			kill 'KILL', $pid;
			waitpid($pid, 0);
		}
		die "Can't start nginx";
	}

	$self->{_started} = 1;
	return $self;
}

sub args {
	my ($self, @args) = @_;
	$self->{_args} = \@args;
	return $self;
}

sub dump_config {
	my ($self) = @_;

	my @cmd = ($NGINX, '-T', '-p', "$self->{_testdir}/", '-c', 'nginx.conf',
		'-e', 'error.log', $self->_globals_args());

	my $pid = open(my $fh, '-|');
	die "Unable to fork(): $!\n" unless defined $pid;

	if ($pid == 0) {
		open STDERR, '>&', \*STDOUT;
		exec { $cmd[0] } @cmd or print STDERR "exec: $!\n";
		POSIX::_exit(1);
	}

	local $/;
	my $out = <$fh>;
	close $fh;
	return $out;
}

sub _master_pid {
	my ($self) = @_;

	my $pid = $self->_read_file_safe('nginx.pid');
	$pid = $1 if defined $pid && $pid =~ /(\d+)/;

	return ($pid && $pid =~ /^\d+$/) ? $pid : $self->{_nginx_pid};
}

sub reload {
	my ($self) = @_;

	return $self unless $self->{_started};

	# As the original: HUP, and return at once.  The new workers may not
	# be serving yet (CB::Nginx::reload waits for them).

	kill 'HUP', $self->_master_pid();

	return $self;
}

sub stop {
	my ($self) = @_;

	return $self unless $self->{_started};

	my $pid = $self->_master_pid();
	my @workers = CB::Proc::children($pid);

	kill 'QUIT', $pid;

	# As the original, wait 90s for a graceful stop, then send TERM.
	# DIFF: the original then waits forever; after 5s we KILL the master
	# and its workers, so that nothing is left running.

	my $timeout = $ENV{TEST_NGINX_STOP_TIMEOUT} || 90;

	if (!CB::Proc::wait_exit($pid, $timeout)) {
		push @workers, CB::Proc::children($pid);
		kill 'TERM', $pid;

		if (!CB::Proc::wait_exit($pid, 5)) {
			push @workers, CB::Proc::children($pid);
			kill 'KILL', $pid;
			CB::Proc::wait_exit($pid, 5);
		}
	}

	# the master waits for its workers, but make sure none is left

	for my $w (@workers) {
		next unless kill 0, $w;
		next unless CB::Proc::cmdline($w) =~ /^nginx:/;
		kill 'KILL', $w;
	}

	# reap the process we forked, if it is not the master (daemon on)

	if ($self->{_nginx_pid} && $self->{_nginx_pid} != $pid) {
		waitpid($self->{_nginx_pid}, WNOHANG);
	}

	$self->{_started} = 0;

	return $self;
}

sub run_daemon {
	my ($self, $code, @args) = @_;

	my $pid = fork();
	die "Can't fork daemon: $!\n" unless defined $pid;

	if ($pid == 0) {
		# our INT/TERM handlers must not leak into the daemon
		$SIG{$_} = 'DEFAULT' for qw/ INT TERM /;

		if (ref($code) eq 'CODE') {
			eval { $code->(@args); };
			print STDERR "daemon died: $@" if $@;
		} else {
			exec($code, @args)
				or print STDERR "Can't exec daemon $code: $!\n";
		}

		# DIFF: the original uses exit(); _exit() skips END blocks
		# and destructors inherited from the test process.

		STDOUT->flush();
		STDERR->flush();
		POSIX::_exit(0);
	}

	$self->{_daemons} = [] unless defined $self->{_daemons};
	push @{$self->{_daemons}}, $pid;

	return $self;
}

sub stop_daemons {
	my ($self) = @_;

	while ($self->{_daemons} && scalar @{$self->{_daemons}}) {
		my $p = shift @{$self->{_daemons}};

		kill 'TERM', $p;
		next if CB::Proc::wait_exit($p, 5);

		kill 'KILL', $p;
		waitpid($p, 0);
	}

	return $self;
}

sub waitforfile {
	my ($self, $file, $pid) = @_;
	my $exited;

	# wait for file to appear, or the specified process to exit

	for (1 .. 50) {
		return 1 if -e $file;
		return 0 if $exited;
		$exited = waitpid($pid, WNOHANG) != 0 if $pid;
		sleep 0.1;
	}

	return undef;
}

sub waitforsocket {
	my ($self, $peer) = @_;

	# wait for socket to accept connections

	for (1 .. 50) {
		my $s = IO::Socket::INET->new(
			Proto => 'tcp',
			PeerAddr => $peer,
		);

		return 1 if defined $s;

		sleep 0.1;
	}

	return undef;
}

###############################################################################
# files

sub testdir {
	my ($self) = @_;
	return $self->{_testdir};
}

sub read_file {
	my ($self, $name) = @_;
	local $/;

	open my $fh, '<', $self->{_testdir} . '/' . $name
		or die "Can't open $name: $!";
	my $content = <$fh>;
	close $fh;

	return $content;
}

sub _read_file_safe {
	my ($self, $name) = @_;
	my $c = eval { $self->read_file($name) };
	return defined $c ? $c : '';
}

sub write_file {
	my ($self, $name, $content) = @_;

	open my $fh, '>', $self->{_testdir} . '/' . $name
		or die "Can't create $name: $!";
	binmode $fh;
	print $fh $content;
	close $fh;

	return $self;
}

sub write_file_expand {
	my ($self, $name, $content) = @_;

	$content =~ s/%%TEST_GLOBALS%%/$self->test_globals()/gmse;
	$content =~ s/%%TEST_GLOBALS_HTTP%%/$self->test_globals_http()/gmse;
	$content =~ s/%%TEST_GLOBALS_STREAM%%/$self->test_globals_stream()/gmse;
	$content =~ s/%%TESTDIR%%/$self->{_testdir}/gms;

	# like the original: literal 127.0.0.1:8xxx addresses are remapped too
	$content =~ s/127\.0\.0\.1:(8\d\d\d)/'127.0.0.1:' . port($1)/gmse;

	$content =~ s/%%PORT_(\d+)%%/port($1)/gmse;
	$content =~ s/%%PORT_(\d+)_UDP%%/port($1, udp => 1)/gmse;

	return $self->write_file($name, $content);
}

sub test_globals {
	my ($self) = @_;

	return $self->{_test_globals}
		if defined $self->{_test_globals};

	my $s = '';

	$s .= "pid $self->{_testdir}/nginx.pid;\n";
	$s .= "error_log $self->{_testdir}/error.log debug;\n";

	$s .= $ENV{TEST_NGINX_GLOBALS}
		if $ENV{TEST_NGINX_GLOBALS};

	$s .= $self->test_globals_modules();
	$s .= $self->test_globals_perl5lib() if $s !~ /env PERL5LIB/;

	$self->{_test_globals} = $s;
}

sub test_globals_modules {
	my ($self) = @_;

	# As the original: a load_module line for every module configured as
	# dynamic, from TEST_NGINX_MODULES or the binary's directory, whether
	# the .so is there or not (a test running a packaged nginx without
	# them writes its own main-level lines instead of %%TEST_GLOBALS%%).

	my $dir = $ENV{TEST_NGINX_MODULES};

	if (!defined $dir) {
		my ($volume, $d) = File::Spec->splitpath($NGINX);
		$dir = File::Spec->catpath($volume, $d, '');
	}

	$dir = File::Spec->rel2abs($dir);
	$dir =~ s!/+$!!;

	my $s = '';

	for (['http_geoip\S+=dynamic', 'ngx_http_geoip_module'],
		['image_filter\S+=dynamic', 'ngx_http_image_filter_module'],
		['perl\S+=dynamic', 'ngx_http_perl_module'],
		['xslt\S+=dynamic', 'ngx_http_xslt_filter_module'],
		['mail=dynamic', 'ngx_mail_module'],
		['stream=dynamic', 'ngx_stream_module'],
		['stream_geoip\S+=dynamic', 'ngx_stream_geoip_module'])
	{
		my ($re, $so) = @$_;
		$s .= "load_module $dir/$so.so;\n" if $self->has_module($re);
	}

	return $s;
}

sub test_globals_perl5lib {
	my ($self) = @_;

	return '' unless $self->has_module('perl');

	my ($volume, $dir) = File::Spec->splitpath($NGINX);
	my $objs = File::Spec->rel2abs(File::Spec->catpath($volume, $dir, ''));
	$objs =~ s!/+$!!;

	return "env PERL5LIB=$objs/src/http/modules/perl:"
		. "$objs/src/http/modules/perl/blib/arch;\n";
}

sub test_globals_http {
	my ($self) = @_;

	return $self->{_test_globals_http}
		if defined $self->{_test_globals_http};

	my $d = $self->{_testdir};
	my $s = '';

	$s .= "root $d;\n";
	$s .= "access_log $d/access.log;\n";
	$s .= "client_body_temp_path $d/client_body_temp;\n";

	$s .= "fastcgi_temp_path $d/fastcgi_temp;\n"
		if $self->has_module('fastcgi');

	$s .= "proxy_temp_path $d/proxy_temp;\n"
		if $self->has_module('proxy');

	$s .= "uwsgi_temp_path $d/uwsgi_temp;\n"
		if $self->has_module('uwsgi');

	$s .= "scgi_temp_path $d/scgi_temp;\n"
		if $self->has_module('scgi');

	$s .= $ENV{TEST_NGINX_GLOBALS_HTTP}
		if $ENV{TEST_NGINX_GLOBALS_HTTP};

	$self->{_test_globals_http} = $s;
}

sub test_globals_stream {
	my ($self) = @_;

	return $self->{_test_globals_stream}
		if defined $self->{_test_globals_stream};

	my $s = '';

	$s .= $ENV{TEST_NGINX_GLOBALS_STREAM}
		if $ENV{TEST_NGINX_GLOBALS_STREAM};

	$self->{_test_globals_stream} = $s;
}

###############################################################################
# ports

sub port {
	my ($num, %opts) = @_;

	if (!defined $ports{$num}) {
		my $tcp = sub {
			IO::Socket::INET->new(
				Proto => 'tcp',
				LocalAddr => '127.0.0.1:' . shift,
				Listen => 1,
				ReuseAddr => 1,
			);
		};
		my $udp = sub {
			IO::Socket::INET->new(
				Proto => 'udp',
				LocalAddr => '127.0.0.1:' . shift,
			);
		};

		# As the original: try the number itself, then random ports
		# in the same 500-port block (outside the ephemeral range, so
		# outgoing connections never steal them).  A socket of the
		# other protocol stays bound to the port for the lifetime of
		# the test process: a cross-process lock against parallel
		# tests (prove -j) taking the same port.  The probe socket of
		# the port's own protocol is closed so nginx can bind it.
		#
		# DIFF: 50 attempts instead of 10, then an ephemeral port
		# (bind to port 0) as the last resort.

		my ($probe, $lock) = $opts{udp} ? ($udp, $tcp) : ($tcp, $udp);
		my ($port, $l, $s);

		for my $try (0 .. 50) {
			if ($try == 0) {
				$port = $num;
			} elsif ($try < 50) {
				$port = int($num / 500) * 500 + int(rand(500));
			} else {
				my $e = $probe->(0) or last;
				$port = $e->sockport();
				undef $e;
			}

			next if $port < 1 || $port > 65535;
			next if grep { $_->{port} == $port } values %ports;

			$l = $lock->($port) or next;
			$s = $probe->($port) and last;
			undef $l;
		}

		die "Port limit exceeded" unless defined $l and defined $s;

		$ports{$num} = {
			port => $port,
			socket => $l,
		};
	}

	return $ports{$num}{socket} if $opts{socket};
	return $ports{$num}{port};
}

###############################################################################
# logging

sub log_core {
	return unless $ENV{TEST_NGINX_VERBOSE};
	my ($prefix, $msg) = @_;
	($prefix, $msg) = ('', $prefix) unless defined $msg;
	$prefix .= ' ' if length($prefix) > 0;
	$msg = '' unless defined $msg;

	if (length($msg) > 2048) {
		$msg = substr($msg, 0, 2048)
			. "(...logged only 2048 of " . length($msg) . " bytes)";
	}

	$msg =~ s/^/# $prefix/gm;
	$msg =~ s/([^\x20-\x7e])/sprintf('\\x%02x', ord($1))
		. (($1 eq "\n") ? "\n" : '')/gmxe;
	$msg .= "\n" unless $msg =~ /\n\Z/;
	print $msg;
}

sub log_out {
	log_core('>>', @_);
}

sub log_in {
	log_core('<<', @_);
}

###############################################################################
# HTTP client

sub http_get {
	my ($url, %extra) = @_;
	return http(<<EOF, %extra);
GET $url HTTP/1.0
Host: localhost

EOF
}

sub http_head {
	my ($url, %extra) = @_;
	return http(<<EOF, %extra);
HEAD $url HTTP/1.0
Host: localhost

EOF
}

sub http {
	my ($request, %extra) = @_;

	my $s = http_start($request, %extra);

	return $s if $extra{start} or !defined $s;
	return http_end($s, %extra);
}

sub http_start {
	my ($request, %extra) = @_;
	my $s;

	my $port = $extra{SSL} ? 8443 : 8080;

	eval {
		local $SIG{ALRM} = sub { die "timeout\n" };
		local $SIG{PIPE} = sub { die "sigpipe\n" };
		alarm(8);

		$s = $extra{socket} || IO::Socket::INET->new(
			Proto => 'tcp',
			PeerAddr => '127.0.0.1:' . port($port),
			%extra
		)
			or die "Can't connect to nginx: $!\n";

		if ($extra{SSL}) {
			require IO::Socket::SSL;
			IO::Socket::SSL->start_SSL(
				$s,
				SSL_verify_mode =>
					IO::Socket::SSL::SSL_VERIFY_NONE(),
				%extra
			)
				or do {
					no warnings qw/ once /;
					die $IO::Socket::SSL::SSL_ERROR . "\n";
				};

			if (!defined $extra{SSL_startHandshake}) {
				log_in("ssl cipher: " . $s->get_cipher());
				log_in("ssl cert: "
					. $s->peer_certificate('issuer'));
			}
		}

		log_out($request);
		$s->print($request);

		sleep($extra{sleep}) if $extra{sleep};
		return '' if $extra{aborted};

		if ($extra{body}) {
			log_out($extra{body});
			$s->print($extra{body});
		}

		alarm(0);
	};
	alarm(0);
	if ($@) {
		log_in("died: $@");
		return undef;
	}

	return $s;
}

sub http_end {
	my ($s) = @_;
	my $reply;

	eval {
		local $SIG{ALRM} = sub { die "timeout\n" };
		local $SIG{PIPE} = sub { die "sigpipe\n" };
		alarm(8);

		local $/;
		$reply = $s->getline();

		$s->close();

		alarm(0);
	};
	alarm(0);
	if ($@) {
		log_in("died: $@");
		return undef;
	}

	log_in($reply);
	return $reply;
}

###############################################################################
# gzip helpers

sub http_gzip_request {
	my ($url) = @_;
	return http(<<EOF);
GET $url HTTP/1.1
Host: localhost
Connection: close
Accept-Encoding: gzip

EOF
}

sub http_content {
	my ($text) = @_;

	return undef if !defined $text;
	return undef if $text !~ /(.*?)\x0d\x0a?\x0d\x0a?(.*)/ms;

	my ($headers, $body) = ($1, $2);

	return $body if $headers !~ /Transfer-Encoding: chunked/i;

	my $content = '';
	my $len = -1;

	while ($body =~ /\G\x0d?\x0a?([0-9a-f]+)\x0d\x0a?/gcmsi) {
		$len = hex($1);
		$content .= substr($body, pos($body), $len);
		pos($body) += $len;
	}

	$content .= '[no-last-chunk]' if $len != 0;

	return $content;
}

sub http_gzip_like {
	my ($text, $re, $name) = @_;

	SKIP: {
		eval { require IO::Uncompress::Gunzip; };
		Test::More::skip("IO::Uncompress::Gunzip not installed", 1)
			if $@;

		my $in = http_content($text);
		my $out;

		IO::Uncompress::Gunzip::gunzip(\$in => \$out);

		Test::More->builder->like($out, $re, $name);
	}
}

###############################################################################

1;

__END__

=head1 NAME

Test::Nginx - our implementation of the nginx-tests harness API

=head1 SYNOPSIS

	use Test::More;
	use lib 't/lib';
	use Test::Nginx qw/ :DEFAULT http_end /;

	my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(3)
		->write_file_expand('nginx.conf', <<'EOF');
	%%TEST_GLOBALS%%
	daemon off;
	events { }
	http {
	    %%TEST_GLOBALS_HTTP%%
	    server { listen 127.0.0.1:8080; ... }
	}
	EOF
	$t->run();

=head1 ENVIRONMENT

TEST_NGINX_BINARY, TEST_NGINX_LEAVE, TEST_NGINX_VERBOSE, TEST_NGINX_CATLOG,
TEST_NGINX_GLOBALS, TEST_NGINX_GLOBALS_HTTP, TEST_NGINX_GLOBALS_STREAM,
TEST_NGINX_MODULES as in nginx-tests; additionally TEST_NGINX_STOP_TIMEOUT
(seconds to wait for a graceful stop, default 90).

=head1 DIFFERENCES FROM THE ORIGINAL

Where the t/*.t files could come to depend on a difference, there is none:
reload() sends HUP and returns (CB::Nginx::reload waits for the new
workers), run() takes an existing pid file for a started nginx, stop()
waits 90s for a graceful stop, load_module lines are written for every
module configured as dynamic, and an object still alive after the file's
end gets its last checks too late (the file fails, as with the original).
What remains:

=over

=item * binary falls back to "nginx" in PATH if ../nginx/objs/nginx is absent

=item * "no alerts" also fails on [crit] lines

=item * TEST_NGINX_LEAVE prints the directory path (diag)

=item * stop() sends KILL 5s after TERM and never blocks forever;
works also when nginx runs with "daemon on"

=item * run() kills an nginx that did not write its pid file in time

=item * INT/TERM handlers (if none set) so that ^C still stops nginx;
an END block stops nginx and the daemons of objects still alive then
(without their checks), and says so

=item * run_daemon children leave with POSIX::_exit

=item * port() makes 50 attempts, then takes an ephemeral port

=item * when run as root, the test directory is made mode 0755 so that
worker processes (user nobody) can reach temp and cache paths

=back

Configs are expected to contain "daemon off;" as in nginx-tests.

=cut
