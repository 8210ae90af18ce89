//! The worker's table of stream sessions (`session::Table`) against a plain model: every held
//! session is found by its id until it is taken or its bound runs out, a stale id finds
//! nothing, the bounds run out at exactly their time and start again at each of the client's
//! chunks, a probe is never held past its bound by a client that says nothing, a session whose
//! silence says nothing (UDP) is never silent, and the earliest deadline is always told.

use circuit_breaker_core::breaker::Ticket;
use circuit_breaker_core::directive::DEFAULT_FIRST_BYTE_MS;
use circuit_breaker_core::session::{Expired, Held, SessionId, Table};
use proptest::prelude::*;

const BOUNDS: [u32; 3] = [500, 0, 2000];

#[derive(Clone, Debug)]
enum Op {
    Open {
        upstream: u16,
        probe: bool,
        silence: bool,
    },
    Sent(usize),
    Take(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u16..3, any::<bool>(), any::<bool>()).prop_map(|(upstream, probe, silence)| Op::Open {
            upstream,
            probe,
            silence
        }),
        (0usize..64).prop_map(Op::Sent),
        (0usize..64).prop_map(Op::Take),
        (1u64..800).prop_map(Op::Advance),
    ]
}

/// The model: every session ever opened, with what the table should say of it.
struct Model {
    held: Held,
    silence: bool,
    id: SessionId,
    deadline: Option<u64>,
    gone: bool,
}

fn bound_of(upstream: u16) -> u32 {
    BOUNDS[usize::from(upstream)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_table_agrees_with_a_plain_model(ops in prop::collection::vec(op(), 1..200)) {
        let mut t = Table::new(BOUNDS.to_vec());
        let mut all: Vec<Model> = Vec::new();
        let mut now = 1_000u64;
        let mut tickets = 0u64;
        for op in ops {
            match op {
                Op::Open { upstream, probe, silence } => {
                    tickets += 1;
                    let ticket = if probe { Ticket::Probe(tickets) } else { Ticket::Normal };
                    let id = t.open(upstream, ticket, now, silence).unwrap();
                    let deadline = probe.then(|| {
                        let b = bound_of(upstream);
                        now + u64::from(if b > 0 { b } else { DEFAULT_FIRST_BYTE_MS })
                    });
                    let held = Held {
                        upstream,
                        ticket,
                        start_ms: now,
                        client_sent: false,
                        sent_ms: now,
                    };
                    all.push(Model { held, silence, id, deadline, gone: false });
                }
                Op::Sent(i) if !all.is_empty() => {
                    let n = all.len();
                    let m = &mut all[i % n];
                    let said = t.client_sent(m.id, now);
                    if m.gone {
                        prop_assert_eq!(said, None);
                        continue;
                    }
                    m.held.client_sent = true;
                    m.held.sent_ms = now;
                    if bound_of(m.held.upstream) > 0 && m.silence {
                        let d = now + u64::from(bound_of(m.held.upstream));
                        let same = m.deadline == Some(d);
                        prop_assert_eq!(said, Some(if same { None } else { Some(d) }));
                        m.deadline = Some(d);
                    } else {
                        prop_assert_eq!(said, Some(None));
                    }
                }
                Op::Take(i) if !all.is_empty() => {
                    let n = all.len();
                    let m = &mut all[i % n];
                    let got = t.take(m.id);
                    if m.gone {
                        prop_assert_eq!(got, None);
                    } else {
                        prop_assert_eq!(got, Some(m.held));
                        m.gone = true;
                    }
                }
                Op::Advance(ms) => {
                    now += ms;
                    let mut out = Vec::new();
                    t.expire(now, &mut out);
                    let mut due: Vec<&mut Model> = all
                        .iter_mut()
                        .filter(|m| !m.gone && m.deadline.is_some_and(|d| d <= now))
                        .collect();
                    prop_assert_eq!(out.len(), due.len());
                    for m in due.iter_mut() {
                        let silent =
                            m.held.client_sent && bound_of(m.held.upstream) > 0 && m.silence;
                        let want = if silent { Expired::Silent(m.held) } else { Expired::Unjudged(m.held) };
                        prop_assert!(out.contains(&want), "{:?} not expired", want);
                        m.gone = true;
                    }
                }
                _ => {}
            }
            let live: Vec<&Model> = all.iter().filter(|m| !m.gone).collect();
            prop_assert_eq!(t.len(), live.len());
            for m in &live {
                prop_assert_eq!(t.get(m.id), Some(m.held));
            }
            let want_next = live.iter().filter_map(|m| m.deadline).min();
            prop_assert_eq!(t.next_deadline(), want_next);
        }
    }
}

#[test]
fn an_id_survives_its_word() {
    let mut t = Table::new(vec![100]);
    let a = t.open(0, Ticket::Normal, 0, true).unwrap();
    assert_eq!(SessionId::from_word(a.to_word()), Some(a));
    assert_eq!(SessionId::from_word(0), None);
    assert!(t.take(a).is_some());
    let b = t.open(0, Ticket::Normal, 0, true).unwrap();
    assert_ne!(
        a.to_word(),
        b.to_word(),
        "a place taken again has another id"
    );
    assert_eq!(t.take(a), None);
    assert!(
        t.open(1, Ticket::Normal, 0, true).is_none(),
        "no such upstream"
    );
    // a place used 2^31 times comes back to generation 0: words stay below the top bit
    for _ in 0..3 {
        let id = t.open(0, Ticket::Normal, 0, true).unwrap();
        assert!(id.to_word() < 1 << 63);
        t.take(id);
    }
}

#[test]
fn a_probe_whose_client_says_nothing_is_given_back_at_its_bound() {
    let mut t = Table::new(vec![500, 0]);
    t.open(0, Ticket::Probe(1), 0, true).unwrap();
    t.open(1, Ticket::Probe(2), 0, true).unwrap();
    let mut out = Vec::new();
    t.expire(499, &mut out);
    assert!(out.is_empty());
    t.expire(500, &mut out);
    assert!(matches!(out[..], [Expired::Unjudged(h)] if h.upstream == 0));
    out.clear();
    t.expire(10_000, &mut out);
    assert!(
        matches!(out[..], [Expired::Unjudged(h)] if h.upstream == 1),
        "off: the default bound"
    );
}

#[test]
fn a_slow_upload_is_no_silence_and_udp_never_is() {
    let mut t = Table::new(vec![500]);
    let tcp = t.open(0, Ticket::Normal, 0, true).unwrap();
    let udp = t.open(0, Ticket::Normal, 0, false).unwrap();
    let mut out = Vec::new();
    for at in [0, 400, 800, 1200] {
        t.client_sent(tcp, at);
        t.client_sent(udp, at);
        t.expire(at + 499, &mut out);
        assert!(out.is_empty(), "each chunk starts the bound again ({at})");
    }
    t.expire(1700, &mut out);
    assert!(matches!(out[..], [Expired::Silent(h)] if h.sent_ms == 1200));
    assert!(
        t.get(udp).is_some(),
        "a UDP session waits for nginx's own judgement"
    );
}
