//! This broker's replicas: the partitions of its logs, which of them it leads ([`Leader`]:
//! the followers' progress, the ISR and the high watermark) and which it follows
//! ([`Following`]), with the background tasks that keep them (a flusher per partition, a lag
//! check per leadership). Roles are handed to it — by the membership layer in a cluster, by a
//! test — and it answers the two lookups every request makes: a partition this broker leads
//! ([`Replicas::led`]), and any replica it has ([`Replicas::replica`]).
//!
//! A broker alone (no cluster) leads every partition it has, in leader epoch 0.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

use protocol::ErrorCode;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::follower::{FollowerConfig, Following, ProducerHistory};
use super::leader::{IsrStore, Leader, Leadership, watch_lag};
use crate::config::{BrokerConfig, TopicOverrides};
use crate::log::{CreateError, Created, LogError, LogManager, Partition, Topic, tasks};
use crate::metrics::Metrics;

/// Bytes a follower asks its leader for per fetch.
const REPLICA_FETCH_MAX_BYTES: u32 = 1 << 20;
/// How long a follower's fetch waits at the leader for new data.
const REPLICA_FETCH_MAX_WAIT_MS: i32 = 500;

/// The partitions this broker leads with followers, by topic and partition.
#[derive(Default)]
pub struct Leaders(RwLock<HashMap<(String, u32), Arc<Leader>>>);

impl Leaders {
    fn get(&self, partition: &Partition) -> Option<Arc<Leader>> {
        let leaders = self.0.read().unwrap_or_else(|p| p.into_inner());
        leaders.get(&(partition.topic().to_owned(), partition.index())).cloned()
    }

    fn insert(&self, partition: &Partition, leader: Arc<Leader>) -> Option<Arc<Leader>> {
        let mut leaders = self.0.write().unwrap_or_else(|p| p.into_inner());
        leaders.insert((partition.topic().to_owned(), partition.index()), leader)
    }

    fn remove(&self, topic: &str, index: u32) -> Option<Arc<Leader>> {
        let mut leaders = self.0.write().unwrap_or_else(|p| p.into_inner());
        leaders.remove(&(topic.to_owned(), index))
    }

    /// `((topic, partition), (in-sync replicas, replicas))` of every leadership, sorted: what
    /// the metrics report at each scrape.
    pub fn replica_counts(&self) -> Vec<((String, u32), (usize, usize))> {
        let leaders = self.0.read().unwrap_or_else(|p| p.into_inner());
        let mut counts: Vec<_> = leaders
            .iter()
            .map(|(key, leader)| (key.clone(), (leader.isr().len(), leader.replica_count())))
            .collect();
        counts.sort();
        counts
    }
}

pub struct Replicas {
    config: BrokerConfig,
    logs: Arc<LogManager>,
    leaders: Arc<Leaders>,
    metrics: Arc<Metrics>,
    /// Whether roles come from a cluster; a broker alone leads every partition it has.
    clustered: bool,
    /// What followers connect to their leaders with, under TLS.
    tls: Option<Arc<rustls::ClientConfig>>,
    /// Flushers and lag checks.
    tasks: TaskTracker,
    stop: CancellationToken,
    /// Told the partitions this broker had of a topic deleted, once their files are gone and
    /// before the deletion is acknowledged: what else of them must go (the store's copies).
    topic_deleted: std::sync::OnceLock<TopicDeleted>,
    /// What followers that start again at their leader's local start learn the producers
    /// before it from (the tier), if any.
    producer_history: std::sync::OnceLock<Arc<dyn ProducerHistory>>,
}

/// See [`Replicas::on_topic_deleted`].
pub type TopicDeleted = Box<
    dyn Fn(String, Vec<u32>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        + Send
        + Sync,
>;

impl Replicas {
    /// The replicas of `logs` (opened and recovered), each partition with its flusher. A log
    /// without a leader epoch starts epoch 0 (fsynced), which a broker alone (`clustered`
    /// false) leads in from here on. Blocking.
    pub fn new(
        config: BrokerConfig,
        logs: Arc<LogManager>,
        leaders: Arc<Leaders>,
        metrics: Arc<Metrics>,
        clustered: bool,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Replicas, LogError> {
        lead_alone(&logs.partitions())?;
        let replicas = Replicas {
            config,
            logs,
            leaders,
            metrics,
            clustered,
            tls,
            tasks: TaskTracker::new(),
            stop: CancellationToken::new(),
            topic_deleted: std::sync::OnceLock::new(),
            producer_history: std::sync::OnceLock::new(),
        };
        for partition in replicas.logs.partitions() {
            replicas.start_flusher(partition);
        }
        // What each log that had idempotent producers holds of them, read in the background
        // from its newest snapshot, so that its rolls snapshot them from here on; the others
        // learn at their first idempotent produce, if one comes.
        let mut partitions = replicas.logs.partitions();
        partitions.retain(|p| p.has_producer_snapshot());
        let stop = replicas.stop.clone();
        replicas.tasks.spawn(async move {
            for partition in partitions {
                if stop.is_cancelled() {
                    return;
                }
                let p = Arc::clone(&partition);
                if let Ok(Err(e)) = tokio::task::spawn_blocking(move || p.learn_producers()).await {
                    tracing::warn!(partition = ?partition, error = %e, "cannot read the log's producers; the first idempotent produce tries again");
                }
            }
        });
        Ok(replicas)
    }

    pub fn logs(&self) -> &Arc<LogManager> {
        &self.logs
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    /// What followers (and repair reads) call other brokers with, under TLS.
    pub(crate) fn tls(&self) -> Option<&Arc<rustls::ClientConfig>> {
        self.tls.as_ref()
    }

    /// Cancelled when the broker stops: the tasks of every layer above stop with it.
    pub(crate) fn stopping(&self) -> &CancellationToken {
        &self.stop
    }

    /// Stops the flushers and lag checks and flushes every partition.
    pub async fn close(&self) -> Result<(), LogError> {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        let logs = Arc::clone(&self.logs);
        let flush = move || {
            let flushed = logs.flush_all();
            for partition in logs.partitions() {
                partition.snapshot_producers();
            }
            flushed
        };
        match tokio::task::spawn_blocking(flush).await {
            Ok(flushed) => flushed,
            Err(e) => Err(LogError::Io {
                context: "flushing",
                path: self.config.data_dir.clone(),
                source: std::io::Error::other(e),
            }),
        }
    }

    fn start_flusher(&self, partition: Arc<Partition>) {
        let metrics = Arc::clone(&self.metrics);
        let flushed = move |took| metrics.flushed(took);
        self.tasks.spawn(tasks::flusher(partition, flushed, self.stop.clone()));
    }

    // Lookups.

    /// `partition` of `topic`, if this broker leads it (a broker alone leads all it has):
    /// the partition producers append to and consumers read.
    pub fn led(&self, topic: &str, partition: i32) -> Result<Arc<Partition>, ErrorCode> {
        let found = self.replica(topic, partition)?;
        if self.clustered && self.leaders.get(&found).is_none() {
            return Err(ErrorCode::NotLeader);
        }
        Ok(found)
    }

    /// `partition` of `topic` if this broker has a replica of it, led here or not:
    /// [`ErrorCode::WrongPartition`] for one the topic does not have, [`ErrorCode::NotLeader`]
    /// for one that is on other brokers only.
    pub fn replica(&self, topic: &str, partition: i32) -> Result<Arc<Partition>, ErrorCode> {
        protocol::validate_topic_name(topic).map_err(|_| ErrorCode::InvalidTopicName)?;
        let topic = self.logs.topic(topic).ok_or(ErrorCode::UnknownTopic)?;
        let index = u32::try_from(partition).map_err(|_| ErrorCode::WrongPartition)?;
        if index >= topic.overrides.partitions {
            return Err(ErrorCode::WrongPartition);
        }
        topic.partitions.get(&index).cloned().ok_or(ErrorCode::NotLeader)
    }

    /// A partition of `topic` this broker leads, picked at random: where a produce to
    /// partition −1 goes.
    pub fn any_led(&self, topic: &Topic) -> Option<Arc<Partition>> {
        let led: Vec<&Arc<Partition>> = topic
            .partitions
            .values()
            .filter(|p| !self.clustered || self.leaders.get(p).is_some())
            .collect();
        (!led.is_empty()).then(|| Arc::clone(led[rand::random_range(0..led.len())]))
    }

    /// The leadership of `partition`, if this broker leads it with followers.
    pub(crate) fn leader_of(&self, partition: &Partition) -> Option<Arc<Leader>> {
        self.leaders.get(partition)
    }

    /// The epoch this broker leads `topic`'s `partition` in, if it leads it.
    pub fn leading_epoch(&self, topic: &str, partition: i32) -> Option<i32> {
        let partition = self.replica(topic, partition).ok()?;
        self.leader_of(&partition).map(|l| l.epoch())
    }

    /// The in-sync replicas of a partition this broker leads with followers.
    pub fn isr(&self, topic: &str, partition: i32) -> Option<Vec<i32>> {
        let partition = self.led(topic, partition).ok()?;
        self.leader_of(&partition).map(|leader| leader.isr())
    }

    // Roles.

    /// Makes this broker the leader of `topic`'s `partition` in `leadership.epoch`, with
    /// followers: the epoch starts in the log (fsynced) before this returns, and from then on
    /// the partition keeps its ISR and high watermark (see [`super::leader`]).
    pub async fn lead(
        &self,
        topic: &str,
        partition: i32,
        leadership: Leadership,
    ) -> Result<(), ErrorCode> {
        self.lead_with(topic, partition, leadership, None).await
    }

    /// [`Replicas::lead`], recording ISR changes in `store` (the partition's state, in a
    /// cluster).
    pub(crate) async fn lead_with(
        &self,
        topic: &str,
        partition: i32,
        leadership: Leadership,
        store: Option<IsrStore>,
    ) -> Result<(), ErrorCode> {
        let partition = self.replica(topic, partition)?;
        let (p, epoch) = (Arc::clone(&partition), leadership.epoch);
        let started = tokio::task::spawn_blocking(move || p.start_leader_epoch(epoch)).await;
        match started {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(partition = ?partition, error = %e, "cannot start the leader epoch");
                return Err(ErrorCode::FencedLeaderEpoch);
            }
            Err(e) => {
                tracing::error!(error = %e, "starting the leader epoch panicked");
                return Err(ErrorCode::Unknown);
            }
        }
        let leader = Arc::new(Leader::new(
            Arc::clone(&partition),
            self.config.broker_id,
            leadership,
            self.config.replica_lag(),
            Arc::clone(&self.metrics),
            store,
        ));
        if let Some(previous) = self.leaders.insert(&partition, Arc::clone(&leader)) {
            previous.end();
        }
        self.tasks.spawn(watch_lag(leader, self.stop.clone()));
        Ok(())
    }

    /// Ends this broker's leadership of `topic`'s `partition`: producers waiting for its
    /// followers are answered with error 10 (not leader).
    pub fn resign(&self, topic: &str, partition: i32) {
        let Ok(index) = u32::try_from(partition) else { return };
        if let Some(leader) = self.leaders.remove(topic, index) {
            leader.end();
        }
    }

    /// Lets the leadership of `topic`'s `partition` take in the ISR its state records now.
    pub(crate) fn adopt_isr(
        &self,
        topic: &str,
        partition: i32,
        isr: &[i32],
        is_live: impl Fn(i32) -> bool,
    ) {
        let Ok(partition) = self.replica(topic, partition) else { return };
        if let Some(leader) = self.leader_of(&partition) {
            leader.adopt_isr(isr, is_live);
        }
    }

    /// Lets the leadership of `topic`'s `partition` take in a new replica list, and the
    /// replicas a reassignment under way takes away from it.
    pub(crate) fn set_replicas(
        &self,
        topic: &str,
        partition: i32,
        replicas: &[i32],
        leaving: &[i32],
    ) {
        let Ok(partition) = self.replica(topic, partition) else { return };
        if let Some(leader) = self.leader_of(&partition) {
            leader.set_replicas(replicas, leaving);
        }
    }

    /// Makes this broker copy `topic`'s `partition` from its leader at `leader_addr`, in
    /// `leader_epoch`, until the returned handle is stopped, the broker closes, or the leader
    /// refuses the epoch. The partition must exist here.
    pub fn follow(
        &self,
        topic: &str,
        partition: i32,
        leader_addr: impl Into<String>,
        leader_epoch: i32,
    ) -> Result<Following, ErrorCode> {
        self.follow_throttled(topic, partition, leader_addr, leader_epoch, Arc::default())
    }

    /// [`Replicas::follow`] at most at `throttle` bytes per second (0: no limit), a value the
    /// caller may change while the follower runs.
    pub(crate) fn follow_throttled(
        &self,
        topic: &str,
        partition: i32,
        leader_addr: impl Into<String>,
        leader_epoch: i32,
        throttle: Arc<AtomicU64>,
    ) -> Result<Following, ErrorCode> {
        let partition = self.replica(topic, partition)?;
        let config = FollowerConfig {
            throttle_bytes_per_s: throttle,
            tls: self.tls.clone(),
            replica_id: self.config.broker_id,
            leader_addr: leader_addr.into(),
            leader_epoch,
            fetch_max_bytes: REPLICA_FETCH_MAX_BYTES,
            fetch_max_wait_ms: REPLICA_FETCH_MAX_WAIT_MS,
            max_message_bytes: self.config.max_message_bytes,
            history: self.producer_history.get().cloned(),
        };
        tracing::info!(
            partition = ?partition, leader = %config.leader_addr, leader_epoch, "following"
        );
        Ok(Following::start(partition, config, &self.stop))
    }

    // Topics.

    /// A topic of this broker alone, created (or given new settings and partitions) in its
    /// logs, each new partition led here in epoch 0.
    pub async fn create_alone(
        &self,
        name: &str,
        overrides: TopicOverrides,
    ) -> Result<Arc<Topic>, ErrorCode> {
        let (logs, owned) = (Arc::clone(&self.logs), name.to_owned());
        let created = tokio::task::spawn_blocking(move || {
            logs.create_topic(&owned, overrides).and_then(lead_created)
        })
        .await;
        self.topic_created(created)
    }

    /// The topic of a first produce to a broker alone: as it is, or created with the
    /// broker's default partition count, each partition led here in epoch 0.
    pub async fn ensure_alone(&self, name: &str) -> Result<Arc<Topic>, ErrorCode> {
        if let Some(topic) = self.logs.topic(name) {
            return Ok(topic);
        }
        let (logs, owned, partitions) =
            (Arc::clone(&self.logs), name.to_owned(), self.config.num_partitions);
        let created = tokio::task::spawn_blocking(move || {
            logs.ensure_topic(&owned, partitions).and_then(lead_created)
        })
        .await;
        self.topic_created(created)
    }

    /// This broker's replicas `hosted` of a topic of its cluster, with the topic's log
    /// settings; nothing to do when it has them with those settings already.
    pub async fn host(
        &self,
        name: &str,
        overrides: TopicOverrides,
        hosted: &BTreeSet<u32>,
    ) -> Result<(), ErrorCode> {
        if let Some(topic) = self.logs.topic(name)
            && topic.overrides == overrides
            && hosted.iter().all(|p| topic.partitions.contains_key(p))
        {
            return Ok(());
        }
        let (logs, owned, hosted) = (Arc::clone(&self.logs), name.to_owned(), hosted.clone());
        let created =
            tokio::task::spawn_blocking(move || logs.host_topic(&owned, overrides, &hosted)).await;
        self.topic_created(created).map(drop)
    }

    /// Starts the flushers of a topic's new partitions; a creation's failure as an error code.
    fn topic_created(
        &self,
        created: Result<Result<Created, CreateError>, tokio::task::JoinError>,
    ) -> Result<Arc<Topic>, ErrorCode> {
        match created {
            Ok(Ok((topic, added))) => {
                added.into_iter().for_each(|p| self.start_flusher(p));
                Ok(topic)
            }
            Ok(Err(CreateError::InvalidName(_))) => Err(ErrorCode::InvalidTopicName),
            Ok(Err(e @ (CreateError::InvalidConfig(_) | CreateError::CannotShrink { .. }))) => {
                tracing::debug!(error = %e, "rejected topic change");
                Err(ErrorCode::InvalidConfig)
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "creating topic failed");
                Err(ErrorCode::Unknown)
            }
            Err(e) => {
                tracing::error!(error = %e, "creating topic panicked");
                Err(ErrorCode::Unknown)
            }
        }
    }

    /// Sets what happens after a topic's replicas here are removed because it is deleted (the
    /// tier deletes their objects in the store); once.
    pub fn on_topic_deleted(&self, hook: TopicDeleted) {
        if self.topic_deleted.set(hook).is_err() {
            tracing::warn!("on_topic_deleted set twice; the first stays");
        }
    }

    /// Sets where followers learn the producers before their leader's local start (the tier);
    /// once, before any follows.
    pub fn learn_producers_from(&self, history: Arc<dyn ProducerHistory>) {
        if self.producer_history.set(history).is_err() {
            tracing::warn!("learn_producers_from set twice; the first stays");
        }
    }

    /// Removes this broker's replicas `indexes` of `topic` (every one, and the topic's
    /// settings, when `whole_topic`): leaderships end, files go. Followers must be stopped.
    pub async fn remove(
        &self,
        topic: &str,
        indexes: BTreeSet<u32>,
        whole_topic: bool,
    ) -> Result<(), ErrorCode> {
        let held: Vec<u32> = match self.logs.topic(topic) {
            Some(t) => t.partitions.keys().copied().collect(),
            None if whole_topic => Vec::new(),
            None => return Ok(()),
        };
        for &p in held.iter().filter(|p| whole_topic || indexes.contains(p)) {
            self.resign(topic, p as i32);
        }
        let (logs, name) = (Arc::clone(&self.logs), topic.to_owned());
        match tokio::task::spawn_blocking(move || logs.remove(&name, &indexes, whole_topic)).await {
            Ok(Ok(_)) => {
                if whole_topic && let Some(hook) = self.topic_deleted.get() {
                    hook(topic.to_owned(), held).await;
                }
                Ok(())
            }
            Ok(Err(e)) => {
                tracing::error!(%topic, error = %e, "cannot remove replicas");
                Err(ErrorCode::Unknown)
            }
            Err(e) => {
                tracing::error!(%topic, error = %e, "removing replicas panicked");
                Err(ErrorCode::Unknown)
            }
        }
    }
}

/// A broker alone leads every partition it has, in epoch 0: each log without an epoch starts
/// it (in its checkpoint) before it takes a write. Blocking.
fn lead_alone(partitions: &[Arc<Partition>]) -> Result<(), LogError> {
    partitions
        .iter()
        .filter(|p| p.leader_epoch().is_none())
        .try_for_each(|p| p.start_leader_epoch(0))
}

fn lead_created(created: Created) -> Result<Created, CreateError> {
    lead_alone(&created.1)?;
    Ok(created)
}
