//! Reading committed rows back (tests, the launcher's demo): the `(_partition, _offset,
//! _index)` of every row of a topic's files and the distinct event ids (`header.id`), or, in
//! bounded memory, how many rows and distinct ids there are.

mod distinct;

use std::collections::HashSet;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, FixedSizeBinaryArray, RecordBatch};
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::{LoadError, Output};
pub use distinct::{DistinctIds, ID_BYTES};

/// The rows of one topic's committed files.
#[derive(Debug, Default)]
pub struct TopicRows {
    /// `(_partition, _offset)` of every row, in no particular order.
    pub positions: Vec<(i32, i64)>,
    /// `(_partition, _offset, _index)` of every row, in the same order: each names one event
    /// of the log, the messages of a compressed wrapper included.
    pub events: Vec<(i32, i64, i32)>,
    /// Distinct `header.id` values.
    pub event_ids: HashSet<Vec<u8>>,
    pub files: usize,
}

/// Reads every committed file of `topic` (what a reader of the topic sees), keeping every
/// row's position and every distinct id in memory (tests; [`count_topic`] for large topics).
pub async fn read_topic(output: &Output, topic: &str) -> Result<TopicRows, LoadError> {
    let mut rows = TopicRows::default();
    rows.files = for_each_batch(output, topic, |batch| {
        let (Some(partitions), Some(offsets)) =
            (batch.column_by_name("_partition"), batch.column_by_name("_offset"))
        else {
            return Ok(());
        };
        let partitions = partitions.as_primitive::<Int32Type>();
        let offsets = offsets.as_primitive::<Int64Type>();
        let indexes = batch.column_by_name("_index").map(|i| i.as_primitive::<Int32Type>());
        for i in 0..batch.num_rows() {
            let (partition, offset) = (partitions.value(i), offsets.value(i));
            let index = indexes.map_or(0, |indexes| indexes.value(i));
            rows.events.push((partition, offset, index));
            rows.positions.push((partition, offset));
        }
        if let Some(ids) = event_ids(batch) {
            for i in 0..ids.len() {
                rows.event_ids.insert(ids.value(i).to_vec());
            }
        }
        Ok(())
    })
    .await?;
    Ok(rows)
}

/// Counts the rows of a topic's committed files and adds their event ids to `ids`, in memory
/// bounded by one file and one row group (the launcher's demo reads millions this way).
pub async fn count_topic(
    output: &Output,
    topic: &str,
    ids: &mut DistinctIds,
) -> Result<u64, LoadError> {
    let mut rows = 0;
    for_each_batch(output, topic, |batch| {
        rows += batch.num_rows() as u64;
        if let Some(ids_column) = event_ids(batch)
            && ids_column.value_length() as usize == ID_BYTES
        {
            for i in 0..ids_column.len() {
                let mut id = [0; ID_BYTES];
                id.copy_from_slice(ids_column.value(i));
                ids.add(&id).map_err(|source| ids.spill_error(source))?;
            }
        }
        Ok(())
    })
    .await?;
    Ok(rows)
}

/// The `header.id` column of a batch, if it has one.
fn event_ids(batch: &RecordBatch) -> Option<&FixedSizeBinaryArray> {
    let header = batch.column_by_name("header")?;
    Some(header.as_struct().column_by_name("id")?.as_fixed_size_binary())
}

/// The committed Parquet files of `topic`: those under `{topic}/` in the Hive layout, those of
/// the table's current snapshot in Iceberg.
pub async fn files(output: &Output, topic: &str) -> Result<Vec<Path>, LoadError> {
    match output {
        Output::Hive(store) => {
            let prefix = Path::from(topic);
            let metas: Vec<_> = store
                .list(Some(&prefix))
                .try_collect()
                .await
                .map_err(|source| LoadError::Store { path: prefix.to_string(), source })?;
            Ok(metas
                .into_iter()
                .map(|meta| meta.location)
                .filter(|path| path.as_ref().ends_with(".parquet"))
                .collect())
        }
        Output::Iceberg(tables) => Ok(tables
            .state(topic)
            .await?
            .map(|state| state.files.into_iter().map(|f| f.path).collect())
            .unwrap_or_default()),
    }
}

/// Calls `visit` with every row group of every committed file of `topic`, one file in memory
/// at a time; returns how many files there were.
async fn for_each_batch(
    output: &Output,
    topic: &str,
    mut visit: impl FnMut(&RecordBatch) -> Result<(), LoadError>,
) -> Result<usize, LoadError> {
    let store = output.store();
    let store_error = |path: &Path| {
        let path = path.to_string();
        move |source| LoadError::Store { path, source }
    };
    let paths = files(output, topic).await?;
    let count = paths.len();
    for path in paths {
        let bytes = store.get(&path).await.map_err(store_error(&path))?;
        let bytes = bytes.bytes().await.map_err(store_error(&path))?;
        let parquet_error = |source| LoadError::Parquet {
            topic: topic.to_owned(),
            partition: path.to_string(),
            source,
        };
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .and_then(|b| b.build())
            .map_err(parquet_error)?;
        for batch in reader {
            visit(&batch.map_err(|e| parquet_error(e.into()))?)?;
        }
    }
    Ok(count)
}
