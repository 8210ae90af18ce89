//! nginx's `ngx_parse_time(value, 0)` and `ngx_parse_size`, ported, so that a value given to
//! the replay means what it means to `nginx -t` (the module hands nginx's own to the same
//! directive parser).

use circuit_breaker_core::directive::Units;

/// nginx's value parsers, in Rust.
pub struct NginxUnits;

const MAX: i64 = i64::MAX;

/// `ngx_parse_time(value, 0)`: milliseconds; `y` and `M` refused, a bare number is seconds.
pub fn parse_msec(s: &str) -> Option<u64> {
    #[derive(PartialEq, PartialOrd, Clone, Copy)]
    enum Step {
        Month,
        Week,
        Day,
        Hour,
        Min,
        Sec,
        Msec,
        Last,
    }
    let b = s.as_bytes();
    let (mut value, mut total, mut valid) = (0i64, 0i64, false);
    let mut step = Step::Month;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        i += 1;
        if c.is_ascii_digit() {
            let d = i64::from(c - b'0');
            if value >= MAX / 10 && (value > MAX / 10 || d > MAX % 10) {
                return None;
            }
            value = value * 10 + d;
            valid = true;
            continue;
        }
        let (next, scale): (Step, i64) = match c {
            b'w' => (Step::Week, 60 * 60 * 24 * 7),
            b'd' => (Step::Day, 60 * 60 * 24),
            b'h' => (Step::Hour, 60 * 60),
            b'm' if b.get(i) == Some(&b's') => {
                i += 1;
                (Step::Msec, 1)
            }
            b'm' => (Step::Min, 60),
            b's' => (Step::Sec, 1),
            b' ' if step < Step::Sec => (Step::Last, 1),
            _ => return None,
        };
        if step >= next && next != Step::Last {
            return None;
        }
        step = next;
        let (scale, max) = if next == Step::Msec {
            (1, MAX)
        } else {
            (scale * 1000, MAX / scale / 1000)
        };
        if value > max {
            return None;
        }
        value *= scale;
        if total > MAX - value {
            return None;
        }
        total += value;
        value = 0;
        while b.get(i) == Some(&b' ') {
            i += 1;
        }
    }
    if !valid || value > MAX / 1000 {
        return None;
    }
    value *= 1000;
    if total > MAX - value {
        return None;
    }
    u64::try_from(total + value).ok()
}

/// `ngx_parse_size`: bytes, with `k` or `m` (either case).
pub fn parse_size(s: &str) -> Option<u64> {
    let (num, scale) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    if num.is_empty() || !num.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let n: u64 = num.parse().ok()?;
    n.checked_mul(scale)
        .filter(|&v| v <= i64::MAX as u64 && n <= (i64::MAX as u64) / scale)
}

impl Units for NginxUnits {
    fn msec(&self, value: &str) -> Option<u64> {
        parse_msec(value)
    }
    fn size(&self, value: &str) -> Option<u64> {
        parse_size(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_as_nginx_reads_them() {
        assert_eq!(parse_msec("10s"), Some(10_000));
        assert_eq!(parse_msec("500ms"), Some(500));
        assert_eq!(parse_msec("5m"), Some(300_000));
        assert_eq!(parse_msec("1h30m"), Some(5_400_000));
        assert_eq!(parse_msec("1m 30s"), Some(90_000));
        assert_eq!(parse_msec("30"), Some(30_000));
        assert_eq!(parse_msec("1s500ms"), Some(1500));
        // nginx takes a bare number after a unit as seconds too.
        assert_eq!(parse_msec("1s 5"), Some(6000));
        assert_eq!(parse_msec("2w"), Some(14 * 86_400_000));
        for bad in ["", "1y", "1M", "s", "1x", "1s1m", "1ms1s", "-1s", "1.5s"] {
            assert_eq!(parse_msec(bad), None, "{bad}");
        }
        assert_eq!(parse_msec("99999999999999999999s"), None);
    }

    #[test]
    fn sizes_as_nginx_reads_them() {
        assert_eq!(parse_size("32k"), Some(32 << 10));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("100"), Some(100));
        assert_eq!(parse_size("1g"), None);
        assert_eq!(parse_size("k"), None);
    }
}
