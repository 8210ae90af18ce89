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

/// One log of a [`Merge`]: its next line, read ahead.
struct Head {
    input: Box<dyn BufRead>,
    buf: Vec<u8>,
    /// Lines read from it.
    n: u64,
    got: Got,
    /// The `$msec` of its last line that had one: its place in the merge.
    msec: u64,
    /// Its line was handed out: the next is read before the next choice.
    taken: bool,
}

/// Several logs read as one stream in time order: the next line is the one with the least
/// `$msec` of each log's next (ties in the order given), so that an http log and a stream
/// log of the same hours interleave as they happened, and rotated logs follow each other. A
/// line without a `$msec` (a bad one, one too long) keeps its log's place. One line of each
/// log is held, none longer than the bound.
pub struct Merge {
    heads: Vec<Head>,
    max: usize,
}

/// A line from a [`Merge`].
pub struct Next<'a> {
    /// Which log, as given.
    pub log: usize,
    /// Its 1-based line number there.
    pub n: u64,
    /// A line, or one that was too long.
    pub got: Got,
    /// The line, without its newline (empty when too long).
    pub text: &'a [u8],
}

impl Merge {
    /// A merge of `inputs`, none of whose lines is held past `max` bytes.
    pub fn new(inputs: Vec<Box<dyn BufRead>>, max: usize) -> Self {
        let heads = inputs
            .into_iter()
            .map(|input| Head {
                input,
                buf: Vec::new(),
                n: 0,
                got: Got::Line,
                msec: 0,
                taken: true,
            })
            .collect();
        Merge { heads, max }
    }

    /// The next line, `None` at the end of every log; an error with the log it came from.
    pub fn next_line(&mut self) -> Result<Option<Next<'_>>, (usize, io::Error)> {
        for (i, h) in self.heads.iter_mut().enumerate() {
            if !h.taken || h.got == Got::End {
                continue;
            }
            h.taken = false;
            h.got = read_line(&mut *h.input, &mut h.buf, self.max).map_err(|e| (i, e))?;
            match h.got {
                Got::End => continue,
                Got::Line => {
                    let first = h.buf.split(|&c| c == b' ').next().unwrap_or_default();
                    if let Some(ms) = std::str::from_utf8(first)
                        .ok()
                        .and_then(crate::line::parse_seconds)
                    {
                        h.msec = ms;
                    }
                }
                Got::TooLong => {}
            }
            h.n += 1;
        }
        let next = self
            .heads
            .iter_mut()
            .enumerate()
            .filter(|(_, h)| h.got != Got::End)
            .min_by_key(|(i, h)| (h.msec, *i));
        Ok(next.map(|(log, h)| {
            h.taken = true;
            Next {
                log,
                n: h.n,
                got: h.got,
                text: &h.buf,
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_merge_by_msec() {
        let a = "1.000 a1\n3.000 a2\nbad a3\n5.500 a4\n";
        let b = "0.500 b1\n3.000 b2\n4.000 b3\n";
        let c = "";
        let inputs: Vec<Box<dyn BufRead>> = [a, b, c]
            .iter()
            .map(|s| Box::new(BufReader::with_capacity(5, s.as_bytes())) as Box<dyn BufRead>)
            .collect();
        let mut m = Merge::new(inputs, 64);
        let mut got = Vec::new();
        while let Some(l) = m.next_line().unwrap() {
            let text = String::from_utf8(l.text.to_vec()).unwrap();
            got.push(format!("{}:{} {text}", l.log, l.n));
        }
        // Ties in the order given; a line without a time keeps its log's place.
        assert_eq!(
            got,
            [
                "1:1 0.500 b1",
                "0:1 1.000 a1",
                "0:2 3.000 a2",
                "0:3 bad a3",
                "1:2 3.000 b2",
                "1:3 4.000 b3",
                "0:4 5.500 a4",
            ]
        );
    }

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
