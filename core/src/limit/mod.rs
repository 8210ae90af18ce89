//! An adaptive in-flight (concurrency) limit per breaker, kept in shared memory.
//!
//! The algorithm, its departures from Envoy's and why, and how it sits in shared memory are
//! in `docs/adaptive-limit.md`; `core/tests/limit_sim.rs` drives the controller against a
//! queueing origin in virtual time and prints the figures.

mod config;
mod controller;
mod sample;
mod samples;
pub mod share;
#[cfg(test)]
mod tests;
pub mod word;

pub use config::{LimitConfig, LimitConfigError};
pub use controller::*;
pub use sample::Sample;
pub use samples::Samples;
