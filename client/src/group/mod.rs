//! The group consumer: the paper's consumer connector (§3.3). Consumers of a group register
//! in the consumer registry, divide the partitions of their topics among their streams with
//! Algorithm 1 ([`assign`]) whenever brokers, topics or group members change, claim each
//! partition with an ephemeral owner node, and commit how far they have consumed to the offset
//! registry. There is no master: every member runs the same rebalance on the same registry.

mod assignment;
mod fetcher;
pub mod lag;
mod owned;
mod rebalance;
mod stream;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use cluster::{Registry, RegistryError, Subscription};
use thiserror::Error;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use assignment::{StreamId, assign};
pub use stream::{GroupMessage, MessageStream};

use crate::{ConsumerError, SimpleConsumerConfig};
use owned::Owned;
use stream::Chunk;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum GroupError {
    #[error("invalid group consumer config: {0}")]
    InvalidConfig(String),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Consumer(#[from] ConsumerError),
    #[error(
        "group {group}: no stable assignment after {attempts} rebalance attempts; last, {topic} {partition} was still owned by {owner:?}"
    )]
    RebalanceFailed { group: String, attempts: u32, topic: String, partition: i32, owner: String },
    #[error("message streams were already created for this consumer")]
    AlreadySubscribed,
    /// Delivered to every stream when a rebalance fails, so that no reader waits in silence;
    /// the consumer tries again after a pause and on the next change.
    #[error("rebalance failed: {0}")]
    Rebalance(String),
}

/// Which offsets a consumer commits (every `auto_commit_ms`, on
/// [`GroupConsumer::commit_offsets`], and before it gives a partition up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommitPolicy {
    /// What the streams handed out: a message counts as done once taken.
    #[default]
    Taken,
    /// Only what the caller marked with [`GroupConsumer::mark_done`]: for a caller that
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
    /// unmarked then is delivered again (at least once). [`GroupConsumer::close`] does not
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

    fn validate(&self) -> Result<(), GroupError> {
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

/// Each subscribed topic's stream queues, by stream index.
type StreamQueues = BTreeMap<String, Vec<mpsc::Sender<Chunk>>>;

/// State shared by the consumer's tasks.
pub(crate) struct Inner {
    registry: Registry,
    pub(crate) config: GroupConsumerConfig,
    consumer_id: String,
    /// Set once, by `create_message_streams`.
    subscription: OnceLock<(Subscription, StreamQueues)>,
    /// Partitions owned now. Held across a rebalance so that commits wait for it.
    owned: tokio::sync::Mutex<Vec<Arc<Owned>>>,
    fetchers: TaskTracker,
    /// Stops every task of the consumer; each owned partition's token is a child of it, so a
    /// dropped consumer's fetchers end with it (and with them its session).
    pub(crate) stop: CancellationToken,
}

impl Inner {
    /// Writes the consumed offset of every owned partition that moved since its last commit.
    async fn commit(&self, owned: &[Arc<Owned>]) -> Result<(), GroupError> {
        for partition in owned {
            let consumed = partition.consumed.load(Ordering::Acquire);
            if consumed < 0 || consumed == partition.committed.load(Ordering::Acquire) {
                continue;
            }
            self.registry
                .commit_offset(&self.config.group, &partition.topic, partition.partition, consumed)
                .await?;
            partition.committed.store(consumed, Ordering::Release);
        }
        Ok(())
    }
}

/// A member of a consumer group. Dropping it without [`GroupConsumer::close`] is what a crash
/// looks like to the group: nothing is committed, and its partitions go to others once its
/// session ends.
pub struct GroupConsumer {
    inner: Arc<Inner>,
    tasks: TaskTracker,
}

impl GroupConsumer {
    pub fn connect(
        registry: Registry,
        config: GroupConsumerConfig,
    ) -> Result<GroupConsumer, GroupError> {
        config.validate()?;
        let consumer_id = config.consumer_id.clone().unwrap_or_else(default_consumer_id);
        let inner = Arc::new(Inner {
            registry,
            config,
            consumer_id,
            subscription: OnceLock::new(),
            owned: tokio::sync::Mutex::new(Vec::new()),
            fetchers: TaskTracker::new(),
            stop: CancellationToken::new(),
        });
        Ok(GroupConsumer { inner, tasks: TaskTracker::new() })
    }

    pub fn consumer_id(&self) -> &str {
        &self.inner.consumer_id
    }

    /// Registers in the group with `streams` streams per topic and returns them; the first
    /// rebalance runs before this returns. Called once per consumer.
    pub async fn create_message_streams(
        &self,
        topics: &BTreeMap<String, u32>,
    ) -> Result<BTreeMap<String, Vec<MessageStream>>, GroupError> {
        if topics.is_empty() || topics.values().any(|&n| n == 0) {
            return Err(GroupError::InvalidConfig(
                "subscribe to at least one topic with at least one stream".into(),
            ));
        }
        let mut senders = BTreeMap::new();
        let mut streams = BTreeMap::new();
        for (topic, &count) in topics {
            let (tx, rx): (Vec<_>, Vec<_>) =
                (0..count).map(|_| mpsc::channel(self.inner.config.queue_chunks)).unzip();
            senders.insert(topic.clone(), tx);
            streams.insert(
                topic.clone(),
                rx.into_iter()
                    .map(|rx| MessageStream::new(topic.clone(), rx, self.inner.config.commit))
                    .collect(),
            );
        }
        self.inner
            .subscription
            .set((topics.clone(), senders))
            .map_err(|_| GroupError::AlreadySubscribed)?;
        let inner = &self.inner;
        inner.registry.register_consumer(&inner.config.group, &inner.consumer_id, topics).await?;
        tracing::info!(group = %inner.config.group, consumer = %inner.consumer_id, ?topics, "joined group");
        let (first, first_done) = tokio::sync::oneshot::channel();
        self.tasks.spawn(rebalance::follow_changes(Arc::clone(inner), inner.stop.clone(), first));
        let _ = first_done.await;
        self.tasks.spawn(auto_commit(Arc::clone(inner), inner.stop.clone()));
        Ok(streams)
    }

    /// Commits the consumed offset of every owned partition now.
    pub async fn commit_offsets(&self) -> Result<(), GroupError> {
        let owned = self.inner.owned.lock().await;
        self.inner.commit(&owned).await
    }

    /// With [`CommitPolicy::Marked`]: everything of `topic` `partition` before `next_offset` is
    /// done and may be committed. A mark for a partition this consumer no longer owns is
    /// ignored; marks never move an offset back.
    pub async fn mark_done(&self, topic: &str, partition: i32, next_offset: i64) {
        let owned = self.inner.owned.lock().await;
        if let Some(owned) = owned.iter().find(|o| o.topic == topic && o.partition == partition) {
            owned.consumed.fetch_max(next_offset, Ordering::AcqRel);
        }
    }

    /// `(topic, partition, stream)` of every partition this consumer owns now.
    pub async fn owned_partitions(&self) -> Vec<(String, i32, u32)> {
        let owned = self.inner.owned.lock().await;
        owned.iter().map(|o| (o.topic.clone(), o.partition, o.stream)).collect()
    }

    /// Leaves the group cleanly: commits, releases every partition and unregisters, so the
    /// others rebalance at once. Streams end after their queued messages.
    pub async fn close(self) -> Result<(), GroupError> {
        self.inner.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        let inner = &self.inner;
        let result = rebalance::release_all(inner, &mut *inner.owned.lock().await).await;
        inner.registry.unregister_consumer(&inner.config.group, &inner.consumer_id).await?;
        tracing::info!(group = %inner.config.group, consumer = %inner.consumer_id, "left group");
        result
    }
}

impl Drop for GroupConsumer {
    fn drop(&mut self) {
        self.inner.stop.cancel();
    }
}

async fn auto_commit(inner: Arc<Inner>, stop: CancellationToken) {
    let period = std::time::Duration::from_millis(inner.config.auto_commit_ms);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
        let owned = inner.owned.lock().await;
        if let Err(e) = inner.commit(&owned).await {
            tracing::warn!(error = %e, "auto commit failed");
        }
    }
}

fn default_consumer_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim();
    let host = if host.is_empty() { "consumer" } else { host };
    format!("{host}-{}-{:08x}", std::process::id(), rand::random::<u32>())
}
