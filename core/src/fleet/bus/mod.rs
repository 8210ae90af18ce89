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
//! Subjects, under the configured prefix `P` (`circuit_breaker.fleet` by default):
//!
//! - `P.opinions`: every member's opinions;
//! - `P.hello`: a member that (re)connects asks everyone;
//! - `P.hello.TOKEN`: a member asks one member (whose word it could not believe yet);
//! - `P.inbox.TOKEN`: where a member's hellos are answered.
//!
//! `TOKEN` is [`token`] of the member's id: subject-safe whatever the id holds.

pub mod creds;
pub mod frame;
pub mod members;
pub mod status;

pub use creds::Credentials;
pub use frame::{Frame, FrameError};
pub use members::{Members, Take, Why};
pub use status::{BusState, BusStats};

use sha2::{Digest, Sha256};

/// The prefix of the fleet's subjects when none is configured.
pub const DEFAULT_PREFIX: &str = "circuit_breaker.fleet";
/// The most members an instance keeps track of.
pub const MAX_MEMBERS: usize = 1024;

/// A member's id as a subject token: the first 16 hex digits of its SHA-256.
pub fn token(id: &str) -> String {
    let d = Sha256::digest(id.as_bytes());
    crate::fleet::auth::hex(&d[..8])
}

/// The subjects of a fleet under `prefix`, seen from member `id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subjects {
    pub opinions: String,
    pub hello: String,
    /// This member's own hello subject (others ask it here).
    pub hello_me: String,
    /// This member's inbox.
    pub inbox: String,
}

impl Subjects {
    pub fn new(prefix: &str, id: &str) -> Subjects {
        let t = token(id);
        Subjects {
            opinions: format!("{prefix}.opinions"),
            hello: format!("{prefix}.hello"),
            hello_me: format!("{prefix}.hello.{t}"),
            inbox: format!("{prefix}.inbox.{t}"),
        }
    }

    /// Where to ask member `id` alone.
    pub fn hello_to(&self, id: &str) -> String {
        format!("{}.{}", self.hello, token(id))
    }

    /// Where member `id` hears answers to its hellos.
    pub fn inbox_of(&self, prefix_inbox_of: &str) -> String {
        let base = self.inbox.rsplit_once('.').map_or("", |(b, _)| b);
        format!("{base}.{}", token(prefix_inbox_of))
    }
}

/// How many intervals a member's opinions stay fresh on a bus: every member hears every
/// other directly each interval, so two missed in a row are forgiven and a third is not.
pub const EXPIRE_INTERVALS: u64 = 3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_per_member_and_subject_safe() {
        let s = Subjects::new("cb.fleet", "edge fra.1");
        assert_eq!(s.opinions, "cb.fleet.opinions");
        assert_eq!(s.hello, "cb.fleet.hello");
        assert_eq!(
            s.hello_me,
            format!("cb.fleet.hello.{}", token("edge fra.1"))
        );
        assert_eq!(s.inbox, format!("cb.fleet.inbox.{}", token("edge fra.1")));
        assert_eq!(
            s.hello_to("other"),
            format!("cb.fleet.hello.{}", token("other"))
        );
        assert_eq!(
            s.inbox_of("other"),
            format!("cb.fleet.inbox.{}", token("other"))
        );
        let t = token("edge fra.1");
        assert_eq!(t.len(), 16);
        assert!(t.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(token("a"), token("b"));
    }
}
