//! The log start that DeleteRecords moves (Kafka's log start offset): records before it are
//! gone to every reader, though the part of the first segment that held them stays on disk
//! until retention deletes the segment. Segments wholly before it are deleted at once. The
//! start is kept in the partition's `log-start` file (`BYTE RECORD`), written durably before
//! it counts; every replica applies the start its cluster's registry names, so a new leader has
//! it too (docs/design.md, "Log start").

use std::fs;
use std::path::Path;

use super::{LogStart, Partition, State, lock};
use crate::log::error::{LogError, io_error};

/// The file that keeps a log start DeleteRecords moved.
pub(super) const LOG_START_FILE: &str = "log-start";

impl Partition {
    /// Asks that the log start at record `record` (a later ask wins; none moves it back). It
    /// moves there as soon as the log holds that record: [`Partition::advance_start`].
    pub fn want_start(&self, record: u64) {
        let mut state = self.state();
        state.start_wanted = state.start_wanted.max(record);
    }

    /// Moves the log start to the record [`Partition::want_start`] asked for, or as near it as
    /// the log reaches (a follower that has not copied that far yet), deleting the segments
    /// wholly before it. Returns the log's start record now. Blocking.
    pub fn advance_start(&self) -> Result<u64, LogError> {
        let (target, start) = {
            let state = self.state();
            (state.start_wanted.min(state.active_index().end_record()), state.start_record())
        };
        if target <= start {
            return Ok(start);
        }
        // The message holding the record; the log's end when every record goes.
        let byte = match self.locate_record(target)? {
            Some((byte, _)) => byte,
            None => self.end(),
        };
        let doomed = {
            let _flushing = lock(&self.flushing);
            let mut state = self.state();
            if byte < state.start_byte() || byte > state.end {
                // Truncated or moved meanwhile: the next call starts again.
                return Ok(state.start_record());
            }
            let start = LogStart { byte, record: target };
            write_start(&self.dir, start)?;
            state.log_start = Some(start);
            let mut count = 0;
            while count + 1 < state.segments.len() && state.segment_end(count) <= byte {
                count += 1;
            }
            if count + 1 == state.segments.len()
                && byte == state.end
                && byte > state.active().base_offset
            {
                // Every record goes: a new, empty segment keeps the log's end.
                self.roll(&mut state)?;
                count += 1;
            }
            self.drop_head_segments(&mut state, count)
        };
        for segment in &doomed {
            fs::remove_file(&segment.path).map_err(io_error("deleting", &segment.path))?;
        }
        if !doomed.is_empty() {
            self.flush()?;
        }
        let start = self.start_offset();
        lock(&self.epochs).truncate_from_start(start)?;
        tracing::info!(topic = %self.topic, partition = self.index, start_record = target, start_byte = byte, deleted_segments = doomed.len(), "records deleted before the new log start");
        Ok(target)
    }
}

impl State {
    /// The first byte readers may ask for.
    pub(super) fn start_byte(&self) -> u64 {
        let base = self.segments[0].base_offset;
        self.log_start.map_or(base, |start| start.byte.max(base))
    }

    /// The number of the first record readers may ask for.
    pub(super) fn start_record(&self) -> u64 {
        let first = self.indexes[0].first_record();
        self.log_start.map_or(first, |start| start.record.max(first))
    }

    /// Forgets a log start the log no longer reaches (truncated below it) or that its first
    /// segment has passed (retention deleted the segment it was in).
    pub(super) fn settle_start(&mut self) {
        let (base, first) = (self.segments[0].base_offset, self.indexes[0].first_record());
        if self.log_start.is_some_and(|s| s.byte > self.end || s.byte < base || s.record <= first) {
            self.log_start = None;
        }
    }
}

/// Writes `start` to the partition's `log-start` file, durably: a crash leaves the old file
/// or the new one whole.
fn write_start(dir: &Path, start: LogStart) -> Result<(), LogError> {
    let path = dir.join(LOG_START_FILE);
    let text = format!("{} {}\n", start.byte, start.record);
    service::durable::write(&path, text.as_bytes()).map_err(io_error("writing", &path))
}

/// The log start kept in `dir`, if one is and it reads whole; one that does not is reported
/// and ignored (the registry names it again).
pub(super) fn read_start(dir: &Path) -> Option<LogStart> {
    let path = dir.join(LOG_START_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the log start; ignoring it");
            return None;
        }
    };
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    match (fields.next(), fields.next(), fields.next()) {
        (Some(Ok(byte)), Some(Ok(record)), None) => Some(LogStart { byte, record }),
        _ => {
            tracing::warn!(path = %path.display(), "the log start file is not `BYTE RECORD`; ignoring it");
            None
        }
    }
}
