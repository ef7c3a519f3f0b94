//! `--tail FILE=TOPIC`: follows a file of newline-delimited JSON events. The read position
//! (the file's inode and byte offset) is kept in `{spool_dir}/tail/`, written only after the
//! lines before it are durably spooled, so a restart neither skips a line nor reads one again
//! (short of a crash between the two, which duplicates, never loses). A file renamed away by
//! rotation is read to its end before the new file at the path is followed from its start —
//! also when the rotation happened while the agent was down, if the old file is still in the
//! same directory; a file truncated in place is followed from its start.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::TailSpec;
use crate::event::EventError;
use crate::metrics::Metrics;
use crate::send_error::SendError;

/// Bytes read from a file per step at most.
const CHUNK_BYTES_MAX: usize = 4 << 20;
/// Longest pause before retrying a spool that is full or a registry that is down.
const RETRY_MS_MAX: u64 = 5_000;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Position {
    inode: u64,
    offset: u64,
}

struct Open {
    file: File,
    inode: u64,
    offset: u64,
}

/// Where a tailer's lines go: the agent, which validates, encodes and spools them.
pub(crate) trait Intake: Send + Sync + 'static {
    /// Spools the valid `events` of `topic`, leaving out (and counting as rejected) the
    /// invalid ones; returns how many were accepted and the invalid ones.
    fn send_valid(
        &self,
        topic: &str,
        events: &[Value],
    ) -> impl Future<Output = Result<(usize, Vec<(usize, EventError)>), SendError>> + Send;
}

pub(crate) struct Tailer<I> {
    intake: I,
    metrics: Arc<Metrics>,
    spec: TailSpec,
    poll: Duration,
    position_path: PathBuf,
}

impl<I: Intake> Tailer<I> {
    /// A tailer of `spec` that keeps its read position under `spool_dir`.
    pub(crate) fn new(
        intake: I,
        metrics: Arc<Metrics>,
        spool_dir: &Path,
        spec: TailSpec,
        poll_ms: u64,
    ) -> Tailer<I> {
        let name: String = spec
            .file
            .to_string_lossy()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
            .collect();
        let position_path = spool_dir.join("tail").join(format!("{name}.pos"));
        Tailer { intake, metrics, spec, poll: Duration::from_millis(poll_ms), position_path }
    }

    pub(crate) async fn run(self, stop: CancellationToken) {
        let mut saved = read_position(&self.position_path, &self.spec);
        let dir = self.position_path.parent().expect("the position file is in a directory");
        if let Err(e) = tokio::fs::create_dir_all(dir).await {
            tracing::error!(dir = %dir.display(), error = %e, "cannot create the tail position directory");
        }
        let mut current: Option<Open> = None;
        let mut backoff = service::Backoff::new(self.poll, Duration::from_millis(RETRY_MS_MAX));
        loop {
            if current.is_none() {
                current = self.open(saved);
            }
            let Some(mut taken) = current.take() else {
                if !self.pause(&stop, self.poll).await {
                    return;
                }
                continue;
            };
            // File reads block: off the runtime's threads.
            let (taken, read) = tokio::task::spawn_blocking(move || {
                let read = read_lines(&mut taken);
                (taken, read)
            })
            .await
            .expect("reading a tailed file does not panic");
            let open = current.insert(taken);
            let (lines, consumed) = match read {
                Ok(read) => read,
                Err(e) => {
                    tracing::warn!(file = %self.spec.file.display(), error = %e, "cannot read a tailed file");
                    current = None;
                    if !self.pause(&stop, self.poll).await {
                        return;
                    }
                    continue;
                }
            };
            if consumed > 0 {
                if !self.ship(&lines, &stop, &mut backoff).await {
                    return; // stopped before the lines were spooled: they are read again next start
                }
                open.offset += consumed;
                saved = Position { inode: open.inode, offset: open.offset };
                // The fsyncs block: off the runtime's threads.
                let text = serde_json::to_vec(&saved).expect("a position serializes");
                if let Err(e) =
                    service::durable::write_async(self.position_path.clone(), text).await
                {
                    tracing::error!(path = %self.position_path.display(), error = %e, "cannot save the tail position");
                }
                continue;
            }
            // At the end of what is there: has the file been rotated or truncated?
            match std::fs::metadata(&self.spec.file) {
                Ok(meta) if meta.ino() != open.inode => {
                    tracing::info!(file = %self.spec.file.display(), "tailed file rotated: following the new one");
                    current = None;
                    continue;
                }
                Ok(meta) if meta.len() < open.offset => {
                    tracing::info!(file = %self.spec.file.display(), "tailed file truncated: reading from its start");
                    open.offset = 0;
                    continue;
                }
                _ => {}
            }
            if !self.pause(&stop, self.poll).await {
                return;
            }
        }
    }

    /// Sleeps `d`; false when stopped.
    async fn pause(&self, stop: &CancellationToken, d: Duration) -> bool {
        tokio::select! {
            () = stop.cancelled() => false,
            () = tokio::time::sleep(d) => true,
        }
    }

    /// Opens the file at the path, at the saved offset if it is the same file. If it is not,
    /// and the saved file was renamed away in the same directory (rotated while the agent was
    /// down) with lines left unread, that file is opened at the saved offset instead: it is
    /// read to its end before the new one is followed.
    fn open(&self, saved: Position) -> Option<Open> {
        let file = File::open(&self.spec.file).ok()?;
        let meta = file.metadata().ok()?;
        if meta.ino() == saved.inode {
            let offset = if saved.offset <= meta.len() { saved.offset } else { 0 };
            return Some(Open { file, inode: meta.ino(), offset });
        }
        if saved.inode != 0
            && let Some(rotated) = self.rotated_away(saved)
        {
            return Some(rotated);
        }
        Some(Open { file, inode: meta.ino(), offset: 0 })
    }

    /// The file of `saved.inode` beside the tailed path, if it has bytes past `saved.offset`.
    fn rotated_away(&self, saved: Position) -> Option<Open> {
        let dir = match self.spec.file.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => std::path::Path::new("."),
        };
        let entry = std::fs::read_dir(dir)
            .ok()?
            .flatten()
            .find(|entry| entry.metadata().is_ok_and(|m| m.is_file() && m.ino() == saved.inode))?;
        let file = File::open(entry.path()).ok()?;
        let meta = file.metadata().ok()?;
        if meta.ino() != saved.inode || meta.len() <= saved.offset {
            return None;
        }
        tracing::info!(file = %entry.path().display(), offset = saved.offset, "reading the rest of a tailed file rotated while the agent was down");
        Some(Open { file, inode: saved.inode, offset: saved.offset })
    }

    /// Spools `lines`, retrying while the spool is full or the registry is down; invalid
    /// lines are logged, counted and skipped. False if stopped first.
    async fn ship(
        &self,
        lines: &[String],
        stop: &CancellationToken,
        backoff: &mut service::Backoff,
    ) -> bool {
        let mut events = Vec::with_capacity(lines.len());
        for line in lines {
            match serde_json::from_str::<Value>(line) {
                Ok(event) => events.push(event),
                Err(e) => {
                    self.metrics.rejected.inc();
                    tracing::warn!(file = %self.spec.file.display(), error = %e, "skipping a line that is not JSON");
                }
            }
        }
        // Halves of a call too large for the whole spool are sent one after the other.
        let mut batches = std::collections::VecDeque::from([&events[..]]);
        while let Some(batch) = batches.pop_front() {
            loop {
                match self.intake.send_valid(&self.spec.topic, batch).await {
                    Ok((_, invalid)) => {
                        for (index, e) in invalid {
                            tracing::warn!(file = %self.spec.file.display(), index, error = %e, "skipping an invalid event");
                        }
                        backoff.reset();
                        break;
                    }
                    Err(SendError::TooLarge { .. }) if batch.len() > 1 => {
                        let (first, second) = batch.split_at(batch.len() / 2);
                        batches.push_front(second);
                        batches.push_front(first);
                        break;
                    }
                    Err(e @ SendError::TooLarge { .. }) => {
                        self.metrics.rejected.inc();
                        tracing::warn!(file = %self.spec.file.display(), error = %e, "skipping an event larger than the whole spool");
                        break;
                    }
                    Err(SendError::Invalid { source, .. }) => {
                        tracing::warn!(file = %self.spec.file.display(), error = %source, "skipping lines for a topic that cannot take them");
                        break;
                    }
                    Err(SendError::ShuttingDown) => return false,
                    Err(e) => {
                        tracing::warn!(file = %self.spec.file.display(), error = %e, "cannot spool tailed lines; retrying");
                    }
                }
                if !backoff.wait(stop).await {
                    return false;
                }
            }
        }
        true
    }
}

/// The saved position. None yet is the start of the file; one that cannot be read or parsed
/// is said in the log (the file is then read from its start: lines may be shipped again,
/// never skipped).
fn read_position(path: &std::path::Path, spec: &TailSpec) -> Position {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Position::default(),
        Err(e) => {
            tracing::error!(path = %path.display(), file = %spec.file.display(), error = %e, "cannot read the tail position; reading the file from its start");
            return Position::default();
        }
    };
    serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        tracing::error!(path = %path.display(), file = %spec.file.display(), error = %e, "the tail position is corrupt; reading the file from its start");
        Position::default()
    })
}

/// Complete lines from the offset on (at most [`CHUNK_BYTES_MAX`]) and the bytes they span;
/// blank lines are skipped. A line longer than the chunk is skipped whole.
fn read_lines(open: &mut Open) -> std::io::Result<(Vec<String>, u64)> {
    open.file.seek(SeekFrom::Start(open.offset))?;
    let mut chunk = Vec::with_capacity(64 << 10);
    (&mut open.file).take(CHUNK_BYTES_MAX as u64).read_to_end(&mut chunk)?;
    let Some(last_newline) = chunk.iter().rposition(|&b| b == b'\n') else {
        if chunk.len() == CHUNK_BYTES_MAX {
            tracing::warn!(
                bytes = chunk.len(),
                "skipping a tailed line longer than the read limit"
            );
            return Ok((Vec::new(), chunk.len() as u64));
        }
        return Ok((Vec::new(), 0));
    };
    let complete = &chunk[..=last_newline];
    let lines = complete
        .split(|&b| b == b'\n')
        .map(|line| String::from_utf8_lossy(line).trim().to_owned())
        .filter(|line| !line.is_empty())
        .collect();
    Ok((lines, complete.len() as u64))
}
