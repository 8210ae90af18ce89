//! A probe no client can time (issue 36). Without `probe_uri` the half-open probe is the first
//! user request after the cooldown (or the probe spacing) ends; a client told that moment —
//! `Retry-After`, `grpc-retry-pushback-ms`, the status page — could be that request every
//! time and, asking for a URL the origin fails on, keep the breaker open. So the moment is
//! drawn in the jitter's range and clients are told the range's end: the same whatever the
//! draw, never the moment itself, never before it. Told with a fake clock and chosen draws.

mod common;

use circuit_breaker_core::breaker::{
    Admission, Attempt, BreakerConfig, FailureClass, FailureSet, Gate, OwnedBreaker, Ticket,
};
use circuit_breaker_core::snapshot::State;
use common::*;

/// Draws spread over the whole `u32` range (a golden-ratio walk).
fn draws(n: u32) -> impl Iterator<Item = u32> {
    (0..n).map(|i| i.wrapping_mul(2_654_435_761))
}

/// When the breaker will let a probe start, as it keeps it (the gate's `until_ms`).
fn moment(s: &mut Story) -> u64 {
    match s.b.breaker().gate() {
        Gate::Reject { until_ms, .. } => until_ms,
        other => panic!("expected an open breaker's gate, got {other:?}"),
    }
}

/// The first millisecond from now on at which a request would get the probe (on a copy).
fn first_probe_from(s: &Story, limit_ms: u64) -> u64 {
    let mut b = s.b.clone();
    let mut now = s.now;
    while now <= s.now + limit_ms {
        if let Admission::Probe(_) = b.breaker().admit(now, 0, 1, &|_| true, true).admission {
            return now;
        }
        now += 1;
    }
    panic!("no probe within {limit_ms} ms");
}

/// What the lock-free gate tells a request at `now_ms`.
fn gate_says(s: &mut Story, now_ms: u64) -> u64 {
    match s.b.breaker().gate().admit(now_ms, 0) {
        Some(Admission::Reject { retry_after_ms }) => retry_after_ms,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// Checks one open period: every request before the moment is told the same end, after the
/// moment, and a request made when told never precedes the moment. Returns the moment's
/// offset from `opened`.
fn check_open_period(s: &mut Story, opened: u64, told_ms: u64) -> u64 {
    let m = moment(s);
    let jitter = s.b.hdr.config().jitter;
    for at in [opened, opened + 1, (opened + m) / 2, m - 1] {
        let said = gate_says(s, at);
        assert_eq!(
            said,
            opened + told_ms - at,
            "the lock-free gate at +{}",
            at - opened
        );
        if jitter > 0 {
            assert_ne!(at + said, m, "told the moment itself");
        }
        assert!(at + said >= m, "told a time before the probe may start");
    }
    s.now = m - 1;
    let said = s.rejected();
    assert_eq!(said, opened + told_ms - s.now, "the locked path");
    assert_eq!(
        s.view().retry_at_ms,
        Some(opened + told_ms),
        "the status page"
    );
    assert_eq!(
        s.view().cooldown_ms,
        told_ms,
        "the status page: since + cooldown"
    );
    assert_eq!(
        first_probe_from(s, 1),
        m,
        "the probe starts at the moment, not before"
    );
    m - opened
}

#[test]
fn retry_after_is_the_end_of_the_cooldowns_range_whatever_the_draw() {
    // The defaults: open=30s jitter=20%: drawn in [24 s, 36 s), told 36 s.
    let mut buckets = [0u32; 12];
    for rnd in draws(3000) {
        let mut s = Story::new(BreakerConfig::default());
        s.rnd = rnd;
        s.trip();
        let c = check_open_period(&mut s, T0, 36_000);
        assert!((24_000..36_000).contains(&c), "rnd {rnd}: {c}");
        buckets[((c - 24_000) / 1000) as usize] += 1;
    }
    // Spread over the whole range, not a few points: 250 a second if uniform.
    assert!(
        buckets.iter().all(|&n| (150..=350).contains(&n)),
        "{buckets:?}"
    );
}

#[test]
fn an_origins_retry_after_is_a_range_too() {
    // open=1s, but the origin said Retry-After: 7: drawn in [7 s, 8.4 s), told 8.4 s — a
    // floor alone would be a moment as easy to bet on as the cooldown's end.
    let (mut lo, mut hi) = (u64::MAX, 0);
    for rnd in draws(1000) {
        let mut s = Story::new(BreakerConfig {
            open_ms: 1000,
            ..BreakerConfig::default()
        });
        s.rnd = rnd;
        s.request(&retry_after(503, 7));
        s.requests(19, &http(500)).expect("tripped");
        let c = check_open_period(&mut s, T0, 8400);
        (lo, hi) = (lo.min(c), hi.max(c));
    }
    assert!(
        (7000..7100).contains(&lo) && (8301..8400).contains(&hi),
        "{lo}..{hi}"
    );

    // Capped by max_open, the range stays a range: [48 s, 60 s), told 60 s.
    let (mut lo, mut hi) = (u64::MAX, 0);
    for rnd in draws(1000) {
        let mut s = Story::new(BreakerConfig {
            open_ms: 1000,
            max_open_ms: 60_000,
            ..BreakerConfig::default()
        });
        s.rnd = rnd;
        s.request(&retry_after(503, 3600));
        s.requests(19, &http(500)).expect("tripped");
        let c = check_open_period(&mut s, T0, 60_000);
        (lo, hi) = (lo.min(c), hi.max(c));
    }
    assert!(
        (48_000..48_200).contains(&lo) && (59_801..60_000).contains(&hi),
        "{lo}..{hi}"
    );
}

#[test]
fn a_failed_probes_doubled_cooldown_is_told_the_same_way() {
    let mut failures = FailureSet::DEFAULT;
    failures.insert(FailureClass::Http503RetryAfter);
    for rnd in draws(500) {
        let mut s = Story::new(BreakerConfig {
            open_ms: 2000,
            failures,
            ..BreakerConfig::default()
        });
        s.rnd = rnd;
        s.trip();
        let c = check_open_period(&mut s, T0, 2400);
        s.now = T0 + c;
        let p = s.probe();
        s.record(p, &http(500)).transition.expect("reopened");
        // Base 4 s: drawn in [3.2 s, 4.8 s), told 4.8 s.
        let opened = s.now;
        let c = check_open_period(&mut s, opened, 4800);
        assert!((3200..4800).contains(&c), "{c}");
        // A failed probe that said Retry-After: 12, above the base of 8 s: [12 s, 14.4 s),
        // told 14.4 s.
        s.now = opened + c;
        let p = s.probe();
        s.record(p, &retry_after(503, 12))
            .transition
            .expect("reopened");
        let opened = s.now;
        let c = check_open_period(&mut s, opened, 14_400);
        assert!((12_000..14_400).contains(&c), "{c}");
    }
}

#[test]
fn the_probe_spacing_is_not_told_either() {
    // After a good first probe, the rest of a hard outage's run comes at its own pace (166 ms
    // ± 20 %); a client is told the end of the probe spacing's range from the last probe's
    // start (1.2 s), the same whatever the draws, and the next probe never comes after it.
    let mut paces = Vec::new();
    for rnd in draws(500) {
        let mut s = Story::new(BreakerConfig::default());
        s.rnd = rnd;
        s.trip();
        s.now = moment(&mut s);
        let start = s.now;
        let p = s.probe();
        // In flight: a whole spacing's range from now (one probe_interval was a moment to time).
        s.wait(5);
        assert_eq!(s.rejected(), 1200);
        s.record(p, &ok());
        let next = first_probe_from(&s, 1200);
        paces.push(next - start);
        for at in [s.now, next - 1] {
            s.now = at;
            let said = s.rejected();
            assert_eq!(said, start + 1200 - at, "at +{}", at - start);
            assert!(at + said > next);
            assert_eq!(s.view().retry_at_ms, Some(start + 1200), "the status page");
        }
    }
    let (lo, hi) = (*paces.iter().min().unwrap(), *paces.iter().max().unwrap());
    assert!(lo < 150 && hi > 195 && hi <= 206, "{lo}..{hi}");

    // A probe held for most of the spacing: the next one is the spacing's own
    // draw, in [800 ms, 1200 ms) from the last start (or the run's pace after its answer,
    // if sooner), told 1200 ms.
    let mut spacings = Vec::new();
    for rnd in draws(500) {
        let mut s = Story::new(BreakerConfig::default());
        s.rnd = rnd;
        s.trip();
        s.now = moment(&mut s);
        let start = s.now;
        let p = s.probe();
        s.wait(790);
        s.record(p, &Attempt::http(200, 790));
        let next = first_probe_from(&s, 1200);
        assert!(next < start + 1200, "{}", next - start);
        assert_eq!(s.rejected(), start + 1200 - s.now);
        spacings.push(next - start);
    }
    let (lo, hi) = (
        *spacings.iter().min().unwrap(),
        *spacings.iter().max().unwrap(),
    );
    assert!((800..=830).contains(&lo) && hi < 1200, "{lo}..{hi}");
}

#[test]
fn without_jitter_there_is_nothing_to_hide() {
    // jitter=0%: the moment is the cooldown's end, and Retry-After tells it (docs/behaviour.md says
    // so: jitter is what hides it).
    let mut s = Story::new(cfg());
    s.trip();
    assert_eq!(check_open_period(&mut s, T0, 30_000), 30_000);
}

#[test]
fn active_probes_tell_when_the_next_is_due() {
    // No client ever probes: Retry-After counts down to the next active probe, as before.
    let mut s = Story::new(BreakerConfig {
        active: true,
        ..BreakerConfig::default()
    });
    s.rnd = u32::MAX / 3;
    s.trip();
    let due = s.b.hdr.active_probe_due_ms().expect("due");
    assert!((T0 + 800..T0 + 1200).contains(&due), "{}", due - T0);
    assert_eq!(s.rejected(), due - T0);
    assert_eq!(moment(&mut s), due);
    assert_eq!(s.view().retry_at_ms, Some(due));
}

/// xorshift64*, seeded: the legitimate client's gaps and the breaker's draws.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Who got each probe, and when the breaker closed.
#[derive(Debug, Default)]
struct Race {
    attacker: u32,
    legit: u32,
    closed_after_ms: Option<u64>,
}

/// The attack on a breaker with the defaults but `open=2s`: a legitimate client sends a
/// good request every 50–100 ms; an attacker, after each turned-away request, waits what
/// `wait` says (to the millisecond, as `grpc-retry-pushback-ms` gives it), arrives 1 ms
/// later and asks for a URL the origin fails on. Each request that passes takes 5 ms at the
/// origin. Runs until the breaker closes, or `limit_ms`.
fn race(seed: u64, limit_ms: u64, wait: fn(&mut OwnedBreaker, u64, u64) -> u64) -> Race {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut b = OwnedBreaker::new(
        BreakerConfig {
            open_ms: 2000,
            ..BreakerConfig::default()
        },
        T0,
    );
    let mut now = T0;
    for _ in 0..20 {
        b.breaker().admit(now, 0, 1, &|_| true, true);
        b.breaker().record(now, 0, Ticket::Normal, &http(500), true);
    }
    assert_eq!(b.breaker().state(), State::Open);
    let mut race = Race::default();
    let (mut legit_at, mut attacker_at) = (now + 1 + rng.next() % 100, now + 1);
    // The probe in flight: (ends at, ticket, good).
    let mut flight: Option<(u64, Ticket, bool)> = None;
    while now < T0 + limit_ms {
        now = legit_at.min(attacker_at);
        if let Some((end, ticket, good)) = flight.filter(|f| f.0 <= now) {
            let outcome = if good { ok() } else { http(500) };
            let r = b
                .breaker()
                .record(end, rng.next() as u32, ticket, &outcome, true);
            flight = None;
            if r.state == State::Closed {
                race.closed_after_ms = Some(end - T0);
                return race;
            }
        }
        let legit = legit_at <= attacker_at;
        let d = b
            .breaker()
            .admit(now, rng.next() as u32, 1, &|_| true, true);
        match d.admission {
            Admission::Probe(t) => {
                flight = Some((now + 5, t, legit));
                if legit {
                    race.legit += 1;
                } else {
                    race.attacker += 1;
                }
            }
            Admission::Reject { retry_after_ms } if !legit => {
                attacker_at = now + wait(&mut b, now, retry_after_ms) + 1;
            }
            _ => {}
        }
        if legit {
            legit_at = now + 50 + rng.next() % 51;
        } else if !matches!(d.admission, Admission::Reject { .. }) {
            // Its failing request answered: it asks again at once for its wait.
            attacker_at = now + 6;
        }
    }
    race
}

#[test]
fn a_client_that_comes_back_when_told_rarely_gets_the_probe() {
    let (mut attacker, mut legit, mut slowest) = (0, 0, 0);
    for seed in 1..=40 {
        let r = race(seed, 120_000, |_, _, told| told);
        let closed = r
            .closed_after_ms
            .unwrap_or_else(|| panic!("seed {seed}: {r:?}"));
        slowest = slowest.max(closed);
        attacker += r.attacker;
        legit += r.legit;
    }
    // Told the end of the range, the attacker comes back after a legitimate request took
    // the probe, unless none came in between (50–100 ms apart, in a range of 800 ms or more).
    assert!(
        attacker * 5 <= legit,
        "attacker {attacker}, legitimate {legit}"
    );
    assert!(slowest <= 20_000, "every run closed, within {slowest} ms");
}

#[test]
fn a_client_told_the_moment_would_keep_the_breaker_open() {
    // The same attacker told when the probe may really start (what Retry-After said before
    // issue 36, `probe_wait_ms`): it gets nearly every probe, and the breaker closes only in
    // the few runs where a legitimate request came within the millisecond before it (or its
    // request met a probe in flight, and was told to wait a whole probe_interval).
    let (mut attacker, mut legit, mut closed) = (0, 0, 0);
    for seed in 1..=40 {
        let r = race(seed, 120_000, |b, now, _| b.breaker().probe_wait_ms(now));
        attacker += r.attacker;
        legit += r.legit;
        closed += u32::from(r.closed_after_ms.is_some());
    }
    assert!(
        attacker >= 4 * legit,
        "attacker {attacker}, legitimate {legit}"
    );
    assert!(closed <= 8, "closed in {closed} of 40 runs");
}

#[test]
fn a_relapses_run_is_told_whole() {
    // A hard trip that relapses needs 9 good probes in a row, 333 ms ± 20 % apart: a client
    // told only the spacing's end (1.2 s) came back in the middle of the run, where a probe
    // was as often due as not, and a failure it made there doubled the run again. It is told
    // twice the rest of the run at its pace, from the last probe's start.
    let mut s = Story::new(BreakerConfig::default());
    s.trip();
    for good in [false, true, false] {
        s.now = first_probe_from(&s, 400_000);
        let p = s.probe();
        let outcome = if good { ok() } else { http(500) };
        s.record(p, &outcome);
    }
    assert_eq!(s.view().probes_needed, 9, "relapsed");
    s.now = first_probe_from(&s, 400_000);
    let start = s.now;
    let p = s.probe();
    s.record(p, &ok());
    assert_eq!(s.view().consecutive_probe_successes, 1);
    // 8 to go at 333 ms (at most 399 with the jitter), twice: 6.4 s from the last start.
    assert_eq!(s.rejected(), start + 2 * 8 * 399 - s.now);
    // In flight, from its start: the probe in flight is not counted good yet.
    let next = first_probe_from(&s, 1200);
    s.now = next;
    let _p = s.probe();
    s.wait(5);
    assert!(next < start + 1200, "the run's pace");
    assert_eq!(s.rejected(), next + 2 * 8 * 399 - s.now);
}
