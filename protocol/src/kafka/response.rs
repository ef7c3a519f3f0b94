//! Answers: a response header and body encoded by `kafka-protocol` in the request's version,
//! and Tributary's error codes as Kafka's.

use crate::ErrorCode;
use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::{Encodable, StrBytes};

use crate::kafka::request::Header;

/// Kafka's error codes the listener answers with.
pub mod code {
    pub const NONE: i16 = 0;
    pub const OFFSET_OUT_OF_RANGE: i16 = 1;
    pub const CORRUPT_MESSAGE: i16 = 2;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const LEADER_NOT_AVAILABLE: i16 = 5;
    pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    pub const REQUEST_TIMED_OUT: i16 = 7;
    pub const MESSAGE_TOO_LARGE: i16 = 10;
    pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    pub const NOT_COORDINATOR: i16 = 16;
    pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
    pub const NOT_ENOUGH_REPLICAS: i16 = 19;
    pub const INVALID_REQUIRED_ACKS: i16 = 21;
    pub const ILLEGAL_GENERATION: i16 = 22;
    pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
    pub const INVALID_GROUP_ID: i16 = 24;
    pub const UNKNOWN_MEMBER_ID: i16 = 25;
    pub const INVALID_SESSION_TIMEOUT: i16 = 26;
    pub const REBALANCE_IN_PROGRESS: i16 = 27;
    pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
    pub const GROUP_AUTHORIZATION_FAILED: i16 = 30;
    pub const UNSUPPORTED_VERSION: i16 = 35;
    pub const TOPIC_ALREADY_EXISTS: i16 = 36;
    pub const INVALID_PARTITIONS: i16 = 37;
    pub const INVALID_REPLICATION_FACTOR: i16 = 38;
    pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
    pub const INVALID_CONFIG: i16 = 40;
    pub const INVALID_REQUEST: i16 = 42;
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
    pub const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
    pub const INVALID_PRODUCER_EPOCH: i16 = 47;
    pub const INVALID_TXN_STATE: i16 = 48;
    pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
    pub const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
    pub const CONCURRENT_TRANSACTIONS: i16 = 51;
    pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
    pub const KAFKA_STORAGE_ERROR: i16 = 56;
    pub const REASSIGNMENT_IN_PROGRESS: i16 = 60;
    pub const NON_EMPTY_GROUP: i16 = 68;
    pub const GROUP_ID_NOT_FOUND: i16 = 69;
    pub const MEMBER_ID_REQUIRED: i16 = 79;
    pub const PREFERRED_LEADER_NOT_AVAILABLE: i16 = 80;
    pub const FENCED_INSTANCE_ID: i16 = 82;
    pub const ELECTION_NOT_NEEDED: i16 = 84;
    pub const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;
    pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
    pub const INVALID_RECORD: i16 = 87;
    pub const PRODUCER_FENCED: i16 = 90;
    pub const OPERATION_NOT_ATTEMPTED: i16 = 55;
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
}

/// Tributary's error code as Kafka's nearest.
pub fn kafka_error(error: ErrorCode) -> i16 {
    match error {
        ErrorCode::None => code::NONE,
        ErrorCode::OffsetOutOfRange => code::OFFSET_OUT_OF_RANGE,
        ErrorCode::InvalidMessage => code::CORRUPT_MESSAGE,
        ErrorCode::WrongPartition | ErrorCode::UnknownTopic => code::UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode::MessageTooLarge => code::MESSAGE_TOO_LARGE,
        ErrorCode::InvalidTopicName => code::INVALID_TOPIC_EXCEPTION,
        ErrorCode::InvalidConfig => code::INVALID_CONFIG,
        ErrorCode::NotLeader | ErrorCode::FencedLeaderEpoch => code::NOT_LEADER_OR_FOLLOWER,
        ErrorCode::NotEnoughReplicas => code::NOT_ENOUGH_REPLICAS,
        ErrorCode::RequestTimedOut => code::REQUEST_TIMED_OUT,
        ErrorCode::AuthorizationFailed => code::TOPIC_AUTHORIZATION_FAILED,
        ErrorCode::StorageFull => code::KAFKA_STORAGE_ERROR,
        ErrorCode::InvalidRequest | ErrorCode::InvalidFetchSize => code::INVALID_REQUEST,
        ErrorCode::OutOfOrderSequence => code::OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode::InvalidProducerEpoch => code::INVALID_PRODUCER_EPOCH,
        ErrorCode::InvalidRecord => code::INVALID_RECORD,
        ErrorCode::DuplicateSequence => code::DUPLICATE_SEQUENCE_NUMBER,
        _ => code::UNKNOWN_SERVER_ERROR,
    }
}

/// An answer that cannot be encoded: a programming error, logged, and the connection closed.
pub fn unencodable(
    api: ApiKey,
    version: i16,
    e: impl std::fmt::Display,
) -> crate::kafka::request::Malformed {
    tracing::error!(?api, version, error = %e, "cannot encode a Kafka answer");
    crate::kafka::request::Malformed("an answer that does not encode")
}

/// The frame of an answer to `header`: size, response header (v0, or v1 in a flexible
/// version; ApiVersions always v0), body.
pub fn encode<R: Encodable>(
    api: ApiKey,
    header: &Header,
    body: &R,
) -> Result<BytesMut, crate::kafka::request::Malformed> {
    encode_version(api, header.version, header.correlation_id, body)
}

pub fn encode_version<R: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &R,
) -> Result<BytesMut, crate::kafka::request::Malformed> {
    let header_version = api.response_header_version(version);
    let response_header = ResponseHeader::default().with_correlation_id(correlation_id);
    let fail = |e| unencodable(api, version, e);
    let size = response_header.compute_size(header_version).map_err(fail)?
        + body.compute_size(version).map_err(fail)?;
    let mut frame = BytesMut::with_capacity(4 + size);
    frame.put_u32(u32::try_from(size).map_err(|e| unencodable(api, version, e))?);
    response_header.encode(&mut frame, header_version).map_err(fail)?;
    body.encode(&mut frame, version).map_err(fail)?;
    Ok(frame)
}

pub fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}
