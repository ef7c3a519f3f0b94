//! A topic's columns as an Iceberg table has them. The Hive layout writes the Arrow columns of
//! [`crate::columns`] as they are; an Iceberg table differs in four ways:
//!
//! - `header.time` (a `long` of ms in the envelope) is a `timestamptz`, so that the table can
//!   be partitioned by `hour(header.time)` and filtered by time;
//! - Iceberg times and timestamps are µs (or ns): `time-millis` and `timestamp-millis` columns
//!   (and `_timestamp`) are widened to µs;
//! - enums (dictionary-encoded strings) are plain strings, Iceberg having no dictionary type;
//! - every field carries its Iceberg field id (`PARQUET:field_id`), which the Parquet files
//!   keep and readers resolve columns by. Ids are kept by field path across schemas, so a
//!   table's columns keep theirs as its topic's schema evolves.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, RecordBatch, StructArray, TimestampMicrosecondArray};
use arrow_schema::{DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;

use crate::columns::ColumnError;

/// The column path of the event time.
pub const TIME_PATH: &str = "header.time";

/// A topic's Arrow schema as written to its table.
#[derive(Debug)]
pub struct TableShape {
    /// The schema of the batches handed to the Parquet writer: converted types, no ids.
    pub batch: SchemaRef,
    /// The same with every field's id: what the Parquet writer is given.
    pub writer: SchemaRef,
    /// The table schema these ids and types make.
    pub schema: iceberg::spec::Schema,
    /// The field id of `header.time`.
    pub time_id: i32,
}

impl TableShape {
    /// The table shape of `arrow` (the loader's columns of a topic), keeping the ids that
    /// `known` (a table's schema) has for the same paths; new paths get ids after its highest.
    pub fn new(
        arrow: &Schema,
        known: Option<&iceberg::spec::Schema>,
    ) -> Result<TableShape, ColumnError> {
        let converted: Fields = arrow
            .fields()
            .iter()
            .map(|f| {
                let data_type = if f.name() == "header" {
                    header_type(f.data_type())?
                } else {
                    widened(f.data_type())?
                };
                Ok(Arc::new(Field::new(f.name(), data_type, f.is_nullable())))
            })
            .collect::<Result<_, ColumnError>>()?;
        let batch = Schema::new(converted);
        let (writer, schema) = with_ids(&batch, known)?;
        let time_id = schema
            .field_by_name(TIME_PATH)
            .map(|f| f.id)
            .ok_or_else(|| ColumnError::Unsupported(format!("no {TIME_PATH}")))?;
        Ok(TableShape { batch: Arc::new(batch), writer, schema, time_id })
    }

    /// `batch` (of the loader's columns) converted to [`TableShape::batch`].
    pub fn convert(&self, batch: &RecordBatch) -> Result<RecordBatch, ColumnError> {
        let columns = batch
            .columns()
            .iter()
            .zip(self.batch.fields())
            .map(|(column, field)| {
                if field.name() == "header" {
                    convert_header(column, field.data_type())
                } else {
                    cast(column, field.data_type())
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        RecordBatch::try_new(Arc::clone(&self.batch), columns).map_err(ColumnError::from)
    }
}

/// `arrow` with every field's Iceberg id (the id `known` has for its path, or a new one),
/// and the Iceberg schema that makes.
pub fn with_ids(
    arrow: &Schema,
    known: Option<&iceberg::spec::Schema>,
) -> Result<(SchemaRef, iceberg::spec::Schema), ColumnError> {
    let mut ids = Ids {
        known: known.map(known_ids).unwrap_or_default(),
        next: known.map_or(0, |s| s.highest_field_id()) + 1,
    };
    let writer: Fields =
        arrow.fields().iter().map(|f| ids.annotate(f, f.name())).collect::<Result<_, _>>()?;
    let writer = Arc::new(Schema::new(writer));
    let schema = iceberg::arrow::arrow_schema_to_schema(&writer)
        .map_err(|e| ColumnError::Unsupported(format!("as an Iceberg schema: {e}")))?;
    Ok((writer, schema))
}

/// `header` with `time` as µs UTC.
fn header_type(header: &DataType) -> Result<DataType, ColumnError> {
    let DataType::Struct(fields) = header else {
        return Err(ColumnError::Unsupported("header is not a record".into()));
    };
    let fields: Fields = fields
        .iter()
        .map(|f| {
            let data_type = if f.name() == "time" {
                match f.data_type() {
                    DataType::Int64 | DataType::Timestamp(TimeUnit::Millisecond, _) => {
                        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
                    }
                    other => {
                        return Err(ColumnError::Unsupported(format!(
                            "{TIME_PATH} is {other}, not ms since the epoch"
                        )));
                    }
                }
            } else {
                widened(f.data_type())?
            };
            Ok(Arc::new(Field::new(f.name(), data_type, f.is_nullable())))
        })
        .collect::<Result<_, ColumnError>>()?;
    Ok(DataType::Struct(fields))
}

/// `data_type` with ms times and timestamps as µs, nested types likewise.
fn widened(data_type: &DataType) -> Result<DataType, ColumnError> {
    let field = |f: &FieldRef| -> Result<FieldRef, ColumnError> {
        Ok(Arc::new(Field::new(f.name(), widened(f.data_type())?, f.is_nullable())))
    };
    Ok(match data_type {
        DataType::Null => {
            return Err(ColumnError::Unsupported(
                "a field of Avro type null has no Iceberg type".into(),
            ));
        }
        DataType::Time32(TimeUnit::Millisecond) => DataType::Time64(TimeUnit::Microsecond),
        // Iceberg has no dictionary type: an enum is a string column (Parquet still encodes it
        // with a dictionary). Readers that merge files would otherwise meet a dictionary in
        // one file's Arrow schema and a string in another's.
        DataType::Dictionary(_, values) => widened(values)?,
        DataType::Timestamp(TimeUnit::Millisecond, zone) => {
            DataType::Timestamp(TimeUnit::Microsecond, zone.clone())
        }
        DataType::Struct(fields) => {
            DataType::Struct(fields.iter().map(field).collect::<Result<_, _>>()?)
        }
        DataType::List(item) => DataType::List(field(item)?),
        DataType::Map(entries, sorted) => DataType::Map(field(entries)?, *sorted),
        other => other.clone(),
    })
}

fn cast(column: &ArrayRef, to: &DataType) -> Result<ArrayRef, ColumnError> {
    if column.data_type() == to {
        return Ok(Arc::clone(column));
    }
    arrow_cast::cast(column, to).map_err(ColumnError::from)
}

/// The header struct with `time` in µs and the other fields cast as their types say.
fn convert_header(column: &ArrayRef, to: &DataType) -> Result<ArrayRef, ColumnError> {
    let (DataType::Struct(fields), Some(header)) = (to, column.as_struct_opt()) else {
        return Err(ColumnError::Unsupported("header is not a record".into()));
    };
    let children = header
        .columns()
        .iter()
        .zip(fields)
        .map(|(child, field)| {
            if field.name() != "time" {
                return cast(child, field.data_type());
            }
            let ms = match child.data_type() {
                DataType::Int64 => child.as_primitive::<Int64Type>().clone(),
                _ => arrow_cast::cast(child, &DataType::Int64)?.as_primitive::<Int64Type>().clone(),
            };
            let micros: TimestampMicrosecondArray = ms.unary(|v| v.saturating_mul(1000));
            Ok(Arc::new(micros.with_timezone("UTC")) as ArrayRef)
        })
        .collect::<Result<Vec<_>, ColumnError>>()?;
    let converted = StructArray::try_new(fields.clone(), children, header.nulls().cloned())?;
    Ok(Arc::new(converted))
}

/// Field ids by path: the ones a table has, then new ones.
struct Ids {
    known: HashMap<String, i32>,
    next: i32,
}

impl Ids {
    fn id(&mut self, path: &str) -> i32 {
        if let Some(id) = self.known.get(path) {
            return *id;
        }
        let id = self.next;
        self.next += 1;
        self.known.insert(path.to_owned(), id);
        id
    }

    /// `field` (at `path`) and its children, each with its id.
    fn annotate(&mut self, field: &Field, path: &str) -> Result<FieldRef, ColumnError> {
        let id = self.id(path);
        let data_type = match field.data_type() {
            DataType::Struct(children) => DataType::Struct(
                children
                    .iter()
                    .map(|c| self.annotate(c, &format!("{path}.{}", c.name())))
                    .collect::<Result<_, _>>()?,
            ),
            DataType::List(item) => {
                DataType::List(self.annotate(item, &format!("{path}.element"))?)
            }
            DataType::Map(entries, sorted) => {
                let DataType::Struct(kv) = entries.data_type() else {
                    return Err(ColumnError::Unsupported(format!("{path}: map without entries")));
                };
                let kv: Fields = [("key", &kv[0]), ("value", &kv[1])]
                    .into_iter()
                    .map(|(name, f)| self.annotate(f, &format!("{path}.{name}")))
                    .collect::<Result<_, _>>()?;
                DataType::Map(
                    Arc::new(Field::new(entries.name(), DataType::Struct(kv), false)),
                    *sorted,
                )
            }
            other => other.clone(),
        };
        let metadata = HashMap::from([(PARQUET_FIELD_ID_META_KEY.to_owned(), id.to_string())]);
        Ok(Arc::new(
            Field::new(field.name(), data_type, field.is_nullable()).with_metadata(metadata),
        ))
    }
}

/// The ids of a table schema's fields by path (`a.b`, a list's `a.element`, a map's `a.key`
/// and `a.value`).
fn known_ids(schema: &iceberg::spec::Schema) -> HashMap<String, i32> {
    use iceberg::spec::Type;
    fn walk(prefix: &str, field: &iceberg::spec::NestedField, ids: &mut HashMap<String, i32>) {
        let path =
            if prefix.is_empty() { field.name.clone() } else { format!("{prefix}.{}", field.name) };
        ids.insert(path.clone(), field.id);
        match field.field_type.as_ref() {
            Type::Struct(s) => s.fields().iter().for_each(|f| walk(&path, f, ids)),
            Type::List(l) => walk_as(&path, "element", &l.element_field, ids),
            Type::Map(m) => {
                walk_as(&path, "key", &m.key_field, ids);
                walk_as(&path, "value", &m.value_field, ids);
            }
            Type::Primitive(_) => {}
        }
    }
    fn walk_as(
        prefix: &str,
        name: &str,
        field: &iceberg::spec::NestedField,
        ids: &mut HashMap<String, i32>,
    ) {
        let mut named = field.clone();
        named.name = name.to_owned();
        walk(prefix, &named, ids);
    }
    let mut ids = HashMap::new();
    schema.as_struct().fields().iter().for_each(|f| walk("", f, &mut ids));
    ids
}

#[cfg(test)]
mod tests {
    use arrow_array::{FixedSizeBinaryArray, Int64Array, StringArray, TimestampMillisecondArray};

    use super::*;

    fn loader_schema(extra: Option<Field>) -> Schema {
        let header = DataType::Struct(Fields::from(vec![
            Field::new("time", DataType::Int64, false),
            Field::new("id", DataType::FixedSizeBinary(16), false),
        ]));
        let mut fields = vec![
            Field::new("header", header, false),
            Field::new("url", DataType::Utf8, false),
            Field::new(
                "_timestamp",
                DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                true,
            ),
        ];
        fields.extend(extra);
        Schema::new(fields)
    }

    #[test]
    fn header_time_becomes_a_microsecond_timestamp_and_every_field_gets_an_id() {
        let shape = TableShape::new(&loader_schema(None), None).unwrap();
        let time = shape.schema.field_by_name(TIME_PATH).unwrap();
        assert_eq!(time.id, shape.time_id);
        assert_eq!(
            *time.field_type,
            iceberg::spec::Type::Primitive(iceberg::spec::PrimitiveType::Timestamptz)
        );
        assert_eq!(shape.schema.highest_field_id(), 5);

        let header = StructArray::try_new(
            match &loader_schema(None).fields()[0].data_type() {
                DataType::Struct(f) => f.clone(),
                _ => unreachable!(),
            },
            vec![
                Arc::new(Int64Array::from(vec![1_700_000_000_123])),
                Arc::new(FixedSizeBinaryArray::try_from_iter([[7u8; 16]].into_iter()).unwrap()),
            ],
            None,
        )
        .unwrap();
        let batch = RecordBatch::try_new(
            Arc::new(loader_schema(None)),
            vec![
                Arc::new(header),
                Arc::new(StringArray::from(vec!["/a"])),
                Arc::new(TimestampMillisecondArray::from(vec![Some(5)]).with_timezone("UTC")),
            ],
        )
        .unwrap();
        let converted = shape.convert(&batch).unwrap();
        let time = converted.column(0).as_struct().column(0);
        assert_eq!(
            time.as_primitive::<arrow_array::types::TimestampMicrosecondType>().value(0),
            1_700_000_000_123_000
        );
        let kafka = converted.column(2);
        assert_eq!(
            kafka.as_primitive::<arrow_array::types::TimestampMicrosecondType>().value(0),
            5000
        );
    }

    #[test]
    fn ids_are_kept_by_path_and_a_new_field_gets_the_next_one() {
        let first = TableShape::new(&loader_schema(None), None).unwrap();
        let added = Field::new("referrer", DataType::Utf8, true);
        let second = TableShape::new(&loader_schema(Some(added)), Some(&first.schema)).unwrap();
        for path in ["header", TIME_PATH, "header.id", "url", "_timestamp"] {
            assert_eq!(
                first.schema.field_by_name(path).unwrap().id,
                second.schema.field_by_name(path).unwrap().id,
                "{path}"
            );
        }
        assert_eq!(second.schema.field_by_name("referrer").unwrap().id, 6);
    }
}
