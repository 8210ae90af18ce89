//! The settlement of an attempt's end (`settle::settle`) as stories: what the request's
//! breaker, its server's breaker, the pool and the retry budget make of one attempt, a retry,
//! a probe; and, over every arrival order of a pool's attempts, that a request is recorded on
//! its breaker exactly once, at its last attempt, and that the pool never loses more servers
//! than its cap.

mod common;

use circuit_breaker_core::breaker::{
    Admission, Attempt, BreakerConfig, Classified, Ending, Ticket,
};
use circuit_breaker_core::class::Class;
use circuit_breaker_core::eject::Move;
use circuit_breaker_core::retry_budget::RetryBudgetConfig;
use circuit_breaker_core::settle::{settle, Ended, OnServer, Plan, Retry};
use circuit_breaker_core::snapshot::State;
use common::ledger::Zone;
use common::{cfg, T0};
use proptest::prelude::*;

/// One attempt's end, as the shell would describe it.
#[derive(Clone, Copy)]
struct End {
    attempt: Attempt,
    ticket: Ticket,
    server: Option<u16>,
    retry: bool,
    first_counted: bool,
    class: Option<Class>,
}

impl End {
    fn on(server: u16, attempt: Attempt) -> End {
        End {
            attempt,
            ticket: Ticket::Normal,
            server: Some(server),
            retry: false,
            first_counted: false,
            class: None,
        }
    }

    fn retried(self) -> End {
        End {
            retry: true,
            ..self
        }
    }
}

fn run(zone: &mut Zone, cfg: &BreakerConfig, now: u64, e: End) -> Plan {
    let c = Classified::of(e.attempt, cfg);
    let end = Ended {
        attempt: &c,
        upstream: cfg,
        name: "u/-",
        now_ms: now,
        ticket: e.ticket,
        server: e.server.map(|index| OnServer {
            index,
            ticket: Ticket::Normal,
            recorded: false,
        }),
        retry: e.retry,
        dry_run: cfg.dry_run,
        recorded: false,
        budget: zone.budget.is_some(),
        first_counted: e.first_counted,
        class: e.class,
    };
    settle(zone, &end, &mut || u32::MAX / 2)
}

fn requests(zone: &mut Zone) -> u64 {
    zone.upstream.breaker().totals().requests
}

#[test]
fn a_last_attempt_goes_on_its_server_and_its_breaker() {
    let cfg = cfg();
    let mut z = Zone::new(cfg, 3, T0);
    let plan = run(&mut z, &cfg, T0, End::on(1, Attempt::http(500, 5)));
    assert_eq!(plan.retry, Retry::Unasked);
    assert_eq!(plan.recorded.map(|r| r.state), Some(State::Closed));
    assert!(plan.moves.is_empty());
    assert_eq!(requests(&mut z), 1);
    assert_eq!(z.upstream.breaker().totals().failures, 1);
    assert_eq!(z.servers[1].breaker().totals().failures, 1);
    assert_eq!(z.servers[0].breaker().totals().requests, 0);
}

#[test]
fn a_retry_while_closed_waits_and_the_next_attempt_settles_the_request() {
    let cfg = cfg();
    let mut z = Zone::new(cfg, 3, T0);
    let first = run(
        &mut z,
        &cfg,
        T0,
        End::on(0, Attempt::http(502, 5)).retried(),
    );
    assert_eq!(first.retry, Retry::Made);
    assert_eq!(first.recorded, None);
    assert_eq!(
        requests(&mut z),
        0,
        "a retried attempt is not what the client got"
    );
    assert_eq!(
        z.servers[0].breaker().totals().failures,
        1,
        "but its server saw it"
    );
    let last = run(&mut z, &cfg, T0 + 10, End::on(1, Attempt::http(200, 5)));
    assert_eq!(last.retry, Retry::Unasked);
    assert!(last.recorded.is_some());
    assert_eq!(requests(&mut z), 1);
    assert_eq!(z.upstream.breaker().totals().failures, 0);
}

#[test]
fn no_retry_while_open_the_client_gets_this_attempt() {
    let cfg = cfg();
    let mut z = Zone::new(cfg, 0, T0);
    for i in 0..cfg.min_requests as u64 {
        run(&mut z, &cfg, T0 + i, End::on(0, Attempt::http(502, 5)));
    }
    assert_eq!(z.upstream.breaker().state(), State::Open);
    let before = requests(&mut z);
    let e = End {
        server: None,
        ..End::on(0, Attempt::http(502, 5)).retried()
    };
    let plan = run(&mut z, &cfg, T0 + 100, e);
    assert_eq!(plan.retry, Retry::Refused);
    assert_eq!(
        requests(&mut z),
        before + 1,
        "refused: this attempt settles the request"
    );
}

#[test]
fn a_dry_run_never_refuses_a_retry_for_its_state() {
    let cfg = BreakerConfig {
        dry_run: true,
        ..cfg()
    };
    let mut z = Zone::new(cfg, 0, T0);
    for i in 0..cfg.min_requests as u64 {
        run(
            &mut z,
            &cfg,
            T0 + i,
            End {
                server: None,
                ..End::on(0, Attempt::http(502, 5))
            },
        );
    }
    assert_eq!(z.upstream.breaker().state(), State::Open);
    let e = End {
        server: None,
        ..End::on(0, Attempt::http(502, 5)).retried()
    };
    assert_eq!(run(&mut z, &cfg, T0 + 100, e).retry, Retry::Made);
}

#[test]
fn the_budget_counts_every_first_attempt_once_and_refuses_beyond_it() {
    let cfg = cfg();
    // 10 % of the first attempts, no floor.
    let budget = RetryBudgetConfig {
        budget: 1000,
        min_per_s: 0,
    };
    let mut z = Zone::new(cfg, 0, T0).with_budget(budget, T0);
    z.firsts = Some((T0 / 1000, 9));
    let e = End {
        server: None,
        ..End::on(0, Attempt::http(502, 5)).retried()
    };
    let one = run(&mut z, &cfg, T0, e);
    assert_eq!(one.retry, Retry::Made, "10 first attempts allow one retry");
    assert!(one.first_counted);
    assert_eq!(z.firsts, None, "the worker's batch was handed over");
    let two = run(
        &mut z,
        &cfg,
        T0 + 1,
        End {
            first_counted: true,
            ..e
        },
    );
    assert_eq!(two.retry, Retry::Refused);
    let v = z.budget.as_ref().unwrap().view(T0 + 1);
    assert_eq!(
        (v.firsts_total, v.retries_total, v.retries_denied_total),
        (10, 1, 1)
    );
}

#[test]
fn sheddable_retries_stop_first_and_critical_ones_find_the_rest() {
    let cfg = cfg();
    // 10 % of 50 first attempts: 5 retries; sheddable ones stop at 3 (two kept).
    let budget = RetryBudgetConfig {
        budget: 1000,
        min_per_s: 0,
    };
    let mut z = Zone::new(cfg, 0, T0).with_budget(budget, T0);
    z.firsts = Some((T0 / 1000, 50));
    // Attempts the breaker does not count as failures: it stays closed, and only the
    // budget refuses.
    let retry = |class| End {
        server: None,
        first_counted: true,
        class: Some(class),
        ..End::on(0, Attempt::http(404, 5)).retried()
    };
    let made = |z: &mut Zone, class, n: u64| {
        (0..n)
            .filter(|i| run(z, &cfg, T0 + i, retry(class)).retry == Retry::Made)
            .count()
    };
    assert_eq!(
        made(&mut z, Class::Sheddable, 10),
        3,
        "sheddable: 80 % of 5, less 2"
    );
    assert_eq!(
        made(&mut z, Class::Default, 10),
        1,
        "default: up to 95 % of 5"
    );
    assert_eq!(
        made(&mut z, Class::Critical, 10),
        1,
        "critical: the last one"
    );
}

#[test]
fn a_bad_server_is_ejected_and_then_explains_its_failures() {
    let cfg = cfg();
    let mut z = Zone::new(cfg, 3, T0);
    let mut ejected = None;
    for i in 0..40u64 {
        let plan = run(&mut z, &cfg, T0 + i, End::on(2, Attempt::http(500, 5)));
        if let Some((2, Move::Ejected(_))) = plan.moves.first() {
            ejected = Some(i);
            break;
        }
    }
    assert!(ejected.is_some(), "the failing server left the pool");
    assert_eq!(z.out(), 1);
    assert_eq!(
        z.upstream.breaker().state(),
        State::Closed,
        "one bad server of three"
    );
    let before = z.upstream.breaker().totals().explained;
    // An attempt already on its way to it when it left.
    let plan = run(&mut z, &cfg, T0 + 100, End::on(2, Attempt::http(500, 5)));
    assert_eq!(plan.recorded.map(|r| r.transition), Some(None));
    assert_eq!(z.upstream.breaker().totals().explained, before + 1);
}

#[test]
fn the_upstreams_failed_probe_ejects_its_server_at_once() {
    let cfg = BreakerConfig {
        consecutive: 0,
        ..cfg()
    };
    let mut z = Zone::new(cfg, 3, T0);
    // Every server fails: the upstream opens (the pool cannot explain it all).
    let mut now = T0;
    for i in 0..200u64 {
        now = T0 + i;
        run(
            &mut z,
            &cfg,
            now,
            End::on((i % 3) as u16, Attempt::http(500, 5)),
        );
        if z.upstream.breaker().state() == State::Open {
            break;
        }
    }
    assert_eq!(z.upstream.breaker().state(), State::Open);
    let out_before = z.out();
    now += u64::from(cfg.max_open_ms);
    let ticket = match z
        .upstream
        .breaker()
        .admit(now, 0, 1, &|_| true, true)
        .admission
    {
        Admission::Probe(t) => t,
        a => panic!("no probe: {a:?}"),
    };
    let s = (0..3u16)
        .find(|&i| {
            !circuit_breaker_core::eject::is_out(z.servers[usize::from(i)].breaker().state())
        })
        .expect("a server in the pool");
    let e = End {
        ticket,
        ..End::on(s, Attempt::http(500, 5))
    };
    let plan = run(&mut z, &cfg, now, e);
    match plan.moves.last() {
        Some((i, Move::Ejected(t))) => {
            assert_eq!(*i, s);
            assert!(
                t.reason.contains("probe of \"u/-\" failed: http_500"),
                "{}",
                t.reason
            );
        }
        m => panic!("no ejection: {m:?}, out {out_before}"),
    }
    assert_eq!(
        z.upstream.breaker().state(),
        State::HalfOpen,
        "no verdict on the upstream"
    );
    assert!(
        !z.upstream.breaker().holds_probe(ticket),
        "the probe is free for the next"
    );
}

#[test]
fn what_the_client_caused_counts_nowhere() {
    let cfg = cfg();
    let mut z = Zone::new(cfg, 2, T0);
    for e in [
        Ending::NoVerdict,
        Ending::TooBigHeader,
        Ending::BodyRefused,
        Ending::ClientDeadline,
    ] {
        let plan = run(&mut z, &cfg, T0, End::on(0, Attempt::ended(e, 5)));
        assert!(plan.moves.is_empty());
    }
    assert_eq!(requests(&mut z), 0);
    assert_eq!(z.servers[0].breaker().totals().requests, 0);
}

#[derive(Clone, Debug)]
enum Op {
    Step(u64),
    /// A request's attempt ends on the `pick`-th server: good or bad, retried or last.
    End {
        pick: usize,
        bad: bool,
        retry: bool,
    },
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            1 => (1u64..400).prop_map(Op::Step),
            8 => (0usize..64, any::<bool>(), prop::bool::weighted(0.3))
                .prop_map(|(pick, bad, retry)| Op::End { pick, bad, retry }),
        ],
        20..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Whatever order attempts end in: each request is on its breaker once (the attempt
    /// whose retry was not made), a retry that is made records nothing there, and the pool
    /// never has more servers out than its cap.
    #[test]
    fn once_per_request_and_the_cap_holds(servers in 2usize..6, ops in ops(), budget in any::<bool>()) {
        let cfg = BreakerConfig { consecutive: 0, ..cfg() };
        let mut z = Zone::new(cfg, servers, T0);
        if budget {
            z = z.with_budget(RetryBudgetConfig::default(), T0);
        }
        let mut now = T0;
        let mut settled = 0u64;
        for op in ops {
            match op {
                Op::Step(ms) => now += ms,
                Op::End { pick, bad, retry } => {
                    let s = (pick % servers) as u16;
                    let a = if bad { Attempt::http(502, 5) } else { Attempt::http(200, 5) };
                    let mut e = End::on(s, a);
                    e.retry = retry;
                    let plan = run(&mut z, &cfg, now, e);
                    prop_assert!(z.out() <= z.max);
                    match plan.retry {
                        Retry::Made => prop_assert!(plan.recorded.is_none()),
                        Retry::Unasked | Retry::Refused => {
                            settled += 1;
                            prop_assert!(plan.recorded.is_some());
                        }
                    }
                }
            }
        }
        let t = *z.upstream.breaker().totals();
        prop_assert_eq!(t.requests, settled);
    }
}
