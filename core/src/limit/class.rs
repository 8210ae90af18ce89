//! A request's class under the adaptive limit: which requests give way first when in-flight
//! nears the limit (`circuit_breaker_class`).
//!
//! The construction is trunk reservation, as telephone exchanges admit calls of several
//! priorities to one group of circuits: a request of a lower class is admitted only while
//! more than its class's reserve of the limit is free, so the last slots stay for the classes
//! above it and `critical` alone can fill the whole limit. It needs nothing but the one
//! in-flight count every admission already reads (`docs/adaptive-limit.md`, "Classes").

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

#[cfg(test)]
mod tests {
    use super::*;
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

    proptest! {
        /// Critical alone gets the whole limit; a lower class never more than a higher one,
        /// never past the limit, and at least one slot of any limit.
        #[test]
        fn ordered_within_the_limit(limit in 0u32..=super::super::word::MAX) {
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
