//! Reads the spool in seq order for the shipper, up to the durable end, from segment files.
//! Replay after a restart and shipping of fresh events are the same path.

use std::fs::File;
use std::io::BufReader;
use std::sync::Arc;

use super::error::SpoolError;
use super::record::{self, Next, SpoolRecord};
use super::state::Shared;

/// Attempts to open the segment of a seq while `drop-oldest` deletes segments under us.
const OPEN_ATTEMPTS_MAX: u32 = 3;

pub struct SpoolReader {
    shared: Arc<Shared>,
    /// The next seq to hand out.
    next_seq: u64,
    /// The open segment: its first seq and the file.
    file: Option<(u64, BufReader<File>)>,
    topics: Vec<Arc<str>>,
}

impl SpoolReader {
    pub(super) fn new(shared: Arc<Shared>, next_seq: u64) -> SpoolReader {
        SpoolReader { shared, next_seq, file: None, topics: Vec::new() }
    }

    /// The seq the next read starts at.
    pub fn position(&self) -> u64 {
        self.next_seq
    }

    /// Reads from `seq` next (after a failed shipment, from the oldest unacknowledged).
    pub fn seek(&mut self, seq: u64) {
        self.next_seq = seq;
        self.file = None;
    }

    /// Up to `max_records` durable records (and about `max_bytes`) from the position on; empty
    /// when the reader is at the durable end. Blocking: call from a blocking context.
    pub fn read_batch(
        &mut self,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<SpoolRecord>, SpoolError> {
        let durable = *self.shared.durable.borrow();
        let mut batch = Vec::new();
        let mut bytes = 0;
        let shared = Arc::clone(&self.shared);
        while batch.len() < max_records && bytes < max_bytes && self.next_seq < durable {
            let (base, input) = match &mut self.file {
                Some((base, input)) => (*base, input),
                None => {
                    self.open()?;
                    continue;
                }
            };
            // The path is only for errors: formatting it per record cost more than reading.
            let path = || shared.segment_path(base);
            let read = record::read(input, &mut self.topics);
            match read.map_err(|e| SpoolError::io("read", &path())(e))? {
                Next::Record(r) if r.seq < self.next_seq => {} // before a seek target
                Next::Record(r) if r.seq == self.next_seq => {
                    self.next_seq += 1;
                    bytes += r.size_bytes();
                    batch.push(r);
                }
                Next::Record(r) => {
                    let reason = format!("seq {} where {} was expected", r.seq, self.next_seq);
                    return Err(SpoolError::Corrupt { path: path(), reason });
                }
                Next::End => {
                    // This segment is finished: the next seq starts the next one.
                    self.file = None;
                    self.open()?;
                    if self.file.as_ref().is_some_and(|(b, _)| *b == base) {
                        let reason = format!("ends before the durable seq {}", self.next_seq);
                        return Err(SpoolError::Corrupt { path: path(), reason });
                    }
                }
                Next::Invalid(reason) => {
                    return Err(SpoolError::Corrupt { path: path(), reason: reason.into() });
                }
            }
        }
        Ok(batch)
    }

    /// Opens the segment holding `next_seq`, skipping ahead if it was dropped.
    fn open(&mut self) -> Result<(), SpoolError> {
        let mut attempt = 0;
        loop {
            let base = {
                let state = self.shared.lock();
                self.next_seq = self.next_seq.max(state.segments.front().map_or(0, |s| s.base));
                state
                    .segments
                    .iter()
                    .rev()
                    .find(|s| s.base <= self.next_seq)
                    .map(|s| s.base)
                    .expect("the spool always has a segment at or below the next seq")
            };
            let path = self.shared.segment_path(base);
            match File::open(&path) {
                Ok(file) => {
                    self.file = Some((base, BufReader::with_capacity(256 << 10, file)));
                    return Ok(());
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::NotFound && attempt < OPEN_ATTEMPTS_MAX =>
                {
                    attempt += 1;
                }
                Err(e) => return Err(SpoolError::io("open", &path)(e)),
            }
        }
    }
}
