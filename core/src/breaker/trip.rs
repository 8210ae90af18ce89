//! The window that opened a breaker, kept while it is open or half-open: the live window ages
//! out during a cooldown longer than itself, so the status page shows these numbers beside
//! it (an open breaker's window otherwise reads "0 % of 0").

use super::config::BreakerConfig;
use super::window::Sums;
use crate::snapshot::{TripCause, TripView, WindowView};

const NONE: u8 = 0;
const FAILURE: u8 = 1;
const SLOW: u8 = 2;
const CONSECUTIVE: u8 = 3;
const PROBE: u8 = 4;
const LATENCY_OUTLIER: u8 = 5;
const FAILURE_OUTLIER: u8 = 6;

// 16 bytes: a default breaker stays within the slab's 2 KiB class.
const _: () = assert!(core::mem::size_of::<Trip>() == 16);

/// What opened a breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TripBy {
    /// Failures reached `failure_rate`.
    FailureRate,
    /// Slow calls reached `slow_rate`.
    SlowRate,
    /// `consecutive` gateway failures in a row.
    Consecutive,
    /// A server failed the probe of its upstream's open breaker.
    Probe,
    /// A server's latency stood out from its pool's.
    LatencyOutlier,
    /// A server's failures stood out from its pool's.
    FailureOutlier,
}

/// The trip's numbers, in the breaker's header (16 bytes: a default breaker must stay within
/// the slab's 2 KiB class). Counts saturate at `u32::MAX`, as a bucket's do.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Trip {
    requests: u32,
    failures: u32,
    slow: u32,
    /// `NONE`, `FAILURE`, `SLOW`, `CONSECUTIVE`, `PROBE`, `LATENCY_OUTLIER` or
    /// `FAILURE_OUTLIER`: what opened it.
    by: u8,
    /// It tripped on `suspect_min` requests, peers' suspicion in force.
    suspected: u8,
    /// A latency outlier's: the latency its probes must stay within, in milliseconds (at
    /// most 65 535, in what was padding); 0 for any other trip.
    limit_ms: u16,
}

impl Trip {
    /// No trip recorded (closed, forced, or never tripped).
    pub const NONE: Trip = Trip {
        requests: 0,
        failures: 0,
        slow: 0,
        by: NONE,
        suspected: 0,
        limit_ms: 0,
    };

    /// The window `sums` as it was when `by` opened the breaker.
    pub fn new(sums: &Sums, by: TripBy, suspected: bool) -> Trip {
        let n = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        Trip {
            requests: n(sums.requests),
            failures: n(sums.failures),
            slow: n(sums.slow),
            by: match by {
                TripBy::FailureRate => FAILURE,
                TripBy::SlowRate => SLOW,
                TripBy::Consecutive => CONSECUTIVE,
                TripBy::Probe => PROBE,
                TripBy::LatencyOutlier => LATENCY_OUTLIER,
                TripBy::FailureOutlier => FAILURE_OUTLIER,
            },
            suspected: u8::from(suspected),
            limit_ms: 0,
        }
    }

    /// The latency a latency outlier's probes must stay within (0: none, and for any other
    /// trip).
    pub fn limit_ms(&self) -> u32 {
        if self.by == LATENCY_OUTLIER {
            u32::from(self.limit_ms)
        } else {
            0
        }
    }

    /// Sets a latency outlier's probe latency limit (nothing for any other trip), at most
    /// 65 535 ms; 0 clears it.
    pub fn set_limit_ms(&mut self, ms: u64) {
        if self.by == LATENCY_OUTLIER {
            self.limit_ms = u16::try_from(ms).unwrap_or(u16::MAX);
        }
    }

    /// What opened it, `None` without a trip.
    pub fn by(&self) -> Option<TripBy> {
        Some(match self.by {
            FAILURE => TripBy::FailureRate,
            SLOW => TripBy::SlowRate,
            CONSECUTIVE => TripBy::Consecutive,
            PROBE => TripBy::Probe,
            LATENCY_OUTLIER => TripBy::LatencyOutlier,
            FAILURE_OUTLIER => TripBy::FailureOutlier,
            _ => return None,
        })
    }

    /// What the status page shows: `None` without a trip.
    pub fn view(&self, cfg: &BreakerConfig) -> Option<TripView> {
        let (cause, threshold) = match self.by {
            FAILURE => (TripCause::FailureRate, cfg.failure_rate),
            SLOW => (TripCause::SlowRate, cfg.slow_rate),
            CONSECUTIVE => (TripCause::Consecutive, cfg.consecutive),
            PROBE => (TripCause::Probe, 0),
            LATENCY_OUTLIER => (TripCause::LatencyOutlier, 0),
            FAILURE_OUTLIER => (TripCause::FailureOutlier, 0),
            _ => return None,
        };
        Some(TripView {
            cause,
            threshold,
            suspected: self.suspected != 0,
            window: WindowView {
                seconds: cfg.window_s,
                requests: u64::from(self.requests),
                failures: u64::from(self.failures),
                slow: u64::from(self.slow),
            },
        })
    }
}
