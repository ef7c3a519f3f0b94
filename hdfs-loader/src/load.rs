//! Loads one partition: from its committed offset to the log end seen at the start, in
//! commits of at most `max_messages_per_commit` messages, each staged as Parquet (one file
//! per hour of `header.time`), committed conditionally and then moved into place.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use apache_avro::Schema;
use arrow_array::builder::{
    ArrayBuilder, BinaryBuilder, Int32Builder, Int64Builder, MapBuilder, StringBuilder,
    TimestampMillisecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, SchemaRef};
use client::{ConsumerError, RecordFields, SimpleConsumer, SimpleConsumerConfig};

use events::audit::window_start;
use object_store::buffered::BufWriter;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::AsyncArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use schema_registry::RegistryClient;
use tokio_util::sync::CancellationToken;

use crate::columns::{Column, RecordShape};
use crate::commit::{CommitRecord, Committed, CommittedFile, PartitionCommits};
use crate::decode::{BadRecord, Body, Decoded, Schemas};
use crate::layout::{self, Hour};
use crate::sink::Upload;
use crate::table::dead_letters;
use crate::table::{DeadLetter, TopicTable, WrittenFile};
use crate::{Config, LoadError};

/// Bytes of one part of a staged file's upload.
const UPLOAD_PART_BYTES: usize = 8 << 20;
/// Parts of one file uploading at once.
const UPLOAD_PARTS_IN_FLIGHT: usize = 2;

/// What a topic's partitions share during a run.
pub struct TopicContext {
    pub topic: String,
    pub reader_id: i32,
    pub reader: Arc<Schema>,
    pub shape: Arc<RecordShape>,
    pub arrow: SchemaRef,
    /// The topic's Iceberg table, when the loader writes that format.
    pub table: Option<TopicTable>,
}

impl TopicContext {
    pub fn new(
        topic: &str,
        reader_id: i32,
        reader: Arc<Schema>,
    ) -> Result<TopicContext, LoadError> {
        let shape = RecordShape::of(&reader)
            .map_err(|source| LoadError::Schema { topic: topic.to_owned(), source })?;
        let mut fields: Vec<Field> = shape.fields().iter().map(|f| (**f).clone()).collect();
        fields.push(Field::new("_partition", DataType::Int32, false));
        fields.push(Field::new("_offset", DataType::Int64, false));
        fields.push(Field::new("_index", DataType::Int32, false));
        fields.push(Field::new("_schema_id", DataType::Int32, false));
        // What a Kafka record carries beside its value, for events produced through a
        // broker's Kafka listener; null for every other event.
        fields.push(Field::new("_key", DataType::Binary, true));
        fields.push(Field::new("_headers", KafkaColumns::headers_type(), true));
        let utc = DataType::Timestamp(arrow_schema::TimeUnit::Millisecond, Some("UTC".into()));
        fields.push(Field::new("_timestamp", utc, true));
        Ok(TopicContext {
            topic: topic.to_owned(),
            reader_id,
            reader,
            shape: Arc::new(shape),
            arrow: Arc::new(arrow_schema::Schema::new(fields)),
            table: None,
        })
    }
}

/// What one partition's load did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PartitionLoad {
    pub topic: String,
    pub partition: i32,
    /// Committed offset before the run.
    pub start: i64,
    /// Committed offset after it.
    pub end: i64,
    pub rows: u64,
    pub commits: u64,
    pub bad_records: u64,
    /// Set when another loader committed a range first.
    pub fenced: bool,
    /// The commit records this load wrote (for audit counts).
    #[serde(skip)]
    pub records: Vec<CommitRecord>,
    /// The start of the record that ended the chain when the load finished, if any: where the
    /// next run's listing begins.
    #[serde(skip)]
    pub last_start: Option<i64>,
}

pub struct PartitionLoader<'a> {
    pub config: &'a Config,
    pub host: &'a str,
    pub run_id: &'a str,
    pub store: Arc<dyn ObjectStore>,
    pub registry: Arc<RegistryClient>,
    pub topic: &'a TopicContext,
    pub partition: i32,
    pub broker_addr: String,
    /// TLS to the broker.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    pub shutdown: CancellationToken,
    /// The start of a commit record of this partition seen by an earlier run of this process.
    pub known_start: Option<i64>,
}

/// Rows of one hour being written to one staged file.
struct HourFile {
    staged: object_store::path::Path,
    /// The least and greatest `header.time` of its rows.
    min_time_ms: i64,
    max_time_ms: i64,
    columns: Vec<Column>,
    partitions: Int32Builder,
    offsets: Int64Builder,
    /// Each row's position inside its compressed wrapper (0 for an uncompressed message).
    indexes: Int32Builder,
    schema_ids: Int32Builder,
    kafka: KafkaColumns,
    writer: AsyncArrowWriter<Upload>,
    rows: u64,
}

/// A staged range, ready to commit.
struct Chunk {
    end: i64,
    rows: u64,
    bad_records: u64,
    files: Vec<CommittedFile>,
    /// The files of an Iceberg table's range.
    written: Vec<WrittenFile>,
    /// Messages that did not become rows, for an Iceberg table's dead-letter table.
    dead_letters: Vec<DeadLetter>,
    /// Per hour, the files rolled at the target size so far.
    rolled: BTreeMap<Hour, u32>,
    windows: BTreeMap<i64, i64>,
    max_time_ms: i64,
    /// The message the chunk stopped at, undecodable, when no bad-records directory is set.
    stopped_at: Option<(i64, BadRecord)>,
}

impl PartitionLoader<'_> {
    /// Loads the partition. What was committed before a failure is in the load either way.
    pub async fn load(&self) -> (PartitionLoad, Result<(), LoadError>) {
        let mut load = PartitionLoad {
            topic: self.topic.topic.clone(),
            partition: self.partition,
            ..PartitionLoad::default()
        };
        let result = self.load_into(&mut load).await;
        (load, result)
    }

    async fn load_into(&self, load: &mut PartitionLoad) -> Result<(), LoadError> {
        let topic = self.topic.topic.as_str();
        let (target, last) = match &self.topic.table {
            Some(table) => {
                let covered = table.covered(self.partition)?;
                let last = covered.map(|c| Resume {
                    end: c.end,
                    rows_total: c.rows_total,
                    max_time_ms: c.max_time_ms,
                });
                (Target::Table(table), last)
            }
            None => {
                let commits = PartitionCommits::new(Arc::clone(&self.store), topic, self.partition);
                let last = commits.last_after(self.known_start).await?;
                load.last_start = last.as_ref().map(|r| r.start);
                if let Some(last) = &last {
                    commits.roll_forward(last).await?;
                }
                let removed = commits
                    .clean_staging(last.as_ref(), self.config.staging_grace_ms, service::now_ms())
                    .await?;
                if removed > 0 {
                    tracing::info!(%topic, partition = %self.partition, removed, "rolled back staged files of runs that died before committing");
                }
                let last = last.map(|r| Resume {
                    end: r.end,
                    rows_total: r.rows_total,
                    max_time_ms: r.max_time_ms,
                });
                (Target::Hive(commits), last)
            }
        };
        // Kafka producers' transactions are loaded once committed, never if aborted.
        let consumer_config = SimpleConsumerConfig {
            fetch_bytes: self.config.fetch_bytes,
            tls: self.tls.clone(),
            read_committed: true,
            ..Default::default()
        };
        let consumer = SimpleConsumer::connect(&self.broker_addr, consumer_config)
            .await
            .map_err(|e| self.consumer_error(e))?;
        let p = self.partition;
        let log_end = consumer.latest_offset(topic, p).await.map_err(|e| self.consumer_error(e))?;
        let mut offset = match &last {
            Some(last) => last.end,
            None => consumer.earliest_offset(topic, p).await.map_err(|e| self.consumer_error(e))?,
        };
        load.start = offset;
        load.end = offset;
        let mut rows_total = last.as_ref().map_or(0, |r| r.rows_total);
        let mut max_time_ms = last.as_ref().map_or(i64::MIN, |r| r.max_time_ms);
        let mut schemas = Schemas::new(
            Arc::clone(&self.registry),
            self.topic.reader_id,
            Arc::clone(&self.topic.reader),
            Arc::clone(&self.topic.shape),
        );
        while offset < log_end && !self.shutdown.is_cancelled() {
            let chunk = match self.stage(&consumer, &mut schemas, offset, log_end).await {
                Ok(chunk) => chunk,
                Err(ConsumerOrLoad::OutOfRange) => {
                    let earliest = consumer
                        .earliest_offset(topic, p)
                        .await
                        .map_err(|e| self.consumer_error(e))?;
                    tracing::warn!(%topic, partition = %self.partition, offset, earliest,
                        "the committed offset is no longer in the log (retention); going on from the earliest");
                    if earliest <= offset {
                        return Err(LoadError::OffsetOutOfRange {
                            topic: topic.to_owned(),
                            partition: self.partition.to_string(),
                            offset,
                        });
                    }
                    offset = earliest;
                    continue;
                }
                Err(ConsumerOrLoad::Load(e)) => return Err(e),
            };
            if chunk.end == offset && chunk.stopped_at.is_none() {
                break; // nothing visible past the committed offset after all
            }
            let stopped_at = chunk.stopped_at.clone();
            let advanced = chunk.end > offset;
            if advanced {
                max_time_ms = max_time_ms.max(chunk.max_time_ms);
                rows_total += chunk.rows;
                let written = chunk.written;
                let dead_letters = chunk.dead_letters;
                let record = CommitRecord {
                    topic: topic.to_owned(),
                    partition: self.partition.to_string(),
                    start: offset,
                    end: chunk.end,
                    rows: chunk.rows,
                    rows_total,
                    files: chunk.files,
                    bad_records: chunk.bad_records,
                    host: self.host.to_owned(),
                    run_id: self.run_id.to_owned(),
                    committed_at_ms: service::now_ms(),
                    max_time_ms,
                    schema_id: self.topic.reader_id,
                    window_ms: self.config.audit_window_ms,
                    windows: chunk.windows,
                };
                let committed = match &target {
                    Target::Hive(commits) => {
                        let committed = commits.commit(&record).await?;
                        if committed == Committed::Won {
                            commits.roll_forward(&record).await?;
                        }
                        committed
                    }
                    Target::Table(table) => table.commit(&record, &written, dead_letters).await?,
                };
                match committed {
                    Committed::Won => {
                        tracing::debug!(%topic, partition = %self.partition, start = record.start, end = record.end, rows = record.rows, "committed");
                        offset = record.end;
                        load.end = offset;
                        load.last_start = Some(record.start);
                        load.rows += record.rows;
                        load.bad_records += record.bad_records;
                        load.commits += 1;
                        load.records.push(record);
                    }
                    Committed::Fenced => {
                        match &target {
                            Target::Hive(commits) => {
                                let staged: Vec<String> =
                                    record.files.iter().map(|f| f.staged.clone()).collect();
                                commits.discard(&staged).await;
                            }
                            Target::Table(_) => {
                                for file in &written {
                                    let path = object_store::path::Path::from(file.path.as_str());
                                    if let Err(e) = self.store.delete(&path).await {
                                        tracing::warn!(path = %file.path, error = %e, "cannot delete a data file no snapshot names; orphan-file cleanup will");
                                    }
                                }
                            }
                        }
                        tracing::info!(%topic, partition = %self.partition, start = offset,
                            "another loader committed this range first; leaving the partition to it");
                        load.fenced = true;
                        return Ok(());
                    }
                }
            }
            if let Some((at, reason)) = stopped_at {
                return Err(LoadError::BadRecord {
                    topic: topic.to_owned(),
                    partition: self.partition.to_string(),
                    offset: at,
                    reason: reason.0,
                });
            }
        }
        Ok(())
    }

    fn consumer_error(&self, source: ConsumerError) -> LoadError {
        LoadError::Broker {
            topic: self.topic.topic.clone(),
            partition: self.partition.to_string(),
            source: Box::new(source),
        }
    }

    /// Reads from `start` and stages files until the log end, the commit size or a message
    /// that cannot be decoded.
    async fn stage(
        &self,
        consumer: &SimpleConsumer,
        schemas: &mut Schemas,
        start: i64,
        log_end: i64,
    ) -> Result<Chunk, ConsumerOrLoad> {
        let topic = self.topic.topic.as_str();
        let p = self.partition;
        let partition_label = self.partition.to_string();
        let mut files: BTreeMap<Hour, HourFile> = BTreeMap::new();
        let mut chunk = Chunk {
            end: start,
            rows: 0,
            bad_records: 0,
            files: Vec::new(),
            written: Vec::new(),
            dead_letters: Vec::new(),
            rolled: BTreeMap::new(),
            windows: BTreeMap::new(),
            max_time_ms: i64::MIN,
            stopped_at: None,
        };
        let mut messages_count: u64 = 0;
        'fetching: while chunk.end < log_end && !self.shutdown.is_cancelled() {
            let fetched = match consumer.fetch(topic, p, chunk.end).await {
                Ok(fetched) => fetched,
                Err(ConsumerError::OffsetOutOfRange { .. }) if chunk.end == start => {
                    return Err(ConsumerOrLoad::OutOfRange);
                }
                Err(e) => return Err(ConsumerOrLoad::Load(self.consumer_error(e))),
            };
            if fetched.is_empty() {
                break;
            }
            let mut messages = Vec::new();
            for message in fetched.iter() {
                messages.push(message.map_err(|e| ConsumerOrLoad::Load(self.consumer_error(e)))?);
            }
            if messages.is_empty() {
                // Only what holds no event (a compacted topic's gaps): read on after it.
                let end = fetched.end_offset();
                if end <= chunk.end {
                    break;
                }
                chunk.end = end;
                continue;
            }
            schemas.prefetch(messages.iter().map(|m| &m.payload[..])).await.map_err(|source| {
                ConsumerOrLoad::Load(LoadError::Registry {
                    topic: topic.to_owned(),
                    source: Box::new(source),
                })
            })?;
            let decoder = schemas.decoder();
            // The messages of the wrapper being read: appended once its last one decodes, so
            // that a bad message inside a compressed wrapper drops the wrapper's earlier
            // messages too (a commit ends between wrappers). Uncompressed messages pass
            // straight through, and their decoded values are freed at once.
            let mut wrapper: Vec<(i64, i32, Decoded, Option<RecordFields>)> = Vec::new();
            // Position of the next message inside its top-level message: `_index`, counting
            // bad records too, so that an event's index does not depend on its neighbours.
            let mut index: i32 = 0;
            let mut stop = false;
            for message in &messages {
                let this_index = index;
                index = index.saturating_add(1);
                match decoder.decode(&message.payload) {
                    Ok(event) => {
                        wrapper.push((message.offset, this_index, event, message.record.clone()))
                    }
                    // An Iceberg table's topic goes on: the message goes to the dead-letter
                    // table with its reason, committed with the range.
                    Err(reason) if self.topic.table.is_some() => {
                        chunk.dead_letters.push(DeadLetter {
                            partition: self.partition,
                            offset: message.offset,
                            index: this_index,
                            schema_id: dead_letters::schema_id_of(&message.payload),
                            reason: reason.0,
                            payload: message.payload.to_vec(),
                        });
                        chunk.bad_records += 1;
                    }
                    Err(reason) => match &self.config.bad_records {
                        Some(dir) => {
                            write_bad_record(
                                dir,
                                topic,
                                &partition_label,
                                message.offset,
                                &message.payload,
                                &reason,
                            )
                            .await
                            .map_err(ConsumerOrLoad::Load)?;
                            chunk.bad_records += 1;
                        }
                        None => {
                            chunk.stopped_at = Some((message.offset, reason));
                            stop = true;
                            break;
                        }
                    },
                }
                messages_count += 1;
                if message.next_offset > message.offset {
                    // The end of a top-level message: whole, so it may be committed.
                    index = 0;
                    self.append_rows(&mut files, &mut chunk, &mut wrapper, start, &partition_label)
                        .await?;
                    chunk.end = message.next_offset;
                    if messages_count >= self.config.max_messages_per_commit || chunk.end >= log_end
                    {
                        stop = true;
                        break;
                    }
                }
            }
            if stop {
                break 'fetching;
            }
        }
        for (hour, file) in files {
            self.finish_file(hour, file, &mut chunk, start).await.map_err(ConsumerOrLoad::Load)?;
        }
        Ok(chunk)
    }

    /// Ends `file` (rows of `hour`) and adds it to `chunk`'s files.
    async fn finish_file(
        &self,
        hour: Hour,
        mut file: HourFile,
        chunk: &mut Chunk,
        start: i64,
    ) -> Result<(), LoadError> {
        self.flush_batch(&mut file).await?;
        file.writer.finish().await.map_err(|e| self.parquet_error(e))?;
        // `finish` completes the upload too.
        let bytes = file.writer.bytes_written() as u64;
        if self.topic.table.is_some() {
            chunk.written.push(WrittenFile {
                path: file.staged.to_string(),
                hour,
                rows: file.rows,
                bytes,
                min_time_ms: file.min_time_ms,
                max_time_ms: file.max_time_ms,
            });
            return Ok(());
        }
        let name = layout::data_file_name(&self.topic.topic, self.partition, start, chunk.end);
        chunk.files.push(CommittedFile {
            path: layout::data_path(&self.topic.topic, hour, &name).to_string(),
            staged: file.staged.to_string(),
            rows: file.rows,
            bytes,
        });
        Ok(())
    }

    /// Appends decoded events to the files of their hours, emptying `events`.
    async fn append_rows(
        &self,
        files: &mut BTreeMap<Hour, HourFile>,
        chunk: &mut Chunk,
        events: &mut Vec<(i64, i32, Decoded, Option<RecordFields>)>,
        start: i64,
        partition_label: &str,
    ) -> Result<(), ConsumerOrLoad> {
        let topic = self.topic.topic.as_str();
        for (offset, index, event, record) in events.drain(..) {
            let hour = Hour::of(event.time_ms);
            let file = match files.get_mut(&hour) {
                Some(file) => file,
                None => {
                    let part = chunk.rolled.get(&hour).copied().unwrap_or(0);
                    let file = self.open(hour, start, part).map_err(ConsumerOrLoad::Load)?;
                    files.entry(hour).or_insert(file)
                }
            };
            let appended = match &event.body {
                Body::Value(value) => self.topic.shape.append(&mut file.columns, value),
                Body::Datum(datum) => self.topic.shape.append_datum(&mut file.columns, datum),
            };
            appended.map_err(|source| {
                ConsumerOrLoad::Load(LoadError::Convert {
                    topic: topic.to_owned(),
                    partition: partition_label.to_owned(),
                    offset,
                    source,
                })
            })?;
            file.partitions.append_value(self.partition);
            file.offsets.append_value(offset);
            file.indexes.append_value(index);
            file.schema_ids.append_value(event.schema_id);
            file.kafka.append(record.as_ref());
            file.rows += 1;
            file.min_time_ms = file.min_time_ms.min(event.time_ms);
            file.max_time_ms = file.max_time_ms.max(event.time_ms);
            chunk.rows += 1;
            *chunk
                .windows
                .entry(window_start(event.time_ms, self.config.audit_window_ms))
                .or_default() += 1;
            chunk.max_time_ms = chunk.max_time_ms.max(event.time_ms);
            if file.offsets.len() >= self.config.batch_rows {
                self.flush_batch(file).await.map_err(ConsumerOrLoad::Load)?;
                // An Iceberg table's file is rolled at the target size; the hour's next row
                // opens the next file (named by its offset).
                let size = file.writer.bytes_written() + file.writer.in_progress_size();
                if self.topic.table.is_some() && size as u64 >= self.config.target_file_bytes {
                    let file = files.remove(&hour).expect("just written");
                    *chunk.rolled.entry(hour).or_default() += 1;
                    self.finish_file(hour, file, chunk, start)
                        .await
                        .map_err(ConsumerOrLoad::Load)?;
                }
            }
        }
        Ok(())
    }

    /// Opens the file of `hour` for a range from `start`: its `part`th, when the ones before
    /// were rolled at the target size.
    fn open(&self, hour: Hour, start: i64, part: u32) -> Result<HourFile, LoadError> {
        let topic = self.topic.topic.as_str();
        let (staged, schema) = match &self.topic.table {
            Some(table) => {
                let path = table.data_path(hour, self.partition, start, self.run_id, part);
                (object_store::path::Path::from(path), Arc::clone(&table.shape.writer))
            }
            None => {
                let name = format!("{start:020}.parquet");
                let path = layout::staging_path(topic, self.partition, self.run_id, hour, &name);
                (path, Arc::clone(&self.topic.arrow))
            }
        };
        let properties = WriterProperties::builder()
            .set_compression(Compression::ZSTD(
                ZstdLevel::try_new(self.config.zstd_level).expect("level validated"),
            ))
            .set_max_row_group_row_count(Some(self.config.row_group_rows))
            .set_created_by(format!("tributary hdfs-loader {}", env!("CARGO_PKG_VERSION")))
            .build();
        // A multipart upload of parts of UPLOAD_PART_BYTES, at most two in flight: what a file
        // holds for the store besides its row group.
        let sink =
            BufWriter::with_capacity(Arc::clone(&self.store), staged.clone(), UPLOAD_PART_BYTES)
                .with_max_concurrency(UPLOAD_PARTS_IN_FLIGHT);
        let writer = AsyncArrowWriter::try_new(Upload(sink), schema, Some(properties))
            .map_err(|e| self.parquet_error(e))?;
        let capacity = self.config.batch_rows;
        Ok(HourFile {
            staged,
            min_time_ms: i64::MAX,
            max_time_ms: i64::MIN,
            columns: self.topic.shape.builders(capacity),
            partitions: Int32Builder::with_capacity(capacity),
            offsets: Int64Builder::with_capacity(capacity),
            indexes: Int32Builder::with_capacity(capacity),
            schema_ids: Int32Builder::with_capacity(capacity),
            kafka: KafkaColumns::default(),
            writer,
            rows: 0,
        })
    }

    async fn flush_batch(&self, file: &mut HourFile) -> Result<(), LoadError> {
        if file.offsets.is_empty() {
            return Ok(());
        }
        let topic = &self.topic.topic;
        let convert = |source| LoadError::Convert {
            topic: topic.clone(),
            partition: self.partition.to_string(),
            offset: -1,
            source,
        };
        let mut arrays: Vec<ArrayRef> = file
            .columns
            .iter_mut()
            .map(Column::finish)
            .collect::<Result<_, _>>()
            .map_err(convert)?;
        arrays.push(Arc::new(file.partitions.finish()));
        arrays.push(Arc::new(file.offsets.finish()));
        arrays.push(Arc::new(file.indexes.finish()));
        arrays.push(Arc::new(file.schema_ids.finish()));
        file.kafka.finish_into(&mut arrays);
        let mut batch = RecordBatch::try_new(Arc::clone(&self.topic.arrow), arrays)
            .map_err(|e| convert(e.into()))?;
        if let Some(table) = &self.topic.table {
            batch = table.shape.convert(&batch).map_err(convert)?;
        }
        file.writer.write(&batch).await.map_err(|e| self.parquet_error(e))?;
        // The row group's pages stay in memory until it ends: end it at the byte bound, so a
        // file's memory does not grow with the backlog.
        if file.writer.memory_size() >= self.config.row_group_bytes {
            file.writer.flush().await.map_err(|e| self.parquet_error(e))?;
        }
        Ok(())
    }

    fn parquet_error(&self, source: parquet::errors::ParquetError) -> LoadError {
        LoadError::Parquet {
            topic: self.topic.topic.clone(),
            partition: self.partition.to_string(),
            source,
        }
    }
}

/// `_key`, `_headers` and `_timestamp`: a Kafka record's key, headers (keys as UTF-8 strings,
/// as Kafka has them) and timestamp (ms, UTC), null for an event that did not come as one.
struct KafkaColumns {
    keys: BinaryBuilder,
    headers: MapBuilder<StringBuilder, BinaryBuilder>,
    timestamps: TimestampMillisecondBuilder,
}

impl Default for KafkaColumns {
    fn default() -> KafkaColumns {
        KafkaColumns {
            keys: BinaryBuilder::new(),
            headers: MapBuilder::new(None, StringBuilder::new(), BinaryBuilder::new()),
            timestamps: TimestampMillisecondBuilder::new().with_timezone("UTC"),
        }
    }
}

impl KafkaColumns {
    /// The Arrow type of `_headers`: what the builder makes.
    fn headers_type() -> DataType {
        arrow_array::Array::data_type(&KafkaColumns::default().headers.finish()).clone()
    }

    fn append(&mut self, record: Option<&RecordFields>) {
        let Some(record) = record else {
            self.keys.append_null();
            self.headers.append(false).expect("keys and values stay even");
            self.timestamps.append_null();
            return;
        };
        self.keys.append_option(record.key.as_deref());
        for (key, value) in &record.headers {
            self.headers.keys().append_value(String::from_utf8_lossy(key));
            self.headers.values().append_option(value.as_deref());
        }
        self.headers.append(true).expect("keys and values stay even");
        self.timestamps.append_value(record.timestamp);
    }

    fn finish_into(&mut self, arrays: &mut Vec<ArrayRef>) {
        arrays.push(Arc::new(self.keys.finish()));
        arrays.push(Arc::new(self.headers.finish()));
        arrays.push(Arc::new(self.timestamps.finish()));
    }
}

/// Where a partition's ranges are committed.
enum Target<'a> {
    Hive(PartitionCommits),
    Table(&'a TopicTable),
}

/// Where the last commit left a partition.
struct Resume {
    end: i64,
    rows_total: u64,
    max_time_ms: i64,
}

enum ConsumerOrLoad {
    /// The start offset is no longer in the log.
    OutOfRange,
    Load(LoadError),
}

/// Writes an undecodable message to `{dir}/{topic}/{partition}/{offset:020}.bin` with the
/// reason beside it (`.txt`). Idempotent: a re-run writes the same names.
async fn write_bad_record(
    dir: &std::path::Path,
    topic: &str,
    partition: &str,
    offset: i64,
    payload: &[u8],
    reason: &BadRecord,
) -> Result<(), LoadError> {
    let dir: PathBuf = dir.join(topic).join(partition);
    let io = |source| LoadError::BadRecordsDir { path: dir.clone(), source };
    tokio::fs::create_dir_all(&dir).await.map_err(io)?;
    tokio::fs::write(dir.join(format!("{offset:020}.bin")), payload).await.map_err(io)?;
    tokio::fs::write(dir.join(format!("{offset:020}.txt")), format!("{reason}\n"))
        .await
        .map_err(io)?;
    tracing::warn!(%topic, %partition, offset, %reason, "wrote an undecodable message to the bad-records directory");
    Ok(())
}
