//! The broker's shared state and what each request does to it. Requests arrive decoded from
//! [`crate::connection`]; the answers here are values or typed error codes, never panics.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use cluster::{PartitionState, TopicAssignment};
use protocol::{
    Acks, BrokerMetadata, ErrorCode, FetchRequest, InvalidMessage, MetadataResponse,
    PartitionMetadata, TopicMetadata,
};
use thiserror::Error;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{BrokerConfig, ConfigError, TopicOverrides};
use crate::follower::{FollowerConfig, FollowerError};
use crate::leader::{Leader, Leadership};
use crate::log::index::{self, CountError};
use crate::log::{CreateError, Created, FileSlice, LogError, LogManager, Partition, Topic};
use crate::metrics::Metrics;
use crate::registration::Registration;
use crate::replicas::{
    CLUSTER_KEYS, IsrStore, MIN_INSYNC_REPLICAS, REPLICATION_FACTOR, ReplicaManager,
};

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BrokerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("opening the logs: {0}")]
    Open(#[from] CreateError),
    #[error("flushing the logs: {0}")]
    Flush(#[from] LogError),
    #[error("a blocking task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error("cannot read the listening address: {0}")]
    Listen(std::io::Error),
    #[error("ZooKeeper registration: {0}")]
    Registration(#[from] cluster::RegistryError),
    #[error("TLS: {0}")]
    Tls(#[from] service::tls::TlsError),
    #[error("ACL file: {0}")]
    Acl(#[from] crate::acl::AclError),
}

/// Bytes a follower asks its leader for per fetch.
const REPLICA_FETCH_MAX_BYTES: u32 = 1 << 20;
/// How long a follower's fetch waits at the leader for new data.
const REPLICA_FETCH_MAX_WAIT_MS: i32 = 500;
/// The `replica_id` of a `REPLICA_FETCH` that reads another replica's bytes to repair a
/// damaged segment with ([`crate::scrub`]): any replica answers it, and no leader takes it
/// for a follower's progress.
pub const REPAIR_READER_ID: i32 = -1;

/// A follower task of [`Broker::follow`].
pub struct Following {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), FollowerError>>,
}

impl Following {
    /// Whether the follower has stopped by itself (the leader refused it, or its log failed).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops following and says why the follower had stopped, if it had.
    pub async fn stop(self) -> Result<(), FollowerError> {
        self.stop.cancel();
        match self.task.await {
            Ok(result) => result,
            Err(e) => Err(FollowerError::Log(LogError::Io {
                context: "following",
                path: Default::default(),
                source: std::io::Error::other(e),
            })),
        }
    }
}

/// Where a follower's fetch of one partition reads, and what its answer's header says.
#[derive(Debug, Clone)]
pub struct ReplicaPlan {
    pub slice: Option<FileSlice>,
    /// The leader epoch of every byte of `slice`.
    pub epoch: i32,
    pub high_watermark: i64,
    /// Base offset of the segment `slice` is in.
    pub segment_base: i64,
}

/// A request's share of `request_memory_bytes`, given back when dropped.
pub(crate) struct RequestMemory {
    _permit: OwnedSemaphorePermit,
    bytes: i64,
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl Drop for RequestMemory {
    fn drop(&mut self) {
        self.gauge.dec_by(self.bytes);
    }
}

pub struct Broker {
    config: BrokerConfig,
    logs: Arc<LogManager>,
    metrics: Arc<Metrics>,
    /// Slots for long-poll fetches waiting for data (`max_parked_fetches`).
    parked: Arc<Semaphore>,
    /// Bytes of large requests being read, over all connections (`request_memory_bytes`).
    request_memory: Arc<Semaphore>,
    /// Flusher and retention tasks.
    tasks: TaskTracker,
    stop: CancellationToken,
    /// Set once the broker is serving, when it registers in ZooKeeper.
    registration: OnceLock<Arc<Registration>>,
    /// This broker's part in its cluster, once registered; unset for a broker alone.
    replicas: OnceLock<Arc<ReplicaManager>>,
    /// The port it serves on, once serving (what METADATA says of it).
    port: OnceLock<u16>,
    /// The port of its Kafka listener, if it has one.
    kafka_port: OnceLock<u16>,
    /// What the Kafka listener keeps.
    kafka: crate::kafka::State,
    /// A coordination session to register in instead of connecting to `config.zookeeper`.
    coordinator: OnceLock<Arc<dyn cluster::Coordinator>>,
    /// Partitions this broker leads with followers, by topic and partition.
    leaders: Leaders,
    /// The listener's TLS, if it speaks TLS.
    tls: Option<Arc<service::tls::ServerTls>>,
    /// What followers connect to their leaders with, under TLS.
    replica_tls: Option<Arc<rustls::ClientConfig>>,
    authorizer: crate::acl::Authorizer,
}

/// The leaderships of a broker, by topic and partition (shared with its metrics).
pub(crate) type Leaders = Arc<LeaderMap>;
pub(crate) type LeaderMap = RwLock<HashMap<(String, u32), Arc<Leader>>>;

impl Broker {
    /// Validates `config`, recovers every partition under `data_dir` and starts the flusher and
    /// retention tasks.
    pub async fn open(config: BrokerConfig) -> Result<Arc<Broker>, BrokerError> {
        config.validate()?;
        let tls = match config.server_tls()? {
            Some(files) => Some(service::tls::ServerTls::load(files)?),
            None => None,
        };
        let replica_tls = match config.replica_tls() {
            Some(files) => Some(service::tls::client_config(&files)?),
            None => None,
        };
        let acl = match &config.acl_file {
            Some(path) => Some(crate::acl::Acl::load(path)?),
            None => None,
        };
        let for_open = config.clone();
        let logs = tokio::task::spawn_blocking(move || {
            let logs = LogManager::open(&for_open)?;
            lead(&logs.partitions())?;
            Ok::<_, BrokerError>(logs)
        })
        .await??;
        let logs = Arc::new(logs);
        let leaders = Leaders::default();
        let broker = Arc::new(Broker {
            parked: Arc::new(Semaphore::new(config.max_parked_fetches as usize)),
            request_memory: Arc::new(Semaphore::new(config.request_memory_bytes as usize)),
            config,
            metrics: Arc::new(Metrics::new(Arc::clone(&logs), Arc::clone(&leaders))),
            logs,
            tasks: TaskTracker::new(),
            stop: CancellationToken::new(),
            registration: OnceLock::new(),
            replicas: OnceLock::new(),
            port: OnceLock::new(),
            kafka_port: OnceLock::new(),
            kafka: crate::kafka::State::default(),
            coordinator: OnceLock::new(),
            leaders,
            tls,
            replica_tls,
            authorizer: crate::acl::Authorizer::new(acl),
        });
        for partition in broker.logs.partitions() {
            broker.start_flusher(partition);
        }
        broker.tasks.spawn(retention(
            Arc::clone(&broker.logs),
            broker.config.retention_check_interval(),
            broker.stop.clone(),
        ));
        if let Some(interval) = broker.config.scrub_interval() {
            broker.tasks.spawn(crate::scrub::run(
                Arc::downgrade(&broker),
                interval,
                broker.config.scrub_bytes_per_s,
                broker.stop.clone(),
            ));
        }
        tracing::info!(
            broker_id = broker.config.broker_id,
            data_dir = %broker.config.data_dir.display(),
            topics = broker.logs.topics().len(),
            "logs open"
        );
        Ok(broker)
    }

    /// Records the port its Kafka listener serves on, before the broker registers.
    pub(crate) fn set_kafka_port(&self, port: u16) {
        let _ = self.kafka_port.set(port);
    }

    /// Every broker of the cluster that serves Kafka's protocol, and where: `(id, host,
    /// kafka_port)`; this broker alone, if it is alone.
    pub(crate) fn kafka_endpoints(&self) -> Vec<(i32, String, u16)> {
        match self.replicas.get() {
            Some(replicas) => replicas
                .view()
                .brokers
                .iter()
                .filter_map(|(&id, b)| b.kafka_port.map(|port| (id, b.host.clone(), port)))
                .collect(),
            None => {
                let host = self.config.advertised_host.clone();
                let host = host.unwrap_or_else(|| self.config.host.clone());
                self.kafka_port()
                    .map(|port| (self.config.broker_id, host, port))
                    .into_iter()
                    .collect()
            }
        }
    }

    /// The cluster's registry, once this broker registered in one.
    pub(crate) fn registry(&self) -> Option<cluster::Registry> {
        self.registration.get().map(|r| r.registry().clone())
    }

    /// What the Kafka listener keeps: consumer groups, idempotent producers.
    pub(crate) fn kafka(&self) -> &crate::kafka::State {
        &self.kafka
    }

    /// The port of its Kafka listener, once serving one.
    pub fn kafka_port(&self) -> Option<u16> {
        self.kafka_port.get().copied()
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    /// The listener's TLS, if it speaks TLS.
    pub fn tls(&self) -> Option<&Arc<service::tls::ServerTls>> {
        self.tls.as_ref()
    }

    pub(crate) fn authorizer(&self) -> &crate::acl::Authorizer {
        &self.authorizer
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn logs(&self) -> &LogManager {
        &self.logs
    }

    /// Makes the broker register in `session` when it starts serving, instead of in the
    /// ZooKeeper of its configuration: how the all-in-one launcher puts brokers in its embedded
    /// coordination backend. Call it before [`crate::serve`]; a second call is ignored.
    pub fn register_in(&self, session: Arc<dyn cluster::Coordinator>) {
        let _ = self.coordinator.set(session);
    }

    /// Registers this broker, listening on `port`, in the coordination session given to
    /// [`Broker::register_in`], or else in ZooKeeper if the configuration names one; then it
    /// takes its part in the cluster (its replicas, and standing for controller).
    pub(crate) async fn register(self: &Arc<Self>, port: u16) -> Result<(), BrokerError> {
        let _ = self.port.set(port);
        let info = cluster::BrokerInfo {
            host: self.config.advertised_host.clone().unwrap_or_else(|| self.config.host.clone()),
            port: self.config.advertised_port.unwrap_or(port),
            kafka_port: self.kafka_port.get().copied(),
        };
        let registration = match (self.coordinator.get(), &self.config.zookeeper) {
            (Some(session), _) => {
                Registration::register_in(Arc::clone(session), self.config.broker_id, info).await?
            }
            (None, Some(connect)) => {
                Registration::register(
                    connect,
                    self.config.zookeeper_session_timeout_ms,
                    self.config.zookeeper_auth_file.as_deref(),
                    self.config.broker_id,
                    info,
                )
                .await?
            }
            (None, None) => return Ok(()),
        };
        let registry = registration.registry().clone();
        let _ = self.registration.set(Arc::new(registration));
        let manager = Arc::new(ReplicaManager::new(registry.clone(), self.config.broker_id));
        let _ = self.replicas.set(Arc::clone(&manager));
        self.tasks.spawn(manager.run(Arc::downgrade(self), self.stop.clone()));
        self.tasks.spawn(crate::replicas::stand_for_controller(
            registry,
            self.config.broker_id,
            Arc::clone(&self.metrics),
            self.stop.clone(),
        ));
        Ok(())
    }

    /// Removes this broker's registration, if it has one.
    pub(crate) async fn unregister(&self) {
        if let Some(registration) = self.registration.get() {
            registration.unregister().await;
        }
    }

    fn start_flusher(&self, partition: Arc<Partition>) {
        self.tasks.spawn(flusher(partition, Arc::clone(&self.metrics), self.stop.clone()));
    }

    /// Stops the background tasks and flushes every partition.
    pub async fn close(&self) -> Result<(), BrokerError> {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        let logs = Arc::clone(&self.logs);
        tokio::task::spawn_blocking(move || logs.flush_all()).await??;
        tracing::info!("every partition flushed");
        Ok(())
    }

    /// Appends a whole MessageSet, validated before any byte of it is written.
    pub async fn produce(
        &self,
        topic: &str,
        partition: i32,
        acks: Acks,
        set: &Bytes,
    ) -> Result<(i32, i64), ErrorCode> {
        let mut results = self.produce_run(topic, partition, acks, std::slice::from_ref(set)).await;
        results.pop().expect("one result per set")
    }

    /// Appends MessageSets bound for one partition, pipelined back to back by one client,
    /// with a single write: each set is validated whole and gets its own result, as if each
    /// had come alone.
    pub async fn produce_run(
        &self,
        topic: &str,
        partition: i32,
        acks: Acks,
        sets: &[Bytes],
    ) -> Vec<Result<(i32, i64), ErrorCode>> {
        self.append_run(topic, partition, acks, sets).await.acknowledged().await
    }

    /// The first half of [`Broker::produce_run`]: appends the sets and returns their results
    /// with what `acks` still waits for (the flush, or the in-sync replicas), so that a
    /// connection can append the produces pipelined behind while the answers wait.
    pub(crate) async fn append_run(
        &self,
        topic: &str,
        partition: i32,
        acks: Acks,
        sets: &[Bytes],
    ) -> AppendedRun {
        let fail_all = |code| AppendedRun::now(sets.iter().map(|_| Err(code)).collect());
        if protocol::validate_topic_name(topic).is_err() {
            return fail_all(ErrorCode::InvalidTopicName);
        }
        let mut results: Vec<Result<(i32, i64), ErrorCode>> = Vec::with_capacity(sets.len());
        let mut valid: Vec<&[u8]> = Vec::with_capacity(sets.len());
        let mut counted = Vec::with_capacity(sets.len());
        let mut messages = 0;
        for set in sets {
            match index::count_records(set, self.config.max_message_bytes) {
                Ok(records) => {
                    messages += records.messages.len() as u64;
                    valid.push(set);
                    counted.push(records);
                    results.push(Ok((0, 0)));
                }
                Err(e) => {
                    tracing::debug!(%topic, partition, error = %e, "rejected message set");
                    results.push(Err(match e {
                        CountError::Invalid(InvalidMessage::TooLarge { .. }) => {
                            ErrorCode::MessageTooLarge
                        }
                        _ => ErrorCode::InvalidMessage,
                    }));
                }
            }
        }
        if valid.is_empty() {
            return AppendedRun::now(results);
        }
        let topic = match self.topic_for_produce(topic).await {
            Ok(topic) => topic,
            Err(code) => return fail_all(code),
        };
        let partition = match partition {
            protocol::ANY_PARTITION => match self.any_led_partition(&topic) {
                Some(partition) => partition,
                None => return fail_all(ErrorCode::NotLeader),
            },
            p => match self.led_partition(&topic, p) {
                Ok(partition) => partition,
                Err(code) => return fail_all(code),
            },
        };
        let partition = &partition;
        let leader = self.leader_of(partition);
        if acks == Acks::All
            && let Some(Err(code)) = leader.as_ref().map(|l| l.check_all())
        {
            return fail_all(code);
        }
        let appended = match partition.append(&valid, &counted) {
            Ok(appended) => appended,
            Err(e) if e.is_storage_full() => {
                tracing::warn!(error = %e, "disk full: produce refused");
                return fail_all(ErrorCode::StorageFull);
            }
            Err(e) => {
                tracing::error!(error = %e, "append failed");
                return fail_all(ErrorCode::Unknown);
            }
        };
        if let Some(leader) = &leader {
            leader.appended();
        }
        let bytes: usize = valid.iter().map(|s| s.len()).sum();
        self.metrics.appended(&topic.name, messages, bytes as u64);
        let mut offset = appended.offset;
        let mut valid = valid.iter();
        for result in results.iter_mut().filter(|r| r.is_ok()) {
            *result = Ok((partition.index() as i32, offset as i64));
            offset += valid.next().expect("one valid set per ok result").len() as u64;
        }
        let wait = match (acks, leader) {
            (Acks::Flushed, _) => Some(AckWait::Flushed(Arc::clone(partition), appended.end)),
            (Acks::All, Some(leader)) => {
                Some(AckWait::Replicated(leader, appended.end, self.config.ack_timeout()))
            }
            // A partition without followers: its leader is its only in-sync replica.
            _ => None,
        };
        AppendedRun { results, wait, first_record: Some(appended.first_record) }
    }

    async fn topic_for_produce(&self, name: &str) -> Result<Arc<Topic>, ErrorCode> {
        if self.replicas.get().is_some_and(|r| r.view().deleting.contains(name)) {
            return Err(ErrorCode::UnknownTopic);
        }
        if let Some(topic) = self.logs.topic(name) {
            return Ok(topic);
        }
        if let Some(replicas) = self.replicas.get() {
            let known = replicas.view().topics.contains_key(name);
            if !known && !self.config.auto_create_topics {
                return Err(ErrorCode::UnknownTopic);
            }
            if !known {
                self.create_in_cluster(replicas, name, 0, &[]).await?;
            }
            // A replica here or not: a broker without one is not the leader.
            return self.logs.topic(name).ok_or(ErrorCode::NotLeader);
        }
        if !self.config.auto_create_topics {
            return Err(ErrorCode::UnknownTopic);
        }
        let (logs, owned, partitions) =
            (Arc::clone(&self.logs), name.to_owned(), self.config.num_partitions);
        let created = tokio::task::spawn_blocking(move || {
            logs.ensure_topic(&owned, partitions).and_then(lead_created)
        })
        .await;
        self.topic_created(created)
    }

    /// `CREATE_TOPIC`: a new topic, or new settings and more partitions for an existing one.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: &[(String, String)],
    ) -> Result<(), ErrorCode> {
        protocol::validate_topic_name(name).map_err(|_| ErrorCode::InvalidTopicName)?;
        if let Some(replicas) = self.replicas.get() {
            return self.create_in_cluster(replicas, name, partitions, configs).await;
        }
        let (replication, configs) = split_cluster_keys(configs);
        let factor = replication.get(REPLICATION_FACTOR).map(|v| v.trim().to_owned());
        let min_insync = replication.get(MIN_INSYNC_REPLICAS).map(|v| v.trim().to_owned());
        if factor.as_deref().is_some_and(|f| f != "1")
            || min_insync.as_deref().is_some_and(|m| m != "1")
        {
            tracing::debug!(topic = %name, "a broker alone keeps one replica");
            return Err(ErrorCode::InvalidConfig);
        }
        let configs = configs.as_slice();
        let overrides = TopicOverrides::parse(partitions, configs, self.config.num_partitions)
            .map_err(|e| {
                tracing::debug!(topic = %name, error = %e, "rejected topic config");
                ErrorCode::InvalidConfig
            })?;
        let (logs, owned) = (Arc::clone(&self.logs), name.to_owned());
        let created = tokio::task::spawn_blocking(move || {
            logs.create_topic(&owned, overrides).and_then(lead_created)
        })
        .await;
        self.topic_created(created).map(drop)
    }

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

    /// Where a fetch's bytes are: `None` when the offset is the end of the visible log.
    pub fn plan_fetch(&self, fetch: &FetchRequest) -> Result<Option<FileSlice>, ErrorCode> {
        if fetch.max_bytes <= 0 {
            return Err(ErrorCode::InvalidFetchSize);
        }
        let partition = self.partition(&fetch.topic, fetch.partition)?;
        partition.read(fetch.offset, fetch.max_bytes as u32).map_err(|e| match e {
            LogError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            e => {
                tracing::error!(error = %e, "fetch failed");
                ErrorCode::Unknown
            }
        })
    }

    /// A watch of the visible end of a long-poll fetch's partition; an error for a fetch that
    /// is answered with one at once.
    pub(crate) fn watch_fetch(
        &self,
        fetch: &FetchRequest,
    ) -> Result<watch::Receiver<u64>, ErrorCode> {
        if fetch.max_bytes <= 0 {
            return Err(ErrorCode::InvalidFetchSize);
        }
        let partition = self.partition(&fetch.topic, fetch.partition)?;
        let visible = partition.watch_visible();
        let end = *visible.borrow();
        let offset = u64::try_from(fetch.offset).map_err(|_| ErrorCode::OffsetOutOfRange)?;
        if offset < partition.start_offset() || offset > end {
            return Err(ErrorCode::OffsetOutOfRange);
        }
        Ok(visible)
    }

    /// A slot for a long-poll fetch to wait in, if fewer than `max_parked_fetches` wait.
    pub(crate) fn try_park(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.parked).try_acquire_owned().ok()
    }

    /// Room for a request of `bytes` to be read into, out of `request_memory_bytes`: at once
    /// if there is room, else once requests being read now are taken.
    pub(crate) async fn request_memory(&self, bytes: usize) -> RequestMemory {
        let bytes = bytes.min(self.config.request_memory_bytes as usize) as u32;
        let memory = Arc::clone(&self.request_memory);
        let permit = match Arc::clone(&memory).try_acquire_many_owned(bytes) {
            Ok(permit) => permit,
            Err(_) => {
                self.metrics.request_memory_waits.inc();
                memory.acquire_many_owned(bytes).await.expect("the request memory is never closed")
            }
        };
        let gauge = self.metrics.request_memory_in_use.clone();
        gauge.inc_by(bytes as i64);
        RequestMemory { _permit: permit, bytes: bytes as i64, gauge }
    }

    /// Long-poll fetches waiting for data now.
    pub fn parked_fetches(&self) -> usize {
        self.config.max_parked_fetches as usize - self.parked.available_permits()
    }

    /// `OFFSETS`: the visible end, the start, or segment bases by modification time.
    pub async fn offsets(
        &self,
        topic: &str,
        partition: i32,
        time: i64,
        max_number: i32,
    ) -> Result<Vec<i64>, ErrorCode> {
        let partition = self.partition(topic, partition)?;
        match time {
            protocol::OFFSETS_LATEST => Ok(vec![partition.visible_end() as i64]),
            protocol::OFFSETS_EARLIEST => Ok(vec![partition.start_offset() as i64]),
            time if time < 0 || max_number <= 0 => Err(ErrorCode::InvalidRequest),
            time => {
                let found = tokio::task::spawn_blocking(move || {
                    partition.offsets_before(time, max_number as usize)
                })
                .await;
                match found {
                    Ok(Ok(offsets)) => Ok(offsets),
                    Ok(Err(e)) => {
                        tracing::error!(error = %e, "offsets failed");
                        Err(ErrorCode::Unknown)
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "offsets panicked");
                        Err(ErrorCode::Unknown)
                    }
                }
            }
        }
    }

    /// `RECORD_NUMBER`: the Kafka record number of the message at byte `offset` (of the next
    /// record at the log's end), from any replica.
    pub async fn record_number(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<i64, ErrorCode> {
        let partition = self.partition(topic, partition)?;
        let found = tokio::task::spawn_blocking(move || partition.record_at_offset(offset)).await;
        match found {
            Ok(Ok(record)) => Ok(i64::try_from(record).unwrap_or(i64::MAX)),
            Ok(Err(LogError::OffsetOutOfRange { .. })) => Err(ErrorCode::OffsetOutOfRange),
            Ok(Err(e)) => {
                tracing::error!(error = %e, "record number failed");
                Err(ErrorCode::Unknown)
            }
            Err(e) => {
                tracing::error!(error = %e, "record number panicked");
                Err(ErrorCode::Unknown)
            }
        }
    }

    /// `OFFSET_FOR_LEADER_EPOCH`: where `epoch` (or the largest epoch below it that this log
    /// knows) ends; [`protocol::UNDEFINED_EPOCH`] and −1 for an epoch older than every one.
    pub fn offset_for_leader_epoch(
        &self,
        topic: &str,
        partition: i32,
        epoch: i32,
    ) -> Result<(i32, i64), ErrorCode> {
        let partition = self.partition(topic, partition)?;
        partition.leader_epoch().ok_or(ErrorCode::NotLeader)?;
        Ok(match partition.end_offset_for(epoch) {
            Some((epoch, end)) => (epoch, end as i64),
            None => (protocol::UNDEFINED_EPOCH, -1),
        })
    }

    /// Where a follower's fetch of one partition reads: bytes of one epoch up to the written
    /// end. Refused with [`ErrorCode::FencedLeaderEpoch`] for a follower of an older leader
    /// epoch and [`ErrorCode::NotLeader`] for a newer one, which this broker does not lead.
    /// A repair read (`replica_id` [`REPAIR_READER_ID`]) is answered by any replica, in the
    /// epoch its log is in.
    pub fn plan_replica_fetch(
        &self,
        fetch: &protocol::ReplicaFetchPartition,
        replica_id: i32,
    ) -> Result<ReplicaPlan, ErrorCode> {
        let partition = self.replica_fetch_partition(fetch, replica_id)?;
        let read =
            partition.read_replica(fetch.offset, fetch.max_bytes as u32).map_err(|e| match e {
                LogError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
                e => {
                    tracing::error!(error = %e, "replica fetch failed");
                    ErrorCode::Unknown
                }
            })?;
        // A partition without followers is its own ISR: its log end is the high watermark.
        let high_watermark = match self.leader_of(&partition) {
            Some(leader) => leader.high_watermark() as i64,
            None => partition.end() as i64,
        };
        Ok(ReplicaPlan {
            slice: read.slice,
            epoch: read.epoch,
            high_watermark,
            segment_base: read.segment_base as i64,
        })
    }

    /// A watch of the written end of a follower's fetch's partition; an error for a fetch
    /// that is answered with one at once.
    pub(crate) fn watch_replica_fetch(
        &self,
        fetch: &protocol::ReplicaFetchPartition,
        replica_id: i32,
    ) -> Result<watch::Receiver<u64>, ErrorCode> {
        let partition = self.replica_fetch_partition(fetch, replica_id)?;
        let written = partition.watch_written();
        let offset = u64::try_from(fetch.offset).map_err(|_| ErrorCode::OffsetOutOfRange)?;
        if offset < partition.start_offset() || offset > *written.borrow() {
            return Err(ErrorCode::OffsetOutOfRange);
        }
        Ok(written)
    }

    fn replica_fetch_partition(
        &self,
        fetch: &protocol::ReplicaFetchPartition,
        replica_id: i32,
    ) -> Result<Arc<Partition>, ErrorCode> {
        if fetch.max_bytes <= 0 {
            return Err(ErrorCode::InvalidFetchSize);
        }
        let partition = if replica_id == REPAIR_READER_ID {
            self.local_partition(&fetch.topic, fetch.partition)?
        } else {
            self.partition(&fetch.topic, fetch.partition)?
        };
        let current = match self.leader_of(&partition) {
            Some(leader) => leader.epoch(),
            None => partition.leader_epoch().ok_or(ErrorCode::NotLeader)?,
        };
        match fetch.leader_epoch.cmp(&current) {
            std::cmp::Ordering::Less => Err(ErrorCode::FencedLeaderEpoch),
            std::cmp::Ordering::Greater => Err(ErrorCode::NotLeader),
            std::cmp::Ordering::Equal => Ok(partition),
        }
    }

    /// Makes this broker the leader of `topic`'s `partition` in `leadership.epoch`, with
    /// followers: the epoch starts in the log (fsynced) before this returns, and from then on
    /// the partition keeps its ISR and high watermark (see [`crate::leader`]).
    pub async fn lead(
        &self,
        topic: &str,
        partition: i32,
        leadership: Leadership,
    ) -> Result<(), ErrorCode> {
        self.lead_with(topic, partition, leadership, None).await
    }

    /// [`Broker::lead`], recording ISR changes in `store` (the partition's state, in a
    /// cluster).
    pub(crate) async fn lead_with(
        &self,
        topic: &str,
        partition: i32,
        leadership: Leadership,
        store: Option<IsrStore>,
    ) -> Result<(), ErrorCode> {
        let partition = self.local_partition(topic, partition)?;
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
        let key = (partition.topic().to_owned(), partition.index());
        let previous = self.leaders_mut().insert(key, Arc::clone(&leader));
        if let Some(previous) = previous {
            previous.end();
        }
        self.tasks.spawn(crate::leader::watch_lag(leader, self.stop.clone()));
        Ok(())
    }

    /// The TLS this broker's followers (and repair reads) call other brokers with.
    pub(crate) fn replica_tls(&self) -> Option<&Arc<rustls::ClientConfig>> {
        self.replica_tls.as_ref()
    }

    /// The other replicas a damaged range of `partition` may be copied from, in the order to
    /// try them — the leader, then the in-sync followers — each with its address and the
    /// epochs to ask in (the leader's, then this log's, newest first: an in-sync replica's
    /// log is in one of them). None for a broker outside a cluster.
    pub(crate) fn repair_sources(&self, partition: &Partition) -> Vec<(i32, String, Vec<i32>)> {
        let Some(replicas) = self.replicas.get() else { return Vec::new() };
        let view = replicas.view();
        let state = view
            .topics
            .get(partition.topic())
            .and_then(|t| t.states.get(&(partition.index() as i32)));
        let Some((state, _)) = state else { return Vec::new() };
        let mut epochs = vec![state.leader_epoch];
        epochs.extend(
            partition.epochs_newest_first().into_iter().filter(|&e| e != state.leader_epoch),
        );
        let me = self.config.broker_id;
        let mut ids = vec![state.leader];
        ids.extend(state.isr.iter().copied().filter(|&r| r != state.leader));
        ids.into_iter()
            .filter(|&r| r != me)
            .filter_map(|r| view.brokers.get(&r).map(|b| (r, b.addr(), epochs.clone())))
            .collect()
    }

    /// Ends this broker's leadership of `topic`'s `partition`: producers waiting for its
    /// followers are answered with error 10 (not leader).
    pub fn resign(&self, topic: &str, partition: i32) {
        let Ok(index) = u32::try_from(partition) else { return };
        if let Some(leader) = self.leaders_mut().remove(&(topic.to_owned(), index)) {
            leader.end();
        }
    }

    /// The in-sync replicas of a partition this broker leads with followers.
    pub fn isr(&self, topic: &str, partition: i32) -> Option<Vec<i32>> {
        let partition = self.partition(topic, partition).ok()?;
        self.leader_of(&partition).map(|leader| leader.isr())
    }

    fn leaders_mut(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<(String, u32), Arc<Leader>>> {
        self.leaders.write().unwrap_or_else(|p| p.into_inner())
    }

    fn leader_of(&self, partition: &Partition) -> Option<Arc<Leader>> {
        let leaders = self.leaders.read().unwrap_or_else(|p| p.into_inner());
        leaders.get(&(partition.topic().to_owned(), partition.index())).cloned()
    }

    /// Counts a follower's fetch before it waits for data: its offset is its log end.
    pub(crate) fn record_replica_fetches(&self, request: &protocol::ReplicaFetchRequest) {
        for fetch in &request.fetches {
            let Ok(partition) = self.partition(&fetch.topic, fetch.partition) else { continue };
            let Some(leader) = self.leader_of(&partition) else { continue };
            if let (true, Ok(offset)) =
                (fetch.leader_epoch == leader.epoch(), u64::try_from(fetch.offset))
            {
                leader.record_fetch(request.replica_id, offset);
            }
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

    /// [`Broker::follow`] at most at `throttle` bytes per second (0: no limit), a value the
    /// caller may change while the follower runs.
    pub(crate) fn follow_throttled(
        &self,
        topic: &str,
        partition: i32,
        leader_addr: impl Into<String>,
        leader_epoch: i32,
        throttle: Arc<std::sync::atomic::AtomicU64>,
    ) -> Result<Following, ErrorCode> {
        let partition = self.local_partition(topic, partition)?;
        let config = FollowerConfig {
            throttle_bytes_per_s: throttle,
            tls: self.replica_tls.clone(),
            replica_id: self.config.broker_id,
            leader_addr: leader_addr.into(),
            leader_epoch,
            fetch_max_bytes: REPLICA_FETCH_MAX_BYTES,
            fetch_max_wait_ms: REPLICA_FETCH_MAX_WAIT_MS,
            max_message_bytes: self.config.max_message_bytes,
        };
        tracing::info!(
            partition = ?partition, leader = %config.leader_addr, leader_epoch, "following"
        );
        let stop = self.stop.child_token();
        let task = tokio::spawn(crate::follower::follow(partition, config, stop.clone()));
        Ok(Following { stop, task })
    }

    /// `METADATA`: the live brokers and every partition's leader, epoch, replicas and ISR,
    /// for `topics` (all when empty). A broker alone answers for itself: it leads every
    /// partition it has, alone in its ISR.
    pub fn metadata(&self, topics: &[String]) -> MetadataResponse {
        let me = self.config.broker_id;
        let Some(replicas) = self.replicas.get() else {
            let port = self.config.advertised_port.or(self.port.get().copied());
            let port = i32::from(port.unwrap_or(self.config.port));
            let host =
                self.config.advertised_host.clone().unwrap_or_else(|| self.config.host.clone());
            let brokers = vec![BrokerMetadata { id: me, host, port }];
            let local = |t: &Topic| TopicMetadata {
                name: t.name.clone(),
                error: ErrorCode::None,
                partitions: t
                    .partitions
                    .iter()
                    .map(|(&p, partition)| PartitionMetadata {
                        partition: p as i32,
                        error: ErrorCode::None,
                        leader: me,
                        leader_epoch: partition.leader_epoch().unwrap_or(0),
                        replicas: vec![me],
                        isr: vec![me],
                    })
                    .collect(),
            };
            let topics = if topics.is_empty() {
                self.logs.topics().iter().map(|t| local(t)).collect()
            } else {
                topics
                    .iter()
                    .map(|name| match self.logs.topic(name) {
                        Some(t) => local(&t),
                        None => unknown_topic(name),
                    })
                    .collect()
            };
            return MetadataResponse { broker_id: me, brokers, topics };
        };
        let view = replicas.view();
        let brokers = view
            .brokers
            .iter()
            .map(|(&id, b)| BrokerMetadata { id, host: b.host.clone(), port: i32::from(b.port) })
            .collect();
        let describe = |name: &str| {
            let Some(tv) = view.topics.get(name) else { return unknown_topic(name) };
            let partitions = tv
                .assignment
                .partitions
                .iter()
                .map(|(&p, replicas)| {
                    let state = tv.states.get(&p).map(|(s, _)| s);
                    let leader = state.map_or(cluster::NO_LEADER, |s| s.leader);
                    let live = view.brokers.contains_key(&leader);
                    PartitionMetadata {
                        partition: p,
                        error: if live { ErrorCode::None } else { ErrorCode::NotLeader },
                        leader,
                        leader_epoch: state.map_or(0, |s| s.leader_epoch),
                        replicas: replicas.clone(),
                        isr: state.map(|s| s.isr.clone()).unwrap_or_default(),
                    }
                })
                .collect();
            TopicMetadata { name: name.to_owned(), error: ErrorCode::None, partitions }
        };
        let topics = if topics.is_empty() {
            view.topics.keys().map(|t| describe(t)).collect()
        } else {
            topics.iter().map(|t| describe(t)).collect()
        };
        MetadataResponse { broker_id: me, brokers, topics }
    }

    /// `CREATE_TOPIC` in a cluster: the replicas of each new partition spread over the live
    /// brokers and the partition's first state, in the registry; this broker's replicas open
    /// once it has read them back. An existing topic gets its new settings and partitions.
    async fn create_in_cluster(
        &self,
        replicas: &Arc<ReplicaManager>,
        name: &str,
        partitions: i32,
        configs: &[(String, String)],
    ) -> Result<(), ErrorCode> {
        let invalid = |reason: String| {
            tracing::debug!(topic = %name, %reason, "rejected topic config");
            ErrorCode::InvalidConfig
        };
        if replicas.view().deleting.contains(name) {
            tracing::debug!(topic = %name, "refused: the topic is being deleted");
            return Err(ErrorCode::InvalidRequest);
        }
        let (cluster_keys, log_keys) = split_cluster_keys(configs);
        let overrides = TopicOverrides::parse(partitions, &log_keys, self.config.num_partitions)
            .map_err(|e| invalid(e.to_string()))?;
        let number =
            |key: &str, default: u32| -> Result<u32, ErrorCode> {
                match cluster_keys.get(key) {
                    Some(v) => v.trim().parse().ok().filter(|n| *n >= 1).ok_or_else(|| {
                        invalid(format!("{key} must be a whole number, at least 1"))
                    }),
                    None => Ok(default),
                }
            };
        let registry = replicas.registry();
        let live: BTreeSet<i32> = registry.brokers().await.map_err(internal)?.into_keys().collect();
        let existing = registry.topic_assignment(name).await.map_err(internal)?;
        let existing_factor = existing.as_ref().map(|(a, _)| a.replication_factor() as u32);
        let factor = number(
            REPLICATION_FACTOR,
            existing_factor.unwrap_or(self.config.default_replication_factor),
        )?;
        // A change of an existing topic's other settings keeps its own min_insync_replicas.
        let existing_min_insync = existing
            .as_ref()
            .and_then(|(a, _)| a.config.get(MIN_INSYNC_REPLICAS))
            .and_then(|v| v.trim().parse().ok());
        let min_insync = number(
            MIN_INSYNC_REPLICAS,
            existing_min_insync.unwrap_or(self.config.min_insync_replicas),
        )?;
        if min_insync > factor {
            return Err(invalid(format!(
                "min_insync_replicas {min_insync} exceeds replication_factor {factor}"
            )));
        }
        if existing_factor.is_some_and(|f| f != factor) {
            return Err(invalid("replication_factor cannot change (a reassignment would)".into()));
        }
        let mut config: BTreeMap<String, String> = configs.iter().cloned().collect();
        config.remove("partitions");
        config.insert(REPLICATION_FACTOR.into(), factor.to_string());
        config.insert(MIN_INSYNC_REPLICAS.into(), min_insync.to_string());
        let count = overrides.partitions as i32;
        let spread = |first: i32, n: i32| {
            let (start, shift) =
                (rand::random_range(0..1024usize), rand::random_range(0..1024usize));
            cluster::assign_replicas(&live, first, n as u32, factor as usize, start, shift)
                .map_err(|e| invalid(e.to_string()))
        };
        let added: Vec<i32> = match existing {
            None => {
                let assignment = TopicAssignment { partitions: spread(0, count)?, config };
                match registry.create_topic(name, &assignment).await {
                    Ok(()) => (0..count).collect(),
                    // Another broker created it first: its assignment stands.
                    Err(cluster::RegistryError::TopicExists { .. }) => Vec::new(),
                    Err(e) => return Err(internal(e)),
                }
            }
            Some((mut assignment, version)) => {
                let have = assignment.partitions.len() as i32;
                if count < have {
                    return Err(invalid(format!(
                        "partitions cannot shrink from {have} to {count}"
                    )));
                }
                let mut merged = assignment.config.clone();
                merged.extend(config);
                assignment.config = merged;
                if count > have {
                    assignment.partitions.extend(spread(have, count - have)?);
                }
                match registry.set_topic_assignment(name, &assignment, version).await {
                    Ok(_) => (have..count).collect(),
                    Err(cluster::RegistryError::Conflict { .. }) => return Err(ErrorCode::Unknown),
                    Err(e) => return Err(internal(e)),
                }
            }
        };
        if !added.is_empty() {
            let (assignment, _) = registry
                .topic_assignment(name)
                .await
                .map_err(internal)?
                .ok_or(ErrorCode::Unknown)?;
            let controller_epoch = registry.controller_epoch().await.map_err(internal)?;
            for p in added {
                let Some(partition_replicas) = assignment.replicas(p) else { continue };
                let state = PartitionState::initial(partition_replicas, &live, controller_epoch);
                match registry.create_partition_state(name, p, &state).await {
                    Ok(_) | Err(cluster::RegistryError::Conflict { .. }) => {}
                    Err(e) => return Err(internal(e)),
                }
            }
            tracing::info!(topic = %name, partitions = count, replication_factor = factor, "created topic in the cluster");
        }
        replicas.wait_for_topic(name, Duration::from_secs(5)).await;
        Ok(())
    }

    /// This broker's replicas of a topic of its cluster, with the topic's log settings.
    pub(crate) async fn host(
        &self,
        name: &str,
        assignment: &TopicAssignment,
        hosted: &BTreeSet<u32>,
    ) -> Result<(), ErrorCode> {
        let configs: Vec<(String, String)> =
            assignment.config.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let (_, log_keys) = split_cluster_keys(&configs);
        let count = assignment.partitions.len() as i32;
        let overrides = TopicOverrides::parse(count, &log_keys, self.config.num_partitions)
            .map_err(|e| {
                tracing::error!(topic = %name, error = %e, "the topic's settings are invalid");
                ErrorCode::InvalidConfig
            })?;
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

    /// Lets the leadership of `topic`'s `partition` take in the ISR its state records now.
    pub(crate) fn adopt_isr(
        &self,
        topic: &str,
        partition: i32,
        isr: &[i32],
        is_live: impl Fn(i32) -> bool,
    ) {
        let Ok(partition) = self.local_partition(topic, partition) else { return };
        if let Some(leader) = self.leader_of(&partition) {
            leader.adopt_isr(isr, is_live);
        }
    }

    /// Lets the leadership of `topic`'s `partition` take in a new replica list.
    pub(crate) fn set_replicas(&self, topic: &str, partition: i32, replicas: &[i32]) {
        let Ok(partition) = self.local_partition(topic, partition) else { return };
        if let Some(leader) = self.leader_of(&partition) {
            leader.set_replicas(replicas);
        }
    }

    /// Removes this broker's replicas `indexes` of `topic` (every one, and the topic's
    /// settings, when `whole_topic`): leaderships end, files go. Followers must be stopped.
    pub(crate) async fn remove_replicas(
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
            Ok(Ok(_)) => Ok(()),
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

    /// The epoch this broker leads `topic`'s `partition` in, if it leads it.
    pub(crate) fn leading_epoch(&self, topic: &str, partition: i32) -> Option<i32> {
        let partition = self.local_partition(topic, partition).ok()?;
        self.leader_of(&partition).map(|l| l.epoch())
    }

    /// A partition a produce to `partition` −1 goes to: one this broker leads.
    fn any_led_partition(&self, topic: &Topic) -> Option<Arc<Partition>> {
        let led: Vec<&Arc<Partition>> = match self.replicas.get() {
            None => topic.partitions.values().collect(),
            Some(_) => topic.partitions.values().filter(|p| self.leader_of(p).is_some()).collect(),
        };
        (!led.is_empty()).then(|| Arc::clone(led[rand::random_range(0..led.len())]))
    }

    /// `partition` of `topic`, if this broker leads it (a broker alone leads all it has).
    fn led_partition(&self, topic: &Topic, partition: i32) -> Result<Arc<Partition>, ErrorCode> {
        let found = partition_of(topic, partition)?;
        if self.replicas.get().is_some() && self.leader_of(found).is_none() {
            return Err(ErrorCode::NotLeader);
        }
        Ok(Arc::clone(found))
    }

    /// A partition consumers may read: one this broker leads.
    pub(crate) fn partition(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Arc<Partition>, ErrorCode> {
        protocol::validate_topic_name(topic).map_err(|_| ErrorCode::InvalidTopicName)?;
        let topic = self.logs.topic(topic).ok_or(ErrorCode::UnknownTopic)?;
        self.led_partition(&topic, partition)
    }

    /// A partition this broker has a replica of, led here or not.
    fn local_partition(&self, topic: &str, partition: i32) -> Result<Arc<Partition>, ErrorCode> {
        protocol::validate_topic_name(topic).map_err(|_| ErrorCode::InvalidTopicName)?;
        let topic = self.logs.topic(topic).ok_or(ErrorCode::UnknownTopic)?;
        partition_of(&topic, partition).cloned()
    }
}

/// Until partitions are replicated, a broker leads every partition it has, in epoch 0: each
/// log without an epoch starts it (in its checkpoint) before it takes a write. Blocking.
fn lead(partitions: &[Arc<Partition>]) -> Result<(), LogError> {
    partitions
        .iter()
        .filter(|p| p.leader_epoch().is_none())
        .try_for_each(|p| p.start_leader_epoch(0))
}

fn lead_created(created: Created) -> Result<Created, CreateError> {
    lead(&created.1)?;
    Ok(created)
}

/// `partition` of `topic` on this broker: [`ErrorCode::WrongPartition`] for one the topic does
/// not have, [`ErrorCode::NotLeader`] for one that is on other brokers only.
fn partition_of(topic: &Topic, partition: i32) -> Result<&Arc<Partition>, ErrorCode> {
    let index = u32::try_from(partition).map_err(|_| ErrorCode::WrongPartition)?;
    if index >= topic.overrides.partitions {
        return Err(ErrorCode::WrongPartition);
    }
    topic.partitions.get(&index).ok_or(ErrorCode::NotLeader)
}

/// Splits a topic's settings into the cluster's (replication) and its logs'.
fn split_cluster_keys(
    configs: &[(String, String)],
) -> (BTreeMap<String, String>, Vec<(String, String)>) {
    let (cluster, log): (Vec<_>, Vec<_>) =
        configs.iter().cloned().partition(|(k, _)| CLUSTER_KEYS.contains(&k.as_str()));
    (cluster.into_iter().collect(), log)
}

fn unknown_topic(name: &str) -> TopicMetadata {
    TopicMetadata { name: name.to_owned(), error: ErrorCode::UnknownTopic, partitions: Vec::new() }
}

fn internal(error: cluster::RegistryError) -> ErrorCode {
    tracing::error!(%error, "the registry failed");
    ErrorCode::Unknown
}

/// Flushes one partition when `flush_messages`, `flush_ms` or a waiting producer says so.
async fn flusher(partition: Arc<Partition>, metrics: Arc<Metrics>, stop: CancellationToken) {
    loop {
        let deadline = partition.flush_deadline();
        let sleep = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = partition.removed().cancelled() => return,
            _ = partition.flush_wanted() => {}
            _ = sleep => {}
        }
        if !partition.flush_due(std::time::Instant::now()) {
            continue;
        }
        let p = Arc::clone(&partition);
        let started = std::time::Instant::now();
        let flushed = tokio::task::spawn_blocking(move || p.flush()).await;
        metrics.flushed(started.elapsed());
        let failure = match flushed {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        };
        tracing::error!(partition = ?partition, error = %failure, "flush failed; retrying");
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// Deletes expired segments of every partition every `interval`.
async fn retention(logs: Arc<LogManager>, interval: Duration, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let logs = Arc::clone(&logs);
        let swept = tokio::task::spawn_blocking(move || {
            let now = SystemTime::now();
            for partition in logs.partitions() {
                if let Err(e) = partition.enforce_retention(now) {
                    tracing::error!(partition = ?partition, error = %e, "retention failed");
                }
            }
        })
        .await;
        if let Err(e) = swept {
            tracing::error!(error = %e, "retention task panicked");
        }
    }
}

/// Appended sets' results and what their acknowledgement still waits for.
pub(crate) struct AppendedRun {
    results: Vec<Result<(i32, i64), ErrorCode>>,
    wait: Option<AckWait>,
    /// The record number of the first record appended, if any was.
    first_record: Option<u64>,
}

/// What an acknowledgement waits for after the append.
pub(crate) enum AckWait {
    /// `acks` 2: the partition flushed up to this end.
    Flushed(Arc<Partition>, u64),
    /// `acks` 3: every in-sync replica has the log up to this end, within the ack timeout.
    Replicated(Arc<Leader>, u64, std::time::Duration),
}

impl AppendedRun {
    fn now(results: Vec<Result<(i32, i64), ErrorCode>>) -> AppendedRun {
        AppendedRun { results, wait: None, first_record: None }
    }

    /// The record number of the first record appended, if any was.
    pub(crate) fn first_record(&self) -> Option<u64> {
        self.first_record
    }

    /// Whether the answers are ready without waiting.
    pub(crate) fn is_ready(&self) -> bool {
        self.wait.is_none()
    }

    /// The answers, once what `acks` asked for happened; if it cannot, every set appended
    /// gets that error.
    pub(crate) async fn acknowledged(self) -> Vec<Result<(i32, i64), ErrorCode>> {
        let waited = match self.wait {
            None => Ok(()),
            Some(AckWait::Flushed(partition, end)) => {
                partition.wait_flushed(end).await;
                Ok(())
            }
            Some(AckWait::Replicated(leader, end, timeout)) => {
                leader.wait_replicated(end, timeout).await
            }
        };
        match waited {
            Ok(()) => self.results,
            Err(code) => self.results.into_iter().map(|r| r.and(Err(code))).collect(),
        }
    }
}
