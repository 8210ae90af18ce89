//! The hash of a keyed breaker's key: SipHash-1-3 under a secret, so that clients, who choose
//! the keys, cannot choose their places in the table.

use siphasher::sip::SipHasher13;

/// Hashes keys under a 128-bit secret, which the zone draws once and keeps: every worker, and
/// every configuration reloaded over the same zone, places a key in the same tally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyHasher {
    k0: u64,
    k1: u64,
}

impl KeyHasher {
    /// A hasher under the secret `(k0, k1)`.
    pub const fn new(k0: u64, k1: u64) -> KeyHasher {
        KeyHasher { k0, k1 }
    }

    /// The hash of `key` in `family` (the 16 bits that tell a `circuit_breaker_key` from the
    /// others, so that one value in two families is two breakers), under a key of the
    /// family's own made from the secret: one pass over the key, not two. Never 0, which
    /// marks an empty tally.
    pub fn hash(&self, family: u16, key: &[u8]) -> u64 {
        let k1 = self.k1 ^ u64::from(family).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        SipHasher13::new_with_keys(self.k0, k1).hash(key).max(1)
    }

    /// The hash of a client's address key (`crate::limit::share::address_key`) for the
    /// limit's share, under a key of its own made from the secret: no family's hash of the
    /// same bytes tells a client's cells.
    pub fn client(&self, key: &[u8]) -> u64 {
        SipHasher13::new_with_keys(self.k0 ^ 0x6c69_6d69_7473_6861, self.k1).hash(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_family_and_key_all_count() {
        let a = KeyHasher::new(1, 2);
        let b = KeyHasher::new(1, 3);
        assert_eq!(a.hash(0, b"origin.example"), a.hash(0, b"origin.example"));
        assert_ne!(a.hash(0, b"origin.example"), b.hash(0, b"origin.example"));
        assert_ne!(a.hash(0, b"origin.example"), a.hash(1, b"origin.example"));
        assert_ne!(a.hash(0, b"origin.example"), a.hash(0, b"origin.exampld"));
        assert_ne!(a.hash(0, b""), 0);
        assert_ne!(a.client(b"origin.example"), a.hash(0, b"origin.example"));
        assert_ne!(a.client(b"origin.example"), b.client(b"origin.example"));
    }
}
