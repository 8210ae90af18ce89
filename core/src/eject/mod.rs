//! Ejecting a bad server from a good pool: each server of a breaker-enabled upstream has a
//! breaker of its own ([`Breaker`], the same machine as the upstream's), whose states read
//! as the server's place in the pool:
//!
//! | breaker | server | the balancer |
//! |---|---|---|
//! | closed | `in` | picks it as usual |
//! | open | `ejected` | skips it, until its cooldown ends |
//! | half-open | `probing` | still skips it: one request of the whole instance is sent to it |
//!
//! With `probe_uri` on the upstream the server's breaker has active probes: it stays open
//! (`ejected`) until the module's own probes of that server, one per `probe_interval`,
//! return it ([`record_probe`]), and no user request is sent to it as a probe
//! ([`claim_probe`] never claims one).
//!
//! A server's breaker takes every attempt sent to it, and trips on the server's own rates
//! ([`server_config`]). At most [`max_ejected`] servers of a pool are out at once (Envoy's
//! `max_ejection_percent`): past that, [`record`] lets the window keep counting but the
//! server stays in, and the upstream's breaker (which judges what clients got) decides. A
//! server returns after one good probe — one that follows a hard failure; a brownout needs a
//! run of them, as for any breaker — and each ejection soon after a return waits twice as
//! long as the last (`repeat_backoff`), up to `max_time`.
//!
//! Pure and clock-injected; the shell keeps the breakers in shared memory and the count of
//! servers out beside them.

pub mod explain;
pub mod outlier;
pub mod ramp;
pub mod spec;

pub use explain::{explain, may_open, Explained, Standing};

use crate::breaker::{
    Admission, Attempt, Breaker, BreakerConfig, Classified, Decision, ProbeResult, Recorded,
    Ticket, Transition,
};
use crate::snapshot::State;
use spec::EjectSpec;

/// The breaker of one server of an upstream whose breaker is `upstream`, ejecting by `spec`:
/// the upstream's failure classes, window, slow threshold, jitter and probe rules, with the
/// server's own rates (the upstream's when `spec` leaves them out), `min_requests`, and
/// ejection time (`time` the first cooldown, `max_time` its cap), `probes=1` (a server that
/// answers again is let back in by one good probe after a hard failure), `repeat_backoff`
/// (a flapping server stays out longer each time), the spec's recovery ramp from the
/// upstream's `ramp_start` (a returning server's share of its picks, [`ramp`]; the caller
/// sets `ramp=off` where the balancer picks by a key), and no fleet suspicion (peers judge
/// origins, not one instance's view of a server).
///
/// Active probes follow the upstream's: with `probe_uri` an ejected server is probed by the
/// module's prober, never by a user request, as any active-probe breaker is — the first
/// probe one `probe_interval` after the ejection (doubled on each ejection soon after a
/// return, up to `max_time`; `time` is not used), then one per `probe_interval`, a failed
/// one doubling nothing; without it, one user request is the probe, once `time` (doubled
/// after a failed probe) is over. Either way one good probe returns a
/// server ejected by a hard failure (`probes=1`): a returning server takes only its share of
/// the traffic, a relapse ejects it again within `min_requests` attempts for twice as long
/// (`repeat_backoff`), and a brownout still needs its run of good probes.
pub fn server_config(upstream: &BreakerConfig, spec: &EjectSpec) -> BreakerConfig {
    BreakerConfig {
        min_requests: spec.min_requests.max(1),
        failure_rate: spec.failure_rate.unwrap_or(upstream.failure_rate),
        slow_rate: spec.slow_rate.unwrap_or(upstream.slow_rate),
        open_ms: spec.time_ms,
        max_open_ms: spec.max_time_ms.max(spec.time_ms),
        probes: 1,
        ramp_ms: spec.server_ramp_ms(),
        suspect_min: spec.min_requests.max(1),
        repeat_backoff: true,
        // A server's breaker opens on its own window: its question would need the pool's
        // ejection cap at the probe's answer.
        confirm_ms: 0,
        ..*upstream
    }
}

/// How many of `servers` may be out at once with `share` (hundredths of a percent) allowed:
/// the share rounded down, but at least one of a pool of two or more (so that a pool of two
/// at 50 %, or of three at 34 %, can lose one), and never one of a pool of one (its upstream
/// breaker protects a single server).
pub fn max_ejected(servers: usize, share: u32) -> u32 {
    if servers < 2 {
        return 0;
    }
    let servers = u32::try_from(servers).unwrap_or(u32::MAX);
    let share = u64::from(share.min(10_000));
    let n = (u64::from(servers) * share / 10_000) as u32;
    n.clamp(1, servers)
}

/// Whether a server whose breaker is in `state` is out of the pool (ejected or probing).
pub fn is_out(state: State) -> bool {
    state != State::Closed
}

/// `in`, `probing` or `ejected`: a server's place in the pool, as the status page names it.
pub fn place_name(state: State) -> &'static str {
    match state {
        State::Closed => "in",
        State::HalfOpen => "probing",
        State::Open => "ejected",
    }
}

/// A server's move in or out of the pool, to be logged and applied to the balancer's peers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Move {
    /// Out of the pool (the breaker opened from closed).
    Ejected(Transition),
    /// Back in (the breaker closed).
    Returned(Transition),
    /// Out again after a failed probe (no change for the balancer, but a line for the log).
    Kept(Transition),
}

impl Move {
    fn of(t: Transition) -> Option<Move> {
        match (is_out(t.from), is_out(t.to)) {
            (false, true) => Some(Move::Ejected(t)),
            (true, false) => Some(Move::Returned(t)),
            // Open → half-open is the probe starting: nothing to tell.
            (true, true) if t.to == State::Open => Some(Move::Kept(t)),
            _ => None,
        }
    }

    /// Whether the server left or rejoined the pool (the balancer must follow).
    pub fn changes_pool(&self) -> bool {
        !matches!(self, Move::Kept(_))
    }

    /// `ejected` or `returned`, and why, with when it may return (`back in 10s`): a log
    /// line's words after the server's address.
    pub fn words(&self) -> (&'static str, String) {
        let (verb, t) = match self {
            Move::Ejected(t) | Move::Kept(t) => ("ejected", t),
            Move::Returned(t) => ("returned", t),
        };
        let back = t.detail.as_deref().map(|d| {
            d.strip_prefix("retry in ")
                .map_or(d.to_owned(), |s| format!("back in {s}"))
        });
        (
            verb,
            crate::breaker::Why(&t.reason, back.as_deref()).to_string(),
        )
    }
}

/// The servers of one pool that are out, kept beside their breakers (under the same lock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pool {
    /// Servers out now.
    pub out: u32,
    /// The cap ([`max_ejected`]).
    pub max: u32,
}

impl Pool {
    /// Whether one more server may be ejected.
    pub fn may_eject(&self) -> bool {
        self.out < self.max
    }

    fn follow(&mut self, m: &Option<Move>) {
        match m {
            Some(Move::Ejected(_)) => self.out = self.out.saturating_add(1),
            Some(Move::Returned(_)) => self.out = self.out.saturating_sub(1),
            _ => {}
        }
    }
}

/// Records an attempt sent to the server whose breaker is `b` with `ticket`: the window
/// counts it, and it ejects the server when its rate crosses — unless the pool is at its
/// cap. Keeps `pool.out` in step.
pub fn record(
    b: &mut Breaker<'_>,
    pool: &mut Pool,
    now_ms: u64,
    rnd: u32,
    ticket: Ticket,
    attempt: &Attempt,
) -> (Recorded, Option<Move>) {
    let c = Classified::of(*attempt, b.config());
    record_classified(b, pool, now_ms, rnd, ticket, &c)
}

/// [`record`] of an attempt classified already.
pub fn record_classified(
    b: &mut Breaker<'_>,
    pool: &mut Pool,
    now_ms: u64,
    rnd: u32,
    ticket: Ticket,
    c: &Classified,
) -> (Recorded, Option<Move>) {
    let r = b.record_classified(now_ms, rnd, ticket, c, pool.may_eject());
    let m = r.transition.clone().and_then(Move::of);
    pool.follow(&m);
    (r, m)
}

/// Ejects the server whose breaker is `b` at once, for `reason` — it failed the probe of its
/// upstream's open breaker (see [`mod@explain`]) — unless the pool is at its cap, or the server
/// is out already or held in by the operator. Keeps `pool.out` in step.
pub fn eject_now(
    b: &mut Breaker<'_>,
    pool: &mut Pool,
    now_ms: u64,
    rnd: u32,
    reason: String,
) -> Option<Move> {
    if !pool.may_eject() {
        return None;
    }
    let m = b.trip(now_ms, rnd, reason).and_then(Move::of);
    pool.follow(&m);
    m
}

/// Ejects the server whose breaker is `b` at once as an outlier of its pool (see
/// [`outlier`]), a latency outlier's probes held to `factor` (hundredths) of the pool's
/// latency — unless the pool is at its cap, or the server is out already or held in by the
/// operator. Keeps `pool.out` in step.
pub fn eject_outlier(
    b: &mut Breaker<'_>,
    pool: &mut Pool,
    now_ms: u64,
    rnd: u32,
    o: &outlier::Outlier,
    factor: u32,
) -> Option<Move> {
    if !pool.may_eject() {
        return None;
    }
    let rate = match *o {
        outlier::Outlier::Failures {
            failures, requests, ..
        } => u32::try_from(failures.saturating_mul(10_000) / requests.max(1)).unwrap_or(10_000),
        outlier::Outlier::Latency { .. } => 0,
    };
    let m = b
        .trip_outlier(now_ms, rnd, o.to_string(), o.probe_limit_ms(factor), rate)
        .and_then(Move::of);
    pool.follow(&m);
    m
}

/// Records the module's own probe of the ejected server whose breaker is `b` (see
/// [`server_config`]: with `probe_uri`), sent with `ticket` from [`Breaker::active_probe`]:
/// judged by `probe_status` alone; a good one (or the run a brownout needs) returns the
/// server, a failed one keeps it out until the next probe, one `probe_interval` later.
/// Keeps `pool.out` in step.
pub fn record_probe(
    b: &mut Breaker<'_>,
    pool: &mut Pool,
    now_ms: u64,
    rnd: u32,
    ticket: Ticket,
    probe: &ProbeResult,
) -> (Recorded, Option<Move>) {
    let r = b.record_probe(now_ms, rnd, ticket, probe);
    let m = r.transition.clone().and_then(Move::of);
    pool.follow(&m);
    (r, m)
}

/// Asks whether a request may probe the ejected server whose breaker is `b` (its cooldown
/// over): `Some(ticket)` for the one request of the instance that goes to it. `retry_in_ms`
/// is set to when to ask again otherwise (`None`: do not ask; an active-probe breaker, or a
/// server in the pool).
pub fn claim_probe(
    b: &mut Breaker<'_>,
    now_ms: u64,
    rnd: u32,
    owner: u32,
    owner_alive: &dyn Fn(u32) -> bool,
) -> (Option<Ticket>, Option<u64>) {
    if !is_out(b.state()) || b.config().active || b.forced().is_some() {
        return (None, None);
    }
    let Decision { admission, .. } = b.admit(now_ms, rnd, owner, owner_alive, true);
    match admission {
        Admission::Probe(t) => (Some(t), None),
        // When the probe may really start, not the end of the jitter's range that clients
        // are told: no client is told a server's return, and asking again that late would
        // hold an ejected server out longer than its cooldown.
        Admission::Reject { .. } => (None, Some(b.probe_wait_ms(now_ms).max(1))),
        Admission::Recovering { retry_after_ms } => (None, Some(retry_after_ms.max(1))),
        // A dry run lets a would-be rejection through; it sends no probe.
        Admission::Pass { .. } => (None, Some(u64::from(b.config().probe_interval_ms).max(1))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::OwnedBreaker;

    const T0: u64 = 1_764_484_800_000;

    /// Ten attempts answered `status`, from `T0` on, one a millisecond: a server ejects.
    fn fail_ten(s: &mut OwnedBreaker, pool: &mut Pool, status: u16) {
        for i in 0..10 {
            let bad = Attempt::http(status, 5);
            record(&mut s.breaker(), pool, T0 + i, 0, Ticket::Normal, &bad);
        }
    }

    fn upstream() -> BreakerConfig {
        BreakerConfig {
            jitter: 0,
            ..BreakerConfig::default()
        }
    }

    #[test]
    fn a_server_breaker_takes_the_upstream_rules_and_its_own_rates() {
        let up = BreakerConfig {
            slow_ms: 800,
            slow_rate: 4000,
            active: true,
            ..upstream()
        };
        let c = server_config(&up, &EjectSpec::default());
        assert_eq!(
            (c.failure_rate, c.slow_rate, c.slow_ms, c.min_requests),
            (5000, 4000, 800, 10)
        );
        assert_eq!((c.open_ms, c.max_open_ms, c.probes), (10_000, 300_000, 1));
        assert!(c.repeat_backoff);
        assert_eq!(
            (c.ramp_ms, c.ramp_start),
            (10_000, up.ramp_start),
            "returns ramping"
        );
        let off = EjectSpec {
            ramp_ms: Some(0),
            ..EjectSpec::default()
        };
        assert_eq!(server_config(&up, &off).ramp_ms, 0);
        assert!(c.active, "probe_uri: the prober probes an ejected server");
        let passive = server_config(
            &BreakerConfig {
                active: false,
                ..up
            },
            &EjectSpec::default(),
        );
        assert!(!passive.active, "no probe_uri: a user request probes it");
        assert_eq!((c.window_s, c.failures, c.jitter), (10, up.failures, 0));
        let own = server_config(
            &up,
            &EjectSpec {
                failure_rate: Some(3000),
                slow_rate: Some(2000),
                min_requests: 4,
                time_ms: 2000,
                max_time_ms: 8000,
                max_ejected: 10_000,
                relative: Default::default(),
                ramp_ms: Some(30_000),
            },
        );
        assert_eq!(
            (own.failure_rate, own.slow_rate, own.min_requests),
            (3000, 2000, 4)
        );
        assert_eq!(
            (own.open_ms, own.max_open_ms, own.ramp_ms),
            (2000, 8000, 30_000)
        );
    }

    #[test]
    fn the_cap_rounds_down_but_lets_one_of_two_go() {
        assert_eq!(max_ejected(0, 5000), 0);
        assert_eq!(
            max_ejected(1, 10_000),
            0,
            "a single server is never ejected"
        );
        assert_eq!(max_ejected(2, 5000), 1);
        assert_eq!(max_ejected(2, 100), 1, "at least one of two or more");
        assert_eq!(max_ejected(3, 5000), 1);
        assert_eq!(max_ejected(3, 3400), 1);
        assert_eq!(max_ejected(4, 5000), 2);
        assert_eq!(max_ejected(4, 10_000), 4);
        assert_eq!(max_ejected(10, 3333), 3);
        assert_eq!(max_ejected(usize::MAX, 10_000), u32::MAX);
    }

    #[test]
    fn places_are_named_for_the_pool() {
        assert_eq!(place_name(State::Closed), "in");
        assert_eq!(place_name(State::HalfOpen), "probing");
        assert_eq!(place_name(State::Open), "ejected");
    }

    #[test]
    fn ejection_probe_and_return_keep_the_count() {
        let cfg = server_config(&upstream(), &EjectSpec::default());
        let mut s = OwnedBreaker::new(cfg, T0);
        let mut pool = Pool { out: 0, max: 1 };
        let bad = Attempt::http(500, 5);
        let mut now = T0;
        let mut moves = Vec::new();
        for _ in 0..10 {
            let (_, m) = record(&mut s.breaker(), &mut pool, now, 0, Ticket::Normal, &bad);
            moves.extend(m);
            now += 10;
        }
        assert_eq!(pool.out, 1);
        let Some(Move::Ejected(t)) = moves.first() else {
            panic!("ejected: {moves:?}")
        };
        assert_eq!(t.reason, "failure rate 100% (10/10) >= 50% in 10s");
        assert_eq!(t.detail.as_deref(), Some("retry in 10s"));
        // Not before the cooldown ends; then one probe, once.
        let alive = |_| true;
        let (none, again) = claim_probe(&mut s.breaker(), now, 0, 1, &alive);
        assert_eq!(none, None);
        assert_eq!(again, Some(T0 + 90 + 10_000 - now));
        now = T0 + 10_100;
        let (Some(p), None) = claim_probe(&mut s.breaker(), now, 0, 1, &alive) else {
            panic!("probe")
        };
        assert_eq!(s.breaker().state(), State::HalfOpen);
        assert_eq!(claim_probe(&mut s.breaker(), now, 0, 2, &alive).0, None);
        let (r, m) = record(
            &mut s.breaker(),
            &mut pool,
            now + 5,
            0,
            p,
            &Attempt::http(200, 5),
        );
        assert_eq!(r.state, State::Closed);
        assert!(matches!(m, Some(Move::Returned(ref t)) if t.reason == "1 good probe"));
        assert_eq!(pool.out, 0);
        // A server in the pool is never probed.
        assert_eq!(
            claim_probe(&mut s.breaker(), now, 0, 1, &alive),
            (None, None)
        );
    }

    #[test]
    fn a_failed_probe_keeps_the_server_out_and_is_told() {
        let cfg = server_config(&upstream(), &EjectSpec::default());
        let mut s = OwnedBreaker::new(cfg, T0);
        let mut pool = Pool { out: 0, max: 1 };
        fail_ten(&mut s, &mut pool, 502);
        let now = T0 + 20_000;
        let (Some(p), _) = claim_probe(&mut s.breaker(), now, 0, 1, &|_| true) else {
            panic!("probe")
        };
        let (_, m) = record(
            &mut s.breaker(),
            &mut pool,
            now,
            0,
            p,
            &Attempt::http(502, 5),
        );
        let Some(Move::Kept(t)) = m else {
            panic!("kept out: {m:?}")
        };
        assert!(!Move::Kept(t.clone()).changes_pool());
        assert_eq!(t.reason, "probe failed: http_502");
        assert_eq!(t.detail.as_deref(), Some("retry in 20s"));
        assert_eq!(pool.out, 1);
    }

    #[test]
    fn at_the_cap_the_window_counts_but_the_server_stays_in() {
        let cfg = server_config(&upstream(), &EjectSpec::default());
        let mut s = OwnedBreaker::new(cfg, T0);
        let mut pool = Pool { out: 1, max: 1 };
        for i in 0..20 {
            let (r, m) = record(
                &mut s.breaker(),
                &mut pool,
                T0 + i,
                0,
                Ticket::Normal,
                &Attempt::http(500, 5),
            );
            assert_eq!((r.state, m), (State::Closed, None));
        }
        pool.out = 0;
        let (_, m) = record(
            &mut s.breaker(),
            &mut pool,
            T0 + 30,
            0,
            Ticket::Normal,
            &Attempt::http(500, 5),
        );
        assert!(matches!(m, Some(Move::Ejected(_))));
        assert_eq!(pool.out, 1);
    }

    #[test]
    fn active_probe_and_forced_servers_are_not_probed_by_requests() {
        let cfg = BreakerConfig {
            active: true,
            ..server_config(&upstream(), &EjectSpec::default())
        };
        let mut s = OwnedBreaker::new(cfg, T0);
        let mut pool = Pool { out: 0, max: 1 };
        fail_ten(&mut s, &mut pool, 500);
        assert_eq!(s.breaker().state(), State::Open);
        assert_eq!(
            claim_probe(&mut s.breaker(), T0 + 3_600_000, 0, 1, &|_| true),
            (None, None)
        );
        let mut f = OwnedBreaker::new(server_config(&upstream(), &EjectSpec::default()), T0);
        f.breaker()
            .control(T0, 0, crate::breaker::Control::ForceOpen);
        assert_eq!(
            claim_probe(&mut f.breaker(), T0 + 3_600_000, 0, 1, &|_| true),
            (None, None)
        );
    }

    fn probe(status: u16) -> ProbeResult {
        let spec = crate::directive::ProbeSpec {
            uri: "/health".into(),
            grpc: None,
            host: None,
            statuses: vec![(200, 399)],
            timeout_ms: 1000,
        };
        let end = crate::probe::ProbeEnd::Response {
            status,
            retry_after_s: None,
        };
        crate::probe::result(&spec, end, 5)
    }

    fn active_server() -> (OwnedBreaker, Pool) {
        let up = BreakerConfig {
            active: true,
            probe_interval_ms: 1000,
            ..upstream()
        };
        // Active probes need no ejection time: the first probe is one interval away.
        let spec = EjectSpec {
            time_ms: 30_000,
            ..EjectSpec::default()
        };
        (
            OwnedBreaker::new(server_config(&up, &spec), T0),
            Pool { out: 0, max: 1 },
        )
    }

    #[test]
    fn with_probe_uri_the_prober_alone_returns_an_ejected_server() {
        let (mut s, mut pool) = active_server();
        let alive = |_| true;
        fail_ten(&mut s, &mut pool, 502);
        assert_eq!((s.breaker().state(), pool.out), (State::Open, 1));
        // One probe_interval first (not `time`), and never a user request.
        let ejected = T0 + 9;
        assert_eq!(s.breaker().active_probe(ejected + 999, 0, 1, &alive), None);
        let end = ejected + 1000;
        assert_eq!(
            claim_probe(&mut s.breaker(), end, 0, 1, &alive),
            (None, None)
        );
        let Some(p) = s.breaker().active_probe(end, 0, 1, &alive) else {
            panic!("probe due one probe_interval after the ejection")
        };
        assert_eq!(
            s.breaker().active_probe(end, 0, 2, &alive),
            None,
            "one at a time for the instance"
        );
        // A failed probe keeps it out, quietly, and the next is one interval away (no doubling).
        let (r, m) = record_probe(&mut s.breaker(), &mut pool, end + 5, 0, p, &probe(500));
        assert_eq!((r.state, m, pool.out), (State::Open, None, 1));
        assert_eq!(s.breaker().active_probe(end + 999, 0, 1, &alive), None);
        let Some(p) = s.breaker().active_probe(end + 1000, 0, 1, &alive) else {
            panic!("the next probe one probe_interval later")
        };
        // A stale ticket changes nothing; the good probe returns the server.
        let stale = Ticket::Probe(0);
        let (_, m) = record_probe(
            &mut s.breaker(),
            &mut pool,
            end + 1001,
            0,
            stale,
            &probe(200),
        );
        assert_eq!((m, pool.out), (None, 1));
        let (r, m) = record_probe(&mut s.breaker(), &mut pool, end + 1005, 0, p, &probe(200));
        assert_eq!(r.state, State::Closed);
        assert!(matches!(m, Some(Move::Returned(ref t)) if t.reason == "1 good probe"));
        assert_eq!(pool.out, 0);
        assert_eq!(s.breaker().active_probe(end + 5000, 0, 1, &alive), None);
    }

    #[test]
    fn with_probe_uri_a_brownout_needs_its_run_of_good_probes() {
        let (mut s, mut pool) = active_server();
        let alive = |_| true;
        // Every other attempt fails: a soft trip at 50 %.
        for i in 0..10 {
            let a = Attempt::http(if i % 2 == 1 { 500 } else { 200 }, 5);
            record(&mut s.breaker(), &mut pool, T0 + i, 0, Ticket::Normal, &a);
        }
        assert_eq!(pool.out, 1);
        let mut now = T0 + 1009;
        let mut good = 0;
        while s.breaker().state() == State::Open {
            let Some(p) = s.breaker().active_probe(now, 0, 1, &alive) else {
                panic!("a probe every interval")
            };
            record_probe(&mut s.breaker(), &mut pool, now, 0, p, &probe(200));
            good += 1;
            now += 1000;
        }
        assert_eq!(good, crate::breaker::judge::soft_run(5000, 1));
        assert!(good > 1 && pool.out == 0);
    }
}
