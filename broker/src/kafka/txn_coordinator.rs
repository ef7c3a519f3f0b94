//! The transaction coordinator's state (`docs/design.md`, "Transactions on the listener"):
//! one [`TxnRecord`] per transactional id in the cluster registry beside the groups' offsets
//! (in this process's memory for a broker without one), each written with the version it was
//! read at. A transactional id is coordinated by the broker its hash picks, as a group is;
//! that broker takes the id's requests one at a time.
//!
//! Ending a transaction is two writes around the markers: the decision (`PrepareCommit` or
//! `PrepareAbort`), then a marker on every partition the transaction wrote to — appended by
//! each partition's leader and acknowledged by its in-sync replicas (`WRITE_TXN_MARKER`) —
//! and the offsets it committed made visible or dropped, then `CompleteCommit` or
//! `CompleteAbort`. A coordinator that dies between the two leaves the decision in the
//! registry; whichever broker coordinates the id next finds it and finishes the markers (the
//! [`sweep_until`] task, every [`SWEEP_MS`]), which also aborts a transaction left open past
//! its timeout, fencing its producer with a new epoch, and forgets ids unused for
//! [`ID_EXPIRATION_MS`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cluster::{KafkaCommit, Registry, RegistryError, TxnPhase, TxnRecord, Version};
use protocol::kafka::response::code;
use protocol::{ErrorCode, Request, WriteTxnMarkerRequest};
use tokio_util::sync::CancellationToken;

use super::coordinator::Coordinator;
use crate::node::Node;

/// How often each broker looks for transactions of its ids to finish or time out.
pub const SWEEP_MS: u64 = 1_000;
/// The longest `transaction.timeout.ms` a producer may ask for (Kafka's
/// `transaction.max.timeout.ms` default).
pub const TIMEOUT_MAX_MS: i32 = 900_000;
/// How long a transactional id is kept unused (Kafka's `transactional.id.expiration.ms`
/// default): its record is then deleted, and a producer that comes back with it gets a new
/// producer id.
pub const ID_EXPIRATION_MS: i64 = 7 * 24 * 3_600_000;
/// How long the markers of one ending are tried before it is left to the sweep.
const MARKERS_DEADLINE: Duration = Duration::from_secs(30);

/// What ending a transaction touches: the node (markers), the transactions' store, the group
/// coordinator (offsets of a broker without a registry).
#[derive(Clone, Copy)]
pub(super) struct Ctx<'a> {
    pub node: &'a Arc<Node>,
    pub transactions: &'a Transactions,
    pub groups: &'a Coordinator,
}

/// What the transaction coordinator keeps in this process.
pub(crate) struct Transactions {
    /// The store of a broker without a cluster registry.
    local: Registry,
    /// One lock per transactional id: its requests are taken one at a time.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl std::fmt::Debug for Transactions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transactions").finish_non_exhaustive()
    }
}

impl Default for Transactions {
    fn default() -> Transactions {
        let session = cluster::Embedded::new().session("/").expect("a fresh embedded tree");
        Transactions { local: Registry::new(session), locks: Mutex::new(HashMap::new()) }
    }
}

impl Transactions {
    /// Where transactions are kept: the cluster registry, or this process's.
    pub(super) fn registry(&self, node: &Node) -> Registry {
        node.registry().cloned().unwrap_or_else(|| self.local.clone())
    }

    /// The lock of transactional id `id`.
    pub(super) fn lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        if locks.len() > 10_000 {
            locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        }
        Arc::clone(locks.entry(id.to_owned()).or_default())
    }
}

/// Milliseconds since the epoch.
pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Why a step of the coordinator failed, as a Kafka error code for the client.
pub(super) fn store_failed(id: &str, e: &RegistryError) -> i16 {
    match e {
        // Another broker moved the id on: it coordinates it now, or a retry finds out.
        RegistryError::Conflict { .. } => code::CONCURRENT_TRANSACTIONS,
        e => {
            tracing::warn!(transactional_id = %id, error = %e, "cannot reach the transactions' store");
            code::COORDINATOR_NOT_AVAILABLE
        }
    }
}

/// Finishes the decided transaction of `id` (`record`, at `version`, in a Prepare phase):
/// its markers, its groups' offsets, then the Complete phase. Returns the record written.
/// A marker that cannot be written within [`MARKERS_DEADLINE`] leaves the decision for the
/// sweep to finish.
pub(super) async fn complete(
    ctx: Ctx<'_>,
    id: &str,
    mut record: TxnRecord,
    version: Version,
) -> Result<(TxnRecord, Version), i16> {
    let commit = match record.phase {
        TxnPhase::PrepareCommit => true,
        TxnPhase::PrepareAbort => false,
        _ => return Ok((record, version)),
    };
    let markers = record.partitions.iter().flat_map(|(topic, partitions)| {
        partitions.iter().map(move |&partition| WriteTxnMarkerRequest {
            topic: topic.clone(),
            partition,
            producer_id: record.producer_id,
            producer_epoch: record.epoch,
            commit,
            coordinator_epoch: 0,
        })
    });
    let node = ctx.node;
    let written = futures::future::join_all(markers.map(|m| write_marker(node, m))).await;
    if written.iter().any(|w| !w) {
        return Err(code::CONCURRENT_TRANSACTIONS);
    }
    let registry = ctx.transactions.registry(node);
    for group in &record.groups {
        if let Err(e) = settle_offsets(ctx, &registry, group, record.producer_id, commit).await {
            tracing::warn!(transactional_id = %id, %group, error = %e, "cannot settle a transaction's offsets");
            return Err(code::COORDINATOR_NOT_AVAILABLE);
        }
    }
    record.phase = if commit { TxnPhase::CompleteCommit } else { TxnPhase::CompleteAbort };
    record.partitions.clear();
    record.groups.clear();
    match registry.write_transaction(id, &record, Some(version)).await {
        Ok(version) => Ok((record, version)),
        Err(e) => Err(store_failed(id, &e)),
    }
}

/// Makes the offsets producer `producer_id`'s transaction committed for `group` visible
/// (`commit`) or drops them.
async fn settle_offsets(
    ctx: Ctx<'_>,
    registry: &Registry,
    group: &str,
    producer_id: i64,
    commit: bool,
) -> Result<(), RegistryError> {
    if commit {
        let staged = registry.staged_kafka_offsets(group, producer_id).await?;
        let commits = staged.iter().flat_map(|(topic, partitions)| {
            partitions.iter().map(move |(&partition, commit)| {
                commit_offset(ctx, group, topic, partition, commit.clone())
            })
        });
        for committed in futures::future::join_all(commits).await {
            committed?;
        }
    }
    registry.drop_staged_kafka_offsets(group, producer_id).await
}

/// Commits a Kafka group's offset where the group coordinator keeps them: the cluster
/// registry, or this process's memory.
pub(super) async fn commit_offset(
    ctx: Ctx<'_>,
    group: &str,
    topic: &str,
    partition: i32,
    commit: KafkaCommit,
) -> Result<(), RegistryError> {
    match ctx.node.registry() {
        Some(registry) => {
            registry
                .commit_kafka_offset(group, topic, partition, commit.record, &commit.metadata)
                .await
        }
        None => {
            let mut offsets = ctx.groups.offsets.lock().unwrap_or_else(|p| p.into_inner());
            let topics = offsets.entry(group.to_owned()).or_default();
            topics.entry(topic.to_owned()).or_default().insert(partition, commit);
            Ok(())
        }
    }
}

/// Has the leader of the marker's partition append it, trying again (the partition between
/// leaders, a connection lost) until [`MARKERS_DEADLINE`]. A marker refused for an older
/// epoch is superseded: a later ending of the producer's has written its own.
async fn write_marker(node: &Arc<Node>, marker: WriteTxnMarkerRequest) -> bool {
    let deadline = tokio::time::Instant::now() + MARKERS_DEADLINE;
    let mut backoff = Duration::from_millis(20);
    loop {
        let result = send_marker(node, &marker).await;
        match result {
            Ok(()) | Err(Ok(ErrorCode::InvalidProducerEpoch)) => return true,
            Err(Ok(ErrorCode::UnknownTopic)) => return true, // deleted: nothing to mark
            Err(why) if tokio::time::Instant::now() + backoff >= deadline => {
                tracing::warn!(topic = %marker.topic, partition = marker.partition, error = ?why, "cannot write a transaction marker; left to the sweep");
                return false;
            }
            Err(_) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// Sends one marker to its partition's leader: this broker's own node, or another's over
/// the broker protocol.
async fn send_marker(
    node: &Arc<Node>,
    marker: &WriteTxnMarkerRequest,
) -> Result<(), Result<ErrorCode, String>> {
    let metadata = node.metadata(std::slice::from_ref(&marker.topic));
    let topic = metadata.topics.iter().find(|t| t.name == marker.topic);
    let Some(topic) = topic.filter(|t| t.error != ErrorCode::UnknownTopic) else {
        return Err(Ok(ErrorCode::UnknownTopic));
    };
    let leader = topic.partitions.iter().find(|p| p.partition == marker.partition);
    let Some(leader) = leader.map(|p| p.leader).filter(|&l| l >= 0) else {
        return Err(Ok(ErrorCode::NotLeader));
    };
    if leader == node.config().broker_id {
        return node.write_txn_marker(marker).await.map_err(Ok);
    }
    let Some(broker) = metadata.brokers.iter().find(|b| b.id == leader) else {
        return Err(Ok(ErrorCode::NotLeader));
    };
    let request = Request::WriteTxnMarker(marker.clone());
    let tls = node.replicas().tls().cloned();
    crate::replication::call_broker(&broker.addr(), tls.as_ref(), &request).await.map(drop)
}

/// Aborts the open transaction of `id` (`record` at `version`, Ongoing) in a new epoch, which
/// fences its producer: a timeout, or a producer that initialized again.
pub(super) async fn abort_in_new_epoch(
    ctx: Ctx<'_>,
    id: &str,
    mut record: TxnRecord,
    version: Version,
) -> Result<(TxnRecord, Version), i16> {
    let registry = ctx.transactions.registry(ctx.node);
    record.epoch = record.epoch.saturating_add(1);
    record.phase = TxnPhase::PrepareAbort;
    let version = match registry.write_transaction(id, &record, Some(version)).await {
        Ok(version) => version,
        Err(e) => return Err(store_failed(id, &e)),
    };
    complete(ctx, id, record, version).await
}

/// Every [`SWEEP_MS`] until `stop`: finishes the decided transactions of the ids this broker
/// coordinates, and aborts those open past their timeout.
pub(crate) async fn sweep_until(
    node: Arc<Node>,
    transactions: Arc<Transactions>,
    groups: Arc<Coordinator>,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(SWEEP_MS));
    let ctx = Ctx { node: &node, transactions: &transactions, groups: &groups };
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => sweep(ctx).await,
        }
    }
}

async fn sweep(ctx: Ctx<'_>) {
    let node = ctx.node;
    let registry = ctx.transactions.registry(node);
    let ids = match registry.transactional_ids().await {
        Ok(ids) => ids,
        Err(e) => {
            tracing::debug!(error = %e, "cannot list transactional ids");
            return;
        }
    };
    for id in ids.iter().filter(|id| super::coordinator::coordinates(node, id)) {
        let lock = ctx.transactions.lock(id);
        let Ok(_held) = lock.try_lock() else { continue }; // a request is on it
        let Ok(Some((record, version))) = registry.transaction(id).await else { continue };
        let now = now_ms();
        let expired = record.phase == TxnPhase::Ongoing
            && now > record.started_ms.saturating_add(i64::from(record.timeout_ms));
        let ended = match record.phase {
            TxnPhase::PrepareCommit | TxnPhase::PrepareAbort => {
                complete(ctx, id, record, version).await
            }
            TxnPhase::Ongoing if expired => {
                tracing::info!(transactional_id = %id, "a transaction open past its timeout is aborted");
                abort_in_new_epoch(ctx, id, record, version).await
            }
            _ if now > record.used_ms.saturating_add(ID_EXPIRATION_MS) => {
                tracing::info!(transactional_id = %id, "an unused transactional id is forgotten");
                if let Err(e) = registry.delete_transaction(id, version).await {
                    tracing::debug!(transactional_id = %id, error = %e, "forgotten later");
                }
                continue;
            }
            _ => continue,
        };
        if let Err(error) = ended {
            tracing::debug!(transactional_id = %id, error, "a transaction's ending is tried again later");
        }
    }
}
