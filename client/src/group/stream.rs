//! A message stream of a group consumer: an endless sequence of messages from whichever
//! partitions the rebalance gives to this stream, fed by fetcher tasks through a bounded queue.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use bytes::Bytes;

use futures::Stream;
use tokio::sync::mpsc;

use super::config::CommitPolicy;
use super::error::GroupError;
use super::owned::Owned;
use crate::ConsumedMessage;

/// One message as a group consumer delivers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMessage {
    pub topic: String,
    pub partition: i32,
    /// Offset of the message (of its wrapper, if it came compressed).
    pub offset: i64,
    /// Where the group resumes after this message.
    pub next_offset: i64,
    pub payload: Bytes,
}

/// What a fetcher hands a stream: the messages of one fetch, and the error that ended it, if
/// a message was corrupt.
pub(crate) struct Chunk {
    pub(crate) owned: Arc<Owned>,
    pub(crate) messages: std::vec::IntoIter<ConsumedMessage>,
    pub(crate) error: Option<GroupError>,
}

/// Messages of one stream. It never ends while its consumer runs: at the end of the log it
/// waits for more. It ends (`None`) once the consumer is closed.
///
/// Taking a message from the stream marks it consumed (with [`CommitPolicy::Taken`]; with
/// [`CommitPolicy::Marked`] the caller marks it); the consumer commits consumed offsets every `auto_commit_ms`, on [`super::GroupConsumer::commit_offsets`], and before it
/// gives a partition up. A consumer that dies leaves what it consumed since its last commit
/// to be delivered again: at-least-once.
pub struct MessageStream {
    topic: String,
    commit: CommitPolicy,
    queue: mpsc::Receiver<Chunk>,
    current: Option<Chunk>,
}

impl MessageStream {
    pub(crate) fn new(
        topic: String,
        queue: mpsc::Receiver<Chunk>,
        commit: CommitPolicy,
    ) -> MessageStream {
        MessageStream { topic, commit, queue, current: None }
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The next message from the chunk in hand, skipping chunks of partitions given up since.
    fn take(&mut self) -> Option<Result<GroupMessage, GroupError>> {
        loop {
            let chunk = self.current.as_mut()?;
            if chunk.owned.revoked.load(Ordering::Acquire) {
                self.current = None;
                return None;
            }
            if let Some(message) = chunk.messages.next() {
                if !chunk.owned.deliver(message.next_offset) {
                    // Given up between the check above and now.
                    self.current = None;
                    return None;
                }
                if self.commit == CommitPolicy::Taken {
                    chunk.owned.consumed.store(message.next_offset, Ordering::Release);
                }
                return Some(Ok(GroupMessage {
                    topic: chunk.owned.topic.clone(),
                    partition: chunk.owned.partition,
                    offset: message.offset,
                    next_offset: message.next_offset,
                    payload: message.payload,
                }));
            }
            let error = chunk.error.take();
            self.current = None;
            if let Some(error) = error {
                return Some(Err(error));
            }
        }
    }

    /// Waits for the next message. `None` once the consumer is closed.
    pub async fn next_message(&mut self) -> Option<Result<GroupMessage, GroupError>> {
        loop {
            if let Some(item) = self.take() {
                return Some(item);
            }
            self.current = Some(self.queue.recv().await?);
        }
    }

    /// Blocks the calling thread for the next message; for code outside an async runtime
    /// (calling it on a runtime thread panics).
    pub fn blocking_next(&mut self) -> Option<Result<GroupMessage, GroupError>> {
        loop {
            if let Some(item) = self.take() {
                return Some(item);
            }
            self.current = Some(self.queue.blocking_recv()?);
        }
    }

    /// The stream as a blocking iterator.
    pub fn blocking_iter(&mut self) -> impl Iterator<Item = Result<GroupMessage, GroupError>> + '_ {
        std::iter::from_fn(move || self.blocking_next())
    }
}

impl Stream for MessageStream {
    type Item = Result<GroupMessage, GroupError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(item) = self.take() {
                return Poll::Ready(Some(item));
            }
            match self.queue.poll_recv(cx) {
                Poll::Ready(Some(chunk)) => self.current = Some(chunk),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
