//! A follower of one partition (`DESIGN.md`, "Replicated partitions"): it copies the leader's
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
//! The follower speaks the broker protocol to its leader over one connection, one request at
//! a time: a follower needs no pipelining, and a broker does not link the client crate.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::BytesMut;
use protocol::{
    ApiKey, ErrorCode, OffsetForLeaderEpochRequest, OffsetsRequest, RecordNumberRequest,
    ReplicaFetchPart, ReplicaFetchPartition, ReplicaFetchRequest, Request, Response,
    UNDEFINED_EPOCH,
};
use service::tls::ClientStream;
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

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

/// A connection's failure: worth a reconnect.
#[derive(Debug, Error)]
enum LinkError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("undecodable answer: {0}")]
    Decode(#[from] protocol::DecodeError),
    #[error("answered with {0}")]
    Error(ErrorCode),
    #[error("answer {size} bytes long, more than {max}")]
    TooLarge { size: usize, max: usize },
    #[error("unencodable request: {0}")]
    Encode(#[from] protocol::EncodeError),
}

/// One request at a time to the leader.
struct LeaderLink {
    stream: ClientStream,
    response_bytes_max: usize,
}

impl LeaderLink {
    async fn connect(
        addr: &str,
        tls: Option<&Arc<rustls::ClientConfig>>,
        response_bytes_max: usize,
    ) -> Result<LeaderLink, LinkError> {
        let stream = ClientStream::connect(addr, tls).await?;
        Ok(LeaderLink { stream, response_bytes_max })
    }

    async fn call(&mut self, request: &Request) -> Result<Response, LinkError> {
        let key: ApiKey = request.api_key();
        let mut frame = BytesMut::new();
        request.encode(&mut frame)?;
        self.stream.write_all(&frame).await?;
        self.stream.flush().await?;
        let size = self.stream.read_u32().await? as usize;
        if size > self.response_bytes_max || size < 2 {
            return Err(LinkError::TooLarge { size, max: self.response_bytes_max });
        }
        // Read without zeroing first: an answer is up to a fetch's bytes.
        let mut body = BytesMut::with_capacity(size);
        while body.len() < size {
            if self.stream.read_buf(&mut body).await? == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
            }
        }
        let error = ErrorCode::from_i16(i16::from_be_bytes([body[0], body[1]]));
        if !error.is_ok() {
            return Err(LinkError::Error(error));
        }
        Ok(Response::decode(key, body.freeze().slice(2..))?)
    }
}

/// Copies `partition` from its leader until `stop` or until the leader is in a newer epoch
/// than this follower's. Connection failures, and a leader that does not lead this epoch
/// yet, are retried with backoff, forever.
pub async fn follow(
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
        LeaderLink::connect(&config.leader_addr, config.tls.as_ref(), response_bytes_max).await?;
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
    link: &mut LeaderLink,
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
    link: &mut LeaderLink,
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
        return restart_at_leader_start(link, partition).await;
    }
    if !error.is_ok() {
        return Err(LinkError::Error(error).into());
    }
    let whole = whole_messages(&messages);
    if whole > 0 {
        let set = &messages[..whole];
        let counted = crate::log::index::count_records(set, config.max_message_bytes).map_err(
            |e| match e {
                crate::log::index::CountError::Invalid(e) => FollowerError::InvalidData(e),
                e => FollowerError::Uncountable(e.to_string()),
            },
        )?;
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

/// After `OFFSET_OUT_OF_RANGE`: if the leader's log now starts past this log's end (its
/// retention deleted what this replica has, while it was away), this log starts again, empty,
/// at the leader's start. Otherwise the error stands, and the follower reconnects.
async fn restart_at_leader_start(
    link: &mut LeaderLink,
    partition: &Arc<Partition>,
) -> Result<(), Failure> {
    let request = Request::Offsets(OffsetsRequest {
        topic: partition.topic().to_owned(),
        partition: partition.index() as i32,
        time: protocol::OFFSETS_EARLIEST,
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
    let p = Arc::clone(partition);
    tokio::task::spawn_blocking(move || p.restart_replica_at(start, first_record)).await.map_err(
        |e| LogError::Io {
            context: "restarting the log",
            path: partition.dir().to_owned(),
            source: std::io::Error::other(e),
        },
    )??;
    Ok(())
}

/// Why a copy of a range from another replica was not had.
#[derive(Debug, Error)]
pub(crate) enum RangeError {
    #[error("{0}")]
    Link(String),
    #[error("its segment there starts at {theirs}, this one at {ours}")]
    OtherSegment { theirs: i64, ours: u64 },
    #[error("it is in none of the epochs tried")]
    NoEpoch,
    #[error("it has nothing at {0}")]
    Short(u64),
}

impl From<LinkError> for RangeError {
    fn from(e: LinkError) -> RangeError {
        RangeError::Link(e.to_string())
    }
}

/// The whole messages of `partition`'s log from the start of the damage, up to `max_bytes`
/// of them (and at least one), as the replica at `addr` holds them, read with `REPLICA_FETCH`
/// as the repair reader (no leader takes it for a follower's progress). A replica answers in
/// the epoch its log is in: `epochs` are tried in order until one is taken. The bytes must
/// come from the replica's segment based where the damaged one is.
pub(crate) async fn fetch_range(
    addr: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
    partition: &Partition,
    epochs: &[i32],
    damage: &crate::log::Damage,
    max_bytes: u64,
) -> Result<Vec<u8>, RangeError> {
    const STEP_BYTES: u64 = 1 << 20;
    let from = damage.from;
    let wanted = damage.to.min(from + max_bytes);
    let mut link = LeaderLink::connect(addr, tls, STEP_BYTES as usize + 4096).await?;
    let mut bytes = Vec::new();
    let mut epochs = epochs.iter().copied().peekable();
    // Up to the bound, and on past it only until the first message is whole.
    while from + (bytes.len() as u64) < damage.to
        && (from + (bytes.len() as u64) < wanted || whole_messages(&bytes) == 0)
    {
        let Some(&epoch) = epochs.peek() else { return Err(RangeError::NoEpoch) };
        let offset = from + bytes.len() as u64;
        let request = Request::ReplicaFetch(ReplicaFetchRequest {
            replica_id: crate::broker::REPAIR_READER_ID,
            max_wait_ms: 0,
            min_bytes: 0,
            fetches: vec![ReplicaFetchPartition {
                topic: partition.topic().to_owned(),
                partition: partition.index() as i32,
                leader_epoch: epoch,
                offset: offset as i64,
                max_bytes: STEP_BYTES.min(damage.to - offset) as i32,
            }],
        });
        let answer = match link.call(&request).await {
            Ok(Response::ReplicaFetch(mut answer)) => answer.parts.pop(),
            Ok(_) => None,
            Err(LinkError::Error(ErrorCode::NotLeader | ErrorCode::FencedLeaderEpoch)) => {
                epochs.next();
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let Some(part) = answer else { return Err(LinkError::Error(ErrorCode::Unknown).into()) };
        match part.error {
            ErrorCode::None if part.segment_base != damage.segment_base as i64 => {
                let ours = damage.segment_base;
                return Err(RangeError::OtherSegment { theirs: part.segment_base, ours });
            }
            ErrorCode::None if part.messages.is_empty() => return Err(RangeError::Short(offset)),
            ErrorCode::None => bytes.extend_from_slice(&part.messages),
            ErrorCode::NotLeader | ErrorCode::FencedLeaderEpoch => {
                epochs.next();
            }
            error => return Err(LinkError::Error(error).into()),
        }
    }
    // A message the bound cut in two is left for the next step.
    bytes.truncate(whole_messages(&bytes));
    Ok(bytes)
}

/// Length of the prefix of `set` made of whole messages (by their length fields).
fn whole_messages(set: &[u8]) -> usize {
    let mut at = 0;
    while let Some(header) = set.get(at..at + 4) {
        let length = u32::from_be_bytes(header.try_into().expect("four bytes")) as usize;
        let end = at + 4 + length;
        if end > set.len() {
            break;
        }
        at = end;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_messages_stop_before_a_partial_one() {
        let mut set = Vec::new();
        protocol::encode_message(&mut set, protocol::Codec::None, b"one");
        let first = set.len();
        protocol::encode_message(&mut set, protocol::Codec::None, b"two");
        assert_eq!(whole_messages(&set), set.len());
        assert_eq!(whole_messages(&set[..set.len() - 1]), first);
        assert_eq!(whole_messages(&set[..3]), 0);
        assert_eq!(whole_messages(&[]), 0);
    }
}
