//! The spool's writer thread: takes every append waiting, writes them, fsyncs once (group
//! commit), then answers them all. Also crash recovery of the segment files.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::error::{RETRY_AFTER_MS, SpoolError};
use super::record::{self, Next};
use super::state::{Segment, Shared, State, segment_path};
use crate::config::SpoolFull;
use events::audit::window_start;

type Reply = oneshot::Sender<Result<u64, SpoolError>>;

/// An event to spool.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub topic: Arc<str>,
    pub time_ms: i64,
    pub payload: Vec<u8>,
}

/// One call's events, queued for the writer thread, and where its answer goes.
pub(super) struct Append {
    pub(super) events: Vec<NewEvent>,
    pub(super) reply: Reply,
}

/// Appends taken into one group commit at most.
const APPENDS_PER_SYNC_MAX: usize = 256;

/// Scans every segment in `dir`, oldest first, and cuts the spool at the first torn or
/// corrupt record: the tail of the last segment after a crash mid-write, or damage, which is
/// logged with what is lost. `kept` sees every record that stays.
pub(super) fn recover(
    dir: &Path,
    kept: &mut dyn FnMut(&record::SpoolRecord),
) -> Result<VecDeque<Segment>, SpoolError> {
    let mut bases = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(SpoolError::io("list", dir))? {
        let entry = entry.map_err(SpoolError::io("list", dir))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        match name.strip_suffix(".spool").and_then(|stem| stem.parse::<u64>().ok()) {
            Some(base) => bases.push(base),
            None if name.ends_with(".spool") => {
                tracing::warn!(file = %name, "ignoring a spool file with a malformed name");
            }
            None => {}
        }
    }
    bases.sort_unstable();
    let mut segments = VecDeque::new();
    let mut cut = false;
    for base in bases {
        let path = segment_path(dir, base);
        if cut {
            tracing::error!(path = %path.display(), "deleting a spool segment after a corrupt one");
            std::fs::remove_file(&path).map_err(SpoolError::io("delete", &path))?;
            continue;
        }
        let file = File::open(&path).map_err(SpoolError::io("open", &path))?;
        let mut input = BufReader::new(file);
        let mut topics = Vec::new();
        let (mut end, mut bytes) = (base, 0u64);
        loop {
            match record::read(&mut input, &mut topics).map_err(SpoolError::io("read", &path))? {
                Next::Record(r) if r.seq == end => {
                    kept(&r);
                    end += 1;
                    bytes += r.size_bytes() as u64;
                }
                Next::Record(_) => {
                    tracing::error!(path = %path.display(), expected_seq = end, "spool record out of sequence: cutting here");
                    cut = true;
                    break;
                }
                Next::End => break,
                Next::Invalid(reason) => {
                    tracing::warn!(path = %path.display(), reason, valid_bytes = bytes, "cutting the spool at a torn or corrupt record");
                    cut = true;
                    break;
                }
            }
        }
        if cut {
            let file = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(SpoolError::io("open", &path))?;
            file.set_len(bytes).map_err(SpoolError::io("truncate", &path))?;
            file.sync_all().map_err(SpoolError::io("fsync", &path))?;
        }
        if segments.back().is_some_and(|s: &Segment| s.end != base) {
            return Err(SpoolError::Corrupt {
                path,
                reason: "a gap in sequence numbers between segments".into(),
            });
        }
        segments.push_back(Segment { base, end, bytes });
    }
    Ok(segments)
}

/// Creates (or empties) segment `base` and makes its name durable.
pub(super) fn create_segment(dir: &Path, base: u64) -> Result<File, SpoolError> {
    let path = segment_path(dir, base);
    let file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .map_err(SpoolError::io("create", &path))?;
    service::durable::sync_dir(dir).map_err(SpoolError::io("fsync directory", dir))?;
    Ok(file)
}

/// The thread's loop, until every sender is gone.
pub(super) fn run(shared: Arc<Shared>, mut queue: mpsc::Receiver<Append>, file: File, base: u64) {
    let mut writer = Writer {
        shared,
        unanswered: Vec::new(),
        file,
        base,
        file_len: 0,
        buf: Vec::with_capacity(1 << 20),
    };
    while let Some(first) = queue.blocking_recv() {
        let mut batch = vec![first];
        while batch.len() < APPENDS_PER_SYNC_MAX {
            match queue.try_recv() {
                Ok(append) => batch.push(append),
                Err(_) => break,
            }
        }
        writer.commit(batch);
    }
}

struct Writer {
    shared: Arc<Shared>,
    /// `(topic, header.time, events)` written since the last answer: counted as accepted
    /// when they are durable.
    unanswered: Vec<(Arc<str>, i64, i64)>,
    file: File,
    /// First seq of the segment being written.
    base: u64,
    /// Bytes of the segment written and synced.
    file_len: u64,
    buf: Vec<u8>,
}

/// Where the spool stood before the appends not yet written: what a write that finds the
/// filesystem full goes back to.
struct Mark {
    next_seq: u64,
    total_bytes: u64,
    segment_end: u64,
    segment_bytes: u64,
    file_len: u64,
}

impl Writer {
    /// Writes every admitted append of `batch` with one fsync, then answers each. A write
    /// that finds the filesystem full is taken back whole, its appends refused with
    /// [`SpoolError::DiskFull`], and the spool goes on; any other failure stops it.
    fn commit(&mut self, batch: Vec<Append>) {
        // (reply, first seq, events) of each append admitted and not yet answered.
        let mut admitted: Vec<(Reply, u64, u64)> = Vec::new();
        let mut mark = self.mark();
        let mut result = Ok(());
        for append in batch {
            if let Some(reason) = self.shared.lock().failed.clone() {
                let _ = append.reply.send(Err(SpoolError::Failed(reason)));
                continue;
            }
            let bytes: u64 = append
                .events
                .iter()
                .map(|e| record::encoded_size(&e.topic, &e.payload) as u64)
                .sum();
            let first = match self.admit(bytes, append.events.len() as u64) {
                Ok(first) => first,
                Err(e) => {
                    let _ = append.reply.send(Err(e));
                    continue;
                }
            };
            for (i, event) in append.events.iter().enumerate() {
                self.unanswered.push((Arc::clone(&event.topic), event.time_ms, 1));
                record::encode(
                    &mut self.buf,
                    first + i as u64,
                    event.time_ms,
                    &event.topic,
                    &event.payload,
                );
            }
            admitted.push((append.reply, first, append.events.len() as u64));
            if self
                .shared
                .lock()
                .segments
                .back()
                .is_some_and(|s| s.bytes >= self.shared.options.segment_bytes)
            {
                result = self.roll();
                if result.is_err() {
                    break;
                }
                // The old segment holds them, synced.
                self.answer(std::mem::take(&mut admitted));
                mark = self.mark();
            }
        }
        if result.is_ok() {
            result = self.write_and_sync();
        }
        match result {
            Ok(()) => self.answer(admitted),
            Err(e) if e.is_storage_full() && self.take_back(&mark).is_ok() => {
                tracing::warn!(error = %e, "the spool's filesystem is full: events refused");
                let path = self.shared.segment_path(self.base);
                for (reply, _, _) in admitted {
                    let _ = reply.send(Err(SpoolError::DiskFull { path: path.clone() }));
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "the spool cannot write: refusing events from now on");
                self.shared.lock().failed = Some(e.to_string());
                self.unanswered.clear();
                for (reply, _, _) in admitted {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }

    /// Counts the events written so far as accepted, then tells the readers and the callers
    /// of `admitted` that they are durable (counted first: no event is acknowledged, and so
    /// counted at the `agent` tier, before it is counted accepted).
    fn answer(&mut self, admitted: Vec<(Reply, u64, u64)>) {
        let next_seq = {
            let mut state = self.shared.lock();
            let window_ms = state.accepted.window_ms();
            // One update per (topic, window), not per event.
            let mut groups: Vec<(Arc<str>, i64, i64)> = Vec::new();
            for (topic, time_ms, events) in self.unanswered.drain(..) {
                let window = window_start(time_ms, window_ms);
                match groups.iter_mut().find(|(t, w, _)| *w == window && *t == topic) {
                    Some(group) => group.2 += events,
                    None => groups.push((topic, window, events)),
                }
            }
            for (topic, window, events) in groups {
                state.accepted.add(&topic, window, events);
            }
            let first = state.accepted_end;
            state.accepted_from(first, service::now_ms());
            state.accepted_end = state.next_seq;
            state.dirty = true;
            state.report_backlog(&self.shared.metrics);
            state.next_seq
        };
        self.shared.durable.send_replace(next_seq);
        for (reply, first, count) in admitted {
            self.shared.metrics.spooled.inc_by(count);
            let _ = reply.send(Ok(first));
        }
    }

    fn mark(&self) -> Mark {
        let state = self.shared.lock();
        let active = state.segments.back().expect("an active segment");
        Mark {
            next_seq: state.next_seq,
            total_bytes: state.total_bytes,
            segment_end: active.end,
            segment_bytes: active.bytes,
            file_len: self.file_len,
        }
    }

    /// Goes back to `mark`: the segment file cut to what was synced, the seqs and bytes
    /// admitted since given back. Nothing after the mark was answered or made durable.
    fn take_back(&mut self, mark: &Mark) -> Result<(), SpoolError> {
        self.buf.clear();
        self.unanswered.clear();
        let path = self.shared.segment_path(self.base);
        self.file.set_len(mark.file_len).map_err(SpoolError::io("truncate", &path))?;
        self.file.seek(SeekFrom::Start(mark.file_len)).map_err(SpoolError::io("seek", &path))?;
        self.file_len = mark.file_len;
        let mut state = self.shared.lock();
        state.next_seq = mark.next_seq;
        state.total_bytes = mark.total_bytes;
        let active = state.segments.back_mut().expect("an active segment");
        active.end = mark.segment_end;
        active.bytes = mark.segment_bytes;
        self.shared.metrics.spool_bytes.set(mark.total_bytes as i64);
        Ok(())
    }

    /// Reserves room and `count` seqs, dropping the oldest segments under `drop-oldest`.
    fn admit(&self, bytes: u64, count: u64) -> Result<u64, SpoolError> {
        let options = &self.shared.options;
        if bytes > options.max_bytes {
            return Err(SpoolError::TooLarge { bytes, max_bytes: options.max_bytes });
        }
        let mut state = self.shared.lock();
        let full =
            SpoolError::Full { max_bytes: options.max_bytes, retry_after_ms: RETRY_AFTER_MS };
        while state.total_bytes + bytes > options.max_bytes {
            if options.full == SpoolFull::Block || state.segments.len() < 2 {
                return Err(full);
            }
            self.drop_oldest(&mut state);
        }
        let first = state.next_seq;
        state.next_seq += count;
        state.total_bytes += bytes;
        let active = state.segments.back_mut().expect("an active segment");
        active.end += count;
        active.bytes += bytes;
        self.shared.metrics.spool_bytes.set(state.total_bytes as i64);
        Ok(first)
    }

    /// Deletes the oldest segment; its unacknowledged events are lost and counted.
    fn drop_oldest(&self, state: &mut State) {
        let segment = state.segments.pop_front().expect("at least two segments");
        let dropped = (segment.base.max(state.floor)..segment.end)
            .filter(|s| !state.acked_above.contains(s))
            .count() as u64;
        state.total_bytes -= segment.bytes;
        state.floor = state.floor.max(segment.end);
        let floor = state.floor;
        state.acked_above.retain(|&seq| seq >= floor);
        state.advance_floor();
        state.dirty = true;
        self.shared.metrics.dropped.inc_by(dropped);
        tracing::warn!(
            dropped,
            first_seq = segment.base,
            end_seq = segment.end,
            "spool full: dropped the oldest segment (events lost)"
        );
        let path = self.shared.segment_path(segment.base);
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::error!(path = %path.display(), error = %e, "cannot delete a dropped spool segment");
        }
    }

    fn write_and_sync(&mut self) -> Result<(), SpoolError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let path = self.shared.segment_path(self.base);
        self.file.write_all(&self.buf).map_err(SpoolError::io("write", &path))?;
        self.file.sync_data().map_err(SpoolError::io("fsync", &path))?;
        self.file_len += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Closes the active segment and starts the next.
    fn roll(&mut self) -> Result<(), SpoolError> {
        self.write_and_sync()?;
        let next = self.shared.lock().next_seq;
        self.file = create_segment(&self.shared.segments_dir, next)?;
        self.file_len = 0;
        self.base = next;
        self.shared.lock().segments.push_back(Segment { base: next, end: next, bytes: 0 });
        Ok(())
    }
}
