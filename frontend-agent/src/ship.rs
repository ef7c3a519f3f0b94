//! Shipping (paper §3.2, "Producer"), exactly once: the spool is read in order, its events are
//! framed per topic into chunks of at most a batch (`batch_messages`, `batch_bytes`), and each
//! chunk goes to one partition as one idempotent batch whose identity — producer id, epoch,
//! partition, first sequence number — the agent gives it and writes to the spool's send
//! journal before the send. An acker marks a chunk's events acknowledged in the spool once its
//! acknowledgement comes back, a whole chunk at a time.
//!
//! When any batch fails (a broker died, its answer was lost), the shipper stops sending,
//! waits for everything in flight to settle, backs off, and reads again from the oldest
//! unacknowledged event: the events of a chunk sent before go again as that same batch, to
//! the same partition under the same identity, in order, so a leader that has it answers
//! where it is instead of appending it twice. After a crash, the chunks the journal holds go
//! again the same way. Only a chunk a leader refuses as out of order while it is the first
//! unacknowledged of its producer on the partition goes under a new identity: the leader has
//! no run of that producer's batches it could follow (a later chunk reached a new leader
//! after this one failed at the old, or the leader lost what came before with acks 1), and
//! does not have it either. Fresh events after a
//! failure take a new producer id, so their sequence numbers never interleave with those of
//! the chunks going again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use client::{FramedMessages, Pending, Producer, Sequenced};
use protocol::ErrorCode;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::spool::{SentChunk, Spool, SpoolRecord};

/// Events read from the spool per batch at most.
const READ_RECORDS_MAX: usize = 5_000;
const READ_BYTES_MAX: usize = 4 << 20;
/// Chunks awaited at most at once (the producer's buffer bounds them too).
const CHUNKS_IN_FLIGHT_MAX: usize = 10_000;
/// Acknowledged events handed to the spool in one call at most (whole chunks each time).
const ACK_CHUNK_MAX: usize = 1_024;
/// First pause after a failure; doubles up to `retry_backoff_max_ms`.
const BACKOFF_START_MS: u64 = 100;
/// An idle shipper looks for a failure flag this often.
const IDLE_POLL_MS: u64 = 100;

enum InFlight {
    /// A chunk's events, `(seq, time_ms)`.
    Chunk { chunk: Arc<SentChunk>, events: Vec<(u64, i64)>, pending: Pending },
    /// Answered once everything queued before it settled.
    Barrier(oneshot::Sender<()>),
}

/// How big a chunk gets: a batch of the producer's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChunkLimits {
    pub messages: usize,
    pub bytes: usize,
}

/// A producer's batches on one partition of a topic.
type Stream = (i64, Arc<str>, i32);

fn stream_of(chunk: &SentChunk) -> Stream {
    (chunk.producer_id, Arc::clone(&chunk.topic), chunk.partition)
}

/// The chunks sent and not yet acknowledged, which the shipper and the acker share.
#[derive(Default)]
struct Book {
    /// By first seq.
    unacked: BTreeMap<u64, Arc<SentChunk>>,
    /// Each of their events' seq, to its chunk's first seq.
    claimed: HashMap<u64, u64>,
    /// Streams whose leader refused their first unacknowledged chunk as out of order: their
    /// chunks go again under a new identity.
    lost: HashSet<Stream>,
}

impl Book {
    fn insert(&mut self, chunk: SentChunk) {
        let first = chunk.first_seq();
        if let Some(old) = self.unacked.remove(&first) {
            old.seqs.iter().for_each(|s| {
                self.claimed.remove(s);
            });
        }
        chunk.seqs.iter().for_each(|&s| {
            self.claimed.insert(s, first);
        });
        self.unacked.insert(first, Arc::new(chunk));
    }

    fn remove(&mut self, first: u64) {
        if let Some(chunk) = self.unacked.remove(&first) {
            chunk.seqs.iter().for_each(|s| {
                self.claimed.remove(s);
            });
        }
    }

    /// Whether `chunk` is its stream's first unacknowledged one.
    fn leads_its_stream(&self, chunk: &SentChunk) -> bool {
        !self.unacked.values().any(|c| {
            c.producer_id == chunk.producer_id
                && c.partition == chunk.partition
                && c.topic == chunk.topic
                && c.base_sequence < chunk.base_sequence
        })
    }
}

fn lock(book: &Mutex<Book>) -> std::sync::MutexGuard<'_, Book> {
    book.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A chunk sent before, being filled again with its events as the spool is read.
struct Refill {
    chunk: Arc<SentChunk>,
    messages: FramedMessages,
    events: Vec<(u64, i64)>,
}

/// Events of one topic being framed into a new chunk.
struct Fresh {
    topic: Arc<str>,
    messages: FramedMessages,
    events: Vec<(u64, i64)>,
}

impl Fresh {
    fn new(topic: &Arc<str>, limits: ChunkLimits) -> Fresh {
        let messages = FramedMessages::with_capacity(limits.bytes.min(64 << 10));
        Fresh { topic: Arc::clone(topic), messages, events: Vec::new() }
    }
}

/// A chunk ready to send: one sent before under its identity, or one to be given one.
enum Ready {
    Again { chunk: Arc<SentChunk>, messages: FramedMessages, events: Vec<(u64, i64)> },
    New(Fresh),
}

/// A chunk about to be handed to the producer: its identity, messages and events, and
/// whether it went before.
type Outgoing = (Arc<SentChunk>, FramedMessages, Vec<(u64, i64)>, bool);

struct Shipper {
    spool: Arc<Spool>,
    producer: Producer,
    metrics: Arc<Metrics>,
    limits: ChunkLimits,
    book: Arc<Mutex<Book>>,
    failed: Arc<AtomicBool>,
    in_flight: mpsc::Sender<InFlight>,
    /// The producer id and epoch new chunks take, and each stream's next sequence number.
    identity: Option<(i64, i16)>,
    next_sequence: HashMap<(Arc<str>, i32), i32>,
    /// Chunks sent before whose events are being read again.
    refills: HashMap<u64, Refill>,
}

/// Ships until `stop`, then lets in-flight acknowledgements settle.
pub(crate) async fn run(
    spool: Arc<Spool>,
    producer: Producer,
    metrics: Arc<Metrics>,
    limits: ChunkLimits,
    retry_backoff_max_ms: u64,
    stop: CancellationToken,
) {
    let failed = Arc::new(AtomicBool::new(false));
    let book = Arc::new(Mutex::new(Book::default()));
    for chunk in spool.take_replays() {
        lock(&book).insert(chunk);
    }
    let (in_flight, queue) = mpsc::channel(CHUNKS_IN_FLIGHT_MAX);
    let acker =
        tokio::spawn(acker(Arc::clone(&spool), queue, Arc::clone(&book), Arc::clone(&failed)));
    let mut shipper = Shipper {
        spool: Arc::clone(&spool),
        producer,
        metrics: Arc::clone(&metrics),
        limits,
        book,
        failed: Arc::clone(&failed),
        in_flight,
        identity: None,
        next_sequence: HashMap::new(),
        refills: HashMap::new(),
    };
    shipper.start_refills();
    let mut reader = Some(spool.reader());
    let mut durable = spool.durable();
    let mut backoff = service::Backoff::from_ms(BACKOFF_START_MS, retry_backoff_max_ms);
    while !stop.is_cancelled() {
        if failed.load(Ordering::Acquire) {
            let (done, settled) = oneshot::channel();
            let barrier = shipper.in_flight.send(InFlight::Barrier(done)).await;
            if barrier.is_err() || settled.await.is_err() {
                break;
            }
            failed.store(false, Ordering::Release);
            metrics.ship_failures.inc();
            if !backoff.wait(&stop).await {
                break;
            }
            // Everything unacknowledged is read again; fresh events take a new producer id.
            shipper.identity = None;
            shipper.next_sequence.clear();
            shipper.start_refills();
            if let Some(r) = reader.as_mut() {
                r.seek(spool.floor());
            }
            continue;
        }
        let mut r = reader.take().expect("the reader is put back after every read");
        let (r, read) = tokio::task::spawn_blocking(move || {
            let read = r.read_batch(READ_RECORDS_MAX, READ_BYTES_MAX);
            (r, read)
        })
        .await
        .expect("the spool reader does not panic");
        reader = Some(r);
        let mut batch = match read {
            Ok(batch) => batch,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the spool; retrying");
                failed.store(true, Ordering::Release);
                continue;
            }
        };
        if batch.is_empty() {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = durable.changed() => {}
                () = tokio::time::sleep(Duration::from_millis(IDLE_POLL_MS)) => {}
            }
            continue;
        }
        spool.retain_undone(&mut batch);
        metrics.ship_batch_events.observe(batch.len() as f64);
        let read_end = reader.as_ref().map_or(0, |r| r.position());
        let ready = shipper.frame(batch, read_end);
        shipper.ship(ready).await;
        if !failed.load(Ordering::Acquire) {
            backoff.reset();
        }
    }
    drop(shipper);
    if acker.await.is_err() {
        tracing::error!("the acker task panicked");
    }
}

impl Shipper {
    /// Every unacknowledged chunk is to be filled again from the spool.
    fn start_refills(&mut self) {
        self.refills = lock(&self.book)
            .unacked
            .iter()
            .map(|(&first, chunk)| {
                let refill = Refill {
                    chunk: Arc::clone(chunk),
                    messages: FramedMessages::with_capacity(self.limits.bytes.min(64 << 10)),
                    events: Vec::with_capacity(chunk.seqs.len()),
                };
                (first, refill)
            })
            .collect();
    }

    /// Frames `batch` (read up to `read_end`) into chunks: events of chunks sent before into
    /// those, once each is whole again, and the rest into new chunks per topic.
    fn frame(&mut self, batch: Vec<SpoolRecord>, read_end: u64) -> Vec<Ready> {
        let mut ready = Vec::new();
        let mut open: Vec<Fresh> = Vec::new();
        let limits = self.limits;
        for record in batch {
            let claimed = lock(&self.book).claimed.get(&record.seq).copied();
            if let Some(first) = claimed
                && let Some(refill) = self.refills.get_mut(&first)
            {
                refill.messages.push(&record.payload);
                refill.events.push((record.seq, record.time_ms));
                if refill.events.len() == refill.chunk.seqs.len() {
                    let Refill { chunk, messages, events } =
                        self.refills.remove(&first).expect("found above");
                    ready.push(Ready::Again { chunk, messages, events });
                }
                continue;
            }
            let at = match open.iter().position(|c| c.topic == record.topic) {
                Some(at) => at,
                None => {
                    open.push(Fresh::new(&record.topic, limits));
                    open.len() - 1
                }
            };
            let framed_bytes = record.payload.len() + protocol::PLAIN_MESSAGE_OVERHEAD_BYTES;
            let chunk = &open[at];
            if !chunk.messages.is_empty()
                && (chunk.messages.len() >= limits.messages
                    || chunk.messages.bytes() + framed_bytes > limits.bytes)
            {
                let full = std::mem::replace(&mut open[at], Fresh::new(&record.topic, limits));
                ready.push(Ready::New(full));
            }
            let chunk = &mut open[at];
            chunk.messages.push(&record.payload);
            chunk.events.push((record.seq, record.time_ms));
        }
        // A chunk sent before whose missing events the read passed were dropped (drop-oldest):
        // it cannot go again as it was; what is left of it goes as a new chunk.
        let passed: Vec<u64> = self
            .refills
            .iter()
            .filter(|(_, r)| r.chunk.seqs.last().is_some_and(|&last| last < read_end))
            .map(|(&first, _)| first)
            .collect();
        for first in passed {
            let refill = self.refills.remove(&first).expect("listed above");
            lock(&self.book).remove(first);
            if !refill.events.is_empty() {
                let Refill { chunk, messages, events } = refill;
                ready.push(Ready::New(Fresh { topic: Arc::clone(&chunk.topic), messages, events }));
            }
        }
        ready.extend(open.into_iter().map(Ready::New));
        ready
    }

    /// Gives new chunks (and chunks of lost streams) their identity, journals them, and
    /// hands every ready chunk to the producer in order; stops at the first failure.
    async fn ship(&mut self, ready: Vec<Ready>) {
        let mut sends: Vec<Outgoing> = Vec::with_capacity(ready.len());
        let mut journal = Vec::new();
        for ready in ready {
            let (chunk, messages, events, again) = match ready {
                Ready::Again { chunk, messages, events } => {
                    if !lock(&self.book).lost.contains(&stream_of(&chunk)) {
                        sends.push((chunk, messages, events, true));
                        continue;
                    }
                    let topic = Arc::clone(&chunk.topic);
                    (self.identify(&topic, &events).await, messages, events, true)
                }
                Ready::New(Fresh { topic, messages, events }) => {
                    (self.identify(&topic, &events).await, messages, events, false)
                }
            };
            let Some(chunk) = chunk else {
                self.fail("cannot get a producer id");
                break;
            };
            journal.push(chunk.clone());
            sends.push((Arc::new(chunk), messages, events, again));
        }
        if !journal.is_empty() {
            let spool = Arc::clone(&self.spool);
            let recorded = {
                let journal = journal.clone();
                tokio::task::spawn_blocking(move || spool.record_sends(&journal)).await
            };
            match recorded {
                Ok(Ok(())) => {
                    let mut book = lock(&self.book);
                    journal.into_iter().for_each(|c| book.insert(c));
                }
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "cannot write the send journal; retrying");
                    self.failed.store(true, Ordering::Release);
                    return;
                }
                Err(e) => {
                    tracing::error!(error = %e, "the send journal's task panicked");
                    self.failed.store(true, Ordering::Release);
                    return;
                }
            }
        }
        for (chunk, messages, events, again) in sends {
            if self.failed.load(Ordering::Acquire) {
                return;
            }
            let sequenced = Sequenced {
                producer_id: chunk.producer_id,
                epoch: chunk.epoch,
                base_sequence: chunk.base_sequence,
            };
            let sent =
                self.producer.enqueue_sequenced(&chunk.topic, chunk.partition, sequenced, messages);
            let pending = match sent.await {
                Ok(pending) => pending,
                Err(e) => {
                    self.fail(&e.to_string());
                    return;
                }
            };
            if again {
                self.metrics.resent.inc_by(events.len() as u64);
            }
            if self.in_flight.send(InFlight::Chunk { chunk, events, pending }).await.is_err() {
                return;
            }
        }
    }

    /// A new identity for a chunk of `events` of `topic`: a partition with a live leader
    /// (0 while the cluster does not know the topic: the first produce creates it), this
    /// run's producer id, and the partition's next sequence numbers. `None` when no producer
    /// id can be had.
    async fn identify(&mut self, topic: &Arc<str>, events: &[(u64, i64)]) -> Option<SentChunk> {
        let (producer_id, epoch) = match self.identity {
            Some(identity) => identity,
            None => match self.producer.init_producer_id(topic).await {
                Ok(identity) => *self.identity.insert(identity),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot get a producer id; will retry");
                    return None;
                }
            },
        };
        let partitions = self.producer.live_partitions(topic).await.unwrap_or_default();
        let partition = match partitions.len() {
            0 => 0,
            n => partitions[rand::random_range(0..n)],
        };
        let next = self.next_sequence.entry((Arc::clone(topic), partition)).or_insert(0);
        let base_sequence = *next;
        let count = i32::try_from(events.len()).expect("a chunk is at most a batch");
        *next = next.wrapping_add(count) & i32::MAX;
        Some(SentChunk {
            topic: Arc::clone(topic),
            partition,
            producer_id,
            epoch,
            base_sequence,
            seqs: events.iter().map(|(seq, _)| *seq).collect(),
        })
    }

    fn fail(&self, reason: &str) {
        if !self.failed.swap(true, Ordering::AcqRel) {
            tracing::warn!(error = %reason, "cannot ship events; will retry");
        }
    }
}

/// Awaits acknowledgements in send order and marks them in the spool, a whole chunk at a time.
async fn acker(
    spool: Arc<Spool>,
    mut queue: mpsc::Receiver<InFlight>,
    book: Arc<Mutex<Book>>,
    failed: Arc<AtomicBool>,
) {
    let mut acked = Vec::with_capacity(ACK_CHUNK_MAX);
    while let Some(item) = queue.recv().await {
        match item {
            InFlight::Chunk { chunk, events, pending } => match pending.await {
                Ok(_) => {
                    lock(&book).remove(chunk.first_seq());
                    let topic = &chunk.topic;
                    acked.extend(events.into_iter().map(|(seq, t)| (seq, Arc::clone(topic), t)));
                }
                Err(e) => {
                    if matches!(
                        e.code(),
                        Some(ErrorCode::OutOfOrderSequence | ErrorCode::WrongPartition)
                    ) {
                        let mut book = lock(&book);
                        if book.leads_its_stream(&chunk) {
                            tracing::warn!(
                                topic = %chunk.topic, partition = chunk.partition,
                                producer_id = chunk.producer_id, error = %e,
                                "no run of this producer's batches on the leader leads up to this one: its unacknowledged ones go again under a new identity"
                            );
                            book.lost.insert(stream_of(&chunk));
                        }
                    }
                    if !failed.swap(true, Ordering::AcqRel) {
                        tracing::warn!(error = %e, "a batch failed; will send it again");
                    }
                }
            },
            InFlight::Barrier(done) => {
                spool.acknowledge(&acked);
                acked.clear();
                let _ = done.send(());
            }
        }
        if acked.len() >= ACK_CHUNK_MAX || (queue.is_empty() && !acked.is_empty()) {
            spool.acknowledge(&acked);
            acked.clear();
        }
    }
    spool.acknowledge(&acked);
}
