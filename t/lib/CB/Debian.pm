package CB::Debian;

# What the files that run Debian's own nginx (/usr/sbin/nginx) share: t/80-debian-nginx.t loads
# the module built for it, t/81-debian-package.t the module as the package installs it.  Both
# run the same configuration and check the same trip.  Like CB::Nginx, this does not load
# Test::Nginx (those files set TEST_NGINX_BINARY first).

use warnings;
use strict;

use IO::Socket::INET;

use CB::Nginx;
use CB::Origin;

# The configuration: LOAD, the main-level lines that load the module (see
# CB::Nginx::env_globals for the rest); an upstream "api" whose breaker opens at 50 % of 4
# requests, and a status location.

sub conf {
	my ($load) = @_;

	my $globals = "$load\n" . CB::Nginx::env_globals();

	return CB::Nginx::conf(2, <<'EOF', globals => $globals);
    circuit_breaker_zone cb:1m;

    upstream api {
        server 127.0.0.1:8081;
        circuit_breaker window=10s min_requests=4 failure_rate=50% open=30s jitter=0%;
    }

    server {
        listen       127.0.0.1:8080;
        server_name  localhost;

        location / {
            proxy_pass http://api;
        }

        location = /status {
            circuit_breaker_status;
        }
    }
EOF
}

# A stream block beside it: an upstream "gone" whose server refuses connections (nothing
# listens on 8090), its breaker opening on 4 of them; the sessions' statuses in stream.log.

sub stream_block {
	return <<'EOF';
stream {
    log_format s '$status';
    access_log %%TESTDIR%%/stream.log s;

    upstream gone {
        server 127.0.0.1:%%PORT_8090%%;
        circuit_breaker min_requests=4 consecutive=20;
    }
    server { listen 127.0.0.1:%%PORT_8089%%; proxy_pass gone; }
}
EOF
}

# Ten sessions to "gone", one after the other; their statuses, as the access log has them.

sub stream_trip {
	my ($t) = @_;
	for (1 .. 10) {
		my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:'
			. Test::Nginx::port(8089)) or next;
		$s->sysread(my $buf, 16);
	}
	return join ' ', split /\n/, $t->read_file('stream.log');
}

# One success, then three failures that reach the origin (4 requests, min_requests, at 75 %
# >= 50 %: the third failure opens the breaker), then a fourth failure.  Returns the success,
# the origin's hits after the three failures, the fourth failure's response, and the origin's
# hits after it.

sub trip {
	my ($hits) = @_;

	my $ok = Test::Nginx::http_get('/ok');
	Test::Nginx::http_get('/fail?status=500') for 1 .. 3;
	my $failed = CB::Origin::hits($hits);

	my $r = Test::Nginx::http_get('/fail?status=500');

	return ($ok, $failed, $r, CB::Origin::hits($hits));
}

1;
