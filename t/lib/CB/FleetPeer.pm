package CB::FleetPeer;

# The fleet's message authentication as a test speaks it (HMAC-SHA-256 with Digest::SHA, a
# core module): the header of a pull or a poke, a sealed answer, and checking one; and a
# stand-in peer for CB::Origin::run that answers pulls as told (genuinely, without a MAC,
# under another secret, altered by a byte, or replaying an earlier answer).
#
#	my $h = CB::FleetPeer::header($secret, 'pull', $from, $nonce);
#	my $body = CB::FleetPeer::open_answer($secret, $nonce, $answer);
#	$t->run_daemon(\&CB::Origin::run, port(8092),
#		CB::FleetPeer::serve(secret => $s, id => $id, mode => 'altered',
#			fingerprint => $file, log => $log));

use warnings;
use strict;

use Digest::SHA qw/ hmac_sha256_hex /;
use IO::Select;

sub nonce {
	return join '', map { sprintf '%02x', int rand 256 } 1 .. 16;
}

# a poke's nonce: the sender's sequence SEQ (its first 8 bytes, big-endian), then random

sub poke_nonce {
	my ($seq) = @_;
	return sprintf('%016x', $seq) . join '', map { sprintf '%02x', int rand 256 } 1 .. 8;
}

# the X-Circuit-Breaker-Fleet value of a request of KIND (pull, poke)

sub header {
	my ($secret, $kind, $from, $nonce) = @_;
	my $mac = hmac_sha256_hex("cbfleet $kind $from $nonce", $secret);
	return "$kind $from $nonce $mac";
}

# BODY sealed for the pull with NONCE

sub seal {
	my ($secret, $nonce, $body) = @_;
	return $body . 'auth '
		. hmac_sha256_hex("cbfleet answer $nonce\n$body", $secret) . "\n";
}

# the message inside ANSWER when its MAC verifies for NONCE, else undef

sub open_answer {
	my ($secret, $nonce, $answer) = @_;
	return undef unless defined $answer && length $answer >= 70;
	my $body = substr($answer, 0, -70);
	return $answer eq seal($secret, $nonce, $body) ? $body : undef;
}

# A connection handler for CB::Origin::run: one request, answered as MODE says with a
# message from ID that reports breaker u/default (its fingerprint read from the file
# FINGERPRINT at each request) open.  Each request's X-Circuit-Breaker-Fleet value is
# appended to LOG.
#
#	good      sealed with SECRET and the puller's nonce
#	nomac     the message alone
#	wrongkey  sealed under another secret
#	altered   sealed, then one byte of the message changed
#	replay    the first answer sealed, then that same answer to every later pull

sub serve {
	my (%o) = @_;
	return sub {
		my ($s) = @_;
		my $req = '';
		my $sel = IO::Select->new($s);
		while ($req !~ /\r\n\r\n/ && $sel->can_read(3)) {
			my $n = sysread($s, $req, 4096, length $req);
			last unless $n;
		}
		my ($auth) = $req =~ /^X-Circuit-Breaker-Fleet: ([^\r\n]*)/mi;
		if (open my $fh, '>>', $o{log}) {
			print $fh ($auth // '-'), "\n";
			close $fh;
		}
		my (undef, undef, $nonce) = split / /, $auth // '';
		my $fp = '';
		if (open my $fh, '<', $o{fingerprint}) {
			$fp = <$fh> // '';
			chomp $fp;
		}
		if ($fp eq '') {
			print $s "HTTP/1.1 503 Not Yet\r\nContent-Length: 0\r\n"
				. "Connection: close\r\n\r\n";
			close $s;
			return;
		}
		my $body = "cbfleet 1 $o{id} 1 0\n"
			. "$o{id} u default $fp open 0 1000 20 20 0 0 - p\n";
		my $mode = $o{mode};
		my $answer;
		if ($mode eq 'nomac') {
			$answer = $body;
		} elsif ($mode eq 'wrongkey') {
			$answer = seal('another-secret-0123456789abcdef', $nonce // '', $body);
		} elsif ($mode eq 'altered') {
			($answer = seal($o{secret}, $nonce // '', $body))
				=~ s/ open 0 1000 / open 0 1001 /;
		} elsif ($mode eq 'replay') {
			my $kept = "$o{log}.kept";
			if (open my $fh, '<', $kept) {
				local $/;
				$answer = <$fh>;
			} else {
				$answer = seal($o{secret}, $nonce // '', $body);
				open my $out, '>', $kept or die;
				print $out $answer;
				close $out;
			}
		} else {
			$answer = seal($o{secret}, $nonce // '', $body);
		}
		print $s "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
			. 'Content-Length: ' . length($answer) . "\r\n"
			. "Connection: close\r\n\r\n$answer";
		close $s;
	};
}

1;
