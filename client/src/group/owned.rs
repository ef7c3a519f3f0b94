//! A partition this consumer owns for the moment: its progress and the switch that stops its
//! fetcher when a rebalance takes it away.

use std::sync::atomic::{AtomicBool, AtomicI64};

use cluster::PartitionId;
use tokio_util::sync::CancellationToken;

/// Offsets not known yet (the fetcher has still to apply `auto_offset_reset`).
pub(crate) const OFFSET_UNKNOWN: i64 = -1;

pub(crate) struct Owned {
    pub(crate) topic: String,
    pub(crate) partition: PartitionId,
    /// `{consumer_id}-{stream}`, the value of the owner node.
    pub(crate) owner: String,
    pub(crate) stream: u32,
    /// Offset after the last message the application took.
    pub(crate) consumed: AtomicI64,
    /// Offset last written to the offset registry.
    pub(crate) committed: AtomicI64,
    /// Set before the partition is released; streams drop its queued messages.
    pub(crate) revoked: AtomicBool,
    pub(crate) stop: CancellationToken,
}
