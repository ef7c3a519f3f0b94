//! What can go wrong in the spool, and the Retry-After it suggests when it is full.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a refused append suggests as Retry-After.
pub const RETRY_AFTER_MS: u64 = 1_000;

#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SpoolError {
    #[error("the spool is full ({max_bytes} bytes); retry in {retry_after_ms} ms")]
    Full { max_bytes: u64, retry_after_ms: u64 },
    /// Events that could never fit, however empty the spool: retrying cannot help.
    #[error("{bytes} bytes of events exceed the whole spool ({max_bytes} bytes)")]
    TooLarge { bytes: u64, max_bytes: u64 },
    /// The filesystem had no room for the write; nothing of it was kept, and the spool goes
    /// on (HTTP 503 with Retry-After).
    #[error("the spool's filesystem is full ({path}): retry later")]
    DiskFull { path: PathBuf },
    #[error("spool {op} {path}: {source}")]
    Io { op: &'static str, path: PathBuf, source: Arc<io::Error> },
    #[error("spool segment {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("the spool has stopped after an earlier error: {0}")]
    Failed(String),
    #[error("the spool is closed")]
    Closed,
}

impl SpoolError {
    /// Whether a write failed for want of room on the filesystem (or in the quota).
    pub(super) fn is_storage_full(&self) -> bool {
        matches!(self, SpoolError::Io { source, .. }
            if matches!(source.kind(), io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded))
    }

    pub(crate) fn io<'a>(
        op: &'static str,
        path: &'a Path,
    ) -> impl FnOnce(io::Error) -> SpoolError + 'a {
        move |source| SpoolError::Io { op, path: path.to_owned(), source: Arc::new(source) }
    }
}
