//! Shipping (paper §3.2, "Producer"): the spool is read in order and handed to the batching
//! [`Producer`], which groups events per partition into compressed MessageSets. An acker
//! marks events acknowledged in the spool as their batches' acknowledgements come back.
//!
//! When any batch fails (a broker died, discovery found none), the shipper stops sending,
//! waits for everything in flight to settle, backs off, and reads again from the oldest
//! unacknowledged event. Events acknowledged meanwhile are skipped, so only the failed tail
//! is sent twice at most; each resend is counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use client::{Pending, Producer};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::spool::Spool;

/// Events read from the spool per batch at most.
const READ_RECORDS_MAX: usize = 5_000;
const READ_BYTES_MAX: usize = 4 << 20;
/// Acknowledgements awaited at most at once (the producer's buffer bounds them too).
const ACKS_IN_FLIGHT_MAX: usize = 100_000;
/// Acknowledged events handed to the spool in one call at most.
const ACK_CHUNK_MAX: usize = 1_024;
/// First pause after a failure; doubles up to `retry_backoff_max_ms`.
const BACKOFF_START_MS: u64 = 100;
/// An idle shipper looks for a failure flag this often.
const IDLE_POLL_MS: u64 = 100;

enum InFlight {
    Event {
        seq: u64,
        topic: Arc<str>,
        time_ms: i64,
        pending: Pending,
    },
    /// Answered once everything queued before it settled.
    Barrier(oneshot::Sender<()>),
}

/// Ships until `stop`, then lets in-flight acknowledgements settle.
pub(crate) async fn run(
    spool: Arc<Spool>,
    producer: Producer,
    metrics: Arc<Metrics>,
    retry_backoff_max_ms: u64,
    stop: CancellationToken,
) {
    let failed = Arc::new(AtomicBool::new(false));
    let (in_flight, queue) = mpsc::channel(ACKS_IN_FLIGHT_MAX);
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
        for record in batch {
            if failed.load(Ordering::Acquire) {
                break;
            }
            let pending = match producer.enqueue(&record.topic, None, &record.payload).await {
                Ok(pending) => pending,
                Err(e) => {
                    if !failed.swap(true, Ordering::AcqRel) {
                        tracing::warn!(error = %e, "cannot ship events; will retry");
                    }
                    break;
                }
            };
            if record.seq < sent_end {
                metrics.resent.inc();
            }
            sent_end = sent_end.max(record.seq + 1);
            let event = InFlight::Event {
                seq: record.seq,
                topic: record.topic,
                time_ms: record.time_ms,
                pending,
            };
            if in_flight.send(event).await.is_err() {
                break;
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

/// Awaits acknowledgements in send order and marks them in the spool.
async fn acker(spool: Arc<Spool>, mut queue: mpsc::Receiver<InFlight>, failed: Arc<AtomicBool>) {
    let mut acked = Vec::with_capacity(ACK_CHUNK_MAX);
    while let Some(item) = queue.recv().await {
        match item {
            InFlight::Event { seq, topic, time_ms, pending } => match pending.await {
                Ok(_) => acked.push((seq, topic, time_ms)),
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
