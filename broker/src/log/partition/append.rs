//! Appends: whole MessageSets written to the last segment with one `pwritev`, a new segment
//! rolled by the settings (a leader) or where the leader rolled (a follower), and magic-2
//! batches numbered.

use std::fs;
use std::io::{self, IoSlice};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Appended, Partition, RECENT_ENDS_MAX, Roll, State};
use crate::config::{TimestampType, VisibleAfter};
use crate::log::error::{LogError, io_error};
use crate::log::index::{SegmentIndex, SetRecords};
use crate::log::segment::Segment;

impl Partition {
    /// Appends MessageSets the caller has validated whole and counted (`counted`, one per
    /// set: [`index::count_records`]), one after another, with one `pwritev` to the page cache
    /// at the log end. A failed write is cut off again so that the log never holds part of a
    /// set. Returns where the first set landed; each next set follows the one before. A
    /// magic-2 message gets its batch's base offset set to the number of its first record
    /// (docs/design.md, "Magic 2: Kafka RecordBatch": the batch's CRC-32C does not cover it;
    /// the message's CRC is written again).
    pub fn append(&self, sets: &[&[u8]], counted: &[SetRecords]) -> Result<Appended, LogError> {
        self.append_rolling(sets, counted, Roll::BySettings)
    }

    pub(super) fn append_rolling(
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
        // A leader numbers the batches of magic-2 messages (and stamps them with its clock
        // under LogAppendTime); a follower copies them as they are.
        let append_time = match (roll, state.config.timestamp_type) {
            (Roll::BySettings, TimestampType::LogAppendTime) => Some(service::now_ms()),
            _ => None,
        };
        let numbered: Vec<Option<Vec<u8>>> = match roll {
            Roll::BySettings => number_batches(sets, counted, first_record, append_time),
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
            for (i, message) in counts.messages.iter().enumerate() {
                let start = u64::from(message.position);
                let next =
                    counts.messages.get(i + 1).map_or(set.len() as u64, |m| m.position.into());
                let time = match append_time {
                    Some(appended) if message.batch => appended,
                    _ => message.time,
                };
                index.append_message(at + start, message.records, next - start, time);
            }
            at += set.len() as u64;
        }
        let ended = index.end();
        state.note_producers(&written, counted, offset, first_record);
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
        Ok(Appended { offset, end: state.end, first_record, append_time })
    }

    /// Starts a new segment at the log end. The old one is fsynced by the next flush.
    pub(super) fn roll(&self, state: &mut State) -> Result<(), LogError> {
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
        self.write_snapshot(state);
        Ok(())
    }
}

/// Most buffers one `pwritev` takes (Linux's `IOV_MAX`).
pub const SETS_PER_WRITE_MAX: usize = 1024;

/// Writes every buffer of `sets`, in order, at `position`, however many calls that takes.
pub(super) fn write_all_vectored_at(
    file: &fs::File,
    sets: &[&[u8]],
    mut position: u64,
) -> io::Result<()> {
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
/// of its first record (records of the sets before numbered from `first_record`), its
/// timestamps made `append_time` if given (LogAppendTime), and the message's CRC written
/// again; `None` for a set without one, which is written as it came.
fn number_batches(
    sets: &[&[u8]],
    counted: &[SetRecords],
    first_record: u64,
    append_time: Option<i64>,
) -> Vec<Option<Vec<u8>>> {
    let mut record = first_record;
    sets.iter()
        .zip(counted)
        .map(|(set, counts)| {
            let mut copy: Option<Vec<u8>> = None;
            for (i, message) in counts.messages.iter().enumerate() {
                if message.batch {
                    let copy = copy.get_or_insert_with(|| set.to_vec());
                    let start = message.position as usize;
                    let end = counts.messages.get(i + 1).map_or(set.len(), |m| m.position as usize);
                    let message = &mut copy[start..end];
                    // length, CRC, magic: then the batch.
                    let batch_at = protocol::PLAIN_MESSAGE_OVERHEAD_BYTES;
                    let batch = &mut message[batch_at..];
                    let base_offset = i64::try_from(record).unwrap_or(i64::MAX);
                    protocol::record_batch::set_base_offset(batch, base_offset);
                    if let Some(time) = append_time {
                        protocol::record_batch::set_log_append_time(batch, time);
                    }
                    protocol::restamp_crc(message);
                }
                record += message.records;
            }
            copy
        })
        .collect()
}
