//! What the consumer's tasks share: its registry, config and id, its subscription's stream
//! queues and the partitions it owns now.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use cluster::{Registry, Subscription};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::config::GroupConsumerConfig;
use super::error::GroupError;
use super::owned::Owned;
use super::stream::Chunk;

/// Each subscribed topic's stream queues, by stream index.
type StreamQueues = BTreeMap<String, Vec<mpsc::Sender<Chunk>>>;

/// State shared by the consumer's tasks.
pub(crate) struct Inner {
    pub(super) registry: Registry,
    pub(crate) config: GroupConsumerConfig,
    pub(super) consumer_id: String,
    /// Set once, by `create_message_streams`.
    pub(super) subscription: OnceLock<(Subscription, StreamQueues)>,
    /// Partitions owned now. Held across a rebalance so that commits wait for it.
    pub(super) owned: tokio::sync::Mutex<Vec<Arc<Owned>>>,
    pub(super) fetchers: TaskTracker,
    /// Stops every task of the consumer; each owned partition's token is a child of it, so a
    /// dropped consumer's fetchers end with it (and with them its session).
    pub(crate) stop: CancellationToken,
}

impl Inner {
    /// Writes the consumed offset of every owned partition that moved since its last commit.
    pub(super) async fn commit(&self, owned: &[Arc<Owned>]) -> Result<(), GroupError> {
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
