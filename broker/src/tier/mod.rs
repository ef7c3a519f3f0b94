//! Tiered storage (docs/design.md, "Tiered storage"): the leader of a tiered topic's partition
//! uploads each sealed, committed segment with its index (and the producer snapshot taken at
//! its end) to the object store, and its
//! manifest entry after the upload is verified (`upload`); every replica reads the manifest so
//! that local retention deletes only what the store holds; fetches below the local log start,
//! on either protocol, are served from the store through an on-disk cache of chunks
//! (`cache`), as slices of files like any other.
//!
//! It stands on the log (what to upload, where the local log starts) and the replicas (which
//! partitions this broker leads); the node asks it for what lies below the local log.

mod cache;
mod manifest;
pub mod upload;

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, StreamExt};
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::config::BrokerConfig;
use crate::log::index::{self, INDEX_INTERVAL_BYTES, IndexEntry};
use crate::log::producers::{self, History};
use crate::log::{FileSlice, Partition, Segment};
use crate::replication::ProducerHistory;
use cache::ChunkCache;
pub use manifest::Run;
use manifest::{Manifest, RemoteSegment, entry_stem, partition_dir};

/// Remote segments are read in chunks of this many bytes from their base, each with the bytes
/// after it that a reader may need to finish a message or a scan that starts in it.
const CHUNK_BYTES: u64 = 16 << 20;
/// Indexes of remote segments kept in memory.
const INDEXES_MAX: usize = 64;
/// Bytes of a message's length field and its header.
const MESSAGE_OVERHEAD: u64 = 12;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TierError {
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    #[error("remote segment cache: {0}")]
    Cache(#[from] std::io::Error),
    #[error("remote segment {stem}: {reason}")]
    Corrupt { stem: String, reason: String },
    #[error("a blocking task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error(transparent)]
    Download(Arc<TierError>),
}

/// A chunk download that several readers may wait for.
type Download = Shared<BoxFuture<'static, Result<Arc<Segment>, Arc<TierError>>>>;

/// A download of `[start, end)` of the segment `stem`, under way.
struct UnderWay {
    stem: String,
    start: u64,
    end: u64,
    download: Download,
}

/// One partition's manifest here, and whether it has been read from the store yet.
#[derive(Debug, Default)]
struct Known {
    manifest: Manifest,
    loaded: bool,
}

pub struct RemoteTier {
    store: Arc<dyn ObjectStore>,
    cache: Arc<ChunkCache>,
    /// Per partition (topic, index).
    manifests: Mutex<HashMap<(String, u32), Known>>,
    /// Held by whoever writes to the store — a pass of the upload task over a partition, a
    /// scrub's repair — so that no pass reads the manifest in the middle of another's change
    /// (and uploads a segment a repair is uploading too). Readers never take it.
    writing: tokio::sync::Mutex<()>,
    /// Chunks being downloaded: a reader that needs one waits for it rather than downloading
    /// it again.
    downloads: Arc<Mutex<Vec<UnderWay>>>,
    /// Entries of remote indexes read lately, by stem.
    indexes: Mutex<Vec<(String, Arc<Vec<IndexEntry>>)>>,
    max_message_bytes: u32,
}

impl ProducerHistory for RemoteTier {
    fn producers_at<'a>(
        &'a self,
        partition: &'a Partition,
        end: u64,
    ) -> BoxFuture<'a, Result<Option<History>, String>> {
        async move { RemoteTier::producers_at(self, partition, end).await.map_err(|e| e.to_string()) }
            .boxed()
    }
}

impl std::fmt::Debug for RemoteTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RemoteTier({})", self.store)
    }
}

impl RemoteTier {
    /// The tier of `config`'s `remote_store`, if it names one. Blocking: clears the cache.
    pub fn open(config: &BrokerConfig) -> Result<Option<RemoteTier>, TierOpenError> {
        let Some(url) = &config.remote_store else { return Ok(None) };
        let store = service::store::store_from_url(url)?;
        let cache =
            ChunkCache::open(config.data_dir.join(cache::CACHE_DIR), config.remote_cache_bytes)
                .map_err(TierOpenError::Cache)?;
        Ok(Some(RemoteTier {
            store,
            cache: Arc::new(cache),
            manifests: Mutex::default(),
            writing: tokio::sync::Mutex::new(()),
            downloads: Arc::default(),
            indexes: Mutex::default(),
            max_message_bytes: config.max_message_bytes,
        }))
    }

    fn manifests(&self) -> MutexGuard<'_, HashMap<(String, u32), Known>> {
        self.manifests.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn key(partition: &Partition) -> (String, u32) {
        (partition.topic().to_owned(), partition.index())
    }

    /// Reads the partition's manifest from the store: new entries are fetched, entries gone
    /// from the store are forgotten. Then tells the partition how far the store holds its log.
    pub async fn sync(&self, partition: &Partition) -> Result<(), TierError> {
        let dir = partition_dir(partition.topic(), partition.index());
        let prefix = StorePath::from(format!("{dir}/manifest"));
        let listed: Vec<_> = self.store.list(Some(&prefix)).collect().await;
        let mut stems = Vec::new();
        for meta in listed {
            let meta = meta?;
            if let Some(stem) = entry_stem(&meta.location) {
                stems.push((stem.to_owned(), meta.location));
            }
        }
        let known: Vec<String> = {
            let manifests = self.manifests();
            let known = manifests.get(&Self::key(partition));
            known
                .map(|k| k.manifest.segments().map(RemoteSegment::stem).collect())
                .unwrap_or_default()
        };
        let mut fresh = Vec::new();
        for (stem, path) in &stems {
            if known.contains(stem) {
                continue;
            }
            let bytes = self.store.get(path).await?.bytes().await?;
            match serde_json::from_slice::<RemoteSegment>(&bytes) {
                Ok(entry) if entry.stem() == *stem => fresh.push(entry),
                Ok(_) | Err(_) => {
                    tracing::warn!(entry = %path, "a remote manifest entry does not read as its name says; ignoring it")
                }
            }
        }
        let mut manifests = self.manifests();
        let known = manifests.entry(Self::key(partition)).or_default();
        let gone: Vec<u64> = known
            .manifest
            .segments()
            .filter(|s| !stems.iter().any(|(stem, _)| *stem == s.stem()))
            .map(|s| s.base)
            .collect();
        for base in gone {
            known.manifest.remove(base);
        }
        for entry in fresh {
            known.manifest.insert(entry);
        }
        known.loaded = true;
        let run = known.manifest.run_reaching(partition.first_segment_base());
        partition.set_remote_end(run.map_or(0, |r| r.end));
        Ok(())
    }

    /// The idempotent producers' batches as the leader knew them at byte `end` of
    /// `partition`: the producer snapshot uploaded with the remote segment ending there (the
    /// manifest read afresh first). `None` if no segment ends there or its leader had no
    /// snapshot (no idempotent producer had written to the partition yet).
    pub async fn producers_at(
        &self,
        partition: &Partition,
        end: u64,
    ) -> Result<Option<History>, TierError> {
        self.sync(partition).await?;
        let segment = self.manifest(partition).await?.segments().find(|s| s.end == end).cloned();
        let Some(segment) = segment.filter(|s| s.producers_size.is_some()) else {
            return Ok(None);
        };
        let dir = partition_dir(partition.topic(), partition.index());
        let bytes = self.store.get(&segment.producers_path(&dir)).await?.bytes().await?;
        let decoded = std::str::from_utf8(&bytes).ok().and_then(producers::decode_snapshot);
        match decoded {
            Some(batches) => Ok(Some(batches)),
            None => Err(corrupt(&segment, "its producer snapshot does not parse")),
        }
    }

    /// The manifest of `partition` here (read from the store first if it has not been).
    async fn manifest(&self, partition: &Partition) -> Result<Manifest, TierError> {
        let loaded = self.manifests().get(&Self::key(partition)).is_some_and(|k| k.loaded);
        if !loaded {
            self.sync(partition).await?;
        }
        Ok(self
            .manifests()
            .get(&Self::key(partition))
            .map(|k| k.manifest.clone())
            .unwrap_or_default())
    }

    /// What readers may read of `partition` from the store: the run of uploaded segments that
    /// reaches its first segment on disk, from the record DeleteRecords moved the start to if
    /// that is later. `None` when the store holds nothing readable below the local log.
    pub async fn below_local(&self, partition: &Partition) -> Result<Option<Run>, TierError> {
        let base = partition.first_segment_base();
        let manifest = self.manifest(partition).await?;
        let Some(mut run) = manifest.run_reaching(base).filter(|r| r.start < base) else {
            return Ok(None);
        };
        let wanted = partition.start_wanted();
        if wanted > run.start_record {
            if wanted >= partition.start_record() {
                return Ok(None);
            }
            let Some(segment) = manifest.holding_record(wanted) else { return Ok(None) };
            let dir = partition_dir(partition.topic(), partition.index());
            let Some((byte, _)) = self.locate_in(&dir, segment, wanted).await? else {
                return Ok(None);
            };
            run = Run { start: byte, start_record: wanted, ..run };
        }
        Ok(Some(run))
    }

    /// The remote segment holding byte `offset` below the local log, readable (in the run
    /// [`RemoteTier::below_local`] answers), and the directory of its objects.
    async fn holding_byte(
        &self,
        partition: &Partition,
        offset: u64,
    ) -> Result<Option<(RemoteSegment, String)>, TierError> {
        let Some(run) = self.below_local(partition).await? else { return Ok(None) };
        if offset < run.start || offset >= partition.first_segment_base() {
            return Ok(None);
        }
        let manifest = self.manifest(partition).await?;
        let dir = partition_dir(partition.topic(), partition.index());
        Ok(manifest.holding_byte(offset).cloned().map(|segment| (segment, dir)))
    }

    /// Up to `max_bytes` of the log from byte `offset`, below the local log start, within one
    /// remote segment: a slice of a cached chunk (the first message whole, if `max_bytes`
    /// holds it). `None` when the store does not hold `offset` below the local log.
    pub async fn read(
        &self,
        partition: &Partition,
        offset: u64,
        max_bytes: u32,
    ) -> Result<Option<FileSlice>, TierError> {
        let Some((segment, dir)) = self.holding_byte(partition, offset).await? else {
            return Ok(None);
        };
        let segment = &segment;
        // Enough for the first message whole, if the fetch asks for that much: its length if a
        // cached chunk has it, else the longest a message may be.
        let first = match self.cache.find(&segment.stem(), offset, 4) {
            Some(chunk) => {
                let mut length = [0u8; 4];
                chunk.file.read_exact_at(&mut length, offset - chunk.base_offset)?;
                4 + u64::from(u32::from_be_bytes(length))
            }
            None => u64::from(self.max_message_bytes) + MESSAGE_OVERHEAD,
        };
        let needed = u64::from(max_bytes).min(first).min(segment.end - offset);
        let chunk = self.chunk(&dir, segment, offset, needed).await?;
        let chunk_end = chunk.base_offset + chunk.file_len()?;
        let len = (chunk_end - offset).min(u64::from(max_bytes));
        Ok(Some(FileSlice { position: offset - chunk.base_offset, len, segment: chunk }))
    }

    /// The message holding record `record` below the local log start: its byte offset and the
    /// number of its first record. `None` when the store does not hold it below the local log.
    pub async fn locate_record(
        &self,
        partition: &Partition,
        record: u64,
    ) -> Result<Option<(u64, u64)>, TierError> {
        let Some(run) = self.below_local(partition).await? else { return Ok(None) };
        if record < run.start_record {
            return Ok(None);
        }
        let manifest = self.manifest(partition).await?;
        let Some(segment) = manifest.holding_record(record) else { return Ok(None) };
        if segment.base >= partition.first_segment_base() {
            return Ok(None);
        }
        let dir = partition_dir(partition.topic(), partition.index());
        self.locate_in(&dir, segment, record).await
    }

    /// `OFFSETS` by time for the part of the log in the store: the base offsets of the readable
    /// remote segments below the local log whose files were last written at or before
    /// `time_ms`, newest first, at most `max_number`.
    pub async fn segments_before(
        &self,
        partition: &Partition,
        time_ms: i64,
        max_number: usize,
    ) -> Result<Vec<i64>, TierError> {
        let Some(run) = self.below_local(partition).await? else { return Ok(Vec::new()) };
        let local = partition.first_segment_base();
        let manifest = self.manifest(partition).await?;
        let mut bases: Vec<i64> = manifest
            .segments()
            .filter(|s| s.end > run.start && s.base < local && s.modified_ms <= time_ms)
            .map(|s| s.base.max(run.start) as i64)
            .collect();
        bases.reverse();
        bases.truncate(max_number);
        Ok(bases)
    }

    /// The first record below the local log whose timestamp is `time_ms` or later, and that
    /// timestamp: Kafka's ListOffsets by time for the part of the log in the store. Each
    /// segment's manifest entry says its latest time, its index where in it the search begins
    /// (as [`Partition::find_time`] does on disk); a segment of Tributary's own messages, which
    /// carry no time, counts as written at its file's modification time and answers its first
    /// record. `None` when nothing in the store is that recent.
    pub async fn find_time(
        &self,
        partition: &Partition,
        time_ms: i64,
    ) -> Result<Option<(u64, i64)>, TierError> {
        let Some(run) = self.below_local(partition).await? else { return Ok(None) };
        let local = partition.first_segment_base();
        let manifest = self.manifest(partition).await?;
        let dir = partition_dir(partition.topic(), partition.index());
        let segments = manifest.segments().filter(|s| s.end > run.start && s.base < local);
        for segment in segments {
            if segment.max_time == index::NO_TIME {
                if segment.modified_ms >= time_ms {
                    return Ok(Some((segment.first_record.max(run.start_record), index::NO_TIME)));
                }
                continue;
            }
            if segment.max_time < time_ms {
                continue;
            }
            let entries = self.index_of(&dir, segment).await?;
            let from = entries[entries.partition_point(|e| e.time < time_ms).saturating_sub(1)];
            let (chunk, end) = self.scan_chunk(&dir, segment, from.byte).await?;
            let max = self.max_message_bytes;
            let found = tokio::task::spawn_blocking(move || {
                index::find_time(&chunk.file, chunk.base_offset, end, from, time_ms, max)
            })
            .await??;
            if let Some((record, time)) = found {
                return Ok(Some((record.max(run.start_record), time)));
            }
        }
        Ok(None)
    }

    /// The message of `segment` holding record `record`: its byte offset and the number of its
    /// first record.
    async fn locate_in(
        &self,
        dir: &str,
        segment: &RemoteSegment,
        record: u64,
    ) -> Result<Option<(u64, u64)>, TierError> {
        let entries = self.index_of(dir, segment).await?;
        let from = entries[entries.partition_point(|e| e.record <= record).saturating_sub(1)];
        let (chunk, end) = self.scan_chunk(dir, segment, from.byte).await?;
        let max = self.max_message_bytes;
        let found = tokio::task::spawn_blocking(move || {
            index::locate(&chunk.file, chunk.base_offset, end, from, record, max)
        })
        .await??;
        Ok(found)
    }

    /// The number of the record at byte `offset` below the local log start (a message
    /// boundary). `None` when the store does not hold it below the local log.
    pub async fn record_at_offset(
        &self,
        partition: &Partition,
        offset: u64,
    ) -> Result<Option<u64>, TierError> {
        let Some((segment, dir)) = self.holding_byte(partition, offset).await? else {
            return Ok(None);
        };
        let segment = &segment;
        let entries = self.index_of(&dir, segment).await?;
        let from = entries[entries.partition_point(|e| e.byte <= offset).saturating_sub(1)];
        let (chunk, end) = self.scan_chunk(&dir, segment, from.byte).await?;
        if offset > end {
            return Err(corrupt(segment, "an index entry is further than a chunk from its byte"));
        }
        let max = self.max_message_bytes;
        let entry = tokio::task::spawn_blocking(move || {
            index::entry_at_offset(&chunk.file, chunk.base_offset, from, offset, max)
        })
        .await??;
        Ok(Some(entry.record))
    }

    /// A chunk from byte `from` (an index entry) long enough to scan to any record the entry
    /// leads to, and where the chunk ends.
    async fn scan_chunk(
        &self,
        dir: &str,
        segment: &RemoteSegment,
        from: u64,
    ) -> Result<(Arc<Segment>, u64), TierError> {
        let message_max = u64::from(self.max_message_bytes) + MESSAGE_OVERHEAD;
        let needed = (INDEX_INTERVAL_BYTES + 2 * message_max).min(segment.end - from);
        let chunk = self.chunk(dir, segment, from, needed).await?;
        let end = chunk.base_offset + chunk.file_len()?;
        Ok((chunk, end.min(segment.end)))
    }

    /// A cached chunk of `segment` holding `[offset, offset + needed)` (`needed` at most
    /// [`RemoteTier::overlap`]): from the cache, or a download already under way, or a new one.
    /// Chunks are aligned — chunk `k` is `[base + k·CHUNK, base + (k+1)·CHUNK + overlap)` — so
    /// that readers at any offset share them, and each chunk a reader gets starts the download
    /// of the next (read-ahead: a consumer reading on finds it cached or on its way).
    async fn chunk(
        &self,
        dir: &str,
        segment: &RemoteSegment,
        offset: u64,
        needed: u64,
    ) -> Result<Arc<Segment>, TierError> {
        let stem = segment.stem();
        let start = segment.base + (offset - segment.base) / CHUNK_BYTES * CHUNK_BYTES;
        let chunk = match self.cache.find(&stem, offset, needed) {
            Some(chunk) => chunk,
            None => {
                let end = segment.end.min(start + CHUNK_BYTES + self.overlap());
                self.download(dir, segment, start, end).await.map_err(TierError::Download)?
            }
        };
        let next = start + CHUNK_BYTES;
        if next < segment.end && !self.cache.has(&stem, next) {
            let end = segment.end.min(next + CHUNK_BYTES + self.overlap());
            let download = self.download(dir, segment, next, end);
            tokio::spawn(async move {
                // A failed read-ahead costs nothing: the reader downloads the chunk itself.
                let _ = download.await;
            });
        }
        Ok(chunk)
    }

    /// Bytes a chunk holds past its own [`CHUNK_BYTES`]: enough for a message that starts in it
    /// (or an index scan: [`INDEX_INTERVAL_BYTES`] and two messages) to end in it.
    fn overlap(&self) -> u64 {
        2 * (u64::from(self.max_message_bytes) + MESSAGE_OVERHEAD) + 2 * INDEX_INTERVAL_BYTES
    }

    /// The download of `[start, end)` of `segment` into the cache: one under way that holds
    /// it, or a new one.
    fn download(&self, dir: &str, segment: &RemoteSegment, start: u64, end: u64) -> Download {
        let stem = segment.stem();
        let mut downloads = self.downloads.lock().unwrap_or_else(|p| p.into_inner());
        let under_way =
            downloads.iter().find(|d| d.stem == stem && d.start <= start && end <= d.end);
        if let Some(under_way) = under_way {
            return under_way.download.clone();
        }
        let (store, cache, all) =
            (Arc::clone(&self.store), Arc::clone(&self.cache), Arc::clone(&self.downloads));
        let (path, base, key) = (segment.data_path(dir), segment.base, stem.clone());
        let download = async move {
            let fetched = async {
                let bytes = store.get_range(&path, (start - base)..(end - base)).await?;
                if bytes.len() as u64 != end - start {
                    return Err(TierError::Corrupt {
                        stem: key.clone(),
                        reason: "the store answered a range of another length".into(),
                    });
                }
                let stem = key.clone();
                Ok(tokio::task::spawn_blocking(move || cache.insert(&stem, start, &bytes))
                    .await??)
            };
            let result = fetched.await.map_err(Arc::new);
            let mut downloads = all.lock().unwrap_or_else(|p| p.into_inner());
            downloads.retain(|d| !(d.stem == key && d.start == start));
            result
        }
        .boxed()
        .shared();
        downloads.push(UnderWay { stem, start, end, download: download.clone() });
        download
    }

    /// The entries of `segment`'s index, from memory or the store.
    async fn index_of(
        &self,
        dir: &str,
        segment: &RemoteSegment,
    ) -> Result<Arc<Vec<IndexEntry>>, TierError> {
        let stem = segment.stem();
        let cached = {
            let indexes = self.indexes.lock().unwrap_or_else(|p| p.into_inner());
            indexes.iter().find(|(s, _)| *s == stem).map(|(_, e)| Arc::clone(e))
        };
        if let Some(entries) = cached {
            return Ok(entries);
        }
        let bytes = self.store.get(&segment.index_path(dir)).await?.bytes().await?;
        let mut entries = index::parse_entries(&bytes, segment.base, segment.end);
        // A sealed index ends at its segment's end, numbering the next segment's first record.
        match entries.pop() {
            Some(last) if last.byte == segment.end && last.record == segment.end_record => {}
            _ => return Err(corrupt(segment, "its index does not end where the segment does")),
        }
        if entries.is_empty() {
            return Err(corrupt(segment, "its index has no entries"));
        }
        let entries = Arc::new(entries);
        let mut indexes = self.indexes.lock().unwrap_or_else(|p| p.into_inner());
        if indexes.len() >= INDEXES_MAX {
            indexes.remove(0);
        }
        indexes.push((stem, Arc::clone(&entries)));
        Ok(entries)
    }

    /// Bytes the chunk cache holds.
    pub fn cached_bytes(&self) -> u64 {
        self.cache.bytes()
    }
}

fn corrupt(segment: &RemoteSegment, reason: &str) -> TierError {
    TierError::Corrupt { stem: segment.stem(), reason: reason.into() }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TierOpenError {
    #[error(transparent)]
    Url(#[from] service::store::StoreUrlError),
    #[error("cannot prepare the remote segment cache: {0}")]
    Cache(std::io::Error),
}
