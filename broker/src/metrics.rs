//! What the broker has done and holds, for `/metrics` (`--metrics HOST:PORT`) and for tests:
//! bytes and messages in and bytes out per topic, requests by type and by error, latency
//! histograms of produce, fetch and long-poll waits, connections, parked fetches, flush
//! latency, and — read at scrape time from the logs — each partition's start, end, visible
//! end and size.
//!
//! Messages out are not counted: fetch data goes file → socket by `sendfile` and is never
//! read by the broker (Kafka does not count them either; consumers do, and the audit).
//!
//! The hot path pays one atomic add per counter: per-topic counters are looked up by `&str`
//! in a map of handles (no allocation), request counters are fixed handles per request type.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use protocol::ErrorCode;
use service::metrics::{Registry, latency_buckets};

use crate::log::LogManager;

/// A request type, as the `request` label names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum RequestKind {
    produce,
    fetch,
    multifetch,
    multiproduce,
    offsets,
    metadata,
    create_topic,
    multifetch_wait,
    offset_for_leader_epoch,
    replica_fetch,
    record_number,
    init_producer_id,
    idempotent_produce,
    delete_records,
    write_txn_marker,
    read_committed,
    copy_produce,
}

impl RequestKind {
    const ALL: [RequestKind; 17] = [
        RequestKind::produce,
        RequestKind::fetch,
        RequestKind::multifetch,
        RequestKind::multiproduce,
        RequestKind::offsets,
        RequestKind::metadata,
        RequestKind::create_topic,
        RequestKind::multifetch_wait,
        RequestKind::offset_for_leader_epoch,
        RequestKind::replica_fetch,
        RequestKind::record_number,
        RequestKind::init_producer_id,
        RequestKind::idempotent_produce,
        RequestKind::delete_records,
        RequestKind::write_txn_marker,
        RequestKind::read_committed,
        RequestKind::copy_produce,
    ];
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    request: RequestKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ErrorLabels {
    request: RequestKind,
    error: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TopicLabels {
    topic: String,
}

/// Which latency a histogram measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Latency {
    /// A produce, from its decoding to its answer (acks 2: the flush included).
    produce,
    /// A fetch or multifetch answered at once, from its decoding to its last byte sent.
    fetch,
    /// How long a long-poll fetch waited parked for data.
    long_poll_wait,
}

/// What a client timed out on (`client_timeout_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Stalled {
    /// It began a request and did not finish it.
    request,
    /// Its socket took no bytes of a response.
    response,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StalledLabels {
    stalled: Stalled,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LatencyLabels {
    operation: Latency,
}

/// The counters of one topic.
#[derive(Debug, Clone, Default)]
struct TopicCounters {
    messages_in: Counter,
    bytes_in: Counter,
    bytes_out: Counter,
}

fn latency_histogram() -> Histogram {
    Histogram::new(latency_buckets())
}

pub struct Metrics {
    registry: Arc<Registry>,
    pub connections_accepted: Counter,
    /// Connections closed at once because `max_connections` were open.
    pub connections_refused: Counter,
    pub connections_open: Gauge,
    clients_timed_out: Family<StalledLabels, Counter>,
    /// Requests that waited for room in `request_memory_bytes` before more was read.
    pub request_memory_waits: Counter,
    /// Bytes of `request_memory_bytes` held by requests being read now.
    pub request_memory_in_use: Gauge,
    requests: Family<RequestLabels, Counter>,
    request_handles: [Counter; RequestKind::ALL.len()],
    request_errors: Family<ErrorLabels, Counter>,
    latency: Family<LatencyLabels, Histogram, fn() -> Histogram>,
    latency_handles: [Histogram; 3],
    messages_in: Family<TopicLabels, Counter>,
    bytes_in: Family<TopicLabels, Counter>,
    bytes_out: Family<TopicLabels, Counter>,
    topics: RwLock<HashMap<String, TopicCounters>>,
    /// Writes to a log: fewer than produce requests when pipelined produces to one partition
    /// are appended together.
    pub appends: Counter,
    /// Long-poll fetches that waited for data.
    pub fetches_parked: Counter,
    /// Long-poll fetches answered at once because `max_parked_fetches` were waiting.
    pub fetches_not_parked: Counter,
    /// Long-poll fetches waiting now.
    pub parked_now: Gauge,
    /// Message bytes sent to consumers, all of them by `sendfile(2)`.
    pub sendfile_bytes: Counter,
    pub sendfile_calls: Counter,
    /// Frames that could not be trusted (bad size, undecodable): answered with an error, then
    /// the connection closed.
    pub rejected_frames: Counter,
    /// Fetch bytes read from segment files and written through TLS (no `sendfile`).
    pub tls_fetch_bytes: Counter,
    /// Requests denied by the ACL file.
    pub authorization_denied: Counter,
    /// Batches of idempotent producers sent again and acknowledged where they were appended,
    /// not appended twice (either protocol).
    pub duplicate_batches: Counter,
    /// TLS handshakes that failed: a plaintext client, a certificate refused, a timeout.
    pub tls_handshake_failures: Counter,
    /// Followers that left the ISR of a partition this broker leads, and that rejoined it.
    pub isr_shrinks: Counter,
    pub isr_expands: Counter,
    /// Partitions this broker leads with fewer in-sync replicas than replicas.
    pub under_replicated: Gauge,
    /// Bytes of sealed segments the scrubber read, damaged ranges it found, and of those the
    /// ones repaired from a replica and the ones left damaged.
    pub scrub_bytes: Counter,
    pub scrub_damage_found: Counter,
    pub scrub_repaired: Counter,
    pub scrub_unrepaired: Counter,
    /// Remote segments the store's scrubber found damaged, and of those the ones uploaded
    /// again (from the leader's disk or a replica's) and the ones no replica had.
    pub remote_scrub_damaged: Counter,
    pub remote_scrub_repaired: Counter,
    pub remote_scrub_unrepaired: Counter,
    /// Bytes the cleaner of compacted topics read, segments it wrote again and records it
    /// removed.
    pub cleaner_bytes: Counter,
    pub cleaner_segments: Counter,
    pub cleaner_records_removed: Counter,
    flush_latency: Histogram,
    /// The controller's offline-partition count, while this broker is the controller.
    controller: ControllerSlot,
}

type ControllerSlot = Arc<Mutex<Option<Arc<AtomicUsize>>>>;

impl Metrics {
    /// The broker's metrics, with the partitions of `logs` and the replica counts of the
    /// partitions it leads (`led`) read at every scrape.
    pub(crate) fn new(logs: Arc<LogManager>, led: LedReplicas) -> Metrics {
        let mut registry = Registry::with_prefix("tributary_broker");
        let requests = Family::<RequestLabels, Counter>::default();
        let request_handles = RequestKind::ALL
            .map(|request| requests.get_or_create(&RequestLabels { request }).clone());
        let latency: Family<LatencyLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        let latency_handles = [Latency::produce, Latency::fetch, Latency::long_poll_wait]
            .map(|operation| latency.get_or_create(&LatencyLabels { operation }).clone());
        let metrics = Metrics {
            registry: Arc::new(Registry::default()),
            connections_accepted: Counter::default(),
            connections_refused: Counter::default(),
            connections_open: Gauge::default(),
            clients_timed_out: Family::default(),
            request_memory_waits: Counter::default(),
            request_memory_in_use: Gauge::default(),
            requests,
            request_handles,
            request_errors: Family::default(),
            latency,
            latency_handles,
            messages_in: Family::default(),
            bytes_in: Family::default(),
            bytes_out: Family::default(),
            topics: RwLock::new(HashMap::new()),
            appends: Counter::default(),
            fetches_parked: Counter::default(),
            fetches_not_parked: Counter::default(),
            parked_now: Gauge::default(),
            sendfile_bytes: Counter::default(),
            sendfile_calls: Counter::default(),
            rejected_frames: Counter::default(),
            authorization_denied: Counter::default(),
            duplicate_batches: Counter::default(),
            tls_fetch_bytes: Counter::default(),
            tls_handshake_failures: Counter::default(),
            isr_shrinks: Counter::default(),
            isr_expands: Counter::default(),
            under_replicated: Gauge::default(),
            scrub_bytes: Counter::default(),
            scrub_damage_found: Counter::default(),
            scrub_repaired: Counter::default(),
            scrub_unrepaired: Counter::default(),
            remote_scrub_damaged: Counter::default(),
            remote_scrub_repaired: Counter::default(),
            remote_scrub_unrepaired: Counter::default(),
            cleaner_bytes: Counter::default(),
            cleaner_segments: Counter::default(),
            cleaner_records_removed: Counter::default(),
            flush_latency: latency_histogram(),
            controller: ControllerSlot::default(),
        };
        for stalled in [Stalled::request, Stalled::response] {
            let _ = metrics.clients_timed_out.get_or_create(&StalledLabels { stalled });
        }
        metrics.register_connections(&mut registry);
        metrics.register_data_path(&mut registry);
        registry.register_collector(Box::new(PartitionCollector {
            logs,
            led,
            controller: Arc::clone(&metrics.controller),
        }));
        Metrics { registry: Arc::new(registry), ..metrics }
    }

    /// Connections, their limits, security, the scrubber and the cleaner.
    fn register_connections(&self, registry: &mut Registry) {
        let m = self;
        registry.register(
            "connections_accepted",
            "Connections accepted",
            m.connections_accepted.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed at once because max_connections were open",
            m.connections_refused.clone(),
        );
        registry.register("connections_open", "Connections open now", m.connections_open.clone());
        registry.register(
            "request_memory_waits",
            "Requests that waited for room in request_memory_bytes before more of them was read",
            m.request_memory_waits.clone(),
        );
        registry.register(
            "request_memory_in_use_bytes",
            "Bytes of request_memory_bytes held by requests being read",
            m.request_memory_in_use.clone(),
        );
        registry.register(
            "clients_timed_out",
            "Connections closed after client_timeout_ms: a request left half sent, a response unread",
            m.clients_timed_out.clone(),
        );
        registry.register(
            "authorization_denied",
            "Requests answered with error 14: the ACL file does not allow them",
            m.authorization_denied.clone(),
        );
        registry.register(
            "duplicate_batches",
            "Batches of idempotent producers sent again and acknowledged where they were \
             appended, not appended twice",
            m.duplicate_batches.clone(),
        );
        registry.register(
            "tls_fetch_bytes",
            "Fetch bytes read from segment files and sent through TLS (sendfile_bytes: plaintext)",
            m.tls_fetch_bytes.clone(),
        );
        registry.register(
            "tls_handshake_failures",
            "TLS handshakes that failed (a plaintext client, a refused certificate, a timeout)",
            m.tls_handshake_failures.clone(),
        );
        registry.register(
            "scrub_bytes",
            "Bytes of sealed segments the scrubber read and checked",
            m.scrub_bytes.clone(),
        );
        registry.register(
            "scrub_damage_found",
            "Damaged ranges (a message failing its CRC) the scrubber found in sealed segments",
            m.scrub_damage_found.clone(),
        );
        registry.register(
            "scrub_repaired",
            "Damaged ranges written over with a replica's copy",
            m.scrub_repaired.clone(),
        );
        registry.register(
            "scrub_unrepaired",
            "Damaged ranges no replica had whole: left as found, refused by consumers' CRC checks",
            m.scrub_unrepaired.clone(),
        );
        registry.register(
            "remote_scrub_damaged",
            "Remote segments whose data in the object store no longer matches their manifest entry",
            m.remote_scrub_damaged.clone(),
        );
        registry.register(
            "remote_scrub_repaired",
            "Damaged remote segments uploaded again from the leader's disk or another replica's",
            m.remote_scrub_repaired.clone(),
        );
        registry.register(
            "remote_scrub_unrepaired",
            "Damaged remote segments no replica had whole: left, refused by consumers' CRC checks",
            m.remote_scrub_unrepaired.clone(),
        );
        registry.register(
            "cleaner_bytes",
            "Bytes of compacted topics' sealed segments the cleaner read",
            m.cleaner_bytes.clone(),
        );
        registry.register(
            "cleaner_segments",
            "Segments of compacted topics the cleaner wrote again",
            m.cleaner_segments.clone(),
        );
        registry.register(
            "cleaner_records_removed",
            "Records the cleaner removed: superseded by a later one of their key, or expired tombstones",
            m.cleaner_records_removed.clone(),
        );
    }

    /// Requests, their latencies and what they moved.
    fn register_data_path(&self, registry: &mut Registry) {
        let m = self;
        registry.register("requests", "Requests by type", m.requests.clone());
        registry.register(
            "request_errors",
            "Requests answered with an error (or a closed connection), by type and error",
            m.request_errors.clone(),
        );
        registry.register(
            "request_latency_seconds",
            "Produce (to its answer), fetch (to its last byte) and long-poll wait latencies",
            m.latency.clone(),
        );
        registry.register("messages_in", "Messages appended, by topic", m.messages_in.clone());
        registry.register("bytes_in", "Message bytes appended, by topic", m.bytes_in.clone());
        registry.register(
            "bytes_out",
            "Message bytes sent to consumers, by topic",
            m.bytes_out.clone(),
        );
        registry.register("appends", "Writes to a log (a pipelined run is one)", m.appends.clone());
        registry.register(
            "fetches_parked",
            "Long-poll fetches that waited for data",
            m.fetches_parked.clone(),
        );
        registry.register(
            "fetches_not_parked",
            "Long-poll fetches answered at once because max_parked_fetches were waiting",
            m.fetches_not_parked.clone(),
        );
        registry.register("parked_fetches", "Long-poll fetches waiting now", m.parked_now.clone());
        registry.register("sendfile_bytes", "Bytes sent by sendfile(2)", m.sendfile_bytes.clone());
        registry.register("sendfile_calls", "sendfile(2) calls", m.sendfile_calls.clone());
        registry.register(
            "rejected_frames",
            "Frames with a bad size or body: answered with an error, the connection closed",
            m.rejected_frames.clone(),
        );
        registry.register(
            "isr_shrinks",
            "Followers that left the in-sync replicas of a partition this broker leads",
            m.isr_shrinks.clone(),
        );
        registry.register(
            "isr_expands",
            "Followers that rejoined the in-sync replicas of a partition this broker leads",
            m.isr_expands.clone(),
        );
        registry.register(
            "under_replicated_partitions",
            "Partitions this broker leads with fewer in-sync replicas than replicas",
            m.under_replicated.clone(),
        );
        registry.register(
            "flush_latency_seconds",
            "How long a partition's flush (its fsyncs) took",
            m.flush_latency.clone(),
        );
    }

    /// While this broker is the controller: the count of offline partitions it keeps.
    pub(crate) fn set_controller(&self, offline: Option<Arc<AtomicUsize>>) {
        *self.controller.lock().unwrap_or_else(|p| p.into_inner()) = offline;
    }

    /// The registry `/metrics` serves.
    pub fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }

    pub(crate) fn request(&self, kind: RequestKind, n: u64) {
        self.request_handles[kind as usize].inc_by(n);
    }

    /// Requests of `kind` so far.
    pub fn requests(&self, kind: RequestKind) -> u64 {
        self.request_handles[kind as usize].get()
    }

    /// Produce requests (single and multi) so far.
    pub fn produce_requests(&self) -> u64 {
        self.requests(RequestKind::produce) + self.requests(RequestKind::multiproduce)
    }

    /// Fetch requests of every kind (single, multi, long poll) so far.
    pub fn fetch_requests(&self) -> u64 {
        [RequestKind::fetch, RequestKind::multifetch, RequestKind::multifetch_wait]
            .into_iter()
            .map(|kind| self.requests(kind))
            .sum()
    }

    /// A connection closed after `client_timeout_ms` without the client's progress.
    pub(crate) fn client_timed_out(&self, stalled: Stalled) {
        self.clients_timed_out.get_or_create(&StalledLabels { stalled }).inc();
    }

    pub(crate) fn request_error(&self, kind: RequestKind, error: ErrorCode) {
        self.request_errors
            .get_or_create(&ErrorLabels { request: kind, error: error_name(error) })
            .inc();
    }

    pub(crate) fn observe(&self, latency: Latency, elapsed: Duration) {
        self.latency_handles[latency as usize].observe(elapsed.as_secs_f64());
    }

    pub(crate) fn flushed(&self, elapsed: Duration) {
        self.flush_latency.observe(elapsed.as_secs_f64());
    }

    pub(crate) fn appended(&self, topic: &str, messages: u64, bytes: u64) {
        self.appends.inc();
        self.with_topic(topic, |c| {
            c.messages_in.inc_by(messages);
            c.bytes_in.inc_by(bytes);
        });
    }

    pub(crate) fn sent(&self, topic: &str, bytes: u64) {
        if bytes > 0 {
            self.with_topic(topic, |c| {
                c.bytes_out.inc_by(bytes);
            });
        }
    }

    /// Messages appended to `topic` so far.
    pub fn messages_in(&self, topic: &str) -> u64 {
        self.topic_value(topic, |c| c.messages_in.get())
    }

    /// Message bytes sent to consumers of `topic` so far.
    pub fn bytes_out(&self, topic: &str) -> u64 {
        self.topic_value(topic, |c| c.bytes_out.get())
    }

    fn topic_value(&self, topic: &str, value: impl Fn(&TopicCounters) -> u64) -> u64 {
        self.topics.read().unwrap_or_else(|p| p.into_inner()).get(topic).map_or(0, value)
    }

    fn with_topic(&self, topic: &str, update: impl Fn(&TopicCounters)) {
        if let Some(counters) = self.topics.read().unwrap_or_else(|p| p.into_inner()).get(topic) {
            return update(counters);
        }
        let mut topics = self.topics.write().unwrap_or_else(|p| p.into_inner());
        let counters = topics.entry(topic.to_owned()).or_insert_with(|| {
            let labels = TopicLabels { topic: topic.to_owned() };
            TopicCounters {
                messages_in: self.messages_in.get_or_create(&labels).clone(),
                bytes_in: self.bytes_in.get_or_create(&labels).clone(),
                bytes_out: self.bytes_out.get_or_create(&labels).clone(),
            }
        });
        update(counters);
    }
}

/// The error label: the code's name in snake case.
fn error_name(error: ErrorCode) -> &'static str {
    match error {
        ErrorCode::Unknown => "unknown",
        ErrorCode::None => "none",
        ErrorCode::OffsetOutOfRange => "offset_out_of_range",
        ErrorCode::InvalidMessage => "invalid_message",
        ErrorCode::WrongPartition => "wrong_partition",
        ErrorCode::InvalidFetchSize => "invalid_fetch_size",
        ErrorCode::MessageTooLarge => "message_too_large",
        ErrorCode::InvalidRequest => "invalid_request",
        ErrorCode::UnknownTopic => "unknown_topic",
        ErrorCode::InvalidTopicName => "invalid_topic_name",
        ErrorCode::InvalidConfig => "invalid_config",
        ErrorCode::NotLeader => "not_leader",
        ErrorCode::NotEnoughReplicas => "not_enough_replicas",
        ErrorCode::FencedLeaderEpoch => "fenced_leader_epoch",
        ErrorCode::RequestTimedOut => "request_timed_out",
        ErrorCode::AuthorizationFailed => "authorization_failed",
        ErrorCode::StorageFull => "storage_full",
        ErrorCode::OutOfOrderSequence => "out_of_order_sequence",
        ErrorCode::InvalidProducerEpoch => "invalid_producer_epoch",
        ErrorCode::InvalidRecord => "invalid_record",
        ErrorCode::DuplicateSequence => "duplicate_sequence",
    }
}

/// One number of a partition's log.
type PartitionValue = fn(&crate::log::Partition) -> u64;

/// Each partition's offsets and size, read from the logs at scrape time; the in-sync and
/// assigned replicas of each partition this broker leads; and, from the controller, the
/// cluster's offline partitions.
struct PartitionCollector {
    logs: Arc<LogManager>,
    led: LedReplicas,
    controller: ControllerSlot,
}

/// `((topic, partition), (in-sync replicas, replicas))` of each partition this broker leads
/// with followers, sorted; read at every scrape.
pub(crate) type LedReplicas = Box<dyn Fn() -> Vec<((String, u32), (usize, usize))> + Send + Sync>;

impl std::fmt::Debug for PartitionCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PartitionCollector")
    }
}

impl Collector for PartitionCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let partitions = self.logs.partitions();
        let families: [(&str, &str, PartitionValue); 6] = [
            ("log_start_offset", "Offset of the first byte a partition still keeps.", |p| {
                p.start_offset()
            }),
            ("log_end_offset", "Offset the next append to a partition gets.", |p| p.end()),
            ("log_visible_offset", "End of a partition's data that fetches see.", |p| {
                p.visible_end()
            }),
            ("log_size_bytes", "Bytes a partition keeps on disk.", |p| p.end() - p.start_offset()),
            (
                "log_remote_end_offset",
                "Offset below which the object store holds a tiered partition's log (0: none of it).",
                |p| p.remote_end(),
            ),
            (
                "log_remote_upload_lag_bytes",
                "Bytes of a tiered partition's sealed segments that the object store does not hold yet.",
                |p| p.upload_lag(),
            ),
        ];
        for (name, help, value) in families {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for partition in &partitions {
                let labels = [
                    ("topic", partition.topic().to_owned()),
                    ("partition", partition.index().to_string()),
                ];
                let gauge = ConstGauge::new(i64::try_from(value(partition)).unwrap_or(i64::MAX));
                gauge.encode(family.encode_family(&labels)?)?;
            }
        }
        let led = (self.led)();
        type Count = fn(&(usize, usize)) -> usize;
        let families: [(&str, &str, Count); 2] = [
            (
                "partition_in_sync_replicas",
                "In-sync replicas of a partition this broker leads (itself included)",
                |(isr, _)| *isr,
            ),
            (
                "partition_replicas",
                "Assigned replicas of a partition this broker leads",
                |(_, r)| *r,
            ),
        ];
        for (name, help, value) in families {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for ((topic, partition), counts) in &led {
                let labels = [("topic", topic.clone()), ("partition", partition.to_string())];
                let gauge = ConstGauge::new(i64::try_from(value(counts)).unwrap_or(i64::MAX));
                gauge.encode(family.encode_family(&labels)?)?;
            }
        }
        let offline = self.controller.lock().unwrap_or_else(|p| p.into_inner()).clone();
        ConstGauge::new(i64::from(offline.is_some())).encode(encoder.encode_descriptor(
            "active_controller",
            "1 while this broker is its cluster's controller",
            None,
            MetricType::Gauge,
        )?)?;
        let count = offline.map_or(0, |o| o.load(Ordering::Relaxed));
        ConstGauge::new(i64::try_from(count).unwrap_or(i64::MAX)).encode(
            encoder.encode_descriptor(
                "offline_partitions",
                "Partitions of the cluster without a live leader (counted by the controller; 0 elsewhere)",
                None,
                MetricType::Gauge,
            )?,
        )?;
        Ok(())
    }
}
