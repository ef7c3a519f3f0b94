//! One partition's log: a directory of segments addressed by logical byte offsets, with an
//! in-memory sorted list of segment base offsets and no per-message index (paper §3.1).
//!
//! Appends go to the last segment only. Data becomes visible to fetches once flushed (the
//! flushed end is the fetch limit) or, with `visible_after = "write"`, once appended. Flushing and retention are blocking filesystem work that
//! the caller runs off the async workers; [`Partition::append`] writes to the page cache
//! directly (a bounded memory copy) so that the produce path needs no thread hop.

use std::fs;
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use thiserror::Error;
use tokio::sync::{Notify, watch};

use super::index::{self, IndexEntry, SegmentIndex, SetRecords};
use super::leader_epoch::{LEADER_EPOCH_CHECKPOINT, LeaderEpochCache};
use super::segment::{Segment, scan_valid_prefix};
use crate::config::{LogConfig, VisibleAfter};

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LogError {
    #[error("{topic}-{partition}: offset {offset} is outside [{start}, {end}]")]
    OffsetOutOfRange { topic: String, partition: u32, offset: i64, start: u64, end: u64 },
    #[error("{context} {path}: {source}")]
    Io { context: &'static str, path: PathBuf, source: io::Error },
    /// The leader-epoch checkpoint is not one: `line` counts from 1.
    #[error("{path} line {line}: {reason}")]
    CorruptCheckpoint { path: PathBuf, line: usize, reason: String },
    #[error("{path}: cannot assign epoch {epoch} from offset {start_offset}: {reason}")]
    EpochRejected { path: PathBuf, epoch: i32, start_offset: u64, reason: String },
}

impl LogError {
    /// Whether the filesystem had no room (or the quota none) for a write.
    pub fn is_storage_full(&self) -> bool {
        matches!(self, LogError::Io { source, .. } if source.kind() == io::ErrorKind::StorageFull
            || source.kind() == io::ErrorKind::QuotaExceeded)
    }
}

pub(super) fn io_error(context: &'static str, path: &Path) -> impl FnOnce(io::Error) -> LogError {
    let path = path.to_owned();
    move |source| LogError::Io { context, path, source }
}

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Offset of the first appended message.
    pub offset: u64,
    /// Offset after the last appended message: the log's new end.
    pub end: u64,
    /// Record number of the first appended record.
    pub first_record: u64,
}

/// What a follower's fetch gets: bytes of one epoch, and which epoch that is.
#[derive(Debug, Clone)]
pub struct ReplicaSlice {
    /// `None` when the offset is the written end.
    pub slice: Option<FileSlice>,
    /// The leader epoch the bytes were written in ([`protocol::UNDEFINED_EPOCH`] for a log
    /// that has no epoch yet).
    pub epoch: i32,
    /// Base offset of the segment the bytes are in (the active segment's at the end).
    pub segment_base: u64,
}

/// Messages of a sealed segment that fail their CRC (or framing): bit rot under the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Offset of the first message that is not whole and valid.
    pub from: u64,
    /// The end of its segment: what follows cannot be trusted to be framed right.
    pub to: u64,
    pub segment_base: u64,
    pub reason: String,
}

/// Where an append may start a new segment.
#[derive(Debug, Clone, Copy)]
enum Roll {
    /// At `segment_bytes` or `segment_ms`: a leader's (or a lone broker's) rule.
    BySettings,
    /// Exactly where the leader started one (its base offset): a follower's rule, so that
    /// every replica's segment files are the same files.
    At(u64),
}

/// A run of bytes of one segment that a fetch sends as is.
#[derive(Debug, Clone)]
pub struct FileSlice {
    pub segment: Arc<Segment>,
    /// Position in the segment file.
    pub position: u64,
    pub len: u64,
}

pub struct Partition {
    topic: String,
    index: u32,
    dir: PathBuf,
    state: Mutex<State>,
    /// End of the data known to be on disk: what `acks` 2 waits for.
    flushed: watch::Sender<u64>,
    /// End of the data fetches see: the flushed end, or the written end for a partition with
    /// `visible_after = "write"`. Moves back only when the log is truncated; long-poll fetches
    /// wait on it.
    visible: watch::Sender<u64>,
    /// End of the data written, flushed or not: what followers' fetches wait on.
    written: watch::Sender<u64>,
    /// The high watermark of a replicated partition, which caps the visible end: consumers
    /// never see what a failover could take back. `u64::MAX` while the partition is not
    /// replicated (one replica: its log end is the high watermark).
    high_watermark: std::sync::atomic::AtomicU64,
    /// Wakes this partition's flusher: a threshold was crossed or a producer waits.
    flush_wanted: Notify,
    /// The leader epochs of the data, from the partition's leader-epoch checkpoint. Locked
    /// after `state` when both are held.
    epochs: Mutex<LeaderEpochCache>,
    /// Held by a flush from its snapshot until it has published the ends, and by a truncation
    /// throughout, so that a flush never publishes an end that a truncation has since cut.
    flushing: Mutex<()>,
    /// Cancelled when the partition is removed from this broker (its topic deleted, or its
    /// replica moved away): its tasks stop.
    removed: tokio_util::sync::CancellationToken,
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Partition({}-{})", self.topic, self.index)
    }
}

#[derive(Debug)]
struct State {
    config: LogConfig,
    /// Sorted by base offset; the last is the one appended to. Never empty.
    segments: Vec<Arc<Segment>>,
    /// The record index of each segment, in the same order.
    indexes: Vec<SegmentIndex>,
    /// Where recent appends ended, in records: what the visible end is in records, most of
    /// the time, without reading the log.
    recent_ends: std::collections::VecDeque<IndexEntry>,
    /// Offset the next append gets.
    end: u64,
    unflushed_messages: u64,
    /// When the oldest unflushed append happened.
    dirty_since: Option<Instant>,
    /// How long a flush's fsyncs took lately (a moving average).
    sync_time: Duration,
    /// A producer with `acks` 2 waits for a flush.
    flush_requested: bool,
    /// Segments whose last writes (appends before a roll, or a truncation) are not yet
    /// fsynced. The active segment is fsynced by every flush, listed here or not.
    unsynced: Vec<Arc<Segment>>,
    /// A segment was created or deleted since the directory was last fsynced.
    dir_unsynced: bool,
}

impl State {
    fn active(&self) -> &Arc<Segment> {
        self.segments.last().expect("a partition always has a segment")
    }

    fn active_index(&self) -> &SegmentIndex {
        self.indexes.last().expect("a segment always has an index")
    }

    fn active_index_mut(&mut self) -> &mut SegmentIndex {
        self.indexes.last_mut().expect("a segment always has an index")
    }

    /// End offset of segment `i`: the next segment's base, or the log end for the last.
    fn segment_end(&self, i: usize) -> u64 {
        self.segments.get(i + 1).map_or(self.end, |s| s.base_offset)
    }

    /// When the next flush must start so that the oldest unflushed append is on disk (and,
    /// under `flush`, visible) `flush_ms` after it was made: early by the time fsyncs take
    /// lately and by the timer's granularity (at most half of `flush_ms` early, so that one
    /// slow disk moment does not turn it into a flush per append).
    fn flush_deadline(&self) -> Option<Instant> {
        let interval = self.config.flush_interval();
        let lead = (self.sync_time + TIMER_GRANULARITY).min(interval / 2);
        self.dirty_since.map(|since| since + interval - lead)
    }
}

/// Ends of recent appends kept to answer the visible end in records.
const RECENT_ENDS_MAX: usize = 64;

/// Tokio's timers round a deadline up to the next millisecond.
const TIMER_GRANULARITY: Duration = Duration::from_millis(1);

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
        let mut bases = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_error("listing", &dir))? {
            let entry = entry.map_err(io_error("listing", &dir))?;
            let name = entry.file_name();
            match name.to_str().and_then(Segment::parse_file_name) {
                Some(base) => bases.push(base),
                None if name == LEADER_EPOCH_CHECKPOINT => {}
                None if name.to_str().and_then(index::parse_file_name).is_some() => {}
                None => {
                    tracing::warn!(path = %entry.path().display(), "ignoring a file that is not a segment")
                }
            }
        }
        bases.sort_unstable();
        let mut segments = Vec::with_capacity(bases.len().max(1));
        for &base in &bases {
            segments.push(Arc::new(
                Segment::open(&dir, base).map_err(io_error("opening segment in", &dir))?,
            ));
        }
        let mut dir_unsynced = false;
        if segments.is_empty() {
            segments.push(Arc::new(
                Segment::create(&dir, 0).map_err(io_error("creating segment in", &dir))?,
            ));
            dir_unsynced = true;
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
        let last = segments.last().expect("one segment at least");
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
        let end = last.base_offset + scan.valid_bytes;
        let indexes = open_indexes(&dir, &segments, end)?;
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
            }),
            flushed: watch::Sender::new(end),
            visible: watch::Sender::new(end),
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
        Ok(partition)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn index(&self) -> u32 {
        self.index
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Cancelled once the partition is removed from this broker.
    pub fn removed(&self) -> &tokio_util::sync::CancellationToken {
        &self.removed
    }

    pub fn set_config(&self, config: LogConfig) {
        let mut state = self.state();
        state.config = config;
        if config.visible_after == VisibleAfter::Write {
            self.advance_visible(state.end);
        }
        drop(state);
        self.flush_wanted.notify_one();
    }

    /// Moves the visible end forward to `end`, or to the high watermark if that is lower
    /// (never back), and wakes who waits on it.
    fn advance_visible(&self, end: u64) {
        let end = end.min(self.high_watermark.load(std::sync::atomic::Ordering::Acquire));
        self.visible.send_if_modified(|visible| {
            let advanced = end > *visible;
            *visible = (*visible).max(end);
            advanced
        });
    }

    /// Appends MessageSets the caller has validated whole and counted (`counted`, one per
    /// set: [`index::count_records`]), one after another, with one `pwritev` to the page cache
    /// at the log end. A failed write is cut off again so that the log never holds part of a
    /// set. Returns where the first set landed; each next set follows the one before. A
    /// magic-2 message gets its batch's base offset set to the number of its first record
    /// (DESIGN: the batch's CRC-32C does not cover it; the message's CRC is written again).
    pub fn append(&self, sets: &[&[u8]], counted: &[SetRecords]) -> Result<Appended, LogError> {
        self.append_rolling(sets, counted, Roll::BySettings)
    }

    fn append_rolling(
        &self,
        sets: &[&[u8]],
        counted: &[SetRecords],
        roll: Roll,
    ) -> Result<Appended, LogError> {
        debug_assert_eq!(sets.len(), counted.len());
        let bytes: u64 = sets.iter().map(|s| s.len() as u64).sum();
        let messages: u64 = counted.iter().map(|c| c.messages.len() as u64).sum();
        let mut state = self.state();
        let active_len = state.end - state.active().base_offset;
        let due = match roll {
            Roll::BySettings => {
                let full = active_len + bytes > state.config.segment_bytes;
                let old = state.active().opened_at.elapsed()
                    >= Duration::from_millis(state.config.segment_ms);
                full || old
            }
            Roll::At(base) => state.end == base && state.active().base_offset != base,
        };
        if active_len > 0 && due {
            self.roll(&mut state)?;
        }
        let offset = state.end;
        let first_record = state.active_index().end_record();
        // A leader numbers the batches of magic-2 messages; a follower copies them as they are.
        let numbered: Vec<Option<Vec<u8>>> = match roll {
            Roll::BySettings => number_batches(sets, counted, first_record),
            Roll::At(_) => vec![None; sets.len()],
        };
        let written: Vec<&[u8]> =
            sets.iter().zip(&numbered).map(|(set, copy)| copy.as_deref().unwrap_or(set)).collect();
        let active = Arc::clone(state.active());
        let position = offset - active.base_offset;
        if let Err(e) = write_all_vectored_at(&active.file, &written, position) {
            // Leave no partial set behind; if even that fails, recovery will cut it on start.
            let _ = active.file.set_len(position);
            return Err(io_error("appending to", &active.path)(e));
        }
        let index = state.active_index_mut();
        let mut at = offset;
        for (set, counts) in sets.iter().zip(counted) {
            for (i, &(start, records, _)) in counts.messages.iter().enumerate() {
                let next = counts.messages.get(i + 1).map_or(set.len() as u64, |m| u64::from(m.0));
                index.append_message(at + u64::from(start), records, next - u64::from(start));
            }
            at += set.len() as u64;
        }
        let ended = index.end();
        if state.recent_ends.len() == RECENT_ENDS_MAX {
            state.recent_ends.pop_front();
        }
        state.recent_ends.push_back(ended);
        state.end += bytes;
        self.written.send_replace(state.end);
        if state.config.visible_after == VisibleAfter::Write {
            // Under the lock, so that the visible end only moves forward.
            self.advance_visible(state.end);
        }
        state.unflushed_messages += messages;
        let first_dirty = state.dirty_since.is_none();
        state.dirty_since.get_or_insert_with(Instant::now);
        if first_dirty || state.unflushed_messages >= state.config.flush_messages {
            self.flush_wanted.notify_one();
        }
        Ok(Appended { offset, end: state.end, first_record })
    }

    /// Starts a new segment at the log end. The old one is fsynced by the next flush.
    fn roll(&self, state: &mut State) -> Result<(), LogError> {
        let next_record = state.active_index().end_record();
        let index = SegmentIndex::create(&self.dir, state.end, next_record)
            .map_err(io_error("creating an index in", &self.dir))?;
        let segment = Segment::create(&self.dir, state.end)
            .map_err(io_error("rolling segment in", &self.dir))?;
        let sealing = state.active_index_mut();
        if let Err(e) = sealing.seal() {
            // The next start completes the sealed index from its segment.
            tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "cannot seal a segment's index");
        }
        state.indexes.push(index);
        tracing::debug!(topic = %self.topic, partition = self.index, base_offset = state.end, "rolled segment");
        let old = Arc::clone(state.active());
        state.unsynced.push(old);
        state.segments.push(Arc::new(segment));
        state.dir_unsynced = true;
        Ok(())
    }

    /// The end of the data on disk.
    pub fn flushed_end(&self) -> u64 {
        *self.flushed.borrow()
    }

    /// The end of the data fetches see.
    pub fn visible_end(&self) -> u64 {
        *self.visible.borrow()
    }

    /// A watch of the visible end, for fetches that wait for data: it changes when data
    /// becomes visible, and moves back only when [`Partition::truncate_to`] cuts the log.
    pub fn watch_visible(&self) -> watch::Receiver<u64> {
        self.visible.subscribe()
    }

    /// The end of the log, flushed or not.
    pub fn end(&self) -> u64 {
        self.state().end
    }

    /// Offset of the first byte still kept.
    pub fn start_offset(&self) -> u64 {
        self.state().segments[0].base_offset
    }

    // Record numbers (DESIGN "Kafka protocol listener").

    /// The number the next record appended gets: the log's end in records.
    pub fn end_record(&self) -> u64 {
        self.state().active_index().end_record()
    }

    /// The number of the log's first record.
    pub fn start_record(&self) -> u64 {
        self.state().indexes[0].first_record()
    }

    /// The number of the record at byte `offset` (a message boundary, or the log's end).
    /// Blocking: may read the messages between an index entry and `offset`.
    pub fn record_at_offset(&self, offset: i64) -> Result<u64, LogError> {
        let (segment, from, position) = {
            let state = self.state();
            let position = self.within(&state, offset, state.end)?;
            if position == state.end {
                return Ok(state.active_index().end_record());
            }
            if let Some(recent) = state.recent_ends.iter().rev().find(|e| e.byte == position) {
                return Ok(recent.record);
            }
            let i = state.segments.partition_point(|s| s.base_offset <= position) - 1;
            (Arc::clone(&state.segments[i]), state.indexes[i].floor_byte(position), position)
        };
        index::record_at(&segment.file, segment.base_offset, from, position)
            .map_err(io_error("indexing", &segment.path))
    }

    /// The message holding record `record`: its byte offset and the number of its first
    /// record; `None` when `record` is not in the log (before its start or at its end or past).
    /// Blocking: reads the messages between an index entry and it.
    pub fn locate_record(&self, record: u64) -> Result<Option<(u64, u64)>, LogError> {
        let (segment, end, from) = {
            let state = self.state();
            if record < state.indexes[0].first_record()
                || record >= state.active_index().end_record()
            {
                return Ok(None);
            }
            let i = state.indexes.partition_point(|index| index.first_record() <= record) - 1;
            let segment = Arc::clone(&state.segments[i]);
            (segment, state.segment_end(i), state.indexes[i].floor_record(record))
        };
        index::locate(&segment.file, segment.base_offset, end, from, record)
            .map_err(io_error("indexing", &segment.path))
    }

    /// Base offsets of the segments, oldest first.
    pub fn segment_bases(&self) -> Vec<u64> {
        self.state().segments.iter().map(|s| s.base_offset).collect()
    }

    /// Up to `max_bytes` of visible log from `offset`, within one segment. `None` when `offset`
    /// is the visible end. A slice may end in a partial message; the consumer drops it.
    pub fn read(&self, offset: i64, max_bytes: u32) -> Result<Option<FileSlice>, LogError> {
        let visible_end = self.visible_end();
        let state = self.state();
        let offset = self.within(&state, offset, visible_end)?;
        if offset == visible_end {
            return Ok(None);
        }
        let i = state.segments.partition_point(|s| s.base_offset <= offset) - 1;
        let segment = Arc::clone(&state.segments[i]);
        let limit = state.segment_end(i).min(visible_end);
        let len = (limit - offset).min(u64::from(max_bytes));
        let position = offset - segment.base_offset;
        Ok(Some(FileSlice { segment, position, len }))
    }

    /// `offset` as a position of the log between its start and `end`, or
    /// [`LogError::OffsetOutOfRange`].
    fn within(&self, state: &State, offset: i64, end: u64) -> Result<u64, LogError> {
        let start = state.segments[0].base_offset;
        match u64::try_from(offset) {
            Ok(position) if position >= start && position <= end => Ok(position),
            _ => Err(LogError::OffsetOutOfRange {
                topic: self.topic.clone(),
                partition: self.index,
                offset,
                start,
                end,
            }),
        }
    }

    /// Asks the flusher for a flush now and waits until the log is on disk up to `end`.
    pub async fn wait_flushed(&self, end: u64) {
        let mut flushed = self.flushed.subscribe();
        if *flushed.borrow() >= end {
            return;
        }
        self.state().flush_requested = true;
        self.flush_wanted.notify_one();
        // The sender lives as long as `self`, so `wait_for` cannot fail while we borrow it.
        let _ = flushed.wait_for(|&flushed| flushed >= end).await;
    }

    /// Waits until a flush may be due: the flusher task's sleep.
    pub async fn flush_wanted(&self) {
        self.flush_wanted.notified().await
    }

    /// When the next flush is due by `flush_ms`, if there is unflushed data.
    pub fn flush_deadline(&self) -> Option<Instant> {
        self.state().flush_deadline()
    }

    /// Whether `flush_messages`, `flush_ms` or a waiting producer calls for a flush now.
    pub fn flush_due(&self, now: Instant) -> bool {
        let state = self.state();
        state.flush_requested
            || state.dir_unsynced
            || state.unflushed_messages >= state.config.flush_messages
            || state.flush_deadline().is_some_and(|deadline| now >= deadline)
    }

    /// Fsyncs everything appended so far and makes it visible (if it was not already). Blocking. The lock is held only
    /// to take a snapshot, so appends continue while the disk works.
    pub fn flush(&self) -> Result<(), LogError> {
        let _flushing = lock(&self.flushing);
        let (target, mut files, dir_unsynced) = {
            let mut state = self.state();
            let clean = !state.dir_unsynced && state.unsynced.is_empty();
            if clean && state.end == self.flushed_end() {
                state.flush_requested = false;
                return Ok(());
            }
            let mut files = std::mem::take(&mut state.unsynced);
            files.push(Arc::clone(state.active()));
            // The active index is written, never fsynced: recovery rebuilds what it lacks.
            if let Err(e) = state.active_index_mut().write_new() {
                tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "cannot write the segment's index");
            }
            state.unflushed_messages = 0;
            state.dirty_since = None;
            state.flush_requested = false;
            (state.end, files, std::mem::take(&mut state.dir_unsynced))
        };
        let started = Instant::now();
        let synced =
            files.iter().try_for_each(|s| s.file.sync_data().map_err(io_error("syncing", &s.path)));
        let synced = synced.and_then(|()| if dir_unsynced { sync_dir(&self.dir) } else { Ok(()) });
        if let Err(e) = synced {
            // Keep the data unflushed (under `flush`, invisible) and try again on the next tick.
            let mut state = self.state();
            state.unsynced.append(&mut files);
            state.dirty_since.get_or_insert_with(Instant::now);
            state.dir_unsynced |= dir_unsynced;
            return Err(e);
        }
        {
            let mut state = self.state();
            state.sync_time = (state.sync_time * 7 + started.elapsed()) / 8;
        }
        // Visible first: a producer woken by the flushed end (`acks` 2) finds its data visible.
        self.advance_visible(target);
        self.flushed.send_if_modified(|flushed| {
            let advanced = target > *flushed;
            *flushed = (*flushed).max(target);
            advanced
        });
        // Again, for a high watermark raised between the first try and the flushed end.
        self.advance_visible(target);
        Ok(())
    }

    /// Deletes whole segments from the head: those last modified more than `retention_ms` ago,
    /// then more while the log is larger than `retention_bytes`. Only flushed segments go; the
    /// active segment goes only after a roll, when it has expired too. Blocking. Returns the
    /// base offsets deleted.
    pub fn enforce_retention(&self, now: SystemTime) -> Result<Vec<u64>, LogError> {
        let mut doomed = Vec::new();
        {
            let mut state = self.state();
            let visible_end = self.flushed_end();
            let retention = Duration::from_millis(state.config.retention_ms);
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
            if let Some(limit) = state.config.retention_bytes {
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
            if count > 0 {
                for index in state.indexes.drain(..count) {
                    if let Err(e) = index.delete() {
                        tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "cannot delete a segment's index");
                    }
                }
                doomed.extend(state.segments.drain(..count));
                state.unsynced.retain(|s| !doomed.iter().any(|d| Arc::ptr_eq(d, s)));
                state.dir_unsynced = true;
            }
        }
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
        // After a failure too: the ends follow what the log holds now.
        let end = state.end;
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
        let record = index::record_at(&kept.file, kept.base_offset, from, offset)
            .map_err(io_error("indexing", &kept.path))?;
        kept.file.set_len(offset - kept.base_offset).map_err(io_error("truncating", &kept.path))?;
        state
            .active_index_mut()
            .truncate(offset, record)
            .map_err(io_error("indexing", &kept.path))?;
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

    // Leader epochs (DESIGN "Replicated partitions").

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

    /// A watch of the written end, for followers' fetches that wait for data.
    pub fn watch_written(&self) -> watch::Receiver<u64> {
        self.written.subscribe()
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
    /// numbered `first_record` (the leader's number at `base`): a follower whose
    /// whole log lies before its leader's log start, because retention on the leader deleted
    /// everything it has. Its leader epochs go too; the copied data brings them again.
    /// Blocking; appends and reads wait meanwhile.
    ///
    /// The old segments are cut away first as [`Partition::truncate_to`] does (a crash then
    /// leaves a prefix of the old log, from which the follower starts over); the new segment is
    /// created before the last, empty, old one is deleted, so that the state always names
    /// files that exist.
    pub fn restart_replica_at(&self, base: u64, first_record: u64) -> Result<(), LogError> {
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
        state.dir_unsynced = true;
        fs::remove_file(&old.path).map_err(io_error("deleting", &old.path))?;
        state.segments.remove(0);
        let old_index = state.indexes.remove(0);
        old_index.delete().map_err(io_error("deleting the index of", &old.path))?;
        state.recent_ends.clear();
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

    /// Checks every message of the sealed segment based at `base` (every segment but the last
    /// is sealed: nothing is appended to it again) against its CRC, as recovery checks the last
    /// one: the damaged range if a message is not whole and valid, from its start to the end of
    /// the segment, where nothing after it can be trusted to be framed right. `None` if the
    /// segment is whole, or gone (retention, truncation) or active; with the bytes read.
    /// Blocking: reads the file.
    pub fn scrub_segment(&self, base: u64) -> Result<(u64, Option<Damage>), LogError> {
        let (segment, end) = {
            let state = self.state();
            let Some(i) = state.segments.iter().position(|s| s.base_offset == base) else {
                return Ok((0, None));
            };
            if i + 1 == state.segments.len() {
                return Ok((0, None));
            }
            (Arc::clone(&state.segments[i]), state.segment_end(i))
        };
        let scan = scan_valid_prefix(&segment.file, end - base)
            .map_err(io_error("scrubbing", &segment.path))?;
        let damage = scan.stopped_because.map(|reason| Damage {
            from: base + scan.valid_bytes,
            to: end,
            segment_base: base,
            reason,
        });
        Ok((end - base, damage))
    }

    /// Every leader epoch of the log, newest first.
    pub fn epochs_newest_first(&self) -> Vec<i32> {
        lock(&self.epochs).entries().iter().rev().map(|e| e.epoch).collect()
    }

    /// Writes `bytes`, copied from another replica, over the damage from `from` in a sealed
    /// segment, then fsyncs it: replicas hold the same bytes at the same offsets, so the copy is
    /// exactly what was there. Refused (`Ok(false)`) unless `bytes` are whole, valid messages
    /// and lie in the sealed segment based at `segment_base`. Blocking.
    pub fn repair(
        &self,
        segment_base: u64,
        from: u64,
        bytes: &[u8],
        length_max: u32,
    ) -> Result<bool, LogError> {
        if protocol::validate_message_set(bytes, length_max).is_err() {
            return Ok(false);
        }
        let state = self.state();
        let Some(i) = state.segments.iter().position(|s| s.base_offset == segment_base) else {
            return Ok(false);
        };
        let end = state.segment_end(i);
        if i + 1 == state.segments.len() || from < segment_base || from + bytes.len() as u64 > end {
            return Ok(false);
        }
        let segment = &state.segments[i];
        write_all_vectored_at(&segment.file, &[bytes], from - segment_base)
            .and_then(|()| segment.file.sync_data())
            .map_err(io_error("repairing", &segment.path))?;
        Ok(true)
    }

    /// The record number of the first record of the oldest segment last modified at or after
    /// `time_ms` (ms since the epoch): where records written at or after that time begin, at
    /// a segment's grain; `None` if every segment is older. Blocking (reads file times).
    pub fn first_record_since(&self, time_ms: i64) -> Result<Option<u64>, LogError> {
        let (segments, firsts): (Vec<Arc<Segment>>, Vec<u64>) = {
            let state = self.state();
            (state.segments.clone(), state.indexes.iter().map(SegmentIndex::first_record).collect())
        };
        for (segment, first) in segments.iter().zip(firsts) {
            let modified = segment.modified().map_err(io_error("reading", &segment.path))?;
            let modified_ms =
                modified.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
            if modified_ms >= time_ms {
                return Ok(Some(first));
            }
        }
        Ok(None)
    }

    /// `OFFSETS` for a time in ms since the epoch: base offsets of the segments last modified
    /// at or before it, newest first, at most `max_number`. Blocking (reads file times).
    pub fn offsets_before(&self, time_ms: i64, max_number: usize) -> Result<Vec<i64>, LogError> {
        let segments = self.state().segments.clone();
        let mut offsets = Vec::new();
        for segment in segments.iter().rev() {
            if offsets.len() >= max_number {
                break;
            }
            let modified = segment.modified().map_err(io_error("reading", &segment.path))?;
            let modified_ms =
                modified.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
            if modified_ms <= time_ms {
                offsets.push(segment.base_offset as i64);
            }
        }
        Ok(offsets)
    }
}

/// Locks one of a partition's mutexes. A panic while holding one would be a bug in this file;
/// the state they guard is only changed after the I/O that backs it has succeeded, so it stays
/// usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Most buffers one `pwritev` takes (Linux's `IOV_MAX`).
pub const SETS_PER_WRITE_MAX: usize = 1024;

/// Writes every buffer of `sets`, in order, at `position`, however many calls that takes.
fn write_all_vectored_at(file: &fs::File, sets: &[&[u8]], mut position: u64) -> io::Result<()> {
    for chunk in sets.chunks(SETS_PER_WRITE_MAX) {
        let mut slices: Vec<IoSlice<'_>> = chunk.iter().map(|s| IoSlice::new(s)).collect();
        let mut slices = &mut slices[..];
        while !slices.is_empty() {
            let written =
                nix::sys::uio::pwritev(file, slices, position as i64).map_err(io::Error::from)?;
            if written == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "pwritev wrote nothing"));
            }
            position += written as u64;
            IoSlice::advance_slices(&mut slices, written);
        }
    }
    Ok(())
}

/// Copies of the sets that hold magic-2 messages, each batch's base offset set to the number
/// of its first record (records of the sets before numbered from `first_record`) and the
/// message's CRC written again; `None` for a set without one, which is written as it came.
fn number_batches(
    sets: &[&[u8]],
    counted: &[SetRecords],
    first_record: u64,
) -> Vec<Option<Vec<u8>>> {
    let mut record = first_record;
    sets.iter()
        .zip(counted)
        .map(|(set, counts)| {
            let mut copy: Option<Vec<u8>> = None;
            for (i, &(start, records, batch)) in counts.messages.iter().enumerate() {
                if batch {
                    let copy = copy.get_or_insert_with(|| set.to_vec());
                    let start = start as usize;
                    let end = counts.messages.get(i + 1).map_or(set.len(), |m| m.0 as usize);
                    let message = &mut copy[start..end];
                    // length, CRC, magic: then the batch.
                    let batch_at = protocol::PLAIN_MESSAGE_OVERHEAD_BYTES;
                    protocol::record_batch::set_base_offset(
                        &mut message[batch_at..],
                        i64::try_from(record).unwrap_or(i64::MAX),
                    );
                    protocol::restamp_crc(message);
                }
                record += records;
            }
            copy
        })
        .collect()
}

/// The record index of each segment, opened or rebuilt (`index` module); the log ends at
/// `end`. Index files without a segment are deleted. Blocking.
fn open_indexes(
    dir: &Path,
    segments: &[Arc<Segment>],
    end: u64,
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

/// Fsyncs a directory so that created and deleted entries survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), LogError> {
    service::durable::sync_dir(dir).map_err(io_error("syncing directory", dir))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use protocol::Codec;

    use super::*;
    use crate::config::BrokerConfig;

    /// Every message in these tests: a 11-byte payload in 20 bytes of log.
    const MESSAGE_BYTES: u64 = 20;

    /// Segments of `segment_bytes`, data visible once written.
    fn config(segment_bytes: u64) -> LogConfig {
        LogConfig {
            segment_bytes,
            visible_after: VisibleAfter::Write,
            ..BrokerConfig::default().log()
        }
    }

    fn open(dir: &Path, config: LogConfig) -> Partition {
        Partition::open(dir.join("t-0"), "t", 0, config).unwrap()
    }

    /// A set of: two plain messages, a gzip wrapper of three, a batch of records numbered
    /// 0..5 (five offsets, two records) as a Kafka producer sends it.
    fn mixed_set() -> Vec<u8> {
        let mut set = Vec::new();
        protocol::encode_message(&mut set, Codec::None, b"plain-one");
        protocol::encode_message(&mut set, Codec::None, b"plain-two");
        let mut inner = Vec::new();
        for payload in [&b"a"[..], b"b", b"c"] {
            protocol::encode_message(&mut inner, Codec::None, payload);
        }
        let packed = protocol::compression::compress(Codec::Gzip, &inner).unwrap();
        protocol::encode_message(&mut set, Codec::Gzip, &packed);
        let mut batch = protocol::record_batch::RecordBatchBuilder::new(0);
        batch.push(0, 1_000, Some(b"k"), Some(b"first"), &[]);
        batch.push(4, 1_001, None, Some(b"fifth"), &[]);
        protocol::encode_batch_message(&mut set, &batch.finish());
        set
    }

    fn append_mixed(partition: &Partition) -> Appended {
        let set = mixed_set();
        let counted = index::count_records(&set, 1 << 20).unwrap();
        assert_eq!(counted.records, 10);
        partition.append(&[&set], &[counted]).unwrap()
    }

    #[test]
    fn records_are_numbered_across_appends_rolls_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let set_bytes = mixed_set().len() as u64;
        // Every segment holds two sets at most.
        let partition = open(dir.path(), config(2 * set_bytes));
        let mut appended = Vec::new();
        for _ in 0..5 {
            appended.push(append_mixed(&partition));
        }
        assert_eq!(
            appended.iter().map(|a| a.first_record).collect::<Vec<_>>(),
            [0, 10, 20, 30, 40]
        );
        assert_eq!((partition.start_record(), partition.end_record()), (0, 50));
        assert!(partition.segment_bases().len() >= 3, "{:?}", partition.segment_bases());
        // Each record is found in its message: plain ones alone, the wrapper's three together,
        // the batch's five offsets in one message.
        let message_starts = [0u64, 18, 36];
        for (i, a) in appended.iter().enumerate() {
            let base = i as u64 * 10;
            let batch_at = a.end - (set_bytes - mixed_set_batch_position());
            let expected = [
                (a.offset + message_starts[0], base),
                (a.offset + message_starts[1], base + 1),
                (a.offset + message_starts[2], base + 2),
                (a.offset + message_starts[2], base + 2),
                (a.offset + message_starts[2], base + 2),
                (batch_at, base + 5),
            ];
            for (k, want) in expected.iter().enumerate() {
                assert_eq!(partition.locate_record(base + k as u64).unwrap(), Some(*want), "{k}");
            }
            assert_eq!(partition.locate_record(base + 9).unwrap(), Some((batch_at, base + 5)));
            assert_eq!(partition.record_at_offset(a.offset as i64).unwrap(), base);
            assert_eq!(partition.record_at_offset(batch_at as i64).unwrap(), base + 5);
            // The stored batch carries its first record's number as its base offset.
            let slice = partition.read(batch_at as i64, 1 << 20).unwrap().unwrap();
            let mut bytes = vec![0u8; slice.len as usize];
            slice.segment.file.read_exact_at(&mut bytes, slice.position).unwrap();
            let (_, message) = protocol::MessageSetIter::new(&bytes, 0).next().unwrap().unwrap();
            let batch = protocol::record_batch::RecordBatchRef::parse(message.payload).unwrap();
            assert_eq!(batch.base_offset(), (base + 5) as i64);
        }
        assert_eq!(partition.locate_record(50).unwrap(), None);
        assert_eq!(partition.record_at_offset(partition.end() as i64).unwrap(), 50);
        partition.flush().unwrap();
        drop(partition);

        // Reopened: the same numbers, from the index files or, without them, from the log.
        let again = open(dir.path(), config(2 * set_bytes));
        assert_eq!(again.end_record(), 50);
        assert_eq!(again.locate_record(37).unwrap(), partition_locate(&appended[3], 7));
        drop(again);
        for entry in fs::read_dir(dir.path().join("t-0")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "index") {
                fs::remove_file(path).unwrap();
            }
        }
        let rebuilt = open(dir.path(), config(2 * set_bytes));
        assert_eq!((rebuilt.start_record(), rebuilt.end_record()), (0, 50));
        assert_eq!(rebuilt.locate_record(37).unwrap(), partition_locate(&appended[3], 7));
        assert_eq!(append_mixed(&rebuilt).first_record, 50);
    }

    /// Where record `k` (0..10) of a mixed set appended at `a` is.
    fn partition_locate(a: &Appended, k: u64) -> Option<(u64, u64)> {
        let base = a.first_record;
        Some(match k {
            0 => (a.offset, base),
            1 => (a.offset + 18, base + 1),
            2..=4 => (a.offset + 36, base + 2),
            _ => (a.offset + mixed_set_batch_position(), base + 5),
        })
    }

    /// Where the batch message starts in a mixed set.
    fn mixed_set_batch_position() -> u64 {
        let set = mixed_set();
        let positions: Vec<usize> = {
            let mut iter = protocol::MessageSetIter::new(&set, 0);
            let mut positions = vec![0];
            while iter.next().is_some() {
                positions.push(iter.valid_bytes());
            }
            positions
        };
        positions[3] as u64
    }

    #[test]
    fn truncation_and_a_restart_renumber_from_where_the_log_now_ends() {
        let dir = tempfile::tempdir().unwrap();
        let partition = open(dir.path(), config(1 << 20));
        let first = append_mixed(&partition);
        let second = append_mixed(&partition);
        partition.truncate_to(second.offset).unwrap();
        assert_eq!(partition.end_record(), 10);
        assert_eq!(append_mixed(&partition).first_record, 10);
        partition.truncate_to(first.offset + 18).unwrap();
        assert_eq!(partition.end_record(), 1, "one plain message kept");
        let end = partition.end();
        partition.restart_replica_at(end + 1_000, 4_242).unwrap();
        assert_eq!((partition.start_record(), partition.end_record()), (4_242, 4_242));
        assert_eq!(append_mixed(&partition).first_record, 4_242);
        drop(partition);
        let reopened = open(dir.path(), config(1 << 20));
        assert_eq!((reopened.start_record(), reopened.end_record()), (4_242, 4_252));
    }

    /// Appends one message per payload, each in a set of its own; returns where they landed.
    fn append(partition: &Partition, payloads: &[&str]) -> Vec<u64> {
        let offsets: Vec<u64> = payloads
            .iter()
            .map(|p| {
                let p = format!("{p:-<11}");
                let mut set = Vec::new();
                protocol::encode_message(&mut set, Codec::None, p.as_bytes());
                assert_eq!(set.len() as u64, MESSAGE_BYTES);
                let counted = index::count_records(&set, 1 << 20).unwrap();
                partition.append(&[&set], &[counted]).unwrap().offset
            })
            .collect();
        offsets
    }

    /// `(offset, payload up to its padding)` of every visible message, read as fetches read.
    fn messages(partition: &Partition) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        let mut offset = partition.start_offset();
        while let Some(slice) = partition.read(offset as i64, u32::MAX).unwrap() {
            let mut bytes = vec![0; slice.len as usize];
            slice.segment.file.read_exact_at(&mut bytes, slice.position).unwrap();
            let mut set = protocol::MessageSetIter::new(&bytes, offset as i64);
            for message in set.by_ref() {
                let (at, message) = message.unwrap();
                let payload = String::from_utf8(message.payload.to_vec()).unwrap();
                out.push((at as u64, payload.trim_end_matches('-').to_owned()));
            }
            assert!(set.remainder().is_empty(), "a torn message at {}", set.next_offset());
            offset += slice.len;
        }
        out
    }

    fn segment_lens(partition: &Partition) -> Vec<(u64, u64)> {
        let dir = partition.dir();
        let mut lens: Vec<(u64, u64)> = fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let e = e.unwrap();
                let base = Segment::parse_file_name(e.file_name().to_str()?)?;
                Some((base, e.metadata().unwrap().len()))
            })
            .collect();
        lens.sort_unstable();
        lens
    }

    #[test]
    fn truncate_within_the_last_segment_cuts_its_tail_and_appends_continue_there() {
        let dir = tempfile::tempdir().unwrap();
        let partition = open(dir.path(), config(1 << 20));
        assert_eq!(append(&partition, &["a", "b", "c"]), [0, 20, 40]);
        partition.flush().unwrap();
        partition.truncate_to(20).unwrap();
        assert_eq!(
            (partition.end(), partition.flushed_end(), partition.visible_end()),
            (20, 20, 20)
        );
        assert_eq!(segment_lens(&partition), [(0, 20)]);
        assert_eq!(append(&partition, &["d"]), [20]);
        assert_eq!(messages(&partition), [(0, "a".into()), (20, "d".into())]);
        partition.flush().unwrap();
        drop(partition);
        let reopened = open(dir.path(), config(1 << 20));
        assert_eq!(reopened.end(), 40);
        assert_eq!(messages(&reopened), [(0, "a".into()), (20, "d".into())]);
    }

    #[test]
    fn truncate_across_segments_deletes_the_later_ones() {
        let dir = tempfile::tempdir().unwrap();
        // Two messages a segment.
        let partition = open(dir.path(), config(2 * MESSAGE_BYTES + 10));
        append(&partition, &["a", "b", "c", "d", "e", "f"]);
        assert_eq!(partition.segment_bases(), [0, 40, 80]);
        partition.truncate_to(20).unwrap();
        assert_eq!(partition.segment_bases(), [0]);
        assert_eq!(segment_lens(&partition), [(0, 20)]);
        assert_eq!(partition.end(), 20);
        // Appends continue at the cut, and roll again into a segment named as a deleted one.
        assert_eq!(append(&partition, &["x", "y", "z"]), [20, 40, 60]);
        assert_eq!(partition.segment_bases(), [0, 40]);
        let expected: Vec<(u64, String)> =
            [(0, "a"), (20, "x"), (40, "y"), (60, "z")].map(|(o, p)| (o, p.to_owned())).into();
        assert_eq!(messages(&partition), expected);
        partition.flush().unwrap();
        drop(partition);
        let reopened = open(dir.path(), config(2 * MESSAGE_BYTES + 10));
        assert_eq!((reopened.segment_bases(), reopened.end()), (vec![0, 40], 80));
        assert_eq!(messages(&reopened), expected);
    }

    #[test]
    fn truncate_to_a_segment_base_keeps_that_segment_empty() {
        let dir = tempfile::tempdir().unwrap();
        let partition = open(dir.path(), config(2 * MESSAGE_BYTES + 10));
        append(&partition, &["a", "b", "c", "d", "e"]);
        partition.truncate_to(40).unwrap();
        assert_eq!(segment_lens(&partition), [(0, 40), (40, 0)]);
        assert_eq!(append(&partition, &["x"]), [40]);
        assert_eq!(segment_lens(&partition), [(0, 40), (40, 20)]);
        assert_eq!(messages(&partition).last(), Some(&(40, "x".to_owned())));
    }

    #[test]
    fn truncate_to_the_end_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let partition = open(dir.path(), config(1 << 20));
        append(&partition, &["a", "b"]);
        let mut visible = partition.watch_visible();
        visible.borrow_and_update();
        partition.truncate_to(40).unwrap();
        assert!(!visible.has_changed().unwrap());
        assert_eq!((partition.end(), segment_lens(&partition)), (40, vec![(0, 40)]));
        let empty = open(&dir.path().join("empty"), config(1 << 20));
        empty.truncate_to(0).unwrap();
        assert_eq!(empty.end(), 0);
    }

    #[test]
    fn truncate_before_the_start_or_past_the_end_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { retention_bytes: Some(50), ..config(2 * MESSAGE_BYTES + 10) };
        let partition = open(dir.path(), config);
        append(&partition, &["a", "b", "c", "d", "e", "f"]);
        partition.flush().unwrap();
        assert_eq!(partition.enforce_retention(SystemTime::now()).unwrap(), [0, 40]);
        assert_eq!((partition.start_offset(), partition.end()), (80, 120));
        for offset in [79, 121, u64::MAX] {
            let err = partition.truncate_to(offset).unwrap_err();
            assert!(
                matches!(err, LogError::OffsetOutOfRange { start: 80, end: 120, .. }),
                "{offset}: {err}"
            );
        }
        assert_eq!(partition.end(), 120, "a refused truncation changes nothing");
        partition.truncate_to(80).unwrap();
        assert_eq!((partition.start_offset(), partition.end()), (80, 80));
        assert_eq!(append(&partition, &["x"]), [80]);
        assert_eq!(messages(&partition), [(80, "x".to_owned())]);
    }

    #[test]
    fn truncation_lowers_the_flushed_and_visible_ends_and_wakes_their_watchers() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { visible_after: VisibleAfter::Flush, ..config(1 << 20) };
        let partition = open(dir.path(), config);
        append(&partition, &["a", "b", "c"]);
        partition.flush().unwrap();
        let mut visible = partition.watch_visible();
        visible.borrow_and_update();
        partition.truncate_to(20).unwrap();
        assert!(visible.has_changed().unwrap(), "a long poll sees the new end");
        assert_eq!(*visible.borrow_and_update(), 20);
        assert_eq!(partition.flushed_end(), 20);
        assert!(!partition.flush_due(Instant::now()), "all that is left was flushed");

        // Unflushed data past the flushed end: that end stays, and the next flush moves it.
        append(&partition, &["d", "e", "f"]);
        partition.truncate_to(40).unwrap();
        assert_eq!(
            (partition.end(), partition.flushed_end(), partition.visible_end()),
            (40, 20, 20)
        );
        assert!(!visible.has_changed().unwrap());
        partition.flush().unwrap();
        assert_eq!((partition.flushed_end(), partition.visible_end()), (40, 40));
        assert_eq!(messages(&partition), [(0, "a".into()), (20, "d".into())]);
    }
}
