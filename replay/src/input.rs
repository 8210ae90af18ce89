//! Reading the logs: plain or gzip'd, a line at a time, never more than a bounded line in
//! memory (a log's line is as long as whatever a client put in the fields it logs).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};

/// The default `--max-line`: several times what one field of a request can hold with nginx's
/// default header buffers (8k), so an ordinary line is never refused.
pub const DEFAULT_MAX_LINE: usize = 64 << 10;

/// Opens a log (`-`: stdin), gunzipping it when it starts with gzip's magic.
pub fn open(path: &str) -> Result<Box<dyn BufRead>, String> {
    let raw: Box<dyn Read> = if path == "-" {
        Box::new(io::stdin().lock())
    } else {
        Box::new(File::open(path).map_err(|e| format!("{path}: {e}"))?)
    };
    let mut r = BufReader::with_capacity(1 << 16, raw);
    let gz = r
        .fill_buf()
        .map_err(|e| format!("{path}: {e}"))?
        .starts_with(&[0x1f, 0x8b]);
    Ok(if gz {
        Box::new(BufReader::with_capacity(
            1 << 16,
            flate2::bufread::MultiGzDecoder::new(r),
        ))
    } else {
        Box::new(r)
    })
}

/// What [`read_line`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Got {
    /// A line, in the buffer (without its newline).
    Line,
    /// A line longer than the bound, read through to its newline and dropped.
    TooLong,
    /// The end of the input.
    End,
}

/// Reads the next line into `buf` (cleared first, the newline removed) when it has at most
/// `max` bytes; a longer one is skipped a bounded piece at a time, so `buf` never holds more
/// than `max + 1` bytes, whatever the input.
pub fn read_line<R: BufRead + ?Sized>(r: &mut R, buf: &mut Vec<u8>, max: usize) -> io::Result<Got> {
    let limit = max as u64 + 1;
    buf.clear();
    if (&mut *r).take(limit).read_until(b'\n', buf)? == 0 {
        return Ok(Got::End);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        return Ok(Got::Line);
    }
    if buf.len() <= max {
        // The last line, without a newline.
        return Ok(Got::Line);
    }
    loop {
        buf.clear();
        let n = (&mut *r).take(limit).read_until(b'\n', buf)?;
        if n == 0 || buf.last() == Some(&b'\n') {
            buf.clear();
            return Ok(Got::TooLong);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize) -> Vec<(Got, Vec<u8>)> {
        // A small reader buffer: the pieces a gzip decoder or a pipe give.
        let mut r = BufReader::with_capacity(7, input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        loop {
            let got = read_line(&mut r, &mut buf, max).unwrap();
            assert!(buf.capacity() <= 2 * (max + 1) + 64, "{}", buf.capacity());
            if got == Got::End {
                return out;
            }
            out.push((got, buf.clone()));
        }
    }

    #[test]
    fn lines_up_to_the_bound_and_not_past_it() {
        let ok = |s: &str| (Got::Line, s.as_bytes().to_vec());
        let long = (Got::TooLong, Vec::new());
        assert_eq!(
            lines(b"abc\n\n0123456789\n01234567890\nxy", 10),
            vec![ok("abc"), ok(""), ok("0123456789"), long.clone(), ok("xy")]
        );
        // Too long at the end, with or without its newline.
        assert_eq!(lines(b"a\n0123456789abc", 10), vec![ok("a"), long.clone()]);
        assert_eq!(lines(b"0123456789a\n", 10), vec![long.clone()]);
        assert_eq!(lines(b"", 10), vec![]);
        // \r is the parser's to strip.
        assert_eq!(lines(b"a\r\n", 10), vec![ok("a\r")]);
    }

    #[test]
    fn a_line_bomb_is_never_held() {
        let mut bomb = b"before\n".to_vec();
        bomb.extend(std::iter::repeat(b'x').take(4 << 20));
        bomb.extend_from_slice(b"\nafter\n");
        let got = lines(&bomb, 1024);
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].0, Got::TooLong);
        assert_eq!(got[2], (Got::Line, b"after".to_vec()));
    }
}
