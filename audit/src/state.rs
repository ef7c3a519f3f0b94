//! What the readers write and the HTTP handlers read: the ledger, whether the sources have been
//! read to the end they had at start, and the counters behind `/metrics`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::Config;
use crate::ledger::{Clock, Ledger};

/// Locks a std mutex, ignoring poisoning: every critical section leaves its data consistent
/// (no `.await` and no panicking path is held inside).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) struct Shared {
    pub config: Config,
    /// TLS to the brokers read.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    pub ledger: Mutex<Ledger>,
    pub catch_up: CatchUp,
    pub stats: Stats,
}

impl Shared {
    pub fn new(
        config: Config,
        sources: usize,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    ) -> Shared {
        let catch_up = CatchUp {
            started: Instant::now(),
            max: Duration::from_millis(config.catch_up_max_ms),
            scans_pending: AtomicUsize::new(sources),
            partitions_pending: AtomicUsize::new(0),
        };
        Shared {
            ledger: Mutex::new(Ledger::new(config.audit_window_ms)),
            config,
            tls,
            catch_up,
            stats: Stats::default(),
        }
    }

    /// The clock verdicts are given by, now.
    pub fn clock(&self) -> Clock {
        Clock {
            now_ms: service::now_ms(),
            grace_ms: self.config.grace_ms,
            loader_grace_ms: self.config.loader_grace_ms.unwrap_or(0).max(self.config.grace_ms),
            caught_up: self.catch_up.caught_up(),
        }
    }
}

/// Tracks the replay on start: every source (the analytics cluster and each live cluster)
/// scans its registry once, and every partition found then is read up to the end it had.
/// Until both are done no verdict is given, so a restart never shows a half-read window as
/// loss; after `catch_up_max_ms` verdicts are given anyway (a source may be down for good).
pub(crate) struct CatchUp {
    started: Instant,
    max: Duration,
    scans_pending: AtomicUsize,
    partitions_pending: AtomicUsize,
}

impl CatchUp {
    pub fn caught_up(&self) -> bool {
        let done = self.scans_pending.load(Ordering::Acquire) == 0
            && self.partitions_pending.load(Ordering::Acquire) == 0;
        done || self.started.elapsed() >= self.max
    }

    pub fn scan_done(&self) {
        self.scans_pending.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A partition found on start, to read to its end then before verdicts are given.
pub(crate) struct PendingPartition {
    shared: Arc<Shared>,
    done: bool,
}

impl PendingPartition {
    pub fn new(shared: &Arc<Shared>) -> PendingPartition {
        shared.catch_up.partitions_pending.fetch_add(1, Ordering::AcqRel);
        PendingPartition { shared: Arc::clone(shared), done: false }
    }

    pub fn done(&mut self) {
        if !std::mem::replace(&mut self.done, true) {
            self.shared.catch_up.partitions_pending.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Counters for `/metrics`.
#[derive(Default)]
pub(crate) struct Stats {
    /// `_audit` records taken into the ledger.
    pub records_applied: AtomicU64,
    /// `_audit` records not taken, by reason.
    pub records_rejected: Mutex<BTreeMap<&'static str, u64>>,
    /// Events counted per live cluster.
    pub live_events: Mutex<BTreeMap<String, u64>>,
    /// Live messages without a readable event header, per live cluster.
    pub live_unreadable: Mutex<BTreeMap<String, u64>>,
    /// Failed fetches, registry reads and scans (each retried after a backoff).
    pub read_errors: AtomicU64,
}

impl Stats {
    pub fn reject(&self, reason: &'static str) {
        *lock(&self.records_rejected).entry(reason).or_default() += 1;
    }

    pub fn add(map: &Mutex<BTreeMap<String, u64>>, key: &str, n: u64) {
        if n == 0 {
            return;
        }
        let mut map = lock(map);
        match map.get_mut(key) {
            Some(count) => *count += n,
            None => {
                map.insert(key.to_owned(), n);
            }
        }
    }
}
