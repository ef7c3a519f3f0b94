//! How a group consumer is set up: its group and id, what it commits and when, where it
//! starts without a committed offset, and how it fetches and rebalances.

use super::error::GroupError;
use crate::SimpleConsumerConfig;

/// Which offsets a consumer commits (every `auto_commit_ms`, on
/// [`super::GroupConsumer::commit_offsets`], and before it gives a partition up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommitPolicy {
    /// What the streams handed out: a message counts as done once taken.
    #[default]
    Taken,
    /// Only what the caller marked with [`super::GroupConsumer::mark_done`]: for a caller that
    /// finishes a message after taking it (the mirror, once the target acknowledged it).
    Marked,
}

/// Where a group with no committed offset for a partition starts; also where a consumer
/// resumes when its offset is gone (deleted by retention).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    /// The earliest offset still kept.
    Smallest,
    /// The end of the log: only new messages.
    Largest,
}

#[derive(Debug, Clone)]
pub struct GroupConsumerConfig {
    pub group: String,
    /// This consumer's id in the group; by default `{host}-{pid}-{random}`.
    pub consumer_id: Option<String>,
    /// Commit consumed offsets this often.
    pub auto_commit_ms: u64,
    pub commit: CommitPolicy,
    /// Deliver every message whole, as stored: `payload` is the framed message (length, CRC,
    /// magic, attributes, payload) and a compressed wrapper comes as one message, not inflated.
    /// For copying messages byte for byte.
    pub framed: bool,
    pub auto_offset_reset: OffsetReset,
    /// Fetched chunks waiting in each stream's queue: the prefetch, and the bound on memory.
    pub queue_chunks: usize,
    /// The longest one long-poll fetch (`MULTIFETCH_WAIT`) waits at the end of the log; new
    /// data ends the wait at once, so this bounds idle requests, not latency.
    pub fetch_wait_ms: u64,
    /// Rebalance attempts when another consumer still owns a partition, before a typed error.
    pub rebalance_retries: u32,
    /// First wait between rebalance attempts; it doubles, up to `rebalance_backoff_max_ms`.
    pub rebalance_backoff_ms: u64,
    pub rebalance_backoff_max_ms: u64,
    /// With [`CommitPolicy::Marked`]: how long a rebalance waits for the caller to mark done
    /// what was handed out before it commits and gives the partitions up. What is still
    /// unmarked then is delivered again (at least once). [`super::GroupConsumer::close`] does not
    /// wait: it commits what is marked when it is called.
    pub rebalance_drain_ms: u64,
    pub fetch: SimpleConsumerConfig,
}

impl GroupConsumerConfig {
    pub fn new(group: impl Into<String>) -> GroupConsumerConfig {
        GroupConsumerConfig {
            group: group.into(),
            consumer_id: None,
            auto_commit_ms: 10_000,
            commit: CommitPolicy::Taken,
            framed: false,
            auto_offset_reset: OffsetReset::Smallest,
            queue_chunks: 4,
            fetch_wait_ms: 1_000,
            rebalance_retries: 10,
            rebalance_backoff_ms: 100,
            rebalance_backoff_max_ms: 2_000,
            rebalance_drain_ms: 10_000,
            fetch: SimpleConsumerConfig::default(),
        }
    }

    pub(super) fn validate(&self) -> Result<(), GroupError> {
        let invalid = |reason: &str| Err(GroupError::InvalidConfig(reason.into()));
        if self.group.is_empty() || self.group.contains('/') {
            return invalid("group must be a non-empty name without '/'");
        }
        if self.consumer_id.as_deref().is_some_and(|id| id.is_empty() || id.contains('/')) {
            return invalid("consumer_id must be a non-empty name without '/'");
        }
        if self.fetch_wait_ms > i32::MAX as u64 {
            return invalid("fetch_wait_ms must be below 2^31");
        }
        if self.auto_commit_ms == 0 || self.queue_chunks == 0 || self.rebalance_retries == 0 {
            return invalid(
                "auto_commit_ms, queue_chunks and rebalance_retries must be at least 1",
            );
        }
        self.fetch.validate()?;
        Ok(())
    }
}
