//! A partition's idempotent producers ([`crate::log::producers`]): checked against before a
//! leader appends a batch of one, kept up to date by every append of every replica, cut back
//! with the log, snapshotted at each roll and at shutdown, and learned once from the newest
//! snapshot and the log after it (or the log's tail) before the replica opened it.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::{Partition, State};
use crate::log::error::{LogError, io_error};
use crate::log::index::SetRecords;
use crate::log::producers::{
    self, BatchProducer, Check, History, Placed, Producers, SNAPSHOT_SUFFIX, STATE_TAIL_BYTES,
    log_append_time_of_message,
};

impl Partition {
    /// What to do with a batch of `producer`, as far as what this replica has seen says;
    /// `None` until what lies before it opened the log is read in
    /// ([`Partition::learn_producers`]).
    pub fn check_producer(&self, producer: BatchProducer) -> Option<Check> {
        let state = self.state();
        state.producers.missing_before().is_none().then(|| state.producers.check(producer))
    }

    /// How far `writer` has copied into this partition (`Some(None)`: nothing yet); `None`
    /// until what lies before the replica opened the log is read in.
    pub fn copied(&self, writer: &str) -> Option<Option<producers::Copied>> {
        let state = self.state();
        state.producers.missing_before().is_none().then(|| state.producers.copied(writer))
    }

    /// Learns the idempotent producers' batches in the log before this replica began to see
    /// appends, once: from the newest snapshot taken at or before that point (and in the log)
    /// and the batches after it, or without one from the last [`STATE_TAIL_BYTES`]. Blocking:
    /// reads the snapshot and the log after it (at most a segment), or that tail.
    pub fn learn_producers(&self) -> Result<(), LogError> {
        let (to, start) = {
            let state = self.state();
            let Some(to) = state.producers.missing_before() else { return Ok(()) };
            (to, state.start_byte())
        };
        let snapshot = snapshots(&self.dir)
            .into_iter()
            .rev()
            .filter(|&at| at >= start && at <= to)
            .find_map(|at| {
                let path = self.dir.join(snapshot_name(at));
                let text = fs::read_to_string(&path).ok()?;
                let decoded = producers::decode_snapshot(&text);
                if decoded.is_none() {
                    tracing::warn!(snapshot = %path.display(), "a producer snapshot that does not parse; reading the log instead");
                }
                decoded.map(|batches| (at, batches))
            });
        let (from, history) = match snapshot {
            Some((at, history)) => (at, history),
            None => (to.saturating_sub(STATE_TAIL_BYTES), History::default()),
        };
        let mut earlier = Producers::from_history(history);
        let reads = tail_reads(&self.state(), from, to);
        for (segment, begin, end) in reads {
            let mut bytes = vec![0u8; (end - begin) as usize];
            segment
                .file
                .read_exact_at(&mut bytes, begin - segment.base_offset)
                .map_err(io_error("reading", &segment.path))?;
            for message in protocol::MessageSetIter::new(&bytes, begin as i64) {
                let Ok((offset, message)) = message else { break };
                let offset = offset as u64;
                if offset < from || message.magic != protocol::MAGIC_BATCH {
                    continue; // in the snapshot already, or no batch
                }
                let at = (offset - begin) as usize;
                // A magic-2 message: length, CRC and magic before its batch.
                let end = offset + 9 + message.payload.len() as u64;
                let bytes = &bytes[at..(end - begin) as usize];
                // The leader numbered the batch: its base offset is its first record's number.
                let base_offset = protocol::i64_at(message.payload, 0).unwrap_or(0);
                let first_record = u64::try_from(base_offset).unwrap_or(0);
                let log_append_time = log_append_time_of_message(bytes);
                earlier.note_message(bytes, Placed { first_record, offset, end, log_append_time });
            }
        }
        self.state().producers.learned(to, earlier);
        Ok(())
    }
}

/// The pieces of the log to read for its batches from `from` to `to`: `(segment, from, to)`,
/// from an index entry at or before `from`, never before the log start.
fn tail_reads(state: &State, from: u64, to: u64) -> Vec<(Arc<crate::log::Segment>, u64, u64)> {
    let from = from.max(state.start_byte());
    if from >= to {
        return Vec::new();
    }
    let first = state.segments.partition_point(|s| s.base_offset <= from) - 1;
    (first..state.segments.len())
        .map(|i| {
            let segment = Arc::clone(&state.segments[i]);
            let begin = match i == first {
                true => state.indexes[i].floor_byte(from).byte.max(segment.base_offset),
                false => segment.base_offset,
            };
            (segment, begin, state.segment_end(i).min(to))
        })
        .filter(|(_, begin, end)| begin < end)
        .collect()
}

/// `{at:020}.producers`.
pub(super) fn snapshot_name(at: u64) -> String {
    format!("{at:020}{SNAPSHOT_SUFFIX}")
}

/// The log ends of the producer snapshots in `dir`, oldest first.
fn snapshots(dir: &Path) -> Vec<u64> {
    let mut found: Vec<u64> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| producers::parse_snapshot_name(e.ok()?.file_name().to_str()?))
                .collect()
        })
        .unwrap_or_default();
    found.sort_unstable();
    found
}

impl Partition {
    /// Writes a snapshot of the producers at the log's end (see [`Partition::write_snapshot`]):
    /// at shutdown, so that the next start reads no log for them.
    pub fn snapshot_producers(&self) {
        let state = self.state();
        self.write_snapshot(&state);
    }

    /// Whether a producer snapshot is beside the log: it had idempotent producers at a roll or
    /// at a shutdown.
    pub fn has_producer_snapshot(&self) -> bool {
        !snapshots(&self.dir).is_empty()
    }

    /// Deletes the producer snapshots `doomed` picks by the log end they were taken at (those
    /// past a truncation, or before the first segment retention left). A snapshot that stays
    /// past its use costs a little disk; one that cannot be deleted is logged.
    pub(super) fn delete_snapshots(&self, doomed: impl Fn(u64) -> bool) {
        for at in snapshots(&self.dir).into_iter().filter(|&at| doomed(at)) {
            let path = self.dir.join(snapshot_name(at));
            if let Err(e) = fs::remove_file(&path) {
                tracing::warn!(snapshot = %path.display(), error = %e, "cannot delete a producer snapshot");
            }
        }
    }

    /// Writes what this replica knows of its producers at the log's end, if it knows all of
    /// it, as `{end:020}.producers` (written beside and renamed; not fsynced: a snapshot lost
    /// to a crash is read from the log again). At a roll and at shutdown.
    pub(super) fn write_snapshot(&self, state: &State) {
        let Some(history) = state.producers.history(state.start_record()) else { return };
        if history.batches.is_empty()
            && history.aborted.is_empty()
            && snapshots(&self.dir).is_empty()
        {
            return; // never an idempotent producer here: nothing to snapshot
        }
        let path = self.dir.join(snapshot_name(state.end));
        let staged = path.with_extension("producers.new");
        let written = fs::write(&staged, producers::encode_snapshot(&history))
            .and_then(|()| fs::rename(&staged, &path));
        if let Err(e) = written {
            tracing::warn!(snapshot = %path.display(), error = %e, "cannot write a producer snapshot");
        }
    }
}

impl State {
    /// Notes the idempotent producers' batches of sets just appended at `offset`, their first
    /// record numbered `first_record` (each set's messages with `counted`).
    pub(super) fn note_producers(
        &mut self,
        sets: &[&[u8]],
        counted: &[SetRecords],
        offset: u64,
        first_record: u64,
    ) {
        let (mut at, mut record) = (offset, first_record);
        for (set, counts) in sets.iter().zip(counted) {
            for (i, message) in counts.messages.iter().enumerate() {
                let start = message.position as usize;
                let next = counts.messages.get(i + 1).map_or(set.len(), |m| m.position as usize);
                if message.batch {
                    let message = &set[start..next];
                    let placed = Placed {
                        first_record: record,
                        offset: at + start as u64,
                        end: at + next as u64,
                        log_append_time: log_append_time_of_message(message),
                    };
                    self.producers.note_message(message, placed);
                }
                record += message.records;
            }
            at += set.len() as u64;
        }
    }

    /// Forgets what the replica saw of its producers: its log was cut back to, or started
    /// again at, `end`.
    pub(super) fn reset_producers(&mut self, end: u64) {
        self.producers = Producers::from(end);
    }
}

impl Partition {
    /// Where the last stable offset is: the first batch of the earliest open transaction
    /// (`None`: none is open, and it is the high watermark). Blocking: learns the producers
    /// first if this replica has not yet ([`Partition::learn_producers`]).
    pub fn first_open_transaction(&self) -> Result<Option<Placed>, LogError> {
        if let Some(first) = self.state().producers.first_open() {
            return Ok(first);
        }
        self.learn_producers()?;
        // The log may have been cut back meanwhile; then nothing is known to be open.
        Ok(self.state().producers.first_open().flatten())
    }

    /// The aborted transactions with records from record `from` up to (not including) `to`.
    pub fn aborted_transactions(&self, from: u64, to: u64) -> Vec<producers::Aborted> {
        self.state().producers.aborted_between(from, to)
    }

    /// The aborted transactions with records from byte `from` up to (not including) `to`.
    pub fn aborted_in_bytes(&self, from: u64, to: u64) -> Vec<producers::Aborted> {
        self.state().producers.aborted_in_bytes(from, to)
    }
}
