//! The spool's state, under one lock, and what the writer thread, the readers and the
//! checkpoint share: the segments, the sequence numbers, the acknowledgements and audit counts,
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
    pub(super) audit: AuditCounts,
    /// The acknowledgement state changed since the last checkpoint.
    pub(super) dirty: bool,
    /// Set when the writer hit an I/O error: the spool takes nothing more.
    pub(super) failed: Option<String>,
}

impl State {
    pub(super) fn is_done(&self, seq: u64) -> bool {
        seq < self.floor || self.acked_above.contains(&seq)
    }

    pub(super) fn advance_floor(&mut self) {
        while self.acked_above.remove(&self.floor) {
            self.floor += 1;
        }
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
