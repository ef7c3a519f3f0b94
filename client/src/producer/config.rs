//! What a producer is configured with: batching, acknowledgement, compression, memory and
//! retry limits. Every limit carries its unit in its name.

use protocol::{Acks, Codec};

use crate::Partitioner;
use crate::compression::SUPPORTED_CODECS;
use crate::producer::ProducerError;

/// What `send` does when the producer's buffer is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BufferFull {
    /// Wait until acknowledged batches free enough room.
    #[default]
    Block,
    /// Fail at once with [`ProducerError::BufferFull`].
    Error,
}

#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// 0: fire and forget; 1: after the broker appended; 2: after it flushed to disk.
    pub acks: Acks,
    /// A batch is sent once it holds this many messages…
    pub batch_messages: usize,
    /// …or this many encoded bytes (a single larger message travels alone)…
    pub batch_bytes: usize,
    /// …or its first message has waited this long.
    pub linger_ms: u64,
    /// `Codec::None`, or a codec that wraps each batch into one magic-1 message.
    pub compression: Codec,
    pub partitioner: Partitioner,
    /// Encoded bytes of messages accepted but not yet acknowledged, across all partitions.
    pub buffer_bytes: usize,
    pub buffer_full: BufferFull,
    /// Messages waiting for one partition's sender, at most (a second bound besides bytes).
    pub queue_messages_max: usize,
    /// Largest encoded message accepted; the broker's `max_message_bytes` plus 4 by default.
    pub message_bytes_max: usize,
    /// Each partition's batches go as an idempotent producer's (on by default, as in Kafka
    /// since 3.0; with acks ≥ 1, to a partition other than −1, of plain messages — otherwise
    /// they go as they are): a batch retried after a lost answer or a failover is
    /// acknowledged where the leader appended it, not appended twice. Each batch is then one
    /// magic-2 message, which its messages are acknowledged (and consumed) at. Off: the
    /// messages go as they were framed, byte for byte (as the mirror copies them).
    pub idempotence: bool,
    /// Extra attempts of a batch after a connection failure (without `idempotence`, acks ≥ 1
    /// may then duplicate).
    pub retries_max: u32,
    /// First pause before a retry; doubles each attempt up to `retry_backoff_max_ms`.
    pub retry_backoff_ms: u64,
    pub retry_backoff_max_ms: u64,
    pub connect_timeout_ms: u64,
    /// An acknowledgement later than this counts as a connection failure.
    pub request_timeout_ms: u64,
    /// A topic's broker list is asked for again after this long.
    pub metadata_refresh_ms: u64,
    /// TLS to the brokers ([`crate::ConnectionConfig::tls`]); `None`: plaintext.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

impl Default for ProducerConfig {
    fn default() -> ProducerConfig {
        ProducerConfig {
            acks: Acks::Written,
            batch_messages: 500,
            batch_bytes: 256 << 10,
            linger_ms: 5,
            compression: Codec::None,
            partitioner: Partitioner::Random,
            buffer_bytes: 32 << 20,
            buffer_full: BufferFull::Block,
            queue_messages_max: 10_000,
            message_bytes_max: (1 << 20) + 4,
            idempotence: true,
            retries_max: 8,
            retry_backoff_ms: 50,
            retry_backoff_max_ms: 2_000,
            connect_timeout_ms: 5_000,
            request_timeout_ms: 30_000,
            metadata_refresh_ms: 60_000,
            tls: None,
        }
    }
}

impl ProducerConfig {
    /// Checks that the limits make sense together.
    pub fn validate(&self) -> Result<(), ProducerError> {
        let invalid = |reason: String| Err(ProducerError::InvalidConfig { reason });
        if self.batch_messages == 0 || self.batch_bytes == 0 {
            return invalid("batch_messages and batch_bytes must be at least 1".into());
        }
        if self.queue_messages_max == 0 {
            return invalid("queue_messages_max must be at least 1".into());
        }
        if self.buffer_bytes > u32::MAX as usize {
            return invalid(format!("buffer_bytes ({}) exceeds 4 GiB", self.buffer_bytes));
        }
        if self.buffer_bytes < self.message_bytes_max {
            return invalid(format!(
                "buffer_bytes ({}) must hold at least one message of message_bytes_max ({})",
                self.buffer_bytes, self.message_bytes_max
            ));
        }
        if self.compression != Codec::None && !SUPPORTED_CODECS.contains(&self.compression) {
            return invalid(format!("compression {:?} is not supported", self.compression));
        }
        if self.retry_backoff_ms > self.retry_backoff_max_ms {
            return invalid("retry_backoff_ms exceeds retry_backoff_max_ms".into());
        }
        if self.request_timeout_ms == 0 || self.connect_timeout_ms == 0 {
            return invalid("timeouts must be at least 1 ms".into());
        }
        Ok(())
    }
}
