//! The commit protocol of docs/design.md ("Loader commit protocol", "Steps"), per partition:
//!
//! 1. **Read the chain.** Commit records are keyed by their start offset; each starts where the
//!    previous one ended, so the record with the highest start ends the chain and its `end` is
//!    the committed offset.
//! 2. **Roll forward.** The last record's files may not all have moved out of staging (the
//!    run that wrote it died after committing). They are moved now; every earlier record's
//!    files are in place, because its successor was written only after this same step.
//! 3. **Stage** the new range's files under `_staging/`, invisible to readers of the topic.
//! 4. **Commit** with a conditional put (`PutMode::Create`) of the record at the range's start:
//!    of two writers of one range exactly one wins; the loser deletes its staged files.
//! 5. **Publish**: move the files to their place under the topic (a rename: atomic on a local
//!    filesystem, a server-side copy on S3), so no file is visible before a record names it.
//!
//! A run that dies before step 4 leaves only staged files, which no record names: they are
//! rolled back (deleted) once older than the staging grace period.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use crate::layout;

/// One file a commit record names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedFile {
    /// Final path, under the topic's prefix.
    pub path: String,
    /// Where it was staged before the commit.
    pub staged: String,
    pub rows: u64,
    pub bytes: u64,
}

/// `_commits/{topic}/{partition}/{start:020}.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitRecord {
    pub topic: String,
    pub partition: String,
    /// First offset of the range (inclusive).
    pub start: i64,
    /// Offset after the range: where the next commit starts.
    pub end: i64,
    pub rows: u64,
    /// Rows committed in this partition so far, this record included.
    #[serde(default)]
    pub rows_total: u64,
    pub files: Vec<CommittedFile>,
    /// Messages written to the bad-records directory instead of the files.
    #[serde(default)]
    pub bad_records: u64,
    /// Loader host that committed (its audit counts include this record's windows).
    pub host: String,
    pub run_id: String,
    pub committed_at_ms: i64,
    /// The largest `header.time` committed so far in this partition (this record or earlier).
    pub max_time_ms: i64,
    /// The reader schema id the files were written with.
    pub schema_id: i32,
    pub window_ms: i64,
    /// Rows per audit window (window start → rows with `header.time` in it).
    pub windows: BTreeMap<i64, i64>,
}

impl CommitRecord {
    /// The record stored at `path` for `topic`'s partition under the key `start`, checked: it
    /// must be one (JSON of this shape), for that topic, its range must begin at the key and not
    /// end before it, and every file it names must lie under the topic's prefix (the roll
    /// forward moves files there) and its rows add up. `None` for `start` checks nothing of it
    /// (the audit reads every record of a topic).
    pub fn parse(
        path: &str,
        topic: &str,
        start: Option<i64>,
        bytes: &[u8],
    ) -> Result<CommitRecord, CommitError> {
        let corrupt = |reason: String| CommitError::Corrupt { path: path.to_owned(), reason };
        let record: CommitRecord =
            serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
        if record.topic != topic {
            return Err(corrupt(format!("a record of topic {:?}", record.topic)));
        }
        if start.is_some_and(|start| record.start != start) || record.end < record.start {
            let key = start.map_or_else(|| "?".to_owned(), |s| s.to_string());
            return Err(corrupt(format!(
                "range [{}, {}) under key {key}",
                record.start, record.end
            )));
        }
        let prefix = format!("{topic}/");
        if let Some(file) = record.files.iter().find(|f| !f.path.starts_with(&prefix)) {
            return Err(corrupt(format!("file {} is outside the topic's prefix", file.path)));
        }
        let file_rows = record.files.iter().try_fold(0u64, |sum, f| sum.checked_add(f.rows));
        if file_rows != Some(record.rows) {
            return Err(corrupt(format!(
                "its files hold {file_rows:?} rows, it says {}",
                record.rows
            )));
        }
        Ok(record)
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommitError {
    #[error("object store at {path}: {source}")]
    Store {
        path: String,
        #[source]
        source: object_store::Error,
    },
    #[error("commit record {path} is not valid: {reason}")]
    Corrupt { path: String, reason: String },
    #[error("commit record {path} names {file}, which is neither staged nor in place")]
    MissingFile { path: String, file: String },
}

fn store_error(path: &Path) -> impl FnOnce(object_store::Error) -> CommitError + '_ {
    move |source| CommitError::Store { path: path.to_string(), source }
}

/// The result of a conditional commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    Won,
    /// Another writer committed a record at this start first.
    Fenced,
}

/// The commit records of one partition.
pub struct PartitionCommits {
    store: Arc<dyn ObjectStore>,
    topic: String,
    partition: i32,
}

impl PartitionCommits {
    pub fn new(store: Arc<dyn ObjectStore>, topic: &str, partition: i32) -> Self {
        PartitionCommits { store, topic: topic.to_owned(), partition }
    }

    /// Start offsets of every record, ascending.
    pub async fn starts(&self) -> Result<Vec<i64>, CommitError> {
        let dir = layout::commits_dir(&self.topic, self.partition);
        let metas: Vec<_> =
            self.store.list(Some(&dir)).try_collect().await.map_err(store_error(&dir))?;
        let mut starts: Vec<i64> =
            metas.iter().filter_map(|meta| layout::commit_start(&meta.location)).collect();
        starts.sort_unstable();
        Ok(starts)
    }

    pub async fn read(&self, start: i64) -> Result<CommitRecord, CommitError> {
        let path = layout::commit_path(&self.topic, self.partition, start);
        let bytes = self.store.get(&path).await.map_err(store_error(&path))?;
        let bytes = bytes.bytes().await.map_err(store_error(&path))?;
        CommitRecord::parse(path.as_ref(), &self.topic, Some(start), &bytes)
    }

    /// The record that ends the chain, if any.
    pub async fn last(&self) -> Result<Option<CommitRecord>, CommitError> {
        match self.starts().await?.last() {
            Some(&start) => Ok(Some(self.read(start).await?)),
            None => Ok(None),
        }
    }

    /// The record that ends the chain, listing only the records after `known`: the start of a
    /// record this process saw, so the chain ends at or after it (records are never deleted).
    /// A store lists from a key on (S3 `start-after`), so a run of `serve` costs what was
    /// committed since the last, not the partition's whole history. Without `known`, or if its
    /// record is gone, the whole listing.
    pub async fn last_after(
        &self,
        known: Option<i64>,
    ) -> Result<Option<CommitRecord>, CommitError> {
        let Some(known) = known else { return self.last().await };
        let dir = layout::commits_dir(&self.topic, self.partition);
        let after = layout::commit_path(&self.topic, self.partition, known);
        let metas: Vec<_> = self
            .store
            .list_with_offset(Some(&dir), &after)
            .try_collect()
            .await
            .map_err(store_error(&dir))?;
        match metas.iter().filter_map(|meta| layout::commit_start(&meta.location)).max() {
            Some(start) => Ok(Some(self.read(start).await?)),
            None => match self.read(known).await {
                Ok(record) => Ok(Some(record)),
                Err(_) => self.last().await,
            },
        }
    }

    /// Every record, in offset order (for audit counts and status).
    pub async fn all(&self, concurrency: usize) -> Result<Vec<CommitRecord>, CommitError> {
        let starts = self.starts().await?;
        futures::stream::iter(starts.into_iter().map(|start| self.read(start)))
            .buffered(concurrency.max(1))
            .try_collect()
            .await
    }

    /// Step 2: moves the files of `record` that are still staged into place.
    pub async fn roll_forward(&self, record: &CommitRecord) -> Result<(), CommitError> {
        for file in &record.files {
            publish(&*self.store, &file.staged, &file.path, &self.topic).await?;
        }
        Ok(())
    }

    /// Step 4: writes `record` unless a record with its start exists.
    pub async fn commit(&self, record: &CommitRecord) -> Result<Committed, CommitError> {
        let path = layout::commit_path(&self.topic, self.partition, record.start);
        let json = serde_json::to_vec_pretty(record).expect("a commit record serializes");
        let options = PutOptions { mode: PutMode::Create, ..PutOptions::default() };
        match self.store.put_opts(&path, PutPayload::from(json), options).await {
            Ok(_) => Ok(Committed::Won),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(Committed::Fenced),
            Err(source) => Err(CommitError::Store { path: path.to_string(), source }),
        }
    }

    /// Deletes staged files older than `grace_ms` that `keep` (the last record) does not name:
    /// leftovers of runs that died before their commit, or after moving their files.
    pub async fn clean_staging(
        &self,
        keep: Option<&CommitRecord>,
        grace_ms: u64,
        now_ms: i64,
    ) -> Result<usize, CommitError> {
        let dir = layout::staging_dir(&self.topic, self.partition);
        let metas: Vec<_> =
            self.store.list(Some(&dir)).try_collect().await.map_err(store_error(&dir))?;
        let named: Vec<&str> =
            keep.map(|r| r.files.iter().map(|f| f.staged.as_str()).collect()).unwrap_or_default();
        let mut deleted = 0;
        for meta in metas {
            let age_ms = now_ms - meta.last_modified.timestamp_millis();
            if age_ms < grace_ms as i64 || named.contains(&meta.location.as_ref()) {
                continue;
            }
            match self.store.delete(&meta.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => deleted += 1,
                Err(source) => {
                    return Err(CommitError::Store { path: meta.location.into(), source });
                }
            }
        }
        Ok(deleted)
    }

    /// Deletes the staged files of a run that lost its commit or failed before it.
    pub async fn discard(&self, staged: &[String]) {
        for path in staged {
            if let Err(e) = self.store.delete(&Path::from(path.as_str())).await {
                tracing::warn!(topic = %self.topic, partition = %self.partition, %path, error = %e,
                    "cannot delete a staged file; it is removed after the staging grace period");
            }
        }
    }
}

/// Moves one committed file from `staged` to `path` unless it is there already. Safe to run
/// concurrently with another loader doing the same: whoever finds the staged file gone checks
/// that the final one exists.
async fn publish(
    store: &dyn ObjectStore,
    staged: &str,
    path: &str,
    topic: &str,
) -> Result<(), CommitError> {
    let (staged_path, final_path) = (Path::from(staged), Path::from(path));
    if !path.starts_with(&format!("{topic}/")) {
        let reason = format!("file {path} is outside the topic's prefix");
        return Err(CommitError::Corrupt { path: staged.to_owned(), reason });
    }
    match store.head(&final_path).await {
        Ok(_) => {
            // In place already; a copy that the move left behind goes with the grace period.
            return Ok(());
        }
        Err(object_store::Error::NotFound { .. }) => {}
        Err(source) => return Err(CommitError::Store { path: path.to_owned(), source }),
    }
    match store.rename(&staged_path, &final_path).await {
        Ok(()) => Ok(()),
        Err(object_store::Error::NotFound { .. }) => match store.head(&final_path).await {
            Ok(_) => Ok(()),
            Err(object_store::Error::NotFound { .. }) => {
                Err(CommitError::MissingFile { path: staged.to_owned(), file: path.to_owned() })
            }
            Err(source) => Err(CommitError::Store { path: path.to_owned(), source }),
        },
        Err(source) => Err(CommitError::Store { path: path.to_owned(), source }),
    }
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;

    use super::*;

    fn record(start: i64, end: i64, files: Vec<CommittedFile>) -> CommitRecord {
        let rows = files.iter().map(|f| f.rows).sum();
        CommitRecord {
            topic: "t".into(),
            partition: "0".into(),
            start,
            end,
            rows,
            rows_total: rows,
            files,
            bad_records: 0,
            host: "h".into(),
            run_id: "r".into(),
            committed_at_ms: 0,
            max_time_ms: 0,
            schema_id: 1,
            window_ms: 600_000,
            windows: BTreeMap::new(),
        }
    }

    fn file(staged: &str, path: &str) -> CommittedFile {
        CommittedFile { path: path.into(), staged: staged.into(), rows: 1, bytes: 4 }
    }

    #[test]
    fn a_record_is_refused_unless_it_is_one_of_its_topic_and_key() {
        let good = record(10, 20, vec![file("_staging/t/0/r/1.parquet", "t/x.parquet")]);
        let json = |r: &CommitRecord| serde_json::to_vec(r).unwrap();
        let parse = |r: &CommitRecord| CommitRecord::parse("k", "t", Some(10), &json(r));
        assert_eq!(parse(&good).unwrap(), good);
        let refused = |r: CommitRecord, wanted: &str| match parse(&r) {
            Err(CommitError::Corrupt { reason, .. }) => {
                assert!(reason.contains(wanted), "{reason}")
            }
            other => panic!("{other:?}"),
        };
        refused(CommitRecord { topic: "u".into(), ..good.clone() }, "topic");
        refused(CommitRecord { start: 11, ..good.clone() }, "under key 10");
        refused(CommitRecord { end: 9, ..good.clone() }, "range");
        refused(record(10, 20, vec![file("_staging/t/0/r/1.parquet", "tt/x.parquet")]), "outside");
        refused(CommitRecord { rows: 2, ..good.clone() }, "rows");
        assert!(CommitRecord::parse("k", "t", Some(10), b"{").is_err());
    }

    #[tokio::test]
    async fn a_second_commit_of_one_start_is_fenced_and_the_chain_ends_at_the_highest_start() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let commits = PartitionCommits::new(Arc::clone(&store), "t", 0);
        assert_eq!(commits.last().await.unwrap(), None);
        assert_eq!(commits.commit(&record(0, 10, vec![])).await.unwrap(), Committed::Won);
        assert_eq!(commits.commit(&record(0, 12, vec![])).await.unwrap(), Committed::Fenced);
        assert_eq!(commits.commit(&record(10, 20, vec![])).await.unwrap(), Committed::Won);
        assert_eq!(commits.last().await.unwrap().map(|r| (r.start, r.end)), Some((10, 20)));
        assert_eq!(commits.all(4).await.unwrap().len(), 2);
    }

    #[tokio::test]
    async fn the_chain_end_is_found_from_a_known_start_on() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let commits = PartitionCommits::new(Arc::clone(&store), "t", 0);
        assert_eq!(commits.last_after(Some(0)).await.unwrap(), None, "nothing committed yet");
        for (start, end) in [(0, 10), (10, 200), (200, 1_000)] {
            commits.commit(&record(start, end, vec![])).await.unwrap();
        }
        let end_of = |r: Option<CommitRecord>| r.map(|r| (r.start, r.end));
        // Committed since (by this process or another loader).
        assert_eq!(end_of(commits.last_after(Some(10)).await.unwrap()), Some((200, 1_000)));
        // Nothing since: the known record itself.
        assert_eq!(end_of(commits.last_after(Some(200)).await.unwrap()), Some((200, 1_000)));
        // Offsets compare as numbers, not as the digits of shorter keys would.
        assert_eq!(end_of(commits.last_after(Some(9)).await.unwrap()), Some((200, 1_000)));
        // A known start with no record and none after it: the whole listing.
        assert_eq!(end_of(commits.last_after(Some(5_000)).await.unwrap()), Some((200, 1_000)));
        assert_eq!(end_of(commits.last_after(None).await.unwrap()), Some((200, 1_000)));
    }

    #[tokio::test]
    async fn roll_forward_moves_staged_files_once_and_fails_when_a_named_file_is_gone() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let commits = PartitionCommits::new(Arc::clone(&store), "t", 0);
        let staged = "_staging/t/0/r/dt=2025-12-01/hr=00/0.parquet";
        let path = "t/dt=2025-12-01/hr=00/t+0+0+10.parquet";
        store.put(&Path::from(staged), PutPayload::from_static(b"data")).await.unwrap();
        let committed = record(0, 10, vec![file(staged, path)]);
        commits.roll_forward(&committed).await.unwrap();
        commits.roll_forward(&committed).await.unwrap(); // again: already in place
        assert!(store.head(&Path::from(path)).await.is_ok());
        assert!(store.head(&Path::from(staged)).await.is_err());

        let lost = record(
            10,
            20,
            vec![file("_staging/t/0/r/x.parquet", "t/dt=2025-12-01/hr=00/y.parquet")],
        );
        assert!(matches!(commits.roll_forward(&lost).await, Err(CommitError::MissingFile { .. })));
        let outside = record(10, 20, vec![file(staged, "other/x.parquet")]);
        assert!(matches!(commits.roll_forward(&outside).await, Err(CommitError::Corrupt { .. })));
    }

    #[tokio::test]
    async fn staging_cleanup_keeps_young_files_and_those_the_last_record_names() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let commits = PartitionCommits::new(Arc::clone(&store), "t", 0);
        let (named, orphan) = ("_staging/t/0/a/1.parquet", "_staging/t/0/b/2.parquet");
        for path in [named, orphan] {
            store.put(&Path::from(path), PutPayload::from_static(b"x")).await.unwrap();
        }
        let last = record(0, 10, vec![file(named, "t/x.parquet")]);
        let now = service::now_ms();
        assert_eq!(commits.clean_staging(Some(&last), 60_000, now).await.unwrap(), 0, "young");
        assert_eq!(commits.clean_staging(Some(&last), 60_000, now + 120_000).await.unwrap(), 1);
        assert!(store.head(&Path::from(named)).await.is_ok());
        assert!(store.head(&Path::from(orphan)).await.is_err());
    }
}
