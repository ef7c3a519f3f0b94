//! Reads for consumers: where a fetch's bytes are (a slice of a segment file, sent as is),
//! the watch a long poll waits on, `OFFSETS`, and a byte offset's record number.

use protocol::{ErrorCode, FetchRequest};
use tokio::sync::watch;

use super::Node;
use crate::log::{FileSlice, LogError};

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
        match self.plan_fetch(fetch) {
            Ok(None) | Err(ErrorCode::OffsetOutOfRange)
                if self.settle(&fetch.topic, fetch.partition).await =>
            {
                self.plan_fetch(fetch)
            }
            planned => planned,
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

    /// `OFFSETS`: the visible end, the start, or segment bases by modification time.
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
            protocol::OFFSETS_EARLIEST => Ok(vec![partition.start_offset() as i64]),
            time if time < 0 || max_number <= 0 => Err(ErrorCode::InvalidRequest),
            time => {
                blocking("offsets", move || partition.offsets_before(time, max_number as usize))
                    .await
                    .map_err(|_| ErrorCode::Unknown)
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
        match blocking("record number", move || partition.record_at_offset(offset)).await {
            Ok(record) => Ok(i64::try_from(record).unwrap_or(i64::MAX)),
            Err(Some(LogError::OffsetOutOfRange { .. })) => Err(ErrorCode::OffsetOutOfRange),
            Err(_) => Err(ErrorCode::Unknown),
        }
    }
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
