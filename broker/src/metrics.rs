//! Counters of what the broker has done, readable while it runs.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Metrics {
    pub connections_accepted: AtomicU64,
    /// Connections closed at once because `max_connections` were open.
    pub connections_refused: AtomicU64,
    pub produce_requests: AtomicU64,
    pub messages_in: AtomicU64,
    pub bytes_in: AtomicU64,
    /// Writes to a log: fewer than produce requests when pipelined produces to one partition
    /// are appended together.
    pub appends: AtomicU64,
    pub fetch_requests: AtomicU64,
    /// Long-poll fetches that waited for data.
    pub fetches_parked: AtomicU64,
    /// Long-poll fetches answered at once because `max_parked_fetches` were waiting.
    pub fetches_not_parked: AtomicU64,
    /// Message bytes sent to consumers, all of them by `sendfile(2)`.
    pub bytes_sent_by_sendfile: AtomicU64,
    pub sendfile_calls: AtomicU64,
    /// Requests answered with an error or a closed connection.
    pub requests_rejected: AtomicU64,
}

impl Metrics {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
