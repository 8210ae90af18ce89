//! A request's class (`circuit_breaker_class`): which requests give way first when the
//! origin's capacity is short — the adaptive limit's slots, the retry budget, the share a
//! recovery ramp lets through — and which is risked as a half-open breaker's probe.
//!
//! Under the limit and the retry budget, the construction is trunk reservation, as telephone
//! exchanges admit calls of several priorities to one group of circuits: a request of a lower
//! class is admitted only while more than its class's reserve of the limit is free, so the
//! last slots stay for the classes above it and `critical` alone can fill the whole limit. It
//! needs nothing but the one in-flight count every admission already reads (docs/classes.md).

/// A request's class, most important first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// Admitted up to the whole limit.
    Critical,
    /// What a request of no class, or of a value that names none, is.
    Default,
    /// Turned away first.
    Sheddable,
}

impl Class {
    /// Every class, in the order of [`Class::index`].
    pub const ALL: [Class; 3] = [Class::Critical, Class::Default, Class::Sheddable];

    /// The class a value names (`critical`, `default`, `sheddable`), `None` for any other.
    pub fn parse(value: &[u8]) -> Option<Class> {
        match value {
            b"critical" => Some(Class::Critical),
            b"default" => Some(Class::Default),
            b"sheddable" => Some(Class::Sheddable),
            _ => None,
        }
    }

    /// Its name, as the status page and the log say it.
    pub fn name(self) -> &'static str {
        match self {
            Class::Critical => "critical",
            Class::Default => "default",
            Class::Sheddable => "sheddable",
        }
    }

    /// Its place in per-class tables: 0, 1, 2.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Slots of `limit` this class leaves to the classes above it: none for `critical`;
    /// 5 % (at least one) for `default`; 20 % (at least two) for `sheddable`.
    pub fn reserve(self, limit: u32) -> u32 {
        match self {
            Class::Critical => 0,
            Class::Default => (limit / 20).max(1),
            Class::Sheddable => (limit / 5).max(2),
        }
    }

    /// In-flight below which a request of this class is admitted under `limit`: the limit
    /// less the class's reserve, but at least one slot, so that a class is never shut out
    /// of an idle origin.
    #[inline]
    pub fn threshold(self, limit: u32) -> u32 {
        limit.saturating_sub(self.reserve(limit)).max(1).min(limit)
    }
}

/// In-flight below which a request of `class` is admitted under `limit` (`None`: classes
/// are not in use, and every request has the whole limit).
#[inline]
pub fn threshold(class: Option<Class>, limit: u32) -> u32 {
    match class {
        None => limit,
        Some(c) => c.threshold(limit),
    }
}

/// The slots `critical` requests keep whatever the others hold: the `sheddable` reserve. When
/// the limit falls below what is in flight (a cut made for the others' surge), every class
/// would wait for the drain; critical requests holding fewer than this are admitted past the
/// limit, so that in-flight exceeds what the others left by this many critical requests at
/// most.
#[inline]
pub fn guarantee(limit: u32) -> u32 {
    Class::Sheddable.reserve(limit)
}

/// Whether a request of `class` is admitted with `inflight` requests in flight under `limit`,
/// `own` of them of its class: below its class's threshold, or, critical, within its
/// [`guarantee`].
#[inline]
pub fn admits(class: Option<Class>, limit: u32, inflight: u32, own: u32) -> bool {
    inflight < threshold(class, limit) || (class == Some(Class::Critical) && own < guarantee(limit))
}

/// How long a class counts as present after a request of it was seen (milliseconds): a
/// half-open breaker's probe is kept for a request of the lowest class present.
pub const PRESENT_MS: u64 = 1000;

/// When a worker last saw a request of each class at one breaker: which classes are
/// present now. Time is passed in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Presence {
    /// `now + 1` of the last request of each class (`Class::index`); 0 for never.
    seen: [u64; 3],
}

impl Presence {
    /// A request of `class` came at `now_ms`.
    #[inline]
    pub fn note(&mut self, class: Class, now_ms: u64) {
        self.seen[class.index()] = now_ms.saturating_add(1);
    }

    /// Whether a request of a class below `class` came within [`PRESENT_MS`] of `now_ms`:
    /// a request of `class` then leaves the probe to it.
    pub fn lower_present(&self, class: Class, now_ms: u64) -> bool {
        Class::ALL[class.index() + 1..].iter().any(|c| {
            let seen = self.seen[c.index()];
            seen != 0 && now_ms.saturating_add(1).saturating_sub(seen) < PRESENT_MS
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::word::MAX;
    use proptest::prelude::*;

    #[test]
    fn names_round_trip_and_others_name_nothing() {
        for c in Class::ALL {
            assert_eq!(Class::parse(c.name().as_bytes()), Some(c));
            assert_eq!(Class::ALL[c.index()], c);
        }
        for v in [&b""[..], b"Critical", b"critical ", b"high", b"0"] {
            assert_eq!(Class::parse(v), None);
        }
    }

    #[test]
    fn thresholds_at_small_and_usual_limits() {
        let t = |l| Class::ALL.map(|c| c.threshold(l));
        assert_eq!(t(0), [0, 0, 0]);
        assert_eq!(t(1), [1, 1, 1]);
        assert_eq!(t(3), [3, 2, 1]);
        assert_eq!(t(10), [10, 9, 8]);
        assert_eq!(t(20), [20, 19, 16]);
        assert_eq!(t(100), [100, 95, 80]);
        assert_eq!(threshold(None, 100), 100);
    }

    #[test]
    fn the_probe_is_left_to_the_lowest_class_present() {
        let mut p = Presence::default();
        let now = 50_000;
        for c in Class::ALL {
            assert!(!p.lower_present(c, now), "nothing seen");
        }
        p.note(Class::Sheddable, now);
        assert!(p.lower_present(Class::Critical, now + 10));
        assert!(p.lower_present(Class::Default, now + PRESENT_MS - 1));
        assert!(
            !p.lower_present(Class::Sheddable, now + 10),
            "none below it"
        );
        assert!(!p.lower_present(Class::Default, now + PRESENT_MS), "gone");
        p.note(Class::Default, now + PRESENT_MS);
        assert!(p.lower_present(Class::Critical, now + PRESENT_MS + 1));
        assert!(!p.lower_present(Class::Default, now + PRESENT_MS + 1));
        // A clock at zero is still a time seen.
        let mut p = Presence::default();
        p.note(Class::Sheddable, 0);
        assert!(p.lower_present(Class::Critical, 0));
    }

    #[test]
    fn critical_requests_keep_their_guarantee_past_a_cut_limit() {
        // A limit cut to 10 with 24 in flight: none of the others; critical ones while they
        // hold fewer than 2.
        assert!(!admits(Some(Class::Sheddable), 10, 24, 0));
        assert!(!admits(Some(Class::Default), 10, 24, 0));
        assert!(!admits(None, 10, 24, 0));
        assert!(admits(Some(Class::Critical), 10, 24, 1));
        assert!(
            !admits(Some(Class::Critical), 10, 24, 2),
            "its guarantee is held"
        );
        assert!(
            admits(Some(Class::Critical), 10, 9, 9),
            "below the limit, whatever it holds"
        );
        assert!(
            admits(Some(Class::Critical), 3, 3, 1),
            "at least two, at a small limit"
        );
    }

    proptest! {
        /// Whatever the class and its holdings: admitted below its threshold; past the limit
        /// only critical, within its guarantee.
        #[test]
        fn admission_is_bounded(
            limit in 0u32..1000,
            inflight in 0u32..1300,
            own in 0u32..1300,
            c in 0usize..4,
        ) {
            let class = Class::ALL.get(c).copied();
            let a = admits(class, limit, inflight, own);
            if inflight < threshold(class, limit) {
                prop_assert!(a);
            }
            if a && inflight >= threshold(class, limit) {
                prop_assert_eq!(class, Some(Class::Critical));
                prop_assert!(own < guarantee(limit));
            }
        }

        /// Critical alone gets the whole limit; a lower class never more than a higher one,
        /// never past the limit, and at least one slot of any limit.
        #[test]
        fn ordered_within_the_limit(limit in 0u32..=MAX) {
            let [c, d, s] = Class::ALL.map(|c| c.threshold(limit));
            prop_assert_eq!(c, limit);
            prop_assert!(s <= d && d <= c);
            prop_assert!(s >= limit.min(1));
            if limit >= 3 {
                prop_assert!(s < d && d < c);
            }
        }
    }
}
