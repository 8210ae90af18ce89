//! A returning server's ramp (slow start): a server whose breaker closes by probes takes a
//! share of the picks the balancer makes for it that rises from the upstream's `ramp_start`
//! to all over `circuit_breaker_eject ramp=` (the breaker's own recovery ramp,
//! [`crate::breaker::ramp`]). A pick the ramp holds back goes to another server of the pool,
//! so the share is of the server's own share: a pool loses nothing, and a cold server (a JIT
//! that has not warmed, an empty cache) or one `least_conn` would hand every new request to
//! (it has no connections) is not flooded.
//!
//! The balancer still chooses: a pick of a ramping server is drawn against its share
//! ([`ServerRamp::keeps`]), and one turned down is asked of the balancer again with that
//! server marked tried, as nginx marks a server that failed. Pure; the shell asks.

use crate::breaker::{ramp, Gate};

/// What a worker keeps of one server's ramp: none, or its end, length and starting share.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerRamp {
    /// End of the ramp (monotonic ms); 0: none.
    pub until_ms: u64,
    /// Length of the ramp.
    pub ramp_ms: u32,
    /// Share at its start, in hundredths of a percent.
    pub start: u32,
}

impl ServerRamp {
    /// No ramp: every pick stands.
    pub const NONE: ServerRamp = ServerRamp {
        until_ms: 0,
        ramp_ms: 0,
        start: 10_000,
    };

    /// The ramp a server's breaker with `gate` is on: its recovery ramp while closed.
    pub fn of(gate: Gate) -> ServerRamp {
        match gate {
            Gate::Ramp {
                until_ms,
                ramp_ms,
                start,
            } => ServerRamp {
                until_ms,
                ramp_ms,
                start,
            },
            _ => ServerRamp::NONE,
        }
    }

    /// The share of its picks the server takes at `now_ms` (hundredths of a percent).
    pub fn share(&self, now_ms: u64) -> u32 {
        ramp::share(self.until_ms, self.ramp_ms, self.start, now_ms)
    }

    /// Whether a pick of the server at `now_ms` stands, for the uniform draw `rnd`. With no
    /// other server to take it (`others` false) it always does: a ramp never leaves a request
    /// without a server.
    pub fn keeps(&self, now_ms: u64, rnd: u32, others: bool) -> bool {
        !others || now_ms >= self.until_ms || ramp::lets_through(self.share(now_ms), rnd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp_at(until_ms: u64) -> ServerRamp {
        ServerRamp {
            until_ms,
            ramp_ms: 10_000,
            start: 1000,
        }
    }

    #[test]
    fn only_a_closed_breakers_ramp_is_a_servers() {
        let gate = Gate::Ramp {
            until_ms: 5,
            ramp_ms: 6,
            start: 7,
        };
        assert_eq!(
            ServerRamp::of(gate),
            ServerRamp {
                until_ms: 5,
                ramp_ms: 6,
                start: 7
            }
        );
        assert_eq!(ServerRamp::of(Gate::Pass), ServerRamp::NONE);
        assert_eq!(ServerRamp::of(Gate::Ask), ServerRamp::NONE);
        assert!(
            ServerRamp::NONE.keeps(0, 0, true),
            "no ramp keeps every pick"
        );
    }

    #[test]
    fn the_share_of_picks_kept_rises_from_the_start_to_all() {
        let r = ramp_at(10_000);
        let kept = |now| {
            (0..100_000u32)
                .filter(|i| r.keeps(now, i.wrapping_mul(42_949), true))
                .count()
        };
        assert!((9_800..=10_200).contains(&kept(0)), "{}", kept(0));
        assert!((54_800..=55_200).contains(&kept(5000)), "{}", kept(5000));
        assert_eq!(kept(10_000), 100_000);
        assert_eq!(kept(20_000), 100_000);
    }

    #[test]
    fn a_server_alone_keeps_every_pick() {
        let r = ramp_at(10_000);
        assert!((0..1000u32).all(|i| r.keeps(0, i.wrapping_mul(4_294_967), false)));
    }

    /// Round robin over four servers, one of them returning: each pick of it the ramp turns
    /// down goes to the next server, as nginx's balancer does with the server marked tried.
    /// At share `s` the server takes `s / (3 + s)` of the requests (a quarter at the end),
    /// and no other more than a third.
    #[test]
    fn under_round_robin_the_returning_server_takes_its_share_of_a_fair_share() {
        let r = ramp_at(10_000);
        let mut seed = 0x9e37_79b9u32;
        let mut draw = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        let mut counts = [[0u32; 4]; 10];
        let mut next = 0usize;
        for i in 0..40_000u64 {
            let now = i / 4;
            let mut pick = next % 4;
            next += 1;
            if pick == 3 && !r.keeps(now, draw(), true) {
                pick = next % 4;
                next += 1;
            }
            counts[(now / 1000) as usize][pick] += 1;
        }
        for (second, c) in counts.iter().enumerate() {
            let total: u32 = c.iter().sum();
            let share = f64::from(c[3]) / f64::from(total);
            let s = f64::from(r.share(second as u64 * 1000 + 500)) / 10_000.0;
            let want = s / (3.0 + s);
            assert!(
                (share - want).abs() < 0.01,
                "second {second}: {share:.3} against {want:.3} ({c:?})"
            );
            assert!(c[..3].iter().all(|&n| n <= total / 3 + 5), "{c:?}");
        }
    }
}
