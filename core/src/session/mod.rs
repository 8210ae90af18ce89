//! What a stream session (TCP or UDP, through nginx's `stream {}` proxy) says of its upstream.
//! The shell reports what nginx saw; this says which [`Attempt`] it is, if any, so that a
//! session enters its breaker's window as an HTTP request does.
//!
//! A session is judged once, by the first of:
//! - **the upstream's first byte**: an answer, as long as nginx took to connect and get it
//!   (slow above `slow`). What the session does afterwards — hours of traffic, an idle
//!   timeout — says nothing more of the server;
//! - **the first-byte bound** (`first_byte`) running out after the client's first bytes
//!   reached the upstream: a server that accepts and never answers (a full connection pool, a
//!   lock, a stopped process: the kernel still accepts);
//! - **the session's end** without either: nginx's `502` (no server could be connected to, or
//!   a UDP server sent fewer responses than expected).
//!
//! Silence is the one signal a client can shape (an unfinished command, a blocking one), so
//! it counts only when the upstream answered no one else meanwhile — a hung server answers
//! nobody ([`silence_counts`]) — and never against the probe; a `502` for which no server was
//! even tried (every one busy at `max_conns`, which idle clients can fill) says nothing.
//!
//! What a client can decide is never the server's failure: a client that connects and sends
//! nothing, that sends and closes at once, or that leaves before the bound leaves no verdict;
//! nor does a server that closes without a word (PostgreSQL does so on a malformed startup
//! packet, any server on its idle timeout: a client could choose it); nor a session nginx
//! itself refused (`500`, `503`, `403`).

use crate::breaker::classify::{Attempt, Ending};
use crate::breaker::BreakerConfig;

mod lanes;
mod table;
mod wheel;
mod word;

pub use lanes::Lanes;
pub use table::{Expired, Held, SessionId, Table};
pub use wheel::{Left, Silence, Waited, Wheel};
pub use word::{Plain, Refusal, Said, Word, MAX_UPSTREAMS};

/// The session's status when nginx could reach no server, or a UDP server did not answer.
pub const BAD_GATEWAY: u16 = 502;

/// How a session that was not judged earlier ended, as nginx left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    /// The session's status (`$status`: `200`, `502`, ...).
    pub status: u16,
    /// nginx tried a server at all (a connect was made or attempted).
    pub tried: bool,
    /// nginx was connected to a server when it gave up (a UDP "connection" is made at once).
    pub connected: bool,
    /// The client's bytes were passed on to that server.
    pub client_sent: bool,
    /// Milliseconds since nginx began connecting.
    pub ms: u64,
}

/// The server's first byte, `ms` after nginx began connecting: an answer.
pub fn answered(ms: u64) -> Attempt {
    Attempt::ended(Ending::Response, ms)
}

/// Whether a session's attempt is a plain success under `cfg` — what
/// [`crate::breaker::Classified::is_success`] says of it, without classifying it: the
/// common outcome (a prompt answer) costs a comparison. Of any other attempt (an HTTP one),
/// true only when it is a success too.
#[inline]
pub fn succeeds(a: &Attempt, cfg: &BreakerConfig) -> bool {
    a.ending == Ending::Response
        && a.status < 400
        && a.grpc_status.is_none()
        && (cfg.slow_ms == 0 || a.response_ms <= u64::from(cfg.slow_ms))
}

/// Whether a session's silence since the client's last bytes (`sent_ms`) is the server's:
/// only if the upstream answered no session since (`answered_ms`, its last answer in any
/// worker). A server that answers anyone is not hung: the client made its own session wait.
/// An answer in the same millisecond is taken as since: nginx's clock moves once per turn
/// of its event loop, and a client's datagram and another's answer often share one.
#[inline]
pub fn silence_counts(answered_ms: u64, sent_ms: u64) -> bool {
    answered_ms < sent_ms
}

/// The first-byte bound ran out, `ms` after nginx began connecting, with the client's bytes
/// sent and not a byte back.
pub fn silent(ms: u64) -> Attempt {
    Attempt::ended(Ending::Timeout, ms)
}

/// A datagram the server's host refused (nothing on the server's port), `ms` after the
/// client's: an error, as a refused connect is, counted as silence is (only while the
/// upstream answered nobody since: [`silence_counts`]).
pub fn refused(ms: u64) -> Attempt {
    Attempt::ended(Ending::Error, ms)
}

/// A session that ended before it was judged: its failure, or `None` when it says nothing of
/// the server.
pub fn ended(e: &Ended) -> Option<Attempt> {
    match e.status {
        _ if !e.tried => None,
        // A UDP server that sent fewer responses than expected, or a connection to a server
        // that failed after the client's bytes: nothing came back in time.
        BAD_GATEWAY if e.connected && e.client_sent => Some(Attempt::ended(Ending::Timeout, e.ms)),
        // No server could be connected to (refused, reset, connect timeout, every try).
        BAD_GATEWAY => Some(Attempt::ended(Ending::Error, e.ms)),
        _ => None,
    }
}

/// What a stream access-log line says of a session (`cb-replay`): nginx's own record, not what
/// the module saw, so that a replay judges it as the module would have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Logged {
    /// `$protocol` is `UDP`.
    pub udp: bool,
    /// `$status`.
    pub status: u16,
    /// nginx tried a server (`$upstream_addr` names one, not the upstream itself).
    pub tried: bool,
    /// The last try's `$upstream_connect_time`: `None` when it never connected.
    pub connect_ms: Option<u64>,
    /// The last try's `$upstream_first_byte_time`, since that try began: `None` when none came.
    pub first_byte_ms: Option<u64>,
    /// The last try's `$upstream_bytes_sent` is not 0: the client's bytes went up.
    pub client_sent: bool,
    /// The last try's `$upstream_session_time`: from that try's start (its connect) to its end,
    /// the clock of `connect_ms` and `first_byte_ms`; `None` when nginx logged none. Not
    /// `$session_time`, which counts from the session's start: earlier tries, `ssl_preread`,
    /// a TLS handshake and a client's wait before it all lie between the two.
    pub try_ms: Option<u64>,
}

/// How the module would have judged a [`Logged`] session; instants in milliseconds since the
/// last try's start (its connect), as nginx times that try.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judged {
    /// The server's first byte, at `at_ms`.
    Answered { attempt: Attempt, at_ms: u64 },
    /// The first-byte bound ran out at `at_ms`, the client's bytes sent at `sent_ms`: a
    /// failure only if the upstream answered no session between the two ([`silence_counts`]).
    Silent {
        attempt: Attempt,
        sent_ms: u64,
        at_ms: u64,
    },
    /// The session's end said this ([`ended`]).
    Ended(Attempt),
    /// Nothing of the server.
    Nothing,
}

/// Judges a logged session as the module judges a live one, with the breaker's `first_byte`
/// (0: off). The client's bytes are taken to go up at the connect, the earliest they can: a
/// client's think time before it speaks is not in the log.
pub fn logged(l: &Logged, first_byte_ms: u32) -> Judged {
    if let (false, true, Some(c), 1..) = (l.udp, l.client_sent, l.connect_ms, first_byte_ms) {
        // The bound runs first when the first byte, or the end, comes after it: all times of
        // the last try, from its start. Without that try's own length, the session's says
        // nothing (it holds earlier tries and waits before the connect): no silence.
        let due = c.saturating_add(u64::from(first_byte_ms));
        let past = match l.first_byte_ms {
            Some(fb) => fb > due,
            None => l.try_ms.is_some_and(|t| t >= due),
        };
        if past {
            return Judged::Silent {
                attempt: silent(u64::from(first_byte_ms)),
                sent_ms: c,
                at_ms: due,
            };
        }
    }
    if let Some(fb) = l.first_byte_ms {
        return Judged::Answered {
            attempt: answered(fb),
            at_ms: fb,
        };
    }
    let e = Ended {
        status: l.status,
        tried: l.tried,
        connected: l.connect_ms.is_some(),
        client_sent: l.client_sent,
        // The try that failed, as the other times; 0 when its length was not logged.
        ms: l.try_ms.unwrap_or(0),
    };
    match ended(&e) {
        // Nothing came back after the client's bytes (a UDP server's missing responses, a
        // connection that failed after them): silence, as live, from the connect to the
        // try's end (the whole session's, when the try's length was not logged).
        Some(attempt) if attempt.ending == Ending::Timeout => Judged::Silent {
            attempt,
            sent_ms: l.connect_ms.unwrap_or(0),
            at_ms: l.try_ms.unwrap_or(u64::MAX),
        },
        Some(attempt) => Judged::Ended(attempt),
        None => Judged::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::classify::classify;
    use crate::breaker::Classified;

    fn end(status: u16, connected: bool, client_sent: bool) -> Ended {
        Ended {
            status,
            tried: true,
            connected,
            client_sent,
            ms: 7,
        }
    }

    #[test]
    fn an_answer_counts_and_is_slow_above_slow() {
        let cfg = BreakerConfig {
            slow_ms: 100,
            ..BreakerConfig::default()
        };
        let v = classify(&answered(100), &cfg);
        assert!(v.counted && !v.failure && !v.slow);
        let v = classify(&answered(101), &cfg);
        assert!(v.counted && !v.failure && v.slow);
    }

    #[test]
    fn succeeds_agrees_with_the_classification() {
        for slow_ms in [0, 100] {
            let cfg = BreakerConfig {
                slow_ms,
                ..BreakerConfig::default()
            };
            for ms in [0, 99, 100, 101, 5000] {
                let mut sessions = vec![answered(ms), silent(ms)];
                for e in [502, 200, 403].map(|st| end(st, true, true)) {
                    sessions.extend(ended(&e));
                }
                for a in sessions {
                    let c = Classified::of(a, &cfg);
                    assert_eq!(succeeds(&a, &cfg), c.is_success(), "{a:?}");
                }
                let mut http: Vec<_> = [200, 404, 429, 500, 502]
                    .map(|s| Attempt::http(s, ms))
                    .into();
                http.push(Attempt::grpc(14, ms));
                for a in http {
                    let c = Classified::of(a, &cfg);
                    assert!(!succeeds(&a, &cfg) || c.is_success(), "{a:?}");
                }
            }
        }
    }

    #[test]
    fn a_server_that_answered_anyone_since_is_not_hung() {
        assert!(silence_counts(0, 1_000), "never answered");
        assert!(
            silence_counts(999, 1_000),
            "answered before the client's last bytes"
        );
        assert!(
            !silence_counts(1_000, 1_000),
            "in the same millisecond: not known to be before them"
        );
        assert!(
            !silence_counts(1_001, 1_000),
            "answered another session since"
        );
    }

    #[test]
    fn silence_and_unreachable_servers_fail_by_default() {
        let cfg = BreakerConfig::default();
        for a in [
            silent(10_000),
            ended(&end(502, false, false)).unwrap(),
            ended(&end(502, true, false)).unwrap(),
            ended(&end(502, true, true)).unwrap(),
        ] {
            let v = classify(&a, &cfg);
            assert!(v.counted && v.failure && v.gateway, "{a:?}");
        }
    }

    #[test]
    fn what_the_client_alone_decides_says_nothing() {
        // Connected and idle, then closed by either side or an idle timeout; sent and closed
        // at once, or gave up before the bound (the server still had time); a server that
        // closed without a word.
        assert_eq!(ended(&end(200, true, false)), None);
        assert_eq!(ended(&end(200, true, true)), None);
        // No server tried: every one busy (max_conns).
        let busy = Ended {
            tried: false,
            ..end(502, false, false)
        };
        assert_eq!(ended(&busy), None);
        // Refused or failed by nginx itself.
        for status in [400, 403, 500, 503] {
            for c in [false, true] {
                assert_eq!(ended(&end(status, c, c)), None, "{status}");
            }
        }
    }
    fn log(status: u16, connect: Option<u64>, fb: Option<u64>, sent: bool, ms: u64) -> Logged {
        Logged {
            udp: false,
            status,
            tried: true,
            connect_ms: connect,
            first_byte_ms: fb,
            client_sent: sent,
            try_ms: Some(ms),
        }
    }

    #[test]
    fn a_logged_first_byte_is_an_answer_from_the_connect() {
        let j = logged(&log(200, Some(2), Some(40), true, 60_000), 3_000);
        assert_eq!(
            j,
            Judged::Answered {
                attempt: answered(40),
                at_ms: 40
            }
        );
        // A server that speaks first answers whenever it does; so does one with no bound.
        for (sent, fb_bound) in [(false, 3_000), (true, 0)] {
            let j = logged(&log(200, Some(2), Some(9_000), sent, 60_000), fb_bound);
            assert!(matches!(j, Judged::Answered { at_ms: 9_000, .. }), "{j:?}");
        }
        // Exactly at the bound, still in time.
        let j = logged(&log(200, Some(2), Some(3_002), true, 60_000), 3_000);
        assert!(matches!(j, Judged::Answered { .. }), "{j:?}");
    }

    #[test]
    fn logged_silence_past_the_bound_is_a_candidate() {
        // A hung server: the client's bytes up, nothing back, the session held past the bound.
        let want = Judged::Silent {
            attempt: silent(3_000),
            sent_ms: 5,
            at_ms: 3_005,
        };
        assert_eq!(logged(&log(200, Some(5), None, true, 3_005), 3_000), want);
        assert_eq!(logged(&log(200, Some(5), None, true, 600_000), 3_000), want);
        // A first byte after the bound: the module judged the silence first.
        assert_eq!(
            logged(&log(200, Some(5), Some(3_006), true, 9_000), 3_000),
            want
        );
        // Then a 502 (the server reset it) changes nothing: judged already.
        assert_eq!(logged(&log(502, Some(5), None, true, 3_100), 3_000), want);
    }

    #[test]
    fn logged_sessions_that_say_nothing_of_the_server() {
        // The client left (or the server closed without a word) before the bound.
        assert_eq!(
            logged(&log(200, Some(5), None, true, 3_004), 3_000),
            Judged::Nothing
        );
        // A client that never spoke, however long it stayed (an idle pooled connection).
        assert_eq!(
            logged(&log(200, Some(5), None, false, 600_000), 3_000),
            Judged::Nothing
        );
        // first_byte=off: silence is never a failure.
        assert_eq!(
            logged(&log(200, Some(5), None, true, 600_000), 0),
            Judged::Nothing
        );
        // nginx's own refusals and errors.
        for status in [400, 403, 500, 503] {
            assert_eq!(
                logged(&log(status, None, None, false, 0), 3_000),
                Judged::Nothing
            );
        }
        // A 502 with no server tried (every one at max_conns).
        let busy = Logged {
            tried: false,
            ..log(502, None, None, false, 1)
        };
        assert_eq!(logged(&busy, 3_000), Judged::Nothing);
    }

    #[test]
    fn logged_silence_is_timed_by_the_last_try_alone() {
        // A first try that hit a 5 s connect timeout, then a second whose client left after
        // 100 ms; a client that waited 4 s before its ClientHello (ssl_preread, `listen …
        // ssl`). Long sessions, short last tries: the live module judged nothing.
        for try_ms in [101, 99] {
            assert_eq!(
                logged(&log(200, Some(1), None, true, try_ms), 3_000),
                Judged::Nothing
            );
        }
        // No length of the last try logged: its silence cannot be told, nor inferred.
        let unknown = Logged {
            try_ms: None,
            ..log(200, Some(1), None, true, 0)
        };
        assert_eq!(logged(&unknown, 3_000), Judged::Nothing);
        // A first byte past the bound still says so without it: one try's times.
        let late = Logged {
            try_ms: None,
            ..log(200, Some(1), Some(3_002), true, 0)
        };
        assert!(matches!(logged(&late, 3_000), Judged::Silent { .. }));
    }

    #[test]
    fn logged_attacks_of_the_lever_table_are_candidates_at_most() {
        // An unfinished command held past first_byte: a candidate, which the replay counts
        // only if nobody was answered meanwhile (silence_counts, as live).
        let j = logged(&log(200, Some(1), None, true, 20_000), 3_000);
        let Judged::Silent { sent_ms, at_ms, .. } = j else {
            panic!("{j:?}")
        };
        assert!(!silence_counts(sent_ms + 1, sent_ms) && at_ms > sent_ms);
        // An idle subscription: answered at once, then held for minutes past proxy_timeout.
        let j = logged(&log(200, Some(1), Some(3), true, 600_000), 3_000);
        assert!(matches!(j, Judged::Answered { at_ms: 3, .. }), "{j:?}");
    }

    #[test]
    fn logged_502s_and_udp() {
        // Connect refused on every try.
        assert_eq!(
            logged(&log(502, None, None, false, 1), 3_000),
            Judged::Ended(Attempt::ended(Ending::Error, 1))
        );
        // Connected, the client's bytes up, then the server failed before the bound: silence
        // from the connect, counted only if nobody was answered meanwhile, as live.
        assert_eq!(
            logged(&log(502, Some(1), None, true, 100), 3_000),
            Judged::Silent {
                attempt: Attempt::ended(Ending::Timeout, 100),
                sent_ms: 1,
                at_ms: 100,
            }
        );
        // UDP: never a candidate of first_byte's, however long; its 502 is silence, from the
        // connect to the session's end.
        let udp = |status, fb| Logged {
            udp: true,
            ..log(status, Some(0), fb, true, 60_000)
        };
        assert_eq!(logged(&udp(200, None), 3_000), Judged::Nothing);
        assert_eq!(
            logged(&udp(502, None), 3_000),
            Judged::Silent {
                attempt: Attempt::ended(Ending::Timeout, 60_000),
                sent_ms: 0,
                at_ms: 60_000,
            }
        );
        assert!(matches!(
            logged(&udp(200, Some(10_000)), 3_000),
            Judged::Answered { .. }
        ));
    }
}
