//! The log's background work: one flusher per partition (`flush_messages`, `flush_ms`, or a
//! producer waiting with `acks` 2), one retention sweep over every partition, and the cleaner
//! of compacted topics.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio_util::sync::CancellationToken;

use super::{Cleaned, LogManager, Partition};

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

/// Cleans the compacted partitions every `interval`, until `stop`: a partition whose sealed
/// segments below the visible end reach further than at its last pass, or whose oldest kept
/// tombstone has expired since. Reads at most `bytes_per_s` (0: no limit); `cleaned` is told
/// what each pass did.
pub async fn cleaner(
    logs: Arc<LogManager>,
    interval: Duration,
    bytes_per_s: u64,
    cleaned: impl Fn(&Cleaned) + Send + 'static,
    stop: CancellationToken,
) {
    // Per partition: the cleanable end of its last pass and when a kept tombstone expires.
    let mut passes: HashMap<(String, u32), (u64, Option<i64>)> = HashMap::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let partitions = logs.partitions();
        for partition in &partitions {
            if !partition.config().cleanup_policy.compact || stop.is_cancelled() {
                continue;
            }
            let key = (partition.topic().to_owned(), partition.index());
            let now_ms = service::clock::now_ms();
            let end = partition.cleanable_end();
            let due = match passes.get(&key) {
                None => true,
                Some(&(cleaned, expiry)) => end > cleaned || expiry.is_some_and(|at| at <= now_ms),
            };
            if !due {
                continue;
            }
            let p = Arc::clone(partition);
            let started = Instant::now();
            let pass = tokio::task::spawn_blocking(move || {
                let mut throttle = |bytes: u64| {
                    if bytes_per_s > 0 {
                        std::thread::sleep(Duration::from_secs_f64(
                            bytes as f64 / bytes_per_s as f64,
                        ));
                    }
                };
                p.clean(now_ms, &mut throttle)
            })
            .await;
            match pass {
                Ok(Ok(report)) => {
                    cleaned(&report);
                    if report.segments > 0 {
                        let ms = started.elapsed().as_millis() as u64;
                        tracing::info!(partition = ?partition, segments = report.segments, records = report.records, bytes_read = report.bytes_read, ms, "compacted");
                    }
                    passes.insert(key, (end, report.next_expiry));
                }
                Ok(Err(e)) => {
                    tracing::error!(partition = ?partition, error = %e, "cleaning failed");
                    passes.insert(key, (end, None));
                }
                Err(e) => tracing::error!(partition = ?partition, error = %e, "cleaner panicked"),
            }
        }
        passes.retain(|(topic, index), _| {
            partitions.iter().any(|p| p.topic() == topic && p.index() == *index)
        });
    }
}
