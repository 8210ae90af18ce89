//! What the pool explains: a bad outcome that ejection fixes must not open the upstream's
//! breaker.
//!
//! The upstream's breaker judges what clients got; its servers' breakers judge each server.
//! When one server of a pool goes bad, both see its failures, and whichever crosses first
//! decides: an upstream that opens on them answers `503` to everything while the good
//! servers idle. So a bad outcome (a failure, or a slow call) whose attempt went to server
//! `s` is *explained* — left out of the upstream's window — when ejection takes care of `s`:
//!
//! - `s` is out of the pool (ejected, or probing), or
//! - `s` is failing (its own window reaches its rate, `min_requests` reached or not: its
//!   breaker ejects it once it has them) and the servers out or failing, `s` among them, are
//!   no more than `max_ejected`: ejecting them all is allowed.
//!
//! Past `max_ejected` the failures are spread wider than ejection may go, and they count: the
//! upstream opens when the pool as a whole fails. An outcome on no server — nginx found no
//! live one ("no live upstreams") — is never explained.
//!
//! The probe of an open upstream is judged the same way, per server: a probe that fails on a
//! server ejection may take out ejects that server at once ([`Explained::Eject`]) and says
//! nothing of the upstream, whose next probe goes to another server; so one bad server of a
//! pool never keeps the upstream open.

use crate::breaker::{Breaker, BreakerConfig};

/// One server's place in the pool, as its breaker sees it now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Standing {
    /// Out of the pool: ejected or probing (by its window, or by the operator).
    pub out: bool,
    /// In the pool, with failures (or slow calls) at its own rate in its window: its breaker
    /// ejects it once it has `min_requests`.
    pub failing: bool,
    /// In the pool, with failures (or slow calls) at its own rate or the upstream's,
    /// whichever is lower: it takes part in the pool's failure.
    pub bad: bool,
}

impl Standing {
    /// The standing of the server whose breaker is `b`, at `now_ms`, in a pool whose
    /// upstream's breaker has `upstream`'s rates.
    pub fn of(b: &mut Breaker<'_>, now_ms: u64, upstream: &BreakerConfig) -> Standing {
        if super::is_out(b.state()) {
            return Standing {
                out: true,
                ..Standing::default()
            };
        }
        let own = *b.config();
        let failing = b.reaches(now_ms, own.failure_rate, own.slow_rate);
        let bad = failing
            || b.reaches(
                now_ms,
                own.failure_rate.min(upstream.failure_rate),
                own.slow_rate.min(upstream.slow_rate),
            );
        Standing {
            out: false,
            failing,
            bad,
        }
    }

    fn counts(&self) -> bool {
        self.out || self.bad
    }
}

/// How the pool takes a bad outcome of server `s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Explained {
    /// Not explained: it counts on the upstream's breaker.
    No,
    /// Explained: `s` is out, or its breaker ejects it.
    Yes,
    /// Explained once `s` is ejected now: the probe of the upstream's open breaker failed on
    /// it (see [`explain`]).
    Eject,
}

/// How a bad outcome of server `server` of `pool` is taken, with at most `max` servers out
/// at once; `probe`: it was the upstream's probe. A probe that fails on a server that may go
/// ejects it, failing or not, whatever the windows of the servers still in say: while the
/// upstream is open, probes are all the evidence there is. `server` beyond the pool (no
/// server) is never explained.
pub fn explain(pool: &[Standing], server: usize, max: u32, probe: bool) -> Explained {
    let Some(s) = pool.get(server) else {
        return Explained::No;
    };
    if s.out {
        return Explained::Yes;
    }
    if !(s.failing || probe) {
        return Explained::No;
    }
    // While the upstream is open its servers take no traffic, and their windows hold what
    // they did before: only the servers out count against a probe's server.
    let others = pool
        .iter()
        .enumerate()
        .filter(|&(i, t)| i != server && (t.out || (t.bad && !probe)))
        .count();
    if others >= max as usize {
        return Explained::No;
    }
    if probe {
        Explained::Eject
    } else {
        Explained::Yes
    }
}

/// Whether the upstream's breaker may open now: not while its pool's trouble is what
/// ejection fixes — the servers out or bad no more than `max`, and at least one good server
/// left. Failures counted before their server's window showed it (a healthy history
/// dilutes a server's rate as much as the upstream's) could otherwise still open it once
/// that history has left both windows.
pub fn may_open(pool: &[Standing], max: u32) -> bool {
    let bad = pool.iter().filter(|s| s.counts()).count();
    bad > max as usize || bad >= pool.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    const IN: Standing = Standing {
        out: false,
        failing: false,
        bad: false,
    };
    const FAILING: Standing = Standing {
        out: false,
        failing: true,
        bad: true,
    };
    const BAD: Standing = Standing {
        out: false,
        failing: false,
        bad: true,
    };
    const OUT: Standing = Standing {
        out: true,
        failing: false,
        bad: false,
    };

    #[test]
    fn one_bad_server_of_two_is_explained() {
        assert_eq!(explain(&[IN, FAILING], 1, 1, false), Explained::Yes);
        assert_eq!(explain(&[IN, OUT], 1, 1, false), Explained::Yes);
        assert_eq!(
            explain(&[IN, IN], 1, 1, false),
            Explained::No,
            "a server whose window is still healthy: the failure counts"
        );
    }

    #[test]
    fn failures_spread_past_the_cap_count() {
        assert_eq!(explain(&[FAILING, FAILING], 1, 1, false), Explained::No);
        assert_eq!(explain(&[OUT, FAILING], 1, 1, false), Explained::No);
        assert_eq!(
            explain(&[OUT, FAILING], 0, 1, false),
            Explained::Yes,
            "a server already out explains its own failures"
        );
        let four = [FAILING, FAILING, IN, IN];
        assert_eq!(explain(&four, 1, 2, false), Explained::Yes);
        let three_bad = [FAILING, FAILING, FAILING, IN];
        assert_eq!(explain(&three_bad, 1, 2, false), Explained::No);
    }

    #[test]
    fn a_failed_probe_ejects_a_server_that_may_go() {
        assert_eq!(explain(&[IN, IN], 0, 1, true), Explained::Eject);
        assert_eq!(explain(&[IN, FAILING], 1, 1, true), Explained::Eject);
        assert_eq!(
            explain(&[FAILING, FAILING], 1, 1, true),
            Explained::Eject,
            "the windows of an open upstream's servers are old news"
        );
        assert_eq!(
            explain(&[OUT, IN], 1, 1, true),
            Explained::No,
            "the cap is reached: the probe's failure is the upstream's"
        );
        assert_eq!(explain(&[OUT, IN], 0, 1, true), Explained::Yes);
    }

    #[test]
    fn a_server_bad_by_the_upstream_rate_only_is_not_about_to_go() {
        assert_eq!(explain(&[IN, BAD], 1, 1, false), Explained::No);
        assert_eq!(
            explain(&[BAD, FAILING], 1, 1, false),
            Explained::No,
            "the other one takes part in the pool's failure"
        );
    }

    #[test]
    fn the_upstream_opens_past_what_ejection_fixes() {
        assert!(!may_open(&[IN, FAILING], 1));
        assert!(!may_open(&[IN, OUT], 1));
        assert!(
            !may_open(&[IN, IN], 1),
            "a healthy pool: no server explains the window"
        );
        assert!(may_open(&[FAILING, BAD], 1));
        assert!(may_open(&[OUT, FAILING], 1));
        assert!(!may_open(&[OUT, FAILING, IN, IN], 2));
        assert!(may_open(&[OUT, FAILING, BAD, IN], 2));
        assert!(
            may_open(&[OUT, OUT], 2),
            "every server out (max_ejected=100%)"
        );
        assert!(may_open(&[], 0));
    }

    #[test]
    fn no_server_is_never_explained() {
        assert_eq!(explain(&[OUT, OUT], 2, 2, false), Explained::No);
        assert_eq!(explain(&[], 0, 0, true), Explained::No);
        assert_eq!(
            explain(&[IN], 0, 0, true),
            Explained::No,
            "a single server is never ejected"
        );
    }
}
