//! The flow-control limits every peer's clients share, so that the peers are measured alike.

use std::time::Duration;

/// Messages a producer may have sent without their acknowledgement: enough that throughput is
/// not bound by the round trip (1000 single-message requests, or 20 batches of 50).
pub(super) const IN_FLIGHT_MESSAGES_MAX: usize = 1000;

/// Messages a consumer takes in one `receive` at most, and its prefetch where it has one.
pub(super) const RECEIVE_MESSAGES_MAX: usize = 1000;

/// How long `receive` waits for a first message.
pub(super) const RECEIVE_WAIT: Duration = Duration::from_millis(100);
