//! What tiered storage needs of a partition's log (docs/design.md, "Tiered storage"): its
//! sealed, committed segments to upload, and how far the store holds the log — local
//! retention deletes no segment the store does not hold.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Partition, lock};
use crate::log::EpochEntry;
use crate::log::index;
use crate::log::segment::Segment;

/// A sealed segment wholly below the visible end: one a leader may upload.
#[derive(Debug, Clone)]
pub struct SealedSegment {
    pub segment: Arc<Segment>,
    /// Its record-number index, sealed and fsynced.
    pub index_path: PathBuf,
    /// The next segment's base.
    pub end: u64,
    pub first_record: u64,
    /// The number of the next segment's first record.
    pub end_record: u64,
    /// The largest record timestamp in it (−1 if none has one).
    pub max_time: i64,
    /// The leader epochs its messages were written in, each with the offset it began at
    /// (the first clamped to the segment's base).
    pub epochs: Vec<EpochEntry>,
    /// The snapshot of the idempotent producers taken at its end (when it rolled), if there
    /// is one.
    pub producers_path: Option<PathBuf>,
}

impl Partition {
    /// The sealed segments from byte `from` on that every in-sync replica has and that are on
    /// disk: wholly below the visible end (the high watermark, and the flushed end under
    /// `flush`).
    pub fn sealed_segments(&self, from: u64) -> Vec<SealedSegment> {
        let visible_end = self.visible_end();
        let state = self.state();
        let mut sealed = Vec::new();
        for i in 0..state.segments.len().saturating_sub(1) {
            let (segment, end) = (&state.segments[i], state.segment_end(i));
            if segment.base_offset < from || end == segment.base_offset {
                continue;
            }
            if end > visible_end {
                break;
            }
            let index = &state.indexes[i];
            sealed.push(SealedSegment {
                segment: Arc::clone(segment),
                index_path: self.dir.join(index::file_name(segment.base_offset)),
                end,
                first_record: index.first_record(),
                end_record: index.end_record(),
                max_time: index.end().time,
                epochs: Vec::new(),
                producers_path: None,
            });
        }
        drop(state);
        let epochs = lock(&self.epochs);
        for s in &mut sealed {
            s.epochs = epochs_within(epochs.entries(), s.segment.base_offset, s.end);
        }
        drop(epochs);
        for s in &mut sealed {
            let path = self.dir.join(super::producers::snapshot_name(s.end));
            s.producers_path = path.exists().then_some(path);
        }
        sealed
    }

    /// Says that the object store holds the log below byte `end`: local retention may delete
    /// segments that end there or before.
    pub fn set_remote_end(&self, end: u64) {
        self.remote_end.store(end, Ordering::Release);
    }

    /// The log's settings now.
    pub fn config(&self) -> crate::config::LogConfig {
        self.state().config
    }

    /// The base offset of the first segment on disk: where the local log begins (DeleteRecords
    /// may have moved the start of what readers see past it).
    pub fn first_segment_base(&self) -> u64 {
        self.state().segments[0].base_offset
    }

    /// The record DeleteRecords asked the log to start at (0 if it never did): nothing before
    /// it is read, from disk or from the store.
    pub fn start_wanted(&self) -> u64 {
        self.state().start_wanted
    }

    /// Bytes of the sealed segments on disk that the object store does not hold (0 for a topic
    /// that is not tiered): what local retention cannot delete yet.
    pub fn upload_lag(&self) -> u64 {
        let state = self.state();
        if !state.config.remote_storage {
            return 0;
        }
        let sealed_end = state.active().base_offset;
        sealed_end.saturating_sub(self.remote_end().max(state.segments[0].base_offset))
    }

    /// How far the object store holds the log (0 while it holds none of it).
    pub fn remote_end(&self) -> u64 {
        self.remote_end.load(Ordering::Acquire)
    }
}

/// The epochs of `entries` that wrote in `[base, end)`, the first starting at `base`.
fn epochs_within(entries: &[EpochEntry], base: u64, end: u64) -> Vec<EpochEntry> {
    let first = entries.partition_point(|e| e.start_offset <= base).saturating_sub(1);
    entries[first.min(entries.len())..]
        .iter()
        .take_while(|e| e.start_offset < end)
        .map(|e| EpochEntry { epoch: e.epoch, start_offset: e.start_offset.max(base) })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_lists_the_epochs_that_wrote_in_it() {
        let e = |epoch, start_offset| EpochEntry { epoch, start_offset };
        let entries = [e(0, 0), e(3, 100), e(5, 250)];
        assert_eq!(epochs_within(&entries, 50, 200), vec![e(0, 50), e(3, 100)]);
        assert_eq!(epochs_within(&entries, 100, 250), vec![e(3, 100)]);
        assert_eq!(epochs_within(&entries, 300, 400), vec![e(5, 300)]);
        assert_eq!(epochs_within(&[], 0, 10), vec![]);
    }
}
