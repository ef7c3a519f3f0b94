//! The dead-letter table: messages the loader cannot turn into rows of their topic's table (an
//! unknown schema id, a datum its writer schema does not decode, no `header.time`) go to
//! `{namespace}._dead_letters` with the reason, and the topic goes on.
//!
//! Exactly once like the topics' tables: the table's snapshots carry, per `topic/partition`,
//! the offset up to which its dead letters are in (`tributary.dead_letters`). A range's dead
//! letters are committed before the range itself, and only those at or past that offset, so a
//! range redone after a crash (or loaded by two loaders) adds none twice.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, Int32Builder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch, TimestampMicrosecondArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, ErrorKind, TableCreation, TableIdent};
use object_store::ObjectStoreExt;
use parquet::arrow::AsyncArrowWriter;

use super::shape::with_ids;
use super::{AtSnapshot, DEAD_LETTERS, DeadLetter, RangeLetters, TableError, Tables, from_summary};
use crate::sink::Upload;

/// Snapshot summary key: per `topic/partition`, the offset up to which dead letters are in.
pub const COVERS: &str = "tributary.dead_letters";

/// The columns of the dead-letter table.
fn arrow() -> Schema {
    Schema::new(vec![
        Field::new("topic", DataType::Utf8, false),
        Field::new("_partition", DataType::Int32, false),
        Field::new("_offset", DataType::Int64, false),
        Field::new("_index", DataType::Int32, false),
        Field::new("_schema_id", DataType::Int32, true),
        Field::new("reason", DataType::Utf8, false),
        Field::new("payload", DataType::Binary, false),
        Field::new(
            "loaded_at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
    ])
}

/// The schema id of a Confluent-framed payload (`0x00`, then the id big-endian).
pub fn schema_id_of(payload: &[u8]) -> Option<i32> {
    match payload {
        [0, a, b, c, d, ..] => Some(i32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

impl Tables {
    /// Adds the dead letters of `ranges` of `topic` that the table does not hold yet.
    pub async fn dead_letters(
        &self,
        topic: &str,
        ranges: &[RangeLetters],
        run_id: &str,
    ) -> Result<(), TableError> {
        let ident = TableIdent::new(self.namespace.clone(), DEAD_LETTERS.to_owned());
        let table_error =
            |source| TableError::Table { table: ident.to_string(), source: Box::new(source) };
        let (writer, schema) = with_ids(&arrow(), None)
            .map_err(|source| TableError::Schema { table: ident.to_string(), source })?;
        loop {
            let table = match self.catalog.load_table(&ident).await {
                Ok(table) => table,
                Err(e) if e.kind() == ErrorKind::TableNotFound => {
                    let creation = TableCreation::builder()
                        .name(DEAD_LETTERS.to_owned())
                        .schema(schema.clone())
                        .build();
                    if let Err(e) = self.catalog.create_table(&self.namespace, creation).await
                        && !self.catalog.table_exists(&ident).await.unwrap_or(false)
                    {
                        return Err(table_error(e));
                    }
                    continue;
                }
                Err(e) => return Err(table_error(e)),
            };
            let mut covers: BTreeMap<String, i64> =
                from_summary(&ident.to_string(), table.metadata(), COVERS)?;
            let mut kept = Vec::new();
            for range in ranges {
                let key = format!("{topic}/{}", range.partition);
                let from = covers.get(&key).copied().unwrap_or(i64::MIN);
                kept.extend(range.letters.iter().filter(|l| l.offset >= from));
                let end = covers.entry(key).or_insert(range.end);
                *end = (*end).max(range.end);
            }
            if kept.is_empty() {
                return Ok(());
            }
            let file = self.write_letters(&table, &writer, topic, &kept, run_id).await?;
            let properties = HashMap::from([(
                COVERS.to_owned(),
                serde_json::to_string(&covers).expect("covers serialize"),
            )]);
            let transaction = Transaction::new(&table);
            let append = transaction
                .fast_append()
                .with_check_duplicate(false)
                .add_data_files([file.clone()])
                .set_snapshot_properties(properties);
            let transaction = append.apply(transaction).map_err(table_error)?;
            let at_base = AtSnapshot { catalog: &self.catalog, base: &table };
            match transaction.commit(&at_base).await {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::CatalogCommitConflicts => {
                    // Another writer moved it: its file goes, and the letters are weighed again.
                    let path = self.warehouse.path(file.file_path()).map_err(table_error)?;
                    let _ = self.warehouse.store().delete(&path).await;
                }
                Err(e) => return Err(table_error(e)),
            }
        }
    }

    /// One Parquet file of `letters`, written under the table's `data/`.
    async fn write_letters(
        &self,
        table: &Table,
        writer: &Arc<Schema>,
        topic: &str,
        letters: &[&DeadLetter],
        run_id: &str,
    ) -> Result<DataFile, TableError> {
        let name = table.identifier().to_string();
        let io_error = |reason: String| TableError::Commit { table: name.clone(), reason };
        let mut topics = StringBuilder::new();
        let mut partitions = Int32Builder::new();
        let mut offsets = Int64Builder::new();
        let mut indexes = Int32Builder::new();
        let mut schema_ids = Int32Builder::new();
        let mut reasons = StringBuilder::new();
        let mut payloads = BinaryBuilder::new();
        for letter in letters {
            topics.append_value(topic);
            partitions.append_value(letter.partition);
            offsets.append_value(letter.offset);
            indexes.append_value(letter.index);
            schema_ids.append_option(letter.schema_id);
            reasons.append_value(&letter.reason);
            payloads.append_value(&letter.payload);
        }
        let now_us = service::now_ms().saturating_mul(1000);
        let loaded_at =
            TimestampMicrosecondArray::from(vec![now_us; letters.len()]).with_timezone("UTC");
        let columns: Vec<ArrayRef> = vec![
            Arc::new(topics.finish()),
            Arc::new(partitions.finish()),
            Arc::new(offsets.finish()),
            Arc::new(indexes.finish()),
            Arc::new(schema_ids.finish()),
            Arc::new(reasons.finish()),
            Arc::new(payloads.finish()),
            Arc::new(loaded_at),
        ];
        let batch = RecordBatch::try_new(Arc::new(arrow()), columns)
            .map_err(|e| io_error(e.to_string()))?;
        let location = self
            .warehouse
            .path(table.metadata().location())
            .map_err(|e| io_error(e.to_string()))?;
        let first = letters.first().map_or(0, |l| l.offset);
        let path = object_store::path::Path::from(format!(
            "{location}/data/{topic}-{}-{first:020}-{run_id}.parquet",
            letters.first().map_or(0, |l| l.partition)
        ));
        let sink = object_store::buffered::BufWriter::new(
            Arc::clone(self.warehouse.store()),
            path.clone(),
        );
        let mut parquet = AsyncArrowWriter::try_new(Upload(sink), Arc::clone(writer), None)
            .map_err(|e| io_error(e.to_string()))?;
        parquet.write(&batch).await.map_err(|e| io_error(e.to_string()))?;
        parquet.close().await.map_err(|e| io_error(e.to_string()))?;
        let bytes =
            self.warehouse.store().head(&path).await.map_err(|e| io_error(e.to_string()))?.size;
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(self.warehouse.location(&path))
            .file_format(DataFileFormat::Parquet)
            .partition_spec_id(table.metadata().default_partition_spec_id())
            .record_count(letters.len() as u64)
            .file_size_in_bytes(bytes)
            .build()
            .map_err(|e| io_error(e.to_string()))
    }
}
