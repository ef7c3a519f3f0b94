//! The messages of one fetched MessageSet, as a consumer reads them: every message's CRC is
//! checked, a partial message at the end (a fetch cut mid-message) is dropped, and a
//! compressed wrapper is inflated into its inner messages.
//!
//! Each item says where to resume after it (`DESIGN.md`: a wrapper is one message in the log
//! and its offset is the only addressable position of the messages inside). An inner message
//! carries its wrapper's `offset`; its `next_offset` is the wrapper's own offset until the last
//! inner message, whose `next_offset` is the offset after the wrapper. So a consumer that
//! stops mid-wrapper and resumes from the last `next_offset` sees the wrapper again
//! (at-least-once), and one that read it all moves past it.

use bytes::Bytes;
use protocol::{MessageRef, MessageSetIter};

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
}

/// A fetched MessageSet of one partition, starting at `base_offset`.
#[derive(Debug, Clone)]
pub struct FetchedMessages {
    topic: String,
    partition: i32,
    base_offset: i64,
    set: Bytes,
    decompressed_bytes_max: usize,
}

impl FetchedMessages {
    pub fn new(topic: &str, partition: i32, base_offset: i64, set: Bytes) -> FetchedMessages {
        FetchedMessages {
            topic: topic.to_owned(),
            partition,
            base_offset,
            set,
            decompressed_bytes_max: DECOMPRESSED_BYTES_MAX_DEFAULT,
        }
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

/// The inflated inner set of the wrapper being read.
#[derive(Debug)]
struct Wrapper {
    set: Bytes,
    position: usize,
    offset: i64,
    next_offset: i64,
}

impl Messages<'_> {
    /// Where to resume after the messages yielded so far.
    pub fn next_offset(&self) -> i64 {
        match &self.inner {
            Some(wrapper) if wrapper.position < wrapper.set.len() => wrapper.offset,
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
                Some(Ok(ConsumedMessage { offset, next_offset, payload }))
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
        self.inner = Some(Wrapper { set: Bytes::from(set), position: 0, offset, next_offset });
        Ok(())
    }
}

impl Iterator for Messages<'_> {
    type Item = Result<ConsumedMessage, ConsumerError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if let Some(item) = self.next_inner() {
            return Some(item);
        }
        let fetched = self.fetched;
        let offset = fetched.base_offset + self.position as i64;
        let (_, message) =
            match MessageSetIter::new(&fetched.set[self.position..], offset).next()? {
                Ok(found) => found,
                Err(source) => {
                    let (topic, partition) = (fetched.topic.clone(), fetched.partition);
                    return self.fail(ConsumerError::InvalidMessage { topic, partition, source });
                }
            };
        self.position += message.size_bytes();
        let next_offset = fetched.base_offset + self.position as i64;
        if !message.is_compressed() {
            let payload = fetched.set.slice_ref(message.payload);
            return Some(Ok(ConsumedMessage { offset, next_offset, payload }));
        }
        match self.open(offset, next_offset, message) {
            Ok(()) => self.next_inner(),
            Err(error) => self.fail(error),
        }
    }
}
