//! `circuit_breaker_eject`'s parsed value (`crate::directive` parses it): when one server of
//! an upstream is ejected, and how it returns.

/// `circuit_breaker_eject`: when one server of an upstream is ejected (skipped by the
/// balancer in every worker) because of its own failure or slow rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EjectSpec {
    /// Failure rate that ejects a server; `None`: the breaker's.
    pub failure_rate: Option<u32>,
    /// Slow rate that ejects a server (with the breaker's `slow`); `None`: the breaker's.
    pub slow_rate: Option<u32>,
    /// No decision on fewer attempts than this at the server in the window.
    pub min_requests: u32,
    /// First ejection time, doubled on each repeated ejection.
    pub time_ms: u32,
    /// Cap of the ejection time.
    pub max_time_ms: u32,
    /// Share of an upstream's servers that may be out at once, in hundredths of a percent
    /// (at least one server may always be ejected from a pool of two or more).
    pub max_ejected: u32,
    /// `relative=`: the rules that judge a server against its pool, on by default
    /// (`crate::eject::outlier`); `latency_factor=` sets the latency rule's factor.
    pub relative: RelativeSpec,
    /// `ramp=`: a returning server's ramp (`crate::eject::ramp`); `None`: not given, the
    /// default where the balancer allows it.
    pub ramp_ms: Option<u32>,
}

/// A returning server's default ramp: from the upstream's `ramp_start` to all in 10 s.
pub const DEFAULT_SERVER_RAMP_MS: u32 = 10_000;

/// `circuit_breaker_eject`'s `relative=on|off|latency|failures` and `latency_factor=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelativeSpec {
    /// The latency rule's factor, in hundredths (300: 3x); 0 with the rule off.
    pub latency_factor: u32,
    /// The failure rule is on.
    pub failures: bool,
    /// Either was given (a module whose pools have no relative rules refuses them).
    pub explicit: bool,
}

impl Default for RelativeSpec {
    fn default() -> Self {
        RelativeSpec {
            latency_factor: DEFAULT_LATENCY_FACTOR,
            failures: true,
            explicit: false,
        }
    }
}

/// The latency rule's default factor: 3x the pool's p90.
pub const DEFAULT_LATENCY_FACTOR: u32 = 300;

impl EjectSpec {
    /// The relative rules as the pool judges them.
    pub fn relative_rules(&self) -> super::outlier::Relative {
        super::outlier::Relative {
            latency_factor: self.relative.latency_factor,
            failures: self.relative.failures,
            min_requests: u64::from(self.min_requests),
        }
    }

    /// A returning server's ramp, as given or the default.
    pub fn server_ramp_ms(&self) -> u32 {
        self.ramp_ms.unwrap_or(DEFAULT_SERVER_RAMP_MS)
    }
}

impl Default for EjectSpec {
    fn default() -> Self {
        EjectSpec {
            failure_rate: None,
            slow_rate: None,
            min_requests: 10,
            time_ms: 10_000,
            max_time_ms: 300_000,
            max_ejected: 5000,
            relative: RelativeSpec::default(),
            ramp_ms: None,
        }
    }
}
