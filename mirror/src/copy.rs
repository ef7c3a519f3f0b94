//! Copying one message stream of a source consumer into the target, exactly once.
//!
//! ```text
//! stream ─▶ read: enqueue_copy into the target producer ─▶ bounded window ─▶ acknowledge
//!                                                                  │ in order, per stream
//!                              mark: mark_done(partition, next_offset) ◀┘ metrics
//! ```
//!
//! Each run of consecutive messages of a source partition goes to one target partition as a
//! `COPY_PRODUCE` of the source bytes `from..to` by the partition's **writer**
//! (`{source}/{topic}/{partition}`): the target's leader appends them with `to` as the
//! writer's position, in the same write, unless it has that position already. So a run sent
//! again — after a lost answer, a failover of the target, or this mirror's crash and restart
//! from its last committed offset — is not appended twice; where the writer's position lies
//! within a run, only the messages after it are appended. The target's log is the record of
//! what was copied; the committed source offsets only save reading again.
//!
//! A message's source offset is marked done (and so committed later) only once the target
//! acknowledged it *and every message before it* in the stream: the acknowledger walks the
//! window in order, and hands marks to the stream's marker. A message the target refused or
//! could not take is sent again after a capped backoff, together with every other failed
//! message in the window, for as long as it takes; nothing is ever skipped. The window is
//! bounded, so an unreachable target stops the reading, and with it the fetching.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use client::{
    Copied, GroupConsumer, GroupError, GroupMessage, MessageStream, Pending, ProducerError,
};

use futures::FutureExt;
use protocol::ErrorCode;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::headers;
use crate::metrics::{Metrics, PartitionStats};
use crate::target::Target;

/// First pause before failed messages are sent again; doubles up to the max.
const RESEND_BACKOFF_MS: u64 = 100;
const RESEND_BACKOFF_MAX_MS: u64 = 5_000;
/// Marks are handed on at least every this many acknowledged messages.
const MARK_EVERY_MESSAGES: usize = 1_000;

/// What every stream of a mirror shares.
pub(crate) struct Shared {
    pub(crate) target: Target,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) inflight_messages: usize,
    pub(crate) window_bytes: WindowBytes,
}

/// The bytes of runs read and not yet acknowledged, over every stream, bounded by
/// `buffer_bytes`: a stream reads its next run once that run's bytes are free, so a target
/// that stops answering (or one stalled target partition) holds the mirror at that much.
pub(crate) struct WindowBytes {
    free: Arc<Semaphore>,
    max: usize,
}

impl WindowBytes {
    pub(crate) fn new(max: usize) -> WindowBytes {
        let max = max.clamp(1, Semaphore::MAX_PERMITS).min(u32::MAX as usize);
        WindowBytes { free: Arc::new(Semaphore::new(max)), max }
    }

    /// Waits until `bytes` are free (all of them, for a run larger than the bound) and holds
    /// them until the permit is dropped.
    async fn hold(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let bytes = u32::try_from(bytes.clamp(1, self.max)).unwrap_or(u32::MAX);
        Arc::clone(&self.free).acquire_many_owned(bytes).await.ok()
    }
}

/// Consecutive messages of one source partition, framed back to back, sent as one record.
struct Run {
    partition: i32,
    /// The target partition it goes to, and the writer of its source partition there.
    target: i32,
    writer: Arc<str>,
    /// Where the run begins in the source partition.
    offset: i64,
    /// Where the partition's previous copy ended (0 for the first of the stream: wherever
    /// the target has the writer), which the target checks it has.
    from: i64,
    /// Where the partition resumes after the run.
    next_offset: i64,
    messages: u64,
    set: Bytes,
}

/// A run on its way to the target.
struct InFlight {
    run: Run,
    state: State,
    /// The run's share of `buffer_bytes`, given back when it leaves the window.
    _bytes: OwnedSemaphorePermit,
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

impl Run {
    /// What the run is to the target: its writer's copy of its source bytes.
    fn copied(&self) -> Copied {
        Copied { writer: Arc::clone(&self.writer), from: self.from, to: self.next_offset }
    }
}

/// The writers of a stream's source partitions, `{source}/{topic}/{partition}`: a name each
/// keeps in the target, whatever mirror process copies it.
struct Writers {
    prefix: String,
    names: HashMap<i32, Arc<str>>,
}

impl Writers {
    fn new(source: &str, topic: &str) -> Writers {
        Writers { prefix: format!("{source}/{topic}/"), names: HashMap::new() }
    }

    fn of(&mut self, partition: i32) -> &Arc<str> {
        let prefix = &self.prefix;
        self.names.entry(partition).or_insert_with(|| format!("{prefix}{partition}").into())
    }
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
    let handoff = Handoff::default();
    let read = read(&shared, &source, &topic, &mut stream, window, &stop_reading);
    let acknowledge = async {
        acknowledge(&shared, &source, &topic, arrivals, &handoff).await;
        handoff.close();
    };
    let mark = mark(&topic, &consumer, &handoff);
    tokio::join!(read, acknowledge, mark);
}

/// Bytes of one run of messages sent as one record, at most (a larger message goes alone).
const RUN_BYTES_MAX: usize = 256 << 10;

async fn read(
    shared: &Shared,
    source: &str,
    topic: &str,
    stream: &mut MessageStream,
    window: mpsc::Sender<InFlight>,
    stop: &CancellationToken,
) {
    let producer = &shared.target.producer;
    let mut writers = Writers::new(source, topic);
    // Where each partition's last run ended.
    let mut ends: HashMap<i32, i64> = HashMap::new();
    let mut carried: Option<GroupMessage> = None;
    loop {
        let next = async {
            let first = match carried.take() {
                Some(message) => message,
                None => match next_message(topic, stream.next_message().await?) {
                    Some(message) => message,
                    None => return Some(None),
                },
            };
            let target = shared.target.partition_for(topic, first.partition);
            let writer = Arc::clone(writers.of(first.partition));
            let (mut run, next) = gather(topic, stream, first, target, writer);
            carried = next;
            // After the previous run: from its end (bytes between the two are ones the source
            // does not have), or from the run's start if the consumer went back to read again.
            run.from = match ends.insert(run.partition, run.next_offset) {
                None => 0,
                Some(end) => end.min(run.offset),
            };
            let bytes = shared.window_bytes.hold(run.set.len()).await?;
            let copied = run.copied();
            let state =
                match producer.enqueue_copy(topic, run.target, copied, run.set.clone()).await {
                    Ok(pending) => State::Sending(pending),
                    Err(e) => State::Failed(e),
                };
            Some(Some(InFlight { run, state, _bytes: bytes }))
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

/// The message, or `None` after logging a read error: a corrupt source message stops its
/// partition until the next rebalance; the mirror never skips past it.
fn next_message(topic: &str, item: Result<GroupMessage, GroupError>) -> Option<GroupMessage> {
    match item {
        Ok(message) => Some(message),
        Err(e) => {
            tracing::error!(%topic, error = %e, "cannot read from the source");
            None
        }
    }
}

/// `first` and the messages of its partition that follow it and are already fetched, up to
/// [`RUN_BYTES_MAX`]; and the first message that did not fit, if one was taken.
fn gather(
    topic: &str,
    stream: &mut MessageStream,
    first: GroupMessage,
    target: i32,
    writer: Arc<str>,
) -> (Run, Option<GroupMessage>) {
    let (partition, offset, mut next_offset) = (first.partition, first.offset, first.next_offset);
    let mut messages = 1;
    let mut set: Option<BytesMut> = None;
    let mut carried = None;
    while set.as_ref().map_or(first.payload.len(), BytesMut::len) < RUN_BYTES_MAX {
        // Only what is there now: a run never waits for more.
        let Some(Some(item)) = stream.next_message().now_or_never() else { break };
        let Some(message) = next_message(topic, item) else { break };
        let fits = set.as_ref().map_or(first.payload.len(), BytesMut::len) + message.payload.len()
            <= RUN_BYTES_MAX;
        if message.partition != partition || message.offset != next_offset || !fits {
            carried = Some(message);
            break;
        }
        // Grown as the run grows (at most twice its length), not RUN_BYTES_MAX for two
        // small messages: `buffer_bytes` counts the runs' lengths.
        let set = set.get_or_insert_with(|| {
            let mut set =
                BytesMut::with_capacity(2 * (first.payload.len() + message.payload.len()));
            set.extend_from_slice(&first.payload);
            set
        });
        set.extend_from_slice(&message.payload);
        next_offset = message.next_offset;
        messages += 1;
    }
    let set = set.map_or(first.payload, BytesMut::freeze);
    let run = Run { partition, target, writer, offset, from: 0, next_offset, messages, set };
    (run, carried)
}

/// What the acknowledger hands on in bulk: marks per partition.
#[derive(Default)]
struct Done {
    marks: HashMap<i32, i64>,
    messages: usize,
}

impl Done {
    /// Adds `later`, which follows `self` in the stream: its marks are the newer ones.
    fn merge(&mut self, later: Done) {
        self.marks.extend(later.marks);
        self.messages += later.messages;
    }

    fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }
}

/// From the acknowledger to the marker: what was acknowledged since the marker last took it,
/// merged, so it stays small however far the marker is behind.
#[derive(Default)]
struct Handoff {
    done: Mutex<Done>,
    ready: Notify,
    closed: AtomicBool,
}

impl Handoff {
    fn put(&self, done: &mut Done) {
        if done.is_empty() {
            return;
        }
        self.lock().merge(std::mem::take(done));
        self.ready.notify_one();
    }

    fn take(&self) -> Done {
        std::mem::take(&mut *self.lock())
    }

    /// Nothing more will be put: the marker ends once it has handed on what it has.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.ready.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Done> {
        self.done.lock().unwrap_or_else(|p| p.into_inner())
    }
}

async fn acknowledge(
    shared: &Shared,
    source: &str,
    topic: &str,
    mut arrivals: mpsc::Receiver<InFlight>,
    handoff: &Handoff,
) {
    let mut window: VecDeque<InFlight> = VecDeque::new();
    let mut stats: HashMap<i32, Arc<PartitionStats>> = HashMap::new();
    let mut done = Done::default();
    let mut backoff = service::Backoff::from_ms(RESEND_BACKOFF_MS, RESEND_BACKOFF_MAX_MS);
    loop {
        while window.len() < shared.inflight_messages {
            match arrivals.try_recv() {
                Ok(item) => window.push_back(item),
                Err(_) => break,
            }
        }
        let Some(front) = window.front_mut() else {
            handoff.put(&mut done);
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
            if e.code() == Some(ErrorCode::OutOfOrderSequence) && front.run.from != 0 {
                // Every run before it is acknowledged, yet the target lacks where it follows
                // on: the writer's position is forgotten there, or lost. Copy on from wherever
                // it is.
                tracing::warn!(%topic, partition = front.run.partition, from = front.run.from, "the target lacks the copies before this one; sending it to follow whatever it has");
                front.run.from = 0;
            }
            front.state = State::Failed(e.clone());
            handoff.put(&mut done);
            tracing::warn!(%topic, error = %e, "target did not take messages; sending them again");
            backoff.sleep().await;
            resend(shared, topic, &mut window).await;
            continue;
        }
        backoff.reset();
        let item = window.pop_front().expect("front exists");
        let partition = item.run.partition;
        let stats = stats
            .entry(partition)
            .or_insert_with(|| shared.metrics.partition(source, topic, partition));
        record(shared, &item.run, stats, &mut done);
        let next_ready = window.front_mut().is_some_and(|next| {
            next.state.settle();
            !matches!(next.state, State::Sending(_))
        });
        if !next_ready || done.messages >= MARK_EVERY_MESSAGES {
            handoff.put(&mut done);
        }
    }
}

/// Counts an acknowledged run for the metrics, and notes its mark.
fn record(shared: &Shared, run: &Run, stats: &PartitionStats, done: &mut Done) {
    let mut events = 0u64;
    let mut last_time = None;
    let counted_events = headers::for_each_event(&run.set, |time| {
        events += 1;
        if time.is_some() {
            last_time = time;
        }
    });
    if let Err(e) = counted_events {
        tracing::warn!(partition = %run.partition, error = %e, "cannot count the events of a copied message");
    }
    let bytes = run.set.len() as u64;
    stats.messages.fetch_add(run.messages, Ordering::Relaxed);
    stats.events.fetch_add(events, Ordering::Relaxed);
    stats.bytes.fetch_add(bytes, Ordering::Relaxed);
    if let Some(time) = last_time {
        stats.record_age_ms.store((service::now_ms() - time).max(0), Ordering::Relaxed);
    }
    shared.metrics.totals.add(run.messages, events, bytes);
    done.marks.insert(run.partition, run.next_offset);
    done.messages += run.messages as usize;
}

/// The stream's marker: marks the handed-on offsets done, without holding up the
/// acknowledger. What a mirror killed before its marks were committed copies again is not
/// appended twice (see the module's documentation).
async fn mark(topic: &str, consumer: &GroupConsumer, handoff: &Handoff) {
    loop {
        let mut done = handoff.take();
        if done.is_empty() {
            if handoff.closed.load(Ordering::Acquire) {
                done = handoff.take();
                if done.is_empty() {
                    return;
                }
            } else {
                handoff.ready.notified().await;
                continue;
            }
        }
        for (partition, next_offset) in done.marks.drain() {
            consumer.mark_done(topic, partition, next_offset).await;
        }
    }
}

/// Sends every failed run of the window again, in order.
async fn resend(shared: &Shared, topic: &str, window: &mut VecDeque<InFlight>) {
    for item in window.iter_mut() {
        item.state.settle();
        if let State::Failed(_) = item.state {
            let (copied, set) = (item.run.copied(), item.run.set.clone());
            let producer = &shared.target.producer;
            item.state = match producer.enqueue_copy(topic, item.run.target, copied, set).await {
                Ok(pending) => State::Sending(pending),
                Err(e) => State::Failed(e),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::WindowBytes;

    #[tokio::test]
    async fn a_run_waits_until_its_bytes_are_free() {
        let window = WindowBytes::new(1000);
        let first = window.hold(600).await.expect("free");
        let waiting = tokio::time::timeout(Duration::from_millis(50), window.hold(600)).await;
        assert!(waiting.is_err(), "600 more bytes fit in 1000 beside 600");
        drop(first);
        let second = window.hold(600).await.expect("free again");
        // A run larger than the whole bound waits for all of it, and then goes.
        drop(second);
        let large = tokio::time::timeout(Duration::from_millis(50), window.hold(5000)).await;
        assert!(large.expect("the whole window is free").is_some());
    }
}
