//! The simple consumer (paper §3.1, "a consumer … issues asynchronous pull requests"): fetch
//! and multifetch by byte offset from one broker, long polls that wait at the end of the log
//! for new data ([`SimpleConsumer::fetch_wait`], [`SimpleConsumer::multi_fetch_wait`]), and
//! `OFFSETS` to find where to start. The caller keeps its own position: every message says
//! where to resume after it.
//!
//! **A message larger than the fetch size** is handled by growing the fetch: when a fetch
//! returns only the start of one message, it is fetched again with room for exactly that
//! message, up to [`SimpleConsumerConfig::fetch_bytes_max`]. A message larger than that cap is
//! a [`ConsumerError::MessageTooLarge`], never a silent stall or skip.

mod error;
mod messages;

use std::str::FromStr;
use std::time::{Duration, Instant};

use protocol::{ApiKey, ErrorCode, FetchPart, FetchRequest, MessageSetIter};

pub use error::ConsumerError;
pub use messages::{
    ConsumedMessage, DECOMPRESSED_BYTES_MAX_DEFAULT, FetchedMessages, Messages, RecordFields,
};

use crate::{ClientError, Connection, ConnectionConfig};

/// Bytes of a message's length field.
const LENGTH_BYTES: u64 = 4;

#[derive(Debug, Clone)]
pub struct SimpleConsumerConfig {
    /// Bytes asked for per fetch.
    pub fetch_bytes: u32,
    /// The most a fetch grows to, to take in one large message.
    pub fetch_bytes_max: u32,
    /// The most one compressed wrapper may inflate to.
    pub decompressed_bytes_max: usize,
    /// TLS to the broker ([`crate::ConnectionConfig::tls`]); `None`: plaintext.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// Read only committed transactions (Kafka's `isolation.level=read_committed`): a fetch
    /// that holds a transaction's batch stops at the partition's last stable offset and
    /// leaves out aborted transactions' batches. Other fetches cost nothing more.
    pub read_committed: bool,
}

impl Default for SimpleConsumerConfig {
    fn default() -> SimpleConsumerConfig {
        SimpleConsumerConfig {
            fetch_bytes: 1 << 20,
            fetch_bytes_max: 16 << 20,
            decompressed_bytes_max: DECOMPRESSED_BYTES_MAX_DEFAULT,
            tls: None,
            read_committed: false,
        }
    }
}

impl SimpleConsumerConfig {
    pub fn validate(&self) -> Result<(), ConsumerError> {
        let invalid = |reason: &str| Err(ConsumerError::InvalidConfig { reason: reason.into() });
        if self.fetch_bytes < 64 {
            return invalid("fetch_bytes must be at least 64");
        }
        if self.fetch_bytes_max < self.fetch_bytes || self.fetch_bytes_max > i32::MAX as u32 {
            return invalid("fetch_bytes_max must be between fetch_bytes and 2^31 - 1");
        }
        Ok(())
    }
}

/// What `OFFSETS` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetTime {
    /// The start of the log still kept (in the object store, for a tiered topic).
    Earliest,
    /// The start of the log on the leader's disk: [`OffsetTime::Earliest`] but for a tiered
    /// topic, whose older segments are in the object store.
    EarliestLocal,
    /// The end of the visible (flushed) log: where new messages will appear.
    Latest,
    /// Base offsets of segments last modified at or before this time (ms since the epoch).
    Before(i64),
}

impl OffsetTime {
    pub fn as_request_time(self) -> i64 {
        match self {
            OffsetTime::Earliest => protocol::OFFSETS_EARLIEST,
            OffsetTime::EarliestLocal => protocol::OFFSETS_EARLIEST_LOCAL,
            OffsetTime::Latest => protocol::OFFSETS_LATEST,
            OffsetTime::Before(ms) => ms,
        }
    }
}

impl FromStr for OffsetTime {
    type Err = String;

    /// `earliest`, `earliest-local`, `latest`, or milliseconds since the epoch.
    fn from_str(s: &str) -> Result<OffsetTime, String> {
        match s {
            "earliest" | "smallest" => Ok(OffsetTime::Earliest),
            "earliest-local" => Ok(OffsetTime::EarliestLocal),
            "latest" | "largest" => Ok(OffsetTime::Latest),
            ms => match ms.parse::<i64>() {
                Ok(ms) if ms >= 0 => Ok(OffsetTime::Before(ms)),
                _ => Err(format!(
                    "{s:?} is not earliest, earliest-local, latest or a time in ms since the epoch"
                )),
            },
        }
    }
}

/// Where one partition's fetch starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// A consumer of one broker that keeps no state of its own.
#[derive(Debug, Clone)]
pub struct SimpleConsumer {
    conn: Connection,
    config: SimpleConsumerConfig,
}

impl SimpleConsumer {
    pub async fn connect(
        addr: &str,
        config: SimpleConsumerConfig,
    ) -> Result<SimpleConsumer, ConsumerError> {
        config.validate()?;
        let conn = Connection::connect_with(addr, ConnectionConfig::with_tls(config.tls.clone()))
            .await
            .map_err(|source| ConsumerError::Connection { source })?;
        Ok(SimpleConsumer { conn, config })
    }

    pub fn with_connection(
        conn: Connection,
        config: SimpleConsumerConfig,
    ) -> Result<SimpleConsumer, ConsumerError> {
        config.validate()?;
        Ok(SimpleConsumer { conn, config })
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    pub fn config(&self) -> &SimpleConsumerConfig {
        &self.config
    }

    /// Messages from `offset` on, at most `fetch_bytes` of them (more for one large message).
    /// Empty at the end of the visible log.
    pub async fn fetch(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<FetchedMessages, ConsumerError> {
        self.fetch_sized(topic, partition, offset, self.config.fetch_bytes).await
    }

    async fn fetch_sized(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        mut fetch_bytes: u32,
    ) -> Result<FetchedMessages, ConsumerError> {
        // Each round asks for strictly more bytes, capped, so this ends.
        loop {
            let set = self
                .conn
                .fetch(topic, partition, offset, fetch_bytes as i32)
                .await
                .map_err(|source| request_error(topic, partition, offset, source))?;
            match self.growth(topic, partition, offset, &set, fetch_bytes)? {
                Some(bigger) => fetch_bytes = bigger,
                None => return self.committed(self.fetched(topic, partition, offset, set)).await,
            }
        }
    }

    /// The fetch size that takes in a first message `set` holds only the start of, if any.
    fn growth(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        set: &[u8],
        fetch_bytes: u32,
    ) -> Result<Option<u32>, ConsumerError> {
        let mut messages = MessageSetIter::new(set, offset);
        if set.is_empty() || messages.next().is_some() {
            return Ok(None); // at the end, or a whole first message (or an invalid one)
        }
        let Some(length) = messages.next_length() else { return Ok(None) };
        let message_bytes = LENGTH_BYTES + u64::from(length);
        if message_bytes <= u64::from(fetch_bytes) {
            return Ok(None); // cut short by the broker, not by our size: nothing to grow
        }
        let fetch_bytes_max = self.config.fetch_bytes_max;
        if message_bytes > u64::from(fetch_bytes_max) {
            let topic = topic.to_owned();
            return Err(ConsumerError::MessageTooLarge {
                topic,
                partition,
                offset,
                message_bytes,
                fetch_bytes_max,
            });
        }
        tracing::debug!(%topic, partition, offset, message_bytes, "growing the fetch for a large message");
        Ok(Some(message_bytes as u32))
    }

    fn fetched(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        set: bytes::Bytes,
    ) -> FetchedMessages {
        FetchedMessages::new(topic, partition, offset, set)
            .with_decompressed_bytes_max(self.config.decompressed_bytes_max)
    }

    /// `fetched` as a reader of committed transactions takes it, with
    /// [`SimpleConsumerConfig::read_committed`] and a transaction's batch in it: up to the last
    /// stable offset, without aborted transactions (`READ_COMMITTED` asks the leader).
    async fn committed(&self, fetched: FetchedMessages) -> Result<FetchedMessages, ConsumerError> {
        if !self.config.read_committed || !fetched.has_transactional_batch() {
            return Ok(fetched);
        }
        let (topic, partition, from) =
            (fetched.topic(), fetched.partition(), fetched.base_offset());
        let to = from + fetched.bytes().len() as i64;
        let view = self
            .conn
            .read_committed(topic, partition, from, to)
            .await
            .map_err(|source| request_error(topic, partition, from, source))?;
        Ok(fetched.committed(view.last_stable, view.aborted))
    }

    /// One `MULTIFETCH` for several partitions; each answer may fail on its own. The outer
    /// error is a failed connection.
    pub async fn multi_fetch(
        &self,
        starts: &[PartitionOffset],
    ) -> Result<Vec<Result<FetchedMessages, ConsumerError>>, ConsumerError> {
        let parts = self
            .conn
            .multi_fetch(self.fetch_requests(starts))
            .await
            .map_err(|source| ConsumerError::Connection { source })?;
        self.answers(starts, parts, ApiKey::MultiFetch).await
    }

    /// A long poll (`MULTIFETCH_WAIT`) for several partitions: answered as soon as
    /// `min_bytes` are visible over all of them, or empty after `max_wait_ms`. A broker
    /// that answers empty early (it has too many long polls waiting, or is shutting down)
    /// is waited out here, so a caller looping on this never spins. Requests queued behind
    /// it on this consumer's connection wait for it.
    pub async fn multi_fetch_wait(
        &self,
        starts: &[PartitionOffset],
        max_wait_ms: u32,
        min_bytes: u32,
    ) -> Result<Vec<Result<FetchedMessages, ConsumerError>>, ConsumerError> {
        let max_wait = Duration::from_millis(max_wait_ms.into());
        let invalid = |what: &str| ConsumerError::InvalidConfig {
            reason: format!("{what} must be below 2^31"),
        };
        let max_wait_ms = i32::try_from(max_wait_ms).map_err(|_| invalid("max_wait_ms"))?;
        let min_bytes = i32::try_from(min_bytes).map_err(|_| invalid("min_bytes"))?;
        let started = Instant::now();
        let parts = self
            .conn
            .multi_fetch_wait(max_wait_ms, min_bytes, self.fetch_requests(starts))
            .await
            .map_err(|source| ConsumerError::Connection { source })?;
        let idle = parts.iter().all(|p| p.error.is_ok() && p.messages.is_empty());
        if idle && let Some(rest) = max_wait.checked_sub(started.elapsed()) {
            tokio::time::sleep(rest).await;
        }
        self.answers(starts, parts, ApiKey::MultiFetchWait).await
    }

    /// Messages from `offset` on, like [`SimpleConsumer::fetch`], but at the end of the
    /// visible log a long poll: it waits up to `max_wait_ms` for the first new message and
    /// returns as soon as it is visible; empty if none came.
    pub async fn fetch_wait(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait_ms: u32,
    ) -> Result<FetchedMessages, ConsumerError> {
        let start = PartitionOffset { topic: topic.to_owned(), partition, offset };
        let mut answers =
            self.multi_fetch_wait(std::slice::from_ref(&start), max_wait_ms, 1).await?;
        answers.pop().expect("one answer per part, checked")
    }

    fn fetch_requests(&self, starts: &[PartitionOffset]) -> Vec<FetchRequest> {
        starts
            .iter()
            .map(|s| FetchRequest {
                topic: s.topic.clone(),
                partition: s.partition,
                offset: s.offset,
                max_bytes: self.config.fetch_bytes as i32,
            })
            .collect()
    }

    /// Each part of a multifetch's answer as messages or its own error; a part holding only
    /// the start of a large message is fetched again, grown.
    async fn answers(
        &self,
        starts: &[PartitionOffset],
        parts: Vec<FetchPart>,
        api: ApiKey,
    ) -> Result<Vec<Result<FetchedMessages, ConsumerError>>, ConsumerError> {
        if parts.len() != starts.len() {
            let reason = format!("{} answers to {} fetches", parts.len(), starts.len());
            let source = ClientError::Closed { addr: self.conn.addr().to_owned(), reason };
            return Err(ConsumerError::Connection { source });
        }
        let mut results = Vec::with_capacity(parts.len());
        for (start, FetchPart { error, messages }) in starts.iter().zip(parts) {
            let (topic, partition, offset) = (start.topic.as_str(), start.partition, start.offset);
            let result = if error.is_ok() {
                match self.growth(topic, partition, offset, &messages, self.config.fetch_bytes) {
                    Ok(None) => {
                        self.committed(self.fetched(topic, partition, offset, messages)).await
                    }
                    Ok(Some(bigger)) => self.fetch_sized(topic, partition, offset, bigger).await,
                    Err(e) => Err(e),
                }
            } else {
                let source = ClientError::Broker { api, code: error };
                Err(request_error(topic, partition, offset, source))
            };
            results.push(result);
        }
        Ok(results)
    }

    /// `OFFSETS`: one offset for `Earliest` and `Latest`, up to `max_number` segment bases,
    /// newest first, for `Before`.
    pub async fn offsets(
        &self,
        topic: &str,
        partition: i32,
        time: OffsetTime,
        max_number: i32,
    ) -> Result<Vec<i64>, ConsumerError> {
        self.conn
            .offsets(topic, partition, time.as_request_time(), max_number)
            .await
            .map_err(|source| ConsumerError::Request { topic: topic.to_owned(), partition, source })
    }

    pub async fn earliest_offset(&self, topic: &str, partition: i32) -> Result<i64, ConsumerError> {
        self.single_offset(topic, partition, OffsetTime::Earliest).await
    }

    pub async fn latest_offset(&self, topic: &str, partition: i32) -> Result<i64, ConsumerError> {
        self.single_offset(topic, partition, OffsetTime::Latest).await
    }

    /// The Kafka record number of the message at byte `offset` (of the next record at the
    /// log's end): how Kafka clients number what is before it.
    pub async fn record_number(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<i64, ConsumerError> {
        self.conn
            .record_number(topic, partition, offset)
            .await
            .map_err(|source| ConsumerError::Request { topic: topic.to_owned(), partition, source })
    }

    async fn single_offset(
        &self,
        topic: &str,
        partition: i32,
        time: OffsetTime,
    ) -> Result<i64, ConsumerError> {
        let offsets = self.offsets(topic, partition, time, 1).await?;
        offsets.first().copied().ok_or_else(|| ConsumerError::Request {
            topic: topic.to_owned(),
            partition,
            source: ClientError::Closed {
                addr: self.conn.addr().to_owned(),
                reason: "OFFSETS answered with no offset".into(),
            },
        })
    }
}

fn request_error(topic: &str, partition: i32, offset: i64, source: ClientError) -> ConsumerError {
    let topic = topic.to_owned();
    match source.code() {
        Some(ErrorCode::OffsetOutOfRange) => {
            ConsumerError::OffsetOutOfRange { topic, partition, offset }
        }
        _ => ConsumerError::Request { topic, partition, source },
    }
}
