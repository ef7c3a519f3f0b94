//! The loader's Iceberg format: one table per topic in a catalog (the SQL catalog on SQLite
//! that pyiceberg's `SqlCatalog` reads too), data files partitioned by `hour(header.time)`,
//! and exactly once through the table's own history.
//!
//! Committed ranges of partitions become snapshots (fast appends of the ranges' files; the
//! ranges that arrive while a commit of the table is in flight share the next one). A
//! snapshot's summary carries what the table covers (`tributary.partitions`: per partition,
//! the offset after the last loaded message, rows so far and the largest `header.time`) and
//! what it added (`tributary.commits`: the commit records of the Hive layout, without their
//! file lists, which the manifests hold). A loader reads where to go on from the current
//! snapshot (or, after a snapshot of another writer, its nearest ancestor of ours), and
//! commits only on top of the snapshot it read that from: the catalog's compare-and-set makes
//! a commit on a table that moved fail, and the loader then reads again — so of two loaders
//! that loaded one range, exactly one commits it and the other deletes its files.

pub mod compact;
pub mod dead_letters;
pub mod maintain;
mod metadata;
pub mod shape;
pub mod storage;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, Literal, NestedFieldRef,
    PrimitiveLiteral, PrimitiveType, Schema, Struct, StructType, TableMetadata, Transform, Type,
    UnboundPartitionSpec,
};
use iceberg::table::Table;
use iceberg::transaction::{AddColumn, ApplyTransactionAction, Transaction};
use iceberg::{
    Catalog, CatalogBuilder, ErrorKind, Namespace, NamespaceIdent, TableCommit, TableCreation,
    TableIdent,
};
use iceberg_catalog_sql::{SqlBindStyle, SqlCatalog, SqlCatalogBuilder};
use serde::{Deserialize, Serialize};

use crate::commit::{CommitRecord, Committed};
use crate::layout::{HOUR_MS, Hour};
use shape::TableShape;
use storage::{Warehouse, WarehouseFactory};

/// The catalog's name in its database (pyiceberg: `SqlCatalog("tributary", …)`).
pub const CATALOG_NAME: &str = "tributary";
/// Snapshot summary key: what the table covers, per partition.
pub const COVERS: &str = "tributary.partitions";
/// Snapshot summary key: the commit records of the ranges this snapshot added (a JSON array).
pub const COMMITS: &str = "tributary.commits";
/// The partition field of `hour(header.time)`.
pub const HOUR_FIELD: &str = "header_time_hour";

/// The dead-letter table's name in the namespace ([`dead_letters`]).
pub const DEAD_LETTERS: &str = "_dead_letters";

/// A message that did not become a row.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub partition: i32,
    pub offset: i64,
    /// Its position inside its top-level message (as `_index`).
    pub index: i32,
    /// The schema id of its envelope, if it has one.
    pub schema_id: Option<i32>,
    pub reason: String,
    pub payload: Vec<u8>,
}

/// The dead letters of one committed range of a partition.
#[derive(Debug, Clone)]
pub struct RangeLetters {
    pub partition: i32,
    /// The offset after the range.
    pub end: i64,
    pub letters: Vec<DeadLetter>,
}

/// Why an Iceberg operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    #[error("iceberg catalog {catalog}: {source}")]
    Catalog {
        catalog: String,
        #[source]
        source: Box<iceberg::Error>,
    },
    #[error("iceberg table {table}: {source}")]
    Table {
        table: String,
        #[source]
        source: Box<iceberg::Error>,
    },
    #[error("iceberg table {table}: snapshot {snapshot}: {reason}")]
    Corrupt { table: String, snapshot: i64, reason: String },
    #[error("iceberg table {table}: {source}")]
    Schema {
        table: String,
        #[source]
        source: crate::columns::ColumnError,
    },
    #[error("iceberg table {table}: commit failed: {reason}")]
    Commit { table: String, reason: String },
    #[error(
        "iceberg table {table}: the topic's schema cannot be written to the table: {difference}"
    )]
    SchemaChanged { table: String, difference: String },
}

/// What a table covers of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Covered {
    /// The offset after the last loaded message: where the next range starts.
    pub end: i64,
    /// Rows loaded from the partition so far.
    pub rows_total: u64,
    /// The largest `header.time` loaded so far (ms).
    pub max_time_ms: i64,
}

/// The catalog of a warehouse.
#[derive(Debug, Clone)]
pub struct Tables {
    catalog: Arc<SqlCatalog>,
    /// The catalog's database (`sqlite://PATH`), and a connection of our own to it for the
    /// commits the crate's catalog cannot make (see [`compact`]).
    catalog_uri: String,
    sql: Arc<tokio::sync::OnceCell<sqlx::SqlitePool>>,
    namespace: NamespaceIdent,
    warehouse: Warehouse,
}

impl Tables {
    /// Opens (creating if missing) the SQL catalog at `uri` (`sqlite:///path/catalog.db`) over
    /// `warehouse`, with `namespace` in it.
    pub async fn open(
        uri: &str,
        warehouse: Warehouse,
        namespace: &str,
    ) -> Result<Tables, TableError> {
        let catalog_error =
            |source| TableError::Catalog { catalog: uri.to_owned(), source: Box::new(source) };
        let sqlite = uri.strip_prefix("sqlite://").ok_or_else(|| {
            catalog_error(iceberg::Error::new(
                ErrorKind::DataInvalid,
                "the catalog must be sqlite:///PATH (a SQLite file)",
            ))
        })?;
        if let Some(parent) = std::path::Path::new(sqlite).parent() {
            std::fs::create_dir_all(parent).map_err(|e| {
                catalog_error(iceberg::Error::new(
                    ErrorKind::Unexpected,
                    format!("cannot create {}: {e}", parent.display()),
                ))
            })?;
        }
        let catalog = SqlCatalogBuilder::default()
            .uri(format!("sqlite://{sqlite}?mode=rwc"))
            .warehouse_location(warehouse.url())
            .sql_bind_style(SqlBindStyle::QMark)
            .with_storage_factory(Arc::new(WarehouseFactory(warehouse.clone())))
            .load(CATALOG_NAME, HashMap::new())
            .await
            .map_err(catalog_error)?;
        let namespace = NamespaceIdent::new(namespace.to_owned());
        match catalog.create_namespace(&namespace, HashMap::new()).await {
            Ok(_) => {}
            Err(e) if catalog.namespace_exists(&namespace).await.unwrap_or(false) => {
                tracing::trace!(error = %e, "namespace exists");
            }
            Err(e) => return Err(catalog_error(e)),
        }
        Ok(Tables {
            catalog: Arc::new(catalog),
            catalog_uri: format!("sqlite://{sqlite}"),
            sql: Arc::default(),
            namespace,
            warehouse,
        })
    }

    pub fn warehouse(&self) -> &Warehouse {
        &self.warehouse
    }

    fn ident(&self, topic: &str) -> TableIdent {
        TableIdent::new(self.namespace.clone(), topic.to_owned())
    }

    /// `topic`'s table, created with `arrow`'s columns if missing. A field of `arrow` the
    /// table lacks is added to it as an optional column (older rows read null there); a field
    /// the table has and `arrow` lacks stays, if optional; any other difference is an error.
    pub async fn topic(
        &self,
        topic: &str,
        arrow: &arrow_schema::Schema,
    ) -> Result<TopicTable, TableError> {
        let ident = self.ident(topic);
        let table_error =
            |source| TableError::Table { table: ident.to_string(), source: Box::new(source) };
        let mut table = match self.catalog.load_table(&ident).await {
            Ok(table) => table,
            Err(e) if e.kind() == ErrorKind::TableNotFound => {
                self.create(topic, arrow).await?;
                self.catalog.load_table(&ident).await.map_err(table_error)?
            }
            Err(e) => return Err(table_error(e)),
        };
        let mut evolutions = 0;
        let shape = loop {
            let known = table.metadata().current_schema().clone();
            let shape = TableShape::new(arrow, Some(&known))
                .map_err(|source| TableError::Schema { table: ident.to_string(), source })?;
            let Fit { additions, promotions } =
                fit(&known, &shape.schema).map_err(|difference| TableError::SchemaChanged {
                    table: ident.to_string(),
                    difference,
                })?;
            if additions.is_empty() && promotions.is_empty() {
                break shape;
            }
            // Promotions, then additions, and once more if another loader raced either.
            if evolutions == 3 {
                let difference = "the table's schema does not settle to the topic's".to_owned();
                return Err(TableError::SchemaChanged { table: ident.to_string(), difference });
            }
            evolutions += 1;
            if !promotions.is_empty() {
                self.promote(&table, &known, &promotions).await?;
            } else {
                let names: Vec<String> = additions.iter().map(|(path, _)| path.clone()).collect();
                let transaction = Transaction::new(&table);
                let mut update = transaction.update_schema();
                for (_, column) in additions {
                    update = update.add_column(column);
                }
                let transaction = update.apply(transaction).map_err(table_error)?;
                match transaction.commit(&*self.catalog).await {
                    Ok(_) => {
                        tracing::info!(table = %ident, columns = ?names, "added the topic's new fields to the table")
                    }
                    // Another loader evolved it at the same moment: read what it made.
                    Err(e) if e.kind() == ErrorKind::CatalogCommitConflicts => {
                        tracing::debug!(table = %ident, error = %e, "schema update raced");
                    }
                    Err(e) => return Err(table_error(e)),
                }
            }
            table = self.catalog.load_table(&ident).await.map_err(table_error)?;
        };
        let location =
            self.warehouse.path(table.metadata().location()).map_err(table_error)?.to_string();
        Ok(TopicTable {
            tables: self.clone(),
            ident,
            spec_id: table.metadata().default_partition_spec_id(),
            shape,
            location,
            known: std::sync::Mutex::new(table),
            pending: std::sync::Mutex::new(Vec::new()),
            committing: tokio::sync::Mutex::new(()),
        })
    }

    async fn create(&self, topic: &str, arrow: &arrow_schema::Schema) -> Result<(), TableError> {
        let ident = self.ident(topic);
        let table_error =
            |source| TableError::Table { table: ident.to_string(), source: Box::new(source) };
        let shape = TableShape::new(arrow, None)
            .map_err(|source| TableError::Schema { table: ident.to_string(), source })?;
        let spec = UnboundPartitionSpec::builder()
            .add_partition_field(shape.time_id, HOUR_FIELD, Transform::Hour)
            .map_err(table_error)?
            .build();
        let creation = TableCreation::builder()
            .name(topic.to_owned())
            .schema(shape.schema)
            .partition_spec(spec)
            .properties([
                ("write.format.default".to_owned(), "parquet".to_owned()),
                ("write.parquet.compression-codec".to_owned(), "zstd".to_owned()),
            ])
            .build();
        match self.catalog.create_table(&self.namespace, creation).await {
            Ok(_) => Ok(()),
            // Another loader created it first (the catalog's row is unique).
            Err(e) if self.catalog.table_exists(&ident).await.unwrap_or(false) => {
                tracing::debug!(table = %ident, error = %e, "created by another loader");
                Ok(())
            }
            Err(e) => Err(table_error(e)),
        }
    }

    /// Widens the columns `promotions` names (field id: path and new type) in a new current
    /// schema of `table` (whose schema is `known`). Older files keep their narrower type;
    /// readers widen it. A commit of another writer in between leaves the table as it is (the
    /// caller reads it again).
    async fn promote(
        &self,
        table: &Table,
        known: &Schema,
        promotions: &BTreeMap<i32, (String, Type)>,
    ) -> Result<(), TableError> {
        let name = table.identifier().to_string();
        let table_error =
            |source| TableError::Table { table: name.clone(), source: Box::new(source) };
        let schema = Schema::builder()
            .with_schema_id(known.schema_id() + 1)
            .with_fields(promoted(known.as_struct().fields(), promotions))
            .with_identifier_field_ids(known.identifier_field_ids())
            .build()
            .map_err(table_error)?;
        let updates = vec![
            iceberg::TableUpdate::AddSchema { schema },
            iceberg::TableUpdate::SetCurrentSchema { schema_id: -1 },
        ];
        let mut written = Vec::new();
        let columns: Vec<String> =
            promotions.values().map(|(path, to)| format!("{path} to {to}")).collect();
        if self.commit_metadata(table, updates, &mut written).await? {
            tracing::info!(table = %name, ?columns, "widened the table's columns to the topic's types");
        } else {
            tracing::debug!(table = %name, "type promotion raced another commit");
            self.delete_written(written).await;
        }
        Ok(())
    }

    /// The tables of the namespace: the topics', and the dead-letter table.
    pub async fn tables(&self) -> Result<Vec<String>, TableError> {
        let tables = self.catalog.list_tables(&self.namespace).await.map_err(|source| {
            TableError::Table { table: self.namespace.join("."), source: Box::new(source) }
        })?;
        Ok(tables.into_iter().map(|t| t.name().to_owned()).collect())
    }

    /// The topics that have a table.
    pub async fn topics(&self) -> Result<Vec<String>, TableError> {
        let mut tables = self.tables().await?;
        tables.retain(|t| t != DEAD_LETTERS);
        Ok(tables)
    }

    /// What `topic`'s table covers now, per partition (empty when there is no table).
    pub async fn covers_of(&self, topic: &str) -> Result<BTreeMap<i32, Covered>, TableError> {
        let ident = self.ident(topic);
        match self.catalog.load_table(&ident).await {
            Ok(table) => covers(&ident.to_string(), table.metadata()),
            Err(e) if e.kind() == ErrorKind::TableNotFound => Ok(BTreeMap::new()),
            Err(e) => Err(TableError::Table { table: ident.to_string(), source: Box::new(e) }),
        }
    }

    /// `topic`'s table as it is now; `None` when there is none.
    pub async fn state(&self, topic: &str) -> Result<Option<TableState>, TableError> {
        let ident = self.ident(topic);
        let table_error =
            |source| TableError::Table { table: ident.to_string(), source: Box::new(source) };
        let table = match self.catalog.load_table(&ident).await {
            Ok(table) => table,
            Err(e) if e.kind() == ErrorKind::TableNotFound => return Ok(None),
            Err(e) => return Err(table_error(e)),
        };
        let metadata = table.metadata();
        let Some(current) = metadata.current_snapshot() else {
            return Ok(Some(TableState::default()));
        };
        let covers = covers(&ident.to_string(), metadata)?;
        let mut last_commit_ms = BTreeMap::new();
        let mut snapshot = Some(current);
        while let Some(s) = snapshot
            && last_commit_ms.len() < covers.len()
        {
            let records = s
                .summary()
                .additional_properties
                .get(COMMITS)
                .and_then(|json| serde_json::from_str::<Vec<CommitRecord>>(json).ok())
                .unwrap_or_default();
            for record in records {
                if let Ok(partition) = record.partition.parse::<i32>() {
                    last_commit_ms.entry(partition).or_insert(record.committed_at_ms);
                }
            }
            snapshot = s.parent_snapshot_id().and_then(|id| metadata.snapshot_by_id(id));
        }
        let manifests = table.manifest_list_reader(current).load().await.map_err(table_error)?;
        let mut files = Vec::new();
        for manifest in manifests.entries() {
            let manifest = manifest.load_manifest(table.file_io()).await.map_err(table_error)?;
            for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
                let file = entry.data_file();
                if file.content_type() != DataContentType::Data {
                    continue;
                }
                let hour = match file.partition().fields().first() {
                    Some(Some(Literal::Primitive(PrimitiveLiteral::Int(h)))) => {
                        Some(Hour { start_ms: i64::from(*h) * HOUR_MS })
                    }
                    _ => None,
                };
                files.push(LiveFile {
                    path: self.warehouse.path(file.file_path()).map_err(table_error)?,
                    hour,
                    rows: file.record_count(),
                    bytes: file.file_size_in_bytes(),
                });
            }
        }
        Ok(Some(TableState {
            snapshot: Some(current.snapshot_id()),
            snapshot_ms: Some(current.timestamp_ms()),
            covers,
            last_commit_ms,
            files,
        }))
    }

    /// The commit records of every snapshot of `topic`'s table that this loader format wrote,
    /// oldest first; empty when there is no table.
    pub async fn commit_records(&self, topic: &str) -> Result<Vec<CommitRecord>, TableError> {
        let ident = self.ident(topic);
        let table = match self.catalog.load_table(&ident).await {
            Ok(table) => table,
            Err(e) if e.kind() == ErrorKind::TableNotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(TableError::Table {
                    table: ident.to_string(),
                    source: Box::new(source),
                });
            }
        };
        let mut snapshots: Vec<_> = table.metadata().snapshots().collect();
        snapshots.sort_by_key(|s| s.sequence_number());
        let mut records = Vec::new();
        for snapshot in snapshots {
            if let Some(json) = snapshot.summary().additional_properties.get(COMMITS) {
                let added: Vec<CommitRecord> =
                    serde_json::from_str(json).map_err(|e| TableError::Corrupt {
                        table: ident.to_string(),
                        snapshot: snapshot.snapshot_id(),
                        reason: format!("{COMMITS}: {e}"),
                    })?;
                records.extend(added);
            }
        }
        Ok(records)
    }
}

/// One data file written for a commit.
#[derive(Debug, Clone)]
pub struct WrittenFile {
    /// Store path.
    pub path: String,
    pub hour: Hour,
    pub rows: u64,
    pub bytes: u64,
    /// The least and greatest `header.time` in it (ms).
    pub min_time_ms: i64,
    pub max_time_ms: i64,
}

/// A topic's table, as one run loads into it.
#[derive(Debug)]
pub struct TopicTable {
    tables: Tables,
    ident: TableIdent,
    spec_id: i32,
    pub shape: TableShape,
    /// The table's store path.
    location: String,
    /// The table as this run last saw it (loaded, or as its last commit left it): what a
    /// partition's load starts from and a commit is built on. Each table read parses the whole
    /// metadata file, which grows with the snapshots kept, so the run reads the table only
    /// when a commit finds it moved: a stale start is fenced at the commit, a stale base
    /// fails the catalog's compare-and-set, and either reads again.
    known: std::sync::Mutex<Table>,
    /// Ranges waiting for a commit (group commit, see [`TopicTable::commit`]).
    pending: std::sync::Mutex<Vec<Pending>>,
    /// Held by the one task committing for all.
    committing: tokio::sync::Mutex<()>,
}

/// A range waiting to be committed, and who waits for the outcome.
#[derive(Debug)]
struct Pending {
    partition: i32,
    record: CommitRecord,
    files: Vec<DataFile>,
    /// The range's messages that did not become rows.
    letters: Vec<DeadLetter>,
    outcome: tokio::sync::oneshot::Sender<Result<Committed, String>>,
}

impl TopicTable {
    pub fn name(&self) -> String {
        self.ident.to_string()
    }

    /// Where the `part`th file of `partition`'s range from `start`, rows of `hour`, is
    /// written: under the table's `data/`, in the directory of its partition value, named so
    /// that two loaders of one range (different runs) never write one file.
    pub fn data_path(
        &self,
        hour: Hour,
        partition: i32,
        start: i64,
        run_id: &str,
        part: u32,
    ) -> String {
        let part = if part == 0 { String::new() } else { format!("-{part}") };
        format!(
            "{}/data/{HOUR_FIELD}={}/{partition:05}-{start:020}-{run_id}{part}.parquet",
            self.location,
            hour_label(hour)
        )
    }

    /// What the table covers of `partition`, as this run last saw it.
    pub fn covered(&self, partition: i32) -> Result<Option<Covered>, TableError> {
        let table = self.known_table().clone();
        Ok(self.covers(table.metadata())?.get(&partition).copied())
    }

    fn known_table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn load(&self) -> Result<Table, TableError> {
        self.tables
            .catalog
            .load_table(&self.ident)
            .await
            .map_err(|source| TableError::Table { table: self.name(), source: Box::new(source) })
    }

    fn covers(&self, metadata: &TableMetadata) -> Result<BTreeMap<i32, Covered>, TableError> {
        covers(&self.name(), metadata)
    }

    /// Commits `record`'s range (its files `files`) if the table still covers the partition
    /// up to the range's start (or not at all, for a first range). `Fenced`: another loader
    /// committed the partition further; the caller deletes its files.
    ///
    /// Group commit: the ranges of a topic's partitions that arrive while a commit of the
    /// table is in flight go together into the next snapshot, so partitions loaded side by side
    /// make one snapshot, not one each.
    pub async fn commit(
        &self,
        record: &CommitRecord,
        files: &[WrittenFile],
        letters: Vec<DeadLetter>,
    ) -> Result<Committed, TableError> {
        let partition: i32 = record.partition.parse().map_err(|_| TableError::Corrupt {
            table: self.name(),
            snapshot: -1,
            reason: format!("partition {:?} is not a number", record.partition),
        })?;
        let files = files.iter().map(|f| self.data_file(f)).collect::<Result<Vec<_>, _>>()?;
        let mut record = record.clone();
        record.files.clear();
        let (outcome, waiting) = tokio::sync::oneshot::channel();
        self.pending_ranges().push(Pending { partition, record, files, letters, outcome });
        {
            let _committer = self.committing.lock().await;
            let group = std::mem::take(&mut *self.pending_ranges());
            if !group.is_empty() {
                self.commit_group(group).await;
            }
        }
        let reason = match waiting.await {
            Ok(Ok(committed)) => return Ok(committed),
            Ok(Err(reason)) => reason,
            Err(_) => "the commit was dropped".to_owned(),
        };
        Err(TableError::Commit { table: self.name(), reason })
    }

    fn pending_ranges(&self) -> std::sync::MutexGuard<'_, Vec<Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Commits `group` as one snapshot, telling each range's waiter its outcome. The ranges'
    /// dead letters go to the dead-letter table first (each once, whatever happens next).
    async fn commit_group(&self, mut group: Vec<Pending>) {
        let letters: Vec<RangeLetters> = group
            .iter()
            .filter(|p| !p.letters.is_empty())
            .map(|p| RangeLetters {
                partition: p.partition,
                end: p.record.end,
                letters: p.letters.clone(),
            })
            .collect();
        if let Some(first) = group.first()
            && !letters.is_empty()
        {
            let run_id = first.record.run_id.clone();
            if let Err(e) = self.tables.dead_letters(self.ident.name(), &letters, &run_id).await {
                return fail(group, &e);
            }
        }
        let mut reread = false;
        loop {
            let (table, mut covers) = match self.read(reread).await {
                Ok(read) => read,
                Err(e) => return fail(group, &e),
            };
            reread = true;
            let (fenced, kept): (Vec<_>, Vec<_>) = group.into_iter().partition(|p| {
                covers.get(&p.partition).is_some_and(|covered| covered.end != p.record.start)
            });
            for pending in fenced {
                let _ = pending.outcome.send(Ok(Committed::Fenced));
            }
            group = kept;
            if group.is_empty() {
                return;
            }
            for pending in &group {
                let r = &pending.record;
                let covered =
                    Covered { end: r.end, rows_total: r.rows_total, max_time_ms: r.max_time_ms };
                covers.insert(pending.partition, covered);
            }
            let records: Vec<&CommitRecord> = group.iter().map(|p| &p.record).collect();
            let properties = HashMap::from([
                (COVERS.to_owned(), serde_json::to_string(&covers).expect("covers serialize")),
                (COMMITS.to_owned(), serde_json::to_string(&records).expect("records serialize")),
            ]);
            let files: Vec<DataFile> = group.iter().flat_map(|p| p.files.clone()).collect();
            let transaction = Transaction::new(&table);
            let append = transaction
                .fast_append()
                .with_check_duplicate(false)
                .add_data_files(files)
                .set_snapshot_properties(properties);
            let transaction = match append.apply(transaction) {
                Ok(transaction) => transaction,
                Err(e) => return fail(group, &self.table_error(e)),
            };
            let at_base = AtSnapshot { catalog: &self.tables.catalog, base: &table };
            match transaction.commit(&at_base).await {
                Ok(committed) => {
                    *self.known_table() = committed;
                    for pending in group {
                        let _ = pending.outcome.send(Ok(Committed::Won));
                    }
                    return;
                }
                Err(e) if e.kind() == ErrorKind::CatalogCommitConflicts => {
                    // The table moved since it was read (another loader, a maintenance
                    // pass): read it again.
                    tracing::debug!(table = %self.name(), ranges = group.len(), "commit conflict; reading the table again");
                }
                Err(e) => return fail(group, &self.table_error(e)),
            }
        }
    }

    /// The table (as last seen, or `fresh` from the catalog) and what it covers.
    async fn read(&self, fresh: bool) -> Result<(Table, BTreeMap<i32, Covered>), TableError> {
        let table = match fresh {
            true => {
                let table = self.load().await?;
                *self.known_table() = table.clone();
                table
            }
            false => self.known_table().clone(),
        };
        let covers = self.covers(table.metadata())?;
        Ok((table, covers))
    }

    fn table_error(&self, source: iceberg::Error) -> TableError {
        TableError::Table { table: self.name(), source: Box::new(source) }
    }

    fn data_file(&self, file: &WrittenFile) -> Result<DataFile, TableError> {
        build_data_file(
            &self.name(),
            &self.tables.warehouse,
            self.spec_id,
            self.shape.time_id,
            file,
        )
    }
}

/// An hour as its partition directory names it: `2026-12-06-13`.
fn hour_label(hour: Hour) -> String {
    let (y, m, d, h) = hour.civil();
    format!("{y:04}-{m:02}-{d:02}-{h:02}")
}

/// The manifest entry of a data file written for `table` (partition spec `spec_id`, whose
/// hour is of field `time_id`).
fn build_data_file(
    table: &str,
    warehouse: &Warehouse,
    spec_id: i32,
    time_id: i32,
    file: &WrittenFile,
) -> Result<DataFile, TableError> {
    let table_error =
        |source| TableError::Table { table: table.to_owned(), source: Box::new(source) };
    let hour =
        i32::try_from(file.hour.start_ms.div_euclid(HOUR_MS)).map_err(|_| TableError::Corrupt {
            table: table.to_owned(),
            snapshot: -1,
            reason: format!("hour of {} ms out of range", file.hour.start_ms),
        })?;
    DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path(warehouse.location(&file.path.as_str().into()))
        .file_format(DataFileFormat::Parquet)
        .partition(Struct::from_iter([Some(Literal::int(hour))]))
        .partition_spec_id(spec_id)
        .record_count(file.rows)
        .file_size_in_bytes(file.bytes)
        .value_counts(HashMap::from([(time_id, file.rows)]))
        .null_value_counts(HashMap::from([(time_id, 0)]))
        .lower_bounds(HashMap::from([(
            time_id,
            Datum::timestamptz_micros(file.min_time_ms.saturating_mul(1000)),
        )]))
        .upper_bounds(HashMap::from([(
            time_id,
            Datum::timestamptz_micros(file.max_time_ms.saturating_mul(1000)),
        )]))
        .build()
        .map_err(|e| table_error(iceberg::Error::new(ErrorKind::DataInvalid, e.to_string())))
}

/// What a table covers at its current snapshot: from the nearest snapshot of ours in its
/// ancestry (another writer's snapshot — a compaction, a maintenance job — keeps ours).
fn covers(table: &str, metadata: &TableMetadata) -> Result<BTreeMap<i32, Covered>, TableError> {
    from_summary(table, metadata, COVERS)
}

/// The JSON under `key` in the summary of the current snapshot or, failing that, of its
/// nearest ancestor that has it; empty when none has and the ancestry is whole (a table of
/// no snapshots, or only another writer's); an error when an ancestor that might have had it
/// expired.
fn from_summary<T: serde::de::DeserializeOwned + Default>(
    table: &str,
    metadata: &TableMetadata,
    key: &str,
) -> Result<T, TableError> {
    let mut snapshot = metadata.current_snapshot();
    while let Some(s) = snapshot {
        if let Some(json) = s.summary().additional_properties.get(key) {
            return serde_json::from_str(json).map_err(|e| TableError::Corrupt {
                table: table.to_owned(),
                snapshot: s.snapshot_id(),
                reason: format!("{key}: {e}"),
            });
        }
        snapshot = match s.parent_snapshot_id() {
            None => None,
            Some(parent) => match metadata.snapshot_by_id(parent) {
                Some(parent) => Some(parent),
                // Expired: what the table covers is not known; starting over would load
                // everything twice.
                None => {
                    return Err(TableError::Corrupt {
                        table: table.to_owned(),
                        snapshot: s.snapshot_id(),
                        reason: format!(
                            "no {key} in this snapshot or its kept ancestors (its parent {parent} expired)"
                        ),
                    });
                }
            },
        };
    }
    Ok(T::default())
}

/// A data file of a table's current snapshot.
#[derive(Debug, Clone)]
pub struct LiveFile {
    /// Store path.
    pub path: object_store::path::Path,
    /// The hour its rows are in (its partition value).
    pub hour: Option<Hour>,
    pub rows: u64,
    pub bytes: u64,
}

/// A table as it is now: what status and readers need.
#[derive(Debug, Clone, Default)]
pub struct TableState {
    pub snapshot: Option<i64>,
    /// When the current snapshot was committed (ms).
    pub snapshot_ms: Option<i64>,
    pub covers: BTreeMap<i32, Covered>,
    /// Per partition, when its last range was committed (ms).
    pub last_commit_ms: BTreeMap<i32, i64>,
    pub files: Vec<LiveFile>,
}

/// Tells every waiter of `group` that its commit failed with `error`.
fn fail(group: Vec<Pending>, error: &TableError) {
    for pending in group {
        let _ = pending.outcome.send(Err(error.to_string()));
    }
}

/// How a topic's schema fits its table's: what to change in the table first.
#[derive(Default)]
struct Fit {
    /// Columns to add (path, column).
    additions: Vec<(String, AddColumn)>,
    /// Columns to widen (field id: path, new type): int to long, float to double.
    promotions: BTreeMap<i32, (String, Type)>,
}

/// How a topic's schema (`ours`, with the table's ids where paths match) fits its table's
/// (see [`Fit`]), or why it cannot be written to the table.
fn fit(table: &Schema, ours: &Schema) -> Result<Fit, String> {
    let mut fit = Fit::default();
    fit_fields(table, ours.as_struct().fields(), None, &mut fit)?;
    removed(ours, table.as_struct().fields(), None)?;
    Ok(fit)
}

fn fit_fields(
    table: &Schema,
    fields: &[NestedFieldRef],
    parent: Option<&str>,
    fit: &mut Fit,
) -> Result<(), String> {
    for field in fields {
        let path = parent.map_or_else(|| field.name.clone(), |p| format!("{p}.{}", field.name));
        let Some(theirs) = table.field_by_id(field.id) else {
            let column = match parent {
                Some(parent) => AddColumn::builder()
                    .parent(parent)
                    .name(field.name.clone())
                    .field_type((*field.field_type).clone())
                    .build(),
                None => AddColumn::optional(&field.name, (*field.field_type).clone()),
            };
            fit.additions.push((path, column));
            continue;
        };
        if !field.required && theirs.required {
            return Err(format!("{path} may be null now and is required in the table"));
        }
        match (&*field.field_type, &*theirs.field_type) {
            (Type::Struct(ours), Type::Struct(_)) => {
                fit_fields(table, ours.fields(), Some(&path), fit)?
            }
            (ours, theirs) if ours == theirs => {}
            (Type::Primitive(PrimitiveType::Long), Type::Primitive(PrimitiveType::Int))
            | (Type::Primitive(PrimitiveType::Double), Type::Primitive(PrimitiveType::Float)) => {
                fit.promotions.insert(field.id, (path, (*field.field_type).clone()));
            }
            (ours, theirs) => {
                return Err(format!(
                    "{path} is {theirs} in the table and {ours} in the topic's schema (a table \
                     gains new fields, and widens int to long and float to double: other type \
                     changes and fields new inside a list or map are not made)"
                ));
            }
        }
    }
    Ok(())
}

/// `fields` with the types of `promotions` (by field id), at any depth of records.
fn promoted(
    fields: &[NestedFieldRef],
    promotions: &BTreeMap<i32, (String, Type)>,
) -> Vec<NestedFieldRef> {
    fields
        .iter()
        .map(|field| {
            let mut field = (**field).clone();
            if let Some((_, to)) = promotions.get(&field.id) {
                field.field_type = Box::new(to.clone());
            } else if let Type::Struct(nested) = &*field.field_type {
                let fields = promoted(nested.fields(), promotions);
                field.field_type = Box::new(Type::Struct(StructType::new(fields)));
            }
            Arc::new(field)
        })
        .collect()
}

/// Fails if a required field of the table is not in the topic's schema.
fn removed(ours: &Schema, fields: &[NestedFieldRef], parent: Option<&str>) -> Result<(), String> {
    for field in fields {
        let path = parent.map_or_else(|| field.name.clone(), |p| format!("{p}.{}", field.name));
        match ours.field_by_id(field.id) {
            None if field.required => {
                return Err(format!("{path} is required in the table and gone from the topic"));
            }
            None => {}
            Some(_) => {
                if let Type::Struct(nested) = &*field.field_type {
                    removed(ours, nested.fields(), Some(&path))?;
                }
            }
        }
    }
    Ok(())
}

/// The catalog, for one commit built on `base`: the crate's transaction "reloads" the table
/// before it commits, and gets `base` again, so the commit is never rebased onto a table that
/// another writer moved (the coverage it carries would be stale). The catalog's commit then
/// checks that the table's current snapshot is still `base`'s, against the table as it is,
/// and refuses it with a conflict if not.
#[derive(Debug)]
struct AtSnapshot<'a> {
    catalog: &'a SqlCatalog,
    base: &'a Table,
}

#[async_trait::async_trait]
impl Catalog for AtSnapshot<'_> {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> iceberg::Result<Vec<NamespaceIdent>> {
        self.catalog.list_namespaces(parent).await
    }
    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<Namespace> {
        self.catalog.create_namespace(namespace, properties).await
    }
    async fn get_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<Namespace> {
        self.catalog.get_namespace(namespace).await
    }
    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> iceberg::Result<bool> {
        self.catalog.namespace_exists(namespace).await
    }
    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<()> {
        self.catalog.update_namespace(namespace, properties).await
    }
    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<()> {
        self.catalog.drop_namespace(namespace).await
    }
    async fn list_tables(&self, namespace: &NamespaceIdent) -> iceberg::Result<Vec<TableIdent>> {
        self.catalog.list_tables(namespace).await
    }
    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> iceberg::Result<Table> {
        self.catalog.create_table(namespace, creation).await
    }
    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<Table> {
        if table == self.base.identifier() {
            return Ok(self.base.clone());
        }
        self.catalog.load_table(table).await
    }
    async fn drop_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.catalog.drop_table(table).await
    }
    async fn purge_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.catalog.purge_table(table).await
    }
    async fn table_exists(&self, table: &TableIdent) -> iceberg::Result<bool> {
        self.catalog.table_exists(table).await
    }
    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> iceberg::Result<()> {
        self.catalog.rename_table(src, dest).await
    }
    async fn register_table(
        &self,
        table: &TableIdent,
        metadata_location: String,
    ) -> iceberg::Result<Table> {
        self.catalog.register_table(table, metadata_location).await
    }
    async fn update_table(&self, commit: TableCommit) -> iceberg::Result<Table> {
        // A conflict goes back to the loader at once, which reads the table again: the
        // transaction's own retry would only sleep and then meet `load_table`'s refusal.
        self.catalog.update_table(commit).await.map_err(|e| match e.kind() {
            ErrorKind::CatalogCommitConflicts => e.with_retryable(false),
            _ => e,
        })
    }
}
