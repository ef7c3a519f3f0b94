//! A partition this consumer owns for the moment: its progress and the switch that stops its
//! fetcher when a rebalance takes it away.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use tokio_util::sync::CancellationToken;

/// Offsets not known yet (the fetcher has still to apply `auto_offset_reset`).
pub(crate) const OFFSET_UNKNOWN: i64 = -1;
/// `delivered` once the partition is being given up: the streams hand out no more of it.
const DELIVERIES_ENDED: i64 = i64::MIN;

pub(crate) struct Owned {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    /// `{consumer_id}-{stream}`, the value of the owner node.
    pub(crate) owner: String,
    pub(crate) stream: u32,
    /// Offset after the last message the application took (with [`super::CommitPolicy::Taken`])
    /// or marked done (with [`super::CommitPolicy::Marked`]).
    pub(crate) consumed: AtomicI64,
    /// Offset after the last message a stream handed out.
    delivered: AtomicI64,
    /// Offset last written to the offset registry.
    pub(crate) committed: AtomicI64,
    /// Set before the partition is released; streams drop its queued messages.
    pub(crate) revoked: AtomicBool,
    pub(crate) stop: CancellationToken,
}

impl Owned {
    pub(crate) fn new(
        topic: String,
        partition: i32,
        owner: String,
        stream: u32,
        start: i64,
        stop: CancellationToken,
    ) -> Owned {
        Owned {
            topic,
            partition,
            owner,
            stream,
            consumed: AtomicI64::new(start),
            committed: AtomicI64::new(start),
            delivered: AtomicI64::new(start),
            revoked: AtomicBool::new(false),
            stop,
        }
    }

    /// Records that a stream hands out the message ending at `next_offset`; `false` once
    /// deliveries have ended, and then the message must not be handed out.
    pub(crate) fn deliver(&self, next_offset: i64) -> bool {
        self.delivered
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |delivered| {
                (delivered != DELIVERIES_ENDED).then_some(next_offset)
            })
            .is_ok()
    }

    /// Ends deliveries of this partition and returns the offset after the last message handed
    /// out (atomically with respect to [`Owned::deliver`]: nothing is handed out after it).
    pub(crate) fn end_deliveries(&self) -> i64 {
        self.revoked.store(true, Ordering::Release);
        self.stop.cancel();
        match self.delivered.swap(DELIVERIES_ENDED, Ordering::AcqRel) {
            DELIVERIES_ENDED => self.consumed.load(Ordering::Acquire),
            delivered => delivered,
        }
    }
}
