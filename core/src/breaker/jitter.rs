//! Jitter a replay can reproduce: the draws that decide transitions (a cooldown's length, a
//! probe's spacing) taken from a keyed pseudo-random function rather than a generator's
//! stream.
//!
//! A draw is HMAC-SHA-256 under the breaker's key of what it is for and the millisecond it is
//! made at (on the module's monotonic clock, which `$circuit_breaker_msec` logs); the key is
//! HMAC-SHA-256 under the instance's secret seed of the breaker's name. So a replay given the
//! seed and a log with that clock makes the same draws at the same requests, and picks them
//! up again after any difference (a draw depends on no earlier one); a client, without the
//! seed, can no more predict them than random ones; and instances with seeds of their own
//! draw apart, as a fleet should (probes in step would hit a recovering origin together).

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// A breaker's jitter key.
pub type JitterKey = [u8; 32];

/// Where a breaker's draws come from: the instance's seed and the breaker's name. Nothing of
/// it is kept in the breaker's shared memory (a default breaker must fit its slab class):
/// the shell passes it with each borrow, and the key is made only when a draw is.
#[derive(Clone, Copy, Debug)]
pub struct JitterSource<'a> {
    /// The instance's seed (`circuit_breaker_jitter_key`).
    pub seed: [u8; 32],
    /// The breaker's upstream name.
    pub upstream: &'a [u8],
    /// The breaker's route name.
    pub route: &'a [u8],
}

impl JitterSource<'_> {
    /// The uniform number of a draw for `purpose` at `now_ms`.
    pub fn draw(&self, purpose: Purpose, now_ms: u64) -> u32 {
        draw(
            &breaker_key(&self.seed, self.upstream, self.route),
            purpose,
            now_ms,
        )
    }
}

/// What a draw is for, so that two draws at the same millisecond differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Purpose {
    /// The cooldown drawn when a breaker opens.
    Cooldown = 1,
    /// The spacing to the next probe, drawn when one starts.
    ProbeSpacing = 2,
}

/// The key of the breaker `upstream/route` under the instance's `seed`.
pub fn breaker_key(seed: &[u8], upstream: &[u8], route: &[u8]) -> JitterKey {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(seed).expect("HMAC takes any key length");
    mac.update(b"circuit-breaker jitter v1\0");
    mac.update(upstream);
    mac.update(b"/");
    mac.update(route);
    mac.finalize().into_bytes().into()
}

/// The uniform number `key` gives a draw for `purpose` at `now_ms`.
pub fn draw(key: &JitterKey, purpose: Purpose, now_ms: u64) -> u32 {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(&[purpose as u8]);
    mac.update(&now_ms.to_be_bytes());
    let out = mac.finalize().into_bytes();
    u32::from_be_bytes([out[0], out[1], out[2], out[3]])
}

/// A seed from its text: 64 hexadecimal digits (32 bytes), spaces and a final newline
/// ignored, as `head -c 32 /dev/urandom | od -An -tx1` or `openssl rand -hex 32` write it.
pub fn parse_seed(text: &str) -> Result<[u8; 32], &'static str> {
    let hex: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    if hex.len() != 64 {
        return Err("a jitter seed is 64 hexadecimal digits (32 bytes)");
    }
    let mut seed = [0u8; 32];
    for (i, pair) in hex.chunks(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        match (digit(pair[0]), digit(pair[1])) {
            (Some(h), Some(l)) => seed[i] = (h * 16 + l) as u8,
            _ => return Err("a jitter seed is 64 hexadecimal digits (32 bytes)"),
        }
    }
    Ok(seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: [u8; 32] = [7; 32];

    #[test]
    fn the_same_inputs_give_the_same_draw() {
        let k = breaker_key(&SEED, b"api", b"default");
        assert_eq!(
            draw(&k, Purpose::Cooldown, 1234),
            draw(
                &breaker_key(&SEED, b"api", b"default"),
                Purpose::Cooldown,
                1234
            )
        );
    }

    #[test]
    fn draws_differ_by_breaker_seed_purpose_and_time() {
        let k = breaker_key(&SEED, b"api", b"default");
        let d = draw(&k, Purpose::Cooldown, 1234);
        assert_ne!(
            d,
            draw(
                &breaker_key(&SEED, b"api", b"other"),
                Purpose::Cooldown,
                1234
            )
        );
        assert_ne!(
            d,
            draw(
                &breaker_key(&[8; 32], b"api", b"default"),
                Purpose::Cooldown,
                1234
            )
        );
        assert_ne!(d, draw(&k, Purpose::ProbeSpacing, 1234));
        assert_ne!(d, draw(&k, Purpose::Cooldown, 1235));
    }

    #[test]
    fn draws_spread_over_the_range() {
        let k = breaker_key(&SEED, b"api", b"default");
        let n = 4000u64;
        let low = (0..n)
            .filter(|&t| draw(&k, Purpose::Cooldown, t) < u32::MAX / 2)
            .count() as u64;
        assert!(
            (n * 45 / 100..=n * 55 / 100).contains(&low),
            "{low} of {n} below half"
        );
    }

    #[test]
    fn seeds_parse_from_hex() {
        let text = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF\n";
        let s = parse_seed(text).unwrap();
        assert_eq!(s[1], 0x11);
        assert_eq!(s[31], 0xff);
        assert_eq!(parse_seed(" 00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff 00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff"), Ok(s));
        assert!(parse_seed("0011").is_err());
        assert!(parse_seed(&"zz".repeat(32)).is_err());
    }
}

#[cfg(test)]
mod breaker_tests {
    use super::*;
    use crate::breaker::{BreakerConfig, OwnedBreaker};

    /// The cooldown a breaker opened at `now` with `rnd` draws, as its transition says it.
    fn cooldown(seed: Option<[u8; 32]>, rnd: u32) -> String {
        let cfg = BreakerConfig {
            open_ms: 10_000,
            max_open_ms: 60_000,
            jitter: 5_000,
            ..BreakerConfig::default()
        };
        let mut ob = OwnedBreaker::new(cfg, 1_000);
        let mut b = ob.breaker();
        if let Some(seed) = seed {
            b = b.with_jitter(JitterSource {
                seed,
                upstream: b"api",
                route: b"default",
            });
        }
        let t = b.trip(5_000, rnd, "test".into()).unwrap();
        t.detail.unwrap()
    }

    #[test]
    fn a_keyed_breaker_draws_from_its_key_not_from_the_random_numbers() {
        assert_eq!(
            cooldown(Some([3; 32]), 0),
            cooldown(Some([3; 32]), u32::MAX)
        );
        // Without a key, the random number decides (5 s and 15 s, the range's ends).
        assert_eq!(cooldown(None, 0), "retry in 5s");
        assert_eq!(cooldown(None, u32::MAX), "retry in 15s");
    }
}
