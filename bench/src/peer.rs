//! What the benchmark needs of a messaging system: start it on loopback with a data
//! directory, open one producer and one consumer on a named stream (topic, queue, subject),
//! and stop it. Every system — Tributary and each peer — implements these traits once, and
//! every workload runs unchanged against all of them.

use std::path::Path;

use async_trait::async_trait;
use bytes::Bytes;

/// A benchmark error: what failed, in a sentence for the report.
pub type BenchResult<T> = Result<T, anyhow::Error>;

/// How to start one system.
#[async_trait]
pub trait Launcher: Send + Sync {
    /// Short name used by `--systems` and in the report (e.g. `tributary`, `redis`).
    fn name(&self) -> &'static str;

    /// What the report says about its configuration: version, durability, batching.
    fn describe(&self) -> String;

    /// Starts the system on 127.0.0.1 with its data under `dir` and waits until it serves.
    /// An error here (not installed, failed to start) skips the system, and the report says
    /// why.
    async fn start(&self, dir: &Path) -> BenchResult<Box<dyn Running>>;
}

/// A started system. Dropping it must not leave a process behind; `stop` is the clean way.
#[async_trait]
pub trait Running: Send + Sync {
    /// A producer on `stream`, creating the stream (durable/persistent) if needed.
    async fn producer(&self, stream: &str) -> BenchResult<Box<dyn Producer>>;

    /// A consumer that reads `stream` from its beginning.
    async fn consumer(&self, stream: &str) -> BenchResult<Box<dyn Consumer>>;

    /// Bytes the system keeps on disk under its data directory.
    fn disk_bytes(&self) -> BenchResult<u64>;

    /// Stops the system by its pid and waits for it to exit.
    async fn stop(self: Box<Self>) -> BenchResult<()>;
}

/// Sends messages. `send` may return before the system has acknowledged them (requests in
/// flight, up to a bound of the implementation's choosing); `flush` waits for every
/// acknowledgement. Durability is the system's documented "persistent, no fsync per message".
#[async_trait]
pub trait Producer: Send {
    /// Sends `messages` as one request (one message: the unbatched mode; 50: the batch mode,
    /// in the system's own best batching).
    async fn send(&mut self, messages: &[Bytes]) -> BenchResult<()>;

    /// Waits until every message sent so far is acknowledged.
    async fn flush(&mut self) -> BenchResult<()>;
}

/// Receives messages in order from the start of the stream.
#[async_trait]
pub trait Consumer: Send {
    /// The next messages available, waiting up to about 100 ms for at least one; an empty
    /// vector means none arrived in that time.
    async fn receive(&mut self) -> BenchResult<Vec<Bytes>>;
}

/// Sum of file sizes under `dir`.
pub fn dir_bytes(dir: &Path) -> BenchResult<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() { dir_bytes(&entry.path())? } else { meta.len() };
    }
    Ok(total)
}
