//! Retention: whole segments deleted from the head by age (`retention_ms`) and size
//! (`retention_bytes`); on a tiered topic by its local retention, and only segments the object
//! store holds.

use std::fs;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{Partition, State, lock};
use crate::log::error::{LogError, io_error};
use crate::log::segment::Segment;

impl Partition {
    /// Deletes whole segments from the head: those last modified more than `retention_ms` ago,
    /// then more while the log is larger than `retention_bytes` (a tiered topic's
    /// `local_retention_ms` and `local_retention_bytes`, below its remote end). Only flushed segments go; the
    /// active segment goes only after a roll, when it has expired too. Blocking. Returns the
    /// base offsets deleted.
    pub fn enforce_retention(&self, now: SystemTime) -> Result<Vec<u64>, LogError> {
        let doomed = {
            let mut state = self.state();
            // A tiered topic keeps its local retention, and deletes only what the store holds.
            let config = state.config;
            if !config.cleanup_policy.delete {
                return Ok(Vec::new());
            }
            let visible_end = match config.remote_storage {
                true => self.flushed_end().min(self.remote_end()),
                false => self.flushed_end(),
            };
            let retention = Duration::from_millis(config.local_retention_ms());
            let expired = |s: &Segment| -> Result<bool, LogError> {
                let modified = s.modified().map_err(io_error("reading", &s.path))?;
                Ok(now.duration_since(modified).is_ok_and(|age| age > retention))
            };
            let mut count = 0;
            while count < state.segments.len() && state.segment_end(count) <= visible_end {
                if !expired(&state.segments[count])? {
                    break;
                }
                count += 1;
            }
            if let Some(limit) = config.local_retention_bytes() {
                let mut size =
                    state.end - state.segments[count.min(state.segments.len() - 1)].base_offset;
                while count + 1 < state.segments.len()
                    && size > limit
                    && state.segment_end(count) <= visible_end
                {
                    size -= state.segment_end(count) - state.segments[count].base_offset;
                    count += 1;
                }
            }
            if count == state.segments.len() {
                // Everything expired: start an empty segment so the log keeps its end offset.
                if state.end > state.active().base_offset {
                    self.roll(&mut state)?;
                } else {
                    count -= 1;
                }
            }
            self.drop_head_segments(&mut state, count)
        };
        let mut deleted = Vec::with_capacity(doomed.len());
        for segment in doomed {
            fs::remove_file(&segment.path).map_err(io_error("deleting", &segment.path))?;
            tracing::info!(topic = %self.topic, partition = self.index, segment = %segment.path.display(), "retention deleted segment");
            deleted.push(segment.base_offset);
        }
        if !deleted.is_empty() {
            self.flush()?;
            let start = self.start_offset();
            lock(&self.epochs).truncate_from_start(start)?;
        }
        Ok(deleted)
    }

    /// Takes the first `count` segments out of `state` and deletes their indexes; the caller
    /// deletes the segment files it gets back once the state is unlocked.
    pub(super) fn drop_head_segments(&self, state: &mut State, count: usize) -> Vec<Arc<Segment>> {
        if count == 0 {
            return Vec::new();
        }
        for index in state.indexes.drain(..count) {
            if let Err(e) = index.delete() {
                tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "cannot delete a segment's index");
            }
        }
        let doomed: Vec<Arc<Segment>> = state.segments.drain(..count).collect();
        let first = state.segments[0].base_offset;
        self.delete_snapshots(|at| at < first);
        state.unsynced.retain(|s| !doomed.iter().any(|d| Arc::ptr_eq(d, s)));
        state.dir_unsynced = true;
        state.settle_start();
        doomed
    }
}
