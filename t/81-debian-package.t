#!/usr/bin/perl

# The Debian package (scripts/package-deb) as an operator uses it, on this machine's Debian
# nginx: lintian finds no error or warning; `dpkg -i` enables the module through
# /etc/nginx/modules-enabled/ and Debian's own `nginx -t` passes with it; /usr/bin/cb-replay
# answers --version and --help and has its manual page; Debian's
# /usr/sbin/nginx, run on a test configuration that loads the module by including
# modules-enabled/*.conf, trips a breaker against a failing origin and reports the
# package's version; `dpkg -r` disables it (Debian's `.removed` link) and nginx still
# passes `nginx -t` without it; `dpkg -P` leaves nothing behind.  The stream module's
# package goes the same way beside it: enabled at priority 70, after Debian's stream module
# (50), which it depends on; it opens a stream upstream whose server refuses connections.
#
# It changes the machine, so it runs only as root, and only when the package is not
# already installed; whatever happens, it purges the package again at the end. It never
# starts Debian's nginx service: the package's scripts only ask nginx to reload through a
# dpkg trigger, which reloads a running service alone, and a policy-rc.d that refuses
# every service action is put in place for the run unless the machine has one.
#
# TEST_NGINX_DEBIAN_PACKAGE is the .deb (scripts/test sets it); without it, or when that
# file is missing, scripts/package-deb builds it.

###############################################################################

use warnings;
use strict;

use Test::More;

use Fcntl qw/ :flock /;
use FindBin;
use JSON::PP qw//;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use CB::Release qw/ root version nginx_version /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $pkg = 'libnginx-mod-http-circuit-breaker';
my $spkg = 'libnginx-mod-stream-circuit-breaker';
my $senabled = '/etc/nginx/modules-enabled/70-mod-stream-circuit-breaker.conf';
my $savailable = '/usr/share/nginx/modules-available/mod-stream-circuit-breaker.conf';
my $sso = '/usr/lib/nginx/modules/ngx_stream_circuit_breaker_module.so';
my $bin = '/usr/sbin/nginx';
my $enabled = '/etc/nginx/modules-enabled/50-mod-http-circuit-breaker.conf';
my $available = '/usr/share/nginx/modules-available/mod-http-circuit-breaker.conf';
my $so = '/usr/lib/nginx/modules/ngx_http_circuit_breaker_module.so';
my $policy = '/usr/sbin/policy-rc.d';
my $service_pid = '/run/nginx.pid';

# dpkg's view of a package: "install ok installed", "deinstall ok config-files", or ''
sub status {
	my ($name) = @_;
	my $s = `dpkg-query -W -f='\${Status}' $name 2>/dev/null`;
	return $? == 0 ? $s : '';
}

sub slurp {
	my ($name) = @_;
	open my $fh, '<', $name or return undef;
	local $/;
	return scalar <$fh>;
}

# runs a command; returns (exit code, stdout and stderr)
sub run {
	my $out = `@_ 2>&1`;
	return ($? >> 8, $out);
}

plan(skip_all => 'not root: the test installs and removes a package') if $> != 0;
plan(skip_all => "no $bin") unless -x $bin;
plan(skip_all => "Debian's nginx package is not installed")
	unless status('nginx') eq 'install ok installed';

# Two runs at once (two checkouts' suites) would fight over dpkg: one waits for the other.
open my $lock, '>', '/tmp/libnginx-mod-http-circuit-breaker-test.lock' or die "lock: $!\n";
flock($lock, LOCK_EX) or die "lock: $!\n";

for my $p ($pkg, $spkg) {
	plan(skip_all => "$p is on this machine already (" . status($p)
		. '): the test installs and purges it itself') if status($p) ne '';
}
plan(skip_all => "$enabled* or $senabled* exists without the package")
	if grep { -e $_ || -l $_ } $enabled, "$enabled.removed", $senabled, "$senabled.removed";
plan(skip_all => "Debian's stream module (libnginx-mod-stream) is not installed")
	unless status('libnginx-mod-stream') eq 'install ok installed';
my ($rc, $out) = run("$bin -t");
plan(skip_all => "Debian's nginx -t fails before the package is installed: $out") if $rc;

my $version = version();
my $deb = $ENV{TEST_NGINX_DEBIAN_PACKAGE}
	|| `${\ root()}/scripts/package-deb --print-name`;
chomp $deb;
(my $sdeb = $deb) =~ s/libnginx-mod-http-/libnginx-mod-stream-/;
unless (-f $deb && -f $sdeb) {
	($rc, $out) = run(root() . '/scripts/package-deb');
	BAIL_OUT("scripts/package-deb failed:\n$out") if $rc || !-f $deb || !-f $sdeb;
}

# Before Test::Nginx reads it: Debian's nginx.
$ENV{TEST_NGINX_BINARY} = $bin;

require Test::Nginx;
Test::Nginx->import(qw/ :DEFAULT http_end /);
require CB::Nginx;
require CB::Debian;
require CB::Response;
CB::Response->import(qw/ body header /);

my $t = Test::Nginx->new()->has(qw/http proxy/)->plan(55);

###############################################################################

# Whatever happens below, the machine gets back the state it had: the package purged, our
# policy-rc.d gone. (Test::Nginx stops the test nginx on its own.)

my ($own_policy, $installed);

END {
	local $?;
	system('dpkg', '--purge', $spkg) if $installed && status($spkg) ne '';
	system('dpkg', '--purge', $pkg) if $installed && status($pkg) ne '';
	unlink $policy if $own_policy;
}

unless (-e $policy) {
	open my $fh, '>', $policy or die "$policy: $!\n";
	print $fh "#!/bin/sh\n# t/81-debian-package.t: no service starts or reloads\nexit 101\n";
	close $fh;
	chmod 0755, $policy;
	$own_policy = 1;
}

my $had_service = -e $service_pid;

###############################################################################

# lintian: nothing at error or warning level (info and pedantic tags are shown)

SKIP: {
	skip 'lintian not installed (scripts/setup installs it)', 1
		unless -x '/usr/bin/lintian';

	my @debs = grep { -f } map { my $d = $_; $d =~ s/(libnginx-mod-\w+-circuit-breaker)_/$1-dbgsym_/;
		($_, $d) } $deb, $sdeb;
	($rc, $out) = run("lintian --fail-on error,warning -I --pedantic @debs");
	$out =~ s/^running with root privileges is not recommended!\n//m;
	is($rc, 0, 'lintian: no error or warning') or diag($out);
	diag("lintian:\n$out") if $out ne '' && $rc == 0;
}

# install

($rc, $out) = run('dpkg', '--install', $deb);
$installed = 1;
is($rc, 0, 'dpkg -i') or diag($out);
is(status($pkg), 'install ok installed', 'installed');
is(`dpkg-query -W -f='\${Version}' $pkg`, $version, 'package version is the crate version');

my ($abi) = grep { /^nginx-abi-/ }
	split /,\s*/, `dpkg-query -W -f='\${Provides}' nginx`;
my $depends = `dpkg-query -W -f='\${Depends}' $pkg`;
ok($abi && $depends =~ /(?:^|, )\Q$abi\E(?:,|$)/,
	"depends on the installed nginx's ABI ($depends)");

is(readlink($enabled), $available, 'enabled through modules-enabled/');
is(slurp($available),
	"load_module modules/ngx_http_circuit_breaker_module.so;\n",
	'modules-available holds the load_module line');
ok(-f $so, "module in /usr/lib/nginx/modules/");

# cb-replay beside it, with its manual page

my $replay = '/usr/bin/cb-replay';
($rc, $out) = run($replay, '--version');
is("$rc $out", "0 cb-replay $version\n", 'cb-replay --version: the package version');
($rc, $out) = run($replay, '--help');
ok($rc == 0 && $out =~ /^Usage: cb-replay /m && $out =~ /--transitions/,
	'cb-replay --help: usage and options, exit 0') or diag($out);
($rc, $out) = run('zcat', '/usr/share/man/man1/cb-replay.1.gz');
ok($rc == 0 && $out =~ /^\.TH CB-REPLAY "1"/m && $out =~ /transitions/,
	'cb-replay(1) made from its --help') or diag($out);

# the stream module's package
($rc, $out) = run('dpkg', '--install', $sdeb);
is($rc, 0, 'stream: dpkg -i') or diag($out);
is(status($spkg), 'install ok installed', 'stream: installed');
my $sdepends = `dpkg-query -W -f='\${Depends}' $spkg`;
ok($abi && $sdepends =~ /(?:^|, )\Q$abi\E(?:,|$)/ && $sdepends =~ /(?:^|, )libnginx-mod-stream(?:,|$)/,
	"stream: depends on the nginx ABI and Debian's stream module ($sdepends)");
is(readlink($senabled), $savailable, 'stream: enabled through modules-enabled/ at 70');
is(slurp($savailable),
	"load_module modules/ngx_stream_circuit_breaker_module.so;\n",
	'stream: modules-available holds the load_module line');
ok(-f $sso, 'stream: module in /usr/lib/nginx/modules/');

# Debian's own configuration, now with the module: -T dumps what it read
($rc, $out) = run("$bin -T");
is($rc, 0, "Debian's nginx -t passes with the module") or diag($out);
like($out, qr!^# configuration file \Q$enabled\E:\nload_module modules/ngx_http_circuit_breaker_module\.so;$!m,
	'nginx read the module from modules-enabled/');
like($out, qr!/50-mod-stream\.conf:\nload_module modules/ngx_stream_module\.so;\n.*\Q$senabled\E:\nload_module modules/ngx_stream_circuit_breaker_module\.so;$!ms,
	'stream: nginx read the stream module, then ours');
is(-e $service_pid, $had_service, 'no nginx service started');

###############################################################################

# Debian's nginx on a test configuration: the module comes from modules-enabled/. Its
# load_module path is relative to the prefix (Debian's is /usr/share/nginx, whose modules/
# is /usr/lib/nginx/modules); Test::Nginx runs nginx with the test directory as prefix.

symlink('/usr/lib/nginx/modules', $t->testdir() . '/modules')
	or die "symlink: $!\n";

# the modules that modules-enabled/ holds, and no other

$t->write_file_expand('nginx.conf',
	CB::Debian::conf('include /etc/nginx/modules-enabled/*.conf;') . CB::Debian::stream_block());

my $hits = CB::Nginx::start($t, 8081);

my $nginx = nginx_version($bin);
like($t->read_file('error.log'),
	qr/\[notice\] .*circuit breaker zone "cb" initialized: 1048576 bytes, module \Q$version\E built for nginx \Q$nginx\E$/m,
	'zone notice names the versions');

my ($ok, $failed, $r, $open) = CB::Debian::trip($hits);

like($ok, qr!^HTTP/1.1 200.*origin \d+ ok!s, 'served through the breaker');
is($failed, 4, 'failures reached the origin');
like($r, qr!^HTTP/1.1 503!, 'open: 503');
is(header($r, 'X-Circuit-State'), 'open', 'open: header');
is($open, 4, 'open: origin untouched');

my $j = eval { JSON::PP->new->decode(body(http_get('/status')) // '') } || {};
is($j->{module_version}, $version, 'status: module_version');
my ($b) = grep { $_->{upstream} eq 'api' } @{ $j->{breakers} || [] };
is($b && $b->{state}, 'open', 'status: breaker open');
is($b && $b->{totals}{opened}, 1, 'status: opened once');

like(body(http_get('/status?format=prometheus')),
	qr/^nginx_circuit_breaker_build_info\{version="\Q$version\E",nginx="\Q$nginx\E"\} 1$/m,
	'prometheus: build_info');

is(CB::Debian::stream_trip($t), '502 502 502 502 503 503 503 503 503 503',
	'stream: refused connections open it, then sessions are refused');

# nginx -t sets up the zone too, but only a real start logs the notice
($rc, $out) = run($bin, '-t', '-p', $t->testdir() . '/', '-c', 'nginx.conf',
	'-e', 'error.log');
is($rc, 0, 'nginx -t on the test configuration') or diag($out);
my @inits = $t->read_file('error.log') =~ /zone "cb" initialized/g;
is(scalar @inits, 1, 'zone notice logged once, not by nginx -t');

$t->stop();
ok(!-e $t->testdir() . '/nginx.pid', 'test nginx stopped');

###############################################################################

# remove: Debian's module packages keep the admin's choice as a "<link>.removed" until purge
($rc, $out) = run('dpkg', '--remove', $spkg);
is($rc, 0, 'stream: dpkg -r') or diag($out);
ok(!-e $senabled && !-l $senabled, 'stream: modules-enabled link gone');
is(readlink("$senabled.removed"), $savailable, 'stream: link kept as .removed');
ok(!-e $sso && !-e $savailable, 'stream: module files gone');
($rc, $out) = run("$bin -T");
ok($rc == 0 && $out !~ /ngx_stream_circuit_breaker_module/,
	"stream: Debian's nginx -t passes without it") or diag($out);
($rc, $out) = run('dpkg', '--purge', $spkg);
is("$rc " . status($spkg), '0 ', 'stream: dpkg -P') or diag($out);
ok(!-e "$senabled.removed" && !-l "$senabled.removed", 'stream: .removed link gone');


($rc, $out) = run('dpkg', '--remove', $pkg);
is($rc, 0, 'dpkg -r') or diag($out);
is(status($pkg), 'deinstall ok config-files', 'removed');
ok(!-e $enabled && !-l $enabled, 'modules-enabled link gone');
is(readlink("$enabled.removed"), $available, 'link kept as .removed');
ok(!-e $so && !-e $available && !-e $replay, 'module files and cb-replay gone');

($rc, $out) = run("$bin -T");
is($rc, 0, "Debian's nginx -t passes without the module") or diag($out);
unlike($out, qr/circuit_breaker/, 'nginx no longer reads the module');

# the test configuration needs the module: nginx now refuses it
($rc, $out) = run($bin, '-t', '-p', $t->testdir() . '/', '-c', 'nginx.conf',
	'-e', 'error.log');
ok($rc && $out =~ /unknown directive "circuit_breaker_zone"/,
	'module no longer loaded through modules-enabled/') or diag($out);

# purge: nothing left

($rc, $out) = run('dpkg', '--purge', $pkg);
is($rc, 0, 'dpkg -P') or diag($out);
is(status($pkg), '', 'purged');
ok(!-e "$enabled.removed" && !-l "$enabled.removed", '.removed link gone');
($rc, $out) = run("$bin -t");
is($rc, 0, "Debian's nginx -t passes after purge") or diag($out);
is(-e $service_pid, $had_service, 'still no nginx service');

###############################################################################
