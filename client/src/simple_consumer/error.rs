//! The simple consumer's errors, each naming the topic and partition (and offset, where one
//! message is at fault).

use protocol::InvalidMessage;
use thiserror::Error;

use crate::ClientError;
use crate::compression::CompressionError;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConsumerError {
    #[error("invalid consumer config: {reason}")]
    InvalidConfig { reason: String },
    #[error("{source}")]
    Connection { source: ClientError },
    #[error("{topic}-{partition}: {source}")]
    Request { topic: String, partition: i32, source: ClientError },
    #[error("{topic}-{partition}: offset {offset} is out of range")]
    OffsetOutOfRange { topic: String, partition: i32, offset: i64 },
    /// A CRC mismatch or bad framing: never skipped, since nothing after it can be trusted.
    #[error("{topic}-{partition}: {source}")]
    InvalidMessage { topic: String, partition: i32, source: InvalidMessage },
    #[error("{topic}-{partition}: inside the wrapper at offset {offset}: {source}")]
    InvalidInnerMessage { topic: String, partition: i32, offset: i64, source: InvalidMessage },
    #[error("{topic}-{partition}: wrapper message at offset {offset}: {reason}")]
    InvalidWrapper { topic: String, partition: i32, offset: i64, reason: &'static str },
    #[error("{topic}-{partition}: cannot decompress the wrapper at offset {offset}: {source}")]
    Decompress { topic: String, partition: i32, offset: i64, source: CompressionError },
    #[error(
        "{topic}-{partition}: the message at offset {offset} takes {message_bytes} bytes, more than fetch_bytes_max ({fetch_bytes_max})"
    )]
    MessageTooLarge {
        topic: String,
        partition: i32,
        offset: i64,
        message_bytes: u64,
        fetch_bytes_max: u32,
    },
}
