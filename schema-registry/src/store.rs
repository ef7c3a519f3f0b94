//! The durable log behind the registry: every change is one record appended to
//! `{data_dir}/registry.log` and fsynced before the change is acknowledged. On start the log is
//! replayed; a torn or corrupt tail (a crash mid-append) is cut off and logged.
//!
//! A frame is `u32 length | u32 crc | payload`, big-endian: `length` counts the payload bytes,
//! `crc` is CRC-32 (IEEE) of the payload, and the payload is one [`Record`] as JSON.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::compatibility::CompatibilityLevel;

/// Name of the log file inside the data directory.
pub const LOG_FILE_NAME: &str = "registry.log";
/// Bytes before each payload: length and CRC.
pub const FRAME_HEADER_BYTES: usize = 8;
/// Largest payload a frame may hold. A length field above it is corruption, never an
/// allocation.
pub const RECORD_BYTES_MAX: usize = 64 * 1024 * 1024;

/// One change to the registry. Replaying all records in order rebuilds its state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Record {
    /// `schema` (canonical text) is version `version` of `subject`, with global id `id`.
    Register {
        subject: String,
        version: i32,
        id: i32,
        schema: String,
    },
    DeleteVersion {
        subject: String,
        version: i32,
        permanent: bool,
    },
    DeleteSubject {
        subject: String,
        permanent: bool,
    },
    SetGlobalLevel {
        level: CompatibilityLevel,
    },
    /// `None` removes the subject's own level, so the global level applies again.
    SetSubjectLevel {
        subject: String,
        level: Option<CompatibilityLevel>,
    },
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "{path}: the record at byte {offset} passed its checksum but does not decode: {source}"
    )]
    Undecodable { path: PathBuf, offset: usize, source: serde_json::Error },
    #[error("cannot encode a record: {0}")]
    Encode(serde_json::Error),
    #[error("a record of {0} bytes exceeds the limit of {RECORD_BYTES_MAX} bytes")]
    RecordTooLarge(usize),
    #[error("{0}: an earlier write or fsync failed; restart the registry to recover the log")]
    Failed(PathBuf),
    #[error("{0}: another registry process has this log open")]
    Locked(PathBuf),
    #[error("the store's I/O thread stopped: {0}")]
    Background(String),
}

/// The open log. Appends are serialised by the caller; the mutex only hands the file to the
/// blocking thread that writes it.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    writer: Arc<Mutex<LogWriter>>,
}

#[derive(Debug)]
struct LogWriter {
    /// Exclusively locked while open: two processes appending to one log would interleave
    /// their frames. The kernel drops the lock when the process dies, even by `kill -9`.
    file: Flock<File>,
    /// Set after a failed write or fsync: what reached the disk is then unknown, so no later
    /// record may be appended behind it until a restart has re-validated the tail.
    failed: bool,
}

impl Store {
    /// Opens (creating if needed) the log in `dir` and returns it with every valid record.
    pub async fn open(dir: &Path) -> Result<(Store, Vec<Record>), StoreError> {
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || open_blocking(&dir))
            .await
            .map_err(|e| StoreError::Background(e.to_string()))?
    }

    /// Appends `record` and returns once it is fsynced.
    pub async fn append(&self, record: &Record) -> Result<(), StoreError> {
        let payload = serde_json::to_vec(record).map_err(StoreError::Encode)?;
        if payload.len() > RECORD_BYTES_MAX {
            return Err(StoreError::RecordTooLarge(payload.len()));
        }
        let frame = encode_frame(&payload);
        let writer = Arc::clone(&self.writer);
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let mut writer = writer.lock().unwrap_or_else(PoisonError::into_inner);
            if writer.failed {
                return Err(StoreError::Failed(path));
            }
            let written = writer.file.write_all(&frame).and_then(|()| writer.file.sync_data());
            written.map_err(|source| {
                writer.failed = true;
                StoreError::Io { path, source }
            })
        })
        .await
        .map_err(|e| StoreError::Background(e.to_string()))?
    }
}

fn open_blocking(dir: &Path) -> Result<(Store, Vec<Record>), StoreError> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| StoreError::Io { path, source }
    };
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let path = dir.join(LOG_FILE_NAME);
    let existed = path.exists();
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(&path)
        .map_err(io_err(&path))?;
    let mut file =
        Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| match errno {
            Errno::EWOULDBLOCK => StoreError::Locked(path.clone()),
            _ => StoreError::Io { path: path.clone(), source: errno.into() },
        })?;
    if !existed {
        // The new file's directory entry must be durable before any record in it is.
        service::durable::sync_dir(dir).map_err(io_err(dir))?;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(io_err(&path))?;

    let scan = scan_frames(&bytes);
    if let Some(problem) = scan.tail_problem {
        tracing::warn!(
            path = %path.display(),
            valid_bytes = scan.valid_bytes,
            dropped_bytes = bytes.len() - scan.valid_bytes,
            "dropping the log's tail: {problem}"
        );
        file.set_len(scan.valid_bytes as u64)
            .and_then(|()| file.sync_all())
            .map_err(io_err(&path))?;
    }
    let records = scan
        .frames
        .iter()
        .map(|&(offset, payload)| {
            serde_json::from_slice(payload).map_err(|source| StoreError::Undecodable {
                path: path.clone(),
                offset,
                source,
            })
        })
        .collect::<Result<Vec<Record>, _>>()?;
    tracing::info!(path = %path.display(), records = records.len(), "replayed the registry log");
    let store = Store { path, writer: Arc::new(Mutex::new(LogWriter { file, failed: false })) };
    Ok((store, records))
}

/// Frames `payload` for the log.
pub fn encode_frame(payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len());
    // The caller bounds payloads at RECORD_BYTES_MAX, far below u32::MAX.
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(&crc32fast::hash(payload).to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// The valid prefix of a log: its frames' payloads (with their byte offsets), where the prefix
/// ends, and why the rest (if any) is not valid.
#[derive(Debug, PartialEq, Eq)]
pub struct Scan<'a> {
    pub frames: Vec<(usize, &'a [u8])>,
    pub valid_bytes: usize,
    pub tail_problem: Option<&'static str>,
}

/// Reads frames from the start of `bytes` up to the first one that is torn or corrupt.
pub fn scan_frames(bytes: &[u8]) -> Scan<'_> {
    let mut frames = Vec::new();
    let mut offset = 0;
    let tail_problem = loop {
        let rest = &bytes[offset..];
        if rest.is_empty() {
            break None;
        }
        let Some((header, body)) = rest.split_first_chunk::<FRAME_HEADER_BYTES>() else {
            break Some("torn frame header");
        };
        let [l0, l1, l2, l3, c0, c1, c2, c3] = *header;
        let length = u32::from_be_bytes([l0, l1, l2, l3]) as usize;
        let crc = u32::from_be_bytes([c0, c1, c2, c3]);
        if length > RECORD_BYTES_MAX {
            break Some("frame length above the record limit");
        }
        let Some(payload) = body.get(..length) else {
            break Some("torn frame payload");
        };
        if crc32fast::hash(payload) != crc {
            break Some("frame checksum mismatch");
        }
        frames.push((offset + FRAME_HEADER_BYTES, payload));
        offset += FRAME_HEADER_BYTES + length;
    };
    Scan { frames, valid_bytes: offset, tail_problem }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn frames_round_trip(payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..8)) {
            let log: Vec<u8> = payloads.iter().flat_map(|p| encode_frame(p)).collect();
            let scan = scan_frames(&log);
            prop_assert_eq!(scan.tail_problem, None);
            prop_assert_eq!(scan.valid_bytes, log.len());
            let read: Vec<&[u8]> = scan.frames.iter().map(|&(_, p)| p).collect();
            prop_assert_eq!(read, payloads.iter().map(Vec::as_slice).collect::<Vec<_>>());
        }

        #[test]
        fn any_cut_keeps_exactly_the_whole_frames_before_it(
            payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 1..8),
            cut_seed in any::<usize>(),
        ) {
            let log: Vec<u8> = payloads.iter().flat_map(|p| encode_frame(p)).collect();
            let cut = cut_seed % (log.len() + 1);
            let scan = scan_frames(&log[..cut]);
            let mut whole = 0;
            let mut end = 0;
            for p in &payloads {
                if end + FRAME_HEADER_BYTES + p.len() > cut { break; }
                end += FRAME_HEADER_BYTES + p.len();
                whole += 1;
            }
            prop_assert_eq!(scan.frames.len(), whole);
            prop_assert_eq!(scan.valid_bytes, end);
            prop_assert_eq!(scan.tail_problem.is_some(), end != cut);
        }

        #[test]
        fn a_flipped_bit_is_never_read_as_data(
            payload in prop::collection::vec(any::<u8>(), 1..64),
            bit in any::<usize>(),
        ) {
            let mut log = encode_frame(&payload);
            let bit = bit % (log.len() * 8);
            log[bit / 8] ^= 1 << (bit % 8);
            let scan = scan_frames(&log);
            prop_assert!(scan.frames.iter().all(|&(_, p)| p == payload.as_slice()));
        }
    }

    #[test]
    fn a_huge_length_field_is_corruption_not_an_allocation() {
        let mut log = encode_frame(b"ok");
        log.extend_from_slice(&u32::MAX.to_be_bytes());
        log.extend_from_slice(&[0; 4]);
        let scan = scan_frames(&log);
        assert_eq!(scan.frames.len(), 1);
        assert_eq!(scan.tail_problem, Some("frame length above the record limit"));
    }
}
