//! A follower of one partition (`docs/design.md`, "Replicated partitions"): it copies the leader's
//! bytes verbatim, so that a byte offset names the same message on every replica, after first
//! cutting what it must not keep by the leader-epoch rule of KIP-101 and KIP-279 — never by
//! the high watermark.
//!
//! ```text
//! truncate: ask the leader where my latest epoch ends ─▶ cut to min(that end, my end for that epoch)
//!           (the leader answers an older epoch: ask again about that one in my own log)
//! fetch:    REPLICA_FETCH from my log end ─▶ whole messages appended as they came, in their epoch
//! ```
//!
//! The follower speaks the broker protocol to its leader over one [`PeerLink`].

use std::convert::Infallible;
use std::sync::Arc;

use protocol::{
    ErrorCode, OffsetForLeaderEpochRequest, OffsetsRequest, RecordNumberRequest, ReplicaFetchPart,
    ReplicaFetchPartition, ReplicaFetchRequest, Request, Response, UNDEFINED_EPOCH,
};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use futures::future::BoxFuture;

use super::link::{LinkError, PeerLink, whole_messages};
use crate::log::index::{CountError, count_records};
use crate::log::producers::History;
use crate::log::{LogError, Partition};

/// Whole messages of a fetch are appended; a fetch ends in at most one partial message, so a
/// fetch must have room for the largest message a leader accepts and its framing.
const FRAMING_BYTES: u32 = 4 + 4 + 1 + 1;

/// What one follower copies from where.
#[derive(Debug, Clone)]
pub struct FollowerConfig {
    /// This broker's id, sent to the leader.
    pub replica_id: i32,
    pub leader_addr: String,
    /// The leader epoch this broker follows in; a leader in another epoch refuses.
    pub leader_epoch: i32,
    /// Bytes asked for per fetch (raised to fit the largest message).
    pub fetch_max_bytes: u32,
    /// How long a fetch waits at the leader for new data.
    pub fetch_max_wait_ms: i32,
    /// Largest message the leader accepts: what a fetch must fit.
    pub max_message_bytes: u32,
    /// Bytes per second this follower copies at, at most; 0 for no limit. A reassignment's
    /// throttle, changed while the follower runs.
    pub throttle_bytes_per_s: Arc<std::sync::atomic::AtomicU64>,
    /// TLS to the leader, with this broker's certificate as the follower's (its principal
    /// needs `replicate` where the leader has an ACL file).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Where a tiered partition's producer state at the leader's local start is kept, for a
    /// replica that starts its log again there.
    pub history: Option<Arc<dyn ProducerHistory>>,
}

/// The idempotent producers of a log before a byte offset, kept outside any replica's disk:
/// the producer snapshots tiered storage uploads with each segment. A follower that starts
/// its log again at its leader's local start learns there what the log before it held, so
/// that a producer's retry of a batch it wrote before stays a duplicate on this replica too,
/// should it lead.
pub trait ProducerHistory: std::fmt::Debug + Send + Sync {
    /// The batches the leader knew at byte `end` of `partition`; `None` if none is kept for
    /// there. An error when the keeper cannot be read now.
    fn producers_at<'a>(
        &'a self,
        partition: &'a Partition,
        end: u64,
    ) -> BoxFuture<'a, Result<Option<History>, String>>;
}

/// Why a follower stopped.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FollowerError {
    /// The leader is in a newer epoch (this follower is fenced) or leads no more: whoever
    /// decides leadership must tell this broker what to do now.
    #[error("{addr} refused epoch {epoch}: {error}")]
    Refused { addr: String, epoch: i32, error: ErrorCode },
    #[error("the local log: {0}")]
    Log(#[from] LogError),
    #[error("the leader sent messages that do not validate: {0}")]
    InvalidData(protocol::InvalidMessage),
    #[error("the leader sent messages whose records cannot be counted: {0}")]
    Uncountable(String),
}

/// A running follower of one partition.
pub struct Following {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), FollowerError>>,
}

impl Following {
    /// Starts copying `partition` as [`follow`] does, until [`Following::stop`] or `stop`.
    pub(crate) fn start(
        partition: Arc<Partition>,
        config: FollowerConfig,
        stop: &CancellationToken,
    ) -> Following {
        let stop = stop.child_token();
        let task = tokio::spawn(follow(partition, config, stop.clone()));
        Following { stop, task }
    }

    /// Whether the follower has stopped by itself (the leader refused it, or its log failed).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops following and says why the follower had stopped, if it had.
    pub async fn stop(self) -> Result<(), FollowerError> {
        self.stop.cancel();
        match self.task.await {
            Ok(result) => result,
            Err(e) => Err(FollowerError::Log(LogError::Io {
                context: "following",
                path: Default::default(),
                source: std::io::Error::other(e),
            })),
        }
    }
}

/// Copies `partition` from its leader until `stop` or until the leader is in a newer epoch
/// than this follower's. Connection failures, and a leader that does not lead this epoch
/// yet, are retried with backoff, forever.
async fn follow(
    partition: Arc<Partition>,
    config: FollowerConfig,
    stop: CancellationToken,
) -> Result<(), FollowerError> {
    let fetch_max_bytes = config.fetch_max_bytes.max(config.max_message_bytes + FRAMING_BYTES);
    let mut backoff = service::Backoff::from_ms(50, 2_000);
    loop {
        let attempt = connect_and_copy(&partition, &config, fetch_max_bytes, &mut backoff);
        let failure = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            Err(failure) = attempt => failure,
        };
        match failure {
            Failure::Link(LinkError::Error(error @ ErrorCode::FencedLeaderEpoch)) => {
                return Err(FollowerError::Refused {
                    addr: config.leader_addr.clone(),
                    epoch: config.leader_epoch,
                    error,
                });
            }
            // The leader has not taken up this epoch yet (it learns of its election a moment
            // after this follower did), or it was never told: a newer state in the registry
            // replaces this follower then.
            Failure::Link(LinkError::Error(ErrorCode::NotLeader)) => {
                tracing::debug!(
                    partition = ?partition, leader = %config.leader_addr,
                    epoch = config.leader_epoch, "the leader does not lead this epoch yet"
                );
            }
            Failure::Link(e) => {
                tracing::warn!(
                    partition = ?partition, leader = %config.leader_addr, error = %e,
                    "replica fetch failed; reconnecting"
                );
            }
            Failure::Follower(e) => return Err(e),
            Failure::History(error) => {
                tracing::warn!(
                    partition = ?partition, %error,
                    "cannot read the producers before the leader's log start; trying again"
                );
            }
        }
        if !backoff.wait(&stop).await {
            return Ok(());
        }
    }
}

/// Connects, truncates and copies until something fails.
async fn connect_and_copy(
    partition: &Arc<Partition>,
    config: &FollowerConfig,
    fetch_max_bytes: u32,
    backoff: &mut service::Backoff,
) -> Result<Infallible, Failure> {
    let response_bytes_max = fetch_max_bytes as usize + 4096;
    let mut link =
        PeerLink::connect(&config.leader_addr, config.tls.as_ref(), response_bytes_max).await?;
    truncate(&mut link, partition, config).await?;
    backoff.reset();
    loop {
        copy_once(&mut link, partition, config, fetch_max_bytes).await?;
    }
}

/// Why an attempt ended.
enum Failure {
    Link(LinkError),
    Follower(FollowerError),
    /// The producer history could not be read: tried again after a backoff.
    History(String),
}

impl From<LinkError> for Failure {
    fn from(e: LinkError) -> Failure {
        Failure::Link(e)
    }
}

impl From<FollowerError> for Failure {
    fn from(e: FollowerError) -> Failure {
        Failure::Follower(e)
    }
}

impl From<LogError> for Failure {
    fn from(e: LogError) -> Failure {
        Failure::Follower(FollowerError::Log(e))
    }
}

/// Cuts the local log to where it agrees with the leader's. Asks where the latest local epoch
/// ends on the leader; an answer for an older epoch means the leader never had the newer one,
/// so the local log keeps at most its own end of that older epoch, and the question is asked
/// again about it until both logs know the epoch asked about (KIP-279). A log with no epoch
/// the leader knows keeps nothing.
async fn truncate(
    link: &mut PeerLink,
    partition: &Arc<Partition>,
    config: &FollowerConfig,
) -> Result<(), Failure> {
    let mut asked = partition.leader_epoch();
    let cut = loop {
        let Some(epoch) = asked else {
            break partition.start_offset();
        };
        let request = Request::OffsetForLeaderEpoch(OffsetForLeaderEpochRequest {
            topic: partition.topic().to_owned(),
            partition: partition.index() as i32,
            epoch,
        });
        let Response::OffsetForLeaderEpoch(answer) = link.call(&request).await? else {
            return Err(LinkError::Error(ErrorCode::Unknown).into());
        };
        if answer.epoch == UNDEFINED_EPOCH || answer.end_offset < 0 {
            break partition.start_offset();
        }
        let leader_end = answer.end_offset as u64;
        match partition.end_offset_for(answer.epoch) {
            Some((local_epoch, local_end)) if local_epoch == answer.epoch => {
                break leader_end.min(local_end);
            }
            // The local log does not know the leader's epoch: ask about the one it has below.
            Some((local_epoch, _)) => asked = Some(local_epoch),
            None => break partition.start_offset(),
        }
    };
    let cut = cut.max(partition.start_offset());
    if cut < partition.end() {
        tracing::info!(
            partition = ?partition, from = partition.end(), to = cut, leader_epoch = config.leader_epoch,
            "truncating to where the leader's log agrees"
        );
        let p = Arc::clone(partition);
        tokio::task::spawn_blocking(move || p.truncate_replica(cut)).await.map_err(|e| {
            LogError::Io {
                context: "truncating",
                path: partition.dir().to_owned(),
                source: std::io::Error::other(e),
            }
        })??;
    }
    Ok(())
}

/// One fetch from the local log end; appends the whole messages it brought.
async fn copy_once(
    link: &mut PeerLink,
    partition: &Arc<Partition>,
    config: &FollowerConfig,
    fetch_max_bytes: u32,
) -> Result<(), Failure> {
    let request = Request::ReplicaFetch(ReplicaFetchRequest {
        replica_id: config.replica_id,
        max_wait_ms: config.fetch_max_wait_ms,
        min_bytes: 1,
        fetches: vec![ReplicaFetchPartition {
            topic: partition.topic().to_owned(),
            partition: partition.index() as i32,
            leader_epoch: config.leader_epoch,
            offset: partition.end() as i64,
            max_bytes: fetch_max_bytes as i32,
        }],
    });
    let Response::ReplicaFetch(mut answer) = link.call(&request).await? else {
        return Err(LinkError::Error(ErrorCode::Unknown).into());
    };
    let Some(ReplicaFetchPart { error, data_epoch, segment_base, messages, high_watermark }) =
        answer.parts.pop()
    else {
        return Err(LinkError::Error(ErrorCode::Unknown).into());
    };
    if error == ErrorCode::OffsetOutOfRange {
        return restart_at_leader_start(link, partition, config).await;
    }
    if !error.is_ok() {
        return Err(LinkError::Error(error).into());
    }
    let whole = whole_messages(&messages);
    if whole > 0 {
        let set = &messages[..whole];
        let counted = count_records(set, config.max_message_bytes).map_err(|e| match e {
            CountError::Invalid(e) => FollowerError::InvalidData(e),
            e => FollowerError::Uncountable(e.to_string()),
        })?;
        let segment_base = u64::try_from(segment_base).unwrap_or(0);
        partition.append_replica(set, &counted, data_epoch, segment_base)?;
        let rate = config.throttle_bytes_per_s.load(std::sync::atomic::Ordering::Relaxed);
        if rate > 0 {
            // Paced after the copy: over many fetches the rate averages out to the throttle.
            tokio::time::sleep(std::time::Duration::from_secs_f64(whole as f64 / rate as f64))
                .await;
        }
    }
    // What the leader's ISR has: where this replica's high watermark is, should it lead.
    if let Ok(hw) = u64::try_from(high_watermark) {
        partition.set_high_watermark(Some(hw));
    }
    Ok(())
}

/// After `OFFSET_OUT_OF_RANGE`: if the leader's log on disk now starts past this log's end (its
/// retention deleted what this replica has, while it was away, or a tiered topic's history is
/// in the object store), this log starts again, empty, at the leader's local start: a replica
/// copies only the local log, and learns the producers of the log before it from the
/// producer snapshot tiered storage uploaded with the segment ending there. Otherwise the
/// error stands, and the follower reconnects.
async fn restart_at_leader_start(
    link: &mut PeerLink,
    partition: &Arc<Partition>,
    config: &FollowerConfig,
) -> Result<(), Failure> {
    let request = Request::Offsets(OffsetsRequest {
        topic: partition.topic().to_owned(),
        partition: partition.index() as i32,
        time: protocol::OFFSETS_EARLIEST_LOCAL,
        max_number: 1,
    });
    let Response::Offsets(answer) = link.call(&request).await? else {
        return Err(LinkError::Error(ErrorCode::Unknown).into());
    };
    let start = answer.offsets.first().and_then(|&o| u64::try_from(o).ok());
    let Some(start) = start.filter(|&start| start > partition.end()) else {
        return Err(LinkError::Error(ErrorCode::OffsetOutOfRange).into());
    };
    tracing::warn!(
        partition = ?partition, end = partition.end(), leader_start = start,
        "the leader's log starts past this replica's end; starting again at the leader's start"
    );
    // The leader's number of the record at its start, so that this log numbers as it does.
    let request = Request::RecordNumber(RecordNumberRequest {
        topic: partition.topic().to_owned(),
        partition: partition.index() as i32,
        offset: start as i64,
    });
    let Response::RecordNumber(answer) = link.call(&request).await? else {
        return Err(LinkError::Error(ErrorCode::Unknown).into());
    };
    let first_record = u64::try_from(answer.record).unwrap_or(0);
    let producers = match &config.history {
        Some(history) if partition.config().remote_storage => {
            history.producers_at(partition, start).await.map_err(Failure::History)?
        }
        _ => None,
    };
    let p = Arc::clone(partition);
    let restart = move || p.restart_replica_at(start, first_record, producers.unwrap_or_default());
    tokio::task::spawn_blocking(restart).await.map_err(|e| LogError::Io {
        context: "restarting the log",
        path: partition.dir().to_owned(),
        source: std::io::Error::other(e),
    })??;
    Ok(())
}
