//! Compaction: the small files of a table's closed hours rewritten into files of the target
//! size, committed as one `replace` snapshot.
//!
//! A loader round adds one file per partition per hour it loaded, so an hour of a busy topic
//! ends as hundreds of small files. Once an hour is closed (it ended `delay` ago: late events
//! may still come before that, and would make a new small file after), the pass reads the
//! hour's files smaller than the target, rows in the table's current schema (older files'
//! missing columns read as nulls), writes them again into files rolled at the target size,
//! and commits a snapshot that adds those and deletes the ones they replace. An hour then holds
//! at most one file below the target; rows and counts are unchanged.
//!
//! The `iceberg` crate (0.10) has no replace action. So the pass writes the snapshot with the
//! crate's public writers — the new files' manifest, the rewritten manifests of the files it
//! deletes (`EXISTING` and `DELETED` entries, with their sequence numbers), the manifest list
//! — and commits it with [`Tables::commit_metadata`]: if the table moved meanwhile (a loader
//! committed), the commit fails, the pass deletes what it wrote, and the next pass starts
//! again. A replace snapshot carries its parent's coverage (`tributary.partitions`), so that
//! the loaders find it there once expiry takes the snapshots before it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMicrosecondType;
use futures::{StreamExt, TryStreamExt};
use iceberg::arrow::ArrowReaderBuilder;
use iceberg::scan::FileScanTask;
use iceberg::spec::{
    DataContentType, DataFile, FormatVersion, Literal, MAIN_BRANCH, ManifestContentType,
    ManifestFile, ManifestListWriter, ManifestWriterBuilder, Operation, PrimitiveLiteral, Snapshot,
    SnapshotReference, SnapshotRetention, SnapshotSummaryCollector, Summary,
};
use iceberg::table::Table;
use iceberg::{Catalog, ErrorKind, Runtime, TableUpdate};
use object_store::ObjectStoreExt;
use object_store::buffered::BufWriter;
use object_store::path::Path;
use parquet::arrow::AsyncArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde::Serialize;

use super::{HOUR_FIELD, TableError, Tables, WrittenFile, build_data_file, hour_label};
use crate::layout::{HOUR_MS, Hour};
use crate::sink::Upload;

/// Snapshot summary key of a replace snapshot: what the pass rewrote (JSON).
pub const COMPACTION: &str = "tributary.compaction";

/// How a compaction pass chooses and writes files.
#[derive(Debug, Clone, Copy)]
pub struct CompactOptions {
    /// Files are rolled at this size, and files below it are compacted.
    pub target_file_bytes: u64,
    /// An hour is compacted once it ended this long ago (ms).
    pub delay_ms: i64,
    pub now_ms: i64,
    pub zstd_level: i32,
    /// A row group of a new file ends at this many bytes of encoded pages in memory.
    pub row_group_bytes: usize,
}

impl CompactOptions {
    /// The options of `config`, for a pass at `now_ms`.
    pub fn of(config: &crate::Config, now_ms: i64) -> CompactOptions {
        CompactOptions {
            target_file_bytes: config.target_file_bytes,
            delay_ms: i64::try_from(config.compaction_delay.as_millis()).unwrap_or(i64::MAX),
            now_ms,
            zstd_level: config.zstd_level,
            row_group_bytes: config.row_group_bytes,
        }
    }
}

/// What a compaction pass did to a table.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Compacted {
    /// Hours whose small files were rewritten.
    pub hours: usize,
    pub files_removed: usize,
    pub files_added: usize,
    pub rows: u64,
    pub bytes_removed: u64,
    pub bytes_added: u64,
    /// The replace snapshot; `None` when nothing was compacted.
    pub snapshot: Option<i64>,
    /// The table moved while the pass wrote: nothing committed (the next pass tries again).
    pub conflict: bool,
}

/// What the pass wrote before its commit: deleted again if the commit does not happen.
#[derive(Debug, Default)]
struct Written(Vec<Path>);

impl Tables {
    /// Compacts `topic`'s closed hours (see the module documentation).
    pub async fn compact(
        &self,
        topic: &str,
        options: &CompactOptions,
    ) -> Result<Compacted, TableError> {
        let ident = self.ident(topic);
        let name = ident.to_string();
        let table_error =
            |source| TableError::Table { table: name.clone(), source: Box::new(source) };
        let table = self.catalog.load_table(&ident).await.map_err(table_error)?;
        let metadata = table.metadata();
        let Some(current) = metadata.current_snapshot() else {
            return Ok(Compacted::default());
        };
        let spec = metadata.default_partition_spec();
        let [field] = spec.fields() else {
            return Ok(Compacted::default());
        };
        if field.name != HOUR_FIELD {
            return Ok(Compacted::default());
        }
        let time_id = field.source_id;
        let spec_id = spec.spec_id();

        // The small files of each closed hour.
        let mut hours: BTreeMap<i32, Vec<DataFile>> = BTreeMap::new();
        let list = table.manifest_list_reader(current).load().await.map_err(table_error)?;
        for manifest in list.entries() {
            if manifest.content != ManifestContentType::Data
                || manifest.partition_spec_id != spec_id
            {
                continue;
            }
            let manifest = manifest.load_manifest(table.file_io()).await.map_err(table_error)?;
            for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
                let file = entry.data_file();
                if file.content_type() != DataContentType::Data
                    || file.file_size_in_bytes() >= options.target_file_bytes
                {
                    continue;
                }
                let Some(Some(Literal::Primitive(PrimitiveLiteral::Int(hour)))) =
                    file.partition().fields().first().cloned()
                else {
                    continue;
                };
                let closes_ms = (i64::from(hour) + 1) * HOUR_MS + options.delay_ms;
                if closes_ms <= options.now_ms {
                    hours.entry(hour).or_default().push(file.clone());
                }
            }
        }
        hours.retain(|_, files| files.len() > 1);
        if hours.is_empty() {
            return Ok(Compacted::default());
        }

        let mut done = Compacted::default();
        let mut written = Written::default();
        let mut added = Vec::new();
        let mut removed = Vec::new();
        let outcome = async {
            for (hour, files) in &hours {
                let hour = Hour { start_ms: i64::from(*hour) * HOUR_MS };
                let rewritten = self
                    .rewrite(&table, &name, hour, files, options, &mut written)
                    .await?;
                for file in &rewritten {
                    added.push(build_data_file(&name, &self.warehouse, spec_id, time_id, file)?);
                }
                done.hours += 1;
                done.files_added += rewritten.len();
                done.bytes_added += rewritten.iter().map(|f| f.bytes).sum::<u64>();
                let rows_in = files.iter().map(DataFile::record_count).sum::<u64>();
                let rows_out = rewritten.iter().map(|f| f.rows).sum::<u64>();
                if rows_in != rows_out {
                    return Err(TableError::Commit {
                        table: name.clone(),
                        reason: format!(
                            "compaction of hour {} read {rows_out} rows from files that hold {rows_in}",
                            hour_label(hour)
                        ),
                    });
                }
                done.rows += rows_in;
                removed.extend(files.iter().cloned());
            }
            done.files_removed = removed.len();
            done.bytes_removed = removed.iter().map(DataFile::file_size_in_bytes).sum();
            let summary = serde_json::to_string(&done).expect("serializes");
            self.replace(&table, &removed, added, summary, &mut written).await
        }
        .await;
        match outcome {
            Ok(Some(snapshot)) => {
                done.snapshot = Some(snapshot);
                Ok(done)
            }
            Ok(None) => {
                self.delete_written(written.0).await;
                Ok(Compacted { conflict: true, ..Compacted::default() })
            }
            Err(e) => {
                self.delete_written(written.0).await;
                Err(e)
            }
        }
    }

    /// Reads `files` (of `hour`) in the table's current schema and writes their rows again
    /// into files rolled at the target size.
    async fn rewrite(
        &self,
        table: &Table,
        name: &str,
        hour: Hour,
        files: &[DataFile],
        options: &CompactOptions,
        written: &mut Written,
    ) -> Result<Vec<WrittenFile>, TableError> {
        let table_error =
            |source| TableError::Table { table: name.to_owned(), source: Box::new(source) };
        let wanted: HashSet<&str> = files.iter().map(DataFile::file_path).collect();
        let snapshot = table.metadata().current_snapshot_id().expect("checked by the caller");
        let scan = table.scan().snapshot_id(snapshot).select_all().build().map_err(table_error)?;
        let mut tasks: Vec<FileScanTask> = scan
            .plan_files()
            .await
            .map_err(table_error)?
            .try_filter(|task| {
                futures::future::ready(wanted.contains(task.data_file_path.as_str()))
            })
            .try_collect()
            .await
            .map_err(table_error)?;
        if tasks.len() != files.len() {
            return Err(TableError::Commit {
                table: name.to_owned(),
                reason: format!(
                    "compaction of hour {}: {} of its {} files are in the snapshot's scan",
                    hour_label(hour),
                    tasks.len(),
                    files.len()
                ),
            });
        }
        // Every column, by id: the crate's scan takes a column named `_partition` (ours: the
        // Kafka partition) for Iceberg's reserved metadata column of that name.
        for task in &mut tasks {
            task.project_field_ids =
                task.schema.as_struct().fields().iter().map(|f| f.id).collect();
        }
        let reader = ArrowReaderBuilder::new(table.file_io().clone(), Runtime::current())
            .with_data_file_concurrency_limit(1)
            .with_batch_size(8192)
            .build();
        let mut batches = reader
            .read(futures::stream::iter(tasks.into_iter().map(Ok)).boxed())
            .map_err(table_error)?
            .stream();
        let location = self.warehouse.path(table.metadata().location()).map_err(table_error)?;
        let batch_id = format!("{:016x}", rand::random::<u64>());
        let mut out: Option<OutFile> = None;
        let mut done = Vec::new();
        while let Some(batch) = batches.next().await {
            let batch = batch.map_err(table_error)?;
            if batch.num_rows() == 0 {
                continue;
            }
            let file = match &mut out {
                Some(file) => file,
                None => {
                    let path = Path::from(format!(
                        "{location}/data/{HOUR_FIELD}={}/compacted-{batch_id}-{:05}.parquet",
                        hour_label(hour),
                        done.len()
                    ));
                    written.0.push(path.clone());
                    let file = OutFile::open(self, path, batch.schema(), options)
                        .map_err(|e| parquet_error(name, e))?;
                    out.insert(file)
                }
            };
            file.write(&batch, options).await.map_err(|e| parquet_error(name, e))?;
            if file.size() >= options.target_file_bytes {
                let file = out.take().expect("open");
                done.push(file.finish(hour).await.map_err(|e| parquet_error(name, e))?);
            }
        }
        if let Some(file) = out {
            done.push(file.finish(hour).await.map_err(|e| parquet_error(name, e))?);
        }
        Ok(done)
    }

    /// Commits a snapshot of `table` that deletes `removed` and adds `added`; `None` when the
    /// table moved since it was loaded.
    async fn replace(
        &self,
        table: &Table,
        removed: &[DataFile],
        added: Vec<DataFile>,
        compaction: String,
        written: &mut Written,
    ) -> Result<Option<i64>, TableError> {
        let name = table.identifier().to_string();
        let table_error =
            |source| TableError::Table { table: name.clone(), source: Box::new(source) };
        let metadata = table.metadata();
        if metadata.format_version() != FormatVersion::V2 {
            return Err(TableError::Commit {
                table: name.clone(),
                reason: format!(
                    "compaction writes format-version 2 tables; this one is {}",
                    metadata.format_version()
                ),
            });
        }
        let current = metadata.current_snapshot().expect("checked by the caller");
        let schema = metadata.current_schema().clone();
        let spec = metadata.default_partition_spec().clone();
        let sequence = metadata.next_sequence_number();
        let snapshot_id = loop {
            let id = (rand::random::<u64>() >> 1) as i64;
            if id != 0 && metadata.snapshot_by_id(id).is_none() {
                break id;
            }
        };
        let commit_id = format!("{:016x}", rand::random::<u64>());
        let meta_dir = format!("{}/metadata", metadata.location());
        let gone: HashSet<&str> = removed.iter().map(DataFile::file_path).collect();
        let mut manifests: Vec<ManifestFile> = Vec::new();
        let mut manifest_count = 0;
        // A writer of this snapshot's next manifest, of files of partition spec `spec`.
        let mut new_manifest = |written: &mut Written,
                                spec: &iceberg::spec::PartitionSpec|
         -> Result<_, TableError> {
            let location = format!("{meta_dir}/{commit_id}-m{manifest_count}.avro");
            manifest_count += 1;
            written.0.push(self.warehouse.path(&location).map_err(table_error)?);
            let output = table.file_io().new_output(location).map_err(table_error)?;
            Ok(ManifestWriterBuilder::new(output, Some(snapshot_id), schema.clone(), spec.clone())
                .build_v2_data())
        };

        // The manifests that list a removed file are written again: the removed ones as
        // DELETED, the others as EXISTING; the other manifests stay as they are.
        let list = table.manifest_list_reader(current).load().await.map_err(table_error)?;
        for manifest_file in list.entries() {
            if manifest_file.content != ManifestContentType::Data {
                manifests.push(manifest_file.clone());
                continue;
            }
            // A manifest of DELETED entries only (an earlier compaction's) matters to the
            // snapshot that wrote it alone: it is not carried on, or every scan would read it.
            if !manifest_file.has_added_files() && !manifest_file.has_existing_files() {
                continue;
            }
            let manifest =
                manifest_file.load_manifest(table.file_io()).await.map_err(table_error)?;
            if !manifest.entries().iter().any(|e| e.is_alive() && gone.contains(e.file_path())) {
                manifests.push(manifest_file.clone());
                continue;
            }
            let manifest_spec = metadata
                .partition_spec_by_id(manifest_file.partition_spec_id)
                .ok_or_else(|| {
                    table_error(iceberg::Error::new(
                        ErrorKind::DataInvalid,
                        format!("no partition spec {}", manifest_file.partition_spec_id),
                    ))
                })?;
            let mut writer = new_manifest(written, manifest_spec)?;
            for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
                let sequence_number = entry.sequence_number().ok_or_else(|| {
                    table_error(iceberg::Error::new(
                        ErrorKind::DataInvalid,
                        format!("{}: no sequence number", entry.file_path()),
                    ))
                })?;
                let file = entry.data_file().clone();
                if gone.contains(entry.file_path()) {
                    writer
                        .add_delete_file(file, sequence_number, entry.file_sequence_number)
                        .map_err(table_error)?;
                } else {
                    let added_by = entry.snapshot_id().unwrap_or(current.snapshot_id());
                    writer
                        .add_existing_file(
                            file,
                            added_by,
                            sequence_number,
                            entry.file_sequence_number,
                        )
                        .map_err(table_error)?;
                }
            }
            manifests.push(writer.write_manifest_file().await.map_err(table_error)?);
        }

        let mut summary = SnapshotSummaryCollector::default();
        for file in removed {
            summary.remove_file(file, schema.clone(), spec.clone());
        }
        let mut writer = new_manifest(written, &spec)?;
        for file in added {
            summary.add_file(&file, schema.clone(), spec.clone());
            // Its sequence number is the snapshot's (inherited from the manifest).
            writer.add_file(file, -1).map_err(table_error)?;
        }
        manifests.push(writer.write_manifest_file().await.map_err(table_error)?);

        let list_location = format!("{meta_dir}/snap-{snapshot_id}-0-{commit_id}.avro");
        written.0.push(self.warehouse.path(&list_location).map_err(table_error)?);
        let output = table.file_io().new_output(list_location.clone()).map_err(table_error)?;
        let mut list_writer = ManifestListWriter::v2(
            output.writer().await.map_err(table_error)?,
            snapshot_id,
            Some(current.snapshot_id()),
            sequence,
        );
        list_writer.add_manifests(manifests.into_iter()).map_err(table_error)?;
        list_writer.close().await.map_err(table_error)?;

        let mut properties = summary.build();
        let changes = removed_and_added(&properties);
        totals(&mut properties, &current.summary().additional_properties, changes);
        properties.insert(COMPACTION.to_owned(), compaction);
        // The coverage goes on with it: once expiry takes the snapshots before this one, it is
        // the only place the loaders can read it from.
        let covers = super::covers(&name, metadata)?;
        properties
            .insert(super::COVERS.to_owned(), serde_json::to_string(&covers).expect("serializes"));
        let snapshot = Snapshot::builder()
            .with_manifest_list(list_location)
            .with_snapshot_id(snapshot_id)
            .with_parent_snapshot_id(Some(current.snapshot_id()))
            .with_sequence_number(sequence)
            .with_summary(Summary {
                operation: Operation::Replace,
                additional_properties: properties,
            })
            .with_schema_id(metadata.current_schema_id())
            .with_timestamp_ms(service::now_ms())
            .build();
        let updates = vec![
            TableUpdate::AddSnapshot { snapshot },
            TableUpdate::SetSnapshotRef {
                ref_name: MAIN_BRANCH.to_owned(),
                reference: SnapshotReference::new(
                    snapshot_id,
                    SnapshotRetention::branch(None, None, None),
                ),
            },
        ];
        let swapped = self.commit_metadata(table, updates, &mut written.0).await?;
        Ok(swapped.then_some(snapshot_id))
    }

    /// Deletes the files of a commit that did not happen.
    pub(super) async fn delete_written(&self, written: Vec<Path>) {
        for path in written {
            if let Err(e) = self.warehouse.store().delete(&path).await
                && !matches!(e, object_store::Error::NotFound { .. })
            {
                // Maintenance deletes it as an orphan later.
                tracing::warn!(%path, error = %e, "cannot delete a file of an uncommitted commit");
            }
        }
    }
}

/// The `added-*` and `deleted-*` counts of a summary: (files, records, bytes) added and removed.
fn removed_and_added(summary: &HashMap<String, String>) -> [(i64, i64); 3] {
    let get = |key: &str| summary.get(key).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
    [
        (get("added-data-files"), get("deleted-data-files")),
        (get("added-records"), get("deleted-records")),
        (get("added-files-size"), get("removed-files-size")),
    ]
}

/// Sets the `total-*` keys of a snapshot summary from its parent's and what it changed.
fn totals(
    summary: &mut HashMap<String, String>,
    parent: &HashMap<String, String>,
    changes: [(i64, i64); 3],
) {
    let keys = ["total-data-files", "total-records", "total-files-size"];
    for (key, (added, removed)) in keys.into_iter().zip(changes) {
        let before = parent.get(key).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        summary.insert(key.to_owned(), (before + added - removed).to_string());
    }
    for key in ["total-delete-files", "total-position-deletes", "total-equality-deletes"] {
        let before = parent.get(key).cloned().unwrap_or_else(|| "0".to_owned());
        summary.insert(key.to_owned(), before);
    }
}

fn parquet_error(table: &str, e: parquet::errors::ParquetError) -> TableError {
    TableError::Table {
        table: table.to_owned(),
        source: Box::new(iceberg::Error::new(ErrorKind::Unexpected, e.to_string())),
    }
}

/// A compacted file being written.
struct OutFile {
    path: Path,
    writer: AsyncArrowWriter<Upload>,
    rows: u64,
    min_time_us: i64,
    max_time_us: i64,
}

impl OutFile {
    fn open(
        tables: &Tables,
        path: Path,
        schema: arrow_schema::SchemaRef,
        options: &CompactOptions,
    ) -> Result<OutFile, parquet::errors::ParquetError> {
        let level = ZstdLevel::try_new(options.zstd_level)?;
        let properties = WriterProperties::builder()
            .set_compression(Compression::ZSTD(level))
            .set_created_by(format!(
                "tributary hdfs-loader {} (compaction)",
                env!("CARGO_PKG_VERSION")
            ))
            .build();
        let sink =
            BufWriter::with_capacity(Arc::clone(tables.warehouse.store()), path.clone(), 8 << 20)
                .with_max_concurrency(2);
        let writer = AsyncArrowWriter::try_new(Upload(sink), schema, Some(properties))?;
        Ok(OutFile { path, writer, rows: 0, min_time_us: i64::MAX, max_time_us: i64::MIN })
    }

    async fn write(
        &mut self,
        batch: &RecordBatch,
        options: &CompactOptions,
    ) -> Result<(), parquet::errors::ParquetError> {
        let times = batch
            .column_by_name("header")
            .and_then(|h| h.as_struct_opt())
            .and_then(|h| h.column_by_name("time"))
            .and_then(|t| t.as_primitive_opt::<TimestampMicrosecondType>())
            .ok_or_else(|| {
                parquet::errors::ParquetError::General("the rows have no header.time".to_owned())
            })?;
        for time in times.iter().flatten() {
            self.min_time_us = self.min_time_us.min(time);
            self.max_time_us = self.max_time_us.max(time);
        }
        self.rows += batch.num_rows() as u64;
        self.writer.write(batch).await?;
        if self.writer.in_progress_size() >= options.row_group_bytes {
            self.writer.flush().await?;
        }
        Ok(())
    }

    /// Bytes written so far, and buffered for the row group in progress.
    fn size(&self) -> u64 {
        (self.writer.bytes_written() + self.writer.in_progress_size()) as u64
    }

    async fn finish(mut self, hour: Hour) -> Result<WrittenFile, parquet::errors::ParquetError> {
        self.writer.finish().await?;
        Ok(WrittenFile {
            path: self.path.to_string(),
            hour,
            rows: self.rows,
            bytes: self.writer.bytes_written() as u64,
            min_time_ms: self.min_time_us.div_euclid(1000),
            // Bounds in ms that hold the µs ones: the upper one rounded up.
            max_time_ms: (self.max_time_us + 999).div_euclid(1000),
        })
    }
}
