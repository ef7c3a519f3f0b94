//! One live cluster: the topics it has (watched in its topic registry, so a topic created
//! later is picked up without a restart) and the consumer that copies them.
//!
//! The consumer subscribes to a fixed topic set, so a change of the set starts a new
//! *generation*: the old consumer stops reading, waits (bounded) for the target to
//! acknowledge what it read, commits and leaves the group; a new one joins with every topic.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use client::group::lag::LogEnds;
use client::{CommitPolicy, GroupConsumer, GroupConsumerConfig, OffsetReset};
use cluster::{Coordinator, Registry};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, TopicFilter};
use crate::copy::{Shared, copy_stream};

/// Where the brokers of a cluster register their topics (`docs/design.md`, "Cluster registry").
const TOPICS_PATH: &str = "/brokers/topics";
/// Pause after a failure to read the registry, create topics or join the group; doubles.
const RETRY_BACKOFF_MS: u64 = 200;
const RETRY_BACKOFF_MAX_MS: u64 = 5_000;
/// Attempts to take sole hold of a consumer whose copy tasks just ended, before it is dropped.
const CLOSE_ATTEMPTS: u32 = 100;

pub(crate) struct Source {
    pub(crate) name: Arc<str>,
    pub(crate) coordinator: Arc<dyn Coordinator>,
    pub(crate) config: Config,
    pub(crate) filter: TopicFilter,
    pub(crate) shared: Arc<Shared>,
    /// TLS to the source's brokers.
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
}

impl Source {
    /// Follows the source's topics and copies them until `stop`, then drains and leaves.
    pub(crate) async fn run(self, stop: CancellationToken) {
        let registry = Registry::new(Arc::clone(&self.coordinator));
        let mut current: Option<Generation> = None;
        let mut copying = BTreeSet::new();
        let mut backoff = service::Backoff::from_ms(RETRY_BACKOFF_MS, RETRY_BACKOFF_MAX_MS);
        loop {
            match self.step(&registry, &mut current, &mut copying).await {
                Ok(watch) => {
                    backoff.reset();
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = watch => continue,
                    }
                }
                Err(e) => {
                    tracing::warn!(source = %self.name, error = %e, "source not followed; retrying");
                    if !backoff.wait(&stop).await {
                        break;
                    }
                }
            }
        }
        if let Some(generation) = current {
            generation.finish(&self.name, self.config.drain_timeout_ms).await;
        }
    }

    /// Reads the topic list (setting a watch) and starts a new generation if it changed.
    async fn step(
        &self,
        registry: &Registry,
        current: &mut Option<Generation>,
        copying: &mut BTreeSet<String>,
    ) -> Result<cluster::Watch, String> {
        self.coordinator.ensure(TOPICS_PATH).await.map_err(|e| e.to_string())?;
        let (topics, watch) =
            self.coordinator.children_and_watch(TOPICS_PATH).await.map_err(|e| e.to_string())?;
        let wanted: BTreeSet<String> =
            topics.into_iter().filter(|t| self.filter.copies(t)).collect();
        if wanted == *copying {
            return Ok(watch);
        }
        for topic in wanted.difference(copying) {
            self.shared.target.ensure_topic(topic).await.map_err(|e| format!("{topic}: {e}"))?;
        }
        if let Some(generation) = current.take() {
            generation.finish(&self.name, self.config.drain_timeout_ms).await;
            copying.clear();
        }
        if wanted.is_empty() {
            return Ok(watch);
        }
        tracing::info!(source = %self.name, topics = ?wanted, "copying");
        *current = Some(self.start(registry, &wanted).await?);
        *copying = wanted;
        Ok(watch)
    }

    async fn start(
        &self,
        registry: &Registry,
        topics: &BTreeSet<String>,
    ) -> Result<Generation, String> {
        let mut config = GroupConsumerConfig::new(&self.config.group);
        config.commit = CommitPolicy::Marked;
        config.framed = true;
        config.auto_commit_ms = self.config.commit_ms;
        config.auto_offset_reset = OffsetReset::Smallest;
        config.fetch.tls = self.tls.clone();
        let consumer =
            GroupConsumer::connect(registry.clone(), config).map_err(|e| e.to_string())?;
        let subscription: BTreeMap<String, u32> = topics.iter().map(|t| (t.clone(), 1)).collect();
        let streams =
            consumer.create_message_streams(&subscription).await.map_err(|e| e.to_string())?;
        let consumer = Arc::new(consumer);
        let stop_reading = CancellationToken::new();
        let mut copies = JoinSet::new();
        for stream in streams.into_values().flatten() {
            copies.spawn(copy_stream(
                Arc::clone(&self.shared),
                Arc::clone(&self.name),
                Arc::clone(&consumer),
                stream,
                stop_reading.clone(),
            ));
        }
        let lag = tokio::spawn(report_lag(
            Arc::clone(&self.name),
            registry.clone(),
            self.config.group.clone(),
            Arc::downgrade(&consumer),
            Arc::clone(&self.shared),
            self.config.metrics_refresh_ms,
            LogEnds::with_tls(self.tls.clone()),
        ));
        Ok(Generation { consumer, copies, stop_reading, lag })
    }
}

/// The consumer of one topic set and its copy tasks.
struct Generation {
    consumer: Arc<GroupConsumer>,
    copies: JoinSet<()>,
    stop_reading: CancellationToken,
    lag: tokio::task::JoinHandle<()>,
}

impl Generation {
    /// Stops reading, waits up to `drain_timeout_ms` for the target to acknowledge what was
    /// read, then commits what was acknowledged and leaves the group. Whatever was not
    /// acknowledged in time is read again later: at least once.
    async fn finish(mut self, source: &str, drain_timeout_ms: u64) {
        self.stop_reading.cancel();
        self.lag.abort();
        let _ = self.lag.await;
        let drained = tokio::time::timeout(Duration::from_millis(drain_timeout_ms), async {
            while self.copies.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(%source, drain_timeout_ms, "target did not acknowledge everything in time; the rest will be copied again");
            self.copies.shutdown().await;
        }
        let mut consumer = self.consumer;
        for _ in 0..CLOSE_ATTEMPTS {
            match Arc::try_unwrap(consumer) {
                Ok(owned) => {
                    if let Err(e) = owned.close().await {
                        tracing::warn!(%source, error = %e, "leaving the group failed");
                    }
                    return;
                }
                Err(shared) => consumer = shared,
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tracing::error!(%source, "consumer still in use; dropped without a clean leave");
    }
}

/// Every `refresh_ms`, the lag (log end − committed offset) of each partition the consumer
/// owns, for `/metrics`.
async fn report_lag(
    source: Arc<str>,
    registry: Registry,
    group: String,
    consumer: std::sync::Weak<GroupConsumer>,
    shared: Arc<Shared>,
    refresh_ms: u64,
    mut ends: LogEnds,
) {
    loop {
        tokio::time::sleep(Duration::from_millis(refresh_ms)).await;
        let Some(owned) = (match consumer.upgrade() {
            Some(consumer) => Some(consumer.owned_partitions().await),
            None => None,
        }) else {
            return;
        };
        let mut lags = BTreeMap::new();
        for (topic, partition, _) in owned {
            let Ok(Some((_, broker))) = registry.leader(&topic, partition).await else { continue };
            let lag = ends.group_lag(&registry, &group, &broker.addr(), &topic, partition).await;
            if let Ok(lag) = lag {
                lags.insert((topic, partition), lag.bytes());
            }
        }
        shared.metrics.set_lags(&source, &lags);
    }
}
