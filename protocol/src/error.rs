//! Error codes carried in responses, and the error of a decoder that met bad bytes.

use thiserror::Error;

/// The `i16` error code of every response (`docs/design.md`, "Error codes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i16)]
pub enum ErrorCode {
    Unknown = -1,
    None = 0,
    OffsetOutOfRange = 1,
    InvalidMessage = 2,
    WrongPartition = 3,
    InvalidFetchSize = 4,
    MessageTooLarge = 5,
    InvalidRequest = 6,
    UnknownTopic = 7,
    InvalidTopicName = 8,
    InvalidConfig = 9,
    NotLeader = 10,
    NotEnoughReplicas = 11,
    FencedLeaderEpoch = 12,
    RequestTimedOut = 13,
    /// The connection's principal may not do this (`docs/design.md`, "ACL file").
    AuthorizationFailed = 14,
    /// The broker's disk has no room for the append; nothing of it was kept. Fetches go on,
    /// and produces succeed again once there is room.
    StorageFull = 15,
    /// An idempotent producer's batch does not follow the last one the leader has of it
    /// on the partition (a batch between them is missing).
    OutOfOrderSequence = 16,
    /// An idempotent producer's epoch is older than one the leader has seen for its id.
    InvalidProducerEpoch = 17,
    /// A record the topic does not take: on a compacted topic, one without a key (or a
    /// message that is not a Kafka RecordBatch, which has none). The set is refused whole.
    InvalidRecord = 18,
    /// An idempotent producer's batch is in the log already, older than the last batches
    /// whose offsets the leader keeps: nothing was appended, and its offset is not known.
    DuplicateSequence = 19,
}

impl ErrorCode {
    /// Maps a code read off the wire; codes this version does not know become `Unknown`.
    pub fn from_i16(code: i16) -> ErrorCode {
        match code {
            0 => ErrorCode::None,
            1 => ErrorCode::OffsetOutOfRange,
            2 => ErrorCode::InvalidMessage,
            3 => ErrorCode::WrongPartition,
            4 => ErrorCode::InvalidFetchSize,
            5 => ErrorCode::MessageTooLarge,
            6 => ErrorCode::InvalidRequest,
            7 => ErrorCode::UnknownTopic,
            8 => ErrorCode::InvalidTopicName,
            9 => ErrorCode::InvalidConfig,
            10 => ErrorCode::NotLeader,
            11 => ErrorCode::NotEnoughReplicas,
            12 => ErrorCode::FencedLeaderEpoch,
            13 => ErrorCode::RequestTimedOut,
            14 => ErrorCode::AuthorizationFailed,
            15 => ErrorCode::StorageFull,
            16 => ErrorCode::OutOfOrderSequence,
            17 => ErrorCode::InvalidProducerEpoch,
            18 => ErrorCode::InvalidRecord,
            19 => ErrorCode::DuplicateSequence,
            _ => ErrorCode::Unknown,
        }
    }

    pub fn as_i16(self) -> i16 {
        self as i16
    }

    pub fn is_ok(self) -> bool {
        self == ErrorCode::None
    }

    pub fn description(self) -> &'static str {
        match self {
            ErrorCode::Unknown => "unknown server error",
            ErrorCode::None => "no error",
            ErrorCode::OffsetOutOfRange => "offset out of range",
            ErrorCode::InvalidMessage => "invalid message (CRC or framing)",
            ErrorCode::WrongPartition => "the topic has no such partition",
            ErrorCode::InvalidFetchSize => "invalid fetch size",
            ErrorCode::MessageTooLarge => "message too large",
            ErrorCode::InvalidRequest => "invalid request",
            ErrorCode::UnknownTopic => "unknown topic",
            ErrorCode::InvalidTopicName => "invalid topic name",
            ErrorCode::InvalidConfig => "invalid topic config",
            ErrorCode::NotLeader => "this broker does not lead the partition",
            ErrorCode::NotEnoughReplicas => "fewer in-sync replicas than min_insync_replicas",
            ErrorCode::FencedLeaderEpoch => "the leader epoch is not the current one",
            ErrorCode::RequestTimedOut => "not replicated within ack_timeout_ms",
            ErrorCode::AuthorizationFailed => "authorization failed",
            ErrorCode::StorageFull => "the broker's disk is full",
            ErrorCode::OutOfOrderSequence => "the producer's batch does not follow its last one",
            ErrorCode::InvalidProducerEpoch => "the producer's epoch is older than its current one",
            ErrorCode::InvalidRecord => "a compacted topic takes only records with a key",
            ErrorCode::DuplicateSequence => "the producer's batch is in the log already",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.description(), self.as_i16())
    }
}

/// Bytes that do not decode as what they claim to be.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("truncated: needed {needed} more bytes reading {what}")]
    Truncated { what: &'static str, needed: usize },
    #[error("{extra} unexpected bytes after the end of {what}")]
    TrailingBytes { what: &'static str, extra: usize },
    #[error("unknown request type {0}")]
    UnknownApiKey(u16),
    #[error("invalid {what}: {value}")]
    InvalidValue { what: &'static str, value: i64 },
    #[error("{what} is not UTF-8")]
    InvalidUtf8 { what: &'static str },
}

/// A request or response that cannot be put on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum EncodeError {
    #[error("a string of {bytes} bytes does not fit a u16 length")]
    StringTooLong { bytes: usize },
    #[error("{count} entries do not fit a u16 count")]
    TooManyEntries { count: usize },
    #[error("a frame of {bytes} bytes does not fit a u32 size")]
    FrameTooLarge { bytes: usize },
}
