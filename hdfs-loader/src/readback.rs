//! Reading committed rows back (tests, the launcher's demo): the `(_partition, _offset,
//! _index)` of every row of a topic's files and the distinct event ids (`header.id`).

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::LoadError;

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

/// Reads every Parquet file under `{topic}/` (what a reader of the topic sees).
pub async fn read_topic(store: &Arc<dyn ObjectStore>, topic: &str) -> Result<TopicRows, LoadError> {
    let prefix = Path::from(topic);
    let store_error = |path: &Path| {
        let path = path.to_string();
        move |source| LoadError::Store { path, source }
    };
    let metas: Vec<_> =
        store.list(Some(&prefix)).try_collect().await.map_err(store_error(&prefix))?;
    let mut rows = TopicRows::default();
    for meta in metas {
        if !meta.location.as_ref().ends_with(".parquet") {
            continue;
        }
        let bytes = store.get(&meta.location).await.map_err(store_error(&meta.location))?;
        let bytes = bytes.bytes().await.map_err(store_error(&meta.location))?;
        let parquet_error = |source| LoadError::Parquet {
            topic: topic.to_owned(),
            partition: meta.location.to_string(),
            source,
        };
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .and_then(|b| b.build())
            .map_err(parquet_error)?;
        rows.files += 1;
        for batch in reader {
            let batch = batch.map_err(|e| parquet_error(e.into()))?;
            let (Some(partitions), Some(offsets)) =
                (batch.column_by_name("_partition"), batch.column_by_name("_offset"))
            else {
                continue;
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
            if let Some(header) = batch.column_by_name("header")
                && let Some(ids) = header.as_struct().column_by_name("id")
            {
                {
                    let ids = ids.as_fixed_size_binary();
                    for i in 0..ids.len() {
                        rows.event_ids.insert(ids.value(i).to_vec());
                    }
                }
            }
        }
    }
    Ok(rows)
}
