//! A partition's idempotent producers ([`crate::log::producers`]): checked against before a
//! leader appends a batch of one, kept up to date by every append of every replica, cut back
//! with the log, and learned once from the log before the replica opened it.

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::{Partition, State};
use crate::log::error::{LogError, io_error};
use crate::log::index::SetRecords;
use crate::log::producers::{
    BatchProducer, Check, Placed, Producers, STATE_TAIL_BYTES, log_append_time_of_message,
    producer_of_message,
};

impl Partition {
    /// What to do with a batch of `producer`, as far as what this replica has seen says;
    /// `None` until what lies before it opened the log is read in
    /// ([`Partition::learn_producers`]).
    pub fn check_producer(&self, producer: BatchProducer) -> Option<Check> {
        let state = self.state();
        state.producers.missing_before().is_none().then(|| state.producers.check(producer))
    }

    /// Reads the idempotent producers' batches in the last [`STATE_TAIL_BYTES`] of the log
    /// before this replica began to see appends, once. Blocking: reads that much.
    pub fn learn_producers(&self) -> Result<(), LogError> {
        let (to, reads) = {
            let state = self.state();
            let Some(to) = state.producers.missing_before() else { return Ok(()) };
            (to, tail_reads(&state, to))
        };
        let mut batches = Vec::new();
        for (segment, begin, end) in reads {
            let mut bytes = vec![0u8; (end - begin) as usize];
            segment
                .file
                .read_exact_at(&mut bytes, begin - segment.base_offset)
                .map_err(io_error("reading", &segment.path))?;
            for message in protocol::MessageSetIter::new(&bytes, begin as i64) {
                let Ok((offset, message)) = message else { break };
                let offset = offset as u64;
                let at = (offset - begin) as usize;
                // A magic-2 message: length, CRC and magic before its batch.
                let end = offset + 9 + message.payload.len() as u64;
                if message.magic != protocol::MAGIC_BATCH {
                    continue;
                }
                let Some(producer) = producer_of_message(&bytes[at..(end - begin) as usize]) else {
                    continue;
                };
                // The leader numbered the batch: its base offset is its first record's number.
                let base_offset = protocol::i64_at(message.payload, 0).unwrap_or(0);
                let first_record = u64::try_from(base_offset).unwrap_or(0);
                let log_append_time =
                    log_append_time_of_message(&bytes[at..(end - begin) as usize]);
                batches.push((producer, Placed { first_record, offset, end, log_append_time }));
            }
        }
        self.state().producers.learned(to, batches);
        Ok(())
    }
}

/// The pieces of the log to read for the last [`STATE_TAIL_BYTES`] before `to`: `(segment,
/// from, to)`, from an index entry at or before that point, never before the log start.
fn tail_reads(state: &State, to: u64) -> Vec<(Arc<crate::log::Segment>, u64, u64)> {
    let from = to.saturating_sub(STATE_TAIL_BYTES).max(state.start_byte());
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
                if message.batch
                    && let Some(producer) = producer_of_message(&set[start..next])
                {
                    let placed = Placed {
                        first_record: record,
                        offset: at + start as u64,
                        end: at + next as u64,
                        log_append_time: log_append_time_of_message(&set[start..next]),
                    };
                    self.producers.record(producer, placed);
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
