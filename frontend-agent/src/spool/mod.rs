//! The durable spool: every accepted event is on disk before the caller hears "accepted",
//! and leaves only once a broker acknowledged it.
//!
//! ```text
//! append ─▶ writer thread (group fsync) ─▶ {dir}/segments/{first_seq:020}.spool ─▶ SpoolReader ─▶ shipper
//!                                                                                   acks ─▶ checkpoint
//! ```
//!
//! Events get contiguous sequence numbers. Acknowledgements arrive out of order (one batch per
//! partition in flight), so the spool keeps the *floor* (every seq below it is acknowledged or
//! dropped) plus the acknowledged seqs above it. The checkpoint — floor, those seqs and the
//! audit counts they produced, in one file written durably — is what survives a `kill -9`:
//! on restart only events it does not list are shipped again, and the audit counts resume
//! where they were. Segments entirely below the checkpointed floor are deleted.
//!
//! The spool is bounded by `max_bytes` of segment files; when an append does not fit,
//! [`SpoolFull::Block`] refuses it and [`SpoolFull::DropOldest`] deletes the oldest segment.

mod checkpoint;
mod error;
mod reader;
pub mod record;
mod sends;
mod state;
mod writer;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use events::audit::{AuditCounts, AuditRecord, Tier, window_start};
use tokio::sync::{mpsc, oneshot, watch};

use crate::metrics::Metrics;
pub use error::{RETRY_AFTER_MS, SpoolError};
pub use reader::SpoolReader;
pub use record::SpoolRecord;
pub use sends::SentChunk;
pub use state::SpoolOptions;
use state::{Segment, Shared, State, segment_path};
use writer::Append;
pub use writer::NewEvent;

/// Requests queued for the writer thread at most.
const APPENDS_QUEUED_MAX: usize = 1024;
/// The spool of one agent. Open one per directory.
pub struct Spool {
    shared: Arc<Shared>,
    /// Chunks the send journal held on open whose events are all unacknowledged: sent before
    /// a crash, to be sent again as they were.
    replays: Mutex<Vec<SentChunk>>,
    appends: Mutex<Option<mpsc::Sender<Append>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Spool {
    /// Opens (or creates) the spool in `options.dir`, recovering from a crash: a torn tail is
    /// cut off, and acknowledged segments are deleted.
    pub fn open(options: SpoolOptions, metrics: Arc<Metrics>) -> Result<Spool, SpoolError> {
        let segments_dir = options.dir.join("segments");
        std::fs::create_dir_all(&segments_dir).map_err(SpoolError::io("create", &segments_dir))?;
        let checkpoint = checkpoint::read(&options.dir)?;
        let counts = |tier| {
            AuditCounts::new(tier, options.host.clone(), options.window_ms)
                .map_err(|e| SpoolError::Failed(e.to_string()))
        };
        let (mut audit, mut accepted) = (counts(Tier::Agent)?, counts(Tier::Accepted)?);
        if checkpoint.window_ms == options.window_ms {
            for (counts, rows) in
                [(&mut audit, &checkpoint.audit), (&mut accepted, &checkpoint.accepted)]
            {
                for (topic, window_start, count) in rows {
                    counts.add(topic, *window_start, *count);
                }
            }
        } else if !checkpoint.audit.is_empty() {
            tracing::warn!(
                old_window_ms = checkpoint.window_ms,
                "audit window changed since the last run: earlier counts are not resumed"
            );
        }
        // Events durable since the checkpoint are counted accepted again from the segments;
        // a checkpoint from before `accepted` was counted starts counting from here on.
        let count_from = checkpoint.accepted_end.unwrap_or(u64::MAX);
        let mut segments = writer::recover(&segments_dir, &mut |record| {
            if record.seq >= count_from {
                accepted.add(&record.topic, record.time_ms, 1);
            }
        })?;
        let last_end = segments.back().map_or(0, |s| s.end);
        let next_seq = last_end.max(checkpoint.floor);
        let mut floor = checkpoint.floor;
        // Segments wholly acknowledged before the crash go now.
        while segments.front().is_some_and(|s| s.end <= floor) {
            let segment = segments.pop_front().expect("front exists");
            let path = segment_path(&segments_dir, segment.base);
            std::fs::remove_file(&path).map_err(SpoolError::io("delete", &path))?;
        }
        floor = floor.max(segments.front().map_or(next_seq, |s| s.base));
        let mut acked_above = checkpoint.acked_above;
        acked_above.retain(|&seq| seq > floor && seq < next_seq);
        let unacked = next_seq - floor - acked_above.len() as u64;
        if unacked > 0 {
            tracing::info!(
                unacked,
                floor,
                next_seq,
                "replaying unacknowledged events from the spool"
            );
        }
        // Always write into a fresh segment; an empty last one is reused.
        if segments.back().is_some_and(|s| s.base == next_seq) {
            segments.pop_back();
        }
        let file = writer::create_segment(&segments_dir, next_seq)?;
        segments.push_back(Segment { base: next_seq, end: next_seq, bytes: 0 });
        let total_bytes = segments.iter().map(|s| s.bytes).sum();
        metrics.spool_bytes.set(total_bytes as i64);
        let mut state = State {
            segments,
            total_bytes,
            next_seq,
            floor,
            acked_above,
            audit,
            accepted,
            accepted_end: next_seq,
            // Replayed events were accepted before the restart; when is not kept.
            accepted_at: VecDeque::from([(floor, service::now_ms())]),
            dirty: false,
            failed: None,
        };
        state.advance_floor();
        state.report_backlog(&metrics);
        let mut sends = sends::Sends::open(&options.dir)?;
        // A chunk is acknowledged whole: one with some of its events done was acknowledged (or
        // partly dropped under drop-oldest, when what is left goes as a new chunk).
        let replays: Vec<SentChunk> =
            sends.chunks().filter(|c| !c.seqs.iter().any(|&s| state.is_done(s))).cloned().collect();
        let replayed: std::collections::HashSet<u64> =
            replays.iter().map(SentChunk::first_seq).collect();
        sends.forget(|first| !replayed.contains(&first))?;
        if !replays.is_empty() {
            tracing::info!(
                chunks = replays.len(),
                "sending again the chunks sent before the restart"
            );
        }
        let (durable, _) = watch::channel(next_seq);
        let shared = Arc::new(Shared {
            segments_dir,
            options,
            state: Mutex::new(state),
            durable,
            metrics,
            sends: Mutex::new(sends),
        });
        let (appends, queue) = mpsc::channel(APPENDS_QUEUED_MAX);
        let thread_shared = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("spool-writer".into())
            .spawn(move || writer::run(thread_shared, queue, file, next_seq))
            .map_err(SpoolError::io("start the writer thread for", &shared.segments_dir))?;
        Ok(Spool {
            shared,
            replays: Mutex::new(replays),
            appends: Mutex::new(Some(appends)),
            writer: Mutex::new(Some(writer)),
        })
    }

    /// Writes `events` durably (fsynced) and returns the seq of the first. All or nothing:
    /// a full spool (policy `block`) refuses the whole call.
    pub async fn append(&self, events: Vec<NewEvent>) -> Result<u64, SpoolError> {
        let sender = self.appends.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let sender = sender.ok_or(SpoolError::Closed)?;
        let (reply, answer) = oneshot::channel();
        sender.send(Append { events, reply }).await.map_err(|_| SpoolError::Closed)?;
        answer.await.map_err(|_| SpoolError::Closed)?
    }

    /// A reader from the oldest unacknowledged event.
    pub fn reader(&self) -> SpoolReader {
        let floor = self.shared.lock().floor;
        SpoolReader::new(Arc::clone(&self.shared), floor)
    }

    /// Watches the durable end (every seq below it is on disk).
    pub fn durable(&self) -> watch::Receiver<u64> {
        self.shared.durable.subscribe()
    }

    /// The oldest seq neither acknowledged nor dropped.
    pub fn floor(&self) -> u64 {
        self.shared.lock().floor
    }

    /// Events spooled and not yet acknowledged (nor dropped).
    pub fn unacknowledged(&self) -> u64 {
        self.shared.lock().unacknowledged()
    }

    /// The chunks sent before the last crash and not acknowledged, to be sent again as they
    /// were (once; empty after the first call).
    pub fn take_replays(&self) -> Vec<SentChunk> {
        std::mem::take(&mut *self.replays.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Writes chunks about to be sent to the send journal, durably. Blocking: call from a
    /// blocking context.
    pub fn record_sends(&self, chunks: &[SentChunk]) -> Result<(), SpoolError> {
        self.shared.sends.lock().unwrap_or_else(PoisonError::into_inner).record(chunks)
    }

    /// Keeps the records that still need shipping.
    pub fn retain_undone(&self, records: &mut Vec<SpoolRecord>) {
        let state = self.shared.lock();
        records.retain(|r| !state.is_done(r.seq));
    }

    /// Marks records acknowledged by a broker and counts them for the audit (each seq once).
    pub fn acknowledge(&self, records: &[(u64, Arc<str>, i64)]) {
        let window_ms = self.shared.options.window_ms;
        let mut state = self.shared.lock();
        let mut counted = 0;
        // Counted per (topic, window) first: one audit update per group, not per event.
        let mut groups: Vec<(&str, i64, i64)> = Vec::new();
        for (seq, topic, time_ms) in records {
            if state.is_done(*seq) {
                continue;
            }
            state.acked_above.insert(*seq);
            counted += 1;
            let window = window_start(*time_ms, window_ms);
            match groups.iter_mut().find(|(t, w, _)| *w == window && *t == &**topic) {
                Some(group) => group.2 += 1,
                None => groups.push((topic, window, 1)),
            }
        }
        for (topic, window, count) in groups {
            state.audit.add(topic, window, count);
        }
        if counted > 0 {
            state.advance_floor();
            state.dirty = true;
            state.report_backlog(&self.shared.metrics);
        }
        drop(state);
        self.shared.metrics.acknowledged.inc_by(counted);
    }

    /// Audit records (`accepted` and `agent`) whose counts changed since last taken, both
    /// taken at one instant: an `agent` count is never ahead of the `accepted` count beside it.
    /// Each topic's newest window is among them every time: the agent's heartbeat.
    pub fn take_audit_changes(&self) -> Vec<AuditRecord> {
        let mut state = self.shared.lock();
        state.accepted.touch_newest();
        state.audit.touch_newest();
        let mut records = state.accepted.take_changed();
        records.extend(state.audit.take_changed());
        records
    }

    /// Hands back audit records whose publication failed.
    pub fn audit_publish_failed(&self, records: &[AuditRecord]) {
        let mut state = self.shared.lock();
        state.accepted.mark_changed(records);
        state.audit.mark_changed(records);
    }

    /// Forgets published windows that ended before `before_ms`.
    pub fn forget_audit_before(&self, before_ms: i64) {
        let mut state = self.shared.lock();
        state.audit.forget_published_before(before_ms);
        state.accepted.forget_published_before(before_ms);
    }

    /// The cumulative `agent` count (acknowledged events) of `topic` in the window starting
    /// at `window_start`.
    pub fn audit_count(&self, topic: &str, window_start: i64) -> i64 {
        self.shared.lock().audit.count(topic, window_start)
    }

    /// The cumulative `accepted` count of `topic` in the window starting at `window_start`.
    pub fn accepted_count(&self, topic: &str, window_start: i64) -> i64 {
        self.shared.lock().accepted.count(topic, window_start)
    }

    /// Makes the acknowledgement state durable, then deletes segments it covers. Blocking:
    /// call from a blocking context.
    pub fn checkpoint(&self) -> Result<(), SpoolError> {
        checkpoint::write_and_clean(&self.shared)
    }

    /// Stops the writer (appends after this fail with [`SpoolError::Closed`]) and writes a
    /// last checkpoint. Blocking.
    pub fn close(&self) -> Result<(), SpoolError> {
        drop(self.appends.lock().unwrap_or_else(PoisonError::into_inner).take());
        let writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(writer) = writer
            && writer.join().is_err()
        {
            tracing::error!("the spool writer thread panicked");
        }
        self.checkpoint()
    }
}
