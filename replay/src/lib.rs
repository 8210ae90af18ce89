//! Replays nginx access logs through the circuit breaker's own core: with these settings,
//! how often would it have opened, for how long, and what would it have refused?
pub mod clock;
pub mod conf;
mod draws;
pub mod input;
pub mod line;
pub mod pool;
pub mod report;
pub mod sim;
pub mod stats;
pub mod timeline;
pub mod units;
