//! The on-disk cache of remote segment chunks (`remote_cache_bytes`): each chunk is a run of
//! one uploaded segment, downloaded by a ranged GET into a file of its own under
//! `{data_dir}/.remote-cache/`, and read like a segment file — by `sendfile` for a fetch. The
//! least recently read chunks go first when the cache is full; a fetch that holds one keeps
//! reading it after it is unlinked.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::log::Segment;

/// Directory of the cache under the data directory.
pub const CACHE_DIR: &str = ".remote-cache";

#[derive(Debug)]
pub struct ChunkCache {
    dir: PathBuf,
    max_bytes: u64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    chunks: Vec<Chunk>,
    bytes: u64,
    /// Counts reads: a chunk's last is its recency.
    clock: u64,
    /// Names the next chunk file.
    next_file: u64,
}

#[derive(Debug)]
struct Chunk {
    /// The uploaded segment it is part of (its objects' stem).
    stem: String,
    /// The chunk file, as a segment based at the log offset of its first byte.
    segment: Arc<Segment>,
    len: u64,
    last_read: u64,
}

impl ChunkCache {
    /// A cache in `dir` holding at most `max_bytes`; what an earlier run left there is deleted
    /// (the chunks are not indexed on disk). Blocking.
    pub fn open(dir: PathBuf, max_bytes: u64) -> io::Result<ChunkCache> {
        match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        fs::create_dir_all(&dir)?;
        Ok(ChunkCache { dir, max_bytes, state: Mutex::default() })
    }

    /// A cached chunk of segment `stem` that holds the log from `offset` to `offset + needed`.
    pub fn find(&self, stem: &str, offset: u64, needed: u64) -> Option<Arc<Segment>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.clock += 1;
        let clock = state.clock;
        let chunk = state.chunks.iter_mut().find(|c| {
            c.stem == stem
                && c.segment.base_offset <= offset
                && offset + needed <= c.segment.base_offset + c.len
        })?;
        chunk.last_read = clock;
        Some(Arc::clone(&chunk.segment))
    }

    /// Whether a chunk of segment `stem` starts at `start`.
    pub fn has(&self, stem: &str, start: u64) -> bool {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.chunks.iter().any(|c| c.stem == stem && c.segment.base_offset == start)
    }

    /// Keeps `bytes`, the log of segment `stem` from offset `start`, as a chunk, and makes room
    /// for it. Blocking: writes the chunk file.
    pub fn insert(&self, stem: &str, start: u64, bytes: &[u8]) -> io::Result<Arc<Segment>> {
        let path = {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            state.next_file += 1;
            self.dir.join(format!("{:016}.chunk", state.next_file))
        };
        let mut file = File::options().read(true).write(true).create_new(true).open(&path)?;
        file.write_all(bytes)?;
        let segment =
            Arc::new(Segment { base_offset: start, path, file, opened_at: Instant::now() });
        let len = bytes.len() as u64;
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.clock += 1;
        let last_read = state.clock;
        state.chunks.push(Chunk {
            stem: stem.to_owned(),
            segment: Arc::clone(&segment),
            len,
            last_read,
        });
        state.bytes += len;
        while state.bytes > self.max_bytes && state.chunks.len() > 1 {
            let (oldest, _) = state
                .chunks
                .iter()
                .enumerate()
                .min_by_key(|(_, c)| c.last_read)
                .expect("chunks are not empty");
            let evicted = state.chunks.swap_remove(oldest);
            state.bytes -= evicted.len;
            if let Err(e) = fs::remove_file(&evicted.segment.path) {
                tracing::warn!(path = %evicted.segment.path.display(), error = %e, "cannot delete a cached chunk");
            }
        }
        Ok(segment)
    }

    /// Bytes the cache holds.
    pub fn bytes(&self) -> u64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_found_by_range_and_the_least_recently_read_go_first() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ChunkCache::open(dir.path().join("c"), 250).unwrap();
        cache.insert("s", 1000, &[1; 100]).unwrap();
        cache.insert("s", 1100, &[2; 100]).unwrap();
        assert_eq!(cache.find("s", 1050, 50).map(|c| c.base_offset), Some(1000));
        assert!(cache.find("s", 1050, 51).is_none(), "past the chunk's end");
        assert!(cache.find("other", 1050, 10).is_none());
        // A third chunk evicts the one read least recently: the second.
        let third = cache.insert("s", 1200, &[3; 100]).unwrap();
        assert_eq!(cache.bytes(), 200);
        assert!(cache.find("s", 1100, 1).is_none());
        assert!(cache.find("s", 1000, 1).is_some());
        // A reader holding an evicted chunk still reads it.
        cache.insert("s", 1300, &[4; 100]).unwrap();
        assert!(cache.find("s", 1200, 1).is_none());
        let mut byte = [0u8; 1];
        std::os::unix::fs::FileExt::read_exact_at(&third.file, &mut byte, 99).unwrap();
        assert_eq!(byte, [3]);
    }
}
