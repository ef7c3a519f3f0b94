//! One partition's log: a directory of segments addressed by logical byte offsets, with an
//! in-memory sorted list of segment base offsets and no per-message index (paper §3.1).
//!
//! Appends go to the last segment only. Data becomes visible to fetches once flushed (the
//! flushed end is the fetch limit) or, with `visible_after = "write"`, once appended. Flushing and retention are blocking filesystem work that
//! the caller runs off the async workers; [`Partition::append`] writes to the page cache
//! directly (a bounded memory copy) so that the produce path needs no thread hop.

mod append;
mod clean;
mod flush;
mod producers;
mod read;
mod recover;
mod repair;
mod replica;
mod retention;
mod start;
mod tier;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};

use super::index::{IndexEntry, SegmentIndex};
use super::leader_epoch::LeaderEpochCache;
use super::segment::Segment;
use crate::config::{LogConfig, VisibleAfter};

pub use append::SETS_PER_WRITE_MAX;
pub use clean::Cleaned;
pub use tier::SealedSegment;

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Offset of the first appended message.
    pub offset: u64,
    /// Offset after the last appended message: the log's new end.
    pub end: u64,
    /// Record number of the first appended record.
    pub first_record: u64,
    /// The time the leader stamped its batches with, under LogAppendTime.
    pub append_time: Option<i64>,
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
    /// The object store holds the log below this byte offset (tiered storage): local
    /// retention of a tiered topic deletes no segment past it.
    remote_end: std::sync::atomic::AtomicU64,
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
    /// Where DeleteRecords moved the start, if inside the first segment (`start` module).
    log_start: Option<LogStart>,
    /// The record the log should start at: a start not yet reached, or reached.
    start_wanted: u64,
    /// Its idempotent producers' last batches.
    producers: crate::log::producers::Producers,
}

/// A log start inside the first segment: the message holding the first record kept, and that
/// record's number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LogStart {
    byte: u64,
    record: u64,
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

    /// Offset of the first byte readers may ask for.
    pub fn start_offset(&self) -> u64 {
        self.state().start_byte()
    }

    /// A watch of the written end, for followers' fetches that wait for data.
    pub fn watch_written(&self) -> watch::Receiver<u64> {
        self.written.subscribe()
    }
}

/// Locks one of a partition's mutexes. A panic while holding one would be a bug in this file;
/// the state they guard is only changed after the I/O that backs it has succeeded, so it stays
/// usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::FileExt;
    use std::time::SystemTime;

    use protocol::Codec;

    use super::*;
    use crate::config::{BrokerConfig, TimestampType};
    use crate::log::LogError;
    use crate::log::index;

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

    /// Under LogAppendTime the leader stamps each batch with its clock: the stored batch says
    /// so (its CRCs right), the append answers the time, and the time index finds it by it.
    #[test]
    fn log_append_time_stamps_the_stored_batch_and_indexes_its_time() {
        let dir = tempfile::tempdir().unwrap();
        let stamping =
            LogConfig { timestamp_type: TimestampType::LogAppendTime, ..config(1 << 20) };
        let partition = open(dir.path(), stamping);
        let before = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap();
        let before = before.as_millis() as i64;
        let appended = append_mixed(&partition);
        let time = appended.append_time.expect("stamped");
        assert!(time >= before, "{time} < {before}");
        let batch_at = appended.offset + mixed_set_batch_position();
        let slice = partition.read(batch_at as i64, 1 << 20).unwrap().unwrap();
        let mut bytes = vec![0u8; slice.len as usize];
        slice.segment.file.read_exact_at(&mut bytes, slice.position).unwrap();
        let (_, message) = protocol::MessageSetIter::new(&bytes, 0).next().unwrap().unwrap();
        let batch = protocol::record_batch::RecordBatchRef::parse(message.payload).unwrap();
        assert!(batch.is_log_append_time());
        assert_eq!((batch.base_timestamp(), batch.max_timestamp()), (1_000, time));
        // The producer's 1,000 ms is no longer what the batch is found by; its append time is.
        assert_eq!(partition.find_time(1_001).unwrap(), Some((5, time)));
        assert_eq!(partition.find_time(time + 1).unwrap(), None);
        // Without it, the producer's times stand: record 9 is the batch's one of 1,001 ms.
        let dir = tempfile::tempdir().unwrap();
        let partition = open(dir.path(), config(1 << 20));
        assert_eq!(append_mixed(&partition).append_time, None);
        assert_eq!(partition.find_time(1_001).unwrap(), Some((9, 1_001)));
    }

    /// DeleteRecords' log start: mid-segment and mid-message, kept across a reopen, never
    /// moved back, and at the end of the log every record gone with the log's end kept.
    #[test]
    fn a_moved_log_start_hides_what_is_before_it_and_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let set_bytes = mixed_set().len() as u64;
        let partition = open(dir.path(), config(2 * set_bytes));
        let appended: Vec<Appended> = (0..5).map(|_| append_mixed(&partition)).collect();
        let segments = partition.segment_bases().len();
        // Record 27 is in the batch of the third set (records 25..30), in the second segment.
        partition.want_start(27);
        assert_eq!(partition.advance_start().unwrap(), 27);
        let batch_at = appended[2].offset + mixed_set_batch_position();
        assert_eq!((partition.start_record(), partition.start_offset()), (27, batch_at));
        assert_eq!(partition.segment_bases().len(), segments - 1, "the first segment went");
        assert_eq!(partition.locate_record(26).unwrap(), None);
        assert_eq!(partition.locate_record(27).unwrap(), Some((batch_at, 25)));
        assert!(matches!(
            partition.read(appended[2].offset as i64, 1 << 20),
            Err(LogError::OffsetOutOfRange { .. })
        ));
        assert!(partition.read(batch_at as i64, 1 << 20).unwrap().is_some());
        // Asked for less, it stays.
        partition.want_start(5);
        assert_eq!(partition.advance_start().unwrap(), 27);
        drop(partition);

        let reopened = open(dir.path(), config(2 * set_bytes));
        assert_eq!((reopened.start_record(), reopened.start_offset()), (27, batch_at));
        // Everything: the log keeps its end, and goes on from it.
        reopened.want_start(50);
        assert_eq!(reopened.advance_start().unwrap(), 50);
        assert_eq!((reopened.start_record(), reopened.end_record()), (50, 50));
        assert_eq!(reopened.start_offset(), reopened.end());
        assert_eq!(append_mixed(&reopened).first_record, 50);
        assert_eq!(reopened.start_record(), 50);
    }

    /// A replica knows its idempotent producers' batches as it appends them, learns those
    /// before it opened the log from the log's tail, and forgets those cut away.
    #[test]
    fn a_replica_knows_its_producers_batches_from_appends_the_log_and_cuts() {
        use crate::log::producers::{BatchProducer, Check, Placed};
        let dir = tempfile::tempdir().unwrap();
        let partition = open(dir.path(), config(1 << 20));
        append_mixed(&partition);
        let mut set = Vec::new();
        let mut batch = protocol::record_batch::RecordBatchBuilder::new(0).with_producer(7, 2, 40);
        batch.push(0, 1_000, None, Some(b"a"), &[]);
        batch.push(1, 1_000, None, Some(b"b"), &[]);
        protocol::encode_batch_message(&mut set, &batch.finish());
        let counted = index::count_records(&set, 1 << 20).unwrap();
        let appended = partition.append(&[&set], &[counted]).unwrap();
        let producer = BatchProducer { id: 7, epoch: 2, sequences: (40, 41) };
        let placed = Placed {
            first_record: 10,
            offset: appended.offset,
            end: appended.offset + set.len() as u64,
            log_append_time: None,
        };
        // A log created empty knows its producers from its start.
        assert_eq!(partition.check_producer(producer), Some(Check::Duplicate(placed)));
        drop(partition);

        let reopened = open(dir.path(), config(1 << 20));
        reopened.learn_producers().unwrap();
        assert_eq!(
            reopened.check_producer(producer),
            Some(Check::Duplicate(placed)),
            "from the log"
        );
        reopened.truncate_to(appended.offset).unwrap();
        assert_eq!(reopened.check_producer(producer), None, "cut: learned again");
        reopened.learn_producers().unwrap();
        assert_eq!(reopened.check_producer(producer), Some(Check::Append));
    }

    /// A producer whose last batch lies further back than the log's tail that is read without
    /// a snapshot is still known after a restart: from the snapshot written at a roll (and
    /// not from one past a truncation).
    #[test]
    fn producers_far_back_are_known_again_from_the_snapshot_of_a_roll() {
        use crate::log::producers::{BatchProducer, Check, STATE_TAIL_BYTES};
        let dir = tempfile::tempdir().unwrap();
        let partition = open(dir.path(), config(1 << 20));
        let idempotent = |p: &Partition, sequence: i32| {
            let mut set = Vec::new();
            let mut batch =
                protocol::record_batch::RecordBatchBuilder::new(0).with_producer(9, 0, sequence);
            batch.push(0, 1_000, None, Some(b"once"), &[]);
            protocol::encode_batch_message(&mut set, &batch.finish());
            let counted = index::count_records(&set, 1 << 20).unwrap();
            p.append(&[&set], &[counted]).unwrap()
        };
        let first = idempotent(&partition, 0);
        // Far more than the tail, in 1 MiB segments: every roll snapshots the producer.
        let filler = vec![b'x'; 64 << 10];
        let mut set = Vec::new();
        protocol::encode_message(&mut set, Codec::None, &filler);
        let counted = index::count_records(&set, 1 << 20).unwrap();
        while partition.end() < 2 * STATE_TAIL_BYTES {
            partition.append(&[&set], std::slice::from_ref(&counted)).unwrap();
        }
        partition.flush().unwrap();
        drop(partition);

        let reopened = open(dir.path(), config(1 << 20));
        reopened.learn_producers().unwrap();
        let producer = BatchProducer { id: 9, epoch: 0, sequences: (0, 0) };
        match reopened.check_producer(producer) {
            Some(Check::Duplicate(placed)) => assert_eq!(placed.offset, first.offset),
            other => panic!("the producer's batch from {} is forgotten: {other:?}", first.offset),
        }
        let next = BatchProducer { id: 9, epoch: 0, sequences: (1, 1) };
        assert_eq!(reopened.check_producer(next), Some(Check::Append));

        // Cut back before the last roll: its snapshot goes, the earlier ones stay.
        let bases = reopened.segment_bases();
        let cut = bases[bases.len() - 2];
        reopened.truncate_to(cut).unwrap();
        let names: Vec<String> = std::fs::read_dir(dir.path().join("t-0"))
            .unwrap()
            .filter_map(|e| e.unwrap().file_name().into_string().ok())
            .filter(|n| n.ends_with(".producers"))
            .collect();
        assert!(!names.is_empty());
        let past: Vec<_> = names.iter().filter(|n| n[..20].parse::<u64>().unwrap() > cut).collect();
        assert!(past.is_empty(), "{past:?} past the cut at {cut}");
        reopened.learn_producers().unwrap();
        assert!(matches!(reopened.check_producer(producer), Some(Check::Duplicate(_))));
    }

    /// A replica knows its open transactions (the last stable offset) and the aborted ones as
    /// it appends, from the log after a crash left no snapshot, and from a snapshot.
    #[test]
    fn transactions_are_known_from_appends_the_log_and_snapshots() {
        use crate::log::producers::Aborted;
        let dir = tempfile::tempdir().unwrap();
        let append = |p: &Partition, batch: Vec<u8>| {
            let mut set = Vec::new();
            protocol::encode_batch_message(&mut set, &batch);
            let counted = index::count_records(&set, 1 << 20).unwrap();
            p.append(&[&set], &[counted]).unwrap()
        };
        let transactional = |p: &Partition, sequence: i32| {
            let mut batch = protocol::record_batch::RecordBatchBuilder::new(0)
                .with_producer(5, 0, sequence)
                .transactional();
            batch.push(0, 1_000, None, Some(b"in a transaction"), &[]);
            append(p, batch.finish())
        };
        let marker = |p: &Partition, commit: bool| {
            append(p, protocol::record_batch::transaction_marker(5, 0, commit, 0, 1_000))
        };
        let partition = open(dir.path(), config(1 << 20));
        append_mixed(&partition);
        let first = transactional(&partition, 0);
        transactional(&partition, 1);
        let open_at = |p: &Partition| p.first_open_transaction().unwrap().map(|o| o.offset);
        assert_eq!(open_at(&partition), Some(first.offset));
        drop(partition); // as a crash leaves it: no snapshot

        let reopened = open(dir.path(), config(1 << 20));
        assert_eq!(open_at(&reopened), Some(first.offset), "from the log");
        let abort = marker(&reopened, false);
        assert_eq!(open_at(&reopened), None);
        let aborted = vec![Aborted {
            producer_id: 5,
            first_record: 10,
            last_record: abort.first_record,
            first_offset: first.offset,
            marker_offset: abort.offset,
        }];
        assert_eq!(reopened.aborted_transactions(0, u64::MAX), aborted);
        assert_eq!(reopened.aborted_transactions(abort.first_record + 1, u64::MAX), Vec::new());
        transactional(&reopened, 2);
        reopened.snapshot_producers();
        drop(reopened);

        let again = open(dir.path(), config(1 << 20));
        assert!(again.has_producer_snapshot());
        assert!(open_at(&again).is_some(), "the open transaction, from the snapshot");
        assert_eq!(again.aborted_transactions(0, u64::MAX), aborted);
        marker(&again, true);
        assert_eq!(open_at(&again), None);
        assert_eq!(again.aborted_transactions(0, u64::MAX), aborted, "a commit lists nothing");
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
        partition.restart_replica_at(end + 1_000, 4_242, Default::default()).unwrap();
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
