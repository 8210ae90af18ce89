//! Who is in the fleet on a bus, and which of their messages are news: the bus is a
//! carrier, not a trusted party, and anyone with access to it can record a sealed message and
//! publish it again. A member's opinions carry its sequence; only one above the last taken
//! from it is news. The first word taken from a member, and the word taken again after its
//! sequence went backwards, is a reply to a hello of this instance: sealed with this
//! instance's fresh nonce, it cannot be a recording, and its sequence becomes the one to beat.
//! So a recorded message is believed at most once, by an instance that had not heard it, and
//! only while the member's later ones were not yet heard.
//!
//! A reply counts only within a round of its hello, and never lowers a member's sequence
//! below a word taken after that hello was sent: a reply recorded and held back cannot bring
//! back what the member has said since. Every message is dated by its sequence (the sender's
//! clock): one older than the expiry and a minute is refused before anything is kept of its
//! sender, so recordings expire with the opinions they carry.
//!
//! Membership is whoever speaks: a member is known from its first sealed message, and
//! forgotten once nothing was taken from it for the expiry (its opinions expire with it).
//! Bounded: at most `max` members, of which at most [`MAX_UNVERIFIED`] not yet believed (a
//! believed one takes the place of the oldest of those when full); every hello of this
//! instance kept for a round and at most [`MAX_HELLOS`] at once; one answer per member per
//! pace, and none to a hello no newer than the last one taken from it (so that recorded
//! hellos replayed use up no turn). A recording refused asks its member for nothing while
//! that member's word is current, and such asks are at most one per pace in all (so that
//! replayed opinions cannot make the fleet ask and answer each other).

use std::collections::{HashMap, VecDeque};

use crate::fleet::auth::{Nonce, POKE_AHEAD_US};

/// Hellos of this instance awaiting replies at once; an older one is dropped.
pub const MAX_HELLOS: usize = 64;
/// Senders not yet believed kept at once: recordings of departed members cannot fill the
/// table.
pub const MAX_UNVERIFIED: usize = 64;
/// How far behind this instance's clock a message's sequence may be beyond the expiry (µs):
/// clocks of a fleet's machines differ by far less.
pub const BEHIND_US: u64 = 60_000_000;

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
    /// Its sequence is older than the expiry (and a minute) by this instance's clock: a
    /// recording.
    Stale,
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
            Why::Stale => "stale",
        }
    }

    /// Every reason, in the status page's order.
    pub const ALL: [Why; 7] = [
        Why::Replayed,
        Why::Ahead,
        Why::Unverified,
        Why::UnknownNonce,
        Why::Full,
        Why::OwnId,
        Why::Stale,
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
    /// The sequence of its newest hello taken (answered, or not due yet): an older one is a
    /// recording.
    hello_seq: Option<u64>,
    /// When it was first seen (any sealed message): one never heard is forgotten after the
    /// expiry too.
    seen_ms: u64,
    /// How long its last word lasts, when longer than the expiry: a quiet member speaks less
    /// often ([`Members::lasts`]).
    lasts_ms: u64,
}

/// A hello of this instance, and the members that answered it.
#[derive(Clone, Debug)]
struct Hello {
    nonce: Nonce,
    sent_ms: u64,
    /// Said to everyone (on connecting), not asked of one member.
    everyone: bool,
    answered: Vec<String>,
}

/// Members heard, counted in one pass as a step begins and kept up to date as the step takes
/// its messages: a pass per message would cost the fleet's size each time, and a count kept
/// from the step's start would believe a joining member's many replies for a fleet of none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Headcount(usize);

impl Headcount {
    /// The members heard.
    pub fn get(self) -> usize {
        self.0
    }
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
    /// When a refused recording last made this instance ask its member.
    replay_asked_ms: Option<u64>,
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
            replay_asked_ms: None,
        }
    }

    /// Members heard within the expiry.
    pub fn heard(&self, now_ms: u64) -> usize {
        self.members
            .values()
            .filter(|m| self.within(m, now_ms))
            .count()
    }

    /// Whether `id` is one of the members [`Members::heard`] counts at `now_ms`.
    pub fn is_heard(&self, id: &str, now_ms: u64) -> bool {
        self.members.get(id).is_some_and(|m| self.within(m, now_ms))
    }

    /// [`Members::heard`] at `now_ms`, to be kept up to date with [`Members::take_counted`]
    /// through one step's messages.
    pub fn headcount(&self, now_ms: u64) -> Headcount {
        Headcount(self.heard(now_ms))
    }

    /// A message from `sender`, taken with `take` ([`Members::opinions`] or
    /// [`Members::reply`]): `count` is one more when it makes `sender` heard.
    pub fn take_counted(
        &mut self,
        count: &mut Headcount,
        now_ms: u64,
        sender: &str,
        take: impl FnOnce(&mut Members) -> Take,
    ) -> Take {
        let was = self.is_heard(sender, now_ms);
        let took = take(self);
        count.0 += usize::from(!was && self.is_heard(sender, now_ms));
        took
    }

    fn within(&self, m: &Member, now_ms: u64) -> bool {
        m.heard_ms
            .is_some_and(|t| now_ms.saturating_sub(t) <= self.expire_ms.max(m.lasts_ms))
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

    /// The member `id`, made when there is room: for one not yet believed, while fewer than
    /// [`MAX_UNVERIFIED`] such are kept; for one `believed`, in the place of the oldest of
    /// those when the table is full.
    fn member(&mut self, now_ms: u64, id: &str, believed: bool) -> Option<&mut Member> {
        if !self.members.contains_key(id) {
            let unverified = self
                .members
                .values()
                .filter(|m| m.last_seq.is_none())
                .count();
            if !believed && unverified >= MAX_UNVERIFIED {
                return None;
            }
            if self.members.len() >= self.max {
                let oldest = self
                    .members
                    .iter()
                    .filter(|(_, m)| m.last_seq.is_none())
                    .min_by_key(|(_, m)| m.seen_ms)
                    .map(|(k, _)| k.clone());
                match oldest.filter(|_| believed) {
                    Some(k) => {
                        self.members.remove(&k);
                    }
                    None => return None,
                }
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

    /// Why a sequence cannot be news at `now_us`, whoever sent it.
    fn dated(&self, seq: u64, now_us: u64) -> Option<Why> {
        if seq > now_us.saturating_add(POKE_AHEAD_US) {
            return Some(Why::Ahead);
        }
        let behind = self
            .expire_ms
            .saturating_mul(1000)
            .saturating_add(BEHIND_US);
        (seq < now_us.saturating_sub(behind)).then_some(Why::Stale)
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
        if let Some(why) = self.dated(seq, now_us) {
            return self.refuse(why, false);
        }
        let pace = self.pace_ms;
        let spare = self
            .replay_asked_ms
            .map_or(true, |t| now_ms.saturating_sub(t) >= pace);
        let Some(m) = self.member(now_ms, sender, false) else {
            return self.refuse(Why::Full, false);
        };
        match m.last_seq {
            Some(last) if seq > last => {
                m.last_seq = Some(seq);
                m.heard_ms = Some(now_ms);
                Take::Accept
            }
            Some(_) => {
                // A recording, or a member whose clock went back, which only an ask (its
                // reply) lets be heard again. While its word is current (taken within a
                // round), its clock did not go back; and replayed recordings of every member
                // would otherwise have each instance ask, and each member answer, every pace.
                let current = m
                    .heard_ms
                    .is_some_and(|t| now_ms.saturating_sub(t) < pace.saturating_mul(4));
                let ask = spare && !current && Self::ask(pace, now_ms, m);
                if ask {
                    self.replay_asked_ms = Some(now_ms);
                }
                self.refuse(Why::Replayed, ask)
            }
            None => {
                let ask = Self::ask(pace, now_ms, m);
                self.refuse(Why::Unverified, ask)
            }
        }
    }

    /// How long the word just taken from `sender` lasts ([`super::lasts_ms`] of the period
    /// its message states): a quiet member is forgotten only after that much silence.
    pub fn lasts(&mut self, sender: &str, lasts_ms: u64) {
        if let Some(m) = self.members.get_mut(sender) {
            m.lasts_ms = lasts_ms;
        }
    }

    /// This instance sent a hello with `nonce` at `now_ms`: to `everyone`, or asked of one
    /// member.
    pub fn hello_sent(&mut self, now_ms: u64, nonce: Nonce, everyone: bool) {
        if self.hellos.len() >= MAX_HELLOS {
            // The oldest ask gives way first: asks come one per member heard first by its
            // broadcast — or per recording of a departed member replayed, up to
            // [`MAX_UNVERIFIED`] a pace — and must not push out the hello whose replies tell
            // this instance the whole fleet.
            let oldest = self.hellos.iter().position(|h| !h.everyone).unwrap_or(0);
            self.hellos.remove(oldest);
        }
        self.hellos.push_back(Hello {
            nonce,
            sent_ms: now_ms,
            everyone,
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
        if let Some(why) = self.dated(seq, now_us) {
            return self.refuse(why, false);
        }
        // A reply comes within a round trip: one held back longer is not taken.
        let window = self.pace_ms.saturating_mul(4);
        let Some(h) = self
            .hellos
            .iter()
            .position(|h| h.nonce == *nonce && now_ms.saturating_sub(h.sent_ms) <= window)
        else {
            return self.refuse(Why::UnknownNonce, false);
        };
        if self.hellos[h].answered.iter().any(|a| a == sender) {
            return self.refuse(Why::UnknownNonce, false);
        }
        if self.hellos[h].answered.len() >= self.max {
            return self.refuse(Why::Full, false);
        }
        let sent_ms = self.hellos[h].sent_ms;
        let Some(m) = self.member(now_ms, sender, true) else {
            return self.refuse(Why::Full, false);
        };
        // Fresh by the nonce, but a word taken since the hello was sent is newer than this
        // reply: it stands. Below an earlier word and before any since, its clock went back:
        // its sequence is the one to beat from now on, so that its broadcasts are heard again.
        if let Some(last) = m.last_seq {
            if seq <= last && m.heard_ms.is_some_and(|t| t >= sent_ms) {
                return self.refuse(Why::Replayed, false);
            }
        }
        m.last_seq = Some(seq);
        m.heard_ms = Some(now_ms);
        self.hellos[h].answered.push(sender.to_owned());
        Take::Accept
    }

    /// A sealed hello of `sender` at sequence `seq`: whether to answer it now. Once per pace
    /// per member, and only a hello newer than any taken from it before: recorded hellos
    /// replayed in turn (each of another nonce) would otherwise use up every turn of the
    /// member's, and starve its own hellos of answers.
    pub fn hello_from(&mut self, now_ms: u64, now_us: u64, sender: &str, seq: u64) -> bool {
        if sender == self.own {
            self.refuse(Why::OwnId, false);
            return false;
        }
        if let Some(why) = self.dated(seq, now_us) {
            self.refuse(why, false);
            return false;
        }
        let pace = self.pace_ms;
        let Some(m) = self.member(now_ms, sender, false) else {
            self.refuse(Why::Full, false);
            return false;
        };
        if m.hello_seq.is_some_and(|last| seq <= last) {
            return false;
        }
        m.hello_seq = Some(seq);
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
            let keep = now_ms.saturating_sub(last) <= exp.max(m.lasts_ms);
            if !keep && m.heard_ms.is_some() {
                gone.push(id.clone());
            }
            keep
        });
        let window = self.pace_ms.saturating_mul(4);
        self.hellos
            .retain(|h| now_ms.saturating_sub(h.sent_ms) <= window);
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

    fn verified(t: &mut Members, now: u64, id: &str, seq: u64, nonce: u8) {
        let n = Nonce([nonce; 16]);
        t.hello_sent(now, n, false);
        assert_eq!(t.reply(now, US, id, seq, &n), Take::Accept);
    }

    /// A member that joins a quiet fleet hears every member's reply in one step: each is
    /// believed for the fleet heard so far, as a count made afresh would say.
    #[test]
    fn a_step_s_replies_are_counted_as_they_make_members_heard() {
        let mut t = Members::new("me", 300, 3000, 250);
        let n = Nonce([1; 16]);
        t.hello_sent(0, n, false);
        let mut count = t.headcount(1);
        assert_eq!(count.get(), 0);
        for i in 0..199 {
            let id = format!("m{i}");
            let took = t.take_counted(&mut count, 1, &id, |m| m.reply(1, US, &id, US, &n));
            assert_eq!(took, Take::Accept);
            assert_eq!(count.get(), i + 1);
            assert_eq!(count.get(), t.heard(1));
        }
        // A quiet member of 199 says it speaks every 13 intervals: its word lasts 3 of them
        // here, not the 6 intervals a fleet of none would allow.
        assert_eq!(super::super::lasts_ms(13_000, 1_000, count.get()), 39_000);
        // Heard again while heard: no more; a refused word (a reply to no hello): none.
        let took = t.take_counted(&mut count, 2, "m0", |m| m.opinions(2, US, "m0", US + 1));
        assert_eq!(took, Take::Accept);
        let other = Nonce([7; 16]);
        let took = t.take_counted(&mut count, 2, "x", |m| m.reply(2, US, "x", US, &other));
        assert_ne!(took, Take::Accept);
        assert_eq!(count.get(), 199);
        assert_eq!(count.get(), t.heard(2));
        // After the expiry, a member's next word makes it heard again: counted afresh first.
        let mut count = t.headcount(5_000);
        assert_eq!(count.get(), 0);
        let again = Nonce([5; 16]);
        t.hello_sent(5_000, again, false);
        let took = t.take_counted(&mut count, 5_000, "m0", |m| {
            m.reply(5_000, US, "m0", US + 2, &again)
        });
        assert_eq!(took, Take::Accept);
        assert_eq!((count.get(), t.heard(5_000)), (1, 1));
        assert!(t.is_heard("m0", 5_000) && !t.is_heard("m1", 5_000) && !t.is_heard("z", 5_000));
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
        verified(&mut t, 15, "a", US - 3, 1);
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
    fn a_reply_counts_once_within_a_round_of_its_hello() {
        let mut t = table();
        let n = Nonce([9; 16]);
        assert_eq!(
            t.reply(0, US, "a", US, &n),
            Take::Refuse {
                why: Why::UnknownNonce,
                ask: false
            }
        );
        t.hello_sent(0, n, false);
        assert_eq!(t.reply(1, US, "a", US, &n), Take::Accept);
        assert!(matches!(
            t.reply(2, US, "a", US + 1, &n),
            Take::Refuse {
                why: Why::UnknownNonce,
                ..
            }
        ));
        // Another member answers the same hello.
        assert_eq!(t.reply(2, US, "b", US, &n), Take::Accept);
        // Past a round (4 paces) the hello is no longer awaited.
        assert!(matches!(
            t.reply(1001, US, "c", US, &n),
            Take::Refuse {
                why: Why::UnknownNonce,
                ..
            }
        ));
    }

    #[test]
    fn a_reply_held_back_cannot_bring_back_an_older_word() {
        let mut t = table();
        verified(&mut t, 0, "a", US, 1);
        // A hello to a; its reply (at US + 10) is recorded and held back by someone.
        let n = Nonce([2; 16]);
        t.hello_sent(100, n, false);
        // a says newer things, believed.
        assert_eq!(t.opinions(200, US, "a", US + 20), Take::Accept);
        // The held-back reply is not news any more.
        assert!(matches!(
            t.reply(300, US, "a", US + 10, &n),
            Take::Refuse {
                why: Why::Replayed,
                ..
            }
        ));
        assert_eq!(t.opinions(400, US, "a", US + 21), Take::Accept);
    }

    #[test]
    fn a_member_whose_clock_went_back_is_heard_again_through_a_reply() {
        let mut t = table();
        verified(&mut t, 0, "a", US, 1);
        // Its word still current: a recording as far as anyone can tell.
        assert_eq!(
            t.opinions(300, US, "a", US - 1_000_000),
            Take::Refuse {
                why: Why::Replayed,
                ask: false
            }
        );
        // Nothing taken from it for a round: asked.
        assert_eq!(
            t.opinions(1_000, US, "a", US - 999_500),
            Take::Refuse {
                why: Why::Replayed,
                ask: true
            }
        );
        verified(&mut t, 1_010, "a", US - 999_000, 2);
        assert_eq!(t.opinions(1_300, US, "a", US - 998_000), Take::Accept);
    }

    #[test]
    fn recordings_expire_with_their_opinions() {
        let mut t = table();
        let old = US - 3_000_000 - BEHIND_US - 1;
        assert!(matches!(
            t.opinions(0, US, "a", old),
            Take::Refuse {
                why: Why::Stale,
                ask: false
            }
        ));
        assert!(!t.hello_from(0, US, "a", old));
        t.hello_sent(0, Nonce([3; 16]), false);
        assert!(matches!(
            t.reply(0, US, "a", old, &Nonce([3; 16])),
            Take::Refuse {
                why: Why::Stale,
                ..
            }
        ));
        assert!(t.members.is_empty(), "nothing kept of a recording's sender");
    }

    #[test]
    fn bounds_hold() {
        let mut t = table();
        for (i, id) in ["a", "b", "c", "d"].iter().enumerate() {
            verified(&mut t, 0, id, US, i as u8);
        }
        assert!(matches!(
            t.opinions(0, US, "e", US),
            Take::Refuse { why: Why::Full, .. }
        ));
        assert!(!t.hello_from(0, US, "e", US));
        assert!(matches!(
            t.opinions(0, US, "me", US),
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
        for i in 0..100u8 {
            t.hello_sent(0, Nonce([100 + i; 16]), false);
        }
        assert_eq!(t.hellos.len(), MAX_HELLOS);
        // Forgotten after the expiry, with room again.
        assert_eq!(t.forget(3001), ["a", "b", "c", "d"]);
        assert!(matches!(
            t.opinions(3001, US, "e", US),
            Take::Refuse {
                why: Why::Unverified,
                ..
            }
        ));
        let refused: u64 = t.refused().iter().map(|(_, n)| n).sum();
        assert!(refused >= 5);
    }

    #[test]
    fn senders_not_believed_cannot_crowd_out_members() {
        let mut t = Members::new("me", 200, 3000, 250);
        for i in 0..(MAX_UNVERIFIED + 10) {
            let _ = t.opinions(0, US, &format!("ghost{i}"), US);
        }
        let unverified = t.members.values().filter(|m| m.last_seq.is_none()).count();
        assert_eq!(unverified, MAX_UNVERIFIED);
        // A member believed still finds room, even in a full table.
        let mut full = Members::new("me", MAX_UNVERIFIED, 3000, 250);
        for i in 0..MAX_UNVERIFIED {
            let _ = full.opinions(0, US, &format!("ghost{i}"), US);
        }
        verified(&mut full, 1, "real", US, 1);
        assert_eq!(full.opinions(2, US, "real", US + 1), Take::Accept);
    }

    #[test]
    fn hellos_are_answered_once_per_pace_and_only_when_newer() {
        let mut t = table();
        assert!(t.hello_from(0, US, "a", US));
        // Newer, but within the pace: not answered, and no older one is after it.
        assert!(!t.hello_from(100, US, "a", US + 1));
        // Replays of hellos taken (answered or not) use no turn: the next fresh one is
        // answered.
        assert!(!t.hello_from(250, US, "a", US));
        assert!(!t.hello_from(250, US, "a", US + 1));
        assert!(t.hello_from(250, US, "a", US + 2));
        assert!(t.hello_from(250, US, "b", US));
        assert!(!t.hello_from(0, US, "me", US));
    }

    #[test]
    fn asks_never_push_out_the_hello_to_everyone() {
        let mut t = Members::new("me", 200, 3000, 250);
        let hello = Nonce([1; 16]);
        t.hello_sent(0, hello, true);
        // Recordings of a hundred departed members, each asked.
        for i in 0..100u8 {
            t.hello_sent(1, Nonce([100 + i; 16]), false);
        }
        assert_eq!(t.hellos.len(), MAX_HELLOS);
        assert_eq!(t.reply(5, US, "a", US, &hello), Take::Accept);
    }

    #[test]
    fn recorded_hellos_replayed_in_turn_never_starve_a_members_own() {
        // Two recordings of a's hellos, replayed in turn as fast as the bus carries them,
        // each of its own nonce; a's own hellos come once a pace, each newer.
        let mut t = table();
        assert!(t.hello_from(0, US, "a", US));
        assert!(t.hello_from(250, US, "a", US + 250_000));
        let mut answered = 0;
        for step in 2..40u64 {
            let now = step * 250;
            for i in 0..50 {
                let old = if i % 2 == 0 { US } else { US + 250_000 };
                assert!(!t.hello_from(now, US, "a", old));
            }
            answered += usize::from(t.hello_from(now + 1, US, "a", US + step * 250_000));
        }
        assert_eq!(answered, 38);
    }

    #[test]
    fn recordings_of_current_members_make_no_asks_and_others_one_per_pace_in_all() {
        let mut t = table();
        for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
            verified(&mut t, 0, id, US, i as u8 + 1);
        }
        // Replays of current members' words: refused, no ask.
        for now in [10, 300, 600] {
            for id in ["a", "b", "c"] {
                assert_eq!(
                    t.opinions(now, US, id, US),
                    Take::Refuse {
                        why: Why::Replayed,
                        ask: false
                    }
                );
            }
        }
        // A round later, nobody current: one ask per pace, across all of them.
        let asks = |t: &mut Members, now| {
            ["a", "b", "c"]
                .into_iter()
                .filter(|id| {
                    t.opinions(now, US, id, US)
                        == Take::Refuse {
                            why: Why::Replayed,
                            ask: true,
                        }
                })
                .count()
        };
        assert_eq!(asks(&mut t, 1_000), 1);
        assert_eq!(asks(&mut t, 1_100), 0);
        assert_eq!(asks(&mut t, 1_250), 1);
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
            verified(&mut t, 0, "a", US + start, 1);
            let mut last = US + start;
            for (i, s) in seqs.into_iter().enumerate() {
                match t.opinions(i as u64, US, "a", US + s) {
                    Take::Accept => {
                        prop_assert!(US + s > last);
                        last = US + s;
                    }
                    Take::Refuse { why, .. } => prop_assert_eq!(why, Why::Replayed),
                }
            }
        }
    }
}
