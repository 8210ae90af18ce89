//! A worker's sessions that wait to be judged, kept in its main conf's cell (made on first
//! use by `session::with_waiting`).

use circuit_breaker_core::session::{Table, Wheel};

/// A worker's sessions that wait to be judged: the probes in a table, the others counted by
/// when their bounds run out.
pub struct Waiting {
    pub probes: Table,
    pub plain: Wheel,
}
