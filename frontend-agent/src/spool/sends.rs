//! The send journal, `{dir}/sends`: which events each chunk the shipper sent holds and the
//! identity it went with — producer id, epoch, partition, first sequence number. A chunk is
//! written here (and fsynced) before it is handed to the producer, so after a crash, or after a
//! batch failed, the same events go again as the same batch, which a leader that has them
//! answers instead of appending them twice.
//!
//! Frames `u32 length | u32 crc | payload` (CRC-32 of the payload), the payload
//! `i64 producer_id | i16 epoch | i32 partition | i32 base_sequence | u16 topic_len | topic |
//! u32 runs | (u64 first_seq, u32 count) × runs`. A chunk is known by its first seq; a later
//! frame for the same first seq (the chunk sent again under a new identity) replaces the
//! earlier. A torn or damaged tail is cut off on open. The file is rewritten with only the
//! chunks not yet acknowledged when it has grown well past them.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Buf, BufMut};

use super::error::SpoolError;

const FILE: &str = "sends";
/// The file is rewritten when it is this much larger than its live chunks, and over
/// [`REWRITE_MIN_BYTES`].
const REWRITE_FACTOR: u64 = 4;
const REWRITE_MIN_BYTES: u64 = 1 << 20;

/// One chunk as sent: its events (spool seqs, in order) and the batch identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentChunk {
    pub topic: Arc<str>,
    pub partition: i32,
    pub producer_id: i64,
    pub epoch: i16,
    pub base_sequence: i32,
    pub seqs: Vec<u64>,
}

impl SentChunk {
    /// What the chunk is known by.
    pub fn first_seq(&self) -> u64 {
        self.seqs[0]
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let mut payload = Vec::with_capacity(32 + self.topic.len() + self.seqs.len());
        payload.put_i64(self.producer_id);
        payload.put_i16(self.epoch);
        payload.put_i32(self.partition);
        payload.put_i32(self.base_sequence);
        payload.put_u16(self.topic.len() as u16);
        payload.put_slice(self.topic.as_bytes());
        let runs = runs(&self.seqs);
        payload.put_u32(runs.len() as u32);
        for (first, count) in runs {
            payload.put_u64(first);
            payload.put_u32(count);
        }
        out.put_u32(payload.len() as u32);
        out.put_u32(crc32fast::hash(&payload));
        out.extend_from_slice(&payload);
    }

    fn decode(mut payload: &[u8]) -> Option<SentChunk> {
        if payload.remaining() < 20 {
            return None;
        }
        let producer_id = payload.get_i64();
        let epoch = payload.get_i16();
        let partition = payload.get_i32();
        let base_sequence = payload.get_i32();
        let topic_len = usize::from(payload.get_u16());
        if payload.remaining() < topic_len + 4 {
            return None;
        }
        let topic: Arc<str> = std::str::from_utf8(&payload[..topic_len]).ok()?.into();
        payload.advance(topic_len);
        let run_count = payload.get_u32() as usize;
        if payload.remaining() != run_count * 12 {
            return None;
        }
        let mut seqs = Vec::new();
        for _ in 0..run_count {
            let first = payload.get_u64();
            let count = u64::from(payload.get_u32());
            seqs.extend(first..first.checked_add(count)?);
        }
        (!seqs.is_empty()).then_some(SentChunk {
            topic,
            partition,
            producer_id,
            epoch,
            base_sequence,
            seqs,
        })
    }
}

/// Increasing seqs as runs of consecutive ones, `(first, count)`.
fn runs(seqs: &[u64]) -> Vec<(u64, u32)> {
    let mut runs: Vec<(u64, u32)> = Vec::new();
    for &seq in seqs {
        match runs.last_mut() {
            Some((first, count)) if *first + u64::from(*count) == seq && *count < u32::MAX => {
                *count += 1
            }
            _ => runs.push((seq, 1)),
        }
    }
    runs
}

/// The open journal and the chunks in it that may still be unacknowledged.
pub(super) struct Sends {
    path: PathBuf,
    file: File,
    file_bytes: u64,
    /// By first seq.
    live: BTreeMap<u64, SentChunk>,
}

impl Sends {
    /// Opens (or creates) the journal in `dir`, with every chunk it holds.
    pub(super) fn open(dir: &Path) -> Result<Sends, SpoolError> {
        let path = dir.join(FILE);
        let mut bytes = Vec::new();
        match File::open(&path) {
            Ok(mut file) => {
                file.read_to_end(&mut bytes).map_err(SpoolError::io("read", &path))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(SpoolError::io("open", &path)(e)),
        }
        let mut live = BTreeMap::new();
        let mut at = 0;
        while let Some(frame) = bytes.get(at..at + 8) {
            let length = u32::from_be_bytes(frame[..4].try_into().expect("4 bytes")) as usize;
            let crc = u32::from_be_bytes(frame[4..].try_into().expect("4 bytes"));
            let Some(payload) = bytes.get(at + 8..at + 8 + length) else { break };
            if crc32fast::hash(payload) != crc {
                break;
            }
            let Some(chunk) = SentChunk::decode(payload) else { break };
            live.insert(chunk.first_seq(), chunk);
            at += 8 + length;
        }
        if at < bytes.len() {
            tracing::warn!(
                path = %path.display(), kept = at, cut = bytes.len() - at,
                "the send journal's tail is torn or damaged: cut off"
            );
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(SpoolError::io("open", &path))?;
        file.set_len(at as u64).map_err(SpoolError::io("truncate", &path))?;
        Ok(Sends { path, file, file_bytes: at as u64, live })
    }

    /// Every chunk the journal holds (what [`Sends::forget`] left), by first seq.
    pub(super) fn chunks(&self) -> impl Iterator<Item = &SentChunk> {
        self.live.values()
    }

    /// Writes `chunks` durably (fsynced) before they are sent.
    pub(super) fn record(&mut self, chunks: &[SentChunk]) -> Result<(), SpoolError> {
        let mut out = Vec::new();
        for chunk in chunks {
            chunk.encode(&mut out);
        }
        self.file.write_all(&out).map_err(SpoolError::io("write", &self.path))?;
        self.file.sync_data().map_err(SpoolError::io("sync", &self.path))?;
        self.file_bytes += out.len() as u64;
        for chunk in chunks {
            self.live.insert(chunk.first_seq(), chunk.clone());
        }
        Ok(())
    }

    /// Forgets the chunks `done` says are acknowledged (durably), and rewrites the file once
    /// it is mostly such chunks.
    pub(super) fn forget(&mut self, done: impl Fn(u64) -> bool) -> Result<(), SpoolError> {
        self.live.retain(|&first, _| !done(first));
        let mut kept = Vec::new();
        for chunk in self.live.values() {
            chunk.encode(&mut kept);
        }
        let kept_bytes = kept.len() as u64;
        if self.file_bytes <= REWRITE_MIN_BYTES.max(kept_bytes * REWRITE_FACTOR) {
            return Ok(());
        }
        service::durable::write(&self.path, &kept).map_err(SpoolError::io("write", &self.path))?;
        self.file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(SpoolError::io("open", &self.path))?;
        self.file_bytes = kept_bytes;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(first: u64, seqs: &[u64], partition: i32) -> SentChunk {
        let mut all = vec![first];
        all.extend_from_slice(seqs);
        SentChunk {
            topic: "page-view".into(),
            partition,
            producer_id: 7 << 44,
            epoch: 0,
            base_sequence: 1000,
            seqs: all,
        }
    }

    #[test]
    fn chunks_survive_a_reopen_a_later_record_replaces_an_earlier_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut sends = Sends::open(dir.path()).unwrap();
        let (a, b) = (chunk(3, &[4, 5, 9, 10, 12], 0), chunk(6, &[7, 8], 1));
        sends.record(&[a.clone(), b.clone()]).unwrap();
        let mut moved = b.clone();
        moved.partition = 2;
        moved.producer_id += 1;
        sends.record(std::slice::from_ref(&moved)).unwrap();
        drop(sends);
        // Half a frame, as a crash mid-write leaves it.
        let path = dir.path().join(FILE);
        let mut torn = Vec::new();
        chunk(20, &[21], 0).encode(&mut torn);
        let whole = std::fs::metadata(&path).unwrap().len();
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&torn[..torn.len() - 3]).unwrap();
        drop(file);
        let mut sends = Sends::open(dir.path()).unwrap();
        assert_eq!(sends.chunks().cloned().collect::<Vec<_>>(), vec![a.clone(), moved]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole, "the torn frame is cut off");
        let c = chunk(30, &[31], 0);
        sends.record(std::slice::from_ref(&c)).unwrap();
        let reopened = Sends::open(dir.path()).unwrap();
        assert_eq!(reopened.chunks().count(), 3, "appends after the cut read back");
    }

    #[test]
    fn forgotten_chunks_are_rewritten_away_once_the_file_is_mostly_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut sends = Sends::open(dir.path()).unwrap();
        let many: Vec<SentChunk> =
            (0..20_000u64).map(|i| chunk(i * 100, &[i * 100 + 2], (i % 6) as i32)).collect();
        sends.record(&many).unwrap();
        let path = dir.path().join(FILE);
        let before = std::fs::metadata(&path).unwrap().len();
        assert!(before > REWRITE_MIN_BYTES);
        sends.forget(|first| first < 1_999_900).unwrap();
        assert_eq!(sends.chunks().count(), 1);
        assert!(std::fs::metadata(&path).unwrap().len() < 100);
        sends.record(&[chunk(5_000_000, &[], 1)]).unwrap();
        let firsts: Vec<u64> =
            Sends::open(dir.path()).unwrap().chunks().map(SentChunk::first_seq).collect();
        assert_eq!(firsts, vec![1_999_900, 5_000_000]);
    }
}
