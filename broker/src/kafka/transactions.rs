//! Kafka transactions (KIP-98) on the listener: InitProducerId with a `transactional.id`,
//! AddPartitionsToTxn, AddOffsetsToTxn, EndTxn — answered by the id's coordinator
//! ([`super::txn_coordinator`]) — and TxnOffsetCommit, answered by the group's coordinator,
//! which keeps the offsets aside until the transaction commits.
//!
//! A producer is named by its id and epoch in every request: an older epoch than the id's is
//! a zombie (PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH to clients older than KIP-588's
//! versions), another producer id INVALID_PRODUCER_ID_MAPPING.

use std::collections::BTreeMap;

use bytes::BytesMut;
use cluster::{KafkaCommit, TxnPhase, TxnRecord, Version};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, AddPartitionsToTxnResponse, ApiKey, EndTxnResponse,
    InitProducerIdResponse, ProducerId, TopicName, TxnOffsetCommitResponse,
};
use protocol::kafka::request::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, Header,
    InitProducerIdRequest, Malformed, TxnOffsetCommitRequest, TxnProducer,
};
use protocol::kafka::response::{code, encode, str_bytes};

use super::client::Client;
use super::groups::coordinates;
use super::txn_coordinator::{self, TIMEOUT_MAX_MS, now_ms, store_failed};
use crate::acl::Operation;

/// The answer to a producer that is not the id's current one, in `version` of an API that
/// learned PRODUCER_FENCED at version `fenced_from`.
fn fenced(version: i16, fenced_from: i16) -> i16 {
    if version >= fenced_from { code::PRODUCER_FENCED } else { code::INVALID_PRODUCER_EPOCH }
}

/// The id's record, checked against the producer a request names; the error to answer with
/// otherwise. `fenced_code` is what a stale epoch gets.
async fn current(
    client: &Client,
    producer: &TxnProducer,
    fenced_code: i16,
) -> Result<(TxnRecord, Version), i16> {
    let id = &producer.transactional_id;
    if !coordinates(client, id) {
        return Err(code::NOT_COORDINATOR);
    }
    let registry = client.state.transactions.registry(&client.node);
    let (record, version) = match registry.transaction(id).await {
        Ok(Some(found)) => found,
        Ok(None) => return Err(code::INVALID_PRODUCER_ID_MAPPING),
        Err(e) => return Err(store_failed(id, &e)),
    };
    if record.producer_id != producer.producer_id {
        return Err(code::INVALID_PRODUCER_ID_MAPPING);
    }
    if record.epoch != producer.producer_epoch {
        return Err(fenced_code);
    }
    Ok((record, version))
}

/// InitProducerId for a transactional id: the id's producer in its next epoch — a new id the
/// first time — after the transaction a previous producer left is finished (decided) or
/// aborted (open). Every producer of the id before is fenced.
pub async fn init_transactional(
    client: &Client,
    header: &Header,
    request: InitProducerIdRequest,
) -> Result<BytesMut, Malformed> {
    let id = request.transactional_id.clone().unwrap_or_default();
    let answer = match init(client, &id, &request).await {
        Ok((producer_id, epoch)) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch),
        Err(error) => InitProducerIdResponse::default()
            .with_error_code(error)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    };
    encode(ApiKey::InitProducerId, header, &answer)
}

async fn init(
    client: &Client,
    id: &str,
    request: &InitProducerIdRequest,
) -> Result<(i64, i16), i16> {
    if !coordinates(client, id) {
        return Err(code::NOT_COORDINATOR);
    }
    if !(1..=TIMEOUT_MAX_MS).contains(&request.transaction_timeout_ms) {
        return Err(code::INVALID_TRANSACTION_TIMEOUT);
    }
    let (node, state) = (&client.node, &client.state);
    let ctx = client.txn_ctx();
    let lock = state.transactions.lock(id);
    let _held = lock.lock().await;
    let registry = state.transactions.registry(node);
    let fresh = |producer_id| TxnRecord {
        producer_id,
        epoch: 0,
        timeout_ms: request.transaction_timeout_ms,
        phase: TxnPhase::Empty,
        partitions: BTreeMap::new(),
        groups: Default::default(),
        started_ms: 0,
        used_ms: now_ms(),
    };
    let (mut record, mut version) = match registry.transaction(id).await {
        Ok(Some(found)) => found,
        Ok(None) => {
            let record = fresh(node.allocate_producer_id());
            return match registry.write_transaction(id, &record, None).await {
                Ok(_) => Ok((record.producer_id, 0)),
                Err(e) => Err(store_failed(id, &e)),
            };
        }
        Err(e) => return Err(store_failed(id, &e)),
    };
    // A producer bumping its own epoch (KIP-360) must be the current one.
    if request.producer_id >= 0
        && (request.producer_id != record.producer_id || request.producer_epoch != record.epoch)
    {
        return Err(code::PRODUCER_FENCED);
    }
    (record, version) = match record.phase {
        TxnPhase::PrepareCommit | TxnPhase::PrepareAbort => {
            txn_coordinator::complete(ctx, id, record, version).await?
        }
        TxnPhase::Ongoing => txn_coordinator::abort_in_new_epoch(ctx, id, record, version).await?,
        _ => (record, version),
    };
    let next = match record.epoch.checked_add(1).filter(|&e| e < i16::MAX) {
        Some(epoch) => TxnRecord { epoch, ..fresh(record.producer_id) },
        None => fresh(node.allocate_producer_id()),
    };
    match registry.write_transaction(id, &next, Some(version)).await {
        Ok(_) => Ok((next.producer_id, next.epoch)),
        Err(e) => Err(store_failed(id, &e)),
    }
}

/// Makes `record` Ongoing if it is not (a transaction begins with its first partition or
/// group); refuses while the last one is still being ended.
fn begin(record: &mut TxnRecord) -> Result<(), i16> {
    match record.phase {
        TxnPhase::PrepareCommit | TxnPhase::PrepareAbort => Err(code::CONCURRENT_TRANSACTIONS),
        TxnPhase::Ongoing => Ok(()),
        TxnPhase::Empty | TxnPhase::CompleteCommit | TxnPhase::CompleteAbort => {
            record.phase = TxnPhase::Ongoing;
            record.started_ms = now_ms();
            record.used_ms = record.started_ms;
            Ok(())
        }
    }
}

pub async fn add_partitions_to_txn(
    client: &Client,
    header: &Header,
    request: AddPartitionsToTxnRequest,
) -> Result<BytesMut, Malformed> {
    let producer = &request.producer;
    let lock = client.state.transactions.lock(&producer.transactional_id);
    let _held = lock.lock().await;
    // Each partition's error: a topic not allowed or unknown fails the request, and the
    // other partitions are not attempted.
    let mut errors: Vec<(String, Vec<(i32, i16)>)> = Vec::new();
    let mut failed = false;
    for (topic, partitions) in &request.topics {
        let allowed = client.node.authorizer().check(&client.principal, topic, Operation::Produce);
        let count = super::groups::partition_count(client, topic);
        let each = partitions
            .iter()
            .map(|&p| {
                let error = match count {
                    _ if !allowed => code::TOPIC_AUTHORIZATION_FAILED,
                    Some(n) if (0..n).contains(&p) => code::NONE,
                    _ => code::UNKNOWN_TOPIC_OR_PARTITION,
                };
                failed |= error != code::NONE;
                (p, error)
            })
            .collect();
        errors.push((topic.clone(), each));
    }
    let outcome = match failed {
        true => Err(code::OPERATION_NOT_ATTEMPTED),
        false => {
            add(client, producer, header.version, |record| {
                for (topic, partitions) in &request.topics {
                    record.partitions.entry(topic.clone()).or_default().extend(partitions);
                }
            })
            .await
        }
    };
    let results = errors
        .into_iter()
        .map(|(topic, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(p, error)| {
                    let error = match outcome {
                        Err(outcome) if error == code::NONE => outcome,
                        _ => error,
                    };
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(p)
                        .with_partition_error_code(error)
                })
                .collect();
            AddPartitionsToTxnTopicResult::default()
                .with_name(TopicName(str_bytes(&topic)))
                .with_results_by_partition(partitions)
        })
        .collect();
    let body = AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
    encode(ApiKey::AddPartitionsToTxn, header, &body)
}

/// Adds to the producer's transaction what `change` adds, beginning it if need be.
async fn add(
    client: &Client,
    producer: &TxnProducer,
    version: i16,
    change: impl FnOnce(&mut TxnRecord),
) -> Result<(), i16> {
    let (mut record, mut at) = current(client, producer, fenced(version, 2)).await?;
    if matches!(record.phase, TxnPhase::PrepareCommit | TxnPhase::PrepareAbort) {
        // The last transaction's markers were left to the sweep: finished now, as the sweep
        // would (this id's requests hold its lock).
        let id = &producer.transactional_id;
        (record, at) = txn_coordinator::complete(client.txn_ctx(), id, record, at).await?;
    }
    let before = record.clone();
    begin(&mut record)?;
    change(&mut record);
    if record == before {
        return Ok(());
    }
    let registry = client.state.transactions.registry(&client.node);
    match registry.write_transaction(&producer.transactional_id, &record, Some(at)).await {
        Ok(_) => Ok(()),
        Err(e) => Err(store_failed(&producer.transactional_id, &e)),
    }
}

pub async fn add_offsets_to_txn(
    client: &Client,
    header: &Header,
    request: AddOffsetsToTxnRequest,
) -> Result<BytesMut, Malformed> {
    let producer = &request.producer;
    let lock = client.state.transactions.lock(&producer.transactional_id);
    let _held = lock.lock().await;
    let group = request.group_id.clone();
    let error = add(client, producer, header.version, |record| {
        record.groups.insert(group);
    })
    .await
    .err()
    .unwrap_or(code::NONE);
    encode(
        ApiKey::AddOffsetsToTxn,
        header,
        &AddOffsetsToTxnResponse::default().with_error_code(error),
    )
}

pub async fn end_txn(
    client: &Client,
    header: &Header,
    request: EndTxnRequest,
) -> Result<BytesMut, Malformed> {
    let error = end(client, &request, header.version).await.err().unwrap_or(code::NONE);
    encode(ApiKey::EndTxn, header, &EndTxnResponse::default().with_error_code(error))
}

/// Decides the producer's transaction as it asks and writes its markers; a retry of an
/// ending already made is answered as it was.
async fn end(client: &Client, request: &EndTxnRequest, version: i16) -> Result<(), i16> {
    let producer = &request.producer;
    let id = &producer.transactional_id;
    let (node, state) = (&client.node, &client.state);
    let ctx = client.txn_ctx();
    let lock = state.transactions.lock(id);
    let _held = lock.lock().await;
    let (mut record, at) = current(client, producer, fenced(version, 2)).await?;
    let commit = request.committed;
    match (record.phase, commit) {
        (TxnPhase::Ongoing, _) => {}
        (TxnPhase::CompleteCommit, true) | (TxnPhase::CompleteAbort, false) => return Ok(()),
        (TxnPhase::PrepareCommit, true) | (TxnPhase::PrepareAbort, false) => {
            return txn_coordinator::complete(ctx, id, record, at).await.map(drop);
        }
        (TxnPhase::PrepareCommit | TxnPhase::PrepareAbort, _) => {
            return Err(code::CONCURRENT_TRANSACTIONS);
        }
        _ => return Err(code::INVALID_TXN_STATE),
    }
    record.phase = if commit { TxnPhase::PrepareCommit } else { TxnPhase::PrepareAbort };
    let registry = state.transactions.registry(node);
    let at = registry
        .write_transaction(id, &record, Some(at))
        .await
        .map_err(|e| store_failed(id, &e))?;
    // Decided: whatever happens to the markers now, the sweep finishes them as decided.
    if let Err(error) = txn_coordinator::complete(ctx, id, record, at).await {
        tracing::debug!(transactional_id = %id, error, "a transaction's markers are left to the sweep");
    }
    Ok(())
}

/// TxnOffsetCommit: the group's coordinator keeps the offsets aside for the producer's
/// transaction, which must have added the group (AddOffsetsToTxn); they become the group's
/// offsets when it commits.
pub async fn txn_offset_commit(
    client: &Client,
    header: &Header,
    request: TxnOffsetCommitRequest,
) -> Result<BytesMut, Malformed> {
    let error = stage(client, &request, header.version).await.err();
    let topics = request
        .topics
        .iter()
        .map(|(topic, partitions)| {
            let allowed =
                client.node.authorizer().check(&client.principal, topic, Operation::Consume);
            let partitions = partitions
                .iter()
                .map(|&(p, _, _)| {
                    let error = match error {
                        _ if !allowed => code::TOPIC_AUTHORIZATION_FAILED,
                        Some(error) => error,
                        None => code::NONE,
                    };
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(error)
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(TopicName(str_bytes(topic)))
                .with_partitions(partitions)
        })
        .collect();
    encode(ApiKey::TxnOffsetCommit, header, &TxnOffsetCommitResponse::default().with_topics(topics))
}

async fn stage(client: &Client, request: &TxnOffsetCommitRequest, version: i16) -> Result<(), i16> {
    if !coordinates(client, &request.group_id) {
        return Err(code::NOT_COORDINATOR);
    }
    let registry = client.state.transactions.registry(&client.node);
    let record = match registry.transaction(&request.transactional_id).await {
        Ok(Some((record, _))) => record,
        Ok(None) => return Err(code::INVALID_PRODUCER_ID_MAPPING),
        Err(e) => return Err(store_failed(&request.transactional_id, &e)),
    };
    if record.producer_id != request.producer_id {
        return Err(code::INVALID_PRODUCER_ID_MAPPING);
    }
    if record.epoch != request.producer_epoch {
        return Err(fenced(version, 2));
    }
    if record.phase != TxnPhase::Ongoing || !record.groups.contains(&request.group_id) {
        return Err(code::INVALID_TXN_STATE);
    }
    let mut offsets: BTreeMap<String, BTreeMap<i32, KafkaCommit>> = BTreeMap::new();
    for (topic, partitions) in &request.topics {
        let allowed = client.node.authorizer().check(&client.principal, topic, Operation::Consume);
        if !allowed {
            continue;
        }
        for (partition, offset, metadata) in partitions {
            let commit =
                KafkaCommit { record: *offset, metadata: metadata.clone().unwrap_or_default() };
            offsets.entry(topic.clone()).or_default().insert(*partition, commit);
        }
    }
    registry
        .stage_kafka_offsets(&request.group_id, request.producer_id, &offsets)
        .await
        .map_err(|e| store_failed(&request.transactional_id, &e))
}
