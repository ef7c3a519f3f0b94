//! The log's background work: one flusher per partition (`flush_messages`, `flush_ms`, or a
//! producer waiting with `acks` 2) and one retention sweep over every partition.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio_util::sync::CancellationToken;

use super::{LogManager, Partition};

/// How long a failed flush waits before the next try.
const FLUSH_RETRY: Duration = Duration::from_secs(1);

/// Flushes `partition` whenever `flush_messages`, `flush_ms` or a waiting producer says so,
/// until `stop` or the partition's removal; `flushed` is told how long each flush took.
pub async fn flusher(
    partition: Arc<Partition>,
    flushed: impl Fn(Duration) + Send + 'static,
    stop: CancellationToken,
) {
    loop {
        let deadline = partition.flush_deadline();
        let sleep = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = partition.removed().cancelled() => return,
            _ = partition.flush_wanted() => {}
            _ = sleep => {}
        }
        if !partition.flush_due(Instant::now()) {
            continue;
        }
        let p = Arc::clone(&partition);
        let started = Instant::now();
        let result = tokio::task::spawn_blocking(move || p.flush()).await;
        flushed(started.elapsed());
        let failure = match result {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        };
        tracing::error!(partition = ?partition, error = %failure, "flush failed; retrying");
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(FLUSH_RETRY) => {}
        }
    }
}

/// Deletes expired segments of every partition every `interval`, and moves each log start
/// DeleteRecords asked for that the log now reaches, until `stop`.
pub async fn retention(logs: Arc<LogManager>, interval: Duration, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let logs = Arc::clone(&logs);
        let swept = tokio::task::spawn_blocking(move || {
            let now = SystemTime::now();
            for partition in logs.partitions() {
                if let Err(e) = partition.enforce_retention(now) {
                    tracing::error!(partition = ?partition, error = %e, "retention failed");
                }
                if let Err(e) = partition.advance_start() {
                    tracing::error!(partition = ?partition, error = %e, "cannot move the log start");
                }
            }
        })
        .await;
        if let Err(e) = swept {
            tracing::error!(error = %e, "retention task panicked");
        }
    }
}
