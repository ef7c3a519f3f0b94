//! What the log's operations fail with, and the one directory fsync they share.

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LogError {
    #[error("{topic}-{partition}: offset {offset} is outside [{start}, {end}]")]
    OffsetOutOfRange { topic: String, partition: u32, offset: i64, start: u64, end: u64 },
    #[error("{context} {path}: {source}")]
    Io { context: &'static str, path: PathBuf, source: io::Error },
    /// The leader-epoch checkpoint is not one: `line` counts from 1.
    #[error("{path} line {line}: {reason}")]
    CorruptCheckpoint { path: PathBuf, line: usize, reason: String },
    #[error("{path}: cannot assign epoch {epoch} from offset {start_offset}: {reason}")]
    EpochRejected { path: PathBuf, epoch: i32, start_offset: u64, reason: String },
}

impl LogError {
    /// Whether the filesystem had no room (or the quota none) for a write.
    pub fn is_storage_full(&self) -> bool {
        matches!(self, LogError::Io { source, .. } if source.kind() == io::ErrorKind::StorageFull
            || source.kind() == io::ErrorKind::QuotaExceeded)
    }
}

pub(crate) fn io_error(context: &'static str, path: &Path) -> impl FnOnce(io::Error) -> LogError {
    let path = path.to_owned();
    move |source| LogError::Io { context, path, source }
}

/// Fsyncs a directory so that created and deleted entries survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), LogError> {
    service::durable::sync_dir(dir).map_err(io_error("syncing directory", dir))
}
