//! The log cleaner of a compacted topic (`docs/design.md`, "Compacted topics"): sealed segments
//! below the visible end rewritten to keep the last record of each key, every byte offset and
//! record number where it was.
//!
//! A message the cleaner removes whole becomes a gap of its size that counts its records; a
//! batch that loses some records is written again shorter, followed by a tail gap for the
//! bytes it freed (or left as it was when they are too few for a gap's header). A gap's body is
//! a hole in the file, so the disk gives back its whole 4 KiB blocks. Every message boundary of
//! the original log stays one, so consumers' offsets, index entries and followers' positions
//! stay valid. A cleaned segment is written beside the old one, fsynced,
//! and renamed over it: a crash leaves the one or the other.
//!
//! Transactions: a pass stops below the last stable offset (a record of an open transaction
//! must not supersede a committed one before it is decided); the records of an aborted
//! transaction supersede nothing and are removed; markers are kept.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use protocol::record_batch::{self, RecordBatchRef};
use protocol::{GAP_HEADER_BYTES, GAP_TAIL, MAGIC_BATCH, MAGIC_GAP, MessageRef, MessageSetIter};

use super::Partition;
use crate::log::error::{LogError, io_error};
use crate::log::index::INFLATED_BYTES_MAX;
use crate::log::segment::Segment;

/// Suffix of a cleaned segment being written; one left by a crash is deleted on open.
pub const CLEANED_SUFFIX: &str = ".log.cleaned";

/// What one cleaning pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Segments written again.
    pub segments: usize,
    /// Records removed.
    pub records: u64,
    /// Bytes of the log the pass read.
    pub bytes_read: u64,
    /// When the first tombstone kept expires (ms since the epoch): a pass is due then.
    pub next_expiry: Option<i64>,
}

/// One sealed segment a pass may rewrite.
struct Cleanable {
    segment: Arc<Segment>,
    end: u64,
    first_record: u64,
}

impl Partition {
    /// Where the sealed segments wholly below the visible end end: how far a cleaning pass
    /// would reach.
    pub fn cleanable_end(&self) -> u64 {
        let state = self.state();
        let visible = self.visible_end();
        (0..state.segments.len() - 1)
            .map(|i| state.segment_end(i))
            .take_while(|&end| end <= visible)
            .last()
            .unwrap_or(0)
    }

    /// One cleaning pass: the last record number of every key in the sealed segments wholly
    /// below the visible end (records a failover cannot take back), then each of those
    /// segments that holds a record superseded by a later one of its key, or a tombstone older
    /// than `delete_retention_ms`, written again without them. `now_ms` is the clock the
    /// tombstones are judged by; `throttle` is told the bytes read. Blocking.
    pub fn clean(&self, now_ms: i64, throttle: &mut dyn FnMut(u64)) -> Result<Cleaned, LogError> {
        let stable = self.first_open_transaction()?.map_or(u64::MAX, |open| open.offset);
        let (segments, config) = {
            let state = self.state();
            let visible = self.visible_end().min(stable);
            let sealed = state.segments.len() - 1;
            let segments: Vec<Cleanable> = (0..sealed)
                .take_while(|&i| state.segment_end(i) <= visible)
                .map(|i| Cleanable {
                    segment: Arc::clone(&state.segments[i]),
                    end: state.segment_end(i),
                    first_record: state.indexes[i].first_record(),
                })
                .collect();
            (segments, state.config)
        };
        let mut report = Cleaned::default();
        if segments.is_empty() || !config.cleanup_policy.compact {
            return Ok(report);
        }
        let max = config.max_message_bytes;
        let reach = segments.last().map_or(0, |s| s.end);
        let aborted = Aborted(self.aborted_in_bytes(segments[0].segment.base_offset, reach));
        // The last number of each key.
        let mut latest: HashMap<Vec<u8>, u64> = HashMap::new();
        for cleanable in &segments {
            let read = for_each_message(cleanable, max, &mut |seen| {
                let Some(message) = seen.message.as_ref().filter(|m| m.magic == MAGIC_BATCH) else {
                    return Ok(());
                };
                let number = seen.number;
                let batch = RecordBatchRef::parse(message.payload).map_err(invalid)?;
                if batch.is_control() || aborted.holds(&batch, seen.at) {
                    return Ok(());
                }
                for record in batch.records(INFLATED_BYTES_MAX).map_err(invalid)?.iter() {
                    let record = record.map_err(invalid)?;
                    if let Some(key) = record.key {
                        let delta = (record.offset - batch.base_offset()) as u64;
                        latest.insert(key.to_vec(), number + delta);
                    }
                }
                Ok(())
            });
            report.bytes_read += read?;
            throttle(cleanable.end - cleanable.segment.base_offset);
        }
        let horizon = now_ms.saturating_sub(config.delete_retention_ms as i64);
        for cleanable in &segments {
            let keep = Keep { latest: &latest, horizon, aborted: &aborted };
            let rewrite = self.clean_segment(cleanable, max, &keep, &mut report)?;
            throttle(cleanable.end - cleanable.segment.base_offset);
            if let Some((path, removed)) = rewrite {
                if self.replace_segment(cleanable, &path)? {
                    report.segments += 1;
                    report.records += removed;
                } else {
                    let _ = fs::remove_file(&path);
                }
            }
        }
        if let Some(expiry) = report.next_expiry.as_mut() {
            *expiry += config.delete_retention_ms as i64;
        }
        Ok(report)
    }

    /// Writes `cleanable` again without the records `latest` has a later number for and the
    /// tombstones older than `horizon`, to a file beside it: its path and the records removed,
    /// or `None` when it keeps every record. Blocking.
    fn clean_segment(
        &self,
        cleanable: &Cleanable,
        max: u32,
        keep: &Keep,
        report: &mut Cleaned,
    ) -> Result<Option<(PathBuf, u64)>, LogError> {
        let segment = &cleanable.segment;
        let path = self.dir.join(format!("{:020}{CLEANED_SUFFIX}", segment.base_offset));
        let len = cleanable.end - segment.base_offset;
        let mut out: Option<File> = None;
        let mut removed = 0u64;
        // The slot of the batch before: where it starts and its size with its tail gap.
        let mut pending: Option<Slot> = None;
        let mut slots = Vec::new();
        for_each_message(cleanable, max, &mut |seen| {
            if seen.magic == MAGIC_GAP
                && seen.flags & GAP_TAIL != 0
                && let Some(slot) = pending.as_mut()
            {
                slot.size += seen.size;
                return Ok(());
            }
            if let Some(slot) = pending.take() {
                slots.push(slot);
            }
            pending =
                Some(Slot { at: seen.at, size: seen.size, number: seen.number, magic: seen.magic });
            Ok(())
        })?;
        slots.extend(pending);
        let write = |out: &mut Option<File>, bytes: &[u8], at: u64| -> Result<(), LogError> {
            let file = match out {
                Some(file) => file,
                None => {
                    let file = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create(true)
                        .truncate(true)
                        .open(&path)
                        .map_err(io_error("creating", &path))?;
                    file.set_len(len).map_err(io_error("writing", &path))?;
                    out.insert(file)
                }
            };
            file.write_all_at(bytes, at - segment.base_offset).map_err(io_error("writing", &path))
        };
        let read = |slot: &Slot| -> Result<Vec<u8>, LogError> {
            let mut bytes = vec![0u8; slot.size as usize];
            segment
                .file
                .read_exact_at(&mut bytes, slot.at - segment.base_offset)
                .map_err(io_error("reading", &segment.path))?;
            Ok(bytes)
        };
        // Slots before the first change are read again and copied once a change is found.
        let mut unchanged: Vec<&Slot> = Vec::new();
        for slot in &slots {
            let bytes = read(slot)?;
            let kept = match slot.magic {
                MAGIC_BATCH => clean_batch(&bytes, slot, keep, report)?,
                _ => None,
            };
            match kept {
                None if out.is_none() => unchanged.push(slot),
                None => write(&mut out, &gap_free(&bytes), slot.at)?,
                Some((slot_bytes, gone)) => {
                    removed += gone;
                    for earlier in unchanged.drain(..) {
                        write(&mut out, &gap_free(&read(earlier)?), earlier.at)?;
                    }
                    write(&mut out, &slot_bytes, slot.at)?;
                }
            }
        }
        let Some(file) = out else { return Ok(None) };
        file.sync_data().map_err(io_error("syncing", &path))?;
        let modified = segment.modified().map_err(io_error("reading", &segment.path))?;
        // Retention goes by the segment's age, which cleaning does not change.
        file.set_modified(modified).map_err(io_error("writing", &path))?;
        Ok(Some((path, removed)))
    }

    /// Renames the cleaned file at `path` over `cleanable`'s segment and reads from it from now
    /// on, if the segment is still in the log as it was read (retention or a truncation may
    /// have changed it meanwhile): whether it did. Blocking.
    fn replace_segment(&self, cleanable: &Cleanable, path: &PathBuf) -> Result<bool, LogError> {
        let old = &cleanable.segment;
        {
            let mut state = self.state();
            let Some(i) = state.segments.iter().position(|s| Arc::ptr_eq(s, old)) else {
                return Ok(false);
            };
            if i + 1 == state.segments.len() || state.segment_end(i) != cleanable.end {
                return Ok(false);
            }
            fs::rename(path, &old.path).map_err(io_error("renaming", path))?;
            let segment = Segment::open(&self.dir, old.base_offset)
                .map_err(io_error("opening segment in", &self.dir))?;
            state.segments[i] = Arc::new(segment);
            state.unsynced.retain(|s| !Arc::ptr_eq(s, old));
        }
        service::durable::sync_dir(&self.dir).map_err(io_error("syncing", &self.dir))?;
        tracing::info!(topic = %self.topic, partition = self.index, segment = %old.path.display(), "cleaned segment");
        Ok(true)
    }
}

/// The aborted transactions of the log a pass reads.
struct Aborted(Vec<crate::log::producers::Aborted>);

impl Aborted {
    /// Whether `batch`, at byte `at`, is a record batch of an aborted transaction.
    fn holds(&self, batch: &RecordBatchRef, at: u64) -> bool {
        batch.is_transactional()
            && self.0.iter().any(|a| {
                a.producer_id == batch.producer_id()
                    && (a.first_offset..a.marker_offset).contains(&at)
            })
    }
}

/// What a pass keeps of a batch: the last record of each key (`latest`, by number), a
/// tombstone until `horizon` (ms since the epoch) has passed it, and nothing of an aborted
/// transaction.
struct Keep<'a> {
    latest: &'a HashMap<Vec<u8>, u64>,
    horizon: i64,
    aborted: &'a Aborted,
}

/// A message of a segment with the tail gap after it, if it has one.
#[derive(Debug, Clone, Copy)]
struct Slot {
    at: u64,
    size: u64,
    /// The number of its first record.
    number: u64,
    magic: u8,
}

/// The bytes of a slot to write to a cleaned file: a gap's header only (its body is a hole,
/// zeros), any other message whole and then the header of its tail gap.
fn gap_free(slot: &[u8]) -> Vec<u8> {
    let Some(Ok((_, message))) = MessageSetIter::new(slot, 0).next() else {
        return slot.to_vec();
    };
    if message.magic == MAGIC_GAP {
        return slot[..GAP_HEADER_BYTES].to_vec();
    }
    let size = message.size_bytes();
    let mut bytes = slot[..size].to_vec();
    if slot.len() > size {
        bytes.extend_from_slice(&slot[size..size + GAP_HEADER_BYTES]);
    }
    bytes
}

/// The slot of a batch with the records it loses taken out: the batch written again and a tail
/// gap (header only), or a gap for all of it; and the records removed. `None` when it keeps
/// them all, or what it would free is too little for a gap.
fn clean_batch(
    slot_bytes: &[u8],
    slot: &Slot,
    keep: &Keep,
    report: &mut Cleaned,
) -> Result<Option<(Vec<u8>, u64)>, LogError> {
    let Some(Ok((_, message))) = MessageSetIter::new(slot_bytes, 0).next() else {
        return Err(invalid("a batch that no longer reads back"));
    };
    let batch = RecordBatchRef::parse(message.payload).map_err(invalid)?;
    if batch.is_control() {
        return Ok(None);
    }
    let aborted = keep.aborted.holds(&batch, slot.at);
    let mut gone = 0u64;
    let mut expiry: Option<i64> = None;
    let kept = record_batch::retain_records(&batch, INFLATED_BYTES_MAX, |record| {
        let number = slot.number + (record.offset - batch.base_offset()) as u64;
        let keep_it = match record.key {
            None => true,
            Some(key) => keep.latest.get(key) == Some(&number),
        };
        let keep =
            !aborted && keep_it && (record.value.is_some() || record.timestamp > keep.horizon);
        if keep && record.value.is_none() {
            expiry = Some(expiry.map_or(record.timestamp, |e| e.min(record.timestamp)));
        }
        gone += u64::from(!keep);
        keep
    })
    .map_err(invalid)?;
    if let Some(expiry) = expiry {
        report.next_expiry = Some(report.next_expiry.map_or(expiry, |e| e.min(expiry)));
    }
    let Some(kept) = kept else { return Ok(None) };
    let slot_size = slot_bytes.len();
    if batch.record_count() as u64 == gone {
        let records = u32::try_from(batch.offset_count()).unwrap_or(u32::MAX);
        return Ok(Some((protocol::gap_header(slot_size, records, 0).to_vec(), gone)));
    }
    let mut bytes = Vec::with_capacity(kept.len() + 9 + GAP_HEADER_BYTES);
    protocol::encode_batch_message(&mut bytes, &kept);
    let freed = slot_size.saturating_sub(bytes.len());
    if bytes.len() > slot_size || freed < GAP_HEADER_BYTES {
        return Ok(None);
    }
    bytes.extend_from_slice(&protocol::gap_header(freed, 0, GAP_TAIL));
    Ok(Some((bytes, gone)))
}

/// One message of a segment as the cleaner reads it: a gap's header only.
struct Seen<'a> {
    at: u64,
    /// The number of its first record.
    number: u64,
    /// Bytes it takes in the log.
    size: u64,
    magic: u8,
    /// A gap's flags.
    flags: u8,
    /// The message, unless it is a gap.
    message: Option<MessageRef<'a>>,
}

/// Calls `each` with every message of `cleanable`, in order. Returns the bytes read. Blocking.
fn for_each_message(
    cleanable: &Cleanable,
    max: u32,
    each: &mut dyn FnMut(&Seen) -> Result<(), LogError>,
) -> Result<u64, LogError> {
    let segment = &cleanable.segment;
    let base = segment.base_offset;
    let (mut at, mut number, mut read) = (base, cleanable.first_record, 0u64);
    let mut bytes = Vec::new();
    let mut head = [0u8; GAP_HEADER_BYTES];
    while at < cleanable.end {
        let room = cleanable.end - at;
        let head = &mut head[..(GAP_HEADER_BYTES as u64).min(room) as usize];
        segment.file.read_exact_at(head, at - base).map_err(io_error("reading", &segment.path))?;
        let length = u64::from(protocol::u32_at(head, 0).unwrap_or(0));
        if length < 5 || length + 4 > room || length > u64::from(max) {
            return Err(invalid(format!("the message at {at} claims {length} bytes")));
        }
        let size = length + 4;
        if head.len() == GAP_HEADER_BYTES && head[8] == MAGIC_GAP {
            let records = u64::from(protocol::u32_at(head, 10).unwrap_or(0));
            let flags = head[9];
            each(&Seen { at, number, size, magic: MAGIC_GAP, flags, message: None })?;
            number += records;
            at += size;
            continue;
        }
        bytes.resize(size as usize, 0);
        segment
            .file
            .read_exact_at(&mut bytes, at - base)
            .map_err(io_error("reading", &segment.path))?;
        read += size;
        let Some(Ok((_, message))) = MessageSetIter::new(&bytes, 0).next() else {
            return Err(invalid(format!("the message at {at} does not read back whole")));
        };
        let records = protocol::records_in(&message, INFLATED_BYTES_MAX).map_err(invalid)?;
        let magic = message.magic;
        each(&Seen { at, number, size, magic, flags: 0, message: Some(message) })?;
        number += records;
        at += size;
    }
    Ok(read)
}

/// A message the cleaner cannot read: it leaves the segment as it is (the scrubber reports and
/// repairs damage).
fn invalid(reason: impl std::fmt::Display) -> LogError {
    LogError::Io {
        context: "cleaning",
        path: PathBuf::new(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, reason.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use protocol::Codec;
    use protocol::record_batch::RecordBatchBuilder;

    use super::*;
    use crate::config::{BrokerConfig, CleanupPolicy, LogConfig, VisibleAfter};
    use crate::log::index;

    const NOW_MS: i64 = 10_000_000;

    fn compacted(segment_bytes: u64) -> LogConfig {
        LogConfig {
            segment_bytes,
            visible_after: VisibleAfter::Write,
            cleanup_policy: CleanupPolicy { delete: false, compact: true },
            delete_retention_ms: 1000,
            ..BrokerConfig::default().log()
        }
    }

    /// Appends one batch of `records` (key, value or a tombstone) at `time`, compressed with
    /// `codec`; its first record number.
    fn append(p: &Partition, records: &[(&str, Option<String>)], time: i64, codec: Codec) -> u64 {
        let mut batch = RecordBatchBuilder::new(0);
        for (i, (key, value)) in records.iter().enumerate() {
            batch.push(
                i as i64,
                time,
                Some(key.as_bytes()),
                value.as_deref().map(str::as_bytes),
                &[],
            );
        }
        let mut set = Vec::new();
        protocol::encode_batch_message(&mut set, &batch.finish_compressed(codec).unwrap());
        let counted = index::count_records(&set, 1 << 20).unwrap();
        p.append(&[&set], &[counted]).unwrap().first_record
    }

    /// Every record of the log: (number, key, value), read as a Kafka fetch would.
    fn records(p: &Partition) -> Vec<(u64, String, Option<String>)> {
        let mut out = Vec::new();
        let mut offset = p.start_offset() as i64;
        while let Some(slice) = p.read(offset, 1 << 30).unwrap() {
            let mut bytes = vec![0u8; slice.len as usize];
            slice.segment.file.read_exact_at(&mut bytes, slice.position).unwrap();
            let mut number = p.record_at_offset(offset).unwrap();
            let mut messages = MessageSetIter::new(&bytes, offset);
            for message in messages.by_ref() {
                let (_, message) = message.unwrap();
                if message.magic == MAGIC_BATCH {
                    let batch = RecordBatchRef::parse(message.payload).unwrap();
                    for record in batch.records(1 << 20).unwrap().iter() {
                        let record = record.unwrap();
                        let delta = (record.offset - batch.base_offset()) as u64;
                        let text =
                            |b: Option<&[u8]>| b.map(|b| String::from_utf8(b.to_vec()).unwrap());
                        out.push((number + delta, text(record.key).unwrap(), text(record.value)));
                    }
                }
                number += protocol::records_in(&message, 1 << 20).unwrap();
            }
            offset = messages.next_offset();
        }
        out
    }

    #[test]
    fn the_cleaner_keeps_the_last_record_of_each_key_where_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let p = Partition::open(dir.path().join("t-0"), "t", 0, compacted(64 << 10)).unwrap();
        let value = |key: usize, round: usize| Some(format!("{key}:{round}:{}", "x".repeat(2000)));
        // 20 keys written 30 times over, 5 keys a batch, zstd and plain batches by turns; key
        // 3 deleted in the first round (an old tombstone), key 4 in the last (a recent one).
        for round in 0..30 {
            for first in (0..20).step_by(5) {
                let batch: Vec<(String, Option<String>)> = (first..first + 5)
                    .map(|k| {
                        let gone = (k == 3 && round == 0) || (k == 4 && round == 29);
                        (format!("k{k:02}"), if gone { None } else { value(k, round) })
                    })
                    .filter(|(k, _)| !(k == "k03" && round > 0))
                    .collect();
                let batch: Vec<(&str, Option<String>)> =
                    batch.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
                let time = if round == 29 { NOW_MS } else { 1_000 };
                let codec = if round % 2 == 0 { Codec::Zstd } else { Codec::None };
                append(&p, &batch, time, codec);
            }
        }
        // More of key 0, so that the last round's segment is sealed.
        for round in 30..70 {
            append(&p, &[("k00", value(0, round))], NOW_MS, Codec::None);
        }
        p.flush().unwrap();
        let before = records(&p);
        let bases = p.segment_bases();
        assert!(bases.len() > 4, "{bases:?}");
        let sizes = |p: &Partition| -> Vec<(u64, u64)> {
            let state = p.state();
            (0..state.segments.len())
                .map(|i| {
                    let meta = state.segments[i].file.metadata().unwrap();
                    (meta.len(), meta.blocks() * 512)
                })
                .collect()
        };
        let (lens, disk_before): (Vec<u64>, Vec<u64>) = sizes(&p).into_iter().unzip();

        let mut read = 0;
        let cleaned = p.clean(NOW_MS, &mut |bytes| read += bytes).unwrap();
        assert_eq!(cleaned.segments, bases.len() - 1, "{cleaned:?}");
        assert!(read > 0);
        assert_eq!(cleaned.next_expiry, Some(NOW_MS + 1000), "key 4's tombstone expires then");

        // Every segment keeps its size and place; the disk gives back the removed blocks.
        let (lens_after, disk_after): (Vec<u64>, Vec<u64>) = sizes(&p).into_iter().unzip();
        assert_eq!(lens_after, lens);
        let (was, is): (u64, u64) = (disk_before.iter().sum(), disk_after.iter().sum());
        assert!(is * 3 < was * 2, "{is} bytes on disk after cleaning, {was} before");

        // Exactly the last value of each key, at its number; key 3's old tombstone is gone,
        // key 4's recent one stays; the active segment is untouched (and key 0's values
        // there do not count yet).
        let after = records(&p);
        // The last of each key below the active segment, which the cleaner leaves alone.
        let active_from = p.record_at_offset(*bases.last().unwrap() as i64).unwrap();
        let last: std::collections::BTreeMap<String, (u64, Option<String>)> = before
            .iter()
            .filter(|(n, _, _)| *n < active_from)
            .map(|(n, k, v)| (k.clone(), (*n, v.clone())))
            .collect();
        let mut expected: Vec<(u64, String, Option<String>)> = before
            .iter()
            .filter(|(n, k, _)| *n >= active_from || (last[k].0 == *n && k != "k03"))
            .cloned()
            .collect();
        expected.sort();
        let brief = |records: &[(u64, String, Option<String>)]| -> Vec<(u64, String, bool)> {
            records.iter().map(|(n, k, v)| (*n, k.clone(), v.is_some())).collect()
        };
        let extra: Vec<_> =
            brief(&after).into_iter().filter(|r| !brief(&expected).contains(r)).collect();
        let missing: Vec<_> =
            brief(&expected).into_iter().filter(|r| !brief(&after).contains(r)).collect();
        assert!(extra.is_empty() && missing.is_empty(), "kept too: {extra:?}; lost: {missing:?}");
        assert_eq!(after, expected);
        assert!(after.iter().any(|(_, k, v)| k == "k04" && v.is_none()));
        assert_eq!(p.end_record(), before.last().unwrap().0 + 1);
        for (number, _, _) in &after {
            let (byte, first) = p.locate_record(*number).unwrap().unwrap();
            assert_eq!(p.record_at_offset(byte as i64).unwrap(), first);
            assert!(first <= *number);
        }

        // A second pass finds nothing more to do; past the tombstone's expiry it drops key 4.
        assert_eq!(p.clean(NOW_MS, &mut |_| {}).unwrap().segments, 0);
        let later = p.clean(NOW_MS + 2000, &mut |_| {}).unwrap();
        assert_eq!((later.segments, later.records), (1, 1), "{later:?}");
        assert!(!records(&p).iter().any(|(n, k, _)| k == "k04" && *n < active_from));

        // Reopened (indexes rebuilt from the cleaned files too), the log reads the same.
        let now = records(&p);
        drop(p);
        for entry in std::fs::read_dir(dir.path().join("t-0")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "index") {
                std::fs::remove_file(path).unwrap();
            }
        }
        let p = Partition::open(dir.path().join("t-0"), "t", 0, compacted(64 << 10)).unwrap();
        assert_eq!(records(&p), now);
        assert_eq!(p.end_record(), before.last().unwrap().0 + 1);
    }

    /// The records of an aborted transaction supersede nothing and are removed; a pass stops
    /// below an open transaction, whose records may yet abort; markers stay.
    #[test]
    fn aborted_transactions_supersede_nothing_and_open_ones_are_not_passed() {
        let dir = tempfile::tempdir().unwrap();
        let p = Partition::open(dir.path().join("t-0"), "t", 0, compacted(8 << 10)).unwrap();
        let value = |name: &str| Some(format!("{name}:{}", "x".repeat(1500)));
        let append_batch = |p: &Partition, batch: Vec<u8>| {
            let mut set = Vec::new();
            protocol::encode_batch_message(&mut set, &batch);
            let counted = index::count_records(&set, 1 << 20).unwrap();
            p.append(&[&set], &[counted]).unwrap();
        };
        let transaction = |p: &Partition, producer: i64, key: &str, name: &str| {
            let mut batch =
                RecordBatchBuilder::new(0).with_producer(producer, 0, 0).transactional();
            let value = value(name);
            batch.push(0, NOW_MS, Some(key.as_bytes()), value.as_deref().map(str::as_bytes), &[]);
            append_batch(p, batch.finish());
        };
        let marker = |p: &Partition, producer: i64, commit: bool| {
            append_batch(p, record_batch::transaction_marker(producer, 0, commit, 0, NOW_MS));
        };
        let filler = |p: &Partition, name: &str| {
            for i in 0..12 {
                append(p, &[("filler", value(&format!("{name}-{i}")))], NOW_MS, Codec::None);
            }
        };
        let both = [("a", value("committed-a")), ("b", value("committed-b"))];
        append(&p, &both, NOW_MS, Codec::None);
        transaction(&p, 5, "a", "aborted-a");
        marker(&p, 5, false);
        transaction(&p, 6, "c", "committed-c");
        marker(&p, 6, true);
        filler(&p, "early");
        transaction(&p, 7, "b", "open-b");
        filler(&p, "late");
        p.flush().unwrap();
        assert!(p.segment_bases().len() > 3);

        p.clean(NOW_MS, &mut |_| {}).unwrap();
        let after = records(&p);
        let values: Vec<String> = after
            .iter()
            .filter_map(|(_, _, v)| v.as_ref().map(|v| v.split(':').next().unwrap().to_owned()))
            .collect();
        let has = |name: &str| values.iter().any(|v| v == name);
        assert!(has("committed-a"), "an aborted record superseded it: {values:?}");
        assert!(!has("aborted-a"), "an aborted record stayed: {values:?}");
        assert!(has("committed-b"), "an open transaction's record superseded it: {values:?}");
        assert!(has("open-b") && has("committed-c"), "{values:?}");
        let count = |prefix: &str| values.iter().filter(|v| v.starts_with(prefix)).count();
        assert!(count("early") < 12, "nothing cleaned below the open transaction: {values:?}");
        assert_eq!(count("late"), 12, "cleaned past the open transaction: {values:?}");
        let is_marker =
            |key: &str| [[0u8, 0, 0, 0], [0, 0, 0, 1]].iter().any(|m| key.as_bytes() == m);
        assert_eq!(after.iter().filter(|(_, key, _)| is_marker(key)).count(), 2, "markers stay");
    }

    #[test]
    fn a_crash_before_the_rename_leaves_the_old_segment() {
        let dir = tempfile::tempdir().unwrap();
        let p = Partition::open(dir.path().join("t-0"), "t", 0, compacted(1 << 10)).unwrap();
        for round in 0..10 {
            append(&p, &[("k", Some(format!("{round:0300}")))], 1_000, Codec::None);
        }
        p.flush().unwrap();
        let before = records(&p);
        drop(p);
        let leftover = dir.path().join("t-0").join(format!("{:020}{CLEANED_SUFFIX}", 0));
        std::fs::write(&leftover, b"half a cleaned segment").unwrap();
        let p = Partition::open(dir.path().join("t-0"), "t", 0, compacted(1 << 10)).unwrap();
        assert!(!leftover.exists());
        assert_eq!(records(&p), before);
    }
}
