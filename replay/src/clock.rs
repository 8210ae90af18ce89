//! Instants as an operator reads them beside nginx's error log: ISO 8601 in local time, with
//! milliseconds and the offset from UTC (`2026-12-05T01:41:02.123+01:00`).

/// `ms` (since the epoch) in local time, as `localtime_r` gives it (`TZ` applies).
pub fn local_iso(ms: u64) -> String {
    let secs = (ms / 1000) as libc::time_t;
    // SAFETY: an all-zero `tm` is a valid value (plain integers and a null pointer).
    let mut tm: libc::tm = unsafe { core::mem::zeroed() };
    // SAFETY: both pointers are to live locals; localtime_r writes only `tm`.
    let ok = !unsafe { libc::localtime_r(&secs, &mut tm) }.is_null();
    if !ok {
        return utc_iso(ms);
    }
    let off = tm.tm_gmtoff / 60;
    let sign = if off < 0 { '-' } else { '+' };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}{}{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        ms % 1000,
        sign,
        off.abs() / 60,
        off.abs() % 60
    )
}

/// `ms` in UTC, ISO 8601 (`…Z`), should the local time be unknown.
pub fn utc_iso(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc() {
        assert_eq!(utc_iso(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc_iso(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(utc_iso(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn local_has_milliseconds_and_an_offset() {
        let s = local_iso(1_700_000_000_123);
        assert_eq!(s.len(), "2023-11-14T22:13:20.123+00:00".len(), "{s}");
        assert!(s.contains(".123"), "{s}");
        let tail = &s[s.len() - 6..];
        assert!(tail.starts_with('+') || tail.starts_with('-'), "{s}");
    }
}
