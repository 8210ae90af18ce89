//! A breaker's configuration fingerprint: a 64-bit hash of its parameters, so that instances
//! only ever combine opinions about breakers that judge by the same rules.
//!
//! The hash is FNV-1a (64 bit, offset basis `0xcbf29ce484222325`, prime `0x100000001b3`) over
//! a byte encoding fixed here, not over a struct's memory: integers are written little-endian
//! at their declared width and byte strings are prefixed by their length as a `u32`, so that
//! `("ab", "c")` and `("a", "bc")` differ. The same parameters give the same fingerprint in
//! every process, build, architecture and version of this crate that keeps [`DOMAIN`]; a change
//! of the encoding must change [`DOMAIN`].

use crate::breaker::BreakerConfig;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The first bytes hashed into every fingerprint: names the encoding's version.
pub const DOMAIN: &str = "circuit_breaker fingerprint 3";

/// FNV-1a 64 of `bytes`: the primitive, exposed for its test vectors.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a64_from(FNV_OFFSET, bytes)
}

fn fnv1a64_from(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// Builds a fingerprint field by field (see the module's documentation for the encoding).
///
/// ```
/// use circuit_breaker_core::breaker::BreakerConfig;
/// use circuit_breaker_core::fleet::fingerprint::Fingerprint;
/// let fp = Fingerprint::of_config(&BreakerConfig::default())
///     .str("probe_uri=/health")
///     .finish();
/// assert_ne!(fp, Fingerprint::of_config(&BreakerConfig::default()).finish());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fingerprint(u64);

impl Default for Fingerprint {
    fn default() -> Self {
        Fingerprint::new()
    }
}

impl Fingerprint {
    /// An empty builder that has hashed [`DOMAIN`] only.
    pub fn new() -> Fingerprint {
        Fingerprint(FNV_OFFSET).bytes(DOMAIN.as_bytes())
    }

    /// Every parameter of a breaker, in declaration order, except `dry_run`: a dry-run
    /// breaker judges by the same rules and its opinions mean the same, it only does not
    /// enforce them, so rolling `dry_run` out across a fleet does not split it.
    ///
    /// The shell appends its own parameters that change what an opinion means (for example
    /// the active probe's URI and expected status) with [`Fingerprint::str`] and
    /// [`Fingerprint::u64`].
    pub fn of_config(cfg: &BreakerConfig) -> Fingerprint {
        // Destructured without `..`, so that a new parameter fails to compile here until
        // someone decides whether it belongs in the fingerprint.
        let BreakerConfig {
            failures,
            window_s,
            min_requests,
            failure_rate,
            slow_ms,
            slow_rate,
            open_ms,
            max_open_ms,
            jitter,
            probes,
            probe_interval_ms,
            probe_latency_ms,
            dry_run: _,
            ramp_ms,
            ramp_start,
            suspect_min,
            active,
            repeat_backoff,
            consecutive,
            // Derived from the active probe's timeout, which the shell adds.
            confirm_ms: _,
        } = *cfg;
        Fingerprint::new()
            .u64(failures.0[0])
            .u64(failures.0[1])
            .u32(window_s)
            .u32(min_requests)
            .u32(failure_rate)
            .u32(slow_ms)
            .u32(slow_rate)
            .u32(open_ms)
            .u32(max_open_ms)
            .u32(jitter)
            .u32(probes)
            .u32(probe_interval_ms)
            .u32(probe_latency_ms)
            .u32(ramp_ms)
            .u32(ramp_start)
            .u32(suspect_min)
            .u32(u32::from(active))
            .u32(u32::from(repeat_backoff))
            .u32(consecutive)
    }

    /// Adds a `u32`, little-endian.
    #[must_use]
    pub fn u32(self, v: u32) -> Fingerprint {
        Fingerprint(fnv1a64_from(self.0, &v.to_le_bytes()))
    }

    /// Adds a `u64`, little-endian.
    #[must_use]
    pub fn u64(self, v: u64) -> Fingerprint {
        Fingerprint(fnv1a64_from(self.0, &v.to_le_bytes()))
    }

    /// Adds a byte string, prefixed by its length.
    #[must_use]
    pub fn bytes(self, b: &[u8]) -> Fingerprint {
        let len = u32::try_from(b.len()).unwrap_or(u32::MAX);
        Fingerprint(fnv1a64_from(self.u32(len).0, b))
    }

    /// Adds a string, as [`Fingerprint::bytes`] of its UTF-8.
    #[must_use]
    pub fn str(self, s: &str) -> Fingerprint {
        self.bytes(s.as_bytes())
    }

    /// The fingerprint.
    pub fn finish(self) -> u64 {
        self.0
    }
}

/// A fingerprint as shown in the status page and on the wire: 16 lower-case hex digits.
pub fn hex(fp: u64) -> String {
    format!("{fp:016x}")
}

/// A well-mixed 64-bit value from any `u64` (splitmix64's finaliser), for rendezvous scores,
/// where FNV's weak high bits would favour some instances.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::FailureSet;

    #[test]
    fn fnv1a64_matches_the_published_test_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_default_config_has_a_pinned_fingerprint() {
        // Pinned: a change here means every fleet of the default configuration splits on
        // upgrade, so it must be deliberate: a new default (as `grpc_internal` leaving the
        // failure set; the CHANGELOG says how to keep a fleet whole through it), or a new
        // encoding, which comes with a new DOMAIN.
        let fp = Fingerprint::of_config(&BreakerConfig::default()).finish();
        assert_eq!(hex(fp), PINNED_DEFAULT);
        // The default before `grpc_internal` left it, named in full, is the old fingerprint.
        let mut failures = crate::breaker::FailureSet::DEFAULT;
        failures.insert(crate::breaker::FailureClass::parse("grpc_internal").unwrap());
        let old = BreakerConfig {
            failures,
            ..BreakerConfig::default()
        };
        assert_eq!(
            hex(Fingerprint::of_config(&old).finish()),
            "eafacda18625fa51"
        );
    }

    const PINNED_DEFAULT: &str = "e226b75036a734f1";

    #[test]
    fn every_parameter_but_dry_run_changes_it() {
        let base = BreakerConfig::default();
        let fp = |c: BreakerConfig| Fingerprint::of_config(&c).finish();
        let f0 = fp(base);
        let mut failures = FailureSet::DEFAULT;
        failures.insert(crate::breaker::FailureClass::Http429);
        let variants = [
            BreakerConfig { failures, ..base },
            BreakerConfig {
                window_s: 11,
                ..base
            },
            BreakerConfig {
                min_requests: 21,
                ..base
            },
            BreakerConfig {
                failure_rate: 5001,
                ..base
            },
            BreakerConfig {
                slow_ms: 800,
                ..base
            },
            BreakerConfig {
                slow_rate: 5000,
                ..base
            },
            BreakerConfig {
                open_ms: 10_000,
                ..base
            },
            BreakerConfig {
                max_open_ms: 60_000,
                ..base
            },
            BreakerConfig { jitter: 0, ..base },
            BreakerConfig { probes: 1, ..base },
            BreakerConfig {
                probe_interval_ms: 2000,
                ..base
            },
            BreakerConfig {
                probe_latency_ms: 800,
                ..base
            },
            BreakerConfig {
                consecutive: 0,
                ..base
            },
        ];
        let mut seen = vec![f0];
        for v in variants {
            let f = fp(v);
            assert!(!seen.contains(&f), "{v:?} collides");
            seen.push(f);
        }
        assert_eq!(
            fp(BreakerConfig {
                dry_run: true,
                ..base
            }),
            f0
        );
    }

    #[test]
    fn strings_are_length_prefixed() {
        let a = Fingerprint::new().str("ab").str("c").finish();
        let b = Fingerprint::new().str("a").str("bc").finish();
        assert_ne!(a, b);
        assert_ne!(
            Fingerprint::new().str("").finish(),
            Fingerprint::new().finish()
        );
    }

    #[test]
    fn hex_is_sixteen_lower_case_digits() {
        assert_eq!(hex(0xab), "00000000000000ab");
        assert_eq!(hex(u64::MAX), "ffffffffffffffff");
    }
}
