//! Retries: whether nginx retries the attempt being freed ([`follows`], `next.rs`), and
//! whether the retry may be made ([`allow`], `budget.rs`): none while the upstream's breaker
//! is open or half-open, none beyond the retry budget (`retry_budget`, `retry_min`).
//! `peer.free` asks both, in the lock hold that records the attempt.

mod budget;
mod next;

pub use budget::allow;
pub use next::follows;
