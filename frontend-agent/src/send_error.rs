//! Why events sent to the agent were not accepted, whichever way they came in: over HTTP, from
//! a tailed file or from a Rust caller.

use crate::event::EventError;
use crate::spool::SpoolError;

/// Why events were not accepted. Nothing of a refused call is accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// Event `index` of the call is invalid (HTTP 400).
    #[error("event {index}: {source}")]
    Invalid { index: usize, source: EventError },
    /// The topic's schema cannot be had right now (HTTP 503).
    #[error("{0}")]
    Unavailable(EventError),
    /// The spool is full under `block` (HTTP 503 with Retry-After).
    #[error("the spool is full; retry in {retry_after_ms} ms")]
    Full { retry_after_ms: u64 },
    /// The call's events are more than the whole spool holds: they never fit (HTTP 400).
    #[error(
        "the events of this call ({bytes} bytes encoded) exceed the whole spool ({max_bytes} bytes); send them in smaller calls"
    )]
    TooLarge { bytes: u64, max_bytes: u64 },
    #[error(transparent)]
    Spool(SpoolError),
    #[error("the agent is shutting down")]
    ShuttingDown,
}
