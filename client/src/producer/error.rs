//! The producer's errors. A batch's failure reaches every message in it, so the error is
//! `Clone` and shares its source.

use std::sync::Arc;

use thiserror::Error;

use crate::ClientError;
use crate::compression::CompressionError;
use crate::discovery::DiscoveryError;

#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum ProducerError {
    #[error("invalid producer config: {reason}")]
    InvalidConfig { reason: String },
    #[error("invalid topic name {topic:?}")]
    InvalidTopic { topic: String },
    #[error("message of {bytes} bytes for topic {topic} exceeds the limit of {limit_bytes}")]
    MessageTooLarge { topic: String, bytes: usize, limit_bytes: usize },
    #[error("invalid message for topic {topic}: {reason}")]
    InvalidMessage { topic: String, reason: String },
    #[error("producer buffer full ({limit} reached) sending to topic {topic}")]
    BufferFull { topic: String, limit: String },
    #[error("producer is closed")]
    Closed,
    #[error("cannot find brokers for topic {topic}: {source}")]
    Discovery { topic: String, source: DiscoveryError },
    #[error("partitioner chose index {index} of {partitions} partitions of topic {topic}")]
    PartitionOutOfRange { topic: String, index: usize, partitions: usize },
    #[error("cannot compress a batch for {topic}-{partition}: {source}")]
    Compression { topic: String, partition: i32, source: CompressionError },
    #[error("send to {topic}-{partition} at {addr} failed after {attempts} attempt(s): {source}")]
    Send { topic: String, partition: i32, addr: String, attempts: u32, source: Arc<ClientError> },
    #[error("cannot start the producer's runtime: {source}")]
    Runtime { source: Arc<std::io::Error> },
}

impl ProducerError {
    /// The broker's error code, if a broker answered the send with one.
    pub fn code(&self) -> Option<protocol::ErrorCode> {
        match self {
            ProducerError::Send { source, .. } => source.code(),
            _ => None,
        }
    }
}
