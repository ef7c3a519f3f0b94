//! The tier's background work on every broker: each pass reads the manifest of every tiered
//! partition here (so that local retention knows what the store holds); the leader of one also
//! uploads its sealed, committed segments in order, expires remote segments past the topic's
//! retention, and deletes objects no manifest entry names; and every `scrub_interval_ms` it
//! reads its remote segments back to check their CRCs, uploading a damaged one again from its
//! disk if it still has it, else from another replica's. A pass that fails waits longer
//! before the next (doubling, up to a minute); nothing is lost by waiting: local retention
//! keeps every segment the store does not hold.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart};
use tokio_util::sync::CancellationToken;

use super::manifest::{RemoteSegment, object_stem, partition_dir};
use super::{RemoteTier, TierError};
use crate::log::{Damage, Partition, SealedSegment};
use crate::metrics::Metrics;
use crate::replication::scrub::{RepairSource, RepairSources};
use crate::replication::{Replicas, fetch_range};

/// Bytes read from a segment file and sent as one part of its upload.
const PART_BYTES: u64 = 8 << 20;
/// The longest a failing tier waits between passes.
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// An object no manifest entry names is deleted once it is this old: an upload that died (or
/// a deposed leader's, still going) had this long to write its entry.
const ORPHAN_AGE: Duration = Duration::from_secs(600);
/// Orphans are looked for every this many passes.
const ORPHAN_PASSES: u64 = 12;

/// Runs passes every `interval` (longer after a failure) until `stop`; uploads at most
/// `bytes_per_s` (0: no limit).
pub async fn run(
    tier: Arc<RemoteTier>,
    replicas: Arc<Replicas>,
    interval: Duration,
    bytes_per_s: u64,
    stop: CancellationToken,
) {
    let mut wait = interval;
    let mut pass = 0u64;

    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        pass += 1;
        let mut failed = false;
        for partition in replicas.logs().partitions() {
            if !partition.config().remote_storage || stop.is_cancelled() {
                continue;
            }
            let leader_epoch = match replicas.led(partition.topic(), partition.index() as i32) {
                Ok(_) => Some(
                    replicas
                        .leading_epoch(partition.topic(), partition.index() as i32)
                        .unwrap_or(0),
                ),
                Err(_) => None,
            };
            let tending = tier.tend(
                &partition,
                leader_epoch,
                bytes_per_s,
                pass.is_multiple_of(ORPHAN_PASSES),
                &stop,
            );
            if let Err(e) = tending.await {
                tracing::warn!(partition = ?partition, error = %e, "tiered storage pass failed; retrying");
                failed = true;
            }
        }

        wait = if failed { (wait * 2).min(BACKOFF_MAX).max(interval) } else { interval };
    }
}

/// Where the store's scrubber copies a damaged segment from when the leader's disk no longer
/// has it, and what it counts.
pub struct Repairs {
    /// The partition's other replicas, in the order to try them.
    pub sources: RepairSources,
    /// What repair reads connect to other brokers with, under TLS.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub metrics: Arc<Metrics>,
}

/// Every `interval` after the last pass ended, reads back every remote segment of the tiered
/// partitions this broker leads (at most `bytes_per_s`), until `stop`: the scrubber of the
/// store (`RemoteTier::scrub`), apart from the uploads so that a long pass holds none up.
pub async fn scrub(
    tier: Arc<RemoteTier>,
    replicas: Arc<Replicas>,
    interval: Duration,
    bytes_per_s: u64,
    repairs: Repairs,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        for partition in replicas.logs().partitions() {
            let index = partition.index() as i32;
            if !partition.config().remote_storage || replicas.led(partition.topic(), index).is_err()
            {
                continue;
            }
            let epoch = replicas.leading_epoch(partition.topic(), index).unwrap_or(0);
            match tier.scrub(&partition, epoch, bytes_per_s, &repairs, &stop).await {
                Ok(0) => {}
                Ok(damaged) => {
                    tracing::warn!(partition = ?partition, damaged, "remote scrub found damaged segments")
                }
                Err(e) => {
                    tracing::warn!(partition = ?partition, error = %e, "remote scrub failed; the next pass tries again")
                }
            }
        }
    }
}

impl RemoteTier {
    /// One pass over `partition`: read its manifest and, if this broker leads it (in
    /// `leader_epoch`), upload, expire and clean.
    async fn tend(
        &self,
        partition: &Arc<Partition>,
        leader_epoch: Option<i32>,
        bytes_per_s: u64,
        clean: bool,
        stop: &CancellationToken,
    ) -> Result<(), TierError> {
        let _writing = self.writing.lock().await;
        if partition.removed().is_cancelled() {
            return Ok(()); // its topic deleted, or its replica moved away, since the pass began
        }
        self.sync(partition).await?;
        let Some(leader_epoch) = leader_epoch else { return Ok(()) };
        let dir = partition_dir(partition.topic(), partition.index());
        let local_start = partition.first_segment_base();
        let from = self
            .manifest(partition)
            .await?
            .run_reaching(local_start)
            .map_or(local_start, |r| r.end);
        for sealed in partition.sealed_segments(from) {
            if stop.is_cancelled() || partition.removed().is_cancelled() {
                return Ok(());
            }
            let entry = self.upload(&dir, &sealed, leader_epoch, bytes_per_s).await?;
            tracing::info!(partition = ?partition, segment = %entry.stem(), bytes = entry.size, "segment uploaded");
            let mut manifests = self.manifests();
            let known = manifests.entry(Self::key(partition)).or_default();
            known.manifest.insert(entry);
            let run = known.manifest.run_reaching(partition.first_segment_base());
            partition.set_remote_end(run.map_or(0, |r| r.end));
        }
        self.expire(partition, &dir).await?;
        if clean {
            self.delete_orphans(partition, &dir).await?;
        }
        Ok(())
    }

    /// Uploads one segment, its index and the producer snapshot taken at its end, checks what
    /// the store holds against the files (sizes, and the segment's CRC read back), then writes
    /// its manifest entry: the segment counts from then on.
    async fn upload(
        &self,
        dir: &str,
        sealed: &SealedSegment,
        leader_epoch: i32,
        bytes_per_s: u64,
    ) -> Result<RemoteSegment, TierError> {
        let segment = &sealed.segment;
        let size = sealed.end - segment.base_offset;
        let modified = segment.modified()?;
        let modified_ms =
            modified.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        let index = tokio::fs::read(&sealed.index_path).await?;
        let mut entry = RemoteSegment {
            base: segment.base_offset,
            end: sealed.end,
            first_record: sealed.first_record,
            end_record: sealed.end_record,
            max_time: sealed.max_time,
            modified_ms,
            size,
            crc: 0,
            index_size: index.len() as u64,
            leader_epoch,
            epochs: sealed.epochs.iter().map(|e| (e.epoch, e.start_offset)).collect(),
            id: format!("{:016x}", rand::random::<u64>()),
            producers_size: None,
        };
        let data_path = entry.data_path(dir);
        let mut upload = WriteMultipart::new_with_chunk_size(
            self.store.put_multipart(&data_path).await?,
            PART_BYTES as usize,
        );
        let mut crc = crc32fast::Hasher::new();
        let started = Instant::now();
        let mut position = 0;
        while position < size {
            let len = PART_BYTES.min(size - position);
            let file = Arc::clone(segment);
            let part = tokio::task::spawn_blocking(move || {
                let mut part = vec![0u8; len as usize];
                std::os::unix::fs::FileExt::read_exact_at(&file.file, &mut part, position)
                    .map(|()| part)
            })
            .await??;
            crc.update(&part);
            upload.wait_for_capacity(2).await?;
            upload.write(&part);
            position += len;
            throttle(started, position, bytes_per_s).await;
        }
        upload.finish().await?;
        entry.crc = crc.finalize();
        self.store.put(&entry.index_path(dir), index.into()).await?;
        if let Some(path) = &sealed.producers_path {
            // Gone meanwhile only if retention passed the segment: the entry then goes too.
            if let Ok(snapshot) = tokio::fs::read(path).await {
                entry.producers_size = Some(snapshot.len() as u64);
                self.store.put(&entry.producers_path(dir), snapshot.into()).await?;
            }
        }
        self.verify(dir, &entry, 0).await?;
        let json = serde_json::to_vec(&entry).expect("a manifest entry serializes");
        self.store.put(&entry.entry_path(dir), json.into()).await?;
        Ok(entry)
    }

    /// Reads an upload back: the data's size and CRC, and the sizes of its index and producer
    /// snapshot.
    /// At most `bytes_per_s` (0: no limit).
    async fn verify(
        &self,
        dir: &str,
        entry: &RemoteSegment,
        bytes_per_s: u64,
    ) -> Result<(), TierError> {
        let mut stream = self.store.get(&entry.data_path(dir)).await?.into_stream();
        let (mut crc, mut size) = (crc32fast::Hasher::new(), 0u64);
        let started = Instant::now();
        while let Some(bytes) = stream.next().await {
            let bytes = bytes?;
            crc.update(&bytes);
            size += bytes.len() as u64;
            throttle(started, size, bytes_per_s).await;
        }
        let index = self.store.head(&entry.index_path(dir)).await?;
        let crc = crc.finalize();
        if size != entry.size || crc != entry.crc || index.size != entry.index_size {
            return Err(TierError::Corrupt {
                stem: entry.stem(),
                reason: format!(
                    "the store holds {size} bytes with CRC {crc:08x} and a {}-byte index; the segment is {} bytes with CRC {:08x} and a {}-byte index",
                    index.size, entry.size, entry.crc, entry.index_size
                ),
            });
        }
        if let Some(expected) = entry.producers_size {
            let held = self.store.head(&entry.producers_path(dir)).await?.size;
            if held != expected {
                return Err(TierError::Corrupt {
                    stem: entry.stem(),
                    reason: format!(
                        "the store holds a {held}-byte producer snapshot; it was {expected} bytes"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Reads every remote segment of `partition` back (at most `bytes_per_s`) and checks its
    /// size and CRC against its manifest entry. A damaged one is uploaded again under a new
    /// name: from this leader's disk if it still has the segment (its entry and objects
    /// deleted first, so the new entry is the only one for its base), else from the first
    /// other replica that has it whole (its bytes checked against the entry's CRC before the
    /// damaged entry goes). One no replica has is reported, and stays for readers, whose CRC
    /// checks refuse its damaged messages. Returns how many were damaged.
    async fn scrub(
        &self,
        partition: &Partition,
        leader_epoch: i32,
        bytes_per_s: u64,
        repairs: &Repairs,
        stop: &CancellationToken,
    ) -> Result<usize, TierError> {
        let dir = partition_dir(partition.topic(), partition.index());
        let segments: Vec<RemoteSegment> =
            self.manifest(partition).await?.segments().cloned().collect();
        let mut damaged = 0;
        for segment in segments {
            if stop.is_cancelled() || partition.removed().is_cancelled() {
                break;
            }
            let error = match self.verify(&dir, &segment, bytes_per_s).await {
                Ok(()) => continue,
                Err(e @ TierError::Corrupt { .. }) => e,
                Err(e) => return Err(e),
            };
            damaged += 1;
            repairs.metrics.remote_scrub_damaged.inc();
            let local = partition.sealed_segments(segment.base).into_iter().next();
            let _writing = self.writing.lock().await;
            let current = self.manifest(partition).await?;
            if !current.contains_stem(&segment.stem()) {
                continue; // Expired (or repaired) meanwhile.
            }
            let entry = match local.filter(|l| l.segment.base_offset == segment.base) {
                Some(local) => {
                    tracing::warn!(partition = ?partition, segment = %segment.stem(), error = %error, "a remote segment is damaged; uploading it again from disk");
                    self.delete(partition, &dir, &segment).await?;
                    self.upload(&dir, &local, leader_epoch, bytes_per_s).await?
                }
                None => {
                    let copied = self
                        .copy_from_replicas(partition, &dir, &segment, leader_epoch, repairs)
                        .await?;
                    let Some(entry) = copied else {
                        repairs.metrics.remote_scrub_unrepaired.inc();
                        tracing::error!(partition = ?partition, segment = %segment.stem(), error = %error, "a remote segment is damaged and no replica has it whole");
                        continue;
                    };
                    self.delete(partition, &dir, &segment).await?;
                    let json = serde_json::to_vec(&entry).expect("a manifest entry serializes");
                    self.store.put(&entry.entry_path(&dir), json.into()).await?;
                    entry
                }
            };
            repairs.metrics.remote_scrub_repaired.inc();
            let mut manifests = self.manifests();
            let known = manifests.entry(Self::key(partition)).or_default();
            known.manifest.insert(entry);
            let run = known.manifest.run_reaching(partition.first_segment_base());
            partition.set_remote_end(run.map_or(0, |r| r.end));
        }
        Ok(damaged)
    }

    /// Uploads the damaged remote `segment` again under a new name from the first other
    /// replica whose copy matches its entry's size and CRC (read with REPLICA_FETCH as the
    /// repair reader, as the local scrubber does); its index and producer snapshot are copied
    /// in the store. Returns the new entry, not yet written, or `None` if no replica had it.
    async fn copy_from_replicas(
        &self,
        partition: &Partition,
        dir: &str,
        segment: &RemoteSegment,
        leader_epoch: i32,
        repairs: &Repairs,
    ) -> Result<Option<RemoteSegment>, TierError> {
        if self.store.head(&segment.index_path(dir)).await?.size != segment.index_size {
            return Ok(None); // only the data can be copied from a replica
        }
        for RepairSource { replica, addr, epochs } in (repairs.sources)(partition) {
            let entry = RemoteSegment {
                leader_epoch,
                id: format!("{:016x}", rand::random::<u64>()),
                ..segment.clone()
            };
            let mut upload = WriteMultipart::new_with_chunk_size(
                self.store.put_multipart(&entry.data_path(dir)).await?,
                PART_BYTES as usize,
            );
            let (mut crc, mut at) = (crc32fast::Hasher::new(), entry.base);
            let mut failed = None;
            while at < entry.end {
                let range = Damage {
                    from: at,
                    to: entry.end,
                    segment_base: entry.base,
                    reason: String::new(),
                };
                let tls = repairs.tls.as_ref();
                match fetch_range(&addr, tls, partition, &epochs, &range, PART_BYTES).await {
                    Ok(bytes) => {
                        crc.update(&bytes);
                        upload.wait_for_capacity(2).await?;
                        upload.write(&bytes);
                        at += bytes.len() as u64;
                    }
                    Err(e) => {
                        failed = Some(e.to_string());
                        break;
                    }
                }
            }
            let crc = crc.finalize();
            if failed.is_none() && (at != entry.end || crc != entry.crc) {
                failed = Some(format!("its copy has CRC {crc:08x}, the entry {:08x}", entry.crc));
            }
            if let Some(error) = failed {
                upload.abort().await?;
                tracing::warn!(partition = ?partition, segment = %segment.stem(), replica, %error, "cannot copy a damaged remote segment from a replica");
                continue;
            }
            upload.finish().await?;
            self.store.copy(&segment.index_path(dir), &entry.index_path(dir)).await?;
            if entry.producers_size.is_some() {
                self.store.copy(&segment.producers_path(dir), &entry.producers_path(dir)).await?;
            }
            self.verify(dir, &entry, 0).await?;
            tracing::warn!(partition = ?partition, segment = %segment.stem(), replica, new = %entry.stem(), "a damaged remote segment uploaded again from a replica");
            return Ok(Some(entry));
        }
        Ok(None)
    }

    /// Deletes remote segments from the head past the topic's retention: last written more
    /// than `retention_ms` ago, or while the whole log, remote and local, is larger than
    /// `retention_bytes`. The manifest entry goes first: a crash between leaves an orphan,
    /// never an entry without its data.
    async fn expire(&self, partition: &Partition, dir: &str) -> Result<(), TierError> {
        let config = partition.config();
        let local_start = partition.first_segment_base();
        let manifest = self.manifest(partition).await?;
        let now = service::now_ms();
        let mut bytes = manifest.bytes_before(local_start) + (partition.end() - local_start);
        let mut doomed = Vec::new();
        for segment in manifest.segments() {
            let aged = segment.modified_ms.saturating_add(config.retention_ms as i64) < now;
            let over = config.retention_bytes.is_some_and(|limit| bytes > limit)
                && segment.end <= local_start;
            // Every record of it is before the start DeleteRecords moved the log to.
            let deleted = segment.end_record <= partition.start_wanted();
            if !aged && !over && !deleted {
                break;
            }
            if segment.end <= local_start {
                bytes -= segment.size;
            }
            doomed.push(segment.clone());
        }
        for segment in doomed {
            self.delete(partition, dir, &segment).await?;
            tracing::info!(partition = ?partition, segment = %segment.stem(), "remote retention deleted segment");
        }
        Ok(())
    }

    async fn delete(
        &self,
        partition: &Partition,
        dir: &str,
        segment: &RemoteSegment,
    ) -> Result<(), TierError> {
        match self.store.delete(&segment.entry_path(dir)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        {
            let mut manifests = self.manifests();
            if let Some(known) = manifests.get_mut(&Self::key(partition)) {
                known.manifest.remove(segment.base);
                let run = known.manifest.run_reaching(partition.first_segment_base());
                partition.set_remote_end(run.map_or(0, |r| r.end));
            }
        }
        for path in segment.object_paths(dir) {
            match self.store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Deletes every object of partition `index` of `topic`, a topic being deleted: its
    /// manifest entries first (so no reader takes a segment whose data is going), then the
    /// rest, and forgets its manifest here. Taken while no upload pass writes, so none is in
    /// the middle of an upload for it; a pass that starts later skips it (it is removed from
    /// the logs first). Returns the objects deleted.
    pub async fn delete_partition(&self, topic: &str, index: u32) -> Result<usize, TierError> {
        let _writing = self.writing.lock().await;
        let dir = partition_dir(topic, index);
        let mut deleted = 0;
        for prefix in [format!("{dir}/manifest"), dir.clone()] {
            let listed: Vec<_> = self.store.list(Some(&StorePath::from(prefix))).collect().await;
            for meta in listed {
                match self.store.delete(&meta?.location).await {
                    Ok(()) => deleted += 1,
                    Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        self.manifests().remove(&(topic.to_owned(), index));
        Ok(deleted)
    }

    /// Deletes the partition's data, index and snapshot objects that no manifest entry names and that
    /// are older than [`ORPHAN_AGE`], and entries that lost to another of the same base.
    async fn delete_orphans(&self, partition: &Partition, dir: &str) -> Result<(), TierError> {
        let manifest = self.manifest(partition).await?;
        let listed = self.store.list_with_delimiter(Some(&StorePath::from(dir))).await?;
        for meta in listed.objects {
            let Some(stem) = object_stem(&meta.location) else { continue };
            if !manifest.contains_stem(stem) && age(&meta) > ORPHAN_AGE {
                tracing::info!(partition = ?partition, object = %meta.location, "deleting an object no manifest entry names");
                self.store.delete(&meta.location).await?;
            }
        }
        let entries = self
            .store
            .list_with_delimiter(Some(&StorePath::from(format!("{dir}/manifest"))))
            .await?;
        for meta in entries.objects {
            let Some(stem) = super::manifest::entry_stem(&meta.location) else { continue };
            if !manifest.contains_stem(stem) && age(&meta) > ORPHAN_AGE {
                tracing::info!(partition = ?partition, entry = %meta.location, "deleting a manifest entry another of its base outranks");
                self.store.delete(&meta.location).await?;
            }
        }
        Ok(())
    }
}

/// How long ago an object was last written.
fn age(meta: &object_store::ObjectMeta) -> Duration {
    let modified: std::time::SystemTime = meta.last_modified.into();
    modified.elapsed().unwrap_or_default()
}

/// Sleeps until `sent` bytes since `started` are within `bytes_per_s` (0: no limit).
async fn throttle(started: Instant, sent: u64, bytes_per_s: u64) {
    if bytes_per_s == 0 {
        return;
    }
    let due = Duration::from_secs_f64(sent as f64 / bytes_per_s as f64);
    if let Some(ahead) = due.checked_sub(started.elapsed()) {
        tokio::time::sleep(ahead).await;
    }
}
