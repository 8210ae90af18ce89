//! One client's share of a limit: a client that holds most of the slots while others are
//! asking is kept out of the last of them, and its answers do not move the limit.
//!
//! A limit follows the latency of what runs under it, and a client picks what it asks for: one
//! that holds as many slow requests as the limit allows (an endpoint that takes seconds, over
//! one HTTP/2 connection) both reaches the limit and makes its latency look like a queue, and
//! the limit falls on everyone else. Two rules, which need no count of clients:
//!
//! - **Heavy** is a client holding at least [`heavy_at`] of the limit, and more than every
//!   other client together, while another client asked within [`PRESENT_MS`]. A heavy client
//!   is admitted only below [`cap`]: the rest of the limit stays for the others, as a class's
//!   reserve stays for the classes above it. A client alone (nginx behind a balancer that hides
//!   the addresses, one service calling another) is never heavy: it has the whole limit, as
//!   before. The last [`MARKS`] clients that asked leave a mark each, a client only ever its own
//!   one, so that a heavy client cannot wipe the others out.
//! - **Judged by the others.** A heavy client's answers, and those of a client that was heavy
//!   within [`PRESENT_MS`] (`Standing::Suspect`), are set apart from the latency the controller
//!   reads (`Samples::heavy`) while the others' answers are enough to judge by: a queue at the
//!   origin delays every request, the others' too, and an endpoint's own slowness shows only
//!   in its own.
//!
//! Clients are counted in a count-min sketch (Cormode and Muthukrishnan, 2005) of [`ROWS`] ×
//! [`WIDTH`] in-flight counters in shared memory, indexed by a keyed hash of the client's
//! address: a client's count is the least of its cells, never below its true count, and a
//! client cannot choose its cells without the zone's secret. One address is one client: a
//! client of many addresses is many clients, each of which must hold more than the rest.

use std::net::IpAddr;

/// Rows of the sketch, each indexed by its own part of the client's hash.
pub const ROWS: usize = 2;

/// Counters per row.
pub const WIDTH: usize = 128;

/// How long a client that asked without being heavy counts as present (milliseconds):
/// a client asking once a second keeps a heavy one out of the last slots.
pub const PRESENT_MS: u64 = 1000;

/// Clients remembered as present.
pub const MARKS: usize = 2;

/// A client's place in the sketch, and its tag: what a request keeps to give its count back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Client {
    /// Its cell in each row.
    pub cells: [u16; ROWS],
    /// Tells it from the last client that was present (never 0, which names none).
    pub tag: u16,
}

impl Client {
    /// The client of a keyed hash of its address.
    pub fn of(hash: u64) -> Client {
        let cell = |i: u32| ((hash >> (16 * i)) as usize % WIDTH) as u16;
        Client {
            cells: [cell(0), cell(1)],
            tag: ((hash >> 48) as u16).max(1),
        }
    }

    /// Its counter of row `row` in a sketch laid out row after row.
    #[inline]
    pub fn index(&self, row: usize) -> usize {
        row * WIDTH + usize::from(self.cells[row])
    }
}

/// What tells clients apart, as bytes to hash: an IPv4 address; an IPv6 address by its /64,
/// which one host is given whole (RFC 6177), and an IPv4-mapped one as its IPv4 address. The
/// first byte names the family, so that no IPv4 address reads as an IPv6 prefix.
pub fn address_key(ip: IpAddr) -> ([u8; 9], usize) {
    let mut k = [0u8; 9];
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) => {
            k[0] = 4;
            k[1..5].copy_from_slice(&v4.octets());
            (k, 5)
        }
        IpAddr::V6(v6) => {
            k[0] = 6;
            k[1..9].copy_from_slice(&v6.octets()[..8]);
            (k, 9)
        }
    }
}

/// How a client stands at an admission.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Standing {
    /// Not heavy nor lately so, or no other client is present: the whole limit.
    #[default]
    Light,
    /// Holds [`heavy_at`] or more, and more than all the others together, while another
    /// client is present: admitted below [`cap`], and its answers set apart.
    Heavy,
    /// Not heavy now, but was within [`PRESENT_MS`] (a request it made began or ended heavy),
    /// while another client is present: the whole limit, its answers set apart (a client
    /// whose slow requests come in rounds is not heavy for the first of each round).
    Suspect,
}

impl Standing {
    /// Whether the client's answers are set apart from the latency the limit is judged by.
    #[inline]
    pub fn apart(self) -> bool {
        matches!(self, Standing::Heavy | Standing::Suspect)
    }
}

/// Slots of `limit` a client holds to count as heavy: a quarter (at least one).
#[inline]
pub fn heavy_at(limit: u32) -> u32 {
    (limit / 4).max(1)
}

/// In-flight below which a heavy client is admitted under `limit`: the last quarter (at least
/// one slot) is kept for the others, and a heavy client still has at least one.
#[inline]
pub fn cap(limit: u32) -> u32 {
    limit.saturating_sub((limit / 4).max(1)).max(1)
}

/// The mark a client of `tag` leaves when it asks, light, at `now_ms`.
#[inline]
pub fn mark(tag: u16, now_ms: u64) -> u64 {
    (now_ms << 16) | u64::from(tag)
}

fn tag_of(m: u64) -> u16 {
    (m & 0xffff) as u16
}

/// When a heavy request of a client ended, as its cells keep it: `now_ms` truncated, never 0
/// (which names none).
#[inline]
pub fn stamp(now_ms: u64) -> u32 {
    (now_ms as u32).max(1)
}

/// Whether `stamp` ([`stamp`]) is within [`PRESENT_MS`] of `now_ms` (wrapping: a stamp
/// 49 days old may read as recent, which only sets a few answers apart).
#[inline]
pub fn recent(stamp: u32, now_ms: u64) -> bool {
    stamp != 0 && u64::from((now_ms as u32).wrapping_sub(stamp)) < PRESENT_MS
}

/// What a client holds, as the shared counts say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// The limit, and requests in flight under it.
    pub limit: u32,
    pub inflight: u32,
    /// The client's own requests in flight (the sketch's: never fewer than its true count).
    pub own: u32,
    /// Whether a request of its began or ended heavy within [`PRESENT_MS`] ([`recent`] in
    /// every cell of its).
    pub was_heavy: bool,
}

/// How a client of `tag` holding `held` stands at `now_ms`, the last clients that asked having
/// left `marks` ([`mark`]; 0 for none).
#[inline]
pub fn standing(held: Held, tag: u16, marks: [u64; MARKS], now_ms: u64) -> Standing {
    let Held {
        limit,
        inflight,
        own,
        was_heavy,
    } = held;
    let heavy = own >= heavy_at(limit) && own > inflight.saturating_sub(own);
    if !(heavy || was_heavy) || !others_present(marks, tag, now_ms) {
        Standing::Light
    } else if heavy {
        Standing::Heavy
    } else {
        Standing::Suspect
    }
}

/// Whether `marks` name a client other than `tag` that asked within [`PRESENT_MS`] of
/// `now_ms`: without one, no client is heavy nor suspect.
#[inline]
pub fn others_present(marks: [u64; MARKS], tag: u16, now_ms: u64) -> bool {
    marks
        .into_iter()
        .any(|m| m != 0 && tag_of(m) != tag && now_ms.saturating_sub(m >> 16) < PRESENT_MS)
}

/// Which of `marks` a client of `tag` asking at `now_ms` (not heavy) writes its mark to: its own,
/// once older than a tenth of [`PRESENT_MS`] (a shared word written on every request would
/// bounce between the workers' caches); else the oldest. `None`: its own is fresh.
#[inline]
pub fn mark_at(marks: [u64; MARKS], tag: u16, now_ms: u64) -> Option<usize> {
    if let Some(i) = marks.iter().position(|&m| m != 0 && tag_of(m) == tag) {
        let fresh = now_ms.saturating_sub(marks[i] >> 16) < PRESENT_MS / 10;
        return (!fresh).then_some(i);
    }
    (0..MARKS).min_by_key(|&i| marks[i] >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_client_alone_is_never_heavy() {
        let last = [mark(7, 1000), 0];
        let with_8 = [mark(8, 1400), last[0]];
        use Standing::*;
        // (in flight, its own, was heavy, its tag, marks, now): how it stands
        let cases = [
            ((99, 99, false), 7, last, 1500, Light),
            ((99, 99, true), 7, [0, 0], 1500, Light),
            ((30, 24, false), 8, last, 1500, Light),
            ((30, 25, false), 8, last, 1500, Heavy),
            ((0, 0, true), 8, last, 1500, Suspect),
            // half of what is in flight is not more than the others hold
            ((60, 30, false), 8, last, 1500, Light),
            ((59, 30, false), 8, last, 1500, Heavy),
            // the other client left more than PRESENT_MS ago
            ((30, 25, false), 8, last, 2000, Light),
            ((30, 25, false), 8, with_8, 1500, Heavy),
        ];
        for ((inflight, own, was_heavy), tag, marks, now, want) in cases {
            let held = Held {
                limit: 100,
                inflight,
                own,
                was_heavy,
            };
            assert_eq!(standing(held, tag, marks, now), want, "{held:?} {tag}");
        }
        assert!(Standing::Heavy.apart() && Standing::Suspect.apart());
        assert!(!Standing::Light.apart());
    }

    /// A heavy client's own light requests (the first of a burst) take one mark, never the
    /// other client's: it is heavy from its next request on.
    #[test]
    fn a_burst_of_one_client_cannot_wipe_another_out() {
        let mut marks = [0u64; MARKS];
        let mut ask = |tag: u16, own: u32, now: u64| {
            let held = Held {
                limit: 20,
                inflight: own,
                own,
                was_heavy: false,
            };
            let s = standing(held, tag, marks, now);
            if s != Standing::Heavy {
                if let Some(i) = mark_at(marks, tag, now) {
                    marks[i] = mark(tag, now);
                }
            }
            s
        };
        assert_eq!(ask(7, 0, 1000), Standing::Light, "the victim");
        for (own, now) in (0..5).zip(1001..) {
            assert_eq!(
                ask(9, own, now),
                Standing::Light,
                "the attacker's first ones"
            );
        }
        assert_eq!(ask(9, 5, 1200), Standing::Heavy);
        assert_eq!(ask(7, 0, 1201), Standing::Light);
        assert_eq!(ask(9, 5, 2100), Standing::Heavy, "the victim asked at 1201");
        assert_eq!(ask(9, 5, 2300), Standing::Light, "nobody else for a second");
    }

    #[test]
    fn an_ipv6_host_is_its_64_and_a_mapped_ipv4_its_ipv4() {
        let key = |s: &str| {
            let (k, n) = address_key(s.parse().unwrap());
            k[..n].to_vec()
        };
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::ffff:192.0.2.7"), key("192.0.2.7"));
        assert_ne!(key("192.0.2.7"), key("192.0.2.8"));
        assert_ne!(key("0.0.0.0"), key("::"));
    }

    #[test]
    fn stamps_are_recent_for_a_period_and_never_none() {
        assert_eq!(stamp(0), 1);
        assert!(recent(stamp(5000), 5999) && !recent(stamp(5000), 6000));
        assert!(!recent(0, 10));
        assert!(recent(
            stamp(u64::from(u32::MAX)),
            u64::from(u32::MAX) + 500
        ));
    }

    #[test]
    fn the_cap_keeps_a_quarter_and_at_least_one_slot_each_way() {
        assert_eq!(cap(100), 75);
        assert_eq!(cap(3), 2);
        assert_eq!(cap(1), 1);
        assert_eq!(heavy_at(3), 1);
    }

    #[test]
    fn a_client_writes_its_own_mark_ten_times_a_period_or_the_oldest() {
        let marks = [mark(7, 1000), mark(8, 900)];
        assert_eq!(mark_at(marks, 7, 1099), None);
        assert_eq!(mark_at(marks, 7, 1100), Some(0));
        assert_eq!(mark_at(marks, 9, 1001), Some(1));
        assert_eq!(mark_at([0, mark(8, 900)], 9, 1001), Some(0));
    }

    proptest! {
        #[test]
        fn cells_are_in_the_sketch_and_tags_name_someone(hash: u64) {
            let c = Client::of(hash);
            for row in 0..ROWS {
                prop_assert!(c.index(row) >= row * WIDTH && c.index(row) < (row + 1) * WIDTH);
            }
            prop_assert_ne!(c.tag, 0);
        }

        #[test]
        fn heavy_only_with_someone_else_present_holding_the_most(
            limit in 1u32..5000, own in 0u32..5000, others in 0u32..5000, was_heavy: bool,
            tag in 1u16.., other in 1u16.., then in 0u64..1 << 40, after in 0u64..3000,
        ) {
            let marks = [mark(other, then), mark(tag, then)];
            let held = Held { limit, inflight: own + others, own, was_heavy };
            let s = standing(held, tag, marks, then + after);
            let heavy = own >= heavy_at(limit) && own > others;
            let present = other != tag && after < PRESENT_MS;
            prop_assert_eq!(s == Standing::Heavy, heavy && present);
            prop_assert_eq!(s == Standing::Suspect, !heavy && was_heavy && present);
            prop_assert_eq!(s == Standing::Light, !(heavy || was_heavy) || !present);
            prop_assert!(cap(limit) >= 1 && cap(limit) <= limit);
        }
    }
}
