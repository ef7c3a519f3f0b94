//! The scrubber: bit rot under a log — a message of a sealed segment whose CRC no longer
//! matches — is found by reading every sealed segment now and then (as HDFS's block scanner
//! and Ceph's deep scrub read their blocks), and mended in place from another replica.
//!
//! Recovery on start checks the last segment only, which is where a crash leaves a torn
//! write; the sealed ones are served as they are, and a consumer's CRC check refuses a
//! damaged message. Replicas hold the same bytes at the same offsets (a follower copies its
//! leader's bytes and starts its segments where the leader did), so the damaged range — from
//! the first bad message to the end of its segment — is fetched from a replica with
//! `REPLICA_FETCH` as the repair reader, at most 16 MiB of whole messages at a time, each step
//! checked to be valid messages from a segment with the same base, written over the damage,
//! and the segment scanned again. A partition with no other replica (or none
//! that answers) stays damaged: it is logged and counted, and consumers still refuse it.
//!
//! ```text
//! every scrub_interval_ms: each partition ─▶ each sealed segment ─▶ scan CRCs (≤ scrub_bytes_per_s)
//!     damage at [from, segment end) ─▶ ≤ 16 MiB of whole messages from `from`, by REPLICA_FETCH
//!                                      from the leader, then the other ISR members
//!                                  ─▶ valid, same segment? pwrite + fsync in place, scan again
//! ```

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::link::fetch_range;
use crate::log::{Damage, LogManager, Partition};
use crate::metrics::Metrics;

/// Another replica a damaged range may be copied from: its id, its address, and the leader
/// epochs to ask it in (its log is in one of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairSource {
    pub replica: i32,
    pub addr: String,
    pub epochs: Vec<i32>,
}

/// The replicas to copy a partition's damage from, in the order to try them; none for a
/// broker outside a cluster.
pub type RepairSources = Arc<dyn Fn(&Partition) -> Vec<RepairSource> + Send + Sync>;

/// What the scrubber reads and where it repairs from.
pub struct Scrubber {
    pub logs: Arc<LogManager>,
    pub sources: RepairSources,
    /// What repair reads connect to other brokers with, under TLS.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub max_message_bytes: u32,
    pub metrics: Arc<Metrics>,
}

/// The first pass starts this soon after the broker does, or after `scrub_interval_ms` if
/// that is sooner: a broker restarted more often than its interval still scrubs.
const FIRST_PASS_AFTER: Duration = Duration::from_secs(300);

/// Bytes a repair copies and writes at a time: the damage of a segment can reach to its end
/// (1 GiB), and is mended in steps of this, the segment scanned again after each.
const REPAIR_STEP_BYTES: u64 = 16 << 20;

/// Scrubs every sealed segment of the broker's partitions, a pass every `interval`, until
/// `stop`.
pub async fn run(
    scrubber: Scrubber,
    interval: Duration,
    bytes_per_s: u64,
    stop: CancellationToken,
) {
    let mut wait = interval.min(FIRST_PASS_AFTER);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        let scrubbed = pass(&scrubber, bytes_per_s, &stop).await;
        tracing::debug!(bytes = scrubbed, "scrub pass done");
        wait = interval;
    }
}

/// One pass over every partition; the bytes it read.
async fn pass(scrubber: &Scrubber, bytes_per_s: u64, stop: &CancellationToken) -> u64 {
    let mut scrubbed = 0;
    for partition in scrubber.logs.partitions() {
        let bases = partition.segment_bases();
        for &base in bases.iter().take(bases.len().saturating_sub(1)) {
            if stop.is_cancelled() || partition.removed().is_cancelled() {
                return scrubbed;
            }
            let p = Arc::clone(&partition);
            let (bytes, damage) = match tokio::task::spawn_blocking(move || p.scrub_segment(base))
                .await
            {
                Ok(Ok(found)) => found,
                Ok(Err(e)) => {
                    tracing::warn!(partition = ?partition, segment = base, error = %e, "cannot scrub a segment");
                    continue;
                }
                Err(e) => {
                    tracing::error!(partition = ?partition, segment = base, error = %e, "scrubbing a segment panicked");
                    continue;
                }
            };
            scrubbed += bytes;
            scrubber.metrics.scrub_bytes.inc_by(bytes);
            if let Some(damage) = damage {
                scrubber.metrics.scrub_damage_found.inc();
                tracing::error!(
                    partition = ?partition, from = damage.from, to = damage.to,
                    reason = %damage.reason, "damaged messages in a sealed segment"
                );
                if repair_segment(scrubber, &partition, damage).await {
                    scrubber.metrics.scrub_repaired.inc();
                } else {
                    scrubber.metrics.scrub_unrepaired.inc();
                }
            }
            if bytes_per_s > 0 {
                let pause = Duration::from_secs_f64(bytes as f64 / bytes_per_s as f64);
                tokio::select! {
                    () = stop.cancelled() => return scrubbed,
                    () = tokio::time::sleep(pause) => {}
                }
            }
        }
    }
    scrubbed
}

/// Repairs `damage` a step at a time, scanning the segment again after each, until it scans
/// whole; whether it does.
async fn repair_segment(
    scrubber: &Scrubber,
    partition: &Arc<Partition>,
    mut damage: Damage,
) -> bool {
    loop {
        let Some(step) = repair(scrubber, partition, &damage).await else { return false };
        let p = Arc::clone(partition);
        let base = damage.segment_base;
        match tokio::task::spawn_blocking(move || p.scrub_segment(base)).await {
            Ok(Ok((_, None))) => return true,
            // Only what follows the bytes written may still be damaged: progress, or give up.
            Ok(Ok((_, Some(next)))) if next.from >= damage.from + step => damage = next,
            Ok(Ok((_, Some(_)))) | Ok(Err(_)) | Err(_) => return false,
        }
    }
}

/// Copies up to [`REPAIR_STEP_BYTES`] of whole messages from the start of the damage from the
/// first replica that has them, and writes them over it; how many bytes were written.
async fn repair(scrubber: &Scrubber, partition: &Arc<Partition>, damage: &Damage) -> Option<u64> {
    let sources = (scrubber.sources)(partition);
    if sources.is_empty() {
        tracing::error!(
            partition = ?partition, from = damage.from,
            "no other in-sync replica to repair from: consumers refuse the damaged messages by their CRC"
        );
        return None;
    }
    for RepairSource { replica, addr, epochs } in sources {
        let tls = scrubber.tls.as_ref();
        let copied = fetch_range(&addr, tls, partition, &epochs, damage, REPAIR_STEP_BYTES).await;
        let bytes = match copied {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::warn!(partition = ?partition, replica, error = %e, "cannot copy the damaged range");
                continue;
            }
        };
        let step = bytes.len() as u64;
        let (p, segment_base, from) = (Arc::clone(partition), damage.segment_base, damage.from);
        let length_max = scrubber.max_message_bytes;
        let written =
            tokio::task::spawn_blocking(move || p.repair(segment_base, from, &bytes, length_max))
                .await;
        match written {
            Ok(Ok(true)) => {
                tracing::info!(
                    partition = ?partition, from = damage.from, bytes = step, replica,
                    "damaged range repaired from a replica"
                );
                return Some(step);
            }
            Ok(Ok(false)) => {
                tracing::warn!(partition = ?partition, replica, "the replica's copy does not fit the damaged segment");
            }
            Ok(Err(e)) => {
                tracing::error!(partition = ?partition, error = %e, "cannot write the repair");
                return None;
            }
            Err(e) => {
                tracing::error!(partition = ?partition, error = %e, "writing the repair panicked");
                return None;
            }
        }
    }
    None
}
