//! Retries: whether nginx retries the attempt being freed ([`follows`], `next.rs`). Whether
//! the retry may be made — none while the upstream's breaker is open or half-open, none
//! beyond the retry budget (`retry_budget`, `retry_min`) — is the core's settlement
//! (`circuit_breaker_core::settle`), which `peer.free` runs in the lock hold that records the
//! attempt.

mod next;

pub use next::follows;
