//! Responses: `u32 size | i16 error | body`. Responses on a connection come in request order,
//! so a response carries no id and is decoded knowing which request it answers. A response
//! with a non-zero error has an empty body.

use bytes::{BufMut, Bytes, BytesMut};

use crate::request::ApiKey;
use crate::wire::{Reader, put_size, put_str, str_len};
use crate::{DecodeError, ErrorCode};

/// Bytes of a response header after its `size`: the `i16 error`.
const ERROR_BYTES: usize = 2;

/// Writes `u32 size | i16 error` for a response whose body (after `error`) is `body_len` bytes.
/// The fetch path uses it to write a header and then send the body with `sendfile`.
pub fn encode_response_header(buf: &mut impl BufMut, body_len: usize, error: ErrorCode) {
    put_size(buf, ERROR_BYTES + body_len);
    buf.put_i16(error.as_i16());
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceResponse {
    pub partition: i32,
    /// Offset of the first appended message.
    pub offset: i64,
}

/// The producer id of an idempotent producer and its epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitProducerIdResponse {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse {
    /// Raw MessageSet bytes, possibly ending in a partial message.
    pub messages: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPart {
    pub error: ErrorCode,
    pub messages: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiFetchResponse {
    pub parts: Vec<FetchPart>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducePart {
    pub error: ErrorCode,
    pub partition: i32,
    pub offset: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiProduceResponse {
    pub parts: Vec<ProducePart>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetsResponse {
    pub offsets: Vec<i64>,
}

/// `METADATA`: the cluster's live brokers and, per topic asked for, every partition's
/// leader, leader epoch, replicas and in-sync replicas (`docs/design.md`, "METADATA").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataResponse {
    /// The broker that answered.
    pub broker_id: i32,
    pub brokers: Vec<BrokerMetadata>,
    pub topics: Vec<TopicMetadata>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerMetadata {
    pub id: i32,
    pub host: String,
    pub port: i32,
}

impl BrokerMetadata {
    /// `host:port` to connect to (`[host]:port` for an IPv6 literal).
    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub name: String,
    /// [`ErrorCode::UnknownTopic`] (and no partitions) for a topic the cluster does not have.
    pub error: ErrorCode,
    pub partitions: Vec<PartitionMetadata>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    pub partition: i32,
    /// [`ErrorCode::NotLeader`] while the partition has no leader (`leader` −1).
    pub error: ErrorCode,
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

impl MetadataResponse {
    /// The metadata of `topic`, if the answer has it.
    pub fn topic(&self, topic: &str) -> Option<&TopicMetadata> {
        self.topics.iter().find(|t| t.name == topic)
    }

    /// The broker with `id`, if it is live.
    pub fn broker(&self, id: i32) -> Option<&BrokerMetadata> {
        self.brokers.iter().find(|b| b.id == id)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateTopicResponse;

/// An aborted transaction in a [`ReadCommittedResponse`]: its producer, and where its first
/// batch and its abort marker begin (byte offsets). A reader drops the producer's batches
/// from the first until the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTransaction {
    pub producer_id: i64,
    pub first_offset: i64,
    pub marker_offset: i64,
}

/// A partition's last stable offset (byte offset: a reader of committed transactions stops
/// before it) and the aborted transactions in the range asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadCommittedResponse {
    pub last_stable: i64,
    pub aborted: Vec<AbortedTransaction>,
}

/// A transaction marker written: every in-sync replica of the partition has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteTxnMarkerResponse;

/// Where the asked epoch ends: the largest epoch the leader knows at or below the one asked,
/// and the offset after its last message; both [`UNDEFINED_EPOCH`] / −1 when the leader knows
/// no such epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetForLeaderEpochResponse {
    pub epoch: i32,
    pub end_offset: i64,
}

/// The record number asked for by a `RECORD_NUMBER` request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordNumberResponse {
    pub record: i64,
}

/// Where a partition's log starts after a `DELETE_RECORDS`: the byte offset of its first
/// message (the asked offset, or the start it already had if that was later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeleteRecordsResponse {
    pub log_start: i64,
}

/// The epoch of an [`OffsetForLeaderEpochResponse`] for an epoch the leader does not know.
pub const UNDEFINED_EPOCH: i32 = -1;

/// One partition of a [`ReplicaFetchResponse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaFetchPart {
    pub error: ErrorCode,
    pub high_watermark: i64,
    /// The leader epoch of every message in `messages`.
    pub data_epoch: i32,
    /// Base offset of the leader's segment that `messages` come from (an answer never spans
    /// two): the follower starts a segment where the leader did, so that the segment files
    /// of every replica are the same files (`docs/design.md`, "Request types" and "Follower").
    pub segment_base: i64,
    /// Raw MessageSet bytes, possibly ending in a partial message.
    pub messages: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaFetchResponse {
    pub parts: Vec<ReplicaFetchPart>,
}

/// Bytes of a replica fetch part's header after its `size`: error, high watermark, epoch,
/// segment base.
pub const REPLICA_PART_HEADER_BYTES: usize = ERROR_BYTES + 8 + 4 + 8;

/// The header of one part of a replica fetch answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaPartHeader {
    pub error: ErrorCode,
    pub high_watermark: i64,
    pub data_epoch: i32,
    pub segment_base: i64,
}

/// Writes a replica fetch part's `u32 size | i16 error | i64 high_watermark | i32 data_epoch
/// | i64 segment_base` for `set_len` bytes of messages that follow (sent by `sendfile` on the
/// broker).
pub fn encode_replica_part_header(
    buf: &mut impl BufMut,
    set_len: usize,
    header: ReplicaPartHeader,
) {
    put_size(buf, REPLICA_PART_HEADER_BYTES + set_len);
    buf.put_i16(header.error.as_i16());
    buf.put_i64(header.high_watermark);
    buf.put_i32(header.data_epoch);
    buf.put_i64(header.segment_base);
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    Produce(ProduceResponse),
    Fetch(FetchResponse),
    MultiFetch(MultiFetchResponse),
    MultiProduce(MultiProduceResponse),
    Offsets(OffsetsResponse),
    Metadata(MetadataResponse),
    CreateTopic(CreateTopicResponse),
    WriteTxnMarker(WriteTxnMarkerResponse),
    ReadCommitted(ReadCommittedResponse),
    OffsetForLeaderEpoch(OffsetForLeaderEpochResponse),
    ReplicaFetch(ReplicaFetchResponse),
    RecordNumber(RecordNumberResponse),
    InitProducerId(InitProducerIdResponse),
    DeleteRecords(DeleteRecordsResponse),
}

const FETCH_PART_BYTES_MIN: usize = 4 + ERROR_BYTES;
const PRODUCE_PART_BYTES_MIN: usize = ERROR_BYTES + 4 + 8;
const BROKER_METADATA_BYTES_MIN: usize = 4 + 2 + 4;
const TOPIC_METADATA_BYTES_MIN: usize = 2 + ERROR_BYTES + 2;
const PARTITION_METADATA_BYTES_MIN: usize = 4 + ERROR_BYTES + 4 + 4 + 2 + 2;

impl Response {
    pub fn api_key(&self) -> ApiKey {
        match self {
            Response::Produce(_) => ApiKey::Produce,
            Response::Fetch(_) => ApiKey::Fetch,
            Response::MultiFetch(_) => ApiKey::MultiFetch,
            Response::MultiProduce(_) => ApiKey::MultiProduce,
            Response::Offsets(_) => ApiKey::Offsets,
            Response::Metadata(_) => ApiKey::Metadata,
            Response::CreateTopic(_) => ApiKey::CreateTopic,
            Response::WriteTxnMarker(_) => ApiKey::WriteTxnMarker,
            Response::ReadCommitted(_) => ApiKey::ReadCommitted,
            Response::OffsetForLeaderEpoch(_) => ApiKey::OffsetForLeaderEpoch,
            Response::ReplicaFetch(_) => ApiKey::ReplicaFetch,
            Response::RecordNumber(_) => ApiKey::RecordNumber,
            Response::InitProducerId(_) => ApiKey::InitProducerId,
            Response::DeleteRecords(_) => ApiKey::DeleteRecords,
        }
    }

    /// Decodes the body (after `error`) of a successful response to a request of type `key`.
    /// A `MULTIFETCH_WAIT` is answered like a `MULTIFETCH`, an `IDEMPOTENT_PRODUCE` or a
    /// `COPY_PRODUCE` like a `PRODUCE`.
    pub fn decode(key: ApiKey, body: Bytes) -> Result<Response, DecodeError> {
        let mut r = Reader::new(body);
        let response = match key {
            ApiKey::Produce | ApiKey::IdempotentProduce | ApiKey::CopyProduce => {
                Response::Produce(ProduceResponse {
                    partition: r.i32("partition")?,
                    offset: r.i64("offset")?,
                })
            }
            ApiKey::Fetch => {
                let n = r.remaining();
                Response::Fetch(FetchResponse { messages: r.bytes("message set", n)? })
            }
            ApiKey::MultiFetch | ApiKey::MultiFetchWait => {
                let count = r.remaining() / FETCH_PART_BYTES_MIN;
                let mut parts = Vec::with_capacity(count);
                while r.remaining() > 0 {
                    let size = r.u32("part size")? as usize;
                    let error = ErrorCode::from_i16(r.i16("part error")?);
                    let set_bytes =
                        size.checked_sub(ERROR_BYTES).ok_or(DecodeError::InvalidValue {
                            what: "part size",
                            value: size as i64,
                        })?;
                    parts.push(FetchPart { error, messages: r.bytes("message set", set_bytes)? });
                }
                Response::MultiFetch(MultiFetchResponse { parts })
            }
            ApiKey::MultiProduce => {
                let count = usize::from(r.u16("part count")?);
                let mut parts = Vec::with_capacity(r.capacity_for(count, PRODUCE_PART_BYTES_MIN));
                for _ in 0..count {
                    parts.push(ProducePart {
                        error: ErrorCode::from_i16(r.i16("part error")?),
                        partition: r.i32("partition")?,
                        offset: r.i64("offset")?,
                    });
                }
                Response::MultiProduce(MultiProduceResponse { parts })
            }
            ApiKey::Offsets => {
                let count = r.u32("offset count")? as usize;
                let mut offsets = Vec::with_capacity(r.capacity_for(count, 8));
                for _ in 0..count {
                    offsets.push(r.i64("offset")?);
                }
                Response::Offsets(OffsetsResponse { offsets })
            }
            ApiKey::Metadata => Response::Metadata(decode_metadata(&mut r)?),
            ApiKey::CreateTopic => Response::CreateTopic(CreateTopicResponse),
            ApiKey::WriteTxnMarker => Response::WriteTxnMarker(WriteTxnMarkerResponse),
            ApiKey::ReadCommitted => {
                let last_stable = r.i64("last_stable")?;
                let count = r.u32("aborted count")? as usize;
                let mut aborted = Vec::with_capacity(r.capacity_for(count, 24));
                for _ in 0..count {
                    aborted.push(AbortedTransaction {
                        producer_id: r.i64("producer_id")?,
                        first_offset: r.i64("first_offset")?,
                        marker_offset: r.i64("marker_offset")?,
                    });
                }
                Response::ReadCommitted(ReadCommittedResponse { last_stable, aborted })
            }
            ApiKey::OffsetForLeaderEpoch => {
                Response::OffsetForLeaderEpoch(OffsetForLeaderEpochResponse {
                    epoch: r.i32("epoch")?,
                    end_offset: r.i64("end_offset")?,
                })
            }
            ApiKey::RecordNumber => {
                Response::RecordNumber(RecordNumberResponse { record: r.i64("record")? })
            }
            ApiKey::DeleteRecords => {
                Response::DeleteRecords(DeleteRecordsResponse { log_start: r.i64("log_start")? })
            }
            ApiKey::InitProducerId => Response::InitProducerId(InitProducerIdResponse {
                producer_id: r.i64("producer_id")?,
                producer_epoch: r.i16("producer_epoch")?,
            }),
            ApiKey::ReplicaFetch => {
                let count = r.remaining() / (4 + REPLICA_PART_HEADER_BYTES);
                let mut parts = Vec::with_capacity(count);
                while r.remaining() > 0 {
                    let size = r.u32("part size")? as usize;
                    let set_bytes = size.checked_sub(REPLICA_PART_HEADER_BYTES).ok_or(
                        DecodeError::InvalidValue { what: "part size", value: size as i64 },
                    )?;
                    parts.push(ReplicaFetchPart {
                        error: ErrorCode::from_i16(r.i16("part error")?),
                        high_watermark: r.i64("high watermark")?,
                        data_epoch: r.i32("data epoch")?,
                        segment_base: r.i64("segment base")?,
                        messages: r.bytes("message set", set_bytes)?,
                    });
                }
                Response::ReplicaFetch(ReplicaFetchResponse { parts })
            }
        };
        r.finish("response")?;
        Ok(response)
    }

    /// Bytes of the body after `error`.
    pub fn body_len(&self) -> usize {
        match self {
            Response::Produce(_) => 4 + 8,
            Response::Fetch(f) => f.messages.len(),
            Response::MultiFetch(m) => {
                m.parts.iter().map(|p| 4 + ERROR_BYTES + p.messages.len()).sum()
            }
            Response::MultiProduce(m) => 2 + m.parts.len() * PRODUCE_PART_BYTES_MIN,
            Response::Offsets(o) => 4 + 8 * o.offsets.len(),
            Response::ReadCommitted(c) => 8 + 4 + 24 * c.aborted.len(),
            Response::Metadata(m) => {
                let brokers: usize = m.brokers.iter().map(|b| 4 + str_len(&b.host) + 4).sum();
                let partition = |p: &PartitionMetadata| {
                    PARTITION_METADATA_BYTES_MIN + 4 * (p.replicas.len() + p.isr.len())
                };
                let topics: usize = m
                    .topics
                    .iter()
                    .map(|t| {
                        str_len(&t.name)
                            + ERROR_BYTES
                            + 2
                            + t.partitions.iter().map(partition).sum::<usize>()
                    })
                    .sum();
                4 + 2 + brokers + 2 + topics
            }
            Response::CreateTopic(_) | Response::WriteTxnMarker(_) => 0,
            Response::OffsetForLeaderEpoch(_) => 4 + 8,
            Response::RecordNumber(_) | Response::DeleteRecords(_) => 8,
            Response::InitProducerId(_) => 8 + 2,
            Response::ReplicaFetch(m) => {
                m.parts.iter().map(|p| 4 + REPLICA_PART_HEADER_BYTES + p.messages.len()).sum()
            }
        }
    }

    /// Appends the whole successful response frame, `size` included. The broker builds every
    /// response it sends, so counts and strings are within their field widths by construction.
    pub fn encode(&self, buf: &mut BytesMut) {
        let body_len = self.body_len();
        buf.reserve(4 + ERROR_BYTES + body_len);
        encode_response_header(buf, body_len, ErrorCode::None);
        match self {
            Response::Produce(p) => {
                buf.put_i32(p.partition);
                buf.put_i64(p.offset);
            }
            Response::Fetch(f) => buf.put_slice(&f.messages),
            Response::MultiFetch(m) => {
                for p in &m.parts {
                    encode_response_header(buf, p.messages.len(), p.error);
                    buf.put_slice(&p.messages);
                }
            }
            Response::MultiProduce(m) => {
                buf.put_u16(m.parts.len() as u16);
                for p in &m.parts {
                    buf.put_i16(p.error.as_i16());
                    buf.put_i32(p.partition);
                    buf.put_i64(p.offset);
                }
            }
            Response::ReadCommitted(c) => {
                buf.put_i64(c.last_stable);
                buf.put_u32(c.aborted.len() as u32);
                for a in &c.aborted {
                    buf.put_i64(a.producer_id);
                    buf.put_i64(a.first_offset);
                    buf.put_i64(a.marker_offset);
                }
            }
            Response::Offsets(o) => {
                buf.put_u32(o.offsets.len() as u32);
                o.offsets.iter().for_each(|&o| buf.put_i64(o));
            }
            Response::Metadata(m) => encode_metadata(buf, m),
            Response::CreateTopic(_) | Response::WriteTxnMarker(_) => {}
            Response::OffsetForLeaderEpoch(o) => {
                buf.put_i32(o.epoch);
                buf.put_i64(o.end_offset);
            }
            Response::RecordNumber(o) => buf.put_i64(o.record),
            Response::DeleteRecords(o) => buf.put_i64(o.log_start),
            Response::InitProducerId(o) => {
                buf.put_i64(o.producer_id);
                buf.put_i16(o.producer_epoch);
            }
            Response::ReplicaFetch(m) => {
                for p in &m.parts {
                    let header = ReplicaPartHeader {
                        error: p.error,
                        high_watermark: p.high_watermark,
                        data_epoch: p.data_epoch,
                        segment_base: p.segment_base,
                    };
                    encode_replica_part_header(buf, p.messages.len(), header);
                    buf.put_slice(&p.messages);
                }
            }
        }
    }

    /// Appends a failed response: the error and an empty body.
    pub fn encode_error(buf: &mut BytesMut, error: ErrorCode) {
        encode_response_header(buf, 0, error);
    }
}

fn decode_metadata(r: &mut Reader) -> Result<MetadataResponse, DecodeError> {
    let broker_id = r.i32("broker id")?;
    let count = usize::from(r.u16("broker count")?);
    let mut brokers = Vec::with_capacity(r.capacity_for(count, BROKER_METADATA_BYTES_MIN));
    for _ in 0..count {
        brokers.push(BrokerMetadata {
            id: r.i32("broker id")?,
            host: r.str("broker host")?,
            port: r.i32("broker port")?,
        });
    }
    let count = usize::from(r.u16("topic count")?);
    let mut topics = Vec::with_capacity(r.capacity_for(count, TOPIC_METADATA_BYTES_MIN));
    for _ in 0..count {
        let name = r.str("topic")?;
        let error = ErrorCode::from_i16(r.i16("topic error")?);
        let count = usize::from(r.u16("partition count")?);
        let mut partitions =
            Vec::with_capacity(r.capacity_for(count, PARTITION_METADATA_BYTES_MIN));
        for _ in 0..count {
            let partition = r.i32("partition")?;
            let error = ErrorCode::from_i16(r.i16("partition error")?);
            let leader = r.i32("leader")?;
            let leader_epoch = r.i32("leader epoch")?;
            let replicas = broker_ids(r, "replica")?;
            let isr = broker_ids(r, "isr")?;
            partitions.push(PartitionMetadata {
                partition,
                error,
                leader,
                leader_epoch,
                replicas,
                isr,
            });
        }
        topics.push(TopicMetadata { name, error, partitions });
    }
    Ok(MetadataResponse { broker_id, brokers, topics })
}

fn broker_ids(r: &mut Reader, what: &'static str) -> Result<Vec<i32>, DecodeError> {
    let count = usize::from(r.u16(what)?);
    let mut ids = Vec::with_capacity(r.capacity_for(count, 4));
    for _ in 0..count {
        ids.push(r.i32(what)?);
    }
    Ok(ids)
}

fn encode_metadata(buf: &mut BytesMut, m: &MetadataResponse) {
    let put_ids = |buf: &mut BytesMut, ids: &[i32]| {
        buf.put_u16(ids.len() as u16);
        ids.iter().for_each(|&id| buf.put_i32(id));
    };
    buf.put_i32(m.broker_id);
    buf.put_u16(m.brokers.len() as u16);
    for b in &m.brokers {
        buf.put_i32(b.id);
        put_str(buf, &b.host);
        buf.put_i32(b.port);
    }
    buf.put_u16(m.topics.len() as u16);
    for t in &m.topics {
        put_str(buf, &t.name);
        buf.put_i16(t.error.as_i16());
        buf.put_u16(t.partitions.len() as u16);
        for p in &t.partitions {
            buf.put_i32(p.partition);
            buf.put_i16(p.error.as_i16());
            buf.put_i32(p.leader);
            buf.put_i32(p.leader_epoch);
            put_ids(buf, &p.replicas);
            put_ids(buf, &p.isr);
        }
    }
}
