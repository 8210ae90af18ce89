#!/usr/bin/perl

# Self-test of the test harness: t/lib/Test/Nginx.pm, t/lib/CB/Origin.pm and
# t/lib/CB/Nginx.pm.  Uses plain nginx features only (proxy, cache, upstream
# keepalive); our module is not loaded.  Run:
#
#	TEST_NGINX_BINARY=/usr/sbin/nginx prove -v -I t/lib t/00-harness.t
#
# Like every .t here it also runs with the original nginx-tests library:
#
#	prove -I <nginx-tests>/lib -I t/lib t/00-harness.t
#
# As root, the original leaves the test directory mode 0700, so workers
# (user nobody) cannot write temp/cache files there: run it as a normal user
# or with TEST_NGINX_GLOBALS='user root;'.  With a packaged nginx whose
# dynamic modules are not installed, the original also emits load_module
# lines for missing .so files (point TEST_NGINX_MODULES at them).
#
# (the CB::Origin and CB::Nginx checks do not depend on which Test::Nginx is
# used; the harness-only checks are skipped there).

###############################################################################

use warnings;
use strict;

use Test::More;

use File::Spec;
use FindBin;
use Time::HiRes qw/ time sleep /;

# fallback only: -I given to prove takes precedence over this
BEGIN { push @INC, "$FindBin::Bin/lib"; }

use Test::Nginx qw/ :DEFAULT http_end http_content /;
use CB::Nginx qw/ conf start reload workers masters /;
use CB::Proc qw/ alive started kill_same /;
use CB::Origin;

###############################################################################

select STDERR; $| = 1;
select STDOUT; $| = 1;

my $ours = defined &Test::Nginx::_finish;

my $t = Test::Nginx->new()->has(qw/http proxy cache upstream_keepalive/)
	->plan(37);

my $conf = conf(2, <<'EOF');
    proxy_cache_path %%TESTDIR%%/cache keys_zone=one:1m;

    upstream u {
        server 127.0.0.1:%%PORT_8081%%;
    }

    upstream ka {
        server 127.0.0.1:%%PORT_8081%%;
        keepalive 4;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        proxy_read_timeout 1s;

        location / {
            proxy_pass http://u;
        }

        location /cached/ {
            proxy_pass http://u;
            proxy_cache one;
            add_header X-Cache $upstream_cache_status always;
        }

        location /ka/ {
            proxy_pass http://ka;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }

        location = /generation {
            return 200 "generation GEN\n";
        }
    }
EOF

(my $conf1 = $conf) =~ s/GEN/1/;
$t->write_file_expand('nginx.conf', $conf1);

my $hits = start($t, 8081);
ok($t->waitforsocket('127.0.0.1:' . port(8081)), 'origin listens');

###############################################################################

my $p = port(8081);

# port allocation

my @p = map { port($_) } (8080, 8081, 8082, 8999);
my %seen = map { $_ => 1 } @p;
is(scalar keys %seen, 4, 'ports unique');
is(port(8081), $p, 'port stable');

# pass-through

my $r = http_get('/?status=500');
like($r, qr!^HTTP/1\.1 500 !, 'status 500 passed');
like($r, qr/^X-Origin: $p\x0d?$/m, 'X-Origin');
like(http_get('/'), qr/\x0d\x0a\x0d\x0aorigin $p ok\n\z/, 'default body');
like(http_get('/?body=hello+world%21'), qr/\x0d\x0a\x0d\x0ahello world!\z/,
	'body');
like(http_get('/?status=503&retry_after=7'), qr/^Retry-After: 7\x0d?$/m,
	'Retry-After');
like(http_get('/?hdr=X-A:1&hdr=Cache-Control:max-age%3D5'),
	qr/^X-A: 1\x0d\n(?s:.*)^Cache-Control: max-age=5\x0d$/m, 'hdr');

my $start = time();
$r = http_get('/?delay=400');
my $elapsed = time() - $start;
ok($r =~ m!^HTTP/1\.1 200 ! && $elapsed >= 0.4 && $elapsed < 3,
	'delay') or diag(sprintf("%.3fs: %s", $elapsed, $r // 'undef'));

# a pause: a request in flight, and one that comes meanwhile, both wait it out

my $s = http_get('/?delay=100', start => 1);
for (1 .. 500) {
	last if CB::Origin::hits($hits, qr/delay=100/);
	select undef, undef, undef, 0.01;
}
$start = time();
my $stopped = CB::Origin::pause($hits, 0.5);
$r = http_get('/?after=1');
ok($stopped >= 2 && http_end($s) =~ m!^HTTP/1\.1 200 ! && $r =~ m!^HTTP/1\.1 200 !
	&& time() - $start >= 0.5, 'pause')
	or diag(sprintf('%d stopped, %.3fs', $stopped, time() - $start));

# upstream errors

like(http_get('/?close=1'), qr!^HTTP/1\.1 502 !, 'close gives 502');
like(http_get('/?garbage=1'), qr!^HTTP/1\.1 502 !, 'garbage gives 502');
like(http_get('/?reset=1'), qr!^HTTP/1\.1 502 !, 'reset gives 502');

# a hanging response does not block other connections

$s = http_get('/?hang=1', start => 1);
$start = time();
like(http_get('/?parallel=1'), qr!^HTTP/1\.1 200 !, 'not blocked by hang');
cmp_ok(time() - $start, '<', 0.9, 'not blocked by hang - fast');
like(http_end($s), qr!^HTTP/1\.1 504 !, 'hang gives 504');

# hits counting

CB::Origin::clear($hits);
is(CB::Origin::hits($hits), 0, 'hits cleared');
http_get("/count?n=$_") for 1 .. 3;
http_get('/other');
ok(CB::Origin::hits($hits, qr!^/count\?n=\d$!) == 3
	&& CB::Origin::hits($hits) == 4, 'hits counted')
	or diag($t->read_file('origin-8081.hits'));

# cache (as root: workers write temp files in the test directory);
# then keepalive to the upstream, and a request body via client_body_temp

http_get('/cached/x?size=100000&hdr=Cache-Control:max-age%3D60');
$r = http_get('/cached/x?size=100000&hdr=Cache-Control:max-age%3D60');
ok($r =~ /^X-Cache: HIT\x0d?$/m && http_content($r) eq "x" x 100000
	&& CB::Origin::hits($hits, qr!^/cached/!) == 1, 'cached');

$r = http(<<EOF);
GET /ka/1 HTTP/1.1
Host: localhost

GET /ka/2 HTTP/1.1
Host: localhost
Connection: close

EOF
like($r, qr/X-Origin-Seq: 1\x0d\n(?s:.*)X-Origin-Seq: 2\x0d\n/,
	'upstream keepalive');

like(http(<<EOF, body => 'b' x 20000), qr/^X-Origin-Body-Length: 20000\x0d?$/m,
POST /post HTTP/1.0
Host: localhost
Content-Length: 20000

EOF
	'request body');

# reload: the library's reload() only sends HUP (in nginx-tests' as in
# ours); CB::Nginx::reload() waits until the new workers serve

my @before = workers($t);

(my $conf2 = $conf) =~ s/GEN/2/;
$t->write_file_expand('nginx.conf', $conf2);
is(reload($t), 1, 'reload: done');

my @after = workers($t);
my %b = map { $_ => 1 } @before;
ok(@before == 2 && @after == 2 && !grep({ $b{$_} } @after),
	'reload: new workers') or diag("before @before, after @after");

my @gen = map { http_get('/generation') =~ /generation (\d)/ ? $1 : 'x' }
	1 .. 6;
is(join('', @gen), '222222', 'reload: new configuration');
like(http_get('/?after=reload'), qr/origin $p ok/, 'reload: proxy works');

# a configuration the master refuses: reload() says so, the workers stay

(my $conf3 = $conf2) =~ s/proxy_read_timeout 1s;/proxy_read_timeout never;/;
$t->write_file_expand('nginx.conf', $conf3);
is(reload($t), 0, 'reload: configuration refused');
is(join(' ', workers($t)), join(' ', @after), 'reload refused: same workers');

# TEST_NGINX_LEAVE

SKIP: {
skip 'not our harness', 1 unless $ours;

my $script = <<'EOS';
use Test::More;
use Test::Nginx;
my $t = Test::Nginx->new();
print "DIR=" . $t->testdir() . "\n";
Test::More::plan(skip_all => "child");
EOS

$t->write_file('leave.pl', $script);
my $cmd = join ' ', $^X, (map { "-I$_" } grep { !ref } @INC),
	$t->testdir() . '/leave.pl';
my ($kept, $removed);

{
	local $ENV{TEST_NGINX_LEAVE} = 1;
	my $out = `$cmd 2>&1`;
	my ($d) = $out =~ /^DIR=(.*)$/m;
	$kept = defined $d && -d $d && $out =~ /left: \Q$d\E/;
	system('rm', '-rf', $d) if defined $d && $d =~ /nginx-test-/;
}
{
	local $ENV{TEST_NGINX_LEAVE};
	delete $ENV{TEST_NGINX_LEAVE};
	my $out = `$cmd 2>&1`;
	my ($d) = $out =~ /^DIR=(.*)$/m;
	$removed = defined $d && !-e $d;
}

ok($kept && $removed, 'TEST_NGINX_LEAVE keeps the directory');
}

# A test file that dies, is killed, or keeps its Test::Nginx object past its
# end (a named sub closing over "my $t") fails and leaves nothing running:
# neither nginx nor the origin, with either library.  Nor does one whose
# nginx is gone before the end (nginx-tests' stop() then dies on the
# missing pid file and skips stop_daemons()).

my $child = <<'EOS';
use warnings;
use strict;
use Test::More;
use Test::Nginx;
use CB::Nginx qw/ conf start workers master /;

my $t = Test::Nginx->new()->plan(1);
$t->write_file_expand('nginx.conf', conf(2, <<'EOF'));
    server {
        listen       127.0.0.1:8080;
        location / {
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }
    }
EOF
start($t, 8081);

# (the second worker may still be starting)
for (1 .. 100) { last if workers($t) == 2; select undef, undef, undef, 0.05; }

print "DIR=", $t->testdir(), "\n";
print "PIDS=", join(' ', master($t), workers($t), @{$t->{_daemons}}), "\n";
like(http_get('/'), qr/origin \d+ ok/, 'proxied');

MODE
EOS

# mode => [ the end of the file, whether the file fails ]

my %modes = (
	die => [ 'die "on purpose\n";', 1 ],
	kill => [ 'kill "KILL", $$;', 1 ],
	keep => [ 'sub errors { $t->read_file("error.log") }', 1 ],
	gone => [ 'kill "QUIT", master($t); select undef, undef, undef, 0.1 '
		. 'while -e $t->testdir() . "/nginx.pid";', 0 ],
);

for my $mode (sort keys %modes) {
	my ($last, $fails) = @{$modes{$mode}};
	(my $script = $child) =~ s/^MODE$/$last/m;
	$t->write_file("$mode.pl", $script);

	# (the child's test directory inside ours: removed with it even when
	# the child's library leaves it)
	my $dir = $t->testdir();
	local $ENV{TMPDIR} = $dir;
	system(join ' ', $^X, (map { "-I$_" } grep { !ref } @INC),
		"$dir/$mode.pl", ">$dir/$mode.out", '2>&1');
	my $rc = $?;

	my $out = $t->read_file("$mode.out");
	my ($d) = $out =~ /^DIR=(.*)$/m;
	my @pids = split ' ', ($out =~ /^PIDS=(.*)$/m)[0] // '';

	my @left;
	my $end = time() + 5;
	while (time() < $end) {
		@left = grep { alive($_) } @pids;
		push @left, masters($d) if defined $d;
		last unless @left;
		sleep 0.1;
	}

	ok((!$fails || $rc != 0) && defined $d && @pids == 5 && !@left,
		"$mode: " . ($fails ? 'the file fails and ' : '')
		. 'nothing is left running')
		or diag("exit $rc, left: @left, pids: @pids\n$out");
}

# a process is signalled only while it is the very one noted: a pid may be another
# process's once the first ends (pids wrap at 32768 here)

{
	my $pid = fork() // die "fork: $!";
	if ($pid == 0) {
		sleep 30;
		POSIX::_exit(0);
	}
	my $noted = [ $pid, started($pid) ];
	is(kill_same(0, $noted, [ $$, 1 ]), 1,
		'kill_same: the noted process, not a pid with another start time');
	kill 'KILL', $pid;
	waitpid($pid, 0);
	is(kill_same('KILL', $noted), 0, 'kill_same: a process that ended is left alone');
}

# stop() and stop_daemons() leave nothing running

my $master = $t->read_file('nginx.pid') =~ /(\d+)/ ? $1 : 0;
my @daemons = @{$t->{_daemons} || []};

$t->stop();
ok($master && !kill(0, $master), 'nginx stopped');

$t->stop_daemons();
ok(@daemons == 2 && !grep({ kill 0, $_ } @daemons),
	'origin and watchdog stopped');

###############################################################################
