//! Copying one message stream of a source consumer into the target, at least once.
//!
//! ```text
//! stream ─▶ read: enqueue_framed into the target producer ─▶ bounded window ─▶ acknowledge
//!                                                                    │ in order, per stream
//!                                  mark_done(partition, next_offset) ◀┘ audit, metrics
//! ```
//!
//! A message's source offset is marked done (and so committed later) only once the target
//! acknowledged it *and every message before it* in the stream: the acknowledger walks the
//! window in order. A message the target refused or could not take is sent again after a
//! capped backoff, together with every other failed message in the window, for as long as it
//! takes; nothing is ever skipped. The window is bounded, so an unreachable target stops the
//! reading, and with it the fetching.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use client::{GroupConsumer, MessageStream, Pending, ProducerError};
use cluster::PartitionId;
use futures::FutureExt;
use schema_registry::audit::{AUDIT_TOPIC, window_start};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::audit::{Audit, now_ms};
use crate::events;
use crate::metrics::{Metrics, PartitionStats};
use crate::target::Target;

/// First pause before failed messages are sent again; doubles up to the max.
const RESEND_BACKOFF_MS: u64 = 100;
const RESEND_BACKOFF_MAX_MS: u64 = 5_000;
/// Marks and audit counts are handed on at least every this many acknowledged messages.
const MARK_EVERY_MESSAGES: usize = 1_000;

/// What every stream of a mirror shares.
pub(crate) struct Shared {
    pub(crate) target: Target,
    pub(crate) audit: Arc<Audit>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) inflight_messages: usize,
    pub(crate) window_ms: i64,
}

/// One message taken from the source, on its way to the target.
struct InFlight {
    partition: PartitionId,
    next_offset: i64,
    message: Bytes,
    state: State,
}

enum State {
    Sending(Pending),
    Acknowledged,
    Failed(ProducerError),
}

impl State {
    /// Turns a `Sending` whose answer has arrived into its outcome, without waiting.
    fn settle(&mut self) {
        if let State::Sending(pending) = self
            && let Some(result) = pending.now_or_never()
        {
            *self = match result {
                Ok(_) => State::Acknowledged,
                Err(e) => State::Failed(e),
            };
        }
    }
}

/// The target key of a source partition: its messages go to one target partition.
fn key(partition: PartitionId) -> [u8; 8] {
    let mut key = [0; 8];
    key[..4].copy_from_slice(&partition.broker.to_be_bytes());
    key[4..].copy_from_slice(&partition.partition.to_be_bytes());
    key
}

/// Copies `stream` of `source` until `stop_reading`, then waits until everything read is
/// acknowledged and marked (the caller bounds that wait).
pub(crate) async fn copy_stream(
    shared: Arc<Shared>,
    source: Arc<str>,
    consumer: Arc<GroupConsumer>,
    mut stream: MessageStream,
    stop_reading: CancellationToken,
) {
    let topic = stream.topic().to_owned();
    let (window, arrivals) = mpsc::channel(shared.inflight_messages);
    let read = read(&shared, &topic, &mut stream, window, &stop_reading);
    let acknowledge = acknowledge(&shared, &source, &topic, &consumer, arrivals);
    tokio::join!(read, acknowledge);
}

async fn read(
    shared: &Shared,
    topic: &str,
    stream: &mut MessageStream,
    window: mpsc::Sender<InFlight>,
    stop: &CancellationToken,
) {
    let producer = &shared.target.producer;
    loop {
        let next = async {
            let message = match stream.next_message().await? {
                Ok(message) => message,
                Err(e) => {
                    // A corrupt source message stops its partition until the next rebalance;
                    // the mirror never skips past it.
                    tracing::error!(%topic, error = %e, "cannot read from the source");
                    return Some(None);
                }
            };
            let key = key(message.partition);
            let state =
                match producer.enqueue_framed(topic, Some(&key), message.payload.clone()).await {
                    Ok(pending) => State::Sending(pending),
                    Err(e) => State::Failed(e),
                };
            let (partition, next_offset) = (message.partition, message.next_offset);
            Some(Some(InFlight { partition, next_offset, message: message.payload, state }))
        };
        let item = tokio::select! {
            _ = stop.cancelled() => return,
            item = next => item,
        };
        match item {
            None => return, // the consumer is closed
            Some(None) => continue,
            Some(Some(item)) => {
                if window.send(item).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// What the acknowledger hands on in bulk: marks per partition and audit counts per window.
#[derive(Default)]
struct Done {
    marks: HashMap<PartitionId, i64>,
    windows: BTreeMap<i64, i64>,
    messages: usize,
}

async fn acknowledge(
    shared: &Shared,
    source: &str,
    topic: &str,
    consumer: &GroupConsumer,
    mut arrivals: mpsc::Receiver<InFlight>,
) {
    let counted = topic != AUDIT_TOPIC;
    let mut window: VecDeque<InFlight> = VecDeque::new();
    let mut stats: HashMap<PartitionId, Arc<PartitionStats>> = HashMap::new();
    let mut done = Done::default();
    let mut backoff_ms = RESEND_BACKOFF_MS;
    loop {
        while window.len() < shared.inflight_messages {
            match arrivals.try_recv() {
                Ok(item) => window.push_back(item),
                Err(_) => break,
            }
        }
        let Some(front) = window.front_mut() else {
            hand_on(shared, topic, consumer, &mut done).await;
            match arrivals.recv().await {
                Some(item) => window.push_back(item),
                None => return, // reading stopped and everything read is acknowledged
            }
            continue;
        };
        let outcome = match &mut front.state {
            State::Acknowledged => Ok(()),
            State::Failed(e) => Err(e.clone()),
            State::Sending(pending) => pending.await.map(drop),
        };
        if let Err(e) = outcome {
            front.state = State::Failed(e.clone());
            hand_on(shared, topic, consumer, &mut done).await;
            tracing::warn!(%topic, error = %e, retry_in_ms = backoff_ms, "target did not take messages; sending them again");
            tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
            backoff_ms = (backoff_ms * 2).min(RESEND_BACKOFF_MAX_MS);
            resend(shared, topic, &mut window).await;
            continue;
        }
        backoff_ms = RESEND_BACKOFF_MS;
        let item = window.pop_front().expect("front exists");
        let stats = stats
            .entry(item.partition)
            .or_insert_with(|| shared.metrics.partition(source, topic, item.partition));
        record(shared, counted, &item, stats, &mut done);
        let next_ready = window.front_mut().is_some_and(|next| {
            next.state.settle();
            !matches!(next.state, State::Sending(_))
        });
        if !next_ready || done.messages >= MARK_EVERY_MESSAGES {
            hand_on(shared, topic, consumer, &mut done).await;
        }
    }
}

/// Counts an acknowledged message for the audit and the metrics, and notes its mark.
fn record(
    shared: &Shared,
    counted: bool,
    item: &InFlight,
    stats: &PartitionStats,
    done: &mut Done,
) {
    let mut events = 0u64;
    let mut last_time = None;
    let counted_events = events::for_each_event(&item.message, |time| {
        events += 1;
        if let Some(time) = time {
            last_time = Some(time);
            if counted {
                *done.windows.entry(window_start(time, shared.window_ms)).or_default() += 1;
            }
        }
    });
    if let Err(e) = counted_events {
        tracing::warn!(partition = %item.partition, error = %e, "cannot inflate a copied wrapper to count its events");
    }
    let bytes = item.message.len() as u64;
    stats.messages.fetch_add(1, Ordering::Relaxed);
    stats.events.fetch_add(events, Ordering::Relaxed);
    stats.bytes.fetch_add(bytes, Ordering::Relaxed);
    if let Some(time) = last_time {
        stats.record_age_ms.store((now_ms() - time).max(0), Ordering::Relaxed);
    }
    shared.metrics.totals.add(1, events, bytes);
    done.marks.insert(item.partition, item.next_offset);
    done.messages += 1;
}

/// Marks the acknowledged offsets done and adds the audit counts.
async fn hand_on(shared: &Shared, topic: &str, consumer: &GroupConsumer, done: &mut Done) {
    for (partition, next_offset) in done.marks.drain() {
        consumer.mark_done(topic, partition, next_offset).await;
    }
    if !done.windows.is_empty() {
        shared.audit.add(topic, std::mem::take(&mut done.windows));
    }
    done.messages = 0;
}

/// Sends every failed message of the window again, in order.
async fn resend(shared: &Shared, topic: &str, window: &mut VecDeque<InFlight>) {
    for item in window.iter_mut() {
        item.state.settle();
        if let State::Failed(_) = item.state {
            let key = key(item.partition);
            let producer = &shared.target.producer;
            item.state =
                match producer.enqueue_framed(topic, Some(&key), item.message.clone()).await {
                    Ok(pending) => State::Sending(pending),
                    Err(e) => State::Failed(e),
                };
        }
    }
}
