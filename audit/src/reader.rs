//! The service's consumers. Each source cluster is followed through its registry (brokers and
//! topics, on watches and every `discovery_ms`), and every partition of a wanted topic is read
//! from its **earliest** offset by a task of its own with the simple consumer:
//!
//! - the analytics cluster's `_audit`, whose records go into the ledger (cumulative, so reading
//!   them again on every start rebuilds exactly the same books: the log is the source of truth);
//! - every topic of a live cluster except those starting with `_`, each event counted by its
//!   `header.time` (read without the schema) as tier `live`, host = the cluster's name;
//! - every such topic of the analytics cluster likewise, as tier `mirror`, host `analytics`:
//!   what the mirror copied there (a count a copier kept itself would be lost or doubled with
//!   a crash between its copy and its count).
//!
//! Recounting a cluster from its earliest offset on every start is exact and needs no
//! state of its own: the count of a window is a pure function of what the cluster holds. (Once
//! retention deleted a window's segments its live count after a restart is lower; by then, with
//! the default 7-day retention, the window is long decided.)
//!
//! The service keeps no offsets and joins no consumer group: it leaves nothing behind in
//! the clusters it reads.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use client::{ConsumerError, FetchedMessages, SimpleConsumer, SimpleConsumerConfig};
use cluster::{Coordinator, Registry, RegistryError};
use events::audit::{AUDIT_TOPIC, AuditRecord, Tier};
use events::envelope::{self, EventHeader};
use schema_registry::{ClientError, RegistryClient};
use service::Backoff;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::state::{PendingPartition, Shared, Stats, lock};

/// First pause after a failure; it doubles up to `retry_backoff_max_ms`.
const BACKOFF_FIRST_MS: u64 = 100;

/// What a source cluster is read for.
#[derive(Clone)]
pub(crate) enum Feed {
    /// The analytics cluster's `_audit` topic.
    Audit { registry: Arc<RegistryClient> },
    /// Every event topic of `cluster`, each event counted at `tier` (`live` for a live
    /// cluster, `mirror` for the analytics cluster).
    Events { tier: Tier, cluster: String },
}

impl Feed {
    fn wants(&self, topic: &str) -> bool {
        match self {
            Feed::Audit { .. } => topic == AUDIT_TOPIC,
            Feed::Events { .. } => !topic.starts_with('_'),
        }
    }

    fn source(&self) -> &str {
        match self {
            Feed::Audit { .. } => "analytics",
            Feed::Events { cluster, .. } => cluster,
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("partition {0} has no live leader")]
    NoLeader(i32),
    #[error(transparent)]
    Consumer(#[from] ConsumerError),
    #[error("schema registry: {0}")]
    Schemas(ClientError),
}

/// Follows one source cluster until `stop`: finds the partitions of wanted topics and starts a
/// reader for each new one on `tasks`. Counts its first complete scan toward the catch-up.
pub(crate) async fn follow_cluster(
    shared: Arc<Shared>,
    feed: Feed,
    coordinator: Arc<dyn Coordinator>,
    tasks: TaskTracker,
    stop: CancellationToken,
) {
    let registry = Registry::new(Arc::clone(&coordinator));
    let mut known: HashSet<(String, i32)> = HashSet::new();
    let mut first_scan = true;
    let mut backoff = Backoff::from_ms(BACKOFF_FIRST_MS, shared.config.retry_backoff_max_ms);
    let discovery = Duration::from_millis(shared.config.discovery_ms);
    while !stop.is_cancelled() {
        let scan = async {
            let (_, brokers_changed) = registry.brokers_and_watch().await?;
            coordinator.ensure("/brokers/topics").await.map_err(RegistryError::from)?;
            let (topics, topics_changed) = coordinator
                .children_and_watch("/brokers/topics")
                .await
                .map_err(RegistryError::from)?;
            let mut found = Vec::new();
            for topic in topics.into_iter().filter(|t| feed.wants(t)) {
                for partition in registry.partitions(&topic).await? {
                    found.push((topic.clone(), partition));
                }
            }
            Ok::<_, RegistryError>((found, brokers_changed, topics_changed))
        };
        let (found, brokers_changed, topics_changed) = match scan.await {
            Ok(scanned) => scanned,
            Err(e) => {
                shared.stats.read_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(source = feed.source(), error = %e, "cannot read the cluster's registry");
                if backoff.wait(&stop).await {
                    continue;
                }
                break;
            }
        };
        backoff.reset();
        for (topic, partition) in found {
            if !known.insert((topic.clone(), partition)) {
                continue;
            }
            tracing::info!(source = feed.source(), %topic, %partition, "reading partition from its earliest offset");
            let reader = PartitionReader {
                pending: first_scan.then(|| PendingPartition::new(&shared)),
                shared: Arc::clone(&shared),
                feed: feed.clone(),
                registry: registry.clone(),
                topic,
                partition,
                consumer: None,
                offset: None,
                end_at_start: None,
            };
            tasks.spawn(reader.run(stop.clone()));
        }
        if std::mem::take(&mut first_scan) {
            shared.catch_up.scan_done();
        }
        tokio::select! {
            _ = brokers_changed => {}
            _ = topics_changed => {}
            _ = tokio::time::sleep(discovery) => {}
            _ = stop.cancelled() => {}
        }
    }
}

/// Reads one partition from its earliest offset, forever.
struct PartitionReader {
    shared: Arc<Shared>,
    feed: Feed,
    registry: Registry,
    topic: String,
    partition: i32,
    consumer: Option<SimpleConsumer>,
    /// Next offset to fetch; `None` until the earliest offset is known.
    offset: Option<i64>,
    /// The partition's end when first asked, for the catch-up.
    end_at_start: Option<i64>,
    pending: Option<PendingPartition>,
}

impl PartitionReader {
    async fn run(mut self, stop: CancellationToken) {
        let mut backoff =
            Backoff::from_ms(BACKOFF_FIRST_MS, self.shared.config.retry_backoff_max_ms);
        while !stop.is_cancelled() {
            // At the end of the log `step` is a long poll (up to `fetch_wait_ms`): an idle
            // reader waits in the broker, not in a timer loop.
            match self.step().await {
                Ok(_) => backoff.reset(),
                Err(e) => {
                    self.shared.stats.read_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        source = self.feed.source(),
                        topic = %self.topic,
                        partition = %self.partition,
                        error = %e,
                        "read failed; retrying"
                    );
                    self.consumer = None;
                    if !backoff.wait(&stop).await {
                        break;
                    }
                }
            }
        }
    }

    async fn connect(&mut self) -> Result<SimpleConsumer, ReadError> {
        if let Some(consumer) = &self.consumer {
            return Ok(consumer.clone());
        }
        let (_, info) = self
            .registry
            .leader(&self.topic, self.partition)
            .await?
            .ok_or(ReadError::NoLeader(self.partition))?;
        let config = SimpleConsumerConfig {
            fetch_bytes: self.shared.config.fetch_bytes,
            fetch_bytes_max: self.shared.config.fetch_bytes.max(16 << 20),
            tls: self.shared.tls.clone(),
            ..SimpleConsumerConfig::default()
        };
        let consumer = SimpleConsumer::connect(&info.addr(), config).await?;
        self.consumer = Some(consumer.clone());
        Ok(consumer)
    }

    /// One fetch; true if it moved the position.
    async fn step(&mut self) -> Result<bool, ReadError> {
        let consumer = self.connect().await?;
        let (topic, partition) = (self.topic.as_str(), self.partition);
        let offset = match self.offset {
            Some(offset) => offset,
            None => *self.offset.insert(consumer.earliest_offset(topic, partition).await?),
        };
        if self.pending.is_some() && self.end_at_start.is_none() {
            self.end_at_start = Some(consumer.latest_offset(topic, partition).await?);
        }
        let wait_ms = u32::try_from(self.shared.config.fetch_wait_ms).unwrap_or(u32::MAX);
        let fetched = match consumer.fetch_wait(topic, partition, offset, wait_ms).await {
            Err(ConsumerError::OffsetOutOfRange { .. }) => {
                // Retention deleted the segment (resume at the earliest kept), or the log was
                // truncated after a crash (resume at its end).
                let earliest = consumer.earliest_offset(topic, partition).await?;
                let resume = if offset < earliest {
                    earliest
                } else {
                    consumer.latest_offset(topic, partition).await?
                };
                tracing::warn!(source = self.feed.source(), %topic, partition = %self.partition, offset, resume, "offset out of range");
                self.offset = Some(resume);
                return Ok(true);
            }
            other => other?,
        };
        let next = match &self.feed {
            Feed::Events { tier, cluster } => count_events(&self.shared, *tier, cluster, &fetched),
            Feed::Audit { registry } => apply_audit(&self.shared, registry, &fetched).await,
        };
        let next = next?;
        self.offset = Some(next);
        if let (Some(end), Some(pending)) = (self.end_at_start, self.pending.as_mut())
            && next >= end
        {
            pending.done();
        }
        Ok(next != offset)
    }
}

/// Counts the events of a fetch in the ledger; returns where to resume. A corrupt message
/// stops the count there (the messages before it are counted) and is an error: it is never
/// skipped.
fn count_events(
    shared: &Shared,
    tier: Tier,
    cluster: &str,
    fetched: &FetchedMessages,
) -> Result<i64, ReadError> {
    let mut next = fetched.base_offset();
    let (mut counted, mut unreadable) = (0, 0);
    let mut failure = None;
    {
        let mut ledger = lock(&shared.ledger);
        ledger.observe_at(service::now_ms());
        let mut messages = fetched.iter();
        for message in messages.by_ref() {
            match message {
                Ok(message) => {
                    match EventHeader::read(&message.payload) {
                        Ok((_, header)) => {
                            ledger.add_present(tier, cluster, fetched.topic(), header.time, 1);
                            counted += 1;
                        }
                        Err(_) => unreadable += 1,
                    }
                    next = message.next_offset;
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if failure.is_none() {
            // Past what holds no event too (control batches: a copier's position records,
            // transaction markers), or the next fetch would return it at once, and again.
            next = messages.next_offset();
        }
    }
    Stats::add(&shared.stats.live_events, cluster, counted);
    Stats::add(&shared.stats.live_unreadable, cluster, unreadable);
    match failure {
        Some(e) if next == fetched.base_offset() => Err(e.into()),
        Some(e) => {
            // Count what came before; the error comes back on the next fetch.
            tracing::warn!(%cluster, topic = fetched.topic(), error = %e, "corrupt message");
            Ok(next)
        }
        None => Ok(next),
    }
}

/// A registry failure worth retrying (the registry is down or overloaded), as opposed to an
/// answer that will not change (an unknown schema id, a record that does not decode).
fn transient(error: &ClientError) -> bool {
    match error {
        ClientError::Http { .. } | ClientError::BadResponse { .. } => true,
        ClientError::Registry { status, .. } => *status >= 500,
        _ => false,
    }
}

/// Takes the `_audit` records of a fetch into the ledger; returns where to resume. A registry
/// outage fails the whole fetch, to be read again: records are cumulative, so applying some of
/// them twice changes nothing.
async fn apply_audit(
    shared: &Shared,
    registry: &RegistryClient,
    fetched: &FetchedMessages,
) -> Result<i64, ReadError> {
    let mut next = fetched.base_offset();
    let mut records = Vec::new();
    let mut failure = None;
    let mut messages = fetched.iter();
    for message in messages.by_ref() {
        let message = match message {
            Ok(message) => message,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        next = message.next_offset;
        let schema_id = match envelope::split(&message.payload) {
            Ok((id, _)) => id,
            Err(_) => {
                shared.stats.reject("not_an_envelope");
                continue;
            }
        };
        let schema = match registry.schema(schema_id).await {
            Ok(schema) => schema,
            Err(e) if transient(&e) => return Err(ReadError::Schemas(e)),
            Err(e) => {
                tracing::warn!(schema_id, error = %e, "an _audit record's schema is unusable");
                shared.stats.reject("unknown_schema");
                continue;
            }
        };
        match AuditRecord::decode(&message.payload, &schema) {
            Ok(record) => records.push(record),
            Err(e) => {
                tracing::warn!(error = %e, "an _audit record does not decode");
                shared.stats.reject("undecodable");
            }
        }
    }
    {
        let mut ledger = lock(&shared.ledger);
        ledger.observe_at(service::now_ms());
        for record in &records {
            match ledger.apply(record) {
                Ok(()) => {
                    shared.stats.records_applied.fetch_add(1, Ordering::Relaxed);
                }
                Err(reason) => {
                    tracing::debug!(?record, %reason, "_audit record rejected");
                    shared.stats.reject(reason.as_str());
                }
            }
        }
    }
    match failure {
        Some(e) if next == fetched.base_offset() => Err(e.into()),
        Some(e) => {
            tracing::warn!(topic = fetched.topic(), error = %e, "corrupt message");
            Ok(next)
        }
        // Past any control batch at the end too.
        None => Ok(messages.next_offset()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// A copier's position record follows every copy in the analytics cluster, so a
    /// partition there always ends in a control batch: a reader that resumed at it would get
    /// it back at once from every long poll, and spin.
    #[test]
    fn a_fetch_ending_in_a_control_batch_resumes_after_it() {
        let shared = Shared::new(Config::default(), 0, None);
        let mut set = Vec::new();
        protocol::encode_message(
            &mut set,
            protocol::Codec::None,
            &testkit::events::raw_event(5, "e"),
        );
        let event_end = set.len();
        let position = protocol::record_batch::copy_position_marker("live-a/t/0", 4_096, 5);
        protocol::encode_batch_message(&mut set, &position);
        let set = bytes::Bytes::from(set);
        let end = 100 + set.len() as i64;
        let fetched = FetchedMessages::new("t", 0, 100, set.clone());
        let next = count_events(&shared, Tier::Mirror, "analytics", &fetched).unwrap();
        assert_eq!(next, end, "past the position record (the event ends at {})", 100 + event_end);
        assert_eq!(lock(&shared.stats.live_events).get("analytics"), Some(&1));
        let only_position =
            FetchedMessages::new("t", 0, 100 + event_end as i64, set.slice(event_end..));
        let next = count_events(&shared, Tier::Mirror, "analytics", &only_position).unwrap();
        assert_eq!(next, end, "a fetch of only a control batch moves on too");
        assert_eq!(lock(&shared.stats.live_events).get("analytics"), Some(&1));
    }
}
