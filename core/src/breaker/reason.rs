//! Human reasons for transitions, and their fixed-size copy in shared memory.

/// Bytes kept of the last transition's reason in shared memory: real ones are about 40; one
/// with ten-digit counts while suspected, or a server ejected by the probe of a route with a
/// long name, is cut (its log line is whole). 64, so that the episode's start fits beside it
/// in what was the header's padding.
pub const REASON_BYTES: usize = 64;

/// `num / den` as a percentage: an integer when whole, else floored to one decimal (`55`,
/// `33.3`). Flooring keeps `rate >= threshold` true as printed.
pub fn percent(num: u64, den: u64) -> String {
    if den == 0 {
        return "0".into();
    }
    let num = u128::from(num);
    let den = u128::from(den);
    if (num * 100) % den == 0 {
        format!("{}", num * 100 / den)
    } else {
        let tenths = num * 1000 / den;
        format!("{}.{}", tenths / 10, tenths % 10)
    }
}

/// A rate in hundredths of a percent (`5000`), as a percentage (`50`).
pub fn rate(hundredths: u32) -> String {
    percent(u64::from(hundredths), 10_000)
}

/// Milliseconds rounded up to whole seconds.
pub fn secs_ceil(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// Copies `text` into `buf`, cut on a char boundary; returns the length kept.
pub fn store(buf: &mut [u8; REASON_BYTES], text: &str) -> u8 {
    let mut len = text.len().min(REASON_BYTES);
    while !text.is_char_boundary(len) {
        len -= 1;
    }
    buf[..len].copy_from_slice(&text.as_bytes()[..len]);
    len as u8
}

/// The text stored by [`store`] (empty if the bytes are not valid UTF-8).
pub fn load(buf: &[u8; REASON_BYTES], len: u8) -> &str {
    let len = usize::from(len).min(REASON_BYTES);
    std::str::from_utf8(&buf[..len]).unwrap_or("")
}

/// A reason and its optional detail as one log phrase: `reason` or `reason, detail`.
pub struct Why<'a>(pub &'a str, pub Option<&'a str>);

impl core::fmt::Display for Why<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.0)?;
        match self.1 {
            Some(d) => write!(f, ", {d}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn why_joins_the_detail_when_there_is_one() {
        assert_eq!(
            Why("failure rate 55%", None).to_string(),
            "failure rate 55%"
        );
        assert_eq!(
            Why("failure rate 55%", Some("retry in 30s")).to_string(),
            "failure rate 55%, retry in 30s"
        );
    }

    #[test]
    fn percentages_are_whole_or_one_decimal() {
        assert_eq!(percent(22, 40), "55");
        assert_eq!(percent(1, 3), "33.3");
        assert_eq!(percent(2, 3), "66.6");
        assert_eq!(percent(9_999, 10_000), "99.9");
        assert_eq!(percent(3, 40), "7.5");
        assert_eq!(percent(1, 0), "0");
        assert_eq!(rate(5000), "50");
        assert_eq!(rate(3333), "33.3");
        assert_eq!(percent(u64::MAX, u64::MAX), "100");
    }

    #[test]
    fn stored_reasons_are_cut_on_a_char_boundary() {
        let mut buf = [0u8; REASON_BYTES];
        let long = "é".repeat(100);
        let len = store(&mut buf, &long);
        assert_eq!(len, 64);
        assert_eq!(load(&buf, len), "é".repeat(32));
        let odd = format!("x{long}");
        let len = store(&mut buf, &odd);
        assert_eq!(len, 63);
        assert!(load(&buf, len).starts_with('x'));
        assert_eq!(secs_ceil(29_001), 30);
        assert_eq!(secs_ceil(0), 0);
    }
}
