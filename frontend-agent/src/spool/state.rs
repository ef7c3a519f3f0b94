//! The spool's state, under one lock, and what the writer thread, the readers and the
//! checkpoint share: the segments, the sequence numbers, the acknowledgements and audit counts
//! (accepted and acknowledged),
//! and the options the spool was opened with.

use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use events::audit::AuditCounts;
use tokio::sync::watch;

use crate::config::SpoolFull;
use crate::metrics::Metrics;

/// How the spool is set up.
#[derive(Debug, Clone)]
pub struct SpoolOptions {
    pub dir: PathBuf,
    pub max_bytes: u64,
    pub segment_bytes: u64,
    pub full: SpoolFull,
    /// The audit's host and window.
    pub host: String,
    pub window_ms: i64,
}

/// One segment file: records `base..end`.
#[derive(Debug, Clone)]
pub(super) struct Segment {
    pub(super) base: u64,
    pub(super) end: u64,
    pub(super) bytes: u64,
}

#[derive(Debug)]
pub(super) struct State {
    /// Oldest first; the last is the one being written.
    pub(super) segments: VecDeque<Segment>,
    pub(super) total_bytes: u64,
    pub(super) next_seq: u64,
    /// Every seq below is acknowledged or dropped.
    pub(super) floor: u64,
    pub(super) acked_above: BTreeSet<u64>,
    /// `agent` counts: events acknowledged by a broker.
    pub(super) audit: AuditCounts,
    /// `accepted` counts: events made durable and answered as accepted.
    pub(super) accepted: AuditCounts,
    /// Every seq below is counted in `accepted`.
    pub(super) accepted_end: u64,
    /// `(first seq, ms since the epoch)`: when the events from that seq on were accepted, one
    /// entry per group commit at most every [`ACCEPTED_AT_GRAIN_MS`], only those not yet
    /// acknowledged (the first entry covers the floor).
    pub(super) accepted_at: VecDeque<(u64, i64)>,
    /// The acknowledgement state changed since the last checkpoint.
    pub(super) dirty: bool,
    /// Set when the writer hit an I/O error: the spool takes nothing more.
    pub(super) failed: Option<String>,
}

/// Accept times closer together than this share one entry of [`State::accepted_at`].
pub(super) const ACCEPTED_AT_GRAIN_MS: i64 = 100;

impl State {
    pub(super) fn is_done(&self, seq: u64) -> bool {
        seq < self.floor || self.acked_above.contains(&seq)
    }

    pub(super) fn advance_floor(&mut self) {
        while self.acked_above.remove(&self.floor) {
            self.floor += 1;
        }
        // Entries wholly below the floor are done with.
        while self.accepted_at.get(1).is_some_and(|(seq, _)| *seq <= self.floor) {
            self.accepted_at.pop_front();
        }
    }

    /// Events from `first_seq` on were accepted at `now_ms`.
    pub(super) fn accepted_from(&mut self, first_seq: u64, now_ms: i64) {
        match self.accepted_at.back() {
            Some((_, at)) if now_ms - at < ACCEPTED_AT_GRAIN_MS => {}
            _ => self.accepted_at.push_back((first_seq, now_ms)),
        }
    }

    /// Events accepted and neither acknowledged nor dropped.
    pub(super) fn unacknowledged(&self) -> u64 {
        self.next_seq - self.floor - self.acked_above.len() as u64
    }

    /// Sets the gauges of what waits to be acknowledged.
    pub(super) fn report_backlog(&self, metrics: &Metrics) {
        let waiting = self.unacknowledged();
        metrics.unacknowledged.set(waiting as i64);
        let oldest_ms = match self.accepted_at.front() {
            Some((_, at)) if waiting > 0 => *at,
            _ => 0,
        };
        metrics.oldest_unacknowledged_timestamp.set(oldest_ms / 1_000);
    }
}

/// What the writer thread and the readers share.
pub(super) struct Shared {
    pub(super) segments_dir: PathBuf,
    pub(super) options: SpoolOptions,
    pub(super) state: Mutex<State>,
    /// Every seq below the value is written and fsynced.
    pub(super) durable: watch::Sender<u64>,
    pub(super) metrics: Arc<Metrics>,
    /// The send journal: pruned of acknowledged chunks after each checkpoint.
    pub(super) sends: Mutex<super::sends::Sends>,
}

impl Shared {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn segment_path(&self, base: u64) -> PathBuf {
        segment_path(&self.segments_dir, base)
    }
}

pub(super) fn segment_path(dir: &Path, base: u64) -> PathBuf {
    dir.join(format!("{base:020}.spool"))
}
