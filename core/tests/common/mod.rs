//! A fake clock and a breaker, so that tests read like a story.
#![allow(dead_code)]

pub mod ledger;

use circuit_breaker_core::breaker::{
    Admission, Attempt, BreakerConfig, Control, Decision, Ending, OwnedBreaker, Recorded, Ticket,
    Transition,
};
use circuit_breaker_core::snapshot::{BreakerView, State};

/// 2025-11-30T06:40:00Z, a plausible Unix time in milliseconds.
pub const T0: u64 = 1_764_484_800_000;

/// The README's defaults, without jitter so that cooldowns are exact.
pub fn cfg() -> BreakerConfig {
    BreakerConfig {
        jitter: 0,
        ..BreakerConfig::default()
    }
}

/// [`cfg`] judged by its rates alone (`consecutive` off), for the tests of the window's
/// rules: a run of gateway failures would open it first.
pub fn rates_only() -> BreakerConfig {
    BreakerConfig {
        consecutive: 0,
        ..cfg()
    }
}

pub fn ok() -> Attempt {
    Attempt::http(200, 20)
}

pub fn http(status: u16) -> Attempt {
    Attempt::http(status, 20)
}

pub fn slow(ms: u64) -> Attempt {
    Attempt::http(200, ms)
}

pub fn timeout() -> Attempt {
    Attempt::ended(Ending::Timeout, 1000)
}

pub fn retry_after(status: u16, secs: u32) -> Attempt {
    Attempt {
        retry_after_s: Some(secs),
        ..Attempt::http(status, 20)
    }
}

pub struct Story {
    pub b: OwnedBreaker,
    pub now: u64,
    pub rnd: u32,
}

impl Story {
    pub fn new(cfg: BreakerConfig) -> Story {
        Story {
            b: OwnedBreaker::new(cfg, T0),
            now: T0,
            rnd: u32::MAX / 2,
        }
    }

    pub fn wait(&mut self, ms: u64) -> &mut Self {
        self.now += ms;
        self
    }

    pub fn admit(&mut self) -> Decision {
        self.admit_as(1, &|_| true)
    }

    pub fn admit_as(&mut self, owner: u32, alive: &dyn Fn(u32) -> bool) -> Decision {
        let (now, rnd) = (self.now, self.rnd);
        self.b.breaker().admit(now, rnd, owner, alive, true)
    }

    /// Admits a request on an instance that may not start a probe (another fleet member is
    /// the designated prober).
    pub fn admit_not_prober(&mut self) -> Decision {
        let (now, rnd) = (self.now, self.rnd);
        self.b.breaker().admit(now, rnd, 1, &|_| true, false)
    }

    pub fn record(&mut self, ticket: Ticket, a: &Attempt) -> Recorded {
        let (now, rnd) = (self.now, self.rnd);
        self.b.breaker().record(now, rnd, ticket, a, true)
    }

    /// Records an outcome while the breaker may not open (the `max_eject` cap).
    pub fn record_capped(&mut self, ticket: Ticket, a: &Attempt) -> Recorded {
        let (now, rnd) = (self.now, self.rnd);
        self.b.breaker().record(now, rnd, ticket, a, false)
    }

    /// Asks for the active probe as worker 1.
    pub fn active_probe(&mut self) -> Option<Ticket> {
        let (now, rnd) = (self.now, self.rnd);
        self.b.breaker().active_probe(now, rnd, 1, &|_| true)
    }

    /// Waits until the next active probe is due, takes it and reports `a`.
    pub fn next_active_probe(&mut self, a: &Attempt) -> Recorded {
        let due = self
            .b
            .hdr
            .active_probe_due_ms()
            .expect("an active probe is due");
        self.now = self.now.max(due);
        let t = self.active_probe().expect("the active probe granted");
        self.record(t, a)
    }

    /// A normal request that passes and ends with `a`; returns the transition it caused.
    pub fn request(&mut self, a: &Attempt) -> Option<Transition> {
        let d = self.admit();
        assert!(
            matches!(d.admission, Admission::Pass { .. }),
            "expected a pass, got {d:?}"
        );
        self.record(Ticket::Normal, a).transition
    }

    /// `n` normal requests ending with `a`; returns the last transition seen.
    pub fn requests(&mut self, n: usize, a: &Attempt) -> Option<Transition> {
        let mut last = None;
        for _ in 0..n {
            if let Some(t) = self.request(a) {
                last = Some(t);
            }
        }
        last
    }

    /// Admits a request that must be the probe; returns its ticket.
    pub fn probe(&mut self) -> Ticket {
        match self.admit().admission {
            Admission::Probe(t) => t,
            other => panic!("expected a probe, got {other:?}"),
        }
    }

    /// Admits a request that must be rejected; returns its Retry-After in ms.
    pub fn rejected(&mut self) -> u64 {
        match self.admit().admission {
            Admission::Reject { retry_after_ms } => retry_after_ms,
            other => panic!("expected a reject, got {other:?}"),
        }
    }

    /// Admits `n` requests drawing `rnd` uniformly (a fixed sequence); returns how many the
    /// ramp turned away.
    pub fn turned_away_of(&mut self, n: u32) -> u32 {
        let saved = self.rnd;
        let mut away = 0;
        for i in 0..n {
            self.rnd = i.wrapping_mul(2_654_435_761);
            match self.admit().admission {
                Admission::Recovering { retry_after_ms } => {
                    assert_eq!(retry_after_ms, 1000);
                    away += 1;
                }
                Admission::Pass { .. } => {}
                other => panic!("expected a pass or a ramp, got {other:?}"),
            }
        }
        self.rnd = saved;
        away
    }

    /// Peers suspect the origin for `ms` from now (0: withdraw the suspicion).
    pub fn suspect(&mut self, ms: u64) {
        let until = if ms == 0 { 0 } else { self.now + ms };
        self.b.breaker().suspect(until);
    }

    /// Peers report recovery.
    pub fn hasten(&mut self) -> bool {
        let now = self.now;
        self.b.breaker().hasten(now)
    }

    pub fn control(&mut self, c: Control) -> Option<Transition> {
        let (now, rnd) = (self.now, self.rnd);
        self.b.breaker().control(now, rnd, c)
    }

    pub fn state(&mut self) -> State {
        self.b.breaker().state()
    }

    pub fn view(&mut self) -> BreakerView {
        let now = self.now;
        self.b.breaker().view(now)
    }

    /// Trips a default-config breaker with 20 failures.
    pub fn trip(&mut self) -> Transition {
        let t = self.requests(20, &http(500)).expect("tripped");
        assert_eq!(self.state(), State::Open);
        t
    }
}
