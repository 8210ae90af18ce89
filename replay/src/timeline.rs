//! A breaker's per-second series for `--timeline DIR`, written as it goes (CSV, one row per
//! second with requests or a change of state; `replay/plot.py` draws it).
//!
//! A replay may have thousands of breakers (`--max-breakers`), more than a process may keep
//! files open: each timeline keeps its rows in a small buffer and appends them to its file,
//! opened for that, when the buffer fills.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use circuit_breaker_core::snapshot::State;

/// The rows' buffer, bytes: they are appended to the file before one more might not fit.
const BUFFER: usize = 1024;
/// The longest row: a second and four counts of 20 digits at most, and a state.
const MAX_ROW: usize = 5 * 21 + 10;

/// The current second's counts, and where finished seconds go.
pub struct Timeline {
    path: PathBuf,
    rows: Vec<u8>,
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
        File::create(path)
            .and_then(|mut f| writeln!(f, "{HEADER}"))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Timeline {
            path: path.to_owned(),
            rows: Vec::new(),
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
        // Writing to a Vec cannot fail.
        let _ = writeln!(
            self.rows,
            "{},{},{},{},{},{}",
            self.second,
            self.requests,
            self.bad,
            self.slow,
            self.refused,
            self.state.name()
        );
        if self.rows.len() > BUFFER - MAX_ROW {
            self.write_rows();
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

    fn write_rows(&mut self) {
        let r = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .and_then(|mut f| f.write_all(&self.rows));
        if let Err(e) = r {
            self.error
                .get_or_insert(format!("{}: {e}", self.path.display()));
        }
        self.rows.clear();
    }

    /// Writes the last second; the first write error, if any.
    pub fn flush(&mut self) -> Option<String> {
        self.flush_row();
        if !self.rows.is_empty() {
            self.write_rows();
        }
        self.error.clone()
    }
}
