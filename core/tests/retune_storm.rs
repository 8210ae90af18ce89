//! Reloads during an incident, many of them, each with other parameters, and the breaker run
//! on between them: a retune must leave nothing a later call trips on. Whatever the configs
//! and the traffic, an open breaker (not forced, not in dry run) lets no request through but
//! its probe, never has two probes in flight, its counters never go back, and once the
//! reloads stop it reaches its next probe (no probe held for ever).

mod common;

use circuit_breaker_core::breaker::{
    Admission, Attempt, BreakerConfig, Control, OwnedBreaker, Ticket, PROBE_LEASE_MS,
};
use circuit_breaker_core::snapshot::{Forced, State, Totals};
use common::*;
use proptest::prelude::*;

fn any_cfg(window_s: u32) -> impl Strategy<Value = BreakerConfig> {
    (
        1u32..20,
        1u32..=10_000,
        1_000u32..40_000,
        1u32..5,
        0u32..4,
        0u32..=5_000,
        any::<bool>(),
        any::<bool>(),
        0u32..4,
    )
        .prop_map(
            move |(min, rate, open, max_mul, probes, jitter, active, dry, ramp_s)| BreakerConfig {
                window_s,
                min_requests: min,
                failure_rate: rate,
                open_ms: open,
                max_open_ms: open * max_mul,
                jitter,
                probes,
                active,
                dry_run: dry,
                ramp_ms: ramp_s * 5_000,
                ..BreakerConfig::default()
            },
        )
}

#[derive(Clone, Debug)]
enum Step {
    Wait(u64),
    /// A request; `true`: its outcome comes at once, else it is held until a `Finish`.
    Request(Attempt, bool),
    /// The oldest held request ends with this outcome (`None`: without one).
    Finish(Option<Attempt>),
    /// The active prober asks for a probe, and reports this outcome at once.
    Active(Attempt),
    /// A reload with the `i`-th config (modulo); `true`: another window length.
    Reload(usize, bool),
    Control(u8),
}

fn any_attempt() -> impl Strategy<Value = Attempt> {
    prop_oneof![
        Just(ok()),
        Just(http(500)),
        Just(timeout()),
        Just(slow(2_000)),
    ]
}

fn any_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1u64..8_000).prop_map(Step::Wait),
        6 => (any_attempt(), any::<bool>()).prop_map(|(a, now)| Step::Request(a, now)),
        2 => proptest::option::of(any_attempt()).prop_map(Step::Finish),
        2 => any_attempt().prop_map(Step::Active),
        2 => (0usize..8, proptest::bool::weighted(0.2)).prop_map(|(i, w)| Step::Reload(i, w)),
        1 => (0u8..4).prop_map(Step::Control),
    ]
}

fn totals_le(a: &Totals, b: &Totals) -> bool {
    a.requests <= b.requests
        && a.failures <= b.failures
        && a.short_circuited <= b.short_circuited
        && a.probes <= b.probes
        && a.opened <= b.opened
        && a.half_opened <= b.half_opened
        && a.closed <= b.closed
        && a.ramp_shed <= b.ramp_shed
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn reload_storms_leave_a_breaker_that_runs(
        configs in proptest::collection::vec(any_cfg(10), 8),
        other in proptest::collection::vec(any_cfg(20), 8),
        steps in proptest::collection::vec(any_step(), 1..300),
    ) {
        let mut s = Story::new(configs[0]);
        let mut held: Vec<Ticket> = Vec::new();
        // Probes granted and not ended: (ticket, when).
        let mut probes: Vec<(Ticket, u64)> = Vec::new();
        let mut last = s.view().totals;
        let mut window = 10u32;
        for step in &steps {
            let before = s.view();
            match step {
                Step::Wait(ms) => { s.wait(*ms); }
                Step::Request(a, at_once) => {
                    let d = s.admit();
                    match d.admission {
                        Admission::Pass { .. } => {
                            let open = before.state == State::Open
                                && before.forced != Some(Forced::Closed);
                            prop_assert!(
                                !open || s.b.breaker().config().dry_run,
                                "an open breaker passed a request: {:?}", before
                            );
                            if *at_once { s.record(Ticket::Normal, a); } else { held.push(Ticket::Normal); }
                        }
                        Admission::Probe(t) => {
                            let now = s.now;
                            probes.retain(|&(_, at)| now.saturating_sub(at) < PROBE_LEASE_MS);
                            prop_assert!(probes.is_empty(), "a second probe in flight: {:?}", probes);
                            probes.push((t, now));
                            if *at_once {
                                s.record(t, a);
                                probes.retain(|&(p, _)| p != t);
                            } else {
                                held.push(t);
                            }
                        }
                        _ => {}
                    }
                }
                Step::Finish(a) => {
                    if !held.is_empty() {
                        let t = held.remove(0);
                        let now = s.now;
                        match a {
                            Some(a) => { s.record(t, a); }
                            None => s.b.breaker().release(now, t),
                        }
                        probes.retain(|&(p, _)| p != t);
                    }
                }
                Step::Active(a) => {
                    if let Some(t) = s.active_probe() {
                        let now = s.now;
                        probes.retain(|&(_, at)| now.saturating_sub(at) < PROBE_LEASE_MS);
                        prop_assert!(probes.is_empty(), "a second probe in flight (active): {:?}", probes);
                        s.record(t, a);
                    }
                }
                Step::Reload(i, another) => {
                    let now = s.now;
                    if *another {
                        let cfg = if window == 10 { other[*i] } else { configs[*i] };
                        let old = *s.b.breaker().header();
                        let mut fresh = OwnedBreaker::new(cfg, now);
                        fresh.breaker().adopt(&old, now);
                        s.b = fresh;
                        window = cfg.window_s;
                    } else {
                        let cfg = if window == 10 { configs[*i] } else { other[*i] };
                        s.b.breaker().retune(now, cfg).expect("same length");
                    }
                }
                Step::Control(c) => {
                    let c = match c {
                        0 => Control::ForceOpen,
                        1 => Control::ForceClose,
                        _ => Control::Reset,
                    };
                    s.control(c);
                }
            }
            let t = s.view().totals;
            if matches!(step, Step::Control(_)) || t.opened != last.opened || t.closed != last.closed {
                // A new episode, or an operator's: the breaker let go of the probe it held
                // (as without a reload), and the next is another episode's.
                probes.clear();
            }
            prop_assert!(totals_le(&last, &t), "a counter went back: {:?} then {:?}", last, t);
            last = t;
        }
        // The reloads stop; what is in flight ends. An open breaker (not forced) gets its next
        // probe within its longest cooldown, a probe spacing and a lease.
        for t in held.drain(..) {
            let now = s.now;
            s.b.breaker().release(now, t);
        }
        if s.view().forced.is_none() {
            let cfg = *s.b.breaker().config();
            let limit = s.now
                + u64::from(cfg.max_open_ms.max(cfg.open_ms)) * 2
                + u64::from(cfg.probe_interval_ms) * 2
                + PROBE_LEASE_MS;
            let mut probed = s.view().state == State::Closed;
            while !probed && s.now <= limit {
                s.wait(500);
                if cfg.active {
                    if let Some(t) = s.active_probe() {
                        s.record(t, &http(500));
                        probed = true;
                    }
                } else if let Admission::Probe(t) = s.admit().admission {
                    s.record(t, &http(500));
                    probed = true;
                }
                if s.view().state == State::Closed {
                    probed = true;
                }
            }
            let (now, view) = (s.now, s.view());
            prop_assert!(probed, "no probe by {} (now {}): {:?}", limit, now, view);
        }
    }
}
