//! Requests: `u32 size | u16 type | body`, `size` counting the bytes after itself.
//!
//! Decoding takes the bytes after `size` as a [`Bytes`] so that a produced MessageSet is a
//! slice of the received buffer, appended to the log without a copy.

use bytes::{BufMut, Bytes, BytesMut};

use crate::wire::{Reader, put_size, put_str, str_len};
use crate::{DecodeError, EncodeError};

/// The request types of `docs/design.md` ("Request types").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ApiKey {
    Produce = 0,
    Fetch = 1,
    MultiFetch = 2,
    MultiProduce = 3,
    Offsets = 4,
    Metadata = 5,
    CreateTopic = 6,
    MultiFetchWait = 7,
    OffsetForLeaderEpoch = 8,
    ReplicaFetch = 9,
    RecordNumber = 10,
    InitProducerId = 11,
    IdempotentProduce = 12,
    DeleteRecords = 13,
    WriteTxnMarker = 14,
    ReadCommitted = 15,
    CopyProduce = 16,
}

impl ApiKey {
    pub fn from_u16(key: u16) -> Result<ApiKey, DecodeError> {
        Ok(match key {
            0 => ApiKey::Produce,
            1 => ApiKey::Fetch,
            2 => ApiKey::MultiFetch,
            3 => ApiKey::MultiProduce,
            4 => ApiKey::Offsets,
            5 => ApiKey::Metadata,
            6 => ApiKey::CreateTopic,
            7 => ApiKey::MultiFetchWait,
            8 => ApiKey::OffsetForLeaderEpoch,
            9 => ApiKey::ReplicaFetch,
            10 => ApiKey::RecordNumber,
            11 => ApiKey::InitProducerId,
            12 => ApiKey::IdempotentProduce,
            13 => ApiKey::DeleteRecords,
            14 => ApiKey::WriteTxnMarker,
            15 => ApiKey::ReadCommitted,
            16 => ApiKey::CopyProduce,
            key => return Err(DecodeError::UnknownApiKey(key)),
        })
    }
}

/// When a producer hears back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Acks {
    /// No response at all: fire and forget, as in the paper.
    None = 0,
    /// After the set is appended to the log (in the page cache).
    Written = 1,
    /// After the set is flushed to disk.
    Flushed = 2,
    /// After every in-sync replica has the set (the high watermark is past it); refused when
    /// the partition has fewer in-sync replicas than its `min_insync_replicas`.
    All = 3,
}

impl std::str::FromStr for Acks {
    type Err = String;

    /// `0`, `1`, `2`, `3` or `all` (= 3), as flags and config files spell them.
    fn from_str(s: &str) -> Result<Acks, String> {
        match s {
            "0" => Ok(Acks::None),
            "1" => Ok(Acks::Written),
            "2" => Ok(Acks::Flushed),
            "3" | "all" => Ok(Acks::All),
            _ => Err(format!("acks {s:?}: expected 0, 1, 2, 3 or all")),
        }
    }
}

impl Acks {
    fn decode(r: &mut Reader) -> Result<Acks, DecodeError> {
        match r.u8("acks")? {
            0 => Ok(Acks::None),
            1 => Ok(Acks::Written),
            2 => Ok(Acks::Flushed),
            3 => Ok(Acks::All),
            value => Err(DecodeError::InvalidValue { what: "acks", value: value.into() }),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceRequest {
    pub topic: String,
    /// A partition of the topic, or [`crate::ANY_PARTITION`].
    pub partition: i32,
    pub acks: Acks,
    /// A whole MessageSet.
    pub messages: Bytes,
}

/// A produce of an idempotent producer ([`Request::IdempotentProduce`]): a
/// [`ProduceRequest`] whose set is one magic-2 message, its batch carrying the producer id from
/// [`Request::InitProducerId`], the producer's epoch and the batch's first sequence number
/// on this partition. The leader appends a batch it has not seen and answers one sent again
/// with the offset it was appended at.
pub type IdempotentProduceRequest = ProduceRequest;

/// A copier's produce ([`Request::CopyProduce`]): messages copied from bytes `from` up to
/// `to` of a source partition's log by `writer` (a name the copier keeps for that source
/// partition). The leader appends them with a record of `to` as the writer's position, in
/// one write, unless it has that position already: what lies before the writer's position is
/// in the log, so a copy sent again (after a lost answer, a failover, the copier's crash) is
/// not appended twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyProduceRequest {
    pub topic: String,
    pub partition: i32,
    pub acks: Acks,
    pub writer: String,
    pub from: i64,
    pub to: i64,
    /// Whole messages: the source's bytes from `from` up to `to`.
    pub messages: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub max_bytes: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiFetchRequest {
    pub fetches: Vec<FetchRequest>,
}

/// A long poll: a multifetch that the broker answers once `min_bytes` are visible over all
/// its parts, or once `max_wait_ms` has passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiFetchWaitRequest {
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub fetches: Vec<FetchRequest>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducePartition {
    pub topic: String,
    pub partition: i32,
    pub messages: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiProduceRequest {
    pub acks: Acks,
    pub entries: Vec<ProducePartition>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetsRequest {
    pub topic: String,
    pub partition: i32,
    /// [`crate::OFFSETS_LATEST`], [`crate::OFFSETS_EARLIEST`] or ms since the epoch.
    pub time: i64,
    pub max_number: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataRequest {
    /// Topics to describe; empty means all.
    pub topics: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTopicRequest {
    pub topic: String,
    pub partitions: i32,
    /// Per-topic overrides such as `("retention_ms", "3600000")`.
    pub configs: Vec<(String, String)>,
}

/// A follower asks where `epoch` (or the largest epoch the leader knows below it) ends in the
/// leader's log, to cut what it must not keep before it fetches again (KIP-101, KIP-279).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetForLeaderEpochRequest {
    pub topic: String,
    pub partition: i32,
    pub epoch: i32,
}

/// The Kafka record number of the message at a byte offset of a partition's log (or of the
/// next record, at the log's end): what a follower asks its leader when it starts its log
/// again at the leader's start, so that it numbers records as the leader does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordNumberRequest {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// Moves a partition's log start to the message at byte `offset` (a message boundary at or
/// below the high watermark; [`DELETE_TO_HIGH_WATERMARK`]: the high watermark), as Kafka's
/// DeleteRecords does: every message before it is gone to every reader, on every replica.
/// An offset at or below the log start moves nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRecordsRequest {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// Ends a producer's transaction on a partition its leader holds: the transaction
/// coordinator's request for the commit or abort marker (Kafka's WriteTxnMarkers), answered
/// once every in-sync replica has the marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteTxnMarkerRequest {
    pub topic: String,
    pub partition: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub coordinator_epoch: i32,
}

/// What a reader that takes only committed transactions needs of a partition's log from byte
/// `from` up to `to`: where its last stable offset is, and the aborted transactions there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadCommittedRequest {
    pub topic: String,
    pub partition: i32,
    pub from: i64,
    pub to: i64,
}

/// The `offset` of a [`DeleteRecordsRequest`] that deletes every message below the high
/// watermark.
pub const DELETE_TO_HIGH_WATERMARK: i64 = -1;

/// One partition of a [`ReplicaFetchRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaFetchPartition {
    pub topic: String,
    pub partition: i32,
    /// The leader epoch the follower believes current: a leader in another epoch refuses.
    pub leader_epoch: i32,
    /// The follower's log end: where it wants data from, and how far it has come.
    pub offset: i64,
    pub max_bytes: i32,
}

/// A follower's fetch: like a long poll, but up to the leader's written end, never across two
/// epochs, and with the high watermark in each answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaFetchRequest {
    pub replica_id: i32,
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub fetches: Vec<ReplicaFetchPartition>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Produce(ProduceRequest),
    Fetch(FetchRequest),
    MultiFetch(MultiFetchRequest),
    MultiProduce(MultiProduceRequest),
    Offsets(OffsetsRequest),
    Metadata(MetadataRequest),
    CreateTopic(CreateTopicRequest),
    MultiFetchWait(MultiFetchWaitRequest),
    OffsetForLeaderEpoch(OffsetForLeaderEpochRequest),
    ReplicaFetch(ReplicaFetchRequest),
    RecordNumber(RecordNumberRequest),
    /// A producer id for an idempotent producer (empty body).
    InitProducerId,
    IdempotentProduce(IdempotentProduceRequest),
    DeleteRecords(DeleteRecordsRequest),
    WriteTxnMarker(WriteTxnMarkerRequest),
    ReadCommitted(ReadCommittedRequest),
    CopyProduce(CopyProduceRequest),
}

// Smallest encodings of repeated entries, to bound capacities by the bytes present.
const FETCH_BYTES_MIN: usize = 2 + 4 + 8 + 4;
const REPLICA_FETCH_BYTES_MIN: usize = 2 + 4 + 4 + 8 + 4;
const PRODUCE_PARTITION_BYTES_MIN: usize = 2 + 4 + 4;
const STR_BYTES_MIN: usize = 2;

impl Request {
    pub fn api_key(&self) -> ApiKey {
        match self {
            Request::Produce(_) => ApiKey::Produce,
            Request::Fetch(_) => ApiKey::Fetch,
            Request::MultiFetch(_) => ApiKey::MultiFetch,
            Request::MultiProduce(_) => ApiKey::MultiProduce,
            Request::Offsets(_) => ApiKey::Offsets,
            Request::Metadata(_) => ApiKey::Metadata,
            Request::CreateTopic(_) => ApiKey::CreateTopic,
            Request::MultiFetchWait(_) => ApiKey::MultiFetchWait,
            Request::OffsetForLeaderEpoch(_) => ApiKey::OffsetForLeaderEpoch,
            Request::ReplicaFetch(_) => ApiKey::ReplicaFetch,
            Request::RecordNumber(_) => ApiKey::RecordNumber,
            Request::InitProducerId => ApiKey::InitProducerId,
            Request::IdempotentProduce(_) => ApiKey::IdempotentProduce,
            Request::DeleteRecords(_) => ApiKey::DeleteRecords,
            Request::WriteTxnMarker(_) => ApiKey::WriteTxnMarker,
            Request::ReadCommitted(_) => ApiKey::ReadCommitted,
            Request::CopyProduce(_) => ApiKey::CopyProduce,
        }
    }

    /// Whether the broker answers this request (only `acks` 0 produces go unanswered).
    pub fn expects_response(&self) -> bool {
        match self {
            Request::Produce(p) | Request::IdempotentProduce(p) => p.acks != Acks::None,
            Request::MultiProduce(p) => p.acks != Acks::None,
            Request::CopyProduce(p) => p.acks != Acks::None,
            _ => true,
        }
    }

    /// Decodes the bytes after a frame's `size`: `u16 type | body`. The body must be used up.
    pub fn decode(frame: Bytes) -> Result<Request, DecodeError> {
        let mut r = Reader::new(frame);
        let key = ApiKey::from_u16(r.u16("request type")?)?;
        let request = match key {
            ApiKey::Produce => Request::Produce(produce(&mut r)?),
            ApiKey::IdempotentProduce => Request::IdempotentProduce(produce(&mut r)?),
            ApiKey::InitProducerId => Request::InitProducerId,
            ApiKey::CopyProduce => Request::CopyProduce(CopyProduceRequest {
                topic: r.str("topic")?,
                partition: r.i32("partition")?,
                acks: Acks::decode(&mut r)?,
                writer: r.str("writer")?,
                from: r.i64("from")?,
                to: r.i64("to")?,
                messages: set(&mut r)?,
            }),
            ApiKey::Fetch => Request::Fetch(fetch(&mut r)?),
            ApiKey::MultiFetch => {
                Request::MultiFetch(MultiFetchRequest { fetches: fetches(&mut r)? })
            }
            ApiKey::MultiFetchWait => Request::MultiFetchWait(MultiFetchWaitRequest {
                max_wait_ms: r.i32("max_wait_ms")?,
                min_bytes: r.i32("min_bytes")?,
                fetches: fetches(&mut r)?,
            }),
            ApiKey::MultiProduce => {
                let acks = Acks::decode(&mut r)?;
                let count = usize::from(r.u16("produce count")?);
                let capacity = r.capacity_for(count, PRODUCE_PARTITION_BYTES_MIN);
                let mut entries = Vec::with_capacity(capacity);
                for _ in 0..count {
                    let topic = r.str("topic")?;
                    let partition = r.i32("partition")?;
                    let messages = set(&mut r)?;
                    entries.push(ProducePartition { topic, partition, messages });
                }
                Request::MultiProduce(MultiProduceRequest { acks, entries })
            }
            ApiKey::Offsets => Request::Offsets(OffsetsRequest {
                topic: r.str("topic")?,
                partition: r.i32("partition")?,
                time: r.i64("time")?,
                max_number: r.i32("max_number")?,
            }),
            ApiKey::Metadata => {
                let count = usize::from(r.u16("topic count")?);
                let mut topics = Vec::with_capacity(r.capacity_for(count, STR_BYTES_MIN));
                for _ in 0..count {
                    topics.push(r.str("topic")?);
                }
                Request::Metadata(MetadataRequest { topics })
            }
            ApiKey::CreateTopic => {
                let topic = r.str("topic")?;
                let partitions = r.i32("partitions")?;
                let count = usize::from(r.u16("config count")?);
                let mut configs = Vec::with_capacity(r.capacity_for(count, 2 * STR_BYTES_MIN));
                for _ in 0..count {
                    configs.push((r.str("config key")?, r.str("config value")?));
                }
                Request::CreateTopic(CreateTopicRequest { topic, partitions, configs })
            }
            ApiKey::RecordNumber => Request::RecordNumber(RecordNumberRequest {
                topic: r.str("topic")?,
                partition: r.i32("partition")?,
                offset: r.i64("offset")?,
            }),
            ApiKey::DeleteRecords => Request::DeleteRecords(DeleteRecordsRequest {
                topic: r.str("topic")?,
                partition: r.i32("partition")?,
                offset: r.i64("offset")?,
            }),
            ApiKey::ReadCommitted => Request::ReadCommitted(ReadCommittedRequest {
                topic: r.str("topic")?,
                partition: r.i32("partition")?,
                from: r.i64("from")?,
                to: r.i64("to")?,
            }),
            ApiKey::WriteTxnMarker => Request::WriteTxnMarker(WriteTxnMarkerRequest {
                topic: r.str("topic")?,
                partition: r.i32("partition")?,
                producer_id: r.i64("producer_id")?,
                producer_epoch: r.i16("producer_epoch")?,
                commit: match r.u8("commit")? {
                    0 => false,
                    1 => true,
                    value => {
                        let value = i64::from(value);
                        return Err(DecodeError::InvalidValue { what: "commit", value });
                    }
                },
                coordinator_epoch: r.i32("coordinator_epoch")?,
            }),
            ApiKey::OffsetForLeaderEpoch => {
                Request::OffsetForLeaderEpoch(OffsetForLeaderEpochRequest {
                    topic: r.str("topic")?,
                    partition: r.i32("partition")?,
                    epoch: r.i32("epoch")?,
                })
            }
            ApiKey::ReplicaFetch => {
                let replica_id = r.i32("replica_id")?;
                let max_wait_ms = r.i32("max_wait_ms")?;
                let min_bytes = r.i32("min_bytes")?;
                let count = usize::from(r.u16("fetch count")?);
                let mut fetches =
                    Vec::with_capacity(r.capacity_for(count, REPLICA_FETCH_BYTES_MIN));
                for _ in 0..count {
                    fetches.push(ReplicaFetchPartition {
                        topic: r.str("topic")?,
                        partition: r.i32("partition")?,
                        leader_epoch: r.i32("leader_epoch")?,
                        offset: r.i64("offset")?,
                        max_bytes: r.i32("max_bytes")?,
                    });
                }
                Request::ReplicaFetch(ReplicaFetchRequest {
                    replica_id,
                    max_wait_ms,
                    min_bytes,
                    fetches,
                })
            }
        };
        r.finish("request")?;
        Ok(request)
    }

    /// Bytes of the frame after its `size` field.
    pub fn body_len(&self) -> usize {
        2 + match self {
            Request::Produce(p) | Request::IdempotentProduce(p) => {
                str_len(&p.topic) + 4 + 1 + 4 + p.messages.len()
            }
            Request::InitProducerId => 0,
            Request::CopyProduce(p) => {
                str_len(&p.topic) + 4 + 1 + str_len(&p.writer) + 8 + 8 + 4 + p.messages.len()
            }
            Request::Fetch(f) => fetch_len(f),
            Request::MultiFetch(m) => 2 + m.fetches.iter().map(fetch_len).sum::<usize>(),
            Request::MultiFetchWait(m) => {
                4 + 4 + 2 + m.fetches.iter().map(fetch_len).sum::<usize>()
            }
            Request::MultiProduce(m) => {
                let entry = |e: &ProducePartition| str_len(&e.topic) + 4 + 4 + e.messages.len();
                1 + 2 + m.entries.iter().map(entry).sum::<usize>()
            }
            Request::Offsets(o) => str_len(&o.topic) + 4 + 8 + 4,
            Request::Metadata(m) => 2 + m.topics.iter().map(|t| str_len(t)).sum::<usize>(),
            Request::CreateTopic(c) => {
                let config = |(k, v): &(String, String)| str_len(k) + str_len(v);
                str_len(&c.topic) + 4 + 2 + c.configs.iter().map(config).sum::<usize>()
            }
            Request::OffsetForLeaderEpoch(o) => str_len(&o.topic) + 4 + 4,
            Request::RecordNumber(o) => str_len(&o.topic) + 4 + 8,
            Request::DeleteRecords(d) => str_len(&d.topic) + 4 + 8,
            Request::WriteTxnMarker(w) => str_len(&w.topic) + 4 + 8 + 2 + 1 + 4,
            Request::ReadCommitted(c) => str_len(&c.topic) + 4 + 8 + 8,
            Request::ReplicaFetch(m) => {
                let fetch = |f: &ReplicaFetchPartition| str_len(&f.topic) + 4 + 4 + 8 + 4;
                4 + 4 + 4 + 2 + m.fetches.iter().map(fetch).sum::<usize>()
            }
        }
    }

    /// Appends the whole frame, `size` included, to `buf`.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        self.check_encodable()?;
        let body_len = self.body_len();
        buf.reserve(4 + body_len);
        put_size(buf, body_len);
        buf.put_u16(self.api_key() as u16);
        match self {
            Request::Produce(p) | Request::IdempotentProduce(p) => {
                put_str(buf, &p.topic);
                buf.put_i32(p.partition);
                buf.put_u8(p.acks as u8);
                put_set(buf, &p.messages);
            }
            Request::InitProducerId => {}
            Request::CopyProduce(p) => {
                put_str(buf, &p.topic);
                buf.put_i32(p.partition);
                buf.put_u8(p.acks as u8);
                put_str(buf, &p.writer);
                buf.put_i64(p.from);
                buf.put_i64(p.to);
                put_set(buf, &p.messages);
            }
            Request::Fetch(f) => put_fetch(buf, f),
            Request::MultiFetch(m) => put_fetches(buf, &m.fetches),
            Request::MultiFetchWait(m) => {
                buf.put_i32(m.max_wait_ms);
                buf.put_i32(m.min_bytes);
                put_fetches(buf, &m.fetches);
            }
            Request::MultiProduce(m) => {
                buf.put_u8(m.acks as u8);
                buf.put_u16(m.entries.len() as u16);
                for e in &m.entries {
                    put_str(buf, &e.topic);
                    buf.put_i32(e.partition);
                    put_set(buf, &e.messages);
                }
            }
            Request::Offsets(o) => {
                put_str(buf, &o.topic);
                buf.put_i32(o.partition);
                buf.put_i64(o.time);
                buf.put_i32(o.max_number);
            }
            Request::Metadata(m) => {
                buf.put_u16(m.topics.len() as u16);
                m.topics.iter().for_each(|t| put_str(buf, t));
            }
            Request::CreateTopic(c) => {
                put_str(buf, &c.topic);
                buf.put_i32(c.partitions);
                buf.put_u16(c.configs.len() as u16);
                for (k, v) in &c.configs {
                    put_str(buf, k);
                    put_str(buf, v);
                }
            }
            Request::OffsetForLeaderEpoch(o) => {
                put_str(buf, &o.topic);
                buf.put_i32(o.partition);
                buf.put_i32(o.epoch);
            }
            Request::RecordNumber(o) => {
                put_str(buf, &o.topic);
                buf.put_i32(o.partition);
                buf.put_i64(o.offset);
            }
            Request::DeleteRecords(d) => {
                put_str(buf, &d.topic);
                buf.put_i32(d.partition);
                buf.put_i64(d.offset);
            }
            Request::ReadCommitted(c) => {
                put_str(buf, &c.topic);
                buf.put_i32(c.partition);
                buf.put_i64(c.from);
                buf.put_i64(c.to);
            }
            Request::WriteTxnMarker(w) => {
                put_str(buf, &w.topic);
                buf.put_i32(w.partition);
                buf.put_i64(w.producer_id);
                buf.put_i16(w.producer_epoch);
                buf.put_u8(u8::from(w.commit));
                buf.put_i32(w.coordinator_epoch);
            }
            Request::ReplicaFetch(m) => {
                buf.put_i32(m.replica_id);
                buf.put_i32(m.max_wait_ms);
                buf.put_i32(m.min_bytes);
                buf.put_u16(m.fetches.len() as u16);
                for f in &m.fetches {
                    put_str(buf, &f.topic);
                    buf.put_i32(f.partition);
                    buf.put_i32(f.leader_epoch);
                    buf.put_i64(f.offset);
                    buf.put_i32(f.max_bytes);
                }
            }
        }
        Ok(())
    }

    /// Checks every string, count and size against the width of its length field.
    fn check_encodable(&self) -> Result<(), EncodeError> {
        let strs: Vec<&str> = match self {
            Request::Produce(p) | Request::IdempotentProduce(p) => vec![&p.topic],
            Request::InitProducerId => vec![],
            Request::CopyProduce(p) => vec![&p.topic, &p.writer],
            Request::Fetch(f) => vec![&f.topic],
            Request::MultiFetch(m) => m.fetches.iter().map(|f| f.topic.as_str()).collect(),
            Request::MultiFetchWait(m) => m.fetches.iter().map(|f| f.topic.as_str()).collect(),
            Request::MultiProduce(m) => m.entries.iter().map(|e| e.topic.as_str()).collect(),
            Request::Offsets(o) => vec![&o.topic],
            Request::Metadata(m) => m.topics.iter().map(String::as_str).collect(),
            Request::CreateTopic(c) => std::iter::once(c.topic.as_str())
                .chain(c.configs.iter().flat_map(|(k, v)| [k.as_str(), v.as_str()]))
                .collect(),
            Request::OffsetForLeaderEpoch(o) => vec![&o.topic],
            Request::RecordNumber(o) => vec![&o.topic],
            Request::DeleteRecords(d) => vec![&d.topic],
            Request::WriteTxnMarker(w) => vec![&w.topic],
            Request::ReadCommitted(c) => vec![&c.topic],
            Request::ReplicaFetch(m) => m.fetches.iter().map(|f| f.topic.as_str()).collect(),
        };
        if let Some(s) = strs.iter().find(|s| s.len() > usize::from(u16::MAX)) {
            return Err(EncodeError::StringTooLong { bytes: s.len() });
        }
        let count = match self {
            Request::MultiFetch(m) => m.fetches.len(),
            Request::MultiFetchWait(m) => m.fetches.len(),
            Request::MultiProduce(m) => m.entries.len(),
            Request::Metadata(m) => m.topics.len(),
            Request::CreateTopic(c) => c.configs.len(),
            Request::ReplicaFetch(m) => m.fetches.len(),
            _ => 0,
        };
        if count > usize::from(u16::MAX) {
            return Err(EncodeError::TooManyEntries { count });
        }
        let body_len = self.body_len();
        if body_len > u32::MAX as usize {
            return Err(EncodeError::FrameTooLarge { bytes: body_len });
        }
        Ok(())
    }
}

fn produce(r: &mut Reader) -> Result<ProduceRequest, DecodeError> {
    let topic = r.str("topic")?;
    let partition = r.i32("partition")?;
    let acks = Acks::decode(r)?;
    let messages = set(r)?;
    Ok(ProduceRequest { topic, partition, acks, messages })
}

fn fetch(r: &mut Reader) -> Result<FetchRequest, DecodeError> {
    Ok(FetchRequest {
        topic: r.str("topic")?,
        partition: r.i32("partition")?,
        offset: r.i64("offset")?,
        max_bytes: r.i32("max_bytes")?,
    })
}

/// `u16 count, count × fetch`.
fn fetches(r: &mut Reader) -> Result<Vec<FetchRequest>, DecodeError> {
    let count = usize::from(r.u16("fetch count")?);
    let mut fetches = Vec::with_capacity(r.capacity_for(count, FETCH_BYTES_MIN));
    for _ in 0..count {
        fetches.push(fetch(r)?);
    }
    Ok(fetches)
}

fn put_fetches(buf: &mut BytesMut, fetches: &[FetchRequest]) {
    buf.put_u16(fetches.len() as u16);
    fetches.iter().for_each(|f| put_fetch(buf, f));
}

fn fetch_len(f: &FetchRequest) -> usize {
    str_len(&f.topic) + 4 + 8 + 4
}

fn put_fetch(buf: &mut BytesMut, f: &FetchRequest) {
    put_str(buf, &f.topic);
    buf.put_i32(f.partition);
    buf.put_i64(f.offset);
    buf.put_i32(f.max_bytes);
}

/// `u32 set_size, set`.
fn set(r: &mut Reader) -> Result<Bytes, DecodeError> {
    let size = r.u32("set_size")? as usize;
    r.bytes("message set", size)
}

fn put_set(buf: &mut BytesMut, set: &Bytes) {
    put_size(buf, set.len());
    buf.put_slice(set);
}
