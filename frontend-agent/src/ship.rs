//! Shipping (paper §3.2, "Producer"): the spool is read in order, its events are framed per
//! topic into chunks of at most a batch (`batch_messages`, `batch_bytes`), and each chunk is
//! handed to the batching [`Producer`] whole, which sends it to one partition as a compressed
//! MessageSet. An acker marks a chunk's events acknowledged in the spool once its
//! acknowledgement comes back. A chunk costs the producer what one event did before it: one
//! buffer permit, one queue slot, one reply.
//!
//! When any batch fails (a broker died, discovery found none), the shipper stops sending,
//! waits for everything in flight to settle, backs off, and reads again from the oldest
//! unacknowledged event. Events acknowledged meanwhile are skipped, so only the failed tail
//! is sent twice at most; each resend is counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use client::{FramedMessages, Pending, Producer};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::spool::Spool;

/// Events read from the spool per batch at most.
const READ_RECORDS_MAX: usize = 5_000;
const READ_BYTES_MAX: usize = 4 << 20;
/// Chunks awaited at most at once (the producer's buffer bounds them too).
const CHUNKS_IN_FLIGHT_MAX: usize = 10_000;
/// Acknowledged events handed to the spool in one call at most.
const ACK_CHUNK_MAX: usize = 1_024;
/// First pause after a failure; doubles up to `retry_backoff_max_ms`.
const BACKOFF_START_MS: u64 = 100;
/// An idle shipper looks for a failure flag this often.
const IDLE_POLL_MS: u64 = 100;

enum InFlight {
    /// A chunk's events, `(seq, time_ms)`, all of `topic`.
    Chunk { topic: Arc<str>, events: Vec<(u64, i64)>, pending: Pending },
    /// Answered once everything queued before it settled.
    Barrier(oneshot::Sender<()>),
}

/// How big a chunk gets: a batch of the producer's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChunkLimits {
    pub messages: usize,
    pub bytes: usize,
}

/// Events of one topic being framed into a chunk.
struct Chunk {
    topic: Arc<str>,
    messages: FramedMessages,
    events: Vec<(u64, i64)>,
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
    let (in_flight, queue) = mpsc::channel(CHUNKS_IN_FLIGHT_MAX);
    let acker = tokio::spawn(acker(Arc::clone(&spool), queue, Arc::clone(&failed)));
    let mut reader = Some(spool.reader());
    let mut durable = spool.durable();
    // One past the highest seq ever handed to the producer: below it, a send is a resend.
    let mut sent_end = 0u64;
    let mut backoff = service::Backoff::from_ms(BACKOFF_START_MS, retry_backoff_max_ms);
    while !stop.is_cancelled() {
        if failed.load(Ordering::Acquire) {
            let (done, settled) = oneshot::channel();
            if in_flight.send(InFlight::Barrier(done)).await.is_err() || settled.await.is_err() {
                break;
            }
            failed.store(false, Ordering::Release);
            metrics.ship_failures.inc();
            if !backoff.wait(&stop).await {
                break;
            }
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
        // One open chunk per topic of the batch; a full one is shipped at once, the rest after.
        let mut open: Vec<Chunk> = Vec::new();
        let mut shipped = true;
        for record in batch {
            let at = match open.iter().position(|c| c.topic == record.topic) {
                Some(at) => at,
                None => {
                    open.push(Chunk {
                        topic: Arc::clone(&record.topic),
                        messages: FramedMessages::with_capacity(limits.bytes.min(64 << 10)),
                        events: Vec::new(),
                    });
                    open.len() - 1
                }
            };
            let chunk = &mut open[at];
            let framed_bytes = record.payload.len() + protocol::PLAIN_MESSAGE_OVERHEAD_BYTES;
            if !chunk.messages.is_empty()
                && (chunk.messages.len() >= limits.messages
                    || chunk.messages.bytes() + framed_bytes > limits.bytes)
            {
                let full = open.swap_remove(at);
                if !ship(full, &producer, &metrics, &in_flight, &failed, &mut sent_end).await {
                    shipped = false;
                    break;
                }
                open.push(Chunk {
                    topic: Arc::clone(&record.topic),
                    messages: FramedMessages::with_capacity(limits.bytes.min(64 << 10)),
                    events: Vec::new(),
                });
            }
            let chunk = open.iter_mut().find(|c| c.topic == record.topic).expect("opened above");
            chunk.messages.push(&record.payload);
            chunk.events.push((record.seq, record.time_ms));
        }
        if shipped {
            for chunk in open {
                if !ship(chunk, &producer, &metrics, &in_flight, &failed, &mut sent_end).await {
                    break;
                }
            }
        }
        if !failed.load(Ordering::Acquire) {
            backoff.reset();
        }
    }
    drop(in_flight);
    if acker.await.is_err() {
        tracing::error!("the acker task panicked");
    }
}

/// Hands `chunk` to the producer and its acknowledgement to the acker; false when shipping
/// must stop (a failure, or the acker is gone).
async fn ship(
    chunk: Chunk,
    producer: &Producer,
    metrics: &Metrics,
    in_flight: &mpsc::Sender<InFlight>,
    failed: &AtomicBool,
    sent_end: &mut u64,
) -> bool {
    if failed.load(Ordering::Acquire) {
        return false;
    }
    let Chunk { topic, messages, events } = chunk;
    let pending = match producer.enqueue_messages(&topic, None, messages).await {
        Ok(pending) => pending,
        Err(e) => {
            if !failed.swap(true, Ordering::AcqRel) {
                tracing::warn!(error = %e, "cannot ship events; will retry");
            }
            return false;
        }
    };
    let resent = events.iter().filter(|(seq, _)| *seq < *sent_end).count();
    metrics.resent.inc_by(resent as u64);
    let last = events.iter().map(|(seq, _)| seq + 1).max().unwrap_or(0);
    *sent_end = (*sent_end).max(last);
    in_flight.send(InFlight::Chunk { topic, events, pending }).await.is_ok()
}

/// Awaits acknowledgements in send order and marks them in the spool.
async fn acker(spool: Arc<Spool>, mut queue: mpsc::Receiver<InFlight>, failed: Arc<AtomicBool>) {
    let mut acked = Vec::with_capacity(ACK_CHUNK_MAX);
    while let Some(item) = queue.recv().await {
        match item {
            InFlight::Chunk { topic, events, pending } => match pending.await {
                Ok(_) => acked.extend(
                    events.into_iter().map(|(seq, time_ms)| (seq, Arc::clone(&topic), time_ms)),
                ),
                Err(e) => {
                    if !failed.swap(true, Ordering::AcqRel) {
                        tracing::warn!(error = %e, "a batch failed; will resend from the spool");
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
