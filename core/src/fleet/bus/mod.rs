//! The fleet exchange over a message bus (NATS) instead of a peer list: every member
//! publishes its own opinions on the fleet's subject once per interval and whenever a breaker
//! moves, and hears everyone else's; a member that connects asks every member for theirs (a
//! hello), and each answers in its inbox. Membership is whoever speaks, so members join and
//! leave without a reload anywhere.
//!
//! The bus carries; it is not trusted. Every message is sealed with the fleet's key
//! ([`frame`]), and what a recording could repeat is refused by [`Members`]. The merge rules
//! are the store's, as for a peer list: a member's word only lowers the bar, one prober per
//! fleet, every opinion expires.
//!
//! Subjects, under the configured prefix `P` (`circuit_breaker.fleet` by default), each
//! ending in the token of the member that publishes on it, so that the bus's own permissions
//! can pin a member's credentials to its id (`P.*.ME` and `P.*.*.ME`):
//!
//! - `P.opinions.FROM`: a member's opinions, to everyone;
//! - `P.hello.FROM`: a member that (re)connects asks everyone;
//! - `P.ask.TO.FROM`: a member asks one member (whose word it could not believe yet);
//! - `P.reply.TO.FROM`: a member answers another's hello.
//!
//! A member subscribes to `P.opinions.*`, `P.hello.*`, `P.ask.ME.*` and `P.reply.ME.*`. The
//! token is [`token`] of the id: the id itself where it is one, else a digest of it.

pub mod creds;
pub mod frame;
pub mod members;
pub mod status;

pub use creds::Credentials;
pub use frame::{Frame, FrameError, Kind};
pub use members::{Headcount, Members, Take, Why};
pub use status::{BusState, BusStats};

use sha2::{Digest, Sha256};

/// The prefix of the fleet's subjects when none is configured.
pub const DEFAULT_PREFIX: &str = "circuit_breaker.fleet";
/// The most members an instance keeps track of.
pub const MAX_MEMBERS: usize = 1024;

/// The longest id used as its own subject token: with the longest prefix, a subject that
/// names two members stays within a subject's bound ([`crate::nats::MAX_SUBJECT_LEN`]).
pub const MAX_PLAIN_TOKEN: usize = 32;

/// A member's id as a subject token: the id itself when it is made of letters, digits, `_`
/// and `-`, at most [`MAX_PLAIN_TOKEN`] bytes (so that an operator writes permissions with
/// it), otherwise `x` and the first 16 hex digits of its SHA-256 (an id with a dot, a colon or
/// brackets, a long one, or one spelled as such a digest is, which could pass for another's).
pub fn token(id: &str) -> String {
    let digest_like = id.len() == 17
        && id.starts_with('x')
        && id[1..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !id.is_empty()
        && id.len() <= MAX_PLAIN_TOKEN
        && !digest_like
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b))
    {
        return id.to_owned();
    }
    let d = Sha256::digest(id.as_bytes());
    format!("x{}", crate::fleet::auth::hex(&d[..8]))
}

/// The subjects of a fleet under `prefix`, seen from member `id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subjects {
    prefix: String,
    me: String,
}

/// What a subject a message came on says: the kind of message it carries, and the token of
/// the member that published it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heard<'a> {
    pub kind: Kind,
    pub from: &'a str,
}

impl Subjects {
    pub fn new(prefix: &str, id: &str) -> Subjects {
        Subjects {
            prefix: prefix.to_owned(),
            me: token(id),
        }
    }

    /// Where this member publishes its opinions.
    pub fn opinions(&self) -> String {
        format!("{}.opinions.{}", self.prefix, self.me)
    }

    /// Where this member asks everyone.
    pub fn hello(&self) -> String {
        format!("{}.hello.{}", self.prefix, self.me)
    }

    /// Where this member asks member `id` alone.
    pub fn ask(&self, id: &str) -> String {
        format!("{}.ask.{}.{}", self.prefix, token(id), self.me)
    }

    /// Where this member answers member `id`'s hello.
    pub fn reply(&self, id: &str) -> String {
        format!("{}.reply.{}.{}", self.prefix, token(id), self.me)
    }

    /// What this member subscribes to.
    pub fn subscriptions(&self) -> [String; 4] {
        let (p, me) = (&self.prefix, &self.me);
        [
            format!("{p}.opinions.*"),
            format!("{p}.hello.*"),
            format!("{p}.ask.{me}.*"),
            format!("{p}.reply.{me}.*"),
        ]
    }

    /// What `subject` says, if it is one of this member's subscriptions' with one publisher.
    pub fn read<'a>(&self, subject: &'a str) -> Option<Heard<'a>> {
        let rest = subject
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix('.')?;
        let mut t = rest.split('.');
        let (first, second, third, none) = (t.next()?, t.next()?, t.next(), t.next());
        let (kind, from) = match (first, third, none) {
            ("opinions", None, _) => (Kind::Opinions, second),
            ("hello", None, _) => (Kind::Hello, second),
            ("ask", Some(from), None) if second == self.me => (Kind::Hello, from),
            ("reply", Some(from), None) if second == self.me => (Kind::Reply, from),
            _ => return None,
        };
        (!from.is_empty()).then_some(Heard { kind, from })
    }
}

/// How many of its periods a member's opinions stay fresh on a bus: every member hears every
/// other directly, so two missed in a row are forgiven and a third is not.
pub const EXPIRE_INTERVALS: u64 = 3;

/// About how many quiet members' heartbeats a member hears per interval: a quiet member (see
/// [`crate::fleet::FleetStore::quiet`]) speaks every `ceil(members / 16)` intervals, so that
/// the bus carries about 16 heartbeats per member and interval however large the fleet, where
/// every member speaking each interval costs it N² deliveries.
pub const QUIET_HEARD_PER_INTERVAL: u64 = 16;
/// The most intervals between two heartbeats of a quiet member, and the longest period a
/// member's word is believed to cover.
pub const MAX_QUIET_INTERVALS: u64 = 30;

/// How long after its last heartbeat a member speaks again when nothing moves: each interval
/// while it has something to say, and while quiet once every `ceil(members / 16)` intervals
/// (at most [`MAX_QUIET_INTERVALS`]). A breaker that moves is pushed at once either way, and a
/// quiet member that stops being quiet speaks at the next interval ([`heartbeat_due`]).
pub fn heartbeat_ms(interval_ms: u64, members: usize, quiet: bool) -> u64 {
    if !quiet {
        return interval_ms;
    }
    let n = (members as u64).div_ceil(QUIET_HEARD_PER_INTERVAL);
    interval_ms.saturating_mul(n.clamp(1, MAX_QUIET_INTERVALS))
}

/// Whether a member that last spoke `since_ms` ago, saying it would speak again within
/// `said_ms`, speaks now, its period being `every_ms` now: once a period has passed, and never
/// later than it said (its word lapses three of those periods after it was said: a member that
/// stops being quiet, or whose fleet shrank, speaks at once; one that becomes quiet, or whose
/// fleet grew, first says its longer period on time).
pub fn heartbeat_due(since_ms: u64, every_ms: u64, said_ms: u64) -> bool {
    since_ms >= every_ms.min(said_ms)
}

/// How long the word of a member that says it speaks every `every_ms` stays fresh here, where
/// `members` are heard: [`EXPIRE_INTERVALS`] of its periods, never less than the expiry, and
/// never more than twice the period this instance would keep in a fleet of its size (at
/// least 16), whatever a holder of the key states.
pub fn lasts_ms(every_ms: u64, interval_ms: u64, members: usize) -> u64 {
    let most = heartbeat_ms(interval_ms, 2 * members.max(16), true);
    EXPIRE_INTERVALS.saturating_mul(every_ms.clamp(interval_ms, most.max(interval_ms)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_end_in_their_publisher() {
        let a = Subjects::new("cb.fleet", "fra-1");
        let b = Subjects::new("cb.fleet", "edge fra.1");
        let tb = token("edge fra.1");
        assert_eq!(a.opinions(), "cb.fleet.opinions.fra-1");
        assert_eq!(a.hello(), "cb.fleet.hello.fra-1");
        assert_eq!(a.ask("edge fra.1"), format!("cb.fleet.ask.{tb}.fra-1"));
        assert_eq!(a.reply("edge fra.1"), format!("cb.fleet.reply.{tb}.fra-1"));
        assert_eq!(
            b.subscriptions(),
            [
                "cb.fleet.opinions.*".to_owned(),
                "cb.fleet.hello.*".into(),
                format!("cb.fleet.ask.{tb}.*"),
                format!("cb.fleet.reply.{tb}.*"),
            ]
        );
        // What one publishes, the other reads as from it.
        let heard = |s: &str| b.read(s).map(|h| (h.kind, h.from.to_owned()));
        for (subject, kind) in [
            (a.opinions(), Kind::Opinions),
            (a.hello(), Kind::Hello),
            (a.ask("edge fra.1"), Kind::Hello),
            (a.reply("edge fra.1"), Kind::Reply),
        ] {
            assert_eq!(heard(&subject), Some((kind, "fra-1".into())), "{subject}");
        }
        // Meant for another, or not of the fleet's form.
        for s in [
            a.ask("other"),
            a.reply("other"),
            "cb.fleet.opinions".into(),
            "cb.fleet.opinions.".into(),
            "cb.fleet.opinions.a.b".into(),
            "cb.fleet.ask.a".into(),
            "cb.fleet.inbox.a".into(),
            "cb.fleetx.opinions.a".into(),
            "cb.opinions.a".into(),
            format!("cb.fleet.reply.{tb}.a.b"),
        ] {
            assert_eq!(b.read(&s), None, "{s}");
        }
    }

    #[test]
    fn a_quiet_member_speaks_less_often_as_the_fleet_grows() {
        let i = 1000;
        for (members, every) in [(0, 1), (1, 1), (8, 1), (16, 1), (17, 2), (50, 4), (200, 13)] {
            assert_eq!(heartbeat_ms(i, members, true), every * i, "{members}");
            assert_eq!(heartbeat_ms(i, members, false), i, "{members}");
        }
        assert_eq!(heartbeat_ms(i, 1024, true), 30 * i);
        // What each member hears per interval stays near 16 however large the fleet.
        for n in [17usize, 50, 200, 480] {
            let heard = (n as f64 - 1.0) * i as f64 / heartbeat_ms(i, n, true) as f64;
            assert!((8.0..=16.0).contains(&heard), "{n}: {heard}");
        }
        // Believed for three periods, within twice what this fleet's size gives.
        assert_eq!(lasts_ms(13 * i, i, 200), 39 * i);
        assert_eq!(lasts_ms(0, i, 200), 3 * i);
        assert_eq!(lasts_ms(u64::MAX, i, 200), 75 * i);
        assert_eq!(lasts_ms(u64::MAX, i, 1024), 90 * i);
        assert_eq!(lasts_ms(i, i, 200), 3 * i);
        // In a fleet of 3 no one is believed to speak less than every 2 intervals.
        assert_eq!(lasts_ms(30 * i, i, 2), 6 * i);
    }

    #[test]
    fn a_member_never_speaks_later_than_it_said() {
        let i = 1000;
        // Quiet, as it said: every 13 intervals.
        assert!(!heartbeat_due(12 * i, 13 * i, 13 * i));
        assert!(heartbeat_due(13 * i, 13 * i, 13 * i));
        // No longer quiet: at the next interval.
        assert!(heartbeat_due(i, i, 13 * i));
        assert!(!heartbeat_due(i - 1, i, 13 * i));
        // Quiet now after an interval of trouble, which it said: its longer period is said
        // at the next interval, not 13 intervals later (its word would have lapsed at 3).
        assert!(heartbeat_due(i, 13 * i, i));
        // The fleet grew or shrank while it was quiet.
        assert!(heartbeat_due(4 * i, 13 * i, 4 * i));
        assert!(heartbeat_due(4 * i, 4 * i, 13 * i));
    }

    #[test]
    fn every_subject_fits_with_the_longest_prefix_and_ids() {
        let prefix = "p".repeat(crate::fleet::conf::MAX_PREFIX_BYTES);
        let long = "a".repeat(crate::fleet::conf::MAX_BUS_ID_BYTES);
        let s = Subjects::new(&prefix, &long);
        for subject in [s.opinions(), s.hello(), s.ask(&long), s.reply(&long)]
            .into_iter()
            .chain(s.subscriptions())
        {
            assert!(crate::nats::valid_subject(&subject, true), "{subject}");
        }
    }

    #[test]
    fn a_token_is_the_id_where_the_id_is_one() {
        assert_eq!(token("fra-edge_1"), "fra-edge_1");
        assert_eq!(token(&"a".repeat(32)), "a".repeat(32));
        // An id spelled as a digest is hashed itself: it cannot pass for the id hashed.
        let hashed = token("10.0.0.9:80");
        assert_ne!(token(&hashed), hashed);
        assert_eq!(token("x0123456789abcdeg"), "x0123456789abcdeg");
        for id in [
            "10.0.0.5:8080",
            "edge fra.1",
            "[::1]:80",
            "a@b",
            "*",
            ">",
            &"a".repeat(33),
            "xffffffffffffffff",
        ] {
            let t = token(id);
            assert_eq!(t.len(), 17, "{id}");
            assert!(t.starts_with('x') && t[1..].bytes().all(|b| b.is_ascii_hexdigit()));
        }
        assert_ne!(token("a.b"), token("a:b"));
    }
}
