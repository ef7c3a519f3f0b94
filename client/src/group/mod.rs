//! The group consumer: the paper's consumer connector (§3.3). Consumers of a group register
//! in the consumer registry, divide the partitions of their topics among their streams with
//! Algorithm 1 ([`assign`]) whenever brokers, topics or group members change, claim each
//! partition with an ephemeral owner node, and commit how far they have consumed to the offset
//! registry. There is no master: every member runs the same rebalance on the same registry.

mod assignment;
mod config;
mod error;
mod fetcher;
pub mod lag;
mod owned;
mod rebalance;
mod state;
mod stream;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use cluster::Registry;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use assignment::{StreamId, assign};
pub use config::{CommitPolicy, GroupConsumerConfig, OffsetReset};
pub use error::GroupError;
use state::Inner;
pub use stream::{GroupMessage, MessageStream};

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
