//! The leader's side of replication: what a follower's `OFFSET_FOR_LEADER_EPOCH` and
//! `REPLICA_FETCH` get (`docs/design.md`, "Replicated partitions"), and the follower progress
//! a fetch reports.

use std::sync::Arc;

use protocol::{ErrorCode, REPAIR_READER_ID, ReplicaFetchPartition, ReplicaFetchRequest};
use tokio::sync::watch;

use super::replicas::Replicas;
use crate::log::{FileSlice, LogError, Partition};

/// Where a follower's fetch of one partition reads, and what its answer's header says.
#[derive(Debug, Clone)]
pub struct ReplicaPlan {
    pub slice: Option<FileSlice>,
    /// The leader epoch of every byte of `slice`.
    pub epoch: i32,
    pub high_watermark: i64,
    /// Base offset of the segment `slice` is in.
    pub segment_base: i64,
}

impl Replicas {
    /// `OFFSET_FOR_LEADER_EPOCH`: where `epoch` (or the largest epoch below it that this log
    /// knows) ends; [`protocol::UNDEFINED_EPOCH`] and −1 for an epoch older than every one.
    pub fn offset_for_leader_epoch(
        &self,
        topic: &str,
        partition: i32,
        epoch: i32,
    ) -> Result<(i32, i64), ErrorCode> {
        let partition = self.led(topic, partition)?;
        partition.leader_epoch().ok_or(ErrorCode::NotLeader)?;
        Ok(match partition.end_offset_for(epoch) {
            Some((epoch, end)) => (epoch, end as i64),
            None => (protocol::UNDEFINED_EPOCH, -1),
        })
    }

    /// Where a follower's fetch of one partition reads: bytes of one epoch up to the written
    /// end. Refused with [`ErrorCode::FencedLeaderEpoch`] for a follower of an older leader
    /// epoch and [`ErrorCode::NotLeader`] for a newer one, which this broker does not lead.
    /// A repair read (`replica_id` [`REPAIR_READER_ID`]) is answered by any replica, in the
    /// epoch its log is in.
    pub fn plan_replica_fetch(
        &self,
        fetch: &ReplicaFetchPartition,
        replica_id: i32,
    ) -> Result<ReplicaPlan, ErrorCode> {
        let partition = self.replica_fetch_partition(fetch, replica_id)?;
        let read =
            partition.read_replica(fetch.offset, fetch.max_bytes as u32).map_err(|e| match e {
                LogError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
                e => {
                    tracing::error!(error = %e, "replica fetch failed");
                    ErrorCode::Unknown
                }
            })?;
        // A partition without followers is its own ISR: its log end is the high watermark.
        let high_watermark = match self.leader_of(&partition) {
            Some(leader) => leader.high_watermark() as i64,
            None => partition.end() as i64,
        };
        Ok(ReplicaPlan {
            slice: read.slice,
            epoch: read.epoch,
            high_watermark,
            segment_base: read.segment_base as i64,
        })
    }

    /// A watch of the written end of a follower's fetch's partition; an error for a fetch
    /// that is answered with one at once.
    pub fn watch_replica_fetch(
        &self,
        fetch: &ReplicaFetchPartition,
        replica_id: i32,
    ) -> Result<watch::Receiver<u64>, ErrorCode> {
        let partition = self.replica_fetch_partition(fetch, replica_id)?;
        let written = partition.watch_written();
        let offset = u64::try_from(fetch.offset).map_err(|_| ErrorCode::OffsetOutOfRange)?;
        if offset < partition.start_offset() || offset > *written.borrow() {
            return Err(ErrorCode::OffsetOutOfRange);
        }
        Ok(written)
    }

    fn replica_fetch_partition(
        &self,
        fetch: &ReplicaFetchPartition,
        replica_id: i32,
    ) -> Result<Arc<Partition>, ErrorCode> {
        if fetch.max_bytes <= 0 {
            return Err(ErrorCode::InvalidFetchSize);
        }
        let partition = if replica_id == REPAIR_READER_ID {
            self.replica(&fetch.topic, fetch.partition)?
        } else {
            self.led(&fetch.topic, fetch.partition)?
        };
        let current = match self.leader_of(&partition) {
            Some(leader) => leader.epoch(),
            None => partition.leader_epoch().ok_or(ErrorCode::NotLeader)?,
        };
        match fetch.leader_epoch.cmp(&current) {
            std::cmp::Ordering::Less => Err(ErrorCode::FencedLeaderEpoch),
            std::cmp::Ordering::Greater => Err(ErrorCode::NotLeader),
            std::cmp::Ordering::Equal => Ok(partition),
        }
    }

    /// Counts a follower's fetch before it waits for data: its offset is its log end.
    pub fn record_replica_fetches(&self, request: &ReplicaFetchRequest) {
        for fetch in &request.fetches {
            let Ok(partition) = self.led(&fetch.topic, fetch.partition) else { continue };
            let Some(leader) = self.leader_of(&partition) else { continue };
            if let (true, Ok(offset)) =
                (fetch.leader_epoch == leader.epoch(), u64::try_from(fetch.offset))
            {
                leader.record_fetch(request.replica_id, offset);
            }
        }
    }
}
