//! Fetch and ListOffsets over the Kafka listener. A fetch's offset is a record number: the
//! partition's index finds the message that holds it, and the log is read from there up to the
//! visible end (the high watermark, or the flushed end under `visible_after = "flush"`). The
//! answer is RecordBatches: a magic-2 message's batch is sent from its segment file by
//! `sendfile` (only the message headers between batches are read, to find them); messages in
//! Tributary's own format are read and converted, a run of plain messages or a wrapper's inner
//! messages into one batch whose records carry their record numbers (and no timestamp).
//!
//! `max_wait_ms` and `min_bytes` are a long poll like `MULTIFETCH_WAIT`'s: the fetch waits on
//! its partitions' visible ends, within `max_fetch_wait_ms` and the broker's parked-fetch
//! slots.

use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ApiKey, ListOffsetsResponse, TopicName};
use protocol::record_batch::RecordBatchBuilder;
use protocol::{Codec, ErrorCode, GAP_HEADER_BYTES, MAGIC_BATCH, MAGIC_GAP, MessageSetIter};

use super::client::{Client, Piece, Reply};
use crate::acl::Operation;
use crate::log::{FileSlice, LogError, Partition};
use protocol::kafka::fetch_response::{self, PartitionHead};
use protocol::kafka::request::Malformed;
use protocol::kafka::request::{FetchRequest, Header, ListOffsetsRequest};
use protocol::kafka::response::{code, encode, kafka_error, str_bytes};

/// Fetch's `isolation_level` that reads only committed transactions.
const READ_COMMITTED: i8 = 1;

/// Bytes a wrapper may inflate to while it is converted.
const INFLATED_BYTES_MAX: usize = 64 << 20;

/// Bytes before a magic-2 message's batch: length, CRC, magic.
const BATCH_MESSAGE_HEADER_BYTES: usize = protocol::PLAIN_MESSAGE_OVERHEAD_BYTES;
/// Bytes of a message read to find where it ends and what it holds: its header, and a batch's
/// header up to `lastOffsetDelta`.
const MESSAGE_HEAD_BYTES: usize = BATCH_MESSAGE_HEADER_BYTES + 27;

/// One partition's answer.
#[derive(Debug)]
struct Read {
    error: i16,
    high_watermark: i64,
    /// The last stable offset: the high watermark, or the first record of the earliest open
    /// transaction before it.
    last_stable: i64,
    log_start: i64,
    records: Vec<Piece>,
    /// For `read_committed`: the aborted transactions in what is answered, `(producer id,
    /// first record)`.
    aborted: Vec<(i64, i64)>,
}

impl Read {
    fn failed(error: i16) -> Read {
        // As Kafka answers a partition it cannot read: no watermarks rather than zeros.
        Read {
            error,
            high_watermark: -1,
            last_stable: -1,
            log_start: -1,
            records: Vec::new(),
            aborted: Vec::new(),
        }
    }

    fn records_len(&self) -> usize {
        self.records.iter().map(Piece::len).sum()
    }
}

pub async fn fetch(
    client: &Client,
    header: &Header,
    request: FetchRequest,
) -> Result<Reply, Malformed> {
    let node = &client.node;
    let mut reads = read_all(client, &request).await;
    let bytes = |reads: &[(String, Vec<(i32, Read)>)]| -> usize {
        reads.iter().flat_map(|(_, ps)| ps.iter()).map(|(_, r)| r.records_len()).sum()
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
    let heads: Vec<(String, Vec<PartitionHead>)> = reads
        .iter()
        .map(|(topic, partitions)| {
            let partitions = partitions
                .iter()
                .map(|(index, read)| PartitionHead {
                    partition: *index,
                    error: read.error,
                    high_watermark: read.high_watermark,
                    last_stable_offset: read.last_stable,
                    log_start: read.log_start,
                    records_len: read.records_len(),
                    aborted: (request.isolation_level == READ_COMMITTED)
                        .then(|| read.aborted.clone()),
                })
                .collect();
            (topic.clone(), partitions)
        })
        .collect();
    let mut frame = fetch_response::encode(header, &heads)?;
    // The frame's bytes up to each partition's records, then the records.
    let mut pieces = Vec::new();
    let mut taken = 0;
    let records = reads.into_iter().flat_map(|(_, ps)| ps).map(|(_, read)| read.records);
    for (gap, records) in frame.gaps.iter().zip(records) {
        pieces.push(Piece::Bytes(frame.bytes.split_to(gap - taken).freeze()));
        taken = *gap;
        pieces.extend(records);
    }
    pieces.push(Piece::Bytes(frame.bytes.freeze()));
    Ok(Reply(pieces))
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
                Read::failed(code::TOPIC_AUTHORIZATION_FAILED)
            } else {
                let max_bytes = (p.partition_max_bytes.max(0) as usize).min(budget);
                let committed = request.isolation_level == READ_COMMITTED;
                let at = (p.fetch_offset, max_bytes);
                read_partition(client, topic, p.partition, at, committed).await
            };
            budget = budget.saturating_sub(result.records_len());
            read.push((p.partition, result));
        }
        reads.push((topic.clone(), read));
    }
    reads
}

/// Reads `(fetch_offset, max_bytes)` of a partition; with `committed`, only up to its last
/// stable offset, with the aborted transactions in what is read.
async fn read_partition(
    client: &Client,
    topic: &str,
    partition: i32,
    (fetch_offset, max_bytes): (i64, usize),
    committed: bool,
) -> Read {
    let p = match client.node.replicas().led(topic, partition) {
        Ok(p) => p,
        Err(e) => return Read::failed(kafka_error(e)),
    };
    // Below the local log of a tiered topic: from the store.
    let remote = client.node.remote_run(&p).await;
    let log_start = remote.map_or_else(|| p.start_record(), |run| run.start_record);
    let remote_slice = match (remote, u64::try_from(fetch_offset)) {
        (Some(run), Ok(record)) if record >= run.start_record && record < p.start_record() => {
            match read_remote(client, &p, record, max_bytes).await {
                Ok(slice) => slice,
                Err(e) => return Read::failed(kafka_error(e)),
            }
        }
        _ => None,
    };
    let read = tokio::task::spawn_blocking(move || match remote_slice {
        Some((slice, first)) => read_slice(&p, &slice, first, max_bytes, log_start),
        None => read_records(&p, fetch_offset, max_bytes, log_start, committed),
    })
    .await;
    match read {
        Ok(Ok(read)) => read,
        Ok(Err(e)) => {
            tracing::error!(%topic, partition, error = %e, "Kafka fetch failed");
            Read::failed(code::UNKNOWN_SERVER_ERROR)
        }
        Err(e) => {
            tracing::error!(%topic, partition, error = %e, "Kafka fetch panicked");
            Read::failed(code::UNKNOWN_SERVER_ERROR)
        }
    }
}

/// Where record `record` is in the store: a slice of a cached chunk from the message holding
/// it, about `max_bytes` long (its first message whole), and the number of that message's
/// first record. `None` if the store no longer holds it.
async fn read_remote(
    client: &Client,
    p: &Partition,
    record: u64,
    max_bytes: usize,
) -> Result<Option<(FileSlice, u64)>, ErrorCode> {
    let tier = client.node.tier().ok_or(ErrorCode::OffsetOutOfRange)?;
    let failed = |e| crate::node::remote_failed(p, e);
    let Some((byte, first)) = tier.locate_record(p, record).await.map_err(failed)? else {
        return Ok(None);
    };
    let max_bytes = u32::try_from(max_bytes.max(1)).unwrap_or(u32::MAX);
    let slice = tier.read(p, byte, max_bytes).await.map_err(failed)?;
    Ok(slice.map(|slice| (slice, first)))
}

/// The batches of a slice of a remote segment's chunk whose first message's first record is
/// `first`. Blocking: reads the chunk.
fn read_slice(
    p: &Partition,
    slice: &FileSlice,
    first: u64,
    max_bytes: usize,
    log_start: u64,
) -> Result<Read, LogError> {
    let high_watermark = p.record_at_offset(p.visible_end() as i64)?;
    let records = pieces(slice, first, max_bytes).map_err(|source| LogError::Io {
        context: "reading",
        path: slice.segment.path.clone(),
        source,
    })?;
    let first = first as i64;
    Ok(Read {
        error: code::NONE,
        high_watermark: high_watermark as i64,
        last_stable: high_watermark as i64,
        log_start: log_start as i64,
        records,
        aborted: p
            .aborted_transactions(first as u64, high_watermark)
            .into_iter()
            .map(|a| (a.producer_id, a.first_record as i64))
            .collect(),
    })
}

/// The batches from record `fetch_offset` on, about `max_bytes` of log (one whole message at
/// least); the log starts at record `log_start` (in the store, for a tiered topic). With
/// `committed`, nothing from the last stable offset on. Blocking: reads the log's message
/// headers, and the messages it converts.
fn read_records(
    p: &Partition,
    fetch_offset: i64,
    max_bytes: usize,
    log_start: u64,
    committed: bool,
) -> Result<Read, LogError> {
    let visible = p.visible_end();
    let high_watermark = p.record_at_offset(visible as i64)?;
    let open = p.first_open_transaction()?.filter(|open| open.offset < visible);
    let last_stable = open.map_or(high_watermark, |open| open.first_record);
    // Where this read ends: the visible end, or for `read_committed` the last stable offset.
    let (end_byte, end_record) = match open {
        Some(open) if committed => (open.offset, open.first_record),
        _ => (visible, high_watermark),
    };
    let answer = |error, records, aborted| Read {
        error,
        high_watermark: high_watermark as i64,
        last_stable: last_stable as i64,
        log_start: log_start as i64,
        records,
        aborted,
    };
    let Ok(record) = u64::try_from(fetch_offset) else {
        return Ok(answer(code::OFFSET_OUT_OF_RANGE, Vec::new(), Vec::new()));
    };
    if record < p.start_record() || record > high_watermark {
        return Ok(answer(code::OFFSET_OUT_OF_RANGE, Vec::new(), Vec::new()));
    }
    if record >= end_record || max_bytes == 0 {
        return Ok(answer(code::NONE, Vec::new(), Vec::new()));
    }
    let Some((mut byte, mut first)) = p.locate_record(record)? else {
        return Ok(answer(code::NONE, Vec::new(), Vec::new()));
    };
    // A compacted topic's segment may hold nothing but gaps from here: read on in the next
    // (Kafka's consumers take a fetch with no batch for one whose batch is too large).
    let records = loop {
        if byte >= end_byte {
            break Vec::new();
        }
        let Some(mut slice) = p.read(byte as i64, u32::MAX)? else { break Vec::new() };
        let slice_start = slice.segment.base_offset + slice.position;
        slice.len = slice.len.min(end_byte - slice_start);
        let records = pieces(&slice, first, max_bytes).map_err(|source| LogError::Io {
            context: "reading",
            path: slice.segment.path.clone(),
            source,
        })?;
        if !records.is_empty() {
            break records;
        }
        byte = slice_start + slice.len;
        first = p.record_at_offset(byte as i64)?;
    };
    let aborted = match committed {
        true => p
            .aborted_transactions(record, end_record)
            .into_iter()
            .map(|a| (a.producer_id, a.first_record as i64))
            .collect(),
        false => Vec::new(),
    };
    Ok(answer(code::NONE, records, aborted))
}

/// The whole messages at the start of `slice` (the first numbered `first_record`), about
/// `max_bytes` of them and the first whatever its size, as RecordBatches: each magic-2
/// message's batch a slice of the file, each run of other messages read and converted.
fn pieces(slice: &FileSlice, first_record: u64, max_bytes: usize) -> io::Result<Vec<Piece>> {
    let file = &slice.segment.file;
    let end = slice.position + slice.len;
    let (mut position, mut number, mut taken) = (slice.position, first_record, 0usize);
    let mut pieces = Vec::new();
    let mut head = [0u8; MESSAGE_HEAD_BYTES];
    while position < end {
        let head = &mut head[..MESSAGE_HEAD_BYTES.min((end - position) as usize)];
        file.read_exact_at(head, position)?;
        let Some(length) = protocol::u32_at(head, 0) else { break };
        let size = 4 + u64::from(length);
        if position + size > end || (taken > 0 && taken as u64 + size > max_bytes as u64) {
            break;
        }
        if head.len() >= GAP_HEADER_BYTES && head[8] == MAGIC_GAP {
            // What the cleaner removed: nothing to send; its records keep their numbers.
            number += protocol::u32_at(head, 10).map_or(0, u64::from);
            position += size;
            continue;
        }
        if head.len() == MESSAGE_HEAD_BYTES && head[8] == MAGIC_BATCH {
            // lastOffsetDelta, after baseOffset, batchLength, partitionLeaderEpoch, magic, crc
            // and attributes.
            let last_delta = i32::from_be_bytes(head[32..36].try_into().expect("4 bytes"));
            let header = BATCH_MESSAGE_HEADER_BYTES as u64;
            let segment = Arc::clone(&slice.segment);
            let batch = FileSlice { segment, position: position + header, len: size - header };
            pieces.push(Piece::File(batch));
            number += u64::try_from(last_delta).map_or(0, |d| d + 1);
            position += size;
            taken += size as usize;
            continue;
        }
        // A run of messages in Tributary's own format: read (the budget's worth, the first
        // whole) and converted up to the next batch.
        let want = (max_bytes.saturating_sub(taken) as u64).max(size).min(end - position);
        let mut bytes = vec![0u8; want as usize];
        file.read_exact_at(&mut bytes, position)?;
        let (batches, used, next) = to_batches(&bytes, number);
        if used == 0 {
            break;
        }
        pieces.push(Piece::Bytes(batches));
        number = next;
        position += used as u64;
        taken += used;
    }
    Ok(pieces)
}

/// The whole messages at the start of `bytes` (the first numbered `first_record`) up to the
/// first magic-2 message, as RecordBatches; a partial message at the end is left out. Returns
/// the batches, the bytes of `bytes` they came from, and the number of the next record.
fn to_batches(bytes: &[u8], first_record: u64) -> (Bytes, usize, u64) {
    let mut out = BytesMut::with_capacity(bytes.len() + 64);
    let mut number = first_record as i64;
    let mut used = 0;
    let mut plain: Option<RecordBatchBuilder> = None;
    let flush = |plain: &mut Option<RecordBatchBuilder>, out: &mut BytesMut| {
        if let Some(batch) = plain.take() {
            out.extend_from_slice(&batch.finish());
        }
    };
    let mut messages = MessageSetIter::new(bytes, 0);
    while let Some(Ok((_, message))) = messages.next() {
        if message.magic == MAGIC_BATCH || message.magic == MAGIC_GAP {
            break;
        }
        used = messages.valid_bytes();
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
    (out.freeze(), used, number as u64)
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
            let answer = |error, (offset, timestamp)| {
                ListOffsetsPartitionResponse::default()
                    .with_partition_index(partition)
                    .with_error_code(error)
                    .with_timestamp(timestamp)
                    .with_offset(offset)
            };
            if !allowed {
                answers.push(answer(code::TOPIC_AUTHORIZATION_FAILED, (-1, -1)));
                continue;
            }
            let p = match client.node.replicas().led(&topic, partition) {
                Ok(p) => p,
                Err(e) => {
                    answers.push(answer(kafka_error(e), (-1, -1)));
                    continue;
                }
            };
            if timestamp == -1 {
                // The high watermark of a leader that has just taken over can lag what its
                // predecessor acknowledged: wait (at most replica_lag_ms) for it to settle.
                client.node.settle(&topic, partition).await;
            }
            if timestamp == -2
                && let Some(run) = client.node.remote_run(&p).await
            {
                // The first record is in the store.
                answers.push(answer(code::NONE, (run.start_record as i64, -1)));
                continue;
            }
            if timestamp >= 0
                && let Some(tier) = client.node.tier()
                && client.node.remote_run(&p).await.is_some()
            {
                // A time the store may hold: searched there first, then on disk.
                match tier.find_time(&p, timestamp).await {
                    Ok(Some((record, time))) => {
                        answers.push(answer(code::NONE, (record as i64, time)));
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        let error = crate::node::remote_failed(&p, e);
                        answers.push(answer(kafka_error(error), (-1, -1)));
                        continue;
                    }
                }
            }
            let committed = request.isolation_level == READ_COMMITTED;
            let found =
                tokio::task::spawn_blocking(move || offset_for(&p, timestamp, committed)).await;
            answers.push(match found {
                Ok(Ok(found)) => answer(code::NONE, found),
                Ok(Err(ErrorCode::InvalidRequest)) => answer(code::INVALID_REQUEST, (-1, -1)),
                Ok(Err(e)) => answer(kafka_error(e), (-1, -1)),
                Err(_) => answer(code::UNKNOWN_SERVER_ERROR, (-1, -1)),
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

/// ListOffsets of one partition, an offset and its timestamp: −1 the high watermark (the last
/// stable offset, for `read_committed`), −2 the first record, −4 the first on disk (all with timestamp −1; a tiered topic's −2 is answered
/// from the store before this), a time the first record at or after it (offset −1
/// if none is). Blocking.
fn offset_for(
    p: &Arc<Partition>,
    timestamp: i64,
    committed: bool,
) -> Result<(i64, i64), ErrorCode> {
    let failed = |e: LogError| {
        tracing::error!(error = %e, "Kafka ListOffsets failed");
        ErrorCode::Unknown
    };
    match timestamp {
        -1 => {
            let high_watermark = p.record_at_offset(p.visible_end() as i64).map_err(failed)?;
            let open = match committed {
                true => p.first_open_transaction().map_err(failed)?,
                false => None,
            };
            let end = open.map_or(high_watermark, |o| o.first_record.min(high_watermark));
            Ok((end as i64, -1))
        }
        -2 | -4 => Ok((p.start_record() as i64, -1)),
        t if t >= 0 => {
            let found = p.find_time(t).map_err(failed)?;
            Ok(found.map_or((-1, -1), |(record, time)| (record as i64, time)))
        }
        _ => Err(ErrorCode::InvalidRequest),
    }
}

#[cfg(test)]
mod tests {
    use protocol::record_batch::{RecordBatchBuilder, RecordBatchRef};

    use super::*;
    use crate::log::Segment;

    /// The pieces' bytes as a client receives them: file slices read back.
    fn received(pieces: &[Piece]) -> Vec<u8> {
        let mut out = Vec::new();
        for piece in pieces {
            match piece {
                Piece::Bytes(bytes) => out.extend_from_slice(bytes),
                Piece::File(slice) => {
                    let mut bytes = vec![0; slice.len as usize];
                    slice.segment.file.read_exact_at(&mut bytes, slice.position).unwrap();
                    out.extend_from_slice(&bytes);
                }
            }
        }
        out
    }

    fn records_of(mut batches: &[u8]) -> Vec<(i64, Vec<u8>)> {
        let mut seen = Vec::new();
        while !batches.is_empty() {
            let size = 12 + i32::from_be_bytes(batches[8..12].try_into().unwrap()) as usize;
            let batch = RecordBatchRef::parse(&batches[..size]).unwrap();
            for record in batch.records(1 << 20).unwrap().iter() {
                let record = record.unwrap();
                seen.push((record.offset, record.value.unwrap().to_vec()));
            }
            batches = &batches[size..];
        }
        seen
    }

    #[test]
    fn stored_batches_go_from_the_file_and_other_messages_are_converted_and_numbered() {
        let mut log = Vec::new();
        protocol::encode_message(&mut log, Codec::None, b"p0");
        protocol::encode_message(&mut log, Codec::None, b"p1");
        let mut inner = Vec::new();
        protocol::encode_message(&mut inner, Codec::None, b"w2");
        protocol::encode_message(&mut inner, Codec::None, b"w3");
        let packed = protocol::compression::compress(Codec::Zstd, &inner).unwrap();
        protocol::encode_message(&mut log, Codec::Zstd, &packed);
        let mut stored = RecordBatchBuilder::new(104);
        stored.push(104, 7, Some(b"k"), Some(b"b4"), &[]);
        stored.push(105, 8, None, Some(b"b5"), &[]);
        let stored = stored.finish();
        protocol::encode_batch_message(&mut log, &stored);
        let batch_at = log.len() - stored.len();
        protocol::encode_message(&mut log, Codec::None, b"p6");
        let whole = log.len();
        protocol::encode_message(&mut log, Codec::None, b"cut off");
        log.truncate(whole + 5);

        let dir = tempfile::tempdir().unwrap();
        let segment = Segment::create(dir.path(), 0).unwrap();
        segment.file.write_all_at(&log, 0).unwrap();
        let slice = FileSlice { segment: Arc::new(segment), position: 0, len: log.len() as u64 };

        let all = pieces(&slice, 100, 1 << 20).unwrap();
        let expected: Vec<(i64, Vec<u8>)> = [
            (100, "p0"),
            (101, "p1"),
            (102, "w2"),
            (103, "w3"),
            (104, "b4"),
            (105, "b5"),
            (106, "p6"),
        ]
        .iter()
        .map(|(o, v)| (*o, v.as_bytes().to_vec()))
        .collect();
        assert_eq!(records_of(&received(&all)), expected);
        let files: Vec<(u64, u64)> = all
            .iter()
            .filter_map(|p| match p {
                Piece::File(slice) => Some((slice.position, slice.len)),
                Piece::Bytes(_) => None,
            })
            .collect();
        assert_eq!(files, [(batch_at as u64, stored.len() as u64)], "the batch goes from the file");

        // A budget smaller than the first message still gets it whole, and nothing more.
        let first = pieces(&slice, 100, 1).unwrap();
        assert_eq!(records_of(&received(&first)), expected[..1]);
        // From the batch on, a budget of the batch's message takes the batch alone.
        let from_batch = FileSlice {
            position: (batch_at - 9) as u64,
            len: (log.len() - batch_at + 9) as u64,
            ..slice
        };
        let batch = pieces(&from_batch, 104, stored.len() + 9).unwrap();
        assert_eq!(received(&batch), stored);
    }
}
