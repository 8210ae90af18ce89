package CB::Browser;

# Debian's chromium, headless, for the dashboard's tests: t/browser/drive.mjs (playwright-core,
# no browser download) takes one JSON command per line and answers one JSON line, so that the
# .t file keeps the story and the assertions and can change the origin between steps.
#
#	my @missing = CB::Browser::missing();	# before the plan: skip, or fail when
#						# TEST_NGINX_BROWSER_REQUIRED is set
#	my $b = CB::Browser->new($t);
#	$b->drive('open', url => $b->url('/circuit_breaker'));
#	my $r = $b->row(upstream => 'up', route => 'default', state => 'open');
#	...
#	$b->keep('open-breaker');	# a screenshot, kept if a test failed since the last keep
#	$b->quit;
#
# keep() writes the page's screenshot into the test directory, and when a test failed since
# the previous keep() copies it to TEST_NGINX_SCREENSHOTS (default build/screenshots/ of the
# checkout), which outlives the test directory, and says where.
#
# Subroutines take the object, never close over a test file's "my $t" (see CB::Nginx).

use warnings;
use strict;

use File::Basename qw/ basename /;
use File::Copy qw/ copy /;
use File::Path qw/ make_path /;
use File::Spec;
use FindBin;
use IO::Select;
use IPC::Open2 qw/ open2 /;
use JSON::PP qw//;
use POSIX qw//;
use Test::More qw//;
use Time::HiRes qw/ time sleep /;

my $chromium = $ENV{TEST_NGINX_CHROMIUM} || '/usr/bin/chromium';
my $driver = "$FindBin::Bin/browser/drive.mjs";
my @drivers;

END {
	# a test that dies must not leave the browser behind
	local $?;
	for my $pid (@drivers) {
		kill 'TERM', $pid if $pid && waitpid($pid, POSIX::WNOHANG()) == 0;
	}
}

sub _node {
	my ($node) = grep { -f && -x _ }
		map { File::Spec->catfile($_, 'node') } File::Spec->path();
	return $node;
}

# what keeps the browser tests from running, if anything

sub missing {
	my @missing;
	push @missing, "no chromium at $chromium" unless -x $chromium;
	push @missing, 'no node in PATH' unless _node();
	push @missing, 'no t/browser/node_modules/playwright-core (run scripts/setup)'
		unless -d "$FindBin::Bin/browser/node_modules/playwright-core";
	return @missing;
}

# plans TESTS on $t, or skips (fails with TEST_NGINX_BROWSER_REQUIRED) when the browser is
# missing

sub plan {
	my ($t, $tests) = @_;
	my @missing = missing();
	if (@missing) {
		my $why = join '; ', @missing;
		if ($ENV{TEST_NGINX_BROWSER_REQUIRED}) {
			Test::More::plan(tests => 1);
			Test::More::fail('the browser test is required '
				. "(TEST_NGINX_BROWSER_REQUIRED): $why");
			exit;
		}
		Test::More::plan(skip_all =>
			"$why (TEST_NGINX_BROWSER_REQUIRED=1 makes this fail)");
	}
	return $t->plan($tests);
}

sub new {
	my ($class, $t) = @_;
	my $dir = $t->testdir();
	my $profile = "$dir/chromium-profile";
	mkdir $profile or die "mkdir $profile: $!\n";
	local $ENV{CHROMIUM} = $chromium;
	my ($from, $to);
	my $pid = open2($from, $to, _node(), $driver, $profile);
	push @drivers, $pid;
	my $keep = $ENV{TEST_NGINX_SCREENSHOTS}
		|| "$FindBin::Bin/../build/screenshots";
	(my $name = basename($0)) =~ s/\.t$//;
	return bless { from => $from, to => $to, pid => $pid,
		sel => IO::Select->new($from), buffer => '', dir => $dir,
		keepdir => $keep, name => $name, failed => _failed(),
		json => JSON::PP->new->canonical }, $class;
}

sub _failed {
	return scalar grep { !$_ } Test::More->builder->summary;
}

sub drive {
	my ($self, $op, %args) = @_;
	my $to = $self->{to};
	my $id = ++$self->{id};
	print $to $self->{json}->encode({ op => $op, id => $id, %args }), "\n";
	my $deadline = time() + 60;
	while (1) {
		while ($self->{buffer} !~ /\n/) {
			my $left = $deadline - time();
			last if $left <= 0 || !$self->{sel}->can_read($left);
			last unless sysread($self->{from}, $self->{buffer}, 65536,
				length $self->{buffer});
		}
		if ($self->{buffer} !~ s/^(.*)\n//) {
			Test::More::diag("$op: no answer within 60 s");
			return { ok => 0, error => "no answer to $op" };
		}
		my $line = $1;
		my $answer = eval { $self->{json}->decode($line) }
			|| { ok => 0, error => "bad answer to $op: $line", id => $id };
		# the late answer to a command given up on
		next if defined $answer->{id} && $answer->{id} != $id;
		Test::More::diag("$op: $answer->{error}") unless $answer->{ok};
		return $answer;
	}
}

# a row once it shows STATE (within a few polls): (upstream, route) for a breaker, (upstream,
# server) for a server

sub row {
	my ($self, %o) = @_;
	my $r = $self->drive('row', timeout_ms => 6000, %o);
	Test::More::diag(Test::More::explain($r)) unless $r->{found};
	return $r;
}

sub url {
	my ($self, $path, $port) = @_;
	return 'http://127.0.0.1:' . Test::Nginx::port($port // 8080) . $path;
}

# a screenshot NAME.png in the test directory; kept (copied) when a test failed since the
# last keep()

sub keep {
	my ($self, $name) = @_;
	my $path = "$self->{dir}/$name.png";
	my $r = $self->drive('screenshot', path => $path);
	my $failed = _failed();
	if ($failed > $self->{failed} && $r->{ok}) {
		make_path($self->{keepdir});
		my $kept = "$self->{keepdir}/$self->{name}-$name.png";
		copy($path, $kept)
			and Test::More::diag("screenshot of the failure: $kept");
	}
	$self->{failed} = $failed;
	return $r->{ok} ? $path : undef;
}

sub quit {
	my ($self) = @_;
	$self->drive('quit');
	close $self->{to};
	for (1 .. 100) {
		if (waitpid($self->{pid}, POSIX::WNOHANG()) == $self->{pid}) {
			@drivers = grep { $_ != $self->{pid} } @drivers;
			return 1;
		}
		sleep(0.1);
	}
	return 0;
}

1;
