//! The one format Tributary uses on disk and on the wire (paper §3.1, "Simple storage" and
//! "Efficient transfer"): messages and MessageSets, addressed by logical byte offsets, and the
//! codecs of every request and response a broker speaks.
//!
//! This crate does no I/O. The broker stores exactly the bytes a producer sent and serves
//! exactly the bytes it stored, so the types here are views over byte buffers: validating a
//! MessageSet or iterating over it never copies a payload.
//!
//! Contracts are fixed by `docs/design.md` ("Wire format", "Requests").

pub mod compression;
mod error;
pub mod kafka;
mod message;
mod message_set;
pub mod record_batch;
mod records;
mod request;
mod response;
mod topic;
mod wire;

pub use error::{DecodeError, EncodeError, ErrorCode};
pub use message::{
    Codec, GAP_HEADER_BYTES, GAP_TAIL, MAGIC_ATTRIBUTES, MAGIC_BATCH, MAGIC_GAP, MAGIC_PLAIN,
    MessageRef, PLAIN_MESSAGE_OVERHEAD_BYTES, encode_batch_message, encode_message, gap_header,
    restamp_crc,
};
pub use message_set::{InvalidMessage, MessageSetIter, SetSummary, validate_message_set};
pub use records::{RecordCountError, records_in};
pub use request::{
    Acks, ApiKey, CopyProduceRequest, CreateTopicRequest, DELETE_TO_HIGH_WATERMARK,
    DeleteRecordsRequest, FetchRequest, IdempotentProduceRequest, MetadataRequest,
    MultiFetchRequest, MultiFetchWaitRequest, MultiProduceRequest, OffsetForLeaderEpochRequest,
    OffsetsRequest, ProducePartition, ProduceRequest, ReadCommittedRequest, RecordNumberRequest,
    ReplicaFetchPartition, ReplicaFetchRequest, Request, WriteTxnMarkerRequest,
};
pub use response::{
    AbortedTransaction, BrokerMetadata, CreateTopicResponse, DeleteRecordsResponse, FetchPart,
    FetchResponse, InitProducerIdResponse, MetadataResponse, MultiFetchResponse,
    MultiProduceResponse, OffsetForLeaderEpochResponse, OffsetsResponse, PartitionMetadata,
    ProducePart, ProduceResponse, REPLICA_PART_HEADER_BYTES, ReadCommittedResponse,
    RecordNumberResponse, ReplicaFetchPart, ReplicaFetchResponse, ReplicaPartHeader, Response,
    TopicMetadata, UNDEFINED_EPOCH, WriteTxnMarkerResponse, encode_replica_part_header,
    encode_response_header,
};
pub use topic::{InvalidTopicName, validate_topic_name};
pub use wire::{FRAME_SIZE_BYTES, array_at, i16_at, i32_at, i64_at, u16_at, u32_at, u64_at};

/// Default TCP port of a broker.
pub const DEFAULT_PORT: u16 = 6667;
/// `OFFSETS` time meaning "the end of the visible (flushed) log".
pub const OFFSETS_LATEST: i64 = -1;
/// `OFFSETS` time meaning "the start of the log": of its first segment, or in the object store
/// for a tiered topic.
pub const OFFSETS_EARLIEST: i64 = -2;
/// `OFFSETS` time meaning "the start of the log on the broker's disk" (Kafka's
/// earliest-local, KIP-1005): where a follower starts; `OFFSETS_EARLIEST` but for a tiered topic.
pub const OFFSETS_EARLIEST_LOCAL: i64 = -4;
/// The `replica_id` of a `REPLICA_FETCH` that reads another replica's bytes to repair a
/// damaged segment with: any replica answers it, and no leader takes it for a follower's
/// progress.
pub const REPAIR_READER_ID: i32 = -1;
/// `PRODUCE` partition meaning "the broker picks one of its partitions".
pub const ANY_PARTITION: i32 = -1;
