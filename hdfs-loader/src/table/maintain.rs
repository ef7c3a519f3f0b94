//! Keeping a table small: compaction, snapshot expiry, then orphan-file cleanup. What
//! `hdfs-loader maintain` runs, and `serve` every `maintenance_interval`.
//!
//! - **Compaction** rewrites the small files of closed hours into files of the target size
//!   ([`super::compact`]).
//! - **Expiry** drops snapshots older than `snapshot_max_age` from the table's metadata (never
//!   the current one: the loader's offsets are in it, cumulative, so no older snapshot is
//!   needed to go on). Their files stay until the cleanup finds them unreferenced.
//! - **Orphan files** are the files under the table's location that no snapshot, manifest list,
//!   manifest or kept metadata file names: data files of a run that died before its commit,
//!   files of expired snapshots, metadata files past the table's metadata log. Those older
//!   than the grace (`staging_grace_ms`: a run writes its data files before it commits them,
//!   so the grace must be longer than a run) are deleted.

use std::collections::HashSet;

use futures::TryStreamExt;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, ErrorKind};
use object_store::ObjectStoreExt;
use object_store::path::Path;
use serde::Serialize;

use super::compact::{CompactOptions, Compacted};
use super::{TableError, Tables};

/// What one maintenance pass did to a table.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Maintained {
    pub table: String,
    pub compacted: Compacted,
    pub snapshots_expired: usize,
    pub snapshots_kept: usize,
    pub orphans_deleted: usize,
    pub orphan_bytes_deleted: u64,
    /// Unreferenced files kept because they are younger than the grace.
    pub orphans_in_grace: usize,
}

impl Tables {
    /// Compacts `topic`'s closed hours, expires its snapshots older than
    /// `now_ms - snapshot_max_age_ms` and deletes the files under its location that nothing
    /// references and that are older than `grace_ms`.
    pub async fn maintain(
        &self,
        topic: &str,
        compaction: &CompactOptions,
        snapshot_max_age_ms: i64,
        grace_ms: i64,
    ) -> Result<Maintained, TableError> {
        let now_ms = compaction.now_ms;
        let ident = self.ident(topic);
        let table_error =
            |source| TableError::Table { table: ident.to_string(), source: Box::new(source) };
        let store_error = |e: object_store::Error| {
            table_error(iceberg::Error::new(ErrorKind::Unexpected, e.to_string()))
        };
        let mut done = Maintained { table: ident.to_string(), ..Maintained::default() };
        done.compacted = self.compact(topic, compaction).await?;
        let table = self.catalog.load_table(&ident).await.map_err(table_error)?;
        let before = table.metadata().snapshots().len();
        let transaction = Transaction::new(&table);
        let expire = transaction
            .expire_snapshots()
            .expire_older_than_ms(now_ms.saturating_sub(snapshot_max_age_ms))
            .retain_last(1);
        let transaction = expire.apply(transaction).map_err(table_error)?;
        let table = transaction.commit(&*self.catalog).await.map_err(table_error)?;
        done.snapshots_kept = table.metadata().snapshots().len();
        done.snapshots_expired = before.saturating_sub(done.snapshots_kept);

        let referenced = self.referenced(&table).await?;
        let root = self.warehouse.path(table.metadata().location()).map_err(table_error)?;
        let cut = now_ms.saturating_sub(grace_ms);
        let listed: Vec<_> =
            self.warehouse.store().list(Some(&root)).try_collect().await.map_err(store_error)?;
        for meta in listed {
            if referenced.contains(&meta.location) {
                continue;
            }
            if meta.last_modified.timestamp_millis() > cut {
                done.orphans_in_grace += 1;
                continue;
            }
            match self.warehouse.store().delete(&meta.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                    done.orphans_deleted += 1;
                    done.orphan_bytes_deleted += meta.size;
                }
                Err(e) => return Err(store_error(e)),
            }
        }
        Ok(done)
    }

    /// Every file `table` references: its metadata files (the current one and those of its
    /// metadata log), and of every snapshot its manifest list, manifests and their files.
    async fn referenced(&self, table: &Table) -> Result<HashSet<Path>, TableError> {
        let table_error = |source| TableError::Table {
            table: table.identifier().to_string(),
            source: Box::new(source),
        };
        let path = |location: &str| self.warehouse.path(location).map_err(table_error);
        let metadata = table.metadata();
        let mut referenced = HashSet::new();
        if let Some(location) = table.metadata_location() {
            referenced.insert(path(location)?);
        }
        for log in metadata.metadata_log() {
            referenced.insert(path(&log.metadata_file)?);
        }
        let mut manifests = HashSet::new();
        for snapshot in metadata.snapshots() {
            referenced.insert(path(snapshot.manifest_list())?);
            let list = table.manifest_list_reader(snapshot).load().await.map_err(table_error)?;
            for manifest in list.entries() {
                if !manifests.insert(manifest.manifest_path.clone()) {
                    continue;
                }
                referenced.insert(path(&manifest.manifest_path)?);
                let manifest =
                    manifest.load_manifest(table.file_io()).await.map_err(table_error)?;
                // A DELETED entry (a compaction's) names a file that only the snapshots
                // before it read: referenced while one of them is kept, through its manifests.
                for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
                    referenced.insert(path(entry.file_path())?);
                }
            }
        }
        Ok(referenced)
    }
}
