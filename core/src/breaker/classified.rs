//! An attempt classified once: the value every consumer of an outcome reads — the request's
//! breaker, its server's breaker, the pool's explanation, the retry budget and the adaptive
//! limit — so that no two of them can judge one attempt differently.

use super::classify::{classify, Attempt, Ending, Verdict};
use super::config::BreakerConfig;

/// An [`Attempt`] and its [`Verdict`] under the upstream's classes (which are its servers'
/// too: `eject::server_config` keeps them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classified {
    /// What the shell saw.
    pub attempt: Attempt,
    /// What it means.
    pub verdict: Verdict,
}

impl Classified {
    /// Classifies `attempt` under `cfg`.
    #[inline]
    pub fn of(attempt: Attempt, cfg: &BreakerConfig) -> Classified {
        Classified {
            attempt,
            verdict: classify(&attempt, cfg),
        }
    }

    /// A response that counts, neither a failure nor slow: what may be recorded without the
    /// zone's lock while a breaker allows it.
    #[inline]
    pub fn is_success(&self) -> bool {
        self.attempt.ending == Ending::Response && !self.verdict.failure && !self.verdict.slow
    }

    /// Why it is bad, as log lines say it (`http_500`, `timeout`, `slow: 912ms`); `None` when
    /// it is not.
    pub fn why_bad(&self) -> Option<String> {
        self.verdict.why_bad(&self.attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::classify::tests::cfg_with;

    fn cfg() -> BreakerConfig {
        cfg_with(&["error", "timeout", "http_500", "http_502"])
    }

    #[test]
    fn a_success_is_a_counted_response_neither_failed_nor_slow() {
        let c = cfg();
        assert!(Classified::of(Attempt::http(200, 10), &c).is_success());
        assert!(Classified::of(Attempt::http(404, 10), &c).is_success());
        assert!(!Classified::of(Attempt::http(500, 10), &c).is_success());
        assert!(!Classified::of(Attempt::http(200, 801), &c).is_success());
        assert!(Classified::of(Attempt::http(200, 800), &c).is_success());
        for e in [
            Ending::Error,
            Ending::Timeout,
            Ending::NoVerdict,
            Ending::Tls,
            Ending::TooBigHeader,
            Ending::BodyRefused,
            Ending::ClientDeadline,
            Ending::NoLive,
        ] {
            assert!(
                !Classified::of(Attempt::ended(e, 1), &c).is_success(),
                "{e:?}"
            );
        }
    }

    #[test]
    fn success_agrees_with_the_closed_paths_test() {
        let c = cfg();
        for status in [200, 204, 301, 404, 429, 500, 501, 502, 503, 504] {
            for ms in [0, 800, 801] {
                let a = Attempt::http(status, ms);
                let fast = ms <= 800 && !crate::breaker::response_fails(&a, &c);
                assert_eq!(Classified::of(a, &c).is_success(), fast, "{status} {ms}");
            }
        }
    }
}
