//! Reads for consumers: where a fetch's bytes are (a slice of a segment file, sent as is — or of
//! a cached chunk of a remote segment, below the local log of a tiered topic), the watch a long
//! poll waits on, `OFFSETS`, and a byte offset's record number.

use protocol::{ErrorCode, FetchRequest};
use tokio::sync::watch;

use super::Node;
use crate::log::{FileSlice, LogError, Partition};
use crate::tier::{RemoteTier, Run, TierError};

impl Node {
    /// Where a fetch's bytes are: `None` when the offset is the end of the visible log.
    pub fn plan_fetch(&self, fetch: &FetchRequest) -> Result<Option<FileSlice>, ErrorCode> {
        if fetch.max_bytes <= 0 {
            return Err(ErrorCode::InvalidFetchSize);
        }
        let partition = self.replicas.led(&fetch.topic, fetch.partition)?;
        partition.read(fetch.offset, fetch.max_bytes as u32).map_err(|e| match e {
            LogError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            e => {
                tracing::error!(error = %e, "fetch failed");
                ErrorCode::Unknown
            }
        })
    }

    /// [`Node::plan_fetch`], but a fetch that finds nothing past a new leader's high
    /// watermark, or asks past it, waits until the leader has settled (at most
    /// `replica_lag_ms`; see `Leader::settle`) and is planned again: right after a leader
    /// change, the HW can lag writes the old leader acknowledged.
    pub async fn plan_fetch_settled(
        &self,
        fetch: &FetchRequest,
    ) -> Result<Option<FileSlice>, ErrorCode> {
        let planned = match self.plan_fetch(fetch) {
            Ok(None) | Err(ErrorCode::OffsetOutOfRange)
                if self.settle(&fetch.topic, fetch.partition).await =>
            {
                self.plan_fetch(fetch)
            }
            planned => planned,
        };
        match planned {
            Err(ErrorCode::OffsetOutOfRange) => self.plan_remote_fetch(fetch).await,
            planned => planned,
        }
    }

    /// A fetch below the local log of a tiered topic: a slice of a chunk from the store.
    async fn plan_remote_fetch(
        &self,
        fetch: &FetchRequest,
    ) -> Result<Option<FileSlice>, ErrorCode> {
        let Some(tier) = &self.tier else { return Err(ErrorCode::OffsetOutOfRange) };
        let partition = self.replicas.led(&fetch.topic, fetch.partition)?;
        let offset = u64::try_from(fetch.offset).map_err(|_| ErrorCode::OffsetOutOfRange)?;
        match tier.read(&partition, offset, fetch.max_bytes as u32).await {
            Ok(Some(slice)) => Ok(Some(slice)),
            Ok(None) => Err(ErrorCode::OffsetOutOfRange),
            Err(e) => Err(remote_failed(&partition, e)),
        }
    }

    /// The tier this broker reads tiered topics' older segments from, if it has one.
    pub(crate) fn tier(&self) -> Option<&RemoteTier> {
        self.tier.as_deref()
    }

    /// What the store holds of `partition` below its local log, readable: `None` for a
    /// broker without a store, a topic that holds nothing there, or a store that cannot be
    /// read now (logged; the local start is answered meanwhile).
    pub(crate) async fn remote_run(&self, partition: &Partition) -> Option<Run> {
        let tier = self.tier.as_ref()?;
        if !partition.config().remote_storage && partition.remote_end() == 0 {
            return None;
        }
        match tier.below_local(partition).await {
            Ok(run) => run,
            Err(e) => {
                remote_failed(partition, e);
                None
            }
        }
    }

    /// The first byte offset and record of `partition` readers may ask for: in the store, for
    /// a tiered topic whose older segments are there.
    pub(crate) async fn log_start(&self, partition: &Partition) -> (u64, u64) {
        match self.remote_run(partition).await {
            Some(run) => (run.start, run.start_record),
            None => (partition.start_offset(), partition.start_record()),
        }
    }

    /// Waits until the leader of `partition` here has settled (`Leader::settle`), at most
    /// `replica_lag_ms`; whether it waited.
    pub async fn settle(&self, topic: &str, partition: i32) -> bool {
        let Ok(replica) = self.replicas.replica(topic, partition) else { return false };
        let Some(leader) = self.replicas.leader_of(&replica) else { return false };
        leader.settle(self.config().replica_lag()).await
    }

    /// A watch of the visible end of a long-poll fetch's partition; an error for a fetch that
    /// is answered with one at once.
    pub fn watch_fetch(&self, fetch: &FetchRequest) -> Result<watch::Receiver<u64>, ErrorCode> {
        if fetch.max_bytes <= 0 {
            return Err(ErrorCode::InvalidFetchSize);
        }
        let partition = self.replicas.led(&fetch.topic, fetch.partition)?;
        let visible = partition.watch_visible();
        let end = *visible.borrow();
        let offset = u64::try_from(fetch.offset).map_err(|_| ErrorCode::OffsetOutOfRange)?;
        if offset < partition.start_offset() || offset > end {
            return Err(ErrorCode::OffsetOutOfRange);
        }
        Ok(visible)
    }

    /// `OFFSETS`: the visible end, the start (in the store, for a tiered topic), the start on
    /// disk, or segment bases by modification time.
    pub async fn offsets(
        &self,
        topic: &str,
        partition: i32,
        time: i64,
        max_number: i32,
    ) -> Result<Vec<i64>, ErrorCode> {
        if time == protocol::OFFSETS_LATEST {
            self.settle(topic, partition).await;
        }
        let partition = self.replicas.led(topic, partition)?;
        match time {
            protocol::OFFSETS_LATEST => Ok(vec![partition.visible_end() as i64]),
            protocol::OFFSETS_EARLIEST => Ok(vec![self.log_start(&partition).await.0 as i64]),
            protocol::OFFSETS_EARLIEST_LOCAL => Ok(vec![partition.start_offset() as i64]),
            time if time < 0 || max_number <= 0 => Err(ErrorCode::InvalidRequest),
            time => {
                let p = std::sync::Arc::clone(&partition);
                let max_number = max_number as usize;
                let mut offsets = blocking("offsets", move || p.offsets_before(time, max_number))
                    .await
                    .map_err(|_| ErrorCode::Unknown)?;
                // Older segments in the store follow the local ones.
                if offsets.len() < max_number
                    && let Some(tier) = &self.tier
                    && self.remote_run(&partition).await.is_some()
                {
                    let left = max_number - offsets.len();
                    let remote = tier.segments_before(&partition, time, left).await;
                    offsets.extend(remote.map_err(|e| remote_failed(&partition, e))?);
                }
                Ok(offsets)
            }
        }
    }

    /// `RECORD_NUMBER`: the Kafka record number of the message at byte `offset` (of the next
    /// record at the log's end), from the partition's leader.
    pub async fn record_number(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<i64, ErrorCode> {
        let partition = self.replicas.led(topic, partition)?;
        let p = std::sync::Arc::clone(&partition);
        let record = match blocking("record number", move || p.record_at_offset(offset)).await {
            Ok(record) => record,
            Err(Some(LogError::OffsetOutOfRange { .. })) => {
                let Some(tier) = &self.tier else { return Err(ErrorCode::OffsetOutOfRange) };
                let offset = u64::try_from(offset).map_err(|_| ErrorCode::OffsetOutOfRange)?;
                match tier.record_at_offset(&partition, offset).await {
                    Ok(Some(record)) => record,
                    Ok(None) => return Err(ErrorCode::OffsetOutOfRange),
                    Err(e) => return Err(remote_failed(&partition, e)),
                }
            }
            Err(_) => return Err(ErrorCode::Unknown),
        };
        Ok(i64::try_from(record).unwrap_or(i64::MAX))
    }
}

/// Logs a read from the store that failed, and answers what a client retries:
/// [`ErrorCode::RequestTimedOut`].
pub(crate) fn remote_failed(partition: &Partition, error: TierError) -> ErrorCode {
    tracing::warn!(partition = ?partition, error = %error, "cannot read from the remote store");
    ErrorCode::RequestTimedOut
}

/// Runs a blocking read of the log off the async workers; its error (logged unless it is an
/// offset out of range), or `None` if the task panicked.
async fn blocking<T: Send + 'static>(
    what: &'static str,
    read: impl FnOnce() -> Result<T, LogError> + Send + 'static,
) -> Result<T, Option<LogError>> {
    match tokio::task::spawn_blocking(read).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e @ LogError::OffsetOutOfRange { .. })) => Err(Some(e)),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "{what} failed");
            Err(Some(e))
        }
        Err(e) => {
            tracing::error!(error = %e, "{what} panicked");
            Err(None)
        }
    }
}
