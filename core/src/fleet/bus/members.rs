//! Who is in the fleet on a bus, and which of their messages are news: the bus is a
//! carrier, not a trusted party, and anyone with access to it can record a sealed message and
//! publish it again. A member's opinions carry its sequence; only one above the last taken
//! from it is news. The first word taken from a member, and the word taken again after its
//! sequence went backwards, is a reply to a hello of this instance: sealed with this
//! instance's fresh nonce, it cannot be a recording, and its sequence becomes the one to beat.
//! So a recorded message is believed at most once, by an instance that had not heard it, and
//! only while the member's later ones were not yet heard.
//!
//! Membership is whoever speaks: a member is known from its first sealed message, and
//! forgotten once nothing was taken from it for the expiry (its opinions expire with it).
//! Bounded: at most `max` members, every hello of this instance kept for the expiry and at
//! most [`MAX_HELLOS`] at once, one answered hello per member per pace.

use std::collections::{HashMap, VecDeque};

use crate::fleet::auth::{Nonce, POKE_AHEAD_US};

/// Hellos of this instance awaiting replies at once; an older one is dropped.
pub const MAX_HELLOS: usize = 8;

/// What to do with a message of a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// Believe it.
    Accept,
    /// Refuse it; with `ask`, send the member a hello of its own (at most once per pace), so
    /// that its next word can be believed.
    Refuse { why: Why, ask: bool },
}

/// Why a message was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// Its sequence is not above the last taken from its sender: a recording, or a
    /// member whose clock went back.
    Replayed,
    /// Its sequence is further ahead of this instance's clock than [`POKE_AHEAD_US`].
    Ahead,
    /// Nothing was taken from its sender yet: its word waits for a reply to a hello.
    Unverified,
    /// A reply to no hello of this instance that is still awaited, or one it took already.
    UnknownNonce,
    /// The table is full.
    Full,
    /// It names this instance as its sender: another instance uses this id.
    OwnId,
}

impl Why {
    /// The counter's name on the status page.
    pub fn name(self) -> &'static str {
        match self {
            Why::Replayed => "replayed",
            Why::Ahead => "ahead",
            Why::Unverified => "unverified",
            Why::UnknownNonce => "unknown_nonce",
            Why::Full => "members_full",
            Why::OwnId => "own_id",
        }
    }

    /// Every reason, in the status page's order.
    pub const ALL: [Why; 6] = [
        Why::Replayed,
        Why::Ahead,
        Why::Unverified,
        Why::UnknownNonce,
        Why::Full,
        Why::OwnId,
    ];
}

#[derive(Clone, Debug, Default)]
struct Member {
    /// The highest sequence taken from it.
    last_seq: Option<u64>,
    /// When a message of it was last taken.
    heard_ms: Option<u64>,
    /// When this instance last asked it (a targeted hello).
    asked_ms: Option<u64>,
    /// When this instance last answered its hello.
    answered_ms: Option<u64>,
    /// When it was first seen (any sealed message): one never heard is forgotten after the
    /// expiry too.
    seen_ms: u64,
}

/// A hello of this instance, and the members that answered it.
#[derive(Clone, Debug)]
struct Hello {
    nonce: Nonce,
    sent_ms: u64,
    answered: Vec<String>,
}

/// See the module's documentation.
#[derive(Clone, Debug)]
pub struct Members {
    own: String,
    max: usize,
    expire_ms: u64,
    pace_ms: u64,
    members: HashMap<String, Member>,
    hellos: VecDeque<Hello>,
    refused: [u64; Why::ALL.len()],
}

impl Members {
    /// The table of instance `own`: at most `max` members, forgotten after `expire_ms`
    /// without a word, asked and answered at most once per `pace_ms` each.
    pub fn new(own: &str, max: usize, expire_ms: u64, pace_ms: u64) -> Members {
        Members {
            own: own.to_owned(),
            max,
            expire_ms,
            pace_ms,
            members: HashMap::new(),
            hellos: VecDeque::new(),
            refused: [0; Why::ALL.len()],
        }
    }

    /// Members heard within the expiry.
    pub fn heard(&self, now_ms: u64) -> usize {
        self.members
            .values()
            .filter(|m| {
                m.heard_ms
                    .is_some_and(|t| now_ms.saturating_sub(t) <= self.expire_ms)
            })
            .count()
    }

    /// Messages refused, by reason ([`Why::ALL`]'s order).
    pub fn refused(&self) -> [(Why, u64); Why::ALL.len()] {
        let mut out = [(Why::Replayed, 0); Why::ALL.len()];
        for (o, (w, n)) in out.iter_mut().zip(Why::ALL.iter().zip(self.refused)) {
            *o = (*w, n);
        }
        out
    }

    fn refuse(&mut self, why: Why, ask: bool) -> Take {
        self.refused[Why::ALL.iter().position(|&w| w == why).unwrap_or(0)] += 1;
        Take::Refuse { why, ask }
    }

    /// The member `id`, made when there is room.
    fn member(&mut self, now_ms: u64, id: &str) -> Option<&mut Member> {
        if !self.members.contains_key(id) {
            if self.members.len() >= self.max {
                return None;
            }
            self.members.insert(
                id.to_owned(),
                Member {
                    seen_ms: now_ms,
                    ..Member::default()
                },
            );
        }
        self.members.get_mut(id)
    }

    /// Whether to ask `m` now, noting it when so.
    fn ask(pace_ms: u64, now_ms: u64, m: &mut Member) -> bool {
        let due = m
            .asked_ms
            .map_or(true, |t| now_ms.saturating_sub(t) >= pace_ms);
        if due {
            m.asked_ms = Some(now_ms);
        }
        due
    }

    /// A sealed `opinions` message of `sender` at sequence `seq`, taken at `now_ms` (the
    /// monotonic clock) and `now_us` (the wall clock, in microseconds).
    pub fn opinions(&mut self, now_ms: u64, now_us: u64, sender: &str, seq: u64) -> Take {
        if sender == self.own {
            return self.refuse(Why::OwnId, false);
        }
        if seq > now_us.saturating_add(POKE_AHEAD_US) {
            return self.refuse(Why::Ahead, false);
        }
        let pace = self.pace_ms;
        let Some(m) = self.member(now_ms, sender) else {
            return self.refuse(Why::Full, false);
        };
        match m.last_seq {
            Some(last) if seq > last => {
                m.last_seq = Some(seq);
                m.heard_ms = Some(now_ms);
                Take::Accept
            }
            Some(_) => {
                let ask = Self::ask(pace, now_ms, m);
                self.refuse(Why::Replayed, ask)
            }
            None => {
                let ask = Self::ask(pace, now_ms, m);
                self.refuse(Why::Unverified, ask)
            }
        }
    }

    /// This instance sent a hello with `nonce` at `now_ms`.
    pub fn hello_sent(&mut self, now_ms: u64, nonce: Nonce) {
        if self.hellos.len() >= MAX_HELLOS {
            self.hellos.pop_front();
        }
        self.hellos.push_back(Hello {
            nonce,
            sent_ms: now_ms,
            answered: Vec::new(),
        });
    }

    /// A sealed reply of `sender` at sequence `seq` to the hello `nonce`.
    pub fn reply(
        &mut self,
        now_ms: u64,
        now_us: u64,
        sender: &str,
        seq: u64,
        nonce: &Nonce,
    ) -> Take {
        if sender == self.own {
            return self.refuse(Why::OwnId, false);
        }
        if seq > now_us.saturating_add(POKE_AHEAD_US) {
            return self.refuse(Why::Ahead, false);
        }
        let exp = self.expire_ms;
        let Some(h) = self
            .hellos
            .iter_mut()
            .find(|h| h.nonce == *nonce && now_ms.saturating_sub(h.sent_ms) <= exp)
        else {
            return self.refuse(Why::UnknownNonce, false);
        };
        if h.answered.iter().any(|a| a == sender) {
            return self.refuse(Why::UnknownNonce, false);
        }
        if h.answered.len() >= self.max {
            return self.refuse(Why::Full, false);
        }
        h.answered.push(sender.to_owned());
        let Some(m) = self.member(now_ms, sender) else {
            return self.refuse(Why::Full, false);
        };
        // Fresh by the nonce: its sequence is the one to beat from now on, even below an
        // earlier one (its clock went back), so that its broadcasts are heard again.
        m.last_seq = Some(seq);
        m.heard_ms = Some(now_ms);
        Take::Accept
    }

    /// A sealed hello of `sender`: whether to answer it now (once per pace per member).
    pub fn hello_from(&mut self, now_ms: u64, sender: &str) -> bool {
        if sender == self.own {
            self.refuse(Why::OwnId, false);
            return false;
        }
        let pace = self.pace_ms;
        let Some(m) = self.member(now_ms, sender) else {
            self.refuse(Why::Full, false);
            return false;
        };
        let due = m
            .answered_ms
            .map_or(true, |t| now_ms.saturating_sub(t) >= pace);
        if due {
            m.answered_ms = Some(now_ms);
        }
        due
    }

    /// Forgets the members nothing was taken from for the expiry, and the hellos it ended:
    /// the ids of the members forgotten that had been heard (their opinions go with them).
    pub fn forget(&mut self, now_ms: u64) -> Vec<String> {
        let exp = self.expire_ms;
        let mut gone = Vec::new();
        self.members.retain(|id, m| {
            let last = m.heard_ms.unwrap_or(m.seen_ms).max(m.asked_ms.unwrap_or(0));
            let keep = now_ms.saturating_sub(last) <= exp;
            if !keep && m.heard_ms.is_some() {
                gone.push(id.clone());
            }
            keep
        });
        self.hellos
            .retain(|h| now_ms.saturating_sub(h.sent_ms) <= exp);
        gone.sort();
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const US: u64 = 1_700_000_000_000_000;

    fn table() -> Members {
        Members::new("me", 4, 3000, 250)
    }

    fn verified(t: &mut Members, id: &str, seq: u64, nonce: u8) {
        let n = Nonce([nonce; 16]);
        t.hello_sent(0, n);
        assert_eq!(t.reply(0, US, id, seq, &n), Take::Accept);
    }

    #[test]
    fn a_member_is_believed_after_a_reply_then_in_order() {
        let mut t = table();
        assert_eq!(
            t.opinions(0, US, "a", US - 5),
            Take::Refuse {
                why: Why::Unverified,
                ask: true
            }
        );
        // Asked once per pace.
        assert_eq!(
            t.opinions(10, US, "a", US - 4),
            Take::Refuse {
                why: Why::Unverified,
                ask: false
            }
        );
        verified(&mut t, "a", US - 3, 1);
        assert_eq!(
            t.opinions(20, US, "a", US - 3),
            Take::Refuse {
                why: Why::Replayed,
                ask: false
            }
        );
        assert_eq!(t.opinions(20, US, "a", US - 1), Take::Accept);
        // The same message again, and an older one: recordings.
        assert!(matches!(
            t.opinions(30, US, "a", US - 1),
            Take::Refuse {
                why: Why::Replayed,
                ..
            }
        ));
        assert!(matches!(
            t.opinions(30, US, "a", US - 2),
            Take::Refuse {
                why: Why::Replayed,
                ..
            }
        ));
        assert_eq!(t.heard(30), 1);
    }

    #[test]
    fn a_reply_counts_once_and_only_for_an_awaited_hello() {
        let mut t = table();
        let n = Nonce([9; 16]);
        assert_eq!(
            t.reply(0, US, "a", 1, &n),
            Take::Refuse {
                why: Why::UnknownNonce,
                ask: false
            }
        );
        t.hello_sent(0, n);
        assert_eq!(t.reply(1, US, "a", 1, &n), Take::Accept);
        assert!(matches!(
            t.reply(2, US, "a", 2, &n),
            Take::Refuse {
                why: Why::UnknownNonce,
                ..
            }
        ));
        // Another member answers the same hello.
        assert_eq!(t.reply(2, US, "b", 5, &n), Take::Accept);
        // Past the expiry the hello is no longer awaited.
        assert!(matches!(
            t.reply(3001, US, "c", 5, &n),
            Take::Refuse {
                why: Why::UnknownNonce,
                ..
            }
        ));
    }

    #[test]
    fn a_member_whose_clock_went_back_is_heard_again_through_a_reply() {
        let mut t = table();
        verified(&mut t, "a", US, 1);
        assert_eq!(
            t.opinions(300, US, "a", US - 1_000_000),
            Take::Refuse {
                why: Why::Replayed,
                ask: true
            }
        );
        verified(&mut t, "a", US - 999_000, 2);
        assert_eq!(t.opinions(600, US, "a", US - 998_000), Take::Accept);
    }

    #[test]
    fn bounds_hold() {
        let mut t = table();
        for (i, id) in ["a", "b", "c", "d"].iter().enumerate() {
            verified(&mut t, id, 1, i as u8);
        }
        assert!(matches!(
            t.opinions(0, US, "e", 2),
            Take::Refuse { why: Why::Full, .. }
        ));
        assert!(!t.hello_from(0, "e"));
        assert!(matches!(
            t.opinions(0, US, "me", 2),
            Take::Refuse {
                why: Why::OwnId,
                ..
            }
        ));
        assert!(matches!(
            t.opinions(0, US, "a", US + POKE_AHEAD_US + 1),
            Take::Refuse {
                why: Why::Ahead,
                ..
            }
        ));
        for i in 0..20u8 {
            t.hello_sent(0, Nonce([100 + i; 16]));
        }
        assert_eq!(t.hellos.len(), MAX_HELLOS);
        // Forgotten after the expiry, with room again.
        assert_eq!(t.forget(3001), ["a", "b", "c", "d"]);
        assert!(matches!(
            t.opinions(3001, US, "e", 2),
            Take::Refuse {
                why: Why::Unverified,
                ..
            }
        ));
        let refused: u64 = t.refused().iter().map(|(_, n)| n).sum();
        assert!(refused >= 5);
    }

    #[test]
    fn hellos_are_answered_once_per_pace() {
        let mut t = table();
        assert!(t.hello_from(0, "a"));
        assert!(!t.hello_from(100, "a"));
        assert!(t.hello_from(250, "a"));
        assert!(t.hello_from(250, "b"));
        assert!(!t.hello_from(0, "me"));
    }

    proptest! {
        /// Whatever a bus replays, in whatever order, a member's opinions are believed only
        /// in increasing sequence, each at most once.
        #[test]
        fn no_sequence_is_believed_twice(
            seqs in proptest::collection::vec(0u64..50, 0..200),
            start in 0u64..50,
        ) {
            let mut t = table();
            verified(&mut t, "a", start, 1);
            let mut last = start;
            for (i, s) in seqs.into_iter().enumerate() {
                match t.opinions(i as u64, US, "a", s) {
                    Take::Accept => {
                        prop_assert!(s > last);
                        last = s;
                    }
                    Take::Refuse { why, .. } => prop_assert_eq!(why, Why::Replayed),
                }
            }
        }
    }
}
