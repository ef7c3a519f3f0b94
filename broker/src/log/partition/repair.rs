//! Bit rot in sealed segments: found by the scrubber's scan, mended with bytes copied from
//! another replica.

use std::sync::Arc;

use super::append::write_all_vectored_at;
use super::{Damage, Partition};
use crate::log::error::{LogError, io_error};
use crate::log::segment::scan_valid_prefix;

impl Partition {
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
        // Whole messages as a log holds them: a compacted topic's gaps too.
        if crate::log::index::count_records(bytes, length_max).is_err() {
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
}
