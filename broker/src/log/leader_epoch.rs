//! The leader-epoch checkpoint of one partition, `{partition dir}/leader-epoch-checkpoint`:
//! for every leader epoch the partition has seen, the offset of its first message, so that a
//! follower can learn where its log parted from the leader's (Kafka's KIP-101 and KIP-279).
//!
//! The file is text, one `epoch start_offset` line per epoch, epochs ascending and start
//! offsets non-decreasing (an epoch in which the leader wrote nothing starts where the next
//! does). Every change rewrites the whole file through [`service::durable::write`]: it is a
//! few bytes per leader change, and a crash leaves the old list or the new, never a torn one.

use std::fmt::Write as _;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::error::{LogError, io_error};

/// Name of the checkpoint in a partition's directory.
pub const LEADER_EPOCH_CHECKPOINT: &str = "leader-epoch-checkpoint";

/// Most epochs a checkpoint holds: a partition whose retained log spans more leader changes
/// than this is refused a new epoch rather than growing the file without bound.
pub const EPOCHS_MAX: usize = 100_000;

/// Longest line a valid checkpoint has: a 10-digit epoch, a space, a 20-digit offset and the
/// newline. With [`EPOCHS_MAX`] it bounds what loading reads, whatever the disk holds.
const LINE_BYTES_MAX: usize = 10 + 1 + 20 + 1;

/// One line of the checkpoint: `epoch` began at `start_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: u64,
}

/// The leader epochs of one partition, in memory and in its checkpoint. Blocking: every change
/// writes and fsyncs the file before it returns, and the in-memory list changes only once
/// that write has succeeded.
#[derive(Debug)]
pub struct LeaderEpochCache {
    path: PathBuf,
    /// Epochs ascending, start offsets non-decreasing.
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    /// Loads the checkpoint in `partition_dir`; a missing file is an empty list. A file that
    /// is not a valid checkpoint is an error naming its first bad line.
    pub fn open(partition_dir: &Path) -> Result<LeaderEpochCache, LogError> {
        let path = partition_dir.join(LEADER_EPOCH_CHECKPOINT);
        let file = match fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(LeaderEpochCache { path, entries: Vec::new() });
            }
            Err(e) => return Err(io_error("opening", &path)(e)),
        };
        // One byte past the largest valid file, so that a longer one is caught while parsing
        // (its line EPOCHS_MAX + 1 starts within what was read) without reading it all.
        let limit = (EPOCHS_MAX * LINE_BYTES_MAX + 1) as u64;
        let mut bytes = Vec::new();
        file.take(limit).read_to_end(&mut bytes).map_err(io_error("reading", &path))?;
        let entries = parse(&bytes).map_err(|(line, reason)| LogError::CorruptCheckpoint {
            path: path.clone(),
            line,
            reason,
        })?;
        Ok(LeaderEpochCache { path, entries })
    }

    /// Path of the checkpoint file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every epoch, oldest first.
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The newest epoch and where it began, if the partition has seen one.
    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// Records that `epoch` begins at `start_offset`: what a new leader does, with its log end,
    /// before it accepts a write, and a follower for each epoch its fetched data carries.
    /// The latest epoch again is ignored (whatever the offset); an older epoch, a negative one
    /// or a start below the latest epoch's is refused.
    pub fn assign(&mut self, epoch: i32, start_offset: u64) -> Result<(), LogError> {
        let rejected = |reason: String| LogError::EpochRejected {
            path: self.path.clone(),
            epoch,
            start_offset,
            reason,
        };
        if epoch < 0 {
            return Err(rejected("epochs are not negative".to_owned()));
        }
        if let Some(latest) = self.latest() {
            if epoch == latest.epoch {
                return Ok(());
            }
            if epoch < latest.epoch {
                return Err(rejected(format!("the latest epoch is {}", latest.epoch)));
            }
            if start_offset < latest.start_offset {
                return Err(rejected(format!(
                    "the latest epoch, {}, starts later, at {}",
                    latest.epoch, latest.start_offset
                )));
            }
        }
        if self.entries.len() >= EPOCHS_MAX {
            return Err(rejected(format!("the checkpoint holds {EPOCHS_MAX} epochs already")));
        }
        let mut entries = Vec::with_capacity(self.entries.len() + 1);
        entries.extend_from_slice(&self.entries);
        entries.push(EpochEntry { epoch, start_offset });
        self.replace(entries)
    }

    /// OFFSET_FOR_LEADER_EPOCH: the largest known epoch at or below `epoch` and the offset where
    /// it ends, that is the start of the epoch after it, or `log_end` (the partition's log
    /// end, at or past the latest epoch's start) for the latest epoch. `None` when `epoch` is
    /// older than every known epoch, or none is known.
    ///
    /// Two answers differ from Kafka's `endOffsetFor`: an epoch newer than the latest gets the
    /// latest and `log_end` rather than "unknown" (whether the asker is fenced is for the
    /// caller, who knows the current epoch, to decide), and an epoch older than every known one
    /// gets `None` rather than the asked epoch ending where the first known one starts.
    pub fn end_offset_for(&self, epoch: i32, log_end: u64) -> Option<(i32, u64)> {
        let after = self.entries.partition_point(|e| e.epoch <= epoch);
        let floor = self.entries[..after].last()?;
        let end = self.entries.get(after).map_or(log_end, |next| next.start_offset);
        Some((floor.epoch, end))
    }

    /// Forgets the epochs that begin at or after `offset`, after the log was truncated to it.
    pub fn truncate_from_end(&mut self, offset: u64) -> Result<(), LogError> {
        let keep = self.entries.partition_point(|e| e.start_offset < offset);
        if keep == self.entries.len() {
            return Ok(());
        }
        self.replace(self.entries[..keep].to_vec())
    }

    /// Follows the log's start up to `offset`, after retention deleted what lies before it:
    /// epochs that end at or before it are forgotten, and the one whose range holds it now
    /// starts there.
    pub fn truncate_from_start(&mut self, offset: u64) -> Result<(), LogError> {
        // Entries `..starts_by` begin at or before `offset`; the last of them holds it.
        let starts_by = self.entries.partition_point(|e| e.start_offset <= offset);
        let Some(holder) = starts_by.checked_sub(1) else {
            return Ok(()); // every epoch begins after `offset`
        };
        if holder == 0 && self.entries[0].start_offset == offset {
            return Ok(());
        }
        let mut entries = self.entries[holder..].to_vec();
        entries[0].start_offset = offset;
        self.replace(entries)
    }

    /// Writes `entries` durably, then makes them the list.
    fn replace(&mut self, entries: Vec<EpochEntry>) -> Result<(), LogError> {
        let mut text = String::with_capacity(entries.len() * LINE_BYTES_MAX);
        for e in &entries {
            // Writing to a String cannot fail.
            let _ = writeln!(text, "{} {}", e.epoch, e.start_offset);
        }
        service::durable::write(&self.path, text.as_bytes())
            .map_err(io_error("writing", &self.path))?;
        self.entries = entries;
        Ok(())
    }
}

/// The entries of a checkpoint's bytes, or the first bad line (counted from 1) and why.
fn parse(bytes: &[u8]) -> Result<Vec<EpochEntry>, (usize, String)> {
    let mut entries: Vec<EpochEntry> = Vec::new();
    for (i, line) in bytes.split_inclusive(|&b| b == b'\n').enumerate() {
        let number = i + 1;
        let bad = |reason: String| Err((number, reason));
        if entries.len() == EPOCHS_MAX {
            return bad(format!("more than {EPOCHS_MAX} epochs"));
        }
        let Some(line) = line.strip_suffix(b"\n") else {
            return bad("no newline at the end of the line".to_owned());
        };
        let Some((epoch, start_offset)) = split_fields(line) else {
            return bad("expected `epoch start_offset` (two decimal numbers)".to_owned());
        };
        let (Some(epoch), Some(start_offset)) =
            (parse_decimal::<i32>(epoch), parse_decimal(start_offset))
        else {
            return bad("a number out of range".to_owned());
        };
        if let Some(previous) = entries.last() {
            if epoch <= previous.epoch {
                return bad(format!("epoch {epoch} does not follow epoch {}", previous.epoch));
            }
            if start_offset < previous.start_offset {
                return bad(format!(
                    "start offset {start_offset} is below the previous epoch's {}",
                    previous.start_offset
                ));
            }
        }
        entries.push(EpochEntry { epoch, start_offset });
    }
    Ok(entries)
}

/// The two space-separated runs of ASCII digits of a line, if that is all it holds.
fn split_fields(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let space = line.iter().position(|&b| b == b' ')?;
    let (first, second) = (&line[..space], &line[space + 1..]);
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    (digits(first) && digits(second)).then_some((first, second))
}

/// A run of ASCII digits as a number, `None` if it does not fit.
fn parse_decimal<T: std::str::FromStr>(digits: &[u8]) -> Option<T> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(epoch: i32, start_offset: u64) -> EpochEntry {
        EpochEntry { epoch, start_offset }
    }

    /// A cache in a fresh directory holding `entries`, assigned one by one.
    fn cache_with(entries: &[(i32, u64)]) -> (tempfile::TempDir, LeaderEpochCache) {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = LeaderEpochCache::open(dir.path()).unwrap();
        for &(epoch, start_offset) in entries {
            cache.assign(epoch, start_offset).unwrap();
        }
        (dir, cache)
    }

    fn reloaded(dir: &tempfile::TempDir) -> Vec<EpochEntry> {
        LeaderEpochCache::open(dir.path()).unwrap().entries().to_vec()
    }

    #[test]
    fn a_missing_checkpoint_is_an_empty_list() {
        let (dir, cache) = cache_with(&[]);
        assert_eq!(cache.latest(), None);
        assert_eq!(cache.end_offset_for(0, 100), None);
        assert!(!dir.path().join(LEADER_EPOCH_CHECKPOINT).exists(), "opening writes nothing");
    }

    #[test]
    fn assign_appends_newer_epochs_durably_and_survives_reopen() {
        let (dir, cache) = cache_with(&[(0, 0), (2, 150), (5, 150), (7, 900)]);
        assert_eq!(cache.latest(), Some(entry(7, 900)));
        let text = fs::read_to_string(dir.path().join(LEADER_EPOCH_CHECKPOINT)).unwrap();
        assert_eq!(text, "0 0\n2 150\n5 150\n7 900\n");
        assert_eq!(reloaded(&dir), cache.entries());
        let names: Vec<_> =
            fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [LEADER_EPOCH_CHECKPOINT], "no staged copy left behind");
    }

    #[test]
    fn assign_ignores_the_latest_epoch_and_refuses_older_epochs_and_offsets() {
        let (dir, mut cache) = cache_with(&[(3, 100)]);
        cache.assign(3, 500).unwrap();
        cache.assign(3, 50).unwrap();
        assert_eq!(cache.entries(), [entry(3, 100)], "the same epoch again changes nothing");
        for (epoch, start_offset) in [(2, 200), (4, 99), (-1, 100)] {
            let err = cache.assign(epoch, start_offset).unwrap_err();
            assert!(matches!(err, LogError::EpochRejected { .. }), "{err}");
            assert!(err.to_string().contains(LEADER_EPOCH_CHECKPOINT), "{err}");
        }
        assert_eq!(reloaded(&dir), [entry(3, 100)]);
    }

    #[test]
    fn end_offset_for_answers_the_largest_epoch_at_or_below_and_where_it_ends() {
        let (_dir, cache) = cache_with(&[(1, 0), (3, 100), (4, 100), (6, 250)]);
        let log_end = 400;
        assert_eq!(cache.end_offset_for(0, log_end), None, "older than every epoch: unknown");
        assert_eq!(cache.end_offset_for(-1, log_end), None);
        assert_eq!(cache.end_offset_for(1, log_end), Some((1, 100)));
        assert_eq!(cache.end_offset_for(2, log_end), Some((1, 100)), "an epoch never seen");
        assert_eq!(cache.end_offset_for(3, log_end), Some((3, 100)), "an epoch with no data");
        assert_eq!(cache.end_offset_for(4, log_end), Some((4, 250)));
        assert_eq!(cache.end_offset_for(5, log_end), Some((4, 250)));
        assert_eq!(
            cache.end_offset_for(6, log_end),
            Some((6, 400)),
            "the latest ends at the log end"
        );
        assert_eq!(cache.end_offset_for(9, log_end), Some((6, 400)));
    }

    #[test]
    fn truncate_from_end_forgets_epochs_starting_at_or_after_the_offset() {
        let (dir, mut cache) = cache_with(&[(1, 0), (2, 100), (3, 100), (4, 300)]);
        cache.truncate_from_end(301).unwrap();
        assert_eq!(cache.latest(), Some(entry(4, 300)), "the offset is inside the latest");
        cache.truncate_from_end(100).unwrap();
        assert_eq!(cache.entries(), [entry(1, 0)]);
        assert_eq!(reloaded(&dir), [entry(1, 0)]);
        assert_eq!(cache.end_offset_for(4, 100), Some((1, 100)));
        cache.truncate_from_end(0).unwrap();
        assert_eq!(cache.entries(), []);
        assert_eq!(reloaded(&dir), []);
        cache.assign(5, 0).unwrap();
        assert_eq!(reloaded(&dir), [entry(5, 0)], "a new epoch after truncation");
    }

    #[test]
    fn truncate_from_start_moves_the_epoch_holding_the_offset_up_to_it() {
        let (dir, mut cache) = cache_with(&[(1, 10), (2, 100), (3, 100), (4, 300)]);
        cache.truncate_from_start(5).unwrap();
        assert_eq!(cache.entries()[0], entry(1, 10), "every epoch starts after the offset");
        cache.truncate_from_start(50).unwrap();
        assert_eq!(cache.entries(), [entry(1, 50), entry(2, 100), entry(3, 100), entry(4, 300)]);
        cache.truncate_from_start(100).unwrap();
        assert_eq!(cache.entries(), [entry(3, 100), entry(4, 300)], "empty epoch 2 goes too");
        cache.truncate_from_start(1_000).unwrap();
        assert_eq!(cache.entries(), [entry(4, 1_000)], "the latest is never forgotten");
        assert_eq!(reloaded(&dir), [entry(4, 1_000)]);
    }

    #[test]
    fn a_corrupt_checkpoint_is_an_error_naming_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LEADER_EPOCH_CHECKPOINT);
        let cases: [(&[u8], usize, &str); 9] = [
            (b"0 0\n1 x\n", 2, "two decimal numbers"),
            (b"0 0\n\n", 2, "two decimal numbers"),
            (b"0 0 0\n", 1, "two decimal numbers"),
            (b"-1 0\n", 1, "two decimal numbers"),
            (b"0 0\n1 5", 2, "no newline"),
            (b"0 0\n2 5\n2 9\n", 3, "does not follow"),
            (b"0 50\n1 40\n", 2, "below the previous"),
            (b"2147483648 0\n", 1, "out of range"),
            (b"\xff\xfe\n", 1, "two decimal numbers"),
        ];
        for (bytes, line, reason) in cases {
            fs::write(&path, bytes).unwrap();
            let err = LeaderEpochCache::open(dir.path()).unwrap_err();
            let LogError::CorruptCheckpoint { path: p, line: l, .. } = &err else {
                panic!("{err}");
            };
            assert_eq!((p, *l), (&path, line), "{err}");
            assert!(err.to_string().contains(reason), "{err}");
        }
    }

    #[test]
    fn a_checkpoint_of_more_than_epochs_max_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::new();
        for epoch in 0..=EPOCHS_MAX {
            let _ = writeln!(text, "{epoch} {epoch}");
        }
        fs::write(dir.path().join(LEADER_EPOCH_CHECKPOINT), text).unwrap();
        let err = LeaderEpochCache::open(dir.path()).unwrap_err();
        assert!(
            matches!(err, LogError::CorruptCheckpoint { line, .. } if line == EPOCHS_MAX + 1),
            "{err}"
        );
    }

    #[test]
    fn a_failed_write_leaves_the_list_unchanged() {
        let (dir, mut cache) = cache_with(&[(1, 0)]);
        // A directory where the staged copy would go makes the durable write fail.
        let staged = format!("{LEADER_EPOCH_CHECKPOINT}{}", service::durable::STAGED_SUFFIX);
        fs::create_dir(dir.path().join(staged)).unwrap();
        assert!(matches!(cache.assign(2, 10), Err(LogError::Io { .. })));
        assert!(matches!(cache.truncate_from_end(0), Err(LogError::Io { .. })));
        assert_eq!(cache.entries(), [entry(1, 0)]);
        assert_eq!(reloaded(&dir), [entry(1, 0)]);
    }
}
