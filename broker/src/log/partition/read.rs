//! Reads: where a fetch's bytes are, record numbers from byte offsets and back, and offsets
//! by time.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use super::{FileSlice, Partition, State};
use crate::log::error::{LogError, io_error};
use crate::log::index;

impl Partition {
    // Record numbers (docs/design.md, "Record numbers").

    /// The number the next record appended gets: the log's end in records.
    pub fn end_record(&self) -> u64 {
        self.state().active_index().end_record()
    }

    /// The number of the log's first record.
    pub fn start_record(&self) -> u64 {
        self.state().start_record()
    }

    /// The number of the record at byte `offset` (a message boundary, or the log's end).
    /// Blocking: may read the messages between an index entry and `offset`.
    pub fn record_at_offset(&self, offset: i64) -> Result<u64, LogError> {
        let (segment, from, position, max) = {
            let state = self.state();
            let position = self.within(&state, offset, state.end)?;
            if position == state.end {
                return Ok(state.active_index().end_record());
            }
            if let Some(recent) = state.recent_ends.iter().rev().find(|e| e.byte == position) {
                return Ok(recent.record);
            }
            let i = state.segments.partition_point(|s| s.base_offset <= position) - 1;
            let from = state.indexes[i].floor_byte(position);
            (Arc::clone(&state.segments[i]), from, position, state.config.max_message_bytes)
        };
        index::entry_at_offset(&segment.file, segment.base_offset, from, position, max)
            .map(|entry| entry.record)
            .map_err(io_error("indexing", &segment.path))
    }

    /// The message holding record `record`: its byte offset and the number of its first
    /// record; `None` when `record` is not in the log (before its start or at its end or past).
    /// Blocking: reads the messages between an index entry and it.
    pub fn locate_record(&self, record: u64) -> Result<Option<(u64, u64)>, LogError> {
        let (segment, end, from, max) = {
            let state = self.state();
            if record < state.start_record() || record >= state.active_index().end_record() {
                return Ok(None);
            }
            let i = state.indexes.partition_point(|index| index.first_record() <= record) - 1;
            let segment = Arc::clone(&state.segments[i]);
            let from = state.indexes[i].floor_record(record);
            (segment, state.segment_end(i), from, state.config.max_message_bytes)
        };
        index::locate(&segment.file, segment.base_offset, end, from, record, max)
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
    pub(super) fn within(&self, state: &State, offset: i64, end: u64) -> Result<u64, LogError> {
        let start = state.start_byte();
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

    /// The first visible record whose timestamp is `time_ms` (ms since the epoch) or later,
    /// and that timestamp: Kafka's ListOffsets by time. Records carry timestamps in magic-2
    /// batches; the index's times lead to the segment and the place in it where the search
    /// begins. A segment without any (Tributary's own messages only) counts as written at its
    /// file's modification time and answers its first record, with timestamp −1. `None` when
    /// no record is that recent. Blocking: reads messages from an index entry on.
    pub fn find_time(&self, time_ms: i64) -> Result<Option<(u64, i64)>, LogError> {
        let visible_end = self.visible_end();
        let (searches, max, start) = {
            let state = self.state();
            let searches: Vec<_> = (0..state.segments.len())
                .filter(|&i| state.segments[i].base_offset < visible_end)
                .map(|i| {
                    let index = &state.indexes[i];
                    let end = state.segment_end(i).min(visible_end);
                    let search =
                        (index.end().time, index.first_record(), index.floor_time(time_ms));
                    (Arc::clone(&state.segments[i]), end, search)
                })
                .collect();
            (searches, state.config.max_message_bytes, state.start_record())
        };
        for (segment, end, (latest, first, from)) in searches {
            if latest == index::NO_TIME {
                let modified = segment.modified().map_err(io_error("reading", &segment.path))?;
                let modified_ms =
                    modified.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
                if modified_ms >= time_ms {
                    return Ok(Some((first.max(start), index::NO_TIME)));
                }
                continue;
            }
            if latest < time_ms {
                continue;
            }
            let found =
                index::find_time(&segment.file, segment.base_offset, end, from, time_ms, max)
                    .map_err(io_error("indexing", &segment.path))?;
            // Records DeleteRecords removed are not answered: the search ends at the start.
            if let Some((record, time)) = found {
                return Ok(Some((record.max(start), time)));
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
