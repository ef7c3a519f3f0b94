//! One task per owned partition: fetch from the committed offset on, hand each fetch to the
//! partition's stream through its bounded queue (backpressure: a full queue stops fetching),
//! and wait at the end of the log for more with long polls (`MULTIFETCH_WAIT`), which the
//! broker answers as soon as new data is visible.
//!
//! Each fetcher has its own connection, to its partition's leader (looked up again after a
//! failure or `NOT_LEADER`): a long poll parks its connection (answers come in request
//! order), so a shared one would hold up every other partition of the broker.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use protocol::MessageSetIter;
use tokio::sync::mpsc;

use super::config::OffsetReset;
use super::error::GroupError;
use super::owned::{OFFSET_UNKNOWN, Owned};
use super::state::Inner;
use super::stream::Chunk;
use crate::{ConsumedMessage, ConsumerError, FetchedMessages, SimpleConsumer};

/// Longest wait between attempts to reach a partition's broker.
const RETRY_BACKOFF_FIRST_MS: u64 = 100;
const RETRY_BACKOFF_MAX_MS: u64 = 5_000;

pub(crate) async fn fetch_partition(
    inner: Arc<Inner>,
    owned: Arc<Owned>,
    queue: mpsc::Sender<Chunk>,
) {
    let stop = owned.stop.clone();
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = fetch_loop(&inner, &owned, &queue) => {}
    }
}

async fn fetch_loop(inner: &Inner, owned: &Arc<Owned>, queue: &mpsc::Sender<Chunk>) {
    let topic = owned.topic.as_str();
    let partition = owned.partition;
    let mut backoff = service::Backoff::from_ms(RETRY_BACKOFF_FIRST_MS, RETRY_BACKOFF_MAX_MS);
    let mut offset = owned.consumed.load(Ordering::Acquire);
    let fetch_wait_ms = inner.config.fetch_wait_ms as u32; // checked by validate()
    let mut connection: Option<SimpleConsumer> = None;
    loop {
        let consumer = match &connection {
            Some(consumer) => consumer.clone(),
            None => {
                let addr = match inner.registry.leader(topic, partition).await {
                    Ok(Some((_, leader))) => leader.addr(),
                    Ok(None) => {
                        tracing::warn!(%topic, partition, "no live leader; waiting");
                        backoff.sleep().await;
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(%topic, partition, error = %e, "cannot find the leader; retrying");
                        backoff.sleep().await;
                        continue;
                    }
                };
                match SimpleConsumer::connect(&addr, inner.config.fetch.clone()).await {
                    Ok(consumer) => connection.insert(consumer).clone(),
                    Err(e) => {
                        tracing::warn!(%addr, error = %e, "cannot reach broker; retrying");
                        backoff.sleep().await;
                        continue;
                    }
                }
            }
        };
        if offset == OFFSET_UNKNOWN {
            match reset(&consumer, topic, partition, inner.config.auto_offset_reset).await {
                Ok(start) => {
                    tracing::info!(%topic, partition = %owned.partition, offset = start, reset = ?inner.config.auto_offset_reset, "no committed offset; starting from the reset position");
                    offset = start;
                    owned.consumed.store(start, Ordering::Release);
                }
                Err(e) => {
                    connection = None;
                    tracing::warn!(error = %e, "cannot read offsets; retrying");
                    backoff.sleep().await;
                    continue;
                }
            }
        }
        match consumer.fetch_wait(topic, partition, offset, fetch_wait_ms).await {
            Ok(fetched) => {
                backoff.reset();
                let (messages, error, resume) = split(&fetched, inner.config.framed);
                // Past what holds no message for the caller too (a compacted topic's gaps,
                // control batches), or the next fetch would return it at once.
                offset = offset.max(resume);
                if messages.is_empty() && error.is_none() {
                    continue; // the long poll waited and nothing came
                }
                let corrupt = error.is_some();
                let chunk =
                    Chunk { owned: Arc::clone(owned), messages: messages.into_iter(), error };
                if queue.send(chunk).await.is_err() {
                    return; // the consumer is closing
                }
                if corrupt {
                    // Nothing after a corrupt message can be trusted; the stream has the error.
                    tracing::error!(%topic, partition = %owned.partition, offset, "corrupt message; this partition stops until the next rebalance");
                    return;
                }
            }
            Err(ConsumerError::OffsetOutOfRange { .. }) => {
                match reset(&consumer, topic, partition, inner.config.auto_offset_reset).await {
                    Ok(start) => {
                        tracing::warn!(%topic, partition = %owned.partition, from = offset, to = start, "offset out of range (deleted by retention?); resetting: data was skipped");
                        offset = start;
                        owned.consumed.store(start, Ordering::Release);
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot read offsets"),
                }
            }
            Err(e) => {
                connection = None;
                tracing::warn!(%topic, partition = %owned.partition, error = %e, "fetch failed; retrying");
                backoff.sleep().await;
            }
        }
    }
}

/// The messages of a fetch — inflated, or whole as stored when `framed` — the error that
/// ended them, if one was corrupt, and where the next fetch starts: after the last message,
/// or, when the fetch was read to its end, after whatever followed it that holds none.
fn split(
    fetched: &FetchedMessages,
    framed: bool,
) -> (Vec<ConsumedMessage>, Option<GroupError>, i64) {
    let mut messages = Vec::new();
    let after_last = |messages: &[ConsumedMessage]| {
        messages.last().map_or(fetched.base_offset(), |last| last.next_offset)
    };
    if !framed {
        let mut read = fetched.iter();
        for message in read.by_ref() {
            match message {
                Ok(message) => messages.push(message),
                Err(e) => {
                    let resume = after_last(&messages);
                    return (messages, Some(GroupError::Consumer(e)), resume);
                }
            }
        }
        return (messages, None, read.next_offset());
    }
    let set = fetched.bytes();
    let mut position = 0;
    for message in MessageSetIter::new(set, fetched.base_offset()) {
        match message {
            Ok((_, message)) if message.magic == protocol::MAGIC_GAP => {
                position += message.size_bytes();
            }
            Ok((offset, message)) => {
                let end = position + message.size_bytes();
                let payload = set.slice(position..end);
                position = end;
                let next_offset = offset + payload.len() as i64;
                messages.push(ConsumedMessage::plain(offset, next_offset, payload));
            }
            Err(source) => {
                let (topic, partition) = (fetched.topic().to_owned(), fetched.partition());
                let error = ConsumerError::InvalidMessage { topic, partition, source };
                let resume = after_last(&messages);
                return (messages, Some(GroupError::Consumer(error)), resume);
            }
        }
    }
    (messages, None, fetched.base_offset() + position as i64)
}

async fn reset(
    consumer: &SimpleConsumer,
    topic: &str,
    partition: i32,
    reset: OffsetReset,
) -> Result<i64, ConsumerError> {
    match reset {
        OffsetReset::Smallest => consumer.earliest_offset(topic, partition).await,
        OffsetReset::Largest => consumer.latest_offset(topic, partition).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use protocol::Codec;

    /// A copy in the analytics cluster ends in its copier's position record (a control
    /// batch): the next fetch starts after it, not at it, read inflated or framed.
    #[test]
    fn the_next_fetch_starts_after_a_trailing_control_batch() {
        let mut set = BytesMut::new();
        protocol::encode_message(&mut set, Codec::None, b"event");
        let event_end = 1_000 + set.len() as i64;
        let position = protocol::record_batch::copy_position_marker("live-a/t/0", 64, 5);
        protocol::encode_batch_message(&mut set, &position);
        let end = 1_000 + set.len() as i64;
        let fetched = FetchedMessages::new("t", 0, 1_000, set.freeze());
        let (messages, error, resume) = split(&fetched, false);
        assert!(error.is_none());
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].next_offset, event_end);
        assert_eq!(resume, end, "inflated: past the control batch");
        let (messages, _, resume) = split(&fetched, true);
        assert_eq!((messages.len(), resume), (2, end), "framed: the batch is a message");
        let tail = fetched.bytes().slice((event_end - 1_000) as usize..);
        let only = FetchedMessages::new("t", 0, event_end, tail);
        let (messages, error, resume) = split(&only, false);
        assert!(messages.is_empty() && error.is_none());
        assert_eq!(resume, end, "a fetch of only a control batch moves on");
    }
}
