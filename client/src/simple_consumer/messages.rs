//! The messages of one fetched MessageSet, as a consumer reads them: every message's CRC is
//! checked, a partial message at the end (a fetch cut mid-message) is dropped, a compressed
//! wrapper is inflated into its inner messages, and a magic-2 message (a Kafka RecordBatch,
//! produced through a broker's Kafka listener) yields its records like a wrapper's inner
//! messages: the record's value as the payload, its key, headers and timestamp beside.
//!
//! Each item says where to resume after it (`docs/design.md`, "MessageSets and offsets": a
//! wrapper is one message in the log and its offset is the only addressable position of the
//! messages inside). An inner message
//! carries its wrapper's `offset`; its `next_offset` is the wrapper's own offset until the last
//! inner message, whose `next_offset` is the offset after the wrapper. So a consumer that
//! stops mid-wrapper and resumes from the last `next_offset` sees the wrapper again
//! (at-least-once), and one that read it all moves past it.

use bytes::Bytes;
use protocol::record_batch::{RecordBatchRef, Records};
use protocol::{AbortedTransaction, MAGIC_BATCH, MAGIC_GAP, MessageRef, MessageSetIter};

use crate::compression;
use crate::simple_consumer::ConsumerError;

/// Bytes one wrapper may inflate to, by default.
pub const DECOMPRESSED_BYTES_MAX_DEFAULT: usize = 64 << 20;

/// One message delivered to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedMessage {
    /// Offset of the message — of its wrapper, for a message that came compressed.
    pub offset: i64,
    /// Where to resume after this message.
    pub next_offset: i64,
    pub payload: Bytes,
    /// For a record of a Kafka RecordBatch: what it carries beside its value.
    pub record: Option<RecordFields>,
}

/// What a Kafka record carries beside its value (a null value is an empty payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordFields {
    pub key: Option<Bytes>,
    pub headers: Vec<(Bytes, Option<Bytes>)>,
    /// Milliseconds since the epoch: the producer's create time, or the broker's append time.
    pub timestamp: i64,
}

impl ConsumedMessage {
    /// A plain message (no Kafka record fields).
    pub fn plain(offset: i64, next_offset: i64, payload: Bytes) -> ConsumedMessage {
        ConsumedMessage { offset, next_offset, payload, record: None }
    }
}

/// A fetched MessageSet of one partition, starting at `base_offset`.
#[derive(Debug, Clone)]
pub struct FetchedMessages {
    topic: String,
    partition: i32,
    base_offset: i64,
    set: Bytes,
    decompressed_bytes_max: usize,
    /// For a reader of committed transactions: the aborted transactions whose batches it
    /// drops ([`FetchedMessages::committed`]).
    aborted: Vec<AbortedTransaction>,
}

impl FetchedMessages {
    pub fn new(topic: &str, partition: i32, base_offset: i64, set: Bytes) -> FetchedMessages {
        FetchedMessages {
            topic: topic.to_owned(),
            partition,
            base_offset,
            set,
            decompressed_bytes_max: DECOMPRESSED_BYTES_MAX_DEFAULT,
            aborted: Vec::new(),
        }
    }

    /// Only what a reader of committed transactions reads: the messages before the
    /// partition's last stable offset (a byte offset), without the batches of `aborted`
    /// transactions (each a producer's batches from its first until its abort marker).
    pub fn committed(mut self, last_stable: i64, aborted: Vec<AbortedTransaction>) -> Self {
        let keep = usize::try_from(last_stable - self.base_offset).unwrap_or(0);
        if keep < self.set.len() {
            self.set.truncate(keep);
        }
        self.aborted = aborted;
        self
    }

    /// Whether the set holds a batch of a transaction (whose reader of committed transactions
    /// must learn which are aborted, and where the last stable offset is).
    pub fn has_transactional_batch(&self) -> bool {
        MessageSetIter::new(&self.set, self.base_offset)
            .map_while(Result::ok)
            .any(|(_, m)| m.magic == MAGIC_BATCH && batch_is_transactional(m.payload))
    }

    /// Fails a wrapper that would inflate past `bytes`.
    pub fn with_decompressed_bytes_max(mut self, bytes: usize) -> FetchedMessages {
        self.decompressed_bytes_max = bytes;
        self
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn partition(&self) -> i32 {
        self.partition
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    /// The raw bytes as the broker sent them.
    pub fn bytes(&self) -> &Bytes {
        &self.set
    }

    /// No bytes at all: the fetch was at the end of the visible log.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    pub fn iter(&self) -> Messages<'_> {
        Messages { fetched: self, position: 0, inner: None, failed: false }
    }

    /// Where a consumer resumes once it has taken every message of the fetch: after its last
    /// whole message, past what yields none (a compacted topic's gaps, emptied batches).
    pub fn end_offset(&self) -> i64 {
        let mut messages = self.iter();
        while let Some(Ok(_)) = messages.next() {}
        messages.next_offset()
    }
}

impl<'a> IntoIterator for &'a FetchedMessages {
    type Item = Result<ConsumedMessage, ConsumerError>;
    type IntoIter = Messages<'a>;

    fn into_iter(self) -> Messages<'a> {
        self.iter()
    }
}

/// Iterates the messages of a [`FetchedMessages`]; after an `Err` it ends.
#[derive(Debug)]
pub struct Messages<'a> {
    fetched: &'a FetchedMessages,
    /// Bytes of whole top-level messages already read.
    position: usize,
    inner: Option<Wrapper>,
    failed: bool,
}

/// Whether a RecordBatch's attributes say it is part of a transaction.
fn batch_is_transactional(batch: &[u8]) -> bool {
    batch.get(21..23).is_some_and(|a| i16::from_be_bytes([a[0], a[1]]) & (1 << 4) != 0)
}

/// The inflated inner set of the wrapper being read, or the records of a batch.
#[derive(Debug)]
struct Wrapper {
    set: Bytes,
    position: usize,
    offset: i64,
    next_offset: i64,
    /// A batch's records, and how many are still to read.
    batch: Option<(Records, usize)>,
}

impl Messages<'_> {
    /// Where to resume after the messages yielded so far.
    pub fn next_offset(&self) -> i64 {
        match &self.inner {
            Some(wrapper) if !wrapper.is_done() => wrapper.offset,
            _ => self.fetched.base_offset + self.position as i64,
        }
    }

    fn fail(&mut self, error: ConsumerError) -> Option<Result<ConsumedMessage, ConsumerError>> {
        self.failed = true;
        Some(Err(error))
    }

    /// The next message of the wrapper being read; `None` once it is used up.
    fn next_inner(&mut self) -> Option<Result<ConsumedMessage, ConsumerError>> {
        let fetched = self.fetched;
        let wrapper = self.inner.as_mut()?;
        if wrapper.batch.is_some() {
            return self.next_record();
        }
        let (topic, partition, offset) = (fetched.topic.clone(), fetched.partition, wrapper.offset);
        let rest = &wrapper.set[wrapper.position..];
        match MessageSetIter::new(rest, 0).next() {
            Some(Ok((_, message))) if message.is_compressed() => {
                let reason = "holds another compressed message";
                self.fail(ConsumerError::InvalidWrapper { topic, partition, offset, reason })
            }
            Some(Ok((_, message))) => {
                wrapper.position += message.size_bytes();
                let last = wrapper.position == wrapper.set.len();
                let next_offset = if last { wrapper.next_offset } else { wrapper.offset };
                let payload = wrapper.set.slice_ref(message.payload);
                Some(Ok(ConsumedMessage::plain(offset, next_offset, payload)))
            }
            Some(Err(source)) => {
                self.fail(ConsumerError::InvalidInnerMessage { topic, partition, offset, source })
            }
            None if rest.is_empty() => {
                self.inner = None;
                None
            }
            None => {
                let reason = "inner message set ends in a partial message";
                self.fail(ConsumerError::InvalidWrapper { topic, partition, offset, reason })
            }
        }
    }

    /// The next record of the batch being read; `None` once it is used up.
    fn next_record(&mut self) -> Option<Result<ConsumedMessage, ConsumerError>> {
        let fetched = self.fetched;
        let wrapper = self.inner.as_mut()?;
        let (records, left) = wrapper.batch.as_mut()?;
        if *left == 0 {
            self.inner = None;
            return None;
        }
        let (topic, partition, offset) = (fetched.topic.clone(), fetched.partition, wrapper.offset);
        let read = records.iter_at(wrapper.position, *left).next();
        match read {
            Some(Ok(record)) => {
                *left -= 1;
                wrapper.position = record.span.1;
                let next_offset = if *left == 0 { wrapper.next_offset } else { wrapper.offset };
                let bytes = records.bytes();
                let payload = record.value.map_or_else(Bytes::new, |v| bytes.slice_ref(v));
                let fields = RecordFields {
                    key: record.key.map(|k| bytes.slice_ref(k)),
                    headers: record
                        .headers
                        .iter()
                        .map(|(k, v)| (bytes.slice_ref(k), v.map(|v| bytes.slice_ref(v))))
                        .collect(),
                    timestamp: record.timestamp,
                };
                Some(Ok(ConsumedMessage { offset, next_offset, payload, record: Some(fields) }))
            }
            Some(Err(e)) => {
                tracing::debug!(%topic, partition, offset, error = %e, "a record batch's records do not read");
                let reason = "a record batch whose records do not read";
                self.fail(ConsumerError::InvalidWrapper { topic, partition, offset, reason })
            }
            None => {
                let reason = "a record batch with fewer records than it counts";
                self.fail(ConsumerError::InvalidWrapper { topic, partition, offset, reason })
            }
        }
    }

    /// Opens the magic-2 message read at `offset`, ending at `next_offset`. A control batch (a
    /// transaction marker) holds no records for the caller.
    fn open_batch(
        &mut self,
        offset: i64,
        next_offset: i64,
        message: MessageRef<'_>,
    ) -> Result<(), ConsumerError> {
        let fetched = self.fetched;
        let (topic, partition) = (fetched.topic.clone(), fetched.partition);
        let invalid = |reason| ConsumerError::InvalidWrapper {
            topic: topic.clone(),
            partition,
            offset,
            reason,
        };
        let batch = RecordBatchRef::parse(message.payload)
            .map_err(|_| invalid("a record batch that does not parse"))?;
        let records = batch
            .records(fetched.decompressed_bytes_max)
            .map_err(|_| invalid("a record batch whose records do not inflate"))?;
        let aborted = batch.is_transactional()
            && fetched.aborted.iter().any(|a| {
                a.producer_id == batch.producer_id()
                    && (a.first_offset..a.marker_offset).contains(&offset)
            });
        let left = if batch.is_control() || aborted { 0 } else { records.count() };
        self.inner = Some(Wrapper {
            set: Bytes::new(),
            position: 0,
            offset,
            next_offset,
            batch: Some((records, left)),
        });
        Ok(())
    }

    /// Opens a wrapper read at `offset`, ending at `next_offset`.
    fn open(
        &mut self,
        offset: i64,
        next_offset: i64,
        message: MessageRef<'_>,
    ) -> Result<(), ConsumerError> {
        let fetched = self.fetched;
        let (topic, partition) = (fetched.topic.clone(), fetched.partition);
        let set = compression::decompress(
            message.codec(),
            message.payload,
            fetched.decompressed_bytes_max,
        )
        .map_err(|source| ConsumerError::Decompress {
            topic: topic.clone(),
            partition,
            offset,
            source,
        })?;
        if set.is_empty() {
            let reason = "holds no messages";
            return Err(ConsumerError::InvalidWrapper { topic, partition, offset, reason });
        }
        self.inner =
            Some(Wrapper { set: Bytes::from(set), position: 0, offset, next_offset, batch: None });
        Ok(())
    }
}

impl Wrapper {
    fn is_done(&self) -> bool {
        match &self.batch {
            Some((_, left)) => *left == 0,
            None => self.position >= self.set.len(),
        }
    }
}

impl Iterator for Messages<'_> {
    type Item = Result<ConsumedMessage, ConsumerError>;

    fn next(&mut self) -> Option<Self::Item> {
        // A batch with no records for the caller (a control batch, an emptied one) or a gap
        // yields nothing: go on to the next message.
        loop {
            if self.failed {
                return None;
            }
            if let Some(item) = self.next_inner() {
                return Some(item);
            }
            let fetched = self.fetched;
            let offset = fetched.base_offset + self.position as i64;
            let (_, message) = match MessageSetIter::new(&fetched.set[self.position..], offset)
                .next()?
            {
                Ok(found) => found,
                Err(source) => {
                    let (topic, partition) = (fetched.topic.clone(), fetched.partition);
                    return self.fail(ConsumerError::InvalidMessage { topic, partition, source });
                }
            };
            self.position += message.size_bytes();
            let next_offset = fetched.base_offset + self.position as i64;
            if message.magic == MAGIC_GAP {
                continue; // what a compacted topic's cleaner removed
            }
            if message.magic == MAGIC_BATCH {
                if let Err(error) = self.open_batch(offset, next_offset, message) {
                    return self.fail(error);
                }
                continue;
            }
            if !message.is_compressed() {
                let payload = fetched.set.slice_ref(message.payload);
                return Some(Ok(ConsumedMessage::plain(offset, next_offset, payload)));
            }
            return match self.open(offset, next_offset, message) {
                Ok(()) => self.next_inner(),
                Err(error) => self.fail(error),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use protocol::{Codec, InvalidMessage};

    use super::*;

    fn plain_set(payloads: &[&[u8]]) -> BytesMut {
        let mut set = BytesMut::new();
        payloads.iter().for_each(|p| protocol::encode_message(&mut set, Codec::None, p));
        set
    }

    fn wrapped(codec: Codec, payloads: &[&[u8]]) -> BytesMut {
        let inner = plain_set(payloads);
        let mut set = BytesMut::new();
        protocol::encode_message(&mut set, codec, &compression::compress(codec, &inner).unwrap());
        set
    }

    fn read(set: &[u8], base_offset: i64) -> Vec<Result<ConsumedMessage, ConsumerError>> {
        FetchedMessages::new("t", 3, base_offset, Bytes::copy_from_slice(set)).iter().collect()
    }

    #[test]
    fn a_record_batch_yields_its_records_like_a_wrapper() {
        use protocol::record_batch::RecordBatchBuilder;
        let mut builder = RecordBatchBuilder::new(7);
        builder.push(7, 1_000, Some(b"k"), Some(b"v1"), &[(b"h", Some(b"x"))]);
        builder.push(8, 1_001, None, None, &[]);
        let mut set = plain_set(&[b"before"]);
        let batch_at = set.len() as i64;
        protocol::encode_batch_message(&mut set, &builder.finish());
        // A control batch (a transaction marker): no records for the caller.
        let mut control = RecordBatchBuilder::new(9);
        control.push(9, 1_002, Some(b"marker"), Some(b"commit"), &[]);
        let mut control = control.finish();
        control[22] |= 1 << 5;
        let crc = crc32c::crc32c(&control[21..]);
        control[17..21].copy_from_slice(&crc.to_be_bytes());
        protocol::encode_batch_message(&mut set, &control);
        let after_at = set.len() as i64;
        protocol::encode_message(&mut set, Codec::None, b"after");
        let got: Vec<_> = read(&set, 0).into_iter().map(Result::unwrap).collect();
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!((got[1].offset, got[1].next_offset), (batch_at, batch_at));
        assert_eq!(got[1].payload, "v1");
        let fields = got[1].record.as_ref().unwrap();
        assert_eq!(fields.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(fields.headers, vec![(Bytes::from("h"), Some(Bytes::from("x")))]);
        assert_eq!(fields.timestamp, 1_000);
        assert_eq!(got[2].payload, "", "a null value reads as empty");
        let control_at = got[2].next_offset;
        assert!(control_at > batch_at, "the last record resumes after its batch");
        assert_eq!((got[3].offset, got[3].payload.as_ref()), (after_at, &b"after"[..]));
        assert!(got[3].record.is_none());
    }

    #[test]
    fn gaps_a_cleaner_left_are_stepped_over() {
        let gap = |set: &mut BytesMut, size: usize| {
            set.extend_from_slice(&protocol::gap_header(size, 3, 0));
            set.resize(set.len() + size - protocol::GAP_HEADER_BYTES, 0);
        };
        let mut set = BytesMut::new();
        gap(&mut set, 40);
        protocol::encode_message(&mut set, Codec::None, b"kept");
        gap(&mut set, 100);
        let got: Vec<_> = read(&set, 1000).into_iter().map(Result::unwrap).collect();
        assert_eq!(got, [ConsumedMessage::plain(1040, 1053, "kept".into())]);
        let fetched = FetchedMessages::new("t", 3, 1000, set.freeze());
        assert_eq!(fetched.end_offset(), 1153, "the next fetch starts after the last gap");
        let only_gaps = FetchedMessages::new("t", 3, 0, fetched.bytes().slice(53..));
        assert_eq!((only_gaps.iter().count(), only_gaps.end_offset()), (0, 100));
    }

    #[test]
    fn plain_messages_say_where_to_resume() {
        let set = plain_set(&[b"a", b"bb"]);
        let got: Vec<_> = read(&set, 100).into_iter().map(Result::unwrap).collect();
        assert_eq!(got[0], ConsumedMessage::plain(100, 110, "a".into()));
        assert_eq!(got[1], ConsumedMessage::plain(110, 121, "bb".into()));
    }

    #[test]
    fn crc_mismatch_is_an_error_and_nothing_after_it_is_yielded() {
        let mut set = plain_set(&[b"first", b"second", b"third"]);
        set[14 + 10] ^= 0xff; // a payload byte of the second message
        let got = read(&set, 0);
        assert_eq!(got.len(), 2, "the good message, then the error, then nothing");
        assert_eq!(got[0].as_ref().unwrap().payload, "first");
        assert!(matches!(
            &got[1],
            Err(ConsumerError::InvalidMessage {
                partition: 3,
                source: InvalidMessage::CrcMismatch { offset: 14, .. },
                ..
            })
        ));
    }

    #[test]
    fn partial_tail_is_dropped_and_resume_is_before_it() {
        let set = plain_set(&[b"whole", b"cut short"]);
        let fetched = FetchedMessages::new("t", 0, 50, set.freeze().slice(..20));
        let mut messages = fetched.iter();
        let payloads: Vec<_> = messages.by_ref().map(|m| m.unwrap().payload).collect();
        assert_eq!(payloads, ["whole"]);
        assert_eq!(messages.next_offset(), 50 + 14);
    }

    #[test]
    fn wrapper_is_inflated_and_only_its_last_message_moves_past_it() {
        for codec in crate::compression::SUPPORTED_CODECS {
            let mut set = plain_set(&[b"before"]);
            let wrapper_offset = set.len() as i64;
            set.extend_from_slice(&wrapped(codec, &[b"x", b"y", b"z"]));
            let wrapper_end = set.len() as i64;
            set.extend_from_slice(&plain_set(&[b"after"]));
            let fetched = FetchedMessages::new("t", 0, 0, set.freeze());
            let mut messages = fetched.iter();
            let got: Vec<_> = messages.by_ref().take(3).map(Result::unwrap).collect();
            assert_eq!(got[1].payload, "x", "{codec:?}");
            assert_eq!((got[1].offset, got[1].next_offset), (wrapper_offset, wrapper_offset));
            assert_eq!(messages.next_offset(), wrapper_offset, "mid-wrapper resumes at it");
            let rest: Vec<_> = messages.by_ref().map(Result::unwrap).collect();
            let payloads: Vec<_> = rest.iter().map(|m| m.payload.clone()).collect();
            assert_eq!(payloads, ["z", "after"]);
            assert_eq!((rest[0].offset, rest[0].next_offset), (wrapper_offset, wrapper_end));
            assert_eq!(rest[1].offset, wrapper_end);
        }
    }

    #[test]
    fn corrupt_inner_message_is_an_error() {
        let mut inner = plain_set(&[b"good", b"bad"]);
        let last = inner.len() - 1;
        inner[last] ^= 1;
        let mut set = BytesMut::new();
        protocol::encode_message(
            &mut set,
            Codec::Gzip,
            &compression::compress(Codec::Gzip, &inner).unwrap(),
        );
        let got = read(&set, 7);
        assert_eq!(got[0].as_ref().unwrap().payload, "good");
        assert!(matches!(
            &got[1],
            Err(ConsumerError::InvalidInnerMessage {
                offset: 7,
                source: InvalidMessage::CrcMismatch { .. },
                ..
            })
        ));
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn undecodable_or_oversized_wrappers_are_errors() {
        let mut garbage = BytesMut::new();
        protocol::encode_message(&mut garbage, Codec::Zstd, b"not zstd at all");
        assert!(matches!(read(&garbage, 0).as_slice(), [Err(ConsumerError::Decompress { .. })]));

        let big = vec![b'a'; 10_000];
        let set = wrapped(Codec::Zstd, &[&big]);
        let fetched =
            FetchedMessages::new("t", 0, 0, set.freeze()).with_decompressed_bytes_max(1000);
        let got: Vec<_> = fetched.iter().collect();
        assert!(matches!(got.as_slice(), [Err(ConsumerError::Decompress { .. })]));

        let nested = wrapped(Codec::Gzip, &[b"n"]); // a set of one wrapper, wrapped again
        let mut set = BytesMut::new();
        protocol::encode_message(
            &mut set,
            Codec::Gzip,
            &compression::compress(Codec::Gzip, &nested).unwrap(),
        );
        assert!(matches!(read(&set, 0).as_slice(), [Err(ConsumerError::InvalidWrapper { .. })]));
    }
}
