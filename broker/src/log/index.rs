//! Record numbers and times beside byte offsets (`docs/design.md`, "Record-number index"):
//! every partition numbers its records from 0 — a plain message is one record, a magic-1
//! wrapper one per inner message, a magic-2 message its batch's last offset delta + 1 — and
//! each segment has a sparse index, `{base_offset:020}.index`: after an 8-byte format mark,
//! `u64 record_number, u64 byte_offset, i64 time` entries, one about every
//! [`INDEX_INTERVAL_BYTES`] of log: the record number of the message that starts at that byte
//! offset, and the largest record timestamp of the segment's messages before it (−1 if none
//! has one: only magic-2 batches carry timestamps). Times let a search for a timestamp skip to
//! the last entry before which every record is older (Kafka's `.timeindex`, in the same file).
//! An index file without the mark (written before times were indexed) is rebuilt.
//!
//! The first entry of a segment's index is its base offset and the number of its first record.
//! A sealed segment's index ends with an entry at the segment's end (the number of the next
//! segment's first record), written and fsynced when the segment is sealed: an index without
//! it is behind (a crash) and is completed by scanning its segment from its last entry. The
//! index of the active segment is written at each flush without an fsync; recovery scans the
//! active segment anyway. Replicas hold the same bytes, so they compute the same numbers.
//!
//! Entries are kept in memory: 24 bytes for every 4 KiB of log, 0.6 % of the log's size.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use protocol::{InvalidMessage, MessageSetIter, RecordCountError};

/// Suffix of index file names.
pub const INDEX_SUFFIX: &str = ".index";
/// Log bytes between two index entries, about.
pub const INDEX_INTERVAL_BYTES: u64 = 4096;
/// Bytes one entry takes in an index file.
const ENTRY_BYTES: usize = 24;
/// What an index file begins with: its format, entries with times.
const FORMAT_MARK: &[u8; 8] = b"TRIBIX02";
/// Bytes before an index file's first entry.
const HEADER_BYTES: usize = FORMAT_MARK.len();
/// The time of a message without one: a plain message or a wrapper.
pub const NO_TIME: i64 = -1;
/// Bytes a wrapper may inflate to while its records are counted.
pub const INFLATED_BYTES_MAX: usize = 256 << 20;

/// The record number of the message starting at a byte offset, and the largest timestamp of
/// the segment's records before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub record: u64,
    pub byte: u64,
    pub time: i64,
}

/// One message of a set about to be appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageCount {
    /// Where it starts in the set.
    pub position: u32,
    pub records: u64,
    /// A magic-2 message, whose batch a leader numbers.
    pub batch: bool,
    /// A gap a cleaner left (a follower copies them; no producer may send one).
    pub gap: bool,
    /// Its largest record timestamp: [`time_of`].
    pub time: i64,
}

/// The messages of a MessageSet about to be appended, each with its record count: what an
/// append needs to number its records, worked out before the partition is locked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetRecords {
    /// Each message, in order.
    pub messages: Vec<MessageCount>,
    /// Records of every message.
    pub records: u64,
}

/// Why the records of a set cannot be counted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CountError {
    #[error(transparent)]
    Invalid(#[from] InvalidMessage),
    #[error("message at position {position}: {source}")]
    Records { position: usize, source: RecordCountError },
}

/// Checks that `set` is one or more whole, valid messages of at most `length_max` bytes each
/// (as `protocol::validate_message_set`) and counts the records of each.
pub fn count_records(set: &[u8], length_max: u32) -> Result<SetRecords, CountError> {
    if set.is_empty() {
        return Err(InvalidMessage::Empty.into());
    }
    let mut counted = SetRecords::default();
    let mut messages = MessageSetIter::new(set, 0);
    loop {
        if let Some(length) = messages.next_length()
            && length > length_max
        {
            let offset = messages.next_offset();
            return Err(InvalidMessage::TooLarge { offset, length, limit: length_max }.into());
        }
        let position = messages.valid_bytes();
        let message = match messages.next() {
            Some(message) => message?.1,
            None => break,
        };
        let records = protocol::records_in(&message, INFLATED_BYTES_MAX)
            .map_err(|source| CountError::Records { position, source })?;
        let batch = message.magic == protocol::MAGIC_BATCH;
        let gap = message.magic == protocol::MAGIC_GAP;
        let time = time_of(&message);
        let position = position as u32;
        counted.messages.push(MessageCount { position, records, batch, gap, time });
        counted.records += records;
    }
    let tail = messages.remainder();
    if !tail.is_empty() {
        let offset = messages.next_offset();
        return Err(InvalidMessage::Truncated { offset, bytes: tail.len() }.into());
    }
    Ok(counted)
}

/// One segment's index.
#[derive(Debug)]
pub struct SegmentIndex {
    path: PathBuf,
    entries: Vec<IndexEntry>,
    /// Entries already in the file.
    written: usize,
    /// The number the next record appended to this segment gets, and where it goes.
    end: IndexEntry,
    /// Whether the segment is sealed and its index ends with the seal entry.
    sealed: bool,
}

pub fn file_name(base_offset: u64) -> String {
    format!("{base_offset:020}{INDEX_SUFFIX}")
}

/// The base offset an index file name names, if it is one.
pub fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(INDEX_SUFFIX)?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

impl SegmentIndex {
    /// A new, empty segment's index: its first record is `first_record`. Writes the file.
    pub fn create(dir: &Path, base_offset: u64, first_record: u64) -> io::Result<SegmentIndex> {
        let path = dir.join(file_name(base_offset));
        let first = IndexEntry { record: first_record, byte: base_offset, time: NO_TIME };
        let mut index =
            SegmentIndex { path, entries: vec![first], written: 0, end: first, sealed: false };
        index.rewrite()?;
        Ok(index)
    }

    /// Opens the index of the segment `[base_offset, end)` whose first record is
    /// `first_record` if the caller knows it (the previous segment's end), completing or
    /// rebuilding it from the segment's messages as needed. `sealed`: the segment is not the
    /// last. Blocking: reads the index and, where it is behind, the segment.
    pub fn open(
        dir: &Path,
        segment: &File,
        base_offset: u64,
        end: u64,
        first_record: Option<u64>,
        sealed: bool,
        message_bytes_max: u32,
    ) -> io::Result<SegmentIndex> {
        let path = dir.join(file_name(base_offset));
        let mut entries = read_entries(&path, base_offset, end)?;
        let agrees = match (entries.first(), first_record) {
            (Some(first), Some(expected)) => first.record == expected,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if !agrees {
            if !entries.is_empty() {
                tracing::warn!(index = %path.display(), "index does not begin where the previous segment ends; rebuilding it");
            }
            let record = first_record.unwrap_or_else(|| {
                if base_offset > 0 {
                    tracing::warn!(index = %path.display(), "no index for the log's first segment: its records are numbered from 0");
                }
                0
            });
            entries = vec![IndexEntry { record, byte: base_offset, time: NO_TIME }];
        }
        let mut index = SegmentIndex {
            path,
            written: 0,
            end: *entries.last().expect("one entry at least"),
            entries,
            sealed: false,
        };
        // An entry at `end` past the first gives the number of the record at `end`: the seal
        // entry, or the entry of a message that recovery cut there. Otherwise the index is
        // behind, and the segment is read from its last entry.
        if index.entries.len() > 1 && index.end.byte == end {
            index.entries.pop();
        } else {
            index.scan(segment, base_offset, end, message_bytes_max)?;
        }
        index.sealed = sealed;
        index.rewrite()?;
        if index.sealed {
            index.sync()?;
        }
        Ok(index)
    }

    /// Reads the segment from the index's end to `end`, numbering its messages.
    fn scan(
        &mut self,
        segment: &File,
        base_offset: u64,
        end: u64,
        message_bytes_max: u32,
    ) -> io::Result<()> {
        let from = self.end.byte;
        let reader = PositionalReader { file: segment, position: from - base_offset };
        let mut reader = BufReader::with_capacity(1 << 20, reader);
        let mut message = Vec::new();
        let mut at = from;
        while at < end {
            let length = read_message(&mut reader, at, end, message_bytes_max, &mut message)?;
            let (records, time) = match MessageSetIter::new(&message, 0).next() {
                Some(Ok((_, m))) => {
                    let records = protocol::records_in(&m, INFLATED_BYTES_MAX).unwrap_or_else(|e| {
                        tracing::warn!(index = %self.path.display(), offset = at, error = %e, "a message whose records cannot be counted counts none");
                        0
                    });
                    (records, time_of(&m))
                }
                _ => (0, NO_TIME),
            };
            self.append_message(at, records, length, time);
            at += length;
        }
        Ok(())
    }

    /// Numbers the message of `bytes` bytes at byte `at` (the index's end), which holds
    /// `records` records, the latest at `time`, with an entry if the last one is far enough
    /// behind.
    pub fn append_message(&mut self, at: u64, records: u64, bytes: u64, time: i64) {
        let last = self.entries.last().expect("one entry at least");
        if at - last.byte >= INDEX_INTERVAL_BYTES && records > 0 {
            self.entries.push(IndexEntry { byte: at, ..self.end });
        }
        self.end = IndexEntry {
            record: self.end.record + records,
            byte: at + bytes,
            time: self.end.time.max(time),
        };
    }

    /// Where the index ends: the number the next record gets, and its byte offset.
    pub fn end(&self) -> IndexEntry {
        self.end
    }

    /// The number the next record gets.
    pub fn end_record(&self) -> u64 {
        self.end.record
    }

    /// Whether the segment is sealed.
    pub fn is_sealed(&self) -> bool {
        self.sealed
    }

    /// The number of the segment's first record.
    pub fn first_record(&self) -> u64 {
        self.entries[0].record
    }

    /// The last entry at or before `record`: where a scan for it starts.
    pub fn floor_record(&self, record: u64) -> IndexEntry {
        let i = self.entries.partition_point(|e| e.record <= record);
        self.entries[i.saturating_sub(1)]
    }

    /// The last entry at or before byte `offset`.
    pub fn floor_byte(&self, offset: u64) -> IndexEntry {
        let i = self.entries.partition_point(|e| e.byte <= offset);
        self.entries[i.saturating_sub(1)]
    }

    /// The last entry before which every record is older than `time`: where a search for the
    /// first record at or after `time` starts.
    pub fn floor_time(&self, time: i64) -> IndexEntry {
        let i = self.entries.partition_point(|e| e.time < time);
        self.entries[i.saturating_sub(1)]
    }

    /// Writes the entries not yet in the file (no fsync: an index is rebuilt after a crash).
    pub fn write_new(&mut self) -> io::Result<()> {
        if self.written == self.entries.len() {
            return Ok(());
        }
        let file = OpenOptions::new().write(true).create(true).truncate(false).open(&self.path)?;
        let bytes = encode(&self.entries[self.written..]);
        file.write_all_at(&bytes, entry_at(self.written))?;
        self.written = self.entries.len();
        Ok(())
    }

    /// Seals the index of a segment that ends at the index's end: the seal entry goes in, and
    /// the file is fsynced.
    pub fn seal(&mut self) -> io::Result<()> {
        self.write_new()?;
        let file = OpenOptions::new().write(true).open(&self.path)?;
        file.write_all_at(&encode(&[self.end]), entry_at(self.entries.len()))?;
        file.set_len(entry_at(self.entries.len() + 1))?;
        file.sync_data()?;
        self.sealed = true;
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        File::open(&self.path)?.sync_data()
    }

    /// Writes the whole file again: the entries, and the seal entry of a sealed segment.
    fn rewrite(&mut self) -> io::Result<()> {
        let mut all = self.entries.clone();
        if self.sealed {
            all.push(self.end);
        }
        let mut bytes = FORMAT_MARK.to_vec();
        bytes.extend(encode(&all));
        let file = OpenOptions::new().write(true).create(true).truncate(false).open(&self.path)?;
        file.write_all_at(&bytes, 0)?;
        file.set_len(bytes.len() as u64)?;
        self.written = self.entries.len();
        Ok(())
    }

    /// Cuts the index back to `end`, a message boundary of its segment (as [`entry_at`]
    /// finds it); the file follows.
    pub fn truncate(&mut self, end: IndexEntry) -> io::Result<()> {
        let keep = self.entries.partition_point(|e| e.byte < end.byte).max(1);
        self.entries.truncate(keep);
        self.end = end;
        self.sealed = false;
        self.rewrite()
    }

    pub fn delete(&self) -> io::Result<()> {
        match fs::remove_file(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// Where entry `i` is in an index file.
fn entry_at(i: usize) -> u64 {
    (HEADER_BYTES + i * ENTRY_BYTES) as u64
}

fn encode(entries: &[IndexEntry]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(entries.len() * ENTRY_BYTES);
    for entry in entries {
        bytes.extend_from_slice(&entry.record.to_be_bytes());
        bytes.extend_from_slice(&entry.byte.to_be_bytes());
        bytes.extend_from_slice(&entry.time.to_be_bytes());
    }
    bytes
}

/// Where a RecordBatch header holds `maxTimestamp`.
const MAX_TIMESTAMP_AT: usize = 35;

/// The largest record timestamp of a stored message: a magic-2 batch's `maxTimestamp`;
/// [`NO_TIME`] for Tributary's own messages, which carry none. Read from the batch's header
/// as it is: the message was checked whole (CRC-32C included) when it was parsed, and
/// parsing the batch again would compute its CRC a second time for every message.
pub fn time_of(message: &protocol::MessageRef) -> i64 {
    if message.magic != protocol::MAGIC_BATCH {
        return NO_TIME;
    }
    protocol::i64_at(message.payload, MAX_TIMESTAMP_AT).map_or(NO_TIME, |t| t.max(NO_TIME))
}

/// The valid entries of an index file, in order: the first at `base_offset` with no time
/// before it, bytes rising within `[base_offset, end]`, records and times never falling. Stops
/// at the first that is not; a file without the format mark has none.
fn read_entries(path: &Path, base_offset: u64, end: u64) -> io::Result<Vec<IndexEntry>> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(parse_entries(&bytes, base_offset, end))
}

/// The entries of an index file's bytes for the segment `[base_offset, end)`, up to the first
/// that does not follow from the ones before it (none for bytes without the format mark). A
/// whole sealed index's last entry is the segment's end.
pub fn parse_entries(bytes: &[u8], base_offset: u64, end: u64) -> Vec<IndexEntry> {
    let Some(bytes) = bytes.strip_prefix(FORMAT_MARK) else { return Vec::new() };
    let mut entries: Vec<IndexEntry> = Vec::with_capacity(bytes.len() / ENTRY_BYTES);
    for entry in bytes.chunks_exact(ENTRY_BYTES).filter_map(|e| {
        let record = protocol::u64_at(e, 0)?;
        Some(IndexEntry { record, byte: protocol::u64_at(e, 8)?, time: protocol::i64_at(e, 16)? })
    }) {
        let fits = match entries.last() {
            None => entry.byte == base_offset && entry.time == NO_TIME,
            Some(last) => {
                entry.byte > last.byte
                    && entry.byte <= end
                    && entry.record >= last.record
                    && entry.time >= last.time
            }
        };
        if !fits {
            break;
        }
        entries.push(entry);
    }
    entries
}

/// Reads a file from a position of its own, never moving the file's shared cursor.
struct PositionalReader<'a> {
    file: &'a File,
    position: u64,
}

impl Read for PositionalReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.position)?;
        self.position += n as u64;
        Ok(n)
    }
}

/// A message length read from a segment file that cannot be a message's: bit rot in a length
/// field, caught before anything is allocated for it.
#[derive(Debug, thiserror::Error)]
#[error(
    "the message at byte {at} claims {length} bytes: more than {room} left before {end}, or than \
     max_message_bytes {max} (raise it if the log holds messages written under a larger limit)"
)]
pub struct BadLength {
    pub at: u64,
    pub length: u64,
    pub room: u64,
    pub end: u64,
    pub max: u32,
}

/// Reads the message at byte `at` (its `u32` length, then its body) into `message`, and
/// returns its size in the log. A length read from the disk is checked as one read from the
/// wire: it must fit before `end` and within `message_bytes_max`, else [`BadLength`].
fn read_message(
    reader: &mut impl Read,
    at: u64,
    end: u64,
    message_bytes_max: u32,
    message: &mut Vec<u8>,
) -> io::Result<u64> {
    let mut header = [0u8; 4];
    reader.read_exact(&mut header)?;
    let length = u64::from(u32::from_be_bytes(header));
    let room = end.saturating_sub(at + 4);
    if length > room || length > u64::from(message_bytes_max) {
        let bad = BadLength { at, length, room, end, max: message_bytes_max };
        return Err(io::Error::new(io::ErrorKind::InvalidData, bad));
    }
    message.clear();
    message.extend_from_slice(&header);
    message.resize(4 + length as usize, 0);
    reader.read_exact(&mut message[4..])?;
    Ok(4 + length)
}

/// The Kafka records a stored message holds (0 for one that cannot be counted), and its time.
fn records_and_time(message: &[u8]) -> (u64, i64) {
    match MessageSetIter::new(message, 0).next() {
        Some(Ok((_, m))) => {
            (protocol::records_in(&m, INFLATED_BYTES_MAX).unwrap_or(0), time_of(&m))
        }
        _ => (0, NO_TIME),
    }
}

/// The index entry at byte `offset` of the segment based at `base_offset` (a message
/// boundary, or the segment's end): the number of the record there and the latest time
/// before it, counted from the index entry `from` at or before it. Blocking: reads the
/// messages between them.
pub fn entry_at_offset(
    file: &File,
    base_offset: u64,
    from: IndexEntry,
    offset: u64,
    message_bytes_max: u32,
) -> io::Result<IndexEntry> {
    let reader = PositionalReader { file, position: from.byte - base_offset };
    let mut reader = BufReader::with_capacity(64 << 10, reader);
    let mut entry = from;
    let mut message = Vec::new();
    while entry.byte < offset {
        entry.byte +=
            read_message(&mut reader, entry.byte, offset, message_bytes_max, &mut message)?;
        let (records, time) = records_and_time(&message);
        entry.record += records;
        entry.time = entry.time.max(time);
    }
    Ok(entry)
}

/// Finds the message holding record `record` in the segment `[base_offset, end)` of `file`,
/// starting from the index entry `from` (at or before it): the message's byte offset and the
/// number of its first record. `None` if the segment's records end before `record`.
/// Blocking: reads at most the messages from `from` to the one holding it.
pub fn locate(
    file: &File,
    base_offset: u64,
    end: u64,
    from: IndexEntry,
    record: u64,
    message_bytes_max: u32,
) -> io::Result<Option<(u64, u64)>> {
    let reader = PositionalReader { file, position: from.byte - base_offset };
    let mut reader = BufReader::with_capacity(64 << 10, reader);
    let (mut at, mut number) = (from.byte, from.record);
    let mut message = Vec::new();
    while at < end {
        let length = read_message(&mut reader, at, end, message_bytes_max, &mut message)?;
        let (records, _) = records_and_time(&message);
        if record < number + records {
            return Ok(Some((at, number)));
        }
        number += records;
        at += length;
    }
    Ok(None)
}

/// The first record at or after `time` in the segment `[base_offset, end)` of `file`, scanning
/// from the index entry `from` (one before which every record is older): its number and its
/// timestamp; `None` if no record before `end` is that recent. Blocking: reads the messages
/// from `from` to the batch that holds it, and opens that batch.
pub fn find_time(
    file: &File,
    base_offset: u64,
    end: u64,
    from: IndexEntry,
    time: i64,
    message_bytes_max: u32,
) -> io::Result<Option<(u64, i64)>> {
    let reader = PositionalReader { file, position: from.byte - base_offset };
    let mut reader = BufReader::with_capacity(64 << 10, reader);
    let (mut at, mut number) = (from.byte, from.record);
    let mut message = Vec::new();
    while at < end {
        at += read_message(&mut reader, at, end, message_bytes_max, &mut message)?;
        let Some(Ok((_, m))) = MessageSetIter::new(&message, 0).next() else { continue };
        let records = protocol::records_in(&m, INFLATED_BYTES_MAX).unwrap_or(0);
        if time_of(&m) >= time
            && let Ok(batch) = protocol::record_batch::RecordBatchRef::parse(m.payload)
        {
            let inflated = batch.records(INFLATED_BYTES_MAX).map_err(io::Error::other)?;
            for record in inflated.iter() {
                let record = record.map_err(io::Error::other)?;
                if record.timestamp >= time {
                    let delta = u64::try_from(record.offset - batch.base_offset()).unwrap_or(0);
                    return Ok(Some((number + delta, record.timestamp)));
                }
            }
        }
        number += records;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use protocol::Codec;

    use super::*;

    /// The broker's default `max_message_bytes`.
    const MAX: u32 = 1 << 20;

    /// A segment of `n` plain messages of 1000 bytes, then a wrapper of 5, then a plain one.
    fn segment(dir: &Path, n: usize) -> (File, u64) {
        let mut bytes = Vec::new();
        for i in 0..n {
            protocol::encode_message(&mut bytes, Codec::None, &vec![i as u8; 1000]);
        }
        let mut inner = Vec::new();
        for _ in 0..5 {
            protocol::encode_message(&mut inner, Codec::None, b"x");
        }
        let packed = protocol::compression::compress(Codec::Lz4, &inner).unwrap();
        protocol::encode_message(&mut bytes, Codec::Lz4, &packed);
        protocol::encode_message(&mut bytes, Codec::None, b"last");
        let path = dir.join("00000000000000000000.log");
        File::create(&path).unwrap().write_all(&bytes).unwrap();
        (File::open(&path).unwrap(), bytes.len() as u64)
    }

    #[test]
    fn an_index_is_built_from_its_segment_and_finds_every_record() {
        let dir = tempfile::tempdir().unwrap();
        let (file, end) = segment(dir.path(), 20);
        let index = SegmentIndex::open(dir.path(), &file, 0, end, None, false, MAX).unwrap();
        assert_eq!(index.end_record(), 26, "20 plain, 5 in the wrapper, 1 plain");
        assert!(index.entries.len() >= 4, "about one entry per 4 KiB: {:?}", index.entries);
        for record in 0..26 {
            let from = index.floor_record(record);
            let (at, first) = locate(&file, 0, end, from, record, MAX).unwrap().unwrap();
            let expected = match record {
                0..=19 => (record * 1009, record),
                20..=24 => (20 * 1009, 20),
                _ => (end - 13, 25),
            };
            assert_eq!((at, first), expected, "record {record}");
        }
        assert_eq!(locate(&file, 0, end, index.floor_record(26), 26, MAX).unwrap(), None);
    }

    #[test]
    fn a_sealed_index_is_trusted_and_a_behind_one_is_completed() {
        let dir = tempfile::tempdir().unwrap();
        let (file, end) = segment(dir.path(), 20);
        let mut index =
            SegmentIndex::open(dir.path(), &file, 0, end, Some(100), false, MAX).unwrap();
        assert_eq!((index.first_record(), index.end_record()), (100, 126));
        index.seal().unwrap();
        let entries = index.entries.clone();
        let again = SegmentIndex::open(dir.path(), &file, 0, end, Some(100), true, MAX).unwrap();
        assert_eq!(
            (again.entries.clone(), again.end_record(), again.sealed),
            (entries.clone(), 126, true)
        );
        // A crash left the index short: it is completed from the segment.
        let path = dir.path().join(file_name(0));
        let short = fs::read(&path).unwrap();
        fs::write(&path, &short[..HEADER_BYTES + ENTRY_BYTES * 2]).unwrap();
        let completed =
            SegmentIndex::open(dir.path(), &file, 0, end, Some(100), true, MAX).unwrap();
        assert_eq!((completed.entries.clone(), completed.end_record()), (entries.clone(), 126));
        // Garbage, or an index that disagrees with the previous segment, is rebuilt.
        fs::write(&path, b"not an index at all").unwrap();
        let rebuilt = SegmentIndex::open(dir.path(), &file, 0, end, Some(100), true, MAX).unwrap();
        assert_eq!(rebuilt.entries, entries);
        let renumbered = SegmentIndex::open(dir.path(), &file, 0, end, Some(7), true, MAX).unwrap();
        assert_eq!((renumbered.first_record(), renumbered.end_record()), (7, 33));
    }

    #[test]
    fn a_rotten_length_is_refused_before_it_is_allocated() {
        let dir = tempfile::tempdir().unwrap();
        let (file, end) = segment(dir.path(), 20);
        let index = SegmentIndex::open(dir.path(), &file, 0, end, None, false, MAX).unwrap();
        // Bit rot turns the length of message 3 into 4 GiB - 1.
        let path = dir.path().join("00000000000000000000.log");
        let mut bytes = fs::read(&path).unwrap();
        bytes[3 * 1009..3 * 1009 + 4].copy_from_slice(&[0xff; 4]);
        fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        let from = index.floor_record(0);
        for found in [
            locate(&file, 0, end, from, 5, MAX).map(|_| ()),
            entry_at_offset(&file, 0, from, 5 * 1009, MAX).map(|_| ()),
        ] {
            let error = found.unwrap_err();
            let bad = error.get_ref().and_then(|e| e.downcast_ref::<BadLength>()).unwrap();
            assert_eq!((bad.at, bad.length, bad.max), (3 * 1009, u64::from(u32::MAX), MAX));
        }
        // A length within the segment but over max_message_bytes is refused too.
        bytes[3 * 1009..3 * 1009 + 4].copy_from_slice(&2000u32.to_be_bytes());
        fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        let error = locate(&file, 0, end, from, 5, 1000).unwrap_err();
        assert!(error.to_string().contains("max_message_bytes 1000"), "{error}");
    }

    #[test]
    fn truncation_cuts_the_entries_and_the_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let (file, end) = segment(dir.path(), 20);
        let mut index = SegmentIndex::open(dir.path(), &file, 0, end, None, false, MAX).unwrap();
        let from = index.floor_byte(10 * 1009);
        let cut = entry_at_offset(&file, 0, from, 10 * 1009, MAX).unwrap();
        assert_eq!((cut.record, cut.byte, cut.time), (10, 10 * 1009, NO_TIME));
        index.truncate(cut).unwrap();
        assert_eq!(index.end_record(), 10);
        assert!(index.entries.iter().all(|e| e.byte < 10 * 1009));
        let reread = read_entries(&dir.path().join(file_name(0)), 0, end).unwrap();
        assert_eq!(reread, index.entries);
    }

    #[test]
    fn times_find_the_first_record_at_or_after_a_timestamp() {
        // 300 batches of 4 records, 100 bytes each, timestamps rising by 10 ms a record but
        // for batch 150, whose records went out of order (sent late: 50 ms before batch 149).
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = Vec::new();
        protocol::encode_message(&mut bytes, Codec::None, b"a native message has no time");
        let mut times = Vec::new();
        for b in 0..300i64 {
            let base = 1 + 4 * b;
            let mut batch = protocol::record_batch::RecordBatchBuilder::new(base);
            for r in 0..4 {
                let time =
                    if b == 150 { 1_000 + 10 * (base + r) - 50 } else { 1_000 + 10 * (base + r) };
                batch.push(base + r, time, None, Some(&[0u8; 100]), &[]);
                times.push((base + r, time));
            }
            protocol::encode_batch_message(&mut bytes, &batch.finish());
        }
        let path = dir.path().join("00000000000000000000.log");
        File::create(&path).unwrap().write_all(&bytes).unwrap();
        let file = File::open(&path).unwrap();
        let end = bytes.len() as u64;
        let index = SegmentIndex::open(dir.path(), &file, 0, end, None, false, MAX).unwrap();
        assert_eq!(index.end().time, 1_000 + 10 * 1200);
        assert!(index.entries.len() > 10, "{} entries", index.entries.len());
        assert!(index.entries.windows(2).all(|w| w[0].time <= w[1].time));
        // What Kafka answers: the first record, in offset order, at or after the time.
        let expected =
            |t: i64| times.iter().find(|(_, time)| *time >= t).map(|&(r, time)| (r as u64, time));
        for t in (0..=1_000 + 10 * 1201).step_by(5) {
            let from = index.floor_time(t);
            let found = find_time(&file, 0, end, from, t, MAX).unwrap();
            assert_eq!(found, expected(t), "time {t}");
        }
        // The times survive a reopening, and a rebuilt index has the same.
        let reopened = SegmentIndex::open(dir.path(), &file, 0, end, None, false, MAX).unwrap();
        assert_eq!(reopened.entries, index.entries);
        fs::remove_file(dir.path().join(file_name(0))).unwrap();
        let rebuilt = SegmentIndex::open(dir.path(), &file, 0, end, None, false, MAX).unwrap();
        assert_eq!((rebuilt.entries, rebuilt.end), (index.entries.clone(), index.end));
        // An index file of the format before times (16-byte entries, no mark) is rebuilt.
        let mut old = Vec::new();
        for e in &index.entries {
            old.extend_from_slice(&e.record.to_be_bytes());
            old.extend_from_slice(&e.byte.to_be_bytes());
        }
        fs::write(dir.path().join(file_name(0)), &old).unwrap();
        let upgraded = SegmentIndex::open(dir.path(), &file, 0, end, None, false, MAX).unwrap();
        assert_eq!(upgraded.entries, index.entries);
    }

    #[test]
    fn counting_a_set_numbers_each_message() {
        let mut set = Vec::new();
        protocol::encode_message(&mut set, Codec::None, b"a");
        let mut inner = Vec::new();
        protocol::encode_message(&mut inner, Codec::None, b"b");
        protocol::encode_message(&mut inner, Codec::None, b"c");
        let packed = protocol::compression::compress(Codec::Gzip, &inner).unwrap();
        protocol::encode_message(&mut set, Codec::Gzip, &packed);
        let counted = count_records(&set, 1 << 20).unwrap();
        assert_eq!(counted.records, 3);
        let counts: Vec<(u32, u64, bool, i64)> =
            counted.messages.iter().map(|m| (m.position, m.records, m.batch, m.time)).collect();
        assert_eq!(counts, vec![(0, 1, false, NO_TIME), (10, 2, false, NO_TIME)]);
        let mut garbage = Vec::new();
        protocol::encode_message(&mut garbage, Codec::Gzip, b"not gzip");
        assert!(matches!(
            count_records(&garbage, 1 << 20),
            Err(CountError::Records { position: 0, .. })
        ));
        assert!(matches!(
            count_records(&set, 5),
            Err(CountError::Invalid(InvalidMessage::TooLarge { .. }))
        ));
        assert!(matches!(
            count_records(&set[..set.len() - 1], 1 << 20),
            Err(CountError::Invalid(InvalidMessage::Truncated { .. }))
        ));
    }
}
