//! Fetch and ListOffsets over the Kafka listener. A fetch's offset is a record number: the
//! partition's index finds the message that holds it, and the log is read from there up to the
//! visible end (the high watermark, or the flushed end under `visible_after = "flush"`). The
//! answer is RecordBatches: a magic-2 message's batch as stored, with no re-encoding; messages
//! in Tributary's own format are converted, a run of plain messages or a wrapper's inner
//! messages into one batch whose records carry their record numbers (and no timestamp).
//!
//! `max_wait_ms` and `min_bytes` are a long poll like `MULTIFETCH_WAIT`'s: the fetch waits on
//! its partitions' visible ends, within `max_fetch_wait_ms` and the broker's parked-fetch
//! slots.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ApiKey, FetchResponse, ListOffsetsResponse, TopicName};
use protocol::record_batch::RecordBatchBuilder;
use protocol::{Codec, ErrorCode, MAGIC_BATCH, MessageSetIter};

use super::client::Client;
use crate::acl::Operation;
use crate::log::{LogError, Partition};
use protocol::kafka::request::Malformed;
use protocol::kafka::request::{FetchRequest, Header, ListOffsetsRequest};
use protocol::kafka::response::{code, encode, kafka_error, str_bytes};

/// Bytes a wrapper may inflate to while it is converted.
const INFLATED_BYTES_MAX: usize = 64 << 20;

/// One partition's answer.
#[derive(Debug, Clone)]
struct Read {
    error: i16,
    high_watermark: i64,
    log_start: i64,
    records: Bytes,
}

pub async fn fetch(
    client: &Client,
    header: &Header,
    request: FetchRequest,
) -> Result<BytesMut, Malformed> {
    let node = &client.node;
    let mut reads = read_all(client, &request).await;
    let bytes = |reads: &[(String, Vec<(i32, Read)>)]| -> usize {
        reads.iter().flat_map(|(_, ps)| ps.iter()).map(|(_, r)| r.records.len()).sum()
    };
    let wait = Duration::from_millis(request.max_wait_ms.max(0) as u64)
        .min(node.config().max_fetch_wait());
    if bytes(&reads) < request.min_bytes.max(1) as usize
        && !wait.is_zero()
        && let Some(_slot) = client.admission.try_park()
    {
        wait_for_data(client, &request, wait).await;
        reads = read_all(client, &request).await;
    }
    let responses = reads
        .into_iter()
        .map(|(topic, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(index, read)| {
                    PartitionData::default()
                        .with_partition_index(index)
                        .with_error_code(read.error)
                        .with_high_watermark(read.high_watermark)
                        .with_last_stable_offset(read.high_watermark)
                        .with_log_start_offset(read.log_start)
                        .with_records(Some(read.records))
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(TopicName(str_bytes(&topic)))
                .with_partitions(partitions)
        })
        .collect();
    let body = FetchResponse::default().with_responses(responses);
    encode(ApiKey::Fetch, header, &body)
}

/// Reads every partition of `request`, in order, within its `max_bytes` over all of them (the
/// first partition with data gets at least one whole batch).
async fn read_all(client: &Client, request: &FetchRequest) -> Vec<(String, Vec<(i32, Read)>)> {
    let mut budget = request.max_bytes.max(1) as usize;
    let mut reads = Vec::with_capacity(request.topics.len());
    for (topic, partitions) in &request.topics {
        let allowed = client.node.authorizer().check(&client.principal, topic, Operation::Consume);
        let mut read = Vec::with_capacity(partitions.len());
        for p in partitions {
            let result = if !allowed {
                let error = code::TOPIC_AUTHORIZATION_FAILED;
                Read { error, high_watermark: -1, log_start: -1, records: Bytes::new() }
            } else {
                let max_bytes = (p.partition_max_bytes.max(0) as usize).min(budget);
                read_partition(client, topic, p.partition, p.fetch_offset, max_bytes).await
            };
            budget = budget.saturating_sub(result.records.len());
            read.push((p.partition, result));
        }
        reads.push((topic.clone(), read));
    }
    reads
}

async fn read_partition(
    client: &Client,
    topic: &str,
    partition: i32,
    fetch_offset: i64,
    max_bytes: usize,
) -> Read {
    // As Kafka answers a partition it cannot read: no watermarks rather than zeros.
    let failed = |error| Read { error, high_watermark: -1, log_start: -1, records: Bytes::new() };
    let p = match client.node.replicas().led(topic, partition) {
        Ok(p) => p,
        Err(e) => return failed(kafka_error(e)),
    };
    let max_message_bytes = client.node.config().max_message_bytes as usize;
    let read = tokio::task::spawn_blocking(move || {
        read_records(&p, fetch_offset, max_bytes, max_message_bytes)
    })
    .await;
    match read {
        Ok(Ok(read)) => read,
        Ok(Err(e)) => {
            tracing::error!(%topic, partition, error = %e, "Kafka fetch failed");
            failed(code::UNKNOWN_SERVER_ERROR)
        }
        Err(e) => {
            tracing::error!(%topic, partition, error = %e, "Kafka fetch panicked");
            failed(code::UNKNOWN_SERVER_ERROR)
        }
    }
}

/// The batches from record `fetch_offset` on, about `max_bytes` of log (one whole message at
/// least, up to `max_message_bytes`). Blocking: reads the log.
fn read_records(
    p: &Partition,
    fetch_offset: i64,
    max_bytes: usize,
    max_message_bytes: usize,
) -> Result<Read, LogError> {
    let visible = p.visible_end();
    let high_watermark = p.record_at_offset(visible as i64)?;
    let log_start = p.start_record();
    let answer = |error, records| Read {
        error,
        high_watermark: high_watermark as i64,
        log_start: log_start as i64,
        records,
    };
    let Ok(record) = u64::try_from(fetch_offset) else {
        return Ok(answer(code::OFFSET_OUT_OF_RANGE, Bytes::new()));
    };
    if record < log_start || record > high_watermark {
        return Ok(answer(code::OFFSET_OUT_OF_RANGE, Bytes::new()));
    }
    if record == high_watermark || max_bytes == 0 {
        return Ok(answer(code::NONE, Bytes::new()));
    }
    let Some((byte, first)) = p.locate_record(record)? else {
        return Ok(answer(code::NONE, Bytes::new()));
    };
    let mut bytes = read_log(p, byte, max_bytes)?;
    if let Some(length) = protocol::u32_at(&bytes, 0)
        && MessageSetIter::new(&bytes, 0).next().is_none()
    {
        // The first message is larger than `max_bytes`: it goes whole, as Kafka sends a first
        // batch larger than the fetch's limits.
        bytes = read_log(p, byte, (length as usize + 4).min(max_message_bytes + 4))?;
    }
    Ok(answer(code::NONE, to_batches(&bytes, first)))
}

/// Up to `max_bytes` of the visible log from `byte`, within its segment.
fn read_log(p: &Partition, byte: u64, max_bytes: usize) -> Result<Vec<u8>, LogError> {
    let max_bytes = u32::try_from(max_bytes).unwrap_or(u32::MAX);
    let Some(slice) = p.read(byte as i64, max_bytes)? else { return Ok(Vec::new()) };
    let mut bytes = vec![0u8; slice.len as usize];
    std::os::unix::fs::FileExt::read_exact_at(&slice.segment.file, &mut bytes, slice.position)
        .map_err(|source| LogError::Io {
            context: "reading",
            path: slice.segment.path.clone(),
            source,
        })?;
    Ok(bytes)
}

/// The whole messages of `bytes` (the first numbered `first_record`) as RecordBatches; a
/// partial message at the end is left out.
fn to_batches(bytes: &[u8], first_record: u64) -> Bytes {
    let mut out = BytesMut::with_capacity(bytes.len() + 64);
    let mut number = first_record as i64;
    let mut plain: Option<RecordBatchBuilder> = None;
    let flush = |plain: &mut Option<RecordBatchBuilder>, out: &mut BytesMut| {
        if let Some(batch) = plain.take() {
            out.extend_from_slice(&batch.finish());
        }
    };
    for message in MessageSetIter::new(bytes, 0) {
        let Ok((_, message)) = message else { break };
        if message.magic == MAGIC_BATCH {
            flush(&mut plain, &mut out);
            out.extend_from_slice(message.payload);
            number += protocol::records_in(&message, 0).unwrap_or(0) as i64;
            continue;
        }
        if message.codec() == Codec::None {
            let batch = plain.get_or_insert_with(|| RecordBatchBuilder::new(number));
            batch.push(number, -1, None, Some(message.payload), &[]);
            number += 1;
            continue;
        }
        flush(&mut plain, &mut out);
        let Ok(inner) =
            protocol::compression::decompress(message.codec(), message.payload, INFLATED_BYTES_MAX)
        else {
            // Counted as no records by the index too: skipped.
            continue;
        };
        let mut batch = RecordBatchBuilder::new(number);
        for inner in MessageSetIter::new(&inner, 0) {
            let Ok((_, inner)) = inner else { break };
            batch.push(number, -1, None, Some(inner.payload), &[]);
            number += 1;
        }
        if !batch.is_empty() {
            out.extend_from_slice(&batch.finish());
        }
    }
    flush(&mut plain, &mut out);
    out.freeze()
}

/// Waits until a partition of `request` has more visible data, or `wait` has passed.
async fn wait_for_data(client: &Client, request: &FetchRequest, wait: Duration) {
    let mut watches = Vec::new();
    for (topic, partitions) in &request.topics {
        for p in partitions {
            if let Ok(partition) = client.node.replicas().led(topic, p.partition) {
                watches.push(partition.watch_visible());
            }
        }
    }
    if watches.is_empty() {
        tokio::time::sleep(wait).await;
        return;
    }
    let changed = futures::future::select_all(
        watches.iter_mut().map(|w| Box::pin(async move { w.changed().await.is_ok() })),
    );
    let _ = tokio::time::timeout(wait, changed).await;
}

pub async fn list_offsets(
    client: &Client,
    header: &Header,
    request: ListOffsetsRequest,
) -> Result<BytesMut, Malformed> {
    let mut topics = Vec::with_capacity(request.topics.len());
    for (topic, partitions) in request.topics {
        let allowed = client.node.authorizer().check(&client.principal, &topic, Operation::Consume);
        let mut answers = Vec::with_capacity(partitions.len());
        for (partition, timestamp) in partitions {
            let answer = |error, offset| {
                ListOffsetsPartitionResponse::default()
                    .with_partition_index(partition)
                    .with_error_code(error)
                    .with_timestamp(-1)
                    .with_offset(offset)
            };
            if !allowed {
                answers.push(answer(code::TOPIC_AUTHORIZATION_FAILED, -1));
                continue;
            }
            let p = match client.node.replicas().led(&topic, partition) {
                Ok(p) => p,
                Err(e) => {
                    answers.push(answer(kafka_error(e), -1));
                    continue;
                }
            };
            if timestamp == -1 {
                // The high watermark of a leader that has just taken over can lag what its
                // predecessor acknowledged: wait (at most replica_lag_ms) for it to settle.
                client.node.settle(&topic, partition).await;
            }
            let found = tokio::task::spawn_blocking(move || offset_for(&p, timestamp)).await;
            answers.push(match found {
                Ok(Ok(offset)) => answer(code::NONE, offset),
                Ok(Err(ErrorCode::InvalidRequest)) => answer(code::INVALID_REQUEST, -1),
                Ok(Err(e)) => answer(kafka_error(e), -1),
                Err(_) => answer(code::UNKNOWN_SERVER_ERROR, -1),
            });
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(TopicName(str_bytes(&topic)))
                .with_partitions(answers),
        );
    }
    let body = ListOffsetsResponse::default().with_topics(topics);
    encode(ApiKey::ListOffsets, header, &body)
}

/// ListOffsets of one partition: −1 the high watermark, −2 the first record, a time the first
/// record of the oldest segment written at or after it (−1 if none was). Blocking.
fn offset_for(p: &Arc<Partition>, timestamp: i64) -> Result<i64, ErrorCode> {
    let failed = |e: LogError| {
        tracing::error!(error = %e, "Kafka ListOffsets failed");
        ErrorCode::Unknown
    };
    match timestamp {
        -1 => p.record_at_offset(p.visible_end() as i64).map(|r| r as i64).map_err(failed),
        -2 => Ok(p.start_record() as i64),
        t if t >= 0 => Ok(p.first_record_since(t).map_err(failed)?.map_or(-1, |r| r as i64)),
        _ => Err(ErrorCode::InvalidRequest),
    }
}

#[cfg(test)]
mod tests {
    use protocol::record_batch::{RecordBatchBuilder, RecordBatchRef};

    use super::*;

    #[test]
    fn stored_messages_become_batches_numbered_as_the_index_numbers_them() {
        let mut log = Vec::new();
        protocol::encode_message(&mut log, Codec::None, b"p0");
        protocol::encode_message(&mut log, Codec::None, b"p1");
        let mut inner = Vec::new();
        protocol::encode_message(&mut inner, Codec::None, b"w2");
        protocol::encode_message(&mut inner, Codec::None, b"w3");
        let packed = protocol::compression::compress(Codec::Zstd, &inner).unwrap();
        protocol::encode_message(&mut log, Codec::Zstd, &packed);
        let mut stored = RecordBatchBuilder::new(4);
        stored.push(4, 7, Some(b"k"), Some(b"b4"), &[]);
        stored.push(5, 8, None, Some(b"b5"), &[]);
        let stored = stored.finish();
        protocol::encode_batch_message(&mut log, &stored);
        protocol::encode_message(&mut log, Codec::None, b"p6");
        let whole = log.len();
        protocol::encode_message(&mut log, Codec::None, b"cut off");
        log.truncate(whole + 5);

        let batches = to_batches(&log, 100);
        let mut rest = &batches[..];
        let mut seen = Vec::new();
        while !rest.is_empty() {
            let size = 12 + i32::from_be_bytes(rest[8..12].try_into().unwrap()) as usize;
            let batch = RecordBatchRef::parse(&rest[..size]).unwrap();
            for record in batch.records(1 << 20).unwrap().iter() {
                let record = record.unwrap();
                seen.push((record.offset, record.value.unwrap().to_vec()));
            }
            rest = &rest[size..];
        }
        let expected: Vec<(i64, Vec<u8>)> =
            [(100, "p0"), (101, "p1"), (102, "w2"), (103, "w3"), (4, "b4"), (5, "b5"), (106, "p6")]
                .iter()
                .map(|(o, v)| (*o, v.as_bytes().to_vec()))
                .collect();
        // The stored batch keeps its own base offset (4 here, as this test never appended
        // it): a leader writes its first record's number there.
        assert_eq!(seen, expected);
        assert!(
            batches.windows(stored.len()).any(|w| w == stored),
            "a stored batch goes as stored"
        );
    }
}
