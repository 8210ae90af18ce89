//! What the module keeps of a stream session, as the one word of the session's context that
//! nginx keeps for it: nothing allocated per session. An ordinary session's word says all
//! there is ([`Plain`]: its upstream, whether its client spoke, and since when); the probe's
//! names its place in the worker's [`super::Table`], which holds its ticket.
//!
//! Once judged (or refused, or handed to a backup), the word keeps what the breaker said, for
//! `$circuit_breaker_state` in the access log; an ordinary session judged keeps its lane too
//! ([`Word::Answered`]), so that its server's later replies still tell that it answers.
//!
//! Bits: 63 marks what the breaker said (alone: refused while open; with 1: refused by a
//! recovery ramp; with 6: refused while half-open; with 3 to 5: [`Said`]; with 2 and a lane
//! in 40–55: [`Word::Answered`]); 62 marks a [`Plain`] (61: the client spoke, 60: its
//! silence says nothing, 59: a dry run's breaker would have refused it, 58: it is in its
//! server's lane, 40–55: its lane ([`super::Lanes`]: its upstream's, or its server's),
//! 0–39: an instant, modulo 2⁴⁰ ms — 34 years); a word with neither is a [`SessionId`]
//! (generations below 2³⁰) or 0, nothing.

use super::SessionId;
use crate::breaker::Admission;
use crate::snapshot::State;

const REFUSED: u64 = 1 << 63;
const REFUSED_RAMP: u64 = REFUSED | 1;
const ANSWERED: u64 = REFUSED | 2;
const SAID_HALF_OPEN: u64 = REFUSED | 3;
const SAID_BACKUP: u64 = REFUSED | 4;
const SAID_DRY_OPEN: u64 = REFUSED | 5;
const REFUSED_HALF_OPEN: u64 = REFUSED | 6;
/// The bits that tell an [`Word::Answered`] word: all but its lane.
const ANSWERED_TAG: u64 = !(UPSTREAM_MASK << UPSTREAM_SHIFT);
const PLAIN: u64 = 1 << 62;
const SENT: u64 = 1 << 61;
const MUTE: u64 = 1 << 60;
const DRY_OPEN: u64 = 1 << 59;
const PLACED: u64 = 1 << 58;
const UPSTREAM_SHIFT: u32 = 40;
const UPSTREAM_MASK: u64 = (1 << 16) - 1;
const INSTANT_MASK: u64 = (1 << UPSTREAM_SHIFT) - 1;

/// The most upstreams with a breaker a [`Plain`] word can name.
pub const MAX_UPSTREAMS: usize = 1 << 16;

/// A session's word, read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Word {
    /// Not the module's, or judged already.
    Free,
    /// Refused by its breaker (open, half-open with its probe out, or a recovery ramp's
    /// share): the log phase gives it its
    /// `503`.
    Refused(Refusal),
    /// The probe, held in the worker's table.
    Probe(SessionId),
    /// An ordinary session, not judged yet.
    Plain(Plain),
    /// An ordinary session judged (the breaker closed), in its lane: its server's replies
    /// from then on are noted as answers, since an application's pooled connections are
    /// answered on sessions judged long ago, and a server that answers them is not hung.
    Answered(u16),
    /// The probe, or a session a dry run would have refused, judged; or one handed to a
    /// backup: what the breaker said.
    Said(Said),
}

/// Why a breaker refused a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Open, in its cooldown.
    Open,
    /// Half-open, its probe out (or the fleet's to send).
    HalfOpen,
    /// Closed, but a recovery ramp's share turned it away.
    Ramp,
}

impl Refusal {
    /// Why `a` refuses a session, the breaker being in `state` once it answered; `None` when
    /// it lets the session through.
    pub fn of(a: &Admission, state: State) -> Option<Refusal> {
        match (a, state) {
            (Admission::Recovering { .. }, _) => Some(Refusal::Ramp),
            (Admission::Reject { .. }, State::HalfOpen) => Some(Refusal::HalfOpen),
            (Admission::Reject { .. }, _) => Some(Refusal::Open),
            _ => None,
        }
    }
}

/// What the breaker said to a session that went to a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Said {
    /// It was the probe.
    HalfOpen,
    /// The breaker was open and the upstream's backup servers took it.
    Backup,
    /// A dry run's breaker would have refused it (open, or a ramp's share).
    DryOpen,
}

impl Word {
    /// The word as the context cell keeps it.
    #[inline]
    pub fn to_bits(self) -> u64 {
        match self {
            Word::Free => 0,
            Word::Refused(Refusal::Open) => REFUSED,
            Word::Refused(Refusal::HalfOpen) => REFUSED_HALF_OPEN,
            Word::Refused(Refusal::Ramp) => REFUSED_RAMP,
            Word::Said(Said::HalfOpen) => SAID_HALF_OPEN,
            Word::Said(Said::Backup) => SAID_BACKUP,
            Word::Said(Said::DryOpen) => SAID_DRY_OPEN,
            Word::Probe(id) => id.to_word(),
            Word::Plain(p) => p.0,
            Word::Answered(lane) => ANSWERED | (u64::from(lane) << UPSTREAM_SHIFT),
        }
    }

    /// The word a context cell holds.
    #[inline]
    pub fn from_bits(w: u64) -> Word {
        if w & PLAIN != 0 {
            return Word::Plain(Plain(w));
        }
        match w {
            REFUSED => Word::Refused(Refusal::Open),
            REFUSED_HALF_OPEN => Word::Refused(Refusal::HalfOpen),
            REFUSED_RAMP => Word::Refused(Refusal::Ramp),
            SAID_HALF_OPEN => Word::Said(Said::HalfOpen),
            SAID_BACKUP => Word::Said(Said::Backup),
            SAID_DRY_OPEN => Word::Said(Said::DryOpen),
            _ if w & ANSWERED_TAG == ANSWERED => Word::Answered(lane_of(w)),
            _ if w & REFUSED != 0 => Word::Free,
            _ => SessionId::from_word(w).map_or(Word::Free, Word::Probe),
        }
    }

    /// Whether a context cell's word is a session not judged yet (a [`Plain`] or the probe):
    /// one test of the sign bit, for the stream filter's every call.
    #[inline]
    pub fn held(w: u64) -> bool {
        (w as i64) > 0
    }

    /// The lane of a context cell's word that is [`Word::Answered`]: one mask and compare,
    /// for the stream filter's calls with bytes from a server.
    #[inline]
    pub fn answered_lane(w: u64) -> Option<u16> {
        (w & ANSWERED_TAG == ANSWERED).then(|| lane_of(w))
    }

    /// What `$circuit_breaker_state` says of the session: `closed`, `half_open` (the probe),
    /// `open` (refused), `recovering` (refused by a ramp), `backup` (handed to the backup
    /// servers while open); `None` when no breaker applied.
    pub fn state(self) -> Option<&'static str> {
        match self {
            Word::Free => None,
            Word::Refused(Refusal::Open) | Word::Said(Said::DryOpen) => Some("open"),
            Word::Refused(Refusal::Ramp) => Some("recovering"),
            Word::Refused(Refusal::HalfOpen) | Word::Probe(_) | Word::Said(Said::HalfOpen) => {
                Some("half_open")
            }
            Word::Plain(p) if p.dry_open() => Some("open"),
            Word::Plain(_) | Word::Answered(_) => Some("closed"),
            Word::Said(Said::Backup) => Some("backup"),
        }
    }

    /// What the word says once its session is judged.
    pub fn judged(self) -> Word {
        match self {
            Word::Probe(_) => Word::Said(Said::HalfOpen),
            Word::Plain(p) if p.dry_open() => Word::Said(Said::DryOpen),
            Word::Plain(p) => Word::Answered(p.lane()),
            w => w,
        }
    }
}

/// The lane in bits 40–55 of a word.
#[inline]
fn lane_of(w: u64) -> u16 {
    ((w >> UPSTREAM_SHIFT) & UPSTREAM_MASK) as u16
}

/// An ordinary session's word: see the module's documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plain(u64);

impl Plain {
    /// A session of `upstream` admitted at `now_ms`; `mute` when its silence says nothing
    /// (UDP). `None` past [`MAX_UPSTREAMS`].
    #[inline]
    pub fn new(upstream: usize, now_ms: u64, mute: bool) -> Option<Plain> {
        if upstream >= MAX_UPSTREAMS {
            return None;
        }
        let mute = if mute { MUTE } else { 0 };
        Some(Plain(
            PLAIN | mute | ((upstream as u64) << UPSTREAM_SHIFT) | (now_ms & INSTANT_MASK),
        ))
    }

    /// The word of a session a dry run's breaker would have refused.
    #[inline]
    pub fn dry_open(self) -> bool {
        self.0 & DRY_OPEN != 0
    }

    /// The same word, marked as one a dry run's breaker would have refused.
    #[inline]
    pub fn would_refuse(self) -> Plain {
        Plain(self.0 | DRY_OPEN)
    }

    /// Its lane: its upstream's index, or once placed its server's lane.
    #[inline]
    pub fn lane(self) -> u16 {
        lane_of(self.0)
    }

    /// Whether it was placed in its server's lane.
    #[inline]
    pub fn placed(self) -> bool {
        self.0 & PLACED != 0
    }

    /// The same word in lane `lane`, its server's, placed.
    #[inline]
    pub fn place(self, lane: u16) -> Plain {
        Plain(
            (self.0 & !(UPSTREAM_MASK << UPSTREAM_SHIFT))
                | PLACED
                | (u64::from(lane) << UPSTREAM_SHIFT),
        )
    }

    /// Whether the client's bytes went up.
    #[inline]
    pub fn sent(self) -> bool {
        self.0 & SENT != 0
    }

    /// Whether the session's silence says nothing.
    #[inline]
    pub fn mute(self) -> bool {
        self.0 & MUTE != 0
    }

    /// When the session was admitted, or, once its client spoke, when its client's last
    /// bytes went up; read at `now_ms`, no earlier.
    #[inline]
    pub fn since(self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(now_ms.wrapping_sub(self.0) & INSTANT_MASK)
    }

    /// The word once the client's bytes went up at `now_ms`.
    #[inline]
    pub fn sent_at(self, now_ms: u64) -> Plain {
        Plain((self.0 & !INSTANT_MASK) | SENT | (now_ms & INSTANT_MASK))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_word_reads_back_what_it_was_given(
            upstream in 0usize..MAX_UPSTREAMS,
            start in 0u64..(1 << 50),
            pause in 0u64..(1 << 30),
            later in 0u64..(1 << 30),
            mute: bool,
        ) {
            let p = Plain::new(upstream, start, mute).unwrap();
            let w = Word::from_bits(Word::Plain(p).to_bits());
            prop_assert_eq!(w, Word::Plain(p));
            prop_assert_eq!(usize::from(p.lane()), upstream);
            prop_assert_eq!(p.since(start + later), start);
            prop_assert!(!p.sent());
            prop_assert_eq!(p.mute(), mute);
            let s = p.sent_at(start + pause);
            prop_assert!(s.sent());
            prop_assert_eq!(s.lane(), p.lane());
            prop_assert_eq!(s.mute(), mute);
            prop_assert_eq!(s.since(start + pause + later), start + pause);
        }

        #[test]
        fn a_judged_session_keeps_its_lane_and_nothing_else_reads_as_one(
            upstream in 0usize..MAX_UPSTREAMS,
            start in 0u64..(1 << 50),
            mute: bool,
            other: u64,
        ) {
            let p = Plain::new(upstream, start, mute).unwrap();
            let w = Word::Plain(p).judged().to_bits();
            prop_assert!(!Word::held(w));
            prop_assert_eq!(Word::answered_lane(w), Some(p.lane()));
            prop_assert_eq!(Word::from_bits(w), Word::Answered(p.lane()));
            prop_assert_eq!(Word::from_bits(w).state(), Some("closed"));
            // Any other word's bits (a plain one, a probe's id, what the breaker said) are
            // no answered session's: the filter notes no reply for them.
            let read = Word::from_bits(other);
            prop_assert_eq!(
                Word::answered_lane(other).is_some(),
                matches!(read, Word::Answered(_))
            );
            if let Word::Answered(lane) = read {
                prop_assert_eq!(Word::Answered(lane).to_bits(), other);
            }
        }

        #[test]
        fn a_placed_word_keeps_all_but_its_lane(
            upstream in 0usize..MAX_UPSTREAMS,
            lane: u16,
            start in 0u64..(1 << 50),
            pause in 0u64..(1 << 30),
            mute: bool,
            dry: bool,
        ) {
            let p = Plain::new(upstream, start, mute).unwrap();
            let p = if dry { p.would_refuse() } else { p };
            prop_assert!(!p.placed());
            let q = p.sent_at(start + pause).place(lane);
            prop_assert!(q.placed() && q.sent());
            prop_assert_eq!(q.lane(), lane);
            prop_assert_eq!((q.mute(), q.dry_open()), (mute, dry));
            prop_assert_eq!(q.since(start + pause), start + pause);
            let r = q.sent_at(start + pause + 1);
            prop_assert_eq!((r.lane(), r.placed()), (lane, true));
            prop_assert_eq!(Word::from_bits(Word::Plain(r).to_bits()), Word::Plain(r));
            prop_assert!(Word::held(Word::Plain(r).to_bits()));
        }
    }

    #[test]
    fn a_refusal_says_why() {
        let reject = Admission::Reject { retry_after_ms: 1 };
        assert_eq!(Refusal::of(&reject, State::Open), Some(Refusal::Open));
        assert_eq!(
            Refusal::of(&reject, State::HalfOpen),
            Some(Refusal::HalfOpen)
        );
        let ramp = Admission::Recovering { retry_after_ms: 1 };
        assert_eq!(Refusal::of(&ramp, State::Closed), Some(Refusal::Ramp));
        let pass = Admission::Pass {
            would_reject: false,
        };
        assert_eq!(Refusal::of(&pass, State::Closed), None);
        assert_eq!(Refusal::of(&pass, State::HalfOpen), None);
        assert_eq!(
            Word::Refused(Refusal::HalfOpen).state(),
            Some("half_open"),
            "as the http module's $circuit_breaker_state says"
        );
    }

    #[test]
    fn nothing_refused_and_said() {
        assert_eq!(Word::from_bits(0), Word::Free);
        for w in [
            Word::Refused(Refusal::Open),
            Word::Refused(Refusal::HalfOpen),
            Word::Refused(Refusal::Ramp),
            Word::Answered(7),
            Word::Said(Said::HalfOpen),
            Word::Said(Said::Backup),
        ] {
            assert_eq!(Word::from_bits(w.to_bits()), w);
            assert!(!Word::held(w.to_bits()), "{w:?}");
        }
        let states: Vec<_> = [
            Word::Free,
            Word::Refused(Refusal::Open),
            Word::Refused(Refusal::HalfOpen),
            Word::Refused(Refusal::Ramp),
            Word::Plain(Plain::new(3, 9, false).unwrap()),
            Word::Said(Said::Backup),
        ]
        .iter()
        .map(|w| w.state())
        .collect();
        assert_eq!(
            states,
            [
                None,
                Some("open"),
                Some("half_open"),
                Some("recovering"),
                Some("closed"),
                Some("backup")
            ]
        );
        let p = Word::Plain(Plain::new(3, 9, false).unwrap());
        assert!(Word::held(p.to_bits()) && !Word::held(0));
        assert_eq!(p.judged(), Word::Answered(3));
        assert_eq!(p.judged().state(), Some("closed"));
        // A dry run's breaker that would have refused it: open, before and after.
        let dry = Plain::new(3, 9, false).unwrap().would_refuse();
        assert_eq!(Word::Plain(dry).state(), Some("open"));
        assert_eq!(Word::Plain(dry.sent_at(20)).state(), Some("open"));
        assert_eq!(Word::Plain(dry).judged().state(), Some("open"));
        assert_eq!(dry.lane(), 3);
        assert_eq!(
            Word::from_bits(Word::Said(Said::DryOpen).to_bits()),
            Word::Said(Said::DryOpen)
        );
        assert_eq!(Plain::new(MAX_UPSTREAMS, 0, false), None);
    }

    #[test]
    fn a_probe_word_is_never_plain_nor_refused() {
        // The largest id's word: the last index (u32::MAX is none) of the last generation.
        let last = SessionId::from_word(0x3fff_ffff_ffff_ffff).unwrap();
        assert_eq!(Word::from_bits(last.to_word()), Word::Probe(last));
        assert!(Word::held(last.to_word()));
        assert_eq!(Word::Probe(last).judged(), Word::Said(Said::HalfOpen));
        let first = SessionId::from_word(1).unwrap();
        assert_eq!(Word::from_bits(first.to_word()), Word::Probe(first));
    }
}
