#!/usr/bin/perl

# scripts/build-for-nginx checks what it builds against before it builds: a source tree of
# another version than the nginx's is refused, naming both; a static module (--add-module=)
# whose source is not on this machine is refused, naming it, unless --without-static-modules;
# `nginx -V`'s output can come from a file (a production binary that cannot run here), and
# the module so built loads into Debian's nginx.
#
# Needs Debian's nginx and nginx-dev (scripts/setup installs them); scripts/test builds the
# module for Debian's nginx first, so the tree this test builds against is already there.

###############################################################################

use warnings;
use strict;

use Test::More;

use File::Temp qw/ tempdir /;
use FindBin;

BEGIN { push @INC, "$FindBin::Bin/lib"; }

use CB::Release qw/ root nginx_version /;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $bin = '/usr/sbin/nginx';
my $debian_src = '/usr/share/nginx/src';
my $script = root() . '/scripts/build-for-nginx';
my $own_src = root() . '/build/nginx-src';

plan(skip_all => "no $bin (Debian's nginx)") unless -x $bin;
plan(skip_all => "no $debian_src (Debian's nginx-dev)") unless -f "$debian_src/conf_flags";
plan(skip_all => "no $own_src (scripts/setup makes it)") unless -f "$own_src/src/core/nginx.h";

my $dir = tempdir('cb-build-for-nginx-XXXXXX', TMPDIR => 1, CLEANUP => 1);

# runs a command; returns (exit code, stdout and stderr)
sub run {
	my $out = `@_ 2>&1`;
	return ($? >> 8, $out);
}

sub write_file {
	my ($name, $text) = @_;
	open my $fh, '>', "$dir/$name" or die "$name: $!\n";
	print $fh $text;
	close $fh;
	return "$dir/$name";
}

my $debian = nginx_version($bin);
my ($own) = `cat $own_src/src/core/nginx.h` =~ /^#define NGINX_VERSION\s+"([^"]+)"/m;
my $report = `$bin -V 2>&1`;

plan(tests => 11);

###############################################################################

# another version's sources

my ($rc, $out) = run($script, $own_src, $bin, "$dir/x.so");
isnt($rc, 0, 'sources of another version: refused');
like($out, qr!error: \Q$own_src\E is nginx \Q$own\E's source, but \Q$bin\E is nginx \Q$debian\E: a module loads only into the nginx version it was built for!,
	'the refusal names both versions') or diag($out);
ok(!-e "$dir/x.so", 'nothing built');

# nginx -V from a file: the same check

my $vfile = write_file('nginx-V.txt', $report);
($rc, $out) = run($script, '--nginx-V', $vfile, $own_src, "''", "$dir/x.so");
like($out, qr!error: \Q$own_src\E is nginx \Q$own\E's source, but \Q$vfile\E is nginx \Q$debian\E!,
	'from a file: the version is the file\'s') or diag($out);

# not nginx -V's output

my $short = write_file('nginx-v.txt', "nginx version: nginx/$debian\n");
($rc, $out) = run($script, '--nginx-V', $short, $debian_src);
like($out, qr!error: \Q$short\E has no "configure arguments:" line!,
	'nginx -v instead of -V: refused, says why') or diag($out);

# a static module that is not here

(my $static = $report) =~ s/^(configure arguments: .*)$/$1 --add-module=\/nonexistent\/ngx_static_mod/m;
my $svfile = write_file('nginx-V-static.txt', $static);
($rc, $out) = run($script, '--nginx-V', $svfile, $debian_src, "''", "$dir/s.so");
isnt($rc, 0, 'a static module not on this machine: refused');
like($out, qr!error: nginx \Q$debian\E was built with the static module\(s\) /nonexistent/ngx_static_mod, not on this machine: .*--without-static-modules!,
	'the refusal names the module and the way out') or diag($out);

# asked to leave it out: built, from the file alone, and Debian's nginx loads it

($rc, $out) = run($script, '--without-static-modules', '--nginx-V', $svfile,
	$debian_src, "''", "$dir/s.so");
is($rc, 0, 'built from nginx -V in a file') or diag($out);
like($out, qr!warning: leaving out the static module\(s\) /nonexistent/ngx_static_mod!,
	'says what it left out');

write_file('load.conf', "load_module $dir/s.so;\nevents {}\n");
($rc, $out) = run($bin, '-q', '-t', '-c', "$dir/load.conf", '-g',
	"'error_log /dev/null; pid /dev/null;'");
is($rc, 0, "Debian's nginx loads the module built from its nginx -V") or diag($out);

# the same flags from the binary and from the file share one configured tree

my @trees = glob(root() . "/build/nginx-$debian-*/objs/ngx_auto_config.h");
($rc, $out) = run($script, '--debian', "$dir/d.so");
is(scalar(() = glob(root() . "/build/nginx-$debian-*/objs/ngx_auto_config.h")),
	scalar @trees, 'the binary and its nginx -V in a file: one tree') or diag($out);

###############################################################################
