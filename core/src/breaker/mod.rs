//! The breaker proper: classification, rolling window, state machine. Pure and `no unsafe`;
//! time and randomness are injected.
#![warn(missing_docs)]

pub mod classified;
pub mod classify;
pub mod config;
pub mod held;
pub mod histogram;
pub mod jitter;
pub mod judge;
pub mod owned;
pub mod ramp;
pub mod reason;
pub mod retunes;
pub mod state;
pub mod streams;
pub mod timing;
pub mod trip;
pub mod window;

pub use classified::Classified;
pub use classify::{classify, response_fails, Attempt, Ending, Verdict};
pub use config::{
    BreakerConfig, FailureClass, FailureSet, GrpcCode, GRPC_CLIENT_CODES, MAX_WINDOW_S,
};
pub use owned::OwnedBreaker;
pub use ramp::RAMP_RETRY_AFTER_MS;
pub use reason::Why;
pub use state::{
    jittered, layout, probe_within_presence, tail_offset, Admission, Breaker, BreakerHeader,
    Control, Decision, Gate, ProbeFailure, ProbeResult, Recorded, Retuned, Ticket, Transition,
    PROBE_LEASE_MS,
};
pub use timing::{origin_ms, Marks};
pub use window::Bucket;
