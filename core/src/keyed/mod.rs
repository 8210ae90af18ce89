//! Breakers keyed by a value each request carries (`$host`, the variable a `proxy_pass` is
//! built from, a tenant's header): one breaker per value, created on first use, for origins
//! no `upstream {}` block names.
//!
//! Clients choose the values, so the table that holds them is built to be flooded:
//!
//! - **Compact until there is something to judge.** A key is a [`Tally`] of 56 bytes — its
//!   hash, when it was last used and its successes over the window. A window holding only
//!   successes can trip nothing, so nothing more is needed until the key's first failure or
//!   slow call: then the key is *promoted*
//!   to a full breaker (the same breaker an upstream has: classes, rates, slow calls, probes,
//!   cooldowns, ramp, dry run), which takes over the successes counted so far
//!   ([`Tally::handover`]). A promoted key returns to its tally alone once its breaker is closed
//!   and has been idle a whole window.
//! - **Fixed size, bounded work.** The tallies are one array laid out when the zone is made,
//!   in buckets; a key lives in one of the two buckets its hash names ([`NEIGHBOURHOOD`]
//!   tallies), so finding or placing a key reads at most that many, however many keys are
//!   live, and a table keeps nearly every key until it is some 80 % full.
//! - **No lock for a compact key.** Beside each tally a [`mark`] says which key lives there
//!   and whether it was promoted, and counts its successes of one second: a request whose key
//!   is compact passes on the mark, and its success is counted in it, without the zone's
//!   lock; the lock is taken for the first success of a second, a failure, a promoted key,
//!   and whenever the tally is read or changed — the mark's count taken in first.
//! - **A secret hash.** Keys are hashed with SipHash-1-3 under the zone's secret
//!   ([`KeyHasher`]): a client cannot choose keys that crowd one neighbourhood.
//! - **Eviction that cannot be steered.** A new key takes an empty tally of its
//!   neighbourhood, else the least recently used compact one (by the second; within one,
//!   the one its mark counted fewer successes for), else the least recently used
//!   promoted one whose breaker is closed; never one whose breaker is open, half-open,
//!   forced or probing ([`Table::place`]). A flood of new keys therefore replaces idle
//!   healthy keys first and can never close an open breaker by pushing it out; when its two
//!   buckets hold nothing that may go, the new key is not judged (its requests pass,
//!   as they do for any breaker a full zone cannot hold).
//! - **Bounded keys.** A key longer than [`MAX_KEY`] bytes is not judged at all.

mod hash;
pub mod mark;
pub mod name;
mod table;
mod tally;

pub use hash::KeyHasher;
pub use table::{Placed, Protection, Table, BUCKET, NEIGHBOURHOOD};
pub use tally::{Tally, RING};

use crate::breaker::{BreakerConfig, Classified};
use crate::snapshot::State;

/// The longest key judged, in bytes: longer ones pass unchecked (a header a client sends,
/// a host name; DNS names are at most 253 bytes).
pub const MAX_KEY: usize = 256;

/// What a compact key does with an attempt's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// A success: counted in the tally's window.
    Success,
    /// A failure or a slow call (anything counted that is not a success): the key is
    /// promoted to a full breaker, which records it after absorbing the tally's successes.
    Promote,
    /// No verdict on the origin (the client went away, its own deadline, a TLS failure):
    /// counted nowhere.
    Nothing,
}

/// What a compact key does with `c`.
pub fn take(c: &Classified) -> Take {
    if c.verdict.tls || !c.verdict.counted {
        Take::Nothing
    } else if c.is_success() {
        Take::Success
    } else {
        Take::Promote
    }
}

/// What a promoted key's breaker has judged, for [`may_go`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Judged {
    /// It opened since it was made: it has an episode.
    pub opened: bool,
    /// Its window holds a failure or a slow call.
    pub failing: bool,
}

/// Whether the breaker a key was promoted to may go (the key compact again, or its place given
/// to another key): closed, not forced, and nothing it judged is still to count. A breaker that
/// never opened has no episode: it may go once its window holds no failure nor slow call (a
/// key promoted by one failure keeps its room only while that failure counts, so a flood of
/// keys failing once each holds the room for promotions a window, not a `max_open`). One that
/// opened waits until nothing of its last episode is still to come — a window that judged it,
/// a recovery ramp, or the longer cooldown a breaker that opens again soon after closing gets
/// (`max_open`).
pub fn may_go(
    state: State,
    forced: bool,
    closed_for_ms: u64,
    cfg: &BreakerConfig,
    judged: Judged,
) -> bool {
    if state != State::Closed || forced {
        return false;
    }
    if !judged.opened {
        return !judged.failing;
    }
    let settled = (u64::from(cfg.window_s) * 1000)
        .max(u64::from(cfg.ramp_ms))
        .max(u64::from(cfg.max_open_ms));
    closed_for_ms >= settled
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPISODE: Judged = Judged {
        opened: true,
        failing: false,
    };

    #[test]
    fn a_breaker_that_opened_may_go_once_closed_long_enough() {
        let cfg = BreakerConfig {
            window_s: 10,
            ramp_ms: 60_000,
            max_open_ms: 300_000,
            ..BreakerConfig::default()
        };
        assert!(may_go(State::Closed, false, 300_000, &cfg, EPISODE));
        assert!(
            !may_go(State::Closed, false, 299_999, &cfg, EPISODE),
            "a re-close may still come"
        );
        assert!(
            !may_go(State::Closed, true, 1 << 40, &cfg, EPISODE),
            "forced"
        );
        assert!(!may_go(State::Open, false, 1 << 40, &cfg, EPISODE));
        assert!(!may_go(State::HalfOpen, false, 1 << 40, &cfg, EPISODE));
        let short = BreakerConfig {
            max_open_ms: 1_000,
            ramp_ms: 0,
            ..cfg
        };
        assert!(may_go(State::Closed, false, 10_000, &short, EPISODE));
        assert!(
            !may_go(State::Closed, false, 9_999, &short, EPISODE),
            "its window still judges"
        );
    }

    #[test]
    fn a_breaker_that_never_opened_may_go_once_its_window_holds_no_failure() {
        let cfg = BreakerConfig {
            window_s: 10,
            max_open_ms: 300_000,
            ..BreakerConfig::default()
        };
        let quiet = Judged {
            opened: false,
            failing: false,
        };
        let failing = Judged {
            failing: true,
            ..quiet
        };
        assert!(
            may_go(State::Closed, false, 0, &cfg, quiet),
            "no episode, nothing in its window: nothing is lost"
        );
        assert!(
            !may_go(State::Closed, false, 1 << 40, &cfg, failing),
            "its failures still count towards opening it"
        );
        assert!(!may_go(State::Closed, true, 1 << 40, &cfg, quiet), "forced");
        assert!(!may_go(State::Open, false, 1 << 40, &cfg, quiet));
        assert!(!may_go(State::HalfOpen, false, 1 << 40, &cfg, quiet));
    }
}
