package CB::Proc;

# The processes of a test, through Linux's /proc: all pids, a process's live children, its
# command line (nginx puts its process title there), whether it still runs, waiting for it
# to exit, and reaping a child of a test, killed if it will not end.  Used by our
# Test::Nginx (stop), by CB::Nginx (workers, reload, watchdog) and by the tests that fork
# clients; elsewhere than Linux the lists are empty.

use warnings;
use strict;

use Exporter qw/ import /;
our @EXPORT_OK = qw/ pids children cmdline alive wait_exit reap started kill_same /;

use POSIX qw/ WNOHANG /;
use Time::HiRes qw/ sleep time /;

sub pids {
	opendir my $dh, '/proc' or return ();
	my @p = grep { /^\d+$/ } readdir $dh;
	closedir $dh;
	return @p;
}

# when a process started (its start time in clock ticks since boot, /proc/PID/stat's 22nd
# field), or undef when it is gone: with the pid, what names one process for good (pids
# wrap at 32768 here)

sub started {
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or return undef;
	my $stat = <$fh> // '';
	$stat =~ s/.*\)\s+//s or return undef;
	my @f = split ' ', $stat;
	# fields from the 3rd (state): the start time is the 22nd
	return $f[19];
}

# sends SIG to each [PID, START] still that very process (its start time unchanged); the
# number signalled

sub kill_same {
	my ($sig, @procs) = @_;
	my @same = map { $_->[0] }
		grep { defined $_->[1] && (started($_->[0]) // -1) eq $_->[1] } @procs;
	return @same ? kill($sig, @same) : 0;
}

# direct children of a process, zombies left out

sub children {
	my ($ppid) = @_;
	my @kids;

	for my $p (pids()) {
		open my $fh, '<', "/proc/$p/stat" or next;
		my $stat = <$fh> // '';
		close $fh;
		next unless $stat =~ /\)\s+(\S+)\s+(\d+)/;
		push @kids, $p if $2 == $ppid && $1 ne 'Z';
	}

	return @kids;
}

# the command line, NULs as spaces, or '' when the process is gone

sub cmdline {
	my ($pid) = @_;

	open my $fh, '<', "/proc/$pid/cmdline" or return '';
	local $/;
	my $c = <$fh> // '';
	$c =~ s/\0+/ /g;
	$c =~ s/\s+\z//;
	return $c;
}

# true while the process exists and is not a zombie; reaps it if it is our child and has
# exited

sub alive {
	my ($pid) = @_;

	my $r = waitpid($pid, WNOHANG);
	return 0 if $r == $pid;
	return 1 if $r == 0;

	return 0 unless kill(0, $pid) || $!{EPERM};

	if (open my $fh, '<', "/proc/$pid/stat") {
		my $stat = <$fh> // '';
		return 0 if $stat =~ /\)\s+Z/;
	}

	return 1;
}

# waits up to TIMEOUT seconds for the process to exit; true if it did

sub wait_exit {
	my ($pid, $timeout) = @_;
	my $end = time() + $timeout;

	while (time() < $end) {
		return 1 unless alive($pid);
		sleep 0.05;
	}

	return !alive($pid);
}

# waits up to TIMEOUT seconds for a child process of ours to exit, then kills it (SIGKILL);
# reaps it either way.  True if it exited by itself

sub reap {
	my ($pid, $timeout) = @_;

	return 1 if wait_exit($pid, $timeout);

	kill 'KILL', $pid;
	waitpid($pid, 0);
	return 0;
}

1;
