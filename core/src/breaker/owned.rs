//! A breaker with its own heap storage, for tests and benchmarks (the shell uses shared memory).

use super::config::BreakerConfig;
use super::state::{Breaker, BreakerHeader};
use super::window::Bucket;

/// A header and its buckets owned on the heap.
#[derive(Clone, Debug)]
pub struct OwnedBreaker {
    /// The header.
    pub hdr: Box<BreakerHeader>,
    /// Its `window_s` buckets.
    pub buckets: Vec<Bucket>,
}

impl OwnedBreaker {
    /// A fresh closed breaker created at `now_ms` (epoch 0, see [`BreakerHeader::new`]).
    pub fn new(cfg: BreakerConfig, now_ms: u64) -> Self {
        Self::with_epoch(cfg, now_ms, 0)
    }

    /// A fresh closed breaker whose probe tickets carry `epoch`.
    pub fn with_epoch(cfg: BreakerConfig, now_ms: u64, epoch: u32) -> Self {
        OwnedBreaker {
            hdr: Box::new(BreakerHeader::new(cfg, now_ms, epoch)),
            buckets: vec![Bucket::EMPTY; cfg.window_s as usize],
        }
    }

    /// Borrows it as a [`Breaker`].
    pub fn breaker(&mut self) -> Breaker<'_> {
        Breaker::new(&mut self.hdr, &mut self.buckets)
    }
}
