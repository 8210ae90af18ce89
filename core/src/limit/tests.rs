use super::share::Standing;
use super::*;

const T0: u64 = 1_000_000;

fn samples(n: u32, latency_ms: u64, inflight: u32) -> Samples {
    let mut s = Samples::EMPTY;
    for _ in 0..n {
        s.add(latency_ms);
    }
    s.note_inflight(inflight);
    s
}

/// `latencies` of attempts that started after the pin was set, with `inflight` at most
/// in flight.
fn clean(latencies: &[u64], inflight: u32) -> Samples {
    let mut s = Samples::EMPTY;
    for &l in latencies {
        s.add_clean(l);
    }
    s.note_inflight(inflight);
    s
}

/// A controller and a clock; each step is one flush at the end of a 100 ms interval.
struct Story {
    l: Limiter,
    now: u64,
}

impl Story {
    fn new(cfg: LimitConfig) -> Story {
        Story {
            l: Limiter::new_at_initial(cfg, T0),
            now: T0,
        }
    }
    /// A controller of `limit_max`, held at the limit at `latency_ms` until it has measured
    /// its minimum once.
    fn measured(limit_max: u32, latency_ms: u64) -> Story {
        let mut st = Story::new(LimitConfig {
            limit_max,
            ..LimitConfig::default()
        });
        st.measure(latency_ms);
        st
    }
    /// Holds the origin at the limit at `latency_ms` until the minimum was measured once.
    fn measure(&mut self, latency_ms: u64) {
        for _ in 0..1000 {
            if self.l.view().remeasures > 0 {
                return;
            }
            self.held(latency_ms);
        }
        panic!("never measured");
    }
    /// [`Story::measured`], then five more intervals saturated at `latency_ms`.
    fn settled(limit_max: u32, latency_ms: u64) -> Story {
        let mut st = Story::measured(limit_max, latency_ms);
        for _ in 0..5 {
            st.saturated(latency_ms);
        }
        st
    }
    /// An interval of 20 answers at `latency_ms` with `inflight` at most in flight.
    fn step(&mut self, latency_ms: u64, inflight: u32) -> Update {
        self.now += 100.max(self.l.sample_ms as u64);
        let s = samples(20, latency_ms, inflight);
        self.l
            .record(self.now, &s, u32::MAX / 2)
            .expect("an interval ended")
    }
    /// An interval in which the origin is held at the limit: as many requests in flight
    /// on average as the limit allows (Little's law), each `latency_ms` long.
    fn held(&mut self, latency_ms: u64) -> Update {
        let limit = self.l.limit();
        let elapsed = 100.max(self.l.sample_ms as u64);
        self.now += elapsed;
        let n = (u64::from(limit) * elapsed).div_ceil(latency_ms) as u32;
        let s = samples(n.max(20), latency_ms, limit);
        self.l
            .record(self.now, &s, u32::MAX / 2)
            .expect("an interval ended")
    }
    /// An interval in which demand meets the limit.
    fn saturated(&mut self, latency_ms: u64) -> Update {
        let limit = self.l.limit();
        self.step(latency_ms, limit)
    }
}

#[test]
fn the_structs_are_small_plain_data() {
    assert_eq!(size_of::<Samples>(), 72);
    assert_eq!(LIMITER_SIZE, 360);
    assert_eq!(std::mem::align_of::<Limiter>(), 8);
}

#[test]
fn no_update_before_the_interval_ends_with_enough_samples() {
    let mut l = Limiter::new_at_initial(LimitConfig::default(), T0);
    assert_eq!(
        l.record(T0 + 50, &samples(100, 10, 20), 0),
        None,
        "interval not over"
    );
    let mut l = Limiter::new_at_initial(LimitConfig::default(), T0);
    assert_eq!(
        l.record(T0 + 500, &samples(19, 10, 20), 0),
        None,
        "19 samples"
    );
    assert_eq!(
        l.record(T0 + 510, &samples(0, 0, 20), 0),
        None,
        "drops are no samples"
    );
    let u = l
        .record(T0 + 520, &samples(1, 10, 20), 0)
        .expect("20 samples");
    assert_eq!(u.samples, 20);
}

#[test]
fn the_first_interval_decides_nothing() {
    let mut st = Story::new(LimitConfig::default());
    let u = st.saturated(10);
    assert_eq!((u.from, u.to, u.min_latency_ms), (20, 20, 0.0));
}

#[test]
fn a_queue_halves_the_limit_and_a_healthy_latency_doubles_it_in_slow_start() {
    let mut st = Story::new(LimitConfig::default());
    st.saturated(10);
    let u = st.saturated(10);
    assert_eq!(
        (u.from, u.to, u.min_latency_ms),
        (20, 40, 10.0),
        "slow start"
    );
    // 30 ms against a 10 ms floor: the gradient, 0.42, is clamped to 0.5, plus √20.
    let u = st.saturated(30);
    assert_eq!((u.from, u.to), (40, 24));
    // Slow start is over: a healthy latency grows by 1.25 and a square root.
    let u = st.saturated(10);
    assert_eq!((u.from, u.to), (24, 36), "24.5·1.25 + √30.6");
}

#[test]
fn a_surge_after_a_quiet_spell_waits_an_interval_before_slow_start_doubles() {
    // Started at the limit, slow start doubles it.
    let mut st = Story::new(LimitConfig::default());
    st.saturated(10);
    assert_eq!(st.saturated(10).to, 40, "slow start");
    // Then demand stays far below it (3 in flight of 40): nobody came near the limit.
    for _ in 0..5 {
        let u = st.step(10, 3);
        assert_eq!((u.from, u.to), (40, 40));
    }
    // A surge meets it before the origin's queue shows in latency: growth by the gradient
    // (1.25 and a square root), not a doubling into the queue the surge builds.
    let u = st.saturated(10);
    assert_eq!((u.from, u.to), (40, 57), "40·1.25 + √50");
    // Still healthy at the limit an interval later: demand that is no surge, and slow
    // start doubles again.
    let u = st.saturated(10);
    assert_eq!((u.from, u.to), (57, 114), "doubled");
    // A surge whose queue shows in its second interval is cut, which ends slow start.
    let mut st = Story::new(LimitConfig::default());
    st.saturated(10);
    st.saturated(10);
    st.step(10, 3);
    st.saturated(10);
    let u = st.saturated(30);
    assert!(u.to < u.from, "{u:?}");
    let u = st.saturated(10);
    assert!(u.to < 2 * u.from, "no doubling after the cut: {u:?}");
    // Half the limit in flight is near it: slow start goes on doubling.
    let mut st = Story::new(LimitConfig::default());
    st.saturated(10);
    st.saturated(10);
    assert_eq!(
        st.step(10, 20).to,
        57,
        "20 of 40 in flight: not quiet, grows"
    );
    assert_eq!(st.saturated(10).to, 114, "slow start goes on, not paused");
}

#[test]
fn a_limit_nobody_reaches_neither_falls_nor_grows() {
    let mut st = Story::new(LimitConfig::default());
    st.step(10, 3);
    st.step(10, 3);
    let u = st.step(500, 19);
    assert_eq!((u.from, u.to), (20, 20), "not reached: no cut");
    let u = st.step(10, 9);
    assert_eq!((u.from, u.to), (20, 20), "less than half used: no growth");
    let u = st.step(10, 10);
    assert_eq!((u.from, u.to), (20, 30), "half used: growth");
}

#[test]
fn a_class_turned_away_below_the_limit_binds_it_as_a_full_limit_does() {
    // The same story as a limit nobody reaches, but sheddable requests were turned away at
    // their threshold (19 of 20 in flight is 16 sheddable and three others): the queue
    // they saw is the origin's, and the limit falls.
    let mut st = Story::new(LimitConfig::default());
    st.step(10, 3);
    st.step(10, 3);
    st.now += 100;
    let mut s = samples(20, 500, 19);
    s.add_reserved();
    let u = st.l.record(st.now, &s, u32::MAX / 2).unwrap();
    assert!(u.reached);
    assert!(u.to < u.from, "{u:?}");
}

#[test]
fn a_queue_beyond_the_tolerance_holds_a_held_limit_and_one_within_it_grows_it() {
    let mut st = Story::measured(100, 10);
    // 30 ms: a cut, which also ends slow start.
    let u = st.saturated(30);
    assert!(u.to < u.from);
    let held = st.l.limit();
    // 13 ms against 12.5 tolerated, the origin held at the limit: a queue, too short to
    // cut (the limit · 0.96 and its root are above the limit), and no reason to let in
    // more.
    for _ in 0..20 {
        let u = st.held(13);
        assert_eq!((u.from, u.to), (held, held));
    }
    // The same latency when only bursts reach the limit (20 answers in 100 ms: 2.6 in
    // flight on average): the headroom grows it, so the next burst is not shed.
    let u = st.saturated(13);
    assert!(u.to > held, "{} → {}", u.from, u.to);
    // Within the tolerance a held limit grows.
    let held = st.l.limit();
    let u = st.held(12);
    assert!(u.to > held, "{} → {}", u.from, u.to);
}

#[test]
fn the_limit_stays_within_its_bounds() {
    let cfg = LimitConfig {
        limit_min: 5,
        limit_max: 50,
        ..LimitConfig::default()
    };
    let mut st = Story::new(cfg);
    for _ in 0..100 {
        let u = st.saturated(1);
        assert!((5..=50).contains(&u.to));
    }
    assert_eq!(st.l.limit(), 50);
    // A queue that grows with every request let in: the pinned measurements halve down
    // to the floor and no further.
    let mut lowest = u32::MAX;
    for _ in 0..100 {
        let limit = st.l.limit();
        let u = st.step(1000 * u64::from(limit), limit);
        assert!((5..=50).contains(&u.to));
        lowest = lowest.min(u.to);
    }
    assert_eq!(lowest, 5);
}

#[test]
fn a_slowed_origin_is_measured_again_instead_of_starved() {
    let mut st = Story::new(LimitConfig::default());
    // Saturated at a 10 ms floor until the first measurement has confirmed it.
    st.measure(10);
    for _ in 0..10 {
        st.saturated(10);
    }
    assert_eq!(st.l.min_latency_ms(), 10.0);
    let before = st.l.limit();
    // The origin's own service time rises 6×, whatever the concurrency: more than
    // `SLOWDOWN` times the tolerated latency, so the measurement starts at once, pinned
    // where the old floor would allow this latency (limit · 12.5/60), not at half. (Held:
    // the rate of answers that the limit allows at 60 ms, which pins at the same level.)
    let u = st.held(60);
    assert_eq!(u.min_change, MinChange::PinStarted);
    assert!(st.l.view().probing);
    assert_eq!(st.l.limit(), (f64::from(before) * 12.5 / 60.0) as u32);
    // Drained at once, nothing falling; a floor that rose is checked once at half the
    // pin, where latency does not fall, and taken.
    let mut changes = Vec::new();
    loop {
        let u = st.saturated(60);
        changes.push(u.min_change);
        if u.min_change != MinChange::PinHalved {
            break;
        }
    }
    assert_eq!(changes.last(), Some(&MinChange::PinMeasured), "{changes:?}");
    assert_eq!(
        changes,
        [MinChange::PinHalved, MinChange::PinMeasured],
        "checked once"
    );
    assert_eq!(st.l.min_latency_ms(), 60.0);
    // From the new floor the limit grows back to the origin's share.
    let cut = st.l.limit();
    for _ in 0..10 {
        st.saturated(60);
    }
    assert!(
        cut < before && st.l.limit() >= before,
        "{cut} → {}",
        st.l.limit()
    );
}

#[test]
fn a_queue_twice_the_tolerated_latency_is_measured_after_three_updates() {
    let mut st = Story::new(LimitConfig::default());
    st.measure(10);
    // 30 ms against 12.5 tolerated: a queue the halving may drain, or a slower origin.
    let changes: Vec<MinChange> = (0..3).map(|_| st.saturated(30).min_change).collect();
    assert_eq!(
        changes,
        [MinChange::None, MinChange::None, MinChange::PinStarted]
    );
}

#[test]
fn after_a_slowdown_the_limit_returns_to_the_origins_capacity_not_above() {
    let mut st = Story::settled(40, 5);
    let before = st.l.limit();
    assert_eq!(before, 40);
    // 4 workers at 30 ms: 20 answers in 150 ms while the queue drains from `before`.
    let u = st.saturated(150);
    assert_eq!(u.min_change, MinChange::PinStarted);
    let pin = st.l.limit();
    assert_eq!(pin, 3, "40 · 6.25/150 is below limit_min");
    st.now += 150;
    let u = st.l.record(st.now, &samples(20, 120, before), 0).unwrap();
    assert_eq!(u.min_change, MinChange::None, "not drained");
    st.now += 100;
    let u = st.l.record(st.now, &samples(20, 30, pin), 0).unwrap();
    assert_eq!(u.min_change, MinChange::PinMeasured);
    assert_eq!(u.min_latency_ms, 30.0);
    // Capacity 20/150 per ms × 30 ms = 4 workers; × 1.25 = 5, + √5.
    assert_eq!(u.to, 7, "not the saved limit");
    assert!(u.to < before);
}

/// A controller at 40 of a 5 ms origin that slowed down to 30 ms, pinned at 3 and past
/// one interval that had not drained.
fn slowed_and_pinned() -> Story {
    let mut st = Story::settled(40, 5);
    let u = st.saturated(150);
    assert_eq!((u.min_change, st.l.limit()), (MinChange::PinStarted, 3));
    st.now += 150;
    let u = st.l.record(st.now, &samples(20, 120, 40), 0).unwrap();
    assert_eq!(u.min_change, MinChange::None, "not drained");
    st
}

#[test]
fn clean_answers_that_agree_end_a_measurement_at_once() {
    let mut st = slowed_and_pinned();
    // Four clean answers are too few; a flush with one answer that is not clean, or made
    // with more than the pin in flight (begun under the old limit), counts for nothing.
    st.now += 10;
    assert_eq!(st.l.record(st.now, &clean(&[30, 31, 30, 32], 3), 0), None);
    let mut mixed = clean(&[30, 30], 3);
    mixed.add(30);
    assert_eq!(st.l.record(st.now + 5, &mixed, 0), None);
    assert_eq!(st.l.record(st.now + 6, &clean(&[30, 30], 9), 0), None);
    // The fifth, 30 ms after the pinned interval began: the floor is their mean.
    st.now += 20;
    let u = st.l.record(st.now, &clean(&[33], 2), 0).expect("measured");
    assert_eq!((u.min_change, u.samples), (MinChange::PinMeasured, 5));
    assert_eq!(u.min_latency_ms, 31.2);
    // Capacity 20/150 per ms × 31.2 ms × 1.25 = 5.2, + √5.2.
    assert_eq!(u.to, 7);
}

#[test]
fn clean_answers_that_spread_wait_for_the_interval() {
    // An exponential origin's answers, not within the tolerance of each other: 14 ms on
    // average, not far above the old floor of 5 (4 × 6.25) ...
    let mut st = slowed_and_pinned();
    st.now += 10;
    assert_eq!(st.l.record(st.now, &clean(&[4, 25, 8, 20, 12], 3), 0), None);
    st.now += 100;
    let u =
        st.l.record(st.now, &clean(&[14; 15], 3), 0)
            .expect("interval over");
    assert_eq!((u.min_change, u.samples), (MinChange::PinMeasured, 20));
    assert_eq!(u.min_latency_ms, 13.95);
    // ... or far above it (30 ms), at a pin of `limit_min`, which cannot be halved.
    let mut st = slowed_and_pinned();
    st.now += 10;
    assert_eq!(
        st.l.record(st.now, &clean(&[8, 45, 20, 60, 17], 3), 0),
        None
    );
}

#[test]
fn agreeing_clean_answers_above_the_old_floor_are_checked_at_lower_pins() {
    // Held at 40 by a 5 ms origin that slows to 26 ms: the rate the limit allows at
    // 26 ms (40/26 per ms) × 6.25 pins at 9, above its 4 workers.
    let mut st = Story::settled(40, 5);
    let u = st.held(26);
    assert_eq!((u.min_change, st.l.limit()), (MinChange::PinStarted, 9));
    // Five answers that agree, at 52 ms: each waited one service time (9 in flight for 4
    // workers). A floor that rose is checked at half the pin, at once.
    st.now += 60;
    let u =
        st.l.record(st.now, &clean(&[52, 53, 52, 52, 54], 9), 0)
            .unwrap();
    assert_eq!((u.min_change, st.l.limit()), (MinChange::PinHalved, 4));
    // At 4 they agree at 26 ms: half what they were, still falling with the pin, which
    // halves again (to `limit_min`); at 3 the same 26 ms is the floor.
    st.now += 30;
    let u =
        st.l.record(st.now, &clean(&[26, 26, 27, 26, 26], 4), 0)
            .unwrap();
    assert_eq!((u.min_change, st.l.limit()), (MinChange::PinHalved, 3));
    st.now += 30;
    let u =
        st.l.record(st.now, &clean(&[26, 26, 27, 26, 26], 3), 0)
            .unwrap();
    assert_eq!(
        (u.min_change, u.min_latency_ms),
        (MinChange::PinMeasured, 26.2)
    );
}

#[test]
fn clean_answers_far_above_the_old_floor_halve_the_pin_at_once() {
    let mut st = Story::new(LimitConfig {
        limit_min: 1,
        ..LimitConfig::default()
    });
    // A periodic measurement of a 10 ms origin.
    while st.held(10).min_change != MinChange::PinStarted {}
    let pin = st.l.limit();
    assert!(pin >= 4, "pinned at {pin}");
    // The origin slowed down meanwhile: its answers at the pin spread from 55 to 90 ms,
    // more than 4 × 12.5 on average. They are its own queue: halve now.
    st.now += 20;
    let u =
        st.l.record(st.now, &clean(&[55, 70, 90, 60, 80], pin), 0)
            .expect("decided");
    assert_eq!(u.min_change, MinChange::PinHalved);
    assert_eq!(st.l.limit(), pin / 2);
    // Halved once: at the lower pin, spread answers wait for their interval.
    st.now += 20;
    let spread = clean(&[55, 70, 90, 60, 80], pin / 2);
    assert_eq!(st.l.record(st.now, &spread, 0), None);
}

#[test]
fn a_slowdown_ends_its_interval_on_a_quarter_of_its_samples() {
    let mut st = Story::settled(40, 5);
    let limit = st.l.limit();
    // Four answers at 40 ms, eight times the floor, 10 ms into the interval: too few.
    st.now += 10;
    assert_eq!(st.l.record(st.now, &samples(4, 40, limit), 0), None);
    // The fifth: a slowdown, decided at once. Five answers in 20 ms, 0.25 per ms × 5 ms
    // × 1.25: pinned at `limit_min`, below the 40 · 6.25/40 the latency alone allows.
    st.now += 10;
    let u = st.l.record(st.now, &samples(1, 40, limit), 0).unwrap();
    assert_eq!((u.min_change, u.samples), (MinChange::PinStarted, 5));
    assert_eq!(st.l.limit(), 3);
    // Twenty answers at 20 ms (four times the floor, under the slowdown's five) wait
    // for their interval.
    let mut st = Story::measured(40, 5);
    st.saturated(5);
    st.now += 10;
    assert_eq!(st.l.record(st.now, &samples(20, 20, 40), 0), None);
}

#[test]
fn slow_start_does_not_double_on_an_answer_as_slow_as_a_slowdown() {
    let mut st = Story::new(LimitConfig::default());
    st.saturated(10);
    st.saturated(10);
    assert_eq!(st.l.limit(), 40, "slow start doubled");
    // Mostly fast answers and one at 60 ms, over 4 × 12.5: the origin is slowing down.
    st.now += 100;
    let mut s = samples(19, 9, 40);
    s.add(60);
    let u = st.l.record(st.now, &s, 0).unwrap();
    // 40 · 12.5/11.55 + √43.3, not 80.
    assert_eq!((u.from, u.to), (40, 49));
}

#[test]
fn after_a_halving_the_pins_queue_does_not_raise_the_reference() {
    let mut st = Story::new(LimitConfig {
        limit_min: 1,
        limit_max: 64,
        ..LimitConfig::default()
    });
    st.measure(10);
    while st.l.limit() < 64 {
        st.saturated(10);
    }
    // Held at 64 by a queue within the gradient's reach (14 ms) until the periodic
    // measurement pins 32, whose drained mean fell to 10 (that was a queue): halved to 16.
    let started = loop {
        let u = st.held(14);
        if u.min_change == MinChange::PinStarted {
            break u;
        }
    };
    assert_eq!((started.from, started.to), (64, 32));
    assert_eq!(st.step(10, 32).min_change, MinChange::PinHalved);
    // The first interval at 16 still holds 32's queue (not drained, 13 ms); the next
    // drains at 10 ms, as at 32: the floor, not another halving.
    assert_eq!(st.step(13, 32).min_change, MinChange::None);
    let u = st.step(10, 16);
    assert_eq!(u.min_change, MinChange::PinMeasured);
    assert_eq!(u.min_latency_ms, 10.0);
}

#[test]
fn a_recovered_origin_lowers_the_minimum_at_once_at_the_limit() {
    let mut st = Story::new(LimitConfig::default());
    st.measure(60);
    let u = st.saturated(20);
    assert_eq!((u.min_change, u.min_latency_ms), (MinChange::Fell, 20.0));
    // Below the limit a faster interval is no evidence: it waits for a measurement.
    let mut st = Story::new(LimitConfig::default());
    while st.l.view().remeasures == 0 {
        st.step(60, 2);
    }
    let u = st.step(20, 2);
    assert_eq!((u.min_change, u.min_latency_ms), (MinChange::None, 60.0));
}

#[test]
fn the_minimum_is_measured_again_periodically_below_the_limit() {
    let mut st = Story::new(LimitConfig::default());
    while st.l.view().remeasures == 0 {
        st.step(10, 2);
    }
    let start = st.now;
    let u = loop {
        let u = st.step(30, 2);
        if u.min_change != MinChange::None {
            break u;
        }
        assert_eq!(u.min_latency_ms, 10.0);
    };
    assert_eq!(
        (u.min_change, u.min_latency_ms),
        (MinChange::Remeasured, 30.0)
    );
    let waited = st.now - start;
    assert!((8_400..=11_600).contains(&waited), "10 s ± 15 %: {waited}");
    assert_eq!(st.l.limit(), 20, "nothing pinned, nothing shed");
}

#[test]
fn bursts_that_reach_a_healthy_limit_start_no_periodic_pinned_measurement() {
    let mut st = Story::settled(1000, 20);
    let limit = st.l.limit();
    let remeasures = st.l.view().remeasures;
    // Long past the next re-measurement: 32 clients of a 20 ms origin, 1.6 in flight on
    // average, whose bursts reach the limit every interval. Pinning half of it would shed
    // the next burst on no evidence.
    for _ in 0..300 {
        let u = st.step(20, st.l.limit());
        assert_ne!(u.min_change, MinChange::PinStarted, "{u:?}");
        assert!(st.l.limit() >= limit, "{} < {limit}", st.l.limit());
    }
    assert_eq!(st.l.view().remeasures, remeasures, "still due");
    // The first interval nobody reached measures the floor as it is.
    let u = st.step(22, 2);
    assert_eq!(
        (u.min_change, u.min_latency_ms),
        (MinChange::Remeasured, 22.0)
    );
    // Latency beyond the tolerance in a burst is evidence enough.
    let mut st = Story::settled(1000, 20);
    let u = loop {
        let u = st.step(30, st.l.limit());
        if u.min_change != MinChange::None {
            break u;
        }
        assert!(st.l.view().updates < 1000);
    };
    assert_eq!(u.min_change, MinChange::PinStarted);
}

#[test]
fn a_slowdown_while_a_measurement_waits_is_pinned_where_the_old_floor_allows() {
    let mut st = Story::settled(200, 10);
    // Bursts keep a periodic measurement due without starting it.
    for _ in 0..150 {
        assert_ne!(st.step(10, st.l.limit()).min_change, MinChange::PinStarted);
    }
    let before = st.l.limit();
    // Then the origin slows six-fold: pinned where 10 ms would allow 60, not at half.
    let u = st.held(60);
    assert_eq!(u.min_change, MinChange::PinStarted);
    assert_eq!(st.l.limit(), (f64::from(before) * 12.5 / 60.0) as u32);
}

#[test]
fn a_pinned_measurement_halves_while_latency_falls() {
    let mut st = Story::new(LimitConfig::default());
    st.saturated(10);
    st.saturated(10);
    st.saturated(10);
    st.saturated(10);
    // Demand meets a limit of 160 in slow start; the origin queues: latency grows with
    // the concurrency as for 10 workers of 10 ms.
    let queue = |limit: u32| u64::from(limit.max(10)) * 10 / 10;
    let mut pins = Vec::new();
    loop {
        let limit = st.l.limit();
        let u = st.step(queue(limit), limit);
        if st.l.view().probing {
            pins.push(st.l.limit());
        }
        if u.min_change == MinChange::PinMeasured {
            break;
        }
        assert!(st.l.view().updates < 100);
    }
    assert!(pins.windows(2).all(|w| w[1] <= w[0]), "{pins:?}");
    assert!(*pins.last().unwrap() <= 10, "down to the knee: {pins:?}");
    assert_eq!(st.l.min_latency_ms(), 10.0);
}

/// A periodic measurement of a 5 ms floor under way at its pin of 10.
fn pinned_at_ten() -> Story {
    let mut st = Story::measured(20, 5);
    while st.l.limit() < 20 {
        st.saturated(5);
    }
    for _ in 0..200 {
        if st.l.view().probing {
            break;
        }
        st.held(5);
    }
    assert_eq!(st.l.limit(), 10);
    st
}

#[test]
fn a_floor_that_rose_under_a_periodic_pin_is_confirmed_lower() {
    // The periodic measurement comes due just as the origin (4 workers) slows to 30 ms:
    // at its pin of 10, 6 requests wait at the origin, out of the limit's sight.
    let mut st = pinned_at_ten();
    let pin = st.l.limit();
    let at = |n: u32| 30 * u64::from(n.max(4)) / 4;
    let u = st.step(at(pin), pin);
    assert_eq!(u.min_change, MinChange::PinHalved, "75 ms is no 5 ms floor");
    let mut last = u;
    while last.min_change == MinChange::PinHalved || last.min_change == MinChange::None {
        let pin = st.l.limit();
        last = st.step(at(pin), pin);
    }
    assert_eq!(last.min_change, MinChange::PinMeasured);
    assert_eq!(
        last.min_latency_ms, 30.0,
        "the origin's own latency, not its queue's"
    );
}

#[test]
fn a_pin_nobody_reached_is_not_halved_on_a_floor_a_little_higher() {
    // 7 ms is beyond the tolerance of 5 ms, but nothing waited on the pin: shedding at half
    // of it would only turn away requests on a mean's noise.
    let mut st = pinned_at_ten();
    let u = st.step(7, 6);
    assert_eq!(
        (u.min_change, u.min_latency_ms),
        (MinChange::PinMeasured, 7.0)
    );
    // The same answers with the pin reached are checked at half of it.
    let mut st = pinned_at_ten();
    assert_eq!(st.step(7, 10).min_change, MinChange::PinHalved);
    // A floor that more than doubled is checked lower, reached or not.
    let mut st = pinned_at_ten();
    assert_eq!(st.step(13, 6).min_change, MinChange::PinHalved);
}

#[test]
fn a_pinned_measurement_gives_up_if_the_origin_never_drains() {
    let mut st = Story::new(LimitConfig::default());
    let mut started = None;
    for _ in 0..50 {
        // Long-lived requests hold the origin above the limit, as many on average.
        let limit = st.l.limit();
        st.now += 100;
        let s = samples((limit + 5) * 10, 10, limit + 5);
        let u =
            st.l.record(st.now, &s, u32::MAX / 2)
                .expect("an interval ended");
        match u.min_change {
            MinChange::PinStarted => started = Some(st.l.view().updates),
            MinChange::PinAbandoned => {
                let at = st.l.view().updates;
                assert_eq!(at - started.unwrap(), u64::from(REMEASURE_MAX_INTERVALS));
                assert!(!st.l.view().probing);
                return;
            }
            _ => {}
        }
    }
    panic!("never gave up");
}

#[test]
fn a_clock_that_goes_back_is_held() {
    let mut l = Limiter::new_at_initial(LimitConfig::default(), T0);
    assert_eq!(l.record(T0 + 200, &samples(5, 10, 1), 0), None);
    assert_eq!(l.record(0, &samples(5, 10, 1), 0), None);
    assert!(
        l.record(T0 - 1, &samples(10, 10, 1), 0).is_some(),
        "200 ms, 20 samples"
    );
}

#[test]
fn fast_errors_are_counted_not_averaged() {
    let mut s = samples(3, 30, 4);
    s.add_drop();
    s.add_drop();
    assert_eq!((s.count, s.drops, s.mean_ms()), (3, 2, Some(30.0)));
    assert_eq!(Samples::EMPTY.mean_ms(), None);
}

#[test]
fn a_sub_millisecond_origin_is_taken_as_one_millisecond() {
    let mut st = Story::new(LimitConfig::default());
    st.saturated(0);
    let u = st.saturated(0);
    assert_eq!((u.sample_ms, u.min_latency_ms, u.to), (1.0, 1.0, 40));
}

#[test]
fn each_bad_parameter_is_named() {
    let ok = LimitConfig::default();
    assert_eq!(ok.check(), Ok(()));
    let bad = [
        (LimitConfig { limit_min: 0, ..ok }, "limit_min"),
        (LimitConfig { limit_max: 2, ..ok }, "limit_max"),
        (
            LimitConfig {
                limit_max: word::MAX + 1,
                ..ok
            },
            "limit_max",
        ),
        (
            LimitConfig {
                limit_initial: 2,
                ..ok
            },
            "limit_initial",
        ),
        (
            LimitConfig {
                limit_initial: 1001,
                ..ok
            },
            "limit_initial",
        ),
        (
            LimitConfig {
                tolerance: 10_001,
                ..ok
            },
            "limit_tolerance",
        ),
        (
            LimitConfig {
                interval_ms: 0,
                ..ok
            },
            "limit_interval",
        ),
        (LimitConfig { samples: 0, ..ok }, "limit_samples"),
        (
            LimitConfig {
                remeasure_ms: 999,
                ..ok
            },
            "limit_remeasure",
        ),
    ];
    for (cfg, name) in bad {
        assert_eq!(cfg.check().map_err(LimitConfigError::parameter), Err(name));
        // Refused by `nginx -t`, but never a panic or a limit out of range here.
        let l = Limiter::new_at_initial(cfg, T0);
        assert!(l.limit() >= 1 && l.limit() >= l.config().limit_min);
    }
}

#[test]
fn the_word_packs_tag_limit_and_in_flight() {
    let w = word::pack(7, 1000, 42);
    assert_eq!(word::unpack(w), (7, 1000, 42));
    assert_eq!(
        word::unpack(word::pack(0xffff, word::MAX, word::MAX)),
        (0xffff, word::MAX, word::MAX)
    );
    assert_eq!(
        word::unpack(word::pack(1, u32::MAX, 0)).1,
        word::MAX,
        "clipped"
    );
    assert_eq!(word::unpack(word::with_limit(w, 3)), (7, 3, 42));
    assert_eq!(word::unpack(word::give_back(w, 40)), (7, 1000, 2));
    assert_eq!(
        word::unpack(word::give_back(w, 99)),
        (7, 1000, 0),
        "never below 0"
    );
    assert_eq!(word::owner_of(word::owner(4242, 17)), (4242, 17));
}

#[test]
fn tags_are_never_zero() {
    assert_eq!(word::tag_of(1), 1);
    assert_eq!(word::tag_of(0xffff), 0xffff);
    assert_eq!(word::tag_of(0x10000), 1);
    assert!((1..200_000u64).all(|i| (1..=0xffff).contains(&word::tag_of(i))));
}

#[test]
fn a_slot_is_taken_below_the_limit_only() {
    let w = word::pack(5, 2, 0);
    let word::Take::Slot {
        next,
        inflight,
        over,
        ..
    } = word::take(w, 5, false, None, 0, Standing::Light)
    else {
        panic!("a free slot")
    };
    assert_eq!((inflight, over), (1, false));
    let word::Take::Slot { next, .. } = word::take(next, 5, false, None, 0, Standing::Light) else {
        panic!("the second")
    };
    assert_eq!(
        word::take(next, 5, false, None, 0, Standing::Light),
        word::Take::Full
    );
    assert_eq!(
        word::take(next, 6, false, None, 0, Standing::Light),
        word::Take::Stale,
        "another tenant"
    );
    let word::Take::Slot { inflight, over, .. } =
        word::take(next, 5, true, None, 0, Standing::Light)
    else {
        panic!("dry run passes")
    };
    assert_eq!((inflight, over), (3, true));
    assert_eq!(word::give(next, 5), Some((next - 1, 2)));
    assert_eq!(
        word::give(next, 6),
        None,
        "a former tenant's release changes nothing"
    );
    assert_eq!(word::give(w, 5), None, "none held");
    let full = word::pack(5, word::MAX, word::MAX);
    assert_eq!(
        word::take(full, 5, true, None, 0, Standing::Light),
        word::Take::Full,
        "never wraps"
    );
}

#[test]
fn a_lower_class_gives_way_before_the_limit() {
    use crate::class::Class::{Critical, Default, Sheddable};
    let at = |inflight| word::pack(5, 10, inflight);
    let took = |inflight, c| word::take(at(inflight), 5, false, Some(c), 0, Standing::Light);
    assert!(matches!(
        took(7, Sheddable),
        word::Take::Slot { inflight: 8, .. }
    ));
    assert_eq!(took(8, Sheddable), word::Take::Reserved);
    assert!(matches!(
        took(8, Default),
        word::Take::Slot { inflight: 9, .. }
    ));
    assert_eq!(took(9, Default), word::Take::Reserved);
    assert!(matches!(
        took(9, Critical),
        word::Take::Slot { inflight: 10, .. }
    ));
    for c in [Default, Sheddable] {
        assert_eq!(took(10, c), word::Take::Full, "{c:?} at the limit");
    }
    // Critical requests holding their guarantee (two slots of 10) are not let past it.
    assert_eq!(
        word::take(at(10), 5, false, Some(Critical), 2, Standing::Light),
        word::Take::Full
    );
    // A critical count a dead worker left high reads no higher than the word's in-flight.
    assert!(matches!(
        word::take(
            word::pack(5, 1, 1),
            5,
            false,
            Some(Critical),
            7,
            Standing::Light
        ),
        word::Take::Slot { inflight: 2, .. }
    ));
    // Holding fewer, they are, however many the others hold.
    assert!(matches!(
        word::take(at(24), 5, false, Some(Critical), 1, Standing::Light),
        word::Take::Slot { inflight: 25, .. }
    ));
    // In dry run a reserved slot is taken and counted as a shed.
    assert!(matches!(
        word::take(at(8), 5, true, Some(Sheddable), 0, Standing::Light),
        word::Take::Slot { over: true, .. }
    ));
}

#[test]
fn a_heavy_client_leaves_the_last_quarter_to_the_others() {
    let at = |inflight| word::pack(5, 20, inflight);
    let took = |inflight, s| word::take(at(inflight), 5, false, None, 0, s);
    assert!(matches!(
        took(14, Standing::Heavy),
        word::Take::Slot { inflight: 15, .. }
    ));
    assert_eq!(took(15, Standing::Heavy), word::Take::OverShare);
    assert_eq!(took(20, Standing::Heavy), word::Take::Full);
    for s in [Standing::Light, Standing::Suspect] {
        assert!(matches!(took(19, s), word::Take::Slot { inflight: 20, .. }));
    }
    // In dry run the slot is taken and counted as a shed.
    assert!(matches!(
        word::take(at(15), 5, true, None, 0, Standing::Heavy),
        word::Take::Slot {
            over: true,
            capped: true,
            ..
        }
    ));
}

proptest::proptest! {
    /// A slot only when the class admits it (below its threshold, or critical within its
    /// guarantee); refused as reserved only below the limit.
    #[test]
    fn admission_follows_the_class_threshold(
        limit in 0u32..64,
        inflight in 0u32..80,
        own in 0u32..20,
        c in 0usize..4,
        s in 0usize..3,
    ) {
        let class = crate::class::Class::ALL.get(c).copied();
        let standing = [Standing::Light, Standing::Suspect, Standing::Heavy][s];
        let t = crate::class::threshold(class, limit);
        // The class's count is clamped to the word's own, as `take` does.
        let own = own.min(inflight);
        let admits = crate::class::admits(class, limit, inflight, own);
        let capped = standing == Standing::Heavy && inflight >= super::share::cap(limit);
        match word::take(word::pack(5, limit, inflight), 5, false, class, own, standing) {
            word::Take::Slot { inflight: i, over, .. } => {
                proptest::prop_assert!(admits && !capped && !over && i == inflight + 1);
                proptest::prop_assert!(inflight < t || own < crate::class::guarantee(limit));
            }
            word::Take::Reserved => {
                proptest::prop_assert!(!admits && t <= inflight && inflight < limit)
            }
            word::Take::OverShare => proptest::prop_assert!(admits && capped),
            word::Take::Full => proptest::prop_assert!(!admits && inflight >= limit),
            word::Take::Stale => proptest::prop_assert!(false, "same tag"),
        }
    }
}

/// `n` overload signals to a client that asked alone, at `inflight` in flight.
fn overloaded(n: u32, inflight: u32) -> Samples {
    overloaded_to(None, n, inflight)
}

/// `n` overload signals to the client of `tag`, others asking beside it (`None`: it asked
/// alone), at `inflight` in flight.
fn overloaded_to(tag: Option<u16>, n: u32, inflight: u32) -> Samples {
    let mut s = Samples::EMPTY;
    for _ in 0..n {
        s.add_overload(tag);
    }
    s.note_inflight(inflight);
    s
}

#[test]
fn one_clients_overload_signals_beside_others_cut_nothing() {
    // An origin that rate-limits one client answers it 429 while the others are served: its
    // quota, not the origin's load.
    let mut st = Story::settled(1000, 10);
    let before = st.l.limit();
    for _ in 0..30 {
        st.now += 10;
        let u = st.l.record(st.now, &overloaded_to(Some(7), 2, 40), 0);
        assert!(u.is_none_or(|u| !u.overload), "{u:?}");
    }
    assert!(st.l.limit() >= before, "{} < {before}", st.l.limit());
    // A second client's signal in the same interval, from another worker's flush: the
    // origin's word on its load, cut at once.
    st.now += 10;
    assert!(st
        .l
        .record(st.now, &overloaded_to(Some(7), 1, 40), 0)
        .is_none());
    st.now += 10;
    let u = st.l.record(st.now, &overloaded_to(Some(9), 1, 40), 0);
    let u = u.expect("cut at once");
    assert!(u.overload);
    assert_eq!(u.to, 20);
    // The cut spent them: after the gate, the first client's own signals cut nothing more,
    // however long the interval waits for its samples.
    for _ in 0..20 {
        st.now += 50;
        let u = st.l.record(st.now, &overloaded_to(Some(7), 1, 20), 0);
        assert!(u.is_none_or(|u| !u.overload), "{u:?}");
    }
    assert!(st.l.limit() >= 20);
}

#[test]
fn overload_signals_more_than_a_second_apart_are_judged_apart() {
    // At a low rate an interval lasts many seconds (overload answers are no latency samples):
    // one client's signal, and another's a second later, are not one overload.
    let mut st = Story::settled(1000, 10);
    let before = st.l.limit();
    st.now += 10;
    assert!(st
        .l
        .record(st.now, &overloaded_to(Some(7), 1, 40), 0)
        .is_none());
    st.now += 1_000;
    let u = st.l.record(st.now, &overloaded_to(Some(9), 1, 40), 0);
    assert!(u.is_none_or(|u| !u.overload), "{u:?}");
    assert!(st.l.limit() >= before);
    // Within the second that began with client 9's, client 7's is.
    st.now += 900;
    let u = st.l.record(st.now, &overloaded_to(Some(7), 1, 40), 0);
    assert!(u.expect("cut").overload);
}

#[test]
fn an_overload_signal_halves_the_limit_at_once_once_per_interval() {
    let mut st = Story::settled(1000, 10);
    let before = st.l.limit();
    assert!(before >= 40, "{before}");
    // Mid-interval, a flush carrying one 429 at 40 in flight: half of 40, at once.
    st.now += 10;
    let u =
        st.l.record(st.now, &overloaded(1, 40), 0)
            .expect("cut at once");
    assert!(u.overload);
    assert_eq!((u.from, u.to), (before, 20));
    assert_eq!(st.l.limit(), 20);
    // Another within the same interval: no second cut.
    st.now += 50;
    assert_eq!(st.l.record(st.now, &overloaded(3, 20), 0), None);
    assert_eq!(st.l.limit(), 20);
    // One interval later (100 ms, the mean latency being 10 ms), the next signal cuts.
    st.now += 50;
    let u = st.l.record(st.now, &overloaded(1, 20), 0).expect("cut");
    assert_eq!((u.from, u.to), (20, 10));
}

#[test]
fn an_overload_signal_cuts_from_the_lower_of_the_limit_and_in_flight() {
    // A limit far above what is in flight: the cut is from the in-flight.
    let mut st = Story::settled(1000, 10);
    st.now += 10;
    let u = st.l.record(st.now, &overloaded(1, 9), 0).unwrap();
    assert_eq!(u.to, 4);
    // Never below limit_min; no in-flight figure: from the limit.
    let mut st = Story::settled(1000, 10);
    let before = st.l.limit();
    st.now += 10;
    let u = st.l.record(st.now, &overloaded(1, 0), 0).unwrap();
    assert_eq!(u.to, before / 2);
    st.now += 200;
    let u = st.l.record(st.now, &overloaded(1, 1), 0).unwrap();
    assert_eq!(u.to, LimitConfig::default().limit_min);
}

#[test]
fn an_overload_signal_ends_slow_start_and_the_limit_grows_back_slowly() {
    let mut st = Story::new(LimitConfig::default());
    st.saturated(10);
    st.now += 10;
    let u = st.l.record(st.now, &overloaded(1, 20), 0).unwrap();
    assert_eq!(u.to, 10);
    // Healthy latency at the limit: no doubling (slow start is over), the √ headroom only.
    let u = st.saturated(10);
    assert!(u.to > 10 && u.to < 20, "{} -> {}", u.from, u.to);
}

#[test]
fn no_overload_cut_during_a_pinned_measurement() {
    let mut st = slowed_and_pinned();
    let pin = st.l.limit();
    st.now += 1;
    let u = st.l.record(st.now, &overloaded(1, pin), 0);
    assert!(!matches!(u, Some(u) if u.overload));
    assert_eq!(st.l.limit(), pin);
}

#[test]
fn overload_answers_are_no_latency_samples() {
    let mut s = overloaded(2, 5);
    assert_eq!(s.count, 0);
    assert!(!s.is_empty());
    assert_eq!(s.mean_ms(), None);
    s.merge(&overloaded(3, 1));
    assert_eq!(s.overloads, 5);
}

#[test]
fn a_fresh_controller_sheds_nothing_until_it_has_seen_the_demand() {
    let cfg = LimitConfig::default();
    let mut l = Limiter::new(cfg, T0);
    assert_eq!(l.limit(), cfg.limit_max, "nothing known: no limit");
    // 30 in flight (above limit_initial) while the first interval runs.
    assert_eq!(l.record(T0 + 50, &samples(10, 100, 30), 0), None);
    assert_eq!(l.limit(), cfg.limit_max);
    let u = l.record(T0 + 120, &samples(10, 100, 30), 0).unwrap();
    assert_eq!((u.from, u.to, u.min_change), (1000, 60, MinChange::None));
    // Healthy after it: the limit is never reached, and never falls (approached, it
    // grows).
    let mut now = T0 + 120;
    for _ in 0..20 {
        now += 110;
        l.record(now, &samples(20, 100, 35), 0);
        assert!(l.limit() >= 60, "{}", l.limit());
    }
    // A quiet start: limit_initial.
    let mut l = Limiter::new(cfg, T0);
    l.record(T0 + 120, &samples(20, 10, 3), 0).unwrap();
    assert_eq!(l.limit(), cfg.limit_initial);
    // A fixed limit is one from the start.
    let fixed = LimitConfig {
        limit_min: 2,
        limit_max: 2,
        limit_initial: 2,
        ..cfg
    };
    assert_eq!(Limiter::new(fixed, T0).limit(), 2);
}

#[test]
fn a_healthy_start_is_measured_as_it_is() {
    let mut l = Limiter::new(LimitConfig::default(), T0);
    let mut now = T0;
    let mut changes = Vec::new();
    for _ in 0..8 {
        now += 110;
        changes.push(l.record(now, &samples(20, 40, 10), 0).unwrap().min_change);
    }
    assert!(changes.contains(&MinChange::Remeasured), "{changes:?}");
    assert!(!changes.contains(&MinChange::PinStarted), "{changes:?}");
    assert!(l.limit() >= 20);
}

#[test]
fn a_floor_measured_in_an_unlimited_starts_queue_is_checked_pinned() {
    // An origin overloaded from the start: its first decided interval already queues
    // (the floor taken is 40 ms), and latency keeps growing, the limit (twice the first
    // demand) unreached.
    let mut l = Limiter::new(LimitConfig::default(), T0);
    let mut now = T0 + 100;
    assert_eq!(l.record(now, &samples(20, 40, 100), 0).unwrap().to, 200);
    now += 100;
    l.record(now, &samples(20, 40, 120), 0).unwrap();
    assert_eq!(l.min_latency_ms(), 40.0);
    let mut pinned = None;
    for _ in 0..10 {
        now += 200;
        let u = l.record(now, &samples(20, 150, 150), 0).unwrap();
        if u.min_change == MinChange::PinStarted {
            pinned = Some(u);
            break;
        }
    }
    let u = pinned.expect("a pinned measurement, limit unreached");
    assert!(!u.reached);
    assert_eq!(u.to, u.from / 2, "half the limit");
    // Drained at the pin, at the old floor: checked at half again all the same, since
    // demand still reached the pin; below it, demand never needed more.
    let pin = u.to;
    let unheld = l;
    now += 200;
    let u = l.record(now, &samples(20, 40, pin), 0).unwrap();
    assert_eq!((u.min_change, u.to), (MinChange::PinHalved, pin / 2));
    let mut l = unheld;
    let u = l.record(now, &samples(20, 40, pin - 1), 0).unwrap();
    assert_eq!(u.min_change, MinChange::PinMeasured);
}

#[test]
fn an_overload_signal_before_the_first_interval_sets_the_limit() {
    let mut l = Limiter::new(LimitConfig::default(), T0);
    let u = l.record(T0 + 5, &overloaded(1, 30), 0).unwrap();
    assert_eq!((u.from, u.to), (1000, 15));
    let mut l = Limiter::new(LimitConfig::default(), T0);
    let u = l.record(T0 + 5, &overloaded(1, 0), 0).unwrap();
    assert_eq!(u.to, 500);
}

/// An interval's flush: `light` answers at `light_ms` and `heavy` of a heavy client at
/// `heavy_ms`, its cap having turned some away, `inflight` at most in flight.
fn with_heavy(light: u32, light_ms: u64, heavy: u32, heavy_ms: u64, inflight: u32) -> Samples {
    let mut s = samples(light, light_ms, inflight);
    for _ in 0..heavy {
        s.add_heavy(heavy_ms);
    }
    s.add_over_share();
    s
}

#[test]
fn a_heavy_clients_slow_answers_are_no_queue_while_the_others_are_enough() {
    let mut st = Story::settled(1000, 5);
    st.l.limit = 40.0;
    let before = st.l.limit();
    for _ in 0..20 {
        st.now += 100;
        let s = with_heavy(10, 5, 30, 2000, before);
        let u =
            st.l.record(st.now, &s, u32::MAX / 2)
                .expect("an interval ended");
        assert!(u.to >= u.from, "{u:?}");
        assert_eq!((u.samples, u.apart), (10, 30));
    }
    assert!(
        st.l.limit() > before,
        "its cap is demand the limit bound: it grows ({before} -> {})",
        st.l.limit()
    );
}

#[test]
fn a_heavy_clients_answers_judge_only_when_the_others_stay_too_few() {
    let mut st = Story::settled(1000, 5);
    let before = st.l.limit();
    st.now += 100;
    let s = with_heavy(4, 5, 30, 2000, before);
    assert_eq!(
        st.l.record(st.now, &s, u32::MAX / 2),
        None,
        "waits for the others"
    );
    st.now += 100 * (OTHERS_WAIT - 1);
    let u =
        st.l.record(st.now, &Samples::EMPTY, u32::MAX / 2)
            .expect("waited long enough");
    assert_eq!((u.samples, u.apart), (34, 30), "judged by all");
    assert!(u.to < before, "{u:?}");
}

#[test]
fn judged_by_all_counts_each_answer_once() {
    let s = with_heavy(4, 5, 30, 2000, 10);
    assert_eq!(s.judged(5).all(), s.all());
    assert_eq!(s.judged(4), s, "enough of the others: unchanged");
}

#[test]
fn a_burst_of_heavy_answers_alone_ends_no_interval_early() {
    let mut st = Story::settled(1000, 5);
    let limit = st.l.limit();
    // A round of slow requests ending at once: 40 answers, 10 ms into the interval.
    st.now += 10;
    let s = with_heavy(1, 5, 40, 2000, limit);
    assert_eq!(st.l.record(st.now, &s, u32::MAX / 2), None);
}

#[test]
fn a_cap_alone_starts_no_periodic_pinned_measurement() {
    let mut st = Story::settled(1000, 5);
    let remeasures = st.l.view().remeasures;
    // Well past the next re-measurement, demand bound only by a heavy client's cap.
    for _ in 0..150 {
        st.now += 100;
        let limit = st.l.limit();
        let s = with_heavy(20, 5, 10, 2000, limit / 2);
        let u =
            st.l.record(st.now, &s, u32::MAX / 2)
                .expect("an interval ended");
        assert_ne!(u.min_change, MinChange::PinStarted, "{u:?}");
    }
    assert!(
        st.l.view().remeasures > remeasures,
        "the floor measured without a pin"
    );
}

/// A controller at 40 of a 5 ms origin that paused: an interval of 500 ms whose 20 answers
/// took 300 ms on average, pinned.
fn paused(st: &mut Story) -> u32 {
    st.now += 500;
    let u = st.l.record(st.now, &samples(20, 300, 40), 0).unwrap();
    assert_eq!(u.min_change, MinChange::PinStarted);
    st.l.limit()
}

/// Five clean answers of `latency_ms` at the pin, `after_ms` into it: the measurement ends.
fn measured_at_pin(st: &mut Story, after_ms: u64, latency_ms: u64) -> Update {
    st.now += after_ms;
    let pin = st.l.limit();
    let u = st.l.record(st.now, &clean(&[latency_ms; 5], pin), 0);
    let u = u.expect("measured");
    assert_eq!(u.min_change, MinChange::PinMeasured);
    u
}

#[test]
fn a_slowdown_after_which_the_origin_answers_as_before_gives_the_limit_back() {
    let mut st = Story::settled(40, 5);
    assert_eq!(st.l.limit(), 40);
    let pin = paused(&mut st);
    assert!(pin < 10, "pinned at {pin}");
    let u = measured_at_pin(&mut st, 10, 5);
    assert_eq!(u.to, 40, "the limit from before the slowdown");
    // Again within the re-measurement period: an origin whose capacity fell while its floor
    // did not (fewer workers) looks so at every slowdown, and is measured as slowed instead.
    for _ in 0..3 {
        st.saturated(5);
    }
    paused(&mut st);
    let u = measured_at_pin(&mut st, 10, 5);
    assert!(u.to < 40, "restored again: {}", u.to);
    // A period later, a slowdown that ends so is a pause again.
    for _ in 0..100 {
        st.saturated(5);
    }
    assert_eq!(st.l.limit(), 40);
    paused(&mut st);
    let u = measured_at_pin(&mut st, 10, 5);
    assert_eq!(u.to, 40);
}

#[test]
fn a_slowdown_after_which_the_origin_is_slower_is_not_given_the_limit_back() {
    let mut st = Story::settled(40, 5);
    paused(&mut st);
    let u = measured_at_pin(&mut st, 30, 30);
    assert_eq!(u.min_latency_ms, 30.0);
    assert!(u.to < 40, "restored: {}", u.to);
}

#[test]
fn a_slowdown_at_the_rate_before_is_a_queue_and_not_given_the_limit_back() {
    // An origin with a queue answers at its capacity, as fast as before, each answer late:
    // the limit was too high for it, whatever floor its pin then finds.
    let mut st = Story::settled(40, 5);
    let u = st.saturated(150);
    assert_eq!(u.min_change, MinChange::PinStarted);
    let u = measured_at_pin(&mut st, 10, 5);
    assert!(u.to < 40, "restored: {}", u.to);
}

/// The first interval a pause of a controller at 40 of a 5 ms origin ends: 20 answers from
/// before the pause, at 5 ms, flushed by a shed in it 300 ms on.
fn ended_in_a_pause(st: &mut Story) -> Update {
    st.now += 300;
    let u = st.l.record(st.now, &samples(20, 5, 40), 0).unwrap();
    assert_eq!((u.to, u.min_change), (40, MinChange::None));
    u
}

/// An interval `after_ms` on of 20 answers of `latency_ms`, `inflight` at most in flight,
/// that pins the limit.
fn pinned_after(st: &mut Story, after_ms: u64, latency_ms: u64, inflight: u32) -> Update {
    st.now += after_ms;
    let u = st.l.record(st.now, &samples(20, latency_ms, inflight), 0);
    let u = u.expect("an interval ended");
    assert_eq!(u.min_change, MinChange::PinStarted);
    u
}

/// The late answers of a pause of a controller at 40 (300 ms, at the limit) pin it, and the
/// measurement that finds the old floor gives the limit from before the pause back.
fn slowed_and_given_back(st: &mut Story) {
    pinned_after(st, 50, 300, 40);
    let u = measured_at_pin(st, 10, 5);
    assert_eq!(u.to, 40, "the limit from before the pause");
}

#[test]
fn a_pause_whose_first_interval_looks_calm_is_still_a_pause() {
    // nginx's workers flush at their next answer or shed: a shed in the pause flushes the
    // answers from before it. Taken as calm, that interval's rate was the reference, and the
    // slowdown's answers, at once after it, did not look like a pause.
    let mut st = Story::settled(40, 5);
    ended_in_a_pause(&mut st);
    slowed_and_given_back(&mut st);
}

#[test]
fn the_late_answers_of_a_pause_pin_with_the_limit_no_longer_reached() {
    // The interval that spans the pause reaches the limit and only cuts (10 ms on average:
    // one late answer among those from before); the late answers end the next one, as
    // in-flight falls below the limit.
    let mut st = Story::settled(40, 5);
    st.now += 500;
    let u = st.l.record(st.now, &samples(20, 10, 40), 0).unwrap();
    assert!(u.reached && u.to < 40, "{u:?}");
    assert_eq!(u.min_change, MinChange::None);
    let below = st.l.limit() - 1;
    assert!(!pinned_after(&mut st, 100, 300, below).reached);
    let u = measured_at_pin(&mut st, 10, 5);
    assert_eq!(u.to, 40, "the limit from before the pause");
    // The measurement ended the pause: a slowdown that reaches no limit now pins nothing.
    st.now += 100;
    let u = st.l.record(st.now, &samples(20, 300, 10), 0).unwrap();
    assert_ne!(u.min_change, MinChange::PinStarted, "{u:?}");
}

#[test]
fn a_periodic_measurement_due_in_a_pause_gives_the_limit_back() {
    let mut st = Story::settled(40, 5);
    st.l.next_remeasure_ms = st.now;
    st.now += 500;
    let u = st.l.record(st.now, &samples(20, 10, 40), 0).unwrap();
    assert_eq!(u.min_change, MinChange::PinStarted);
    // Half the limit, and half again: latency fell with it.
    st.now += 10;
    let pin = st.l.limit();
    let u = st.l.record(st.now, &clean(&[5; 5], pin), 0).unwrap();
    assert_eq!(u.min_change, MinChange::PinHalved);
    let u = measured_at_pin(&mut st, 10, 5);
    assert_eq!(u.to, 40, "the limit from before the pause");
}

#[test]
fn a_second_calm_interval_at_a_lower_rate_is_demand_that_fell() {
    // Two calm intervals at a third of the rate: the second is the new reference, and a
    // queue at that rate is no pause.
    let mut st = Story::settled(40, 5);
    ended_in_a_pause(&mut st);
    ended_in_a_pause(&mut st);
    pinned_after(&mut st, 300, 150, 40);
    let u = measured_at_pin(&mut st, 10, 5);
    assert!(u.to < 40, "restored: {}", u.to);
}

#[test]
fn a_client_below_the_limit_cannot_make_a_pause() {
    // Calm with 5 in flight of 40; then fewer answers with 10 in flight (a rate that dips, a
    // client's own requests held open), and a few slow ones of its own that make an interval
    // slow: below the limit, neither is a pause, and nothing is pinned.
    let mut st = Story::settled(40, 5);
    st.step(5, 5);
    st.step(5, 5);
    st.now += 300;
    let u = st.l.record(st.now, &samples(20, 5, 10), 0).unwrap();
    assert_eq!(u.min_change, MinChange::None);
    st.now += 100;
    let u = st.l.record(st.now, &samples(20, 300, 10), 0).unwrap();
    assert_ne!(u.min_change, MinChange::PinStarted, "{u:?}");
    assert_eq!(st.l.limit(), 40);
}

#[test]
fn a_shed_at_the_full_limit_shows_it_full_in_a_pause() {
    // The answers from before the pause that end the interval came from a worker whose own
    // admissions stopped short of the limit; another's filled it, and its requests were
    // shed at it.
    let mut st = Story::settled(40, 5);
    st.step(5, 10);
    st.now += 300;
    let mut s = samples(20, 5, 30);
    s.add_full();
    let u = st.l.record(st.now, &s, 0).unwrap();
    assert_eq!((u.to, u.min_change), (40, MinChange::None));
    slowed_and_given_back(&mut st);
}

#[test]
fn a_pause_is_over_a_few_intervals_after_it_showed() {
    // A dip that filled the limit once, then intervals just above the tolerance: a light
    // client's few slow answers, below the limit, long after, pin nothing.
    let mut st = Story::settled(40, 5);
    ended_in_a_pause(&mut st);
    for _ in 0..5 {
        assert_ne!(st.step(7, 25).min_change, MinChange::PinStarted);
    }
    st.now += 100;
    let mut s = samples(15, 5, 25);
    s.merge(&samples(5, 200, 25));
    let u = st.l.record(st.now, &s, 0).unwrap();
    assert_ne!(u.min_change, MinChange::PinStarted, "{u:?}");
}

#[test]
fn a_queue_long_after_the_last_calm_interval_is_no_pause() {
    // The origin lost half its capacity, its floor the same: answers at half the rate, late,
    // the limit full. Never calm again, the last calm interval stays the reference unless it
    // ages; then every periodic measurement would find the old floor and give back the
    // limit that builds the queue, once a period.
    let mut st = Story::settled(40, 5);
    let mut restored = 0;
    for _ in 0..1000 {
        let limit = st.l.limit();
        if st.l.phase == PHASE_PROBING {
            st.now += 20;
            let u = st.l.record(st.now, &clean(&[5; 5], limit), u32::MAX);
            let u = u.expect("an interval ended");
            restored += u32::from(u.min_change == MinChange::PinMeasured && u.to >= 40);
            continue;
        }
        st.now += 200;
        let latency = (5 * u64::from(limit) / 20).max(5);
        st.l.record(st.now, &samples(20, latency, limit), u32::MAX);
    }
    assert!(restored <= 1, "given back {restored} times");
}
