//! Opening a partition: its segments listed, the last one checked message by message and cut
//! at the first torn or invalid one, the record indexes opened or rebuilt, the leader epochs
//! loaded.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use super::{Partition, State, start};
use crate::config::LogConfig;
use crate::log::error::{LogError, io_error};
use crate::log::index::{self, SegmentIndex};
use crate::log::leader_epoch::{LEADER_EPOCH_CHECKPOINT, LeaderEpochCache};
use crate::log::producers::{self, History, Producers};
use crate::log::segment::{Segment, scan_valid_prefix};

impl Partition {
    /// Opens (or creates) the partition in `dir`, validating the last segment and truncating it
    /// at the first torn or invalid message. Blocking.
    pub fn open(
        dir: PathBuf,
        topic: &str,
        index: u32,
        config: LogConfig,
    ) -> Result<Self, LogError> {
        fs::create_dir_all(&dir).map_err(io_error("creating partition directory", &dir))?;
        let (segments, dir_unsynced) = open_segments(&dir)?;
        let end = recover_tail(segments.last().expect("one segment at least"))?;
        let indexes = open_indexes(&dir, &segments, end, config.max_message_bytes)?;
        let mut epochs = LeaderEpochCache::open(&dir)?;
        // The checkpoint may run past a log cut short by recovery.
        if epochs.latest().is_some_and(|latest| latest.start_offset > end) {
            epochs.truncate_from_end(end + 1)?;
        }
        let partition = Partition {
            topic: topic.to_owned(),
            index,
            dir,
            state: Mutex::new(State {
                config,
                segments,
                indexes,
                recent_ends: std::collections::VecDeque::new(),
                end,
                unflushed_messages: 0,
                dirty_since: None,
                sync_time: Duration::ZERO,
                flush_requested: false,
                unsynced: Vec::new(),
                dir_unsynced,
                log_start: None,
                start_wanted: 0,
                producers: Producers::from(end),
            }),
            flushed: watch::Sender::new(end),
            visible: watch::Sender::new(end),
            remote_end: std::sync::atomic::AtomicU64::new(0),
            written: watch::Sender::new(end),
            high_watermark: std::sync::atomic::AtomicU64::new(u64::MAX),
            flush_wanted: Notify::new(),
            epochs: Mutex::new(epochs),
            flushing: Mutex::new(()),
            removed: tokio_util::sync::CancellationToken::new(),
        };
        if dir_unsynced {
            partition.flush()?;
        }
        {
            // An empty log has no producers before it: its state is whole from the start.
            let mut state = partition.state();
            if state.segments.len() == 1 && state.segments[0].base_offset == end {
                state.producers.learned(end, Producers::from_history(History::default()));
            }
        }
        if let Some(kept) = start::read_start(&partition.dir) {
            let mut state = partition.state();
            state.log_start = Some(kept);
            state.settle_start();
            state.start_wanted = kept.record;
        }
        Ok(partition)
    }
}

/// The partition's segments in `dir`, oldest first, with a first empty one created when there
/// are none (then the directory is not yet synced: `true`). Blocking.
fn open_segments(dir: &Path) -> Result<(Vec<Arc<Segment>>, bool), LogError> {
    let mut bases = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_error("listing", dir))? {
        let entry = entry.map_err(io_error("listing", dir))?;
        let name = entry.file_name();
        match name.to_str().and_then(Segment::parse_file_name) {
            Some(base) => bases.push(base),
            None if name == LEADER_EPOCH_CHECKPOINT || name == start::LOG_START_FILE => {}
            None if name.to_str().and_then(index::parse_file_name).is_some() => {}
            None if name.to_str().and_then(producers::parse_snapshot_name).is_some() => {}
            // A cleaned segment, or a producer snapshot, a crash left before it was renamed:
            // the old file stands.
            None if name.to_str().is_some_and(|n| {
                n.ends_with(super::clean::CLEANED_SUFFIX) || n.ends_with(".producers.new")
            }) =>
            {
                let path = entry.path();
                fs::remove_file(&path).map_err(io_error("deleting", &path))?;
            }
            None => {
                tracing::warn!(path = %entry.path().display(), "ignoring a file that is not a segment")
            }
        }
    }
    bases.sort_unstable();
    let mut segments = Vec::with_capacity(bases.len().max(1));
    for &base in &bases {
        segments
            .push(Arc::new(Segment::open(dir, base).map_err(io_error("opening segment in", dir))?));
    }
    if segments.is_empty() {
        segments
            .push(Arc::new(Segment::create(dir, 0).map_err(io_error("creating segment in", dir))?));
        return Ok((segments, true));
    }
    for pair in segments.windows(2) {
        let len = pair[0].file_len().map_err(io_error("reading", &pair[0].path))?;
        if pair[0].base_offset + len != pair[1].base_offset {
            tracing::warn!(
                segment = %pair[0].path.display(), len, next_base = pair[1].base_offset,
                "segment does not end where the next begins"
            );
        }
    }
    Ok((segments, false))
}

/// Checks the last segment message by message and cuts it at the first torn or invalid one;
/// answers where the log ends. Blocking.
fn recover_tail(last: &Segment) -> Result<u64, LogError> {
    let file_len = last.file_len().map_err(io_error("reading", &last.path))?;
    let scan =
        scan_valid_prefix(&last.file, file_len).map_err(io_error("recovering", &last.path))?;
    if let Some(reason) = &scan.stopped_because {
        tracing::warn!(
            segment = %last.path.display(),
            kept_bytes = scan.valid_bytes, kept_messages = scan.messages,
            cut_bytes = file_len - scan.valid_bytes, %reason,
            "truncating the partition's tail at the first invalid message"
        );
        last.file.set_len(scan.valid_bytes).map_err(io_error("truncating", &last.path))?;
        last.file.sync_all().map_err(io_error("syncing", &last.path))?;
    }
    Ok(last.base_offset + scan.valid_bytes)
}

/// The record index of each segment, opened or rebuilt (`index` module); the log ends at
/// `end`. Index files without a segment are deleted. Blocking.
fn open_indexes(
    dir: &Path,
    segments: &[Arc<Segment>],
    end: u64,
    message_bytes_max: u32,
) -> Result<Vec<SegmentIndex>, LogError> {
    let mut indexes: Vec<SegmentIndex> = Vec::with_capacity(segments.len());
    for (i, segment) in segments.iter().enumerate() {
        let sealed = i + 1 < segments.len();
        let segment_end = segments.get(i + 1).map_or(end, |next| next.base_offset);
        let first_record = indexes.last().map(SegmentIndex::end_record);
        let opened = SegmentIndex::open(
            dir,
            &segment.file,
            segment.base_offset,
            segment_end,
            first_record,
            sealed,
            message_bytes_max,
        )
        .map_err(io_error("indexing", &segment.path))?;
        indexes.push(opened);
    }
    for entry in fs::read_dir(dir).map_err(io_error("listing", dir))? {
        let entry = entry.map_err(io_error("listing", dir))?;
        let base = entry.file_name().to_str().and_then(index::parse_file_name);
        if base.is_some_and(|base| !segments.iter().any(|s| s.base_offset == base)) {
            fs::remove_file(entry.path()).map_err(io_error("deleting", &entry.path()))?;
        }
    }
    Ok(indexes)
}
