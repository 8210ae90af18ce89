package CB::Status;

# The status location's JSON as the t/*.t files read it: fetched with Test::Nginx's
# http_get(), its breakers (all, or those whose fields match), the first of them, and
# polling until a breaker reaches a state.  A missing or broken answer reads as no
# breakers ({} for one), so that a test's own assertion reports it.
#
#	my $b = breaker_at('/status?upstream=u', route => 'default');
#	ok(wait_state('/status?upstream=u', 'open', 3), 'opened');
#
# This module does not load Test::Nginx (see CB::Nginx); it calls Test::Nginx::http_get()
# at run time.

use warnings;
use strict;

use Exporter qw/ import /;
our @EXPORT_OK = qw/ status_json breakers breaker_at wait_state /;

use Time::HiRes qw/ sleep time /;

use CB::Response qw/ json /;

###############################################################################

# the JSON object at URI (a status location and its query), or {} without one

sub status_json {
	my ($uri) = @_;
	my $j = json(Test::Nginx::http_get($uri));
	return ref $j eq 'HASH' ? $j : {};
}

# the breakers of the status JSON at URI whose fields equal those in WHERE (e.g.
# upstream => 'u', route => 'default'), in the order the JSON lists them

sub breakers {
	my ($uri, %where) = @_;
	my $list = status_json($uri)->{breakers};

	return grep {
		my $b = $_;
		!grep { ($b->{$_} // '') ne $where{$_} } keys %where
	} ref $list eq 'ARRAY' ? @$list : ();
}

# the first of those breakers, or {}

sub breaker_at {
	my ($uri, %where) = @_;
	my ($b) = breakers($uri, %where);
	return $b // {};
}

# polls breaker_at(URI) every 10 ms until its state is STATE: that breaker, or undef
# after TIMEOUT seconds

sub wait_state {
	my ($uri, $state, $timeout) = @_;
	my $end = time() + $timeout;

	while (time() < $end) {
		my $b = breaker_at($uri);
		return $b if ($b->{state} // '') eq $state;
		sleep 0.01;
	}

	return;
}

###############################################################################

1;
