//! A breaker's per-second series for `--timeline DIR`, written as it goes (CSV, one row per
//! second with requests or a change of state; `replay/plot.py` draws it).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use circuit_breaker_core::snapshot::State;

/// The current second's counts, and where finished seconds go.
pub struct Timeline {
    out: BufWriter<File>,
    second: u64,
    requests: u32,
    bad: u32,
    slow: u32,
    refused: u32,
    state: State,
    error: Option<String>,
}

/// The CSV's first line.
pub const HEADER: &str = "second,requests,bad,slow,refused,state";

impl Timeline {
    /// Writes to `path` (with its header).
    pub fn create(path: &Path) -> Result<Timeline, String> {
        let f = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut out = BufWriter::new(f);
        writeln!(out, "{HEADER}").map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Timeline {
            out,
            second: 0,
            requests: 0,
            bad: 0,
            slow: 0,
            refused: 0,
            state: State::Closed,
            error: None,
        })
    }

    fn at(&mut self, now_ms: u64) {
        let s = now_ms / 1000;
        if s != self.second {
            self.flush_row();
            self.second = s;
        }
    }

    fn flush_row(&mut self) {
        if self.second == 0 {
            return;
        }
        let r = writeln!(
            self.out,
            "{},{},{},{},{},{}",
            self.second,
            self.requests,
            self.bad,
            self.slow,
            self.refused,
            self.state.name()
        );
        if let Err(e) = r {
            self.error.get_or_insert(e.to_string());
        }
        self.requests = 0;
        self.bad = 0;
        self.slow = 0;
        self.refused = 0;
    }

    /// Counts one request's outcome at `now_ms`.
    pub fn count(&mut self, now_ms: u64, bad: bool, slow: bool, refused: bool) {
        self.at(now_ms);
        self.requests += 1;
        self.bad += u32::from(bad);
        self.slow += u32::from(slow);
        self.refused += u32::from(refused);
    }

    /// The breaker moved to `state` at `now_ms`.
    pub fn state(&mut self, now_ms: u64, state: State) {
        self.at(now_ms);
        self.state = state;
    }

    /// Writes the last second; the first write error, if any.
    pub fn flush(&mut self) -> Option<String> {
        self.flush_row();
        if let Err(e) = self.out.flush() {
            self.error.get_or_insert(e.to_string());
        }
        self.error.clone()
    }
}
