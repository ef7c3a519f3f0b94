//! What replication does to a log: leader epochs, a follower's reads and appends, the high
//! watermark, and truncation back to where a new leader's log parts from this one.

use std::fs;
use std::sync::Arc;
use std::time::Instant;

use super::{Appended, FileSlice, Partition, ReplicaSlice, Roll, State, lock};
use crate::config::VisibleAfter;
use crate::log::error::{LogError, io_error, sync_dir};
use crate::log::index::{self, SegmentIndex, SetRecords};
use crate::log::producers::{History, Producers};
use crate::log::segment::Segment;

impl Partition {
    /// Cuts the log back to `offset`, so that the next append lands there: what a follower
    /// does when its log has parted from its leader's. The segments after the one holding
    /// `offset` are deleted and that one is cut at it (a segment that begins at `offset` stays,
    /// empty); the flushed and visible ends come back to `offset` if they were past it, waking
    /// who watches them. Truncating to the end changes nothing; an `offset` before the start or
    /// past the end is [`LogError::OffsetOutOfRange`]. Blocking, and appends and reads of this
    /// partition wait meanwhile (for an fsync per deleted segment and one for the cut): it is
    /// rare, and no append may interleave with it.
    ///
    /// `offset` must be a message boundary (an end that an append or the leader reported), which
    /// is not checked, as the log has no index to check it against: a cut inside a message would
    /// leave a torn message in the middle of the log once more is appended, and recovery would
    /// cut it there together with everything after it.
    ///
    /// The steps are ordered so that a crash between any two leaves a prefix of the old log:
    /// newest segment first, each deletion fsynced in the directory before the next, the cut
    /// of the kept segment last. A fetch that is sending from the cut part of a file ends early
    /// and its connection is closed (see `sendfile.rs`).
    pub fn truncate_to(&self, offset: u64) -> Result<(), LogError> {
        let _flushing = lock(&self.flushing);
        let mut state = self.state();
        let start = state.segments[0].base_offset;
        if offset < start || offset > state.end {
            return Err(LogError::OffsetOutOfRange {
                topic: self.topic.clone(),
                partition: self.index,
                offset: i64::try_from(offset).unwrap_or(i64::MAX),
                start,
                end: state.end,
            });
        }
        if offset == state.end {
            return Ok(());
        }
        let cut = self.cut(&mut state, offset);
        state.settle_start();
        // After a failure too: the ends (and what the replica knows of its producers) follow
        // what the log holds now.
        let end = state.end;
        state.reset_producers(end);
        self.delete_snapshots(|at| at > end);
        for published in [&self.flushed, &self.visible, &self.written] {
            published.send_if_modified(|published| {
                let lowered = *published > end;
                *published = (*published).min(end);
                lowered
            });
        }
        if cut.is_ok() {
            if self.flushed_end() == end {
                // All that is left had been flushed: nothing waits for a flush any more.
                state.unflushed_messages = 0;
                state.dirty_since = None;
            }
            tracing::info!(topic = %self.topic, partition = self.index, end, "truncated the log");
        }
        cut
    }

    /// The file work of [`Partition::truncate_to`], `offset` within the log: deletes the
    /// segments that begin after `offset`, newest first, then cuts the one holding it.
    /// `state` follows every step that succeeded, so that it matches the disk on a failure.
    fn cut(&self, state: &mut State, offset: u64) -> Result<(), LogError> {
        let keep = state.segments.partition_point(|s| s.base_offset <= offset);
        while state.segments.len() > keep {
            let doomed = Arc::clone(state.active());
            fs::remove_file(&doomed.path).map_err(io_error("deleting", &doomed.path))?;
            state.segments.pop();
            if let Some(index) = state.indexes.pop() {
                index.delete().map_err(io_error("deleting the index of", &doomed.path))?;
            }
            state.unsynced.retain(|s| !Arc::ptr_eq(s, &doomed));
            state.end = doomed.base_offset;
            if let Err(e) = sync_dir(&self.dir) {
                state.dir_unsynced = true;
                return Err(e);
            }
        }
        let kept = Arc::clone(state.active());
        let from = state.active_index().floor_byte(offset);
        let max = state.config.max_message_bytes;
        let end = index::entry_at_offset(&kept.file, kept.base_offset, from, offset, max)
            .map_err(io_error("indexing", &kept.path))?;
        kept.file.set_len(offset - kept.base_offset).map_err(io_error("truncating", &kept.path))?;
        state.active_index_mut().truncate(end).map_err(io_error("indexing", &kept.path))?;
        state.recent_ends.retain(|e| e.byte <= offset);
        state.end = offset;
        // Fsynced whole below, so no flush need sync it again, unless that fails.
        state.unsynced.retain(|s| !Arc::ptr_eq(s, &kept));
        if let Err(e) = kept.file.sync_all() {
            let error = io_error("syncing", &kept.path)(e);
            state.unsynced.push(kept);
            state.dirty_since.get_or_insert_with(Instant::now);
            return Err(error);
        }
        Ok(())
    }

    // Leader epochs (docs/design.md, "Leader epochs" and "Leader-epoch checkpoint").

    /// The latest leader epoch of the log, if it has one.
    pub fn leader_epoch(&self) -> Option<i32> {
        lock(&self.epochs).latest().map(|e| e.epoch)
    }

    /// Starts leader epoch `epoch` at the log end, written to the checkpoint (fsynced) before
    /// the caller accepts a write in it: what a broker does when it becomes the leader. The
    /// first epoch of a log starts at its start offset, so that data written before epochs
    /// were kept belongs to it. Starting the latest epoch again changes nothing; an older one
    /// is refused. Blocking.
    pub fn start_leader_epoch(&self, epoch: i32) -> Result<(), LogError> {
        let state = self.state();
        let mut epochs = lock(&self.epochs);
        let from =
            if epochs.latest().is_none() { state.segments[0].base_offset } else { state.end };
        epochs.assign(epoch, from)?;
        drop(epochs);
        drop(state);
        tracing::info!(topic = %self.topic, partition = self.index, epoch, from, "leader epoch started");
        Ok(())
    }

    /// OFFSET_FOR_LEADER_EPOCH: the largest epoch at or below `epoch` and the offset where it
    /// ends in this log; `None` when the log knows no such epoch.
    pub fn end_offset_for(&self, epoch: i32) -> Option<(i32, u64)> {
        let state = self.state();
        lock(&self.epochs).end_offset_for(epoch, state.end)
    }

    /// A follower's read: up to `max_bytes` from `offset`, within one segment, up to the
    /// written end (not the visible end: the follower needs what the leader has, flushed or
    /// not), and never past the end of the epoch that `offset` is in, so that every byte of an
    /// answer has the one epoch it carries.
    pub fn read_replica(&self, offset: i64, max_bytes: u32) -> Result<ReplicaSlice, LogError> {
        let state = self.state();
        let offset = self.within(&state, offset, state.end)?;
        let (epoch, epoch_end) = {
            let epochs = lock(&self.epochs);
            let entries = epochs.entries();
            let i = entries.partition_point(|e| e.start_offset <= offset);
            let epoch = match i {
                0 => protocol::UNDEFINED_EPOCH,
                i => entries[i - 1].epoch,
            };
            (epoch, entries.get(i).map_or(state.end, |next| next.start_offset))
        };
        let i = state.segments.partition_point(|s| s.base_offset <= offset) - 1;
        let segment = Arc::clone(&state.segments[i]);
        let segment_base = segment.base_offset;
        if offset == state.end {
            return Ok(ReplicaSlice { slice: None, epoch, segment_base });
        }
        let limit = state.segment_end(i).min(epoch_end);
        let len = (limit - offset).min(u64::from(max_bytes));
        let position = offset - segment.base_offset;
        Ok(ReplicaSlice { slice: Some(FileSlice { segment, position, len }), epoch, segment_base })
    }

    /// The high watermark, if the partition is replicated.
    pub fn high_watermark(&self) -> Option<u64> {
        match self.high_watermark.load(std::sync::atomic::Ordering::Acquire) {
            u64::MAX => None,
            hw => Some(hw),
        }
    }

    /// Sets the high watermark (`None`: not replicated, no cap) and lets the visible end catch
    /// up to it. The visible end never moves back: a caller lowers the high watermark only
    /// for a log whose consumers have not seen past it (a follower, or a new leader's start).
    pub fn set_high_watermark(&self, high_watermark: Option<u64>) {
        let state = self.state();
        let hw = high_watermark.unwrap_or(u64::MAX).min(state.end);
        let hw = if high_watermark.is_none() { u64::MAX } else { hw };
        self.high_watermark.store(hw, std::sync::atomic::Ordering::Release);
        let candidate = match state.config.visible_after {
            VisibleAfter::Write => state.end,
            VisibleAfter::Flush => self.flushed_end(),
        };
        self.advance_visible(candidate);
    }

    /// Appends a MessageSet copied from the leader, written there in leader epoch `epoch` into
    /// its segment based at `segment_base`: an epoch newer than the log's latest starts at the
    /// log end first (in the checkpoint, fsynced), and a new segment starts where the leader's
    /// did, so that this log's epochs and segment files match the leader's byte for byte. The
    /// caller has validated the set whole.
    pub fn append_replica(
        &self,
        set: &[u8],
        counted: &SetRecords,
        epoch: i32,
        segment_base: u64,
    ) -> Result<Appended, LogError> {
        if epoch != protocol::UNDEFINED_EPOCH
            && self.leader_epoch().is_none_or(|latest| epoch > latest)
        {
            let end = self.end();
            lock(&self.epochs).assign(epoch, end)?;
        }
        self.append_rolling(&[set], std::slice::from_ref(counted), Roll::At(segment_base))
    }

    /// Cuts the log and its epochs back to `offset`: a follower's truncation after a leader
    /// change. Blocking; see [`Partition::truncate_to`].
    pub fn truncate_replica(&self, offset: u64) -> Result<(), LogError> {
        self.truncate_to(offset)?;
        lock(&self.epochs).truncate_from_end(offset)
    }

    /// Empties the log and starts it again, empty, at `base` (past its end), its next record
    /// numbered `first_record` (the leader's number at `base`), knowing `producers` as the
    /// idempotent producers' batches before it (snapshotted there): a follower whose
    /// whole log lies before its leader's log start, because retention on the leader deleted
    /// everything it has. Its leader epochs go too; the copied data brings them again.
    /// Blocking; appends and reads wait meanwhile.
    ///
    /// The old segments are cut away first as [`Partition::truncate_to`] does (a crash then
    /// leaves a prefix of the old log, from which the follower starts over); the new segment is
    /// created before the last, empty, old one is deleted, so that the state always names
    /// files that exist.
    pub fn restart_replica_at(
        &self,
        base: u64,
        first_record: u64,
        producers: History,
    ) -> Result<(), LogError> {
        let _flushing = lock(&self.flushing);
        let mut state = self.state();
        if base <= state.end {
            return Err(LogError::OffsetOutOfRange {
                topic: self.topic.clone(),
                partition: self.index,
                offset: i64::try_from(base).unwrap_or(i64::MAX),
                start: state.segments[0].base_offset,
                end: state.end,
            });
        }
        let first = state.segments[0].base_offset;
        self.cut(&mut state, first)?;
        let index = SegmentIndex::create(&self.dir, base, first_record)
            .map_err(io_error("creating an index in", &self.dir))?;
        let created =
            Segment::create(&self.dir, base).map_err(io_error("creating segment in", &self.dir))?;
        let old = Arc::clone(state.active());
        state.segments.push(Arc::new(created));
        state.indexes.push(index);
        state.end = base;
        state.reset_producers(base);
        state.producers.learned(base, Producers::from_history(producers));
        self.delete_snapshots(|_| true);
        self.write_snapshot(&state);
        state.dir_unsynced = true;
        fs::remove_file(&old.path).map_err(io_error("deleting", &old.path))?;
        state.segments.remove(0);
        let old_index = state.indexes.remove(0);
        old_index.delete().map_err(io_error("deleting the index of", &old.path))?;
        state.recent_ends.clear();
        state.log_start = None;
        sync_dir(&self.dir)?;
        state.dir_unsynced = false;
        state.unsynced.clear();
        state.unflushed_messages = 0;
        state.dirty_since = None;
        // Nothing below `base` is here any more, and nothing at or past it yet.
        for published in [&self.flushed, &self.visible, &self.written] {
            published.send_replace(base);
        }
        drop(state);
        lock(&self.epochs).truncate_from_end(0)?;
        tracing::info!(topic = %self.topic, partition = self.index, start = base, "the log starts again, empty, at the leader's start");
        Ok(())
    }

    /// Every leader epoch of the log, newest first.
    pub fn epochs_newest_first(&self) -> Vec<i32> {
        lock(&self.epochs).entries().iter().rev().map(|e| e.epoch).collect()
    }
}
