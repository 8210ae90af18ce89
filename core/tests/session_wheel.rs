//! The worker's count of waiting stream sessions (`session::Wheel`) against a plain model that
//! keeps every session: a session is judged silent at its bucket's due time — never before its
//! bound ran out, less than a grain (under an eighth of the bound) after — exactly once; one that
//! left (answered, ended, sent again) before then is never judged; the wheel tells the
//! earliest due time; a wheel left unswept for long asks to be swept before it counts more.

use circuit_breaker_core::session::{Left, Silence, Waited, Wheel};
use proptest::prelude::*;

const BOUNDS: [u32; 4] = [500, 0, 3000, 7];

#[derive(Clone, Debug)]
enum Op {
    Wait(u16),
    Again(usize),
    Leave(usize),
    Advance(u64),
    Sweep,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u16..4).prop_map(Op::Wait),
        1 => (0usize..64).prop_map(Op::Again),
        2 => (0usize..64).prop_map(Op::Leave),
        2 => (1u64..900).prop_map(Op::Advance),
        1 => Just(Op::Sweep),
    ]
}

struct Session {
    upstream: u16,
    sent_ms: u64,
    waiting: bool,
    judged: bool,
    gone: bool,
}

fn grain(upstream: u16) -> u64 {
    u64::from(BOUNDS[usize::from(upstream)])
        .div_ceil(16)
        .max(1)
        .next_power_of_two()
}

/// When the model says a session's bucket is due.
fn due(s: &Session) -> u64 {
    let bound = u64::from(BOUNDS[usize::from(s.upstream)]);
    let g = grain(s.upstream);
    let due = (s.sent_ms + bound).div_ceil(g) * g;
    assert!(due >= s.sent_ms + bound && due < s.sent_ms + bound + g);
    due
}

fn sweep(w: &mut Wheel, all: &mut [Session], now: u64) -> Result<(), TestCaseError> {
    let mut out: Vec<Silence> = Vec::new();
    w.expire(now, &mut out);
    let mut judged = [0u32; 4];
    for s in all.iter_mut().filter(|s| s.waiting && due(s) <= now) {
        s.waiting = false;
        s.judged = true;
        judged[usize::from(s.upstream)] += 1;
        // The silence's instant is no earlier than the session's own, and within its grain.
        let told = out
            .iter()
            .filter(|x| x.upstream == s.upstream)
            .any(|x| x.sent_ms >= s.sent_ms && x.sent_ms < s.sent_ms + grain(s.upstream));
        prop_assert!(told);
    }
    let mut told = [0u32; 4];
    for x in &out {
        prop_assert!(x.sessions > 0);
        told[usize::from(x.upstream)] += x.sessions;
    }
    prop_assert_eq!(told, judged);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn the_wheel_agrees_with_a_plain_model(ops in prop::collection::vec(op(), 1..300)) {
        let mut w = Wheel::new(&BOUNDS);
        let mut all: Vec<Session> = Vec::new();
        let mut now = 10_000u64;
        for op in ops {
            match op {
                Op::Wait(upstream) => {
                    let mut waited = w.wait(upstream, now);
                    if waited == Waited::Behind {
                        sweep(&mut w, &mut all, now)?;
                        waited = w.wait(upstream, now);
                    }
                    let s = Session {
                        upstream,
                        sent_ms: now,
                        waiting: false,
                        judged: false,
                        gone: false,
                    };
                    match waited {
                        Waited::Off => prop_assert_eq!(BOUNDS[usize::from(upstream)], 0),
                        Waited::Until(t) => prop_assert_eq!(t, due(&s)),
                        Waited::Behind => prop_assert!(false, "behind right after a sweep"),
                    }
                    all.push(Session { waiting: waited != Waited::Off, ..s });
                }
                Op::Again(i) | Op::Leave(i) => {
                    let Some(s) = all.get_mut(i) else { continue };
                    if s.gone {
                        // Its word was cleared: never asked again.
                        continue;
                    }
                    let left = w.leave(s.upstream, s.sent_ms, now);
                    let bound = u64::from(BOUNDS[usize::from(s.upstream)]);
                    let want = if s.judged {
                        Left::Judged
                    } else if bound > 0 && now >= s.sent_ms + bound {
                        Left::Late
                    } else {
                        Left::InTime
                    };
                    prop_assert_eq!(left, want);
                    let again = s.waiting && matches!(op, Op::Again(_));
                    s.waiting = false;
                    s.gone = !again;
                    if again {
                        let upstream = s.upstream;
                        let mut waited = w.wait(upstream, now);
                        if waited == Waited::Behind {
                            sweep(&mut w, &mut all, now)?;
                            waited = w.wait(upstream, now);
                        }
                        prop_assert!(matches!(waited, Waited::Until(_)));
                        all[i].sent_ms = now;
                        all[i].waiting = true;
                    }
                }
                Op::Advance(ms) => now += ms,
                Op::Sweep => sweep(&mut w, &mut all, now)?,
            }
            prop_assert_eq!(w.len(), all.iter().filter(|s| s.waiting).count());
            if !w.is_empty() {
                let first = all.iter().filter(|s| s.waiting).map(due).min();
                prop_assert_eq!(w.next_due(), first);
            } else {
                prop_assert_eq!(w.next_due(), None);
            }
        }
    }
}

#[test]
fn a_hung_server_s_sessions_are_judged_once_and_late_by_less_than_a_grain() {
    let mut w = Wheel::new(&[3000]);
    for t in 0..100u64 {
        assert!(matches!(w.wait(0, 1_000 + t), Waited::Until(_)));
    }
    let mut out = Vec::new();
    w.expire(3_999, &mut out);
    assert!(out.is_empty(), "none before its bound");
    w.expire(4_099 + 256, &mut out);
    assert_eq!(out.iter().map(|s| s.sessions).sum::<u32>(), 100);
    out.clear();
    w.expire(100_000, &mut out);
    assert!(out.is_empty(), "judged once");
    assert_eq!(
        w.leave(0, 1_050, 100_000),
        Left::Judged,
        "it knows it was judged"
    );
}

#[test]
fn a_bucket_is_silent_since_its_latest_session() {
    // An answer at 10 000, then the server hangs: sessions that sent at 10 005 are silent since
    // after it, though their bucket began before it.
    let mut w = Wheel::new(&[3000]);
    for _ in 0..40 {
        assert!(matches!(w.wait(0, 10_005), Waited::Until(_)));
    }
    let mut out = Vec::new();
    w.expire(14_000, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].sessions, out[0].sent_ms), (40, 10_005));
}

#[test]
fn a_session_past_its_bound_before_the_sweep_is_late() {
    let mut w = Wheel::new(&[3000]);
    assert!(matches!(w.wait(0, 50_000), Waited::Until(t) if t > 53_000));
    assert!(matches!(w.wait(0, 50_000), Waited::Until(_)));
    assert_eq!(w.leave(0, 50_000, 52_999), Left::InTime);
    assert_eq!(w.leave(0, 50_000, 53_100), Left::Late);
    assert!(w.is_empty());
}
