//! Avro → Arrow: the Arrow type of an Avro schema and column builders fed with decoded Avro
//! values. Records become structs, arrays lists, maps maps (string keys), a union of `null`
//! and one type a nullable column, any other union a struct with one nullable field per
//! branch (`member0`, `member1`, …, as Spark reads them), enums dictionary-encoded strings,
//! `fixed` fixed-size binary and `bytes` binary; logical types map to Arrow's (date, time,
//! timestamps in UTC, decimal, uuid as its string). A record's shape also says whether
//! [`crate::datum`] can read its Avro binary straight into the columns.

use std::collections::HashMap;
use std::sync::Arc;

use apache_avro::Schema;
use apache_avro::schema::{Name, UnionSchema};
use apache_avro::types::Value;
use arrow_array::builder::{
    ArrayBuilder, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder,
    FixedSizeBinaryBuilder, Float32Builder, Float64Builder, Int32Builder, Int64Builder,
    StringBuilder, StringDictionaryBuilder, Time32MillisecondBuilder, Time64MicrosecondBuilder,
    TimestampMicrosecondBuilder, TimestampMillisecondBuilder, TimestampNanosecondBuilder,
};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, ListArray, MapArray, NullArray, StructArray};
use arrow_buffer::{NullBufferBuilder, OffsetBuffer};
use arrow_schema::{DataType, Field, FieldRef, Fields, TimeUnit};

/// Nesting deeper than this is refused (it also stops a recursive schema).
const DEPTH_MAX: usize = 32;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ColumnError {
    #[error("unsupported Avro schema: {0}")]
    Unsupported(String),
    #[error("value does not match the schema at {path}: expected {expected}")]
    Mismatch { path: String, expected: &'static str },
    #[error("building the Arrow column: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    #[error("undecodable datum: {0}")]
    Datum(#[from] DatumError),
}

/// Why a datum is not a valid encoding of its schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} at byte {at} of the datum")]
pub struct DatumError {
    pub reason: &'static str,
    pub at: usize,
}

/// An Avro type with named references resolved: what one column holds.
#[derive(Debug, Clone)]
pub(crate) enum Shape {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Fixed(i32),
    Date,
    TimeMillis,
    TimeMicros,
    TimestampMillis,
    TimestampMicros,
    TimestampNanos,
    LocalTimestampMillis,
    LocalTimestampMicros,
    LocalTimestampNanos,
    Uuid,
    Decimal {
        precision: u8,
        scale: i8,
        /// The size of its `fixed`; `None`: over `bytes`.
        fixed: Option<usize>,
    },
    BigDecimal,
    Record(Vec<(String, Shape)>),
    Array(Box<Shape>),
    Map(Box<Shape>),
    /// Its symbols, by index.
    Enum(Vec<String>),
    /// `["null", T]` in either order: the branch index of `null` (0 or 1) and `T`.
    Nullable(u32, Box<Shape>),
    /// Any other union: the non-null branches, by Avro branch index (always nullable), and
    /// how many branches it has, `null` included.
    Union {
        branches: Vec<(u32, Shape)>,
        variants: u32,
    },
}

fn shape(
    schema: &Schema,
    names: &HashMap<Name, Schema>,
    path: &str,
    depth: usize,
) -> Result<Shape, ColumnError> {
    if depth > DEPTH_MAX {
        return Err(ColumnError::Unsupported(format!(
            "{path}: nested deeper than {DEPTH_MAX} (recursive?)"
        )));
    }
    let child =
        |schema: &Schema, sub: &str| shape(schema, names, &format!("{path}.{sub}"), depth + 1);
    Ok(match schema {
        Schema::Null => Shape::Null,
        Schema::Boolean => Shape::Boolean,
        Schema::Int => Shape::Int,
        Schema::Long => Shape::Long,
        Schema::Float => Shape::Float,
        Schema::Double => Shape::Double,
        Schema::Bytes => Shape::Bytes,
        Schema::String => Shape::String,
        Schema::Fixed(fixed) => {
            Shape::Fixed(i32::try_from(fixed.size).map_err(|_| {
                ColumnError::Unsupported(format!("{path}: fixed size {}", fixed.size))
            })?)
        }
        Schema::Duration(_) => Shape::Fixed(12),
        Schema::Date => Shape::Date,
        Schema::TimeMillis => Shape::TimeMillis,
        Schema::TimeMicros => Shape::TimeMicros,
        Schema::TimestampMillis => Shape::TimestampMillis,
        Schema::TimestampMicros => Shape::TimestampMicros,
        Schema::TimestampNanos => Shape::TimestampNanos,
        Schema::LocalTimestampMillis => Shape::LocalTimestampMillis,
        Schema::LocalTimestampMicros => Shape::LocalTimestampMicros,
        Schema::LocalTimestampNanos => Shape::LocalTimestampNanos,
        Schema::Uuid(_) => Shape::Uuid,
        Schema::Decimal(decimal) => {
            let precision = u8::try_from(decimal.precision).ok().filter(|p| (1..=38).contains(p));
            let scale = i8::try_from(decimal.scale).ok();
            let fixed = match &decimal.inner {
                apache_avro::schema::InnerDecimalSchema::Fixed(fixed) => Some(fixed.size),
                apache_avro::schema::InnerDecimalSchema::Bytes => None,
            };
            match (precision, scale) {
                (Some(precision), Some(scale)) => Shape::Decimal { precision, scale, fixed },
                _ => Shape::BigDecimal,
            }
        }
        Schema::BigDecimal => Shape::BigDecimal,
        Schema::Record(record) => Shape::Record(
            record
                .fields
                .iter()
                .map(|f| Ok((f.name.clone(), child(&f.schema, &f.name)?)))
                .collect::<Result<_, ColumnError>>()?,
        ),
        Schema::Array(array) => Shape::Array(Box::new(child(&array.items, "item")?)),
        Schema::Map(map) => Shape::Map(Box::new(child(&map.types, "value")?)),
        Schema::Enum(e) => Shape::Enum(e.symbols.clone()),
        Schema::Union(union) => union_shape(union, &child)?,
        Schema::Ref { name } => {
            let target = names.get(name).ok_or_else(|| {
                ColumnError::Unsupported(format!("{path}: unknown named type {name}"))
            })?;
            shape(target, names, path, depth + 1)?
        }
    })
}

fn union_shape(
    union: &UnionSchema,
    child: &dyn Fn(&Schema, &str) -> Result<Shape, ColumnError>,
) -> Result<Shape, ColumnError> {
    let variants = union.variants();
    let null = variants.iter().position(|v| matches!(v, Schema::Null));
    let mut branches = Vec::new();
    for (i, variant) in variants.iter().enumerate() {
        if !matches!(variant, Schema::Null) {
            branches.push((i as u32, child(variant, &format!("member{}", branches.len()))?));
        }
    }
    Ok(match (branches.len(), null) {
        (0, _) => Shape::Null,
        (1, Some(null)) => Shape::Nullable(null as u32, Box::new(branches.remove(0).1)),
        _ => Shape::Union { branches, variants: variants.len() as u32 },
    })
}

impl Shape {
    fn data_type(&self) -> DataType {
        let utc = || Some(Arc::from("UTC"));
        match self {
            Shape::Null => DataType::Null,
            Shape::Boolean => DataType::Boolean,
            Shape::Int => DataType::Int32,
            Shape::Long => DataType::Int64,
            Shape::Float => DataType::Float32,
            Shape::Double => DataType::Float64,
            Shape::Bytes => DataType::Binary,
            Shape::String | Shape::Uuid | Shape::BigDecimal => DataType::Utf8,
            Shape::Fixed(size) => DataType::FixedSizeBinary(*size),
            Shape::Date => DataType::Date32,
            Shape::TimeMillis => DataType::Time32(TimeUnit::Millisecond),
            Shape::TimeMicros => DataType::Time64(TimeUnit::Microsecond),
            Shape::TimestampMillis => DataType::Timestamp(TimeUnit::Millisecond, utc()),
            Shape::TimestampMicros => DataType::Timestamp(TimeUnit::Microsecond, utc()),
            Shape::TimestampNanos => DataType::Timestamp(TimeUnit::Nanosecond, utc()),
            Shape::LocalTimestampMillis => DataType::Timestamp(TimeUnit::Millisecond, None),
            Shape::LocalTimestampMicros => DataType::Timestamp(TimeUnit::Microsecond, None),
            Shape::LocalTimestampNanos => DataType::Timestamp(TimeUnit::Nanosecond, None),
            Shape::Decimal { precision, scale, .. } => DataType::Decimal128(*precision, *scale),
            Shape::Record(fields) => DataType::Struct(record_fields(fields)),
            Shape::Array(item) => DataType::List(Arc::new(item.field("item"))),
            Shape::Map(value) => DataType::Map(map_entries(value), false),
            Shape::Enum(_) => {
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
            }
            Shape::Nullable(_, inner) => inner.data_type(),
            Shape::Union { branches, .. } => DataType::Struct(union_fields(branches)),
        }
    }

    fn nullable(&self) -> bool {
        matches!(self, Shape::Null | Shape::Nullable(..) | Shape::Union { .. })
    }

    fn field(&self, name: &str) -> Field {
        Field::new(name, self.data_type(), self.nullable())
    }
}

fn record_fields(fields: &[(String, Shape)]) -> Fields {
    fields.iter().map(|(name, shape)| shape.field(name)).collect()
}

fn union_fields(branches: &[(u32, Shape)]) -> Fields {
    branches
        .iter()
        .enumerate()
        .map(|(i, (_, shape))| Field::new(format!("member{i}"), shape.data_type(), true))
        .collect()
}

fn map_entries(value: &Shape) -> FieldRef {
    let entries =
        Fields::from(vec![Field::new("key", DataType::Utf8, false), value.field("value")]);
    Arc::new(Field::new("entries", DataType::Struct(entries), false))
}

/// The columns of a top-level Avro record.
pub struct RecordShape {
    pub(crate) fields: Vec<(String, Shape)>,
    /// Whether [`RecordShape::append_datum`] can read this schema's datums itself: every
    /// type but `uuid` and `big-decimal`, and `header.time` first (a `long`).
    pub(crate) direct: bool,
}

impl RecordShape {
    /// The shape of `schema`, which must be a record.
    pub fn of(schema: &Schema) -> Result<RecordShape, ColumnError> {
        let resolved = apache_avro::schema::ResolvedSchema::try_from(schema)
            .map_err(|e| ColumnError::Unsupported(e.to_string()))?;
        let names: HashMap<Name, Schema> =
            resolved.get_names().iter().map(|(n, s)| (n.clone(), (*s).clone())).collect();
        match shape(schema, &names, "", 0)? {
            Shape::Record(fields) => {
                let direct = readable(&fields);
                Ok(RecordShape { fields, direct })
            }
            _ => Err(ColumnError::Unsupported("the top-level schema is not a record".into())),
        }
    }

    /// The Arrow fields of the record's columns.
    pub fn fields(&self) -> Fields {
        record_fields(&self.fields)
    }

    /// Empty builders, one per field.
    pub fn builders(&self, capacity: usize) -> Vec<Column> {
        self.fields.iter().map(|(_, shape)| Column::new(shape, capacity)).collect()
    }

    /// Appends one decoded record (of this schema) to `columns`. On error the columns may be
    /// uneven: the caller discards them.
    pub fn append(&self, columns: &mut [Column], value: &Value) -> Result<(), ColumnError> {
        let Value::Record(values) = value else {
            return Err(ColumnError::Mismatch { path: "/".into(), expected: "a record" });
        };
        if values.len() != columns.len() {
            return Err(ColumnError::Mismatch { path: "/".into(), expected: "every field" });
        }
        for ((column, (_, value)), (name, _)) in columns.iter_mut().zip(values).zip(&self.fields) {
            column.append(value).map_err(|e| e.within(name))?;
        }
        Ok(())
    }
}

/// Whether the direct path ([`crate::datum`]) reads a record of `fields`: no `uuid` or `big-decimal` anywhere
/// (their Arrow form is apache-avro's rendering), and `header.time` first, a `long`.
fn readable(fields: &[(String, Shape)]) -> bool {
    let header_first = matches!(fields.first(), Some((name, Shape::Record(header)))
        if name == "header"
            && matches!(header.first(), Some((time, Shape::Long | Shape::TimestampMillis)) if time == "time"));
    header_first && fields.iter().all(|(_, shape)| supported(shape))
}

fn supported(shape: &Shape) -> bool {
    match shape {
        Shape::Uuid | Shape::BigDecimal => false,
        Shape::Record(fields) => fields.iter().all(|(_, s)| supported(s)),
        Shape::Array(item) | Shape::Map(item) | Shape::Nullable(_, item) => supported(item),
        Shape::Union { branches, .. } => branches.iter().all(|(_, s)| supported(s)),
        _ => true,
    }
}

impl ColumnError {
    pub(crate) fn within(self, name: &str) -> ColumnError {
        match self {
            ColumnError::Mismatch { path, expected } => {
                ColumnError::Mismatch { path: format!("/{name}{path}"), expected }
            }
            other => other,
        }
    }
}

/// A column being built.
pub enum Column {
    Null(usize),
    Boolean(BooleanBuilder),
    Int32(Int32Builder),
    Int64(Int64Builder),
    Float32(Float32Builder),
    Float64(Float64Builder),
    Binary(BinaryBuilder),
    Utf8(StringBuilder),
    Fixed(FixedSizeBinaryBuilder),
    Date(Date32Builder),
    TimeMillis(Time32MillisecondBuilder),
    TimeMicros(Time64MicrosecondBuilder),
    TimestampMillis(TimestampMillisecondBuilder),
    TimestampMicros(TimestampMicrosecondBuilder),
    TimestampNanos(TimestampNanosecondBuilder),
    Decimal(Decimal128Builder),
    Enum(StringDictionaryBuilder<Int32Type>),
    Struct {
        fields: Fields,
        children: Vec<Column>,
        nulls: NullBufferBuilder,
    },
    List {
        item: FieldRef,
        values: Box<Column>,
        offsets: Vec<i32>,
        nulls: NullBufferBuilder,
    },
    Map {
        entries: FieldRef,
        keys: StringBuilder,
        values: Box<Column>,
        offsets: Vec<i32>,
        nulls: NullBufferBuilder,
    },
    /// A nullable column: `["null", T]`.
    Nullable(Box<Column>),
    /// Branch index (Avro) → child position; one nullable child per non-null branch.
    Union {
        fields: Fields,
        branches: Vec<u32>,
        children: Vec<Column>,
        nulls: NullBufferBuilder,
    },
}

pub(crate) fn mismatch(expected: &'static str) -> ColumnError {
    ColumnError::Mismatch { path: String::new(), expected }
}

impl Column {
    fn new(shape: &Shape, capacity: usize) -> Column {
        let utc = "UTC";
        match shape {
            Shape::Null => Column::Null(0),
            Shape::Boolean => Column::Boolean(BooleanBuilder::with_capacity(capacity)),
            Shape::Int => Column::Int32(Int32Builder::with_capacity(capacity)),
            Shape::Long => Column::Int64(Int64Builder::with_capacity(capacity)),
            Shape::Float => Column::Float32(Float32Builder::with_capacity(capacity)),
            Shape::Double => Column::Float64(Float64Builder::with_capacity(capacity)),
            Shape::Bytes => Column::Binary(BinaryBuilder::with_capacity(capacity, capacity * 16)),
            Shape::String | Shape::Uuid | Shape::BigDecimal => {
                Column::Utf8(StringBuilder::with_capacity(capacity, capacity * 16))
            }
            Shape::Fixed(size) => {
                Column::Fixed(FixedSizeBinaryBuilder::with_capacity(capacity, *size))
            }
            Shape::Date => Column::Date(Date32Builder::with_capacity(capacity)),
            Shape::TimeMillis => {
                Column::TimeMillis(Time32MillisecondBuilder::with_capacity(capacity))
            }
            Shape::TimeMicros => {
                Column::TimeMicros(Time64MicrosecondBuilder::with_capacity(capacity))
            }
            Shape::TimestampMillis => Column::TimestampMillis(
                TimestampMillisecondBuilder::with_capacity(capacity).with_timezone(utc),
            ),
            Shape::TimestampMicros => Column::TimestampMicros(
                TimestampMicrosecondBuilder::with_capacity(capacity).with_timezone(utc),
            ),
            Shape::TimestampNanos => Column::TimestampNanos(
                TimestampNanosecondBuilder::with_capacity(capacity).with_timezone(utc),
            ),
            Shape::LocalTimestampMillis => {
                Column::TimestampMillis(TimestampMillisecondBuilder::with_capacity(capacity))
            }
            Shape::LocalTimestampMicros => {
                Column::TimestampMicros(TimestampMicrosecondBuilder::with_capacity(capacity))
            }
            Shape::LocalTimestampNanos => {
                Column::TimestampNanos(TimestampNanosecondBuilder::with_capacity(capacity))
            }
            Shape::Decimal { precision, scale, .. } => Column::Decimal(
                Decimal128Builder::with_capacity(capacity)
                    .with_precision_and_scale(*precision, *scale)
                    .expect("precision 1..=38 was checked"),
            ),
            Shape::Enum(_) => Column::Enum(StringDictionaryBuilder::new()),
            Shape::Record(fields) => Column::Struct {
                fields: record_fields(fields),
                children: fields.iter().map(|(_, s)| Column::new(s, capacity)).collect(),
                nulls: NullBufferBuilder::new(capacity),
            },
            Shape::Array(item) => Column::List {
                item: Arc::new(item.field("item")),
                values: Box::new(Column::new(item, capacity)),
                offsets: offsets(capacity),
                nulls: NullBufferBuilder::new(capacity),
            },
            Shape::Map(value) => Column::Map {
                entries: map_entries(value),
                keys: StringBuilder::new(),
                values: Box::new(Column::new(value, capacity)),
                offsets: offsets(capacity),
                nulls: NullBufferBuilder::new(capacity),
            },
            Shape::Nullable(_, inner) => Column::Nullable(Box::new(Column::new(inner, capacity))),
            Shape::Union { branches, .. } => Column::Union {
                fields: union_fields(branches),
                branches: branches.iter().map(|(i, _)| *i).collect(),
                children: branches.iter().map(|(_, s)| Column::new(s, capacity)).collect(),
                nulls: NullBufferBuilder::new(capacity),
            },
        }
    }

    fn append(&mut self, value: &Value) -> Result<(), ColumnError> {
        match (self, value) {
            (Column::Nullable(inner), Value::Union(_, v)) => match &**v {
                Value::Null => inner.append_null(),
                v => inner.append(v)?,
            },
            (Column::Nullable(inner), Value::Null) => inner.append_null(),
            (Column::Nullable(inner), v) => inner.append(v)?,
            (Column::Union { branches, children, nulls, .. }, Value::Union(index, v)) => {
                let chosen = branches.iter().position(|b| b == index);
                for (position, child) in children.iter_mut().enumerate() {
                    if Some(position) == chosen {
                        child.append(v).map_err(|e| e.within(&format!("member{position}")))?;
                    } else {
                        child.append_null();
                    }
                }
                nulls.append(chosen.is_some());
            }
            (Column::Null(n), Value::Null) => *n += 1,
            (Column::Boolean(b), Value::Boolean(v)) => b.append_value(*v),
            (Column::Int32(b), Value::Int(v)) => b.append_value(*v),
            (Column::Int64(b), Value::Long(v)) => b.append_value(*v),
            (Column::Float32(b), Value::Float(v)) => b.append_value(*v),
            (Column::Float64(b), Value::Double(v)) => b.append_value(*v),
            (Column::Binary(b), Value::Bytes(v)) => b.append_value(v),
            (Column::Utf8(b), Value::String(v)) => b.append_value(v),
            (Column::Utf8(b), Value::Uuid(v)) => b.append_value(v.to_string()),
            (Column::Utf8(b), Value::BigDecimal(v)) => b.append_value(v.to_string()),
            (Column::Utf8(b), Value::Decimal(v)) => {
                let bytes = Vec::<u8>::try_from(v).map_err(|_| mismatch("a decimal"))?;
                b.append_value(format!("0x{}", hex(&bytes)));
            }
            (Column::Fixed(b), Value::Fixed(_, v)) => b.append_value(v)?,
            (Column::Fixed(b), Value::Duration(d)) => {
                let bytes: [u8; 12] = (*d).into();
                b.append_value(bytes)?;
            }
            (Column::Date(b), Value::Date(v)) => b.append_value(*v),
            (Column::TimeMillis(b), Value::TimeMillis(v)) => b.append_value(*v),
            (Column::TimeMicros(b), Value::TimeMicros(v)) => b.append_value(*v),
            (
                Column::TimestampMillis(b),
                Value::TimestampMillis(v) | Value::LocalTimestampMillis(v),
            ) => b.append_value(*v),
            (
                Column::TimestampMicros(b),
                Value::TimestampMicros(v) | Value::LocalTimestampMicros(v),
            ) => b.append_value(*v),
            (
                Column::TimestampNanos(b),
                Value::TimestampNanos(v) | Value::LocalTimestampNanos(v),
            ) => b.append_value(*v),
            (Column::Decimal(b), Value::Decimal(v)) => {
                let bytes = Vec::<u8>::try_from(v).map_err(|_| mismatch("a decimal"))?;
                b.append_value(
                    decimal_i128(&bytes)
                        .ok_or_else(|| mismatch("a decimal of 16 bytes at most"))?,
                );
            }
            (Column::Enum(b), Value::Enum(_, symbol)) => {
                b.append_value(symbol);
            }
            (Column::Struct { children, nulls, .. }, Value::Record(values)) => {
                if values.len() != children.len() {
                    return Err(mismatch("a record with every field"));
                }
                for (child, (name, value)) in children.iter_mut().zip(values) {
                    child.append(value).map_err(|e| e.within(name))?;
                }
                nulls.append_non_null();
            }
            (Column::List { values, offsets, nulls, .. }, Value::Array(items)) => {
                for item in items {
                    values.append(item).map_err(|e| e.within("item"))?;
                }
                push_offset(offsets, items.len())?;
                nulls.append_non_null();
            }
            (Column::Map { keys, values, offsets, nulls, .. }, Value::Map(entries)) => {
                for (key, value) in entries {
                    keys.append_value(key);
                    values.append(value).map_err(|e| e.within(key))?;
                }
                push_offset(offsets, entries.len())?;
                nulls.append_non_null();
            }
            (column, _) => return Err(mismatch(column.expected())),
        }
        Ok(())
    }

    /// A null slot. For a non-nullable child of a null struct the slot is masked by the
    /// struct's own null, as Arrow allows.
    pub(crate) fn append_null(&mut self) {
        match self {
            Column::Null(n) => *n += 1,
            Column::Boolean(b) => b.append_null(),
            Column::Int32(b) => b.append_null(),
            Column::Int64(b) => b.append_null(),
            Column::Float32(b) => b.append_null(),
            Column::Float64(b) => b.append_null(),
            Column::Binary(b) => b.append_null(),
            Column::Utf8(b) => b.append_null(),
            Column::Fixed(b) => b.append_null(),
            Column::Date(b) => b.append_null(),
            Column::TimeMillis(b) => b.append_null(),
            Column::TimeMicros(b) => b.append_null(),
            Column::TimestampMillis(b) => b.append_null(),
            Column::TimestampMicros(b) => b.append_null(),
            Column::TimestampNanos(b) => b.append_null(),
            Column::Decimal(b) => b.append_null(),
            Column::Enum(b) => b.append_null(),
            Column::Struct { children, nulls, .. } | Column::Union { children, nulls, .. } => {
                children.iter_mut().for_each(Column::append_null);
                nulls.append_null();
            }
            Column::List { offsets, nulls, .. } | Column::Map { offsets, nulls, .. } => {
                let last = *offsets.last().expect("offsets start with 0");
                offsets.push(last);
                nulls.append_null();
            }
            Column::Nullable(inner) => inner.append_null(),
        }
    }

    pub(crate) fn expected(&self) -> &'static str {
        match self {
            Column::Null(_) => "null",
            Column::Boolean(_) => "a boolean",
            Column::Int32(_) => "an int",
            Column::Int64(_) => "a long",
            Column::Float32(_) => "a float",
            Column::Float64(_) => "a double",
            Column::Binary(_) => "bytes",
            Column::Utf8(_) => "a string",
            Column::Fixed(_) => "a fixed",
            Column::Date(_) => "a date",
            Column::TimeMillis(_) | Column::TimeMicros(_) => "a time",
            Column::TimestampMillis(_) | Column::TimestampMicros(_) | Column::TimestampNanos(_) => {
                "a timestamp"
            }
            Column::Decimal(_) => "a decimal",
            Column::Enum(_) => "an enum symbol",
            Column::Struct { .. } => "a record",
            Column::List { .. } => "an array",
            Column::Map { .. } => "a map",
            Column::Nullable(_) | Column::Union { .. } => "a union",
        }
    }

    /// The built column; the builder is empty afterwards and can be reused.
    pub fn finish(&mut self) -> Result<ArrayRef, ColumnError> {
        Ok(match self {
            Column::Null(n) => Arc::new(NullArray::new(std::mem::take(n))),
            Column::Boolean(b) => Arc::new(b.finish()),
            Column::Int32(b) => Arc::new(b.finish()),
            Column::Int64(b) => Arc::new(b.finish()),
            Column::Float32(b) => Arc::new(b.finish()),
            Column::Float64(b) => Arc::new(b.finish()),
            Column::Binary(b) => Arc::new(b.finish()),
            Column::Utf8(b) => Arc::new(b.finish()),
            Column::Fixed(b) => Arc::new(b.finish()),
            Column::Date(b) => Arc::new(b.finish()),
            Column::TimeMillis(b) => Arc::new(b.finish()),
            Column::TimeMicros(b) => Arc::new(b.finish()),
            Column::TimestampMillis(b) => Arc::new(b.finish()),
            Column::TimestampMicros(b) => Arc::new(b.finish()),
            Column::TimestampNanos(b) => Arc::new(b.finish()),
            Column::Decimal(b) => Arc::new(b.finish()),
            Column::Enum(b) => Arc::new(b.finish()),
            Column::Struct { fields, children, nulls }
            | Column::Union { fields, children, nulls, .. } => {
                let arrays =
                    children.iter_mut().map(Column::finish).collect::<Result<Vec<_>, _>>()?;
                Arc::new(StructArray::try_new(fields.clone(), arrays, nulls.finish())?)
            }
            Column::List { item, values, offsets, nulls } => {
                let values = values.finish()?;
                let offsets = OffsetBuffer::new(std::mem::replace(offsets, vec![0]).into());
                Arc::new(ListArray::try_new(Arc::clone(item), offsets, values, nulls.finish())?)
            }
            Column::Map { entries, keys, values, offsets, nulls } => {
                let DataType::Struct(entry_fields) = entries.data_type() else {
                    unreachable!("map entries are a struct")
                };
                let entry_struct = StructArray::try_new(
                    entry_fields.clone(),
                    vec![Arc::new(keys.finish()), values.finish()?],
                    None,
                )?;
                let offsets = OffsetBuffer::new(std::mem::replace(offsets, vec![0]).into());
                Arc::new(MapArray::try_new(
                    Arc::clone(entries),
                    offsets,
                    entry_struct,
                    nulls.finish(),
                    false,
                )?)
            }
            Column::Nullable(inner) => inner.finish()?,
        })
    }

    /// Rows appended since the last finish.
    pub fn len(&self) -> usize {
        match self {
            Column::Null(n) => *n,
            Column::Boolean(b) => b.len(),
            Column::Int32(b) => b.len(),
            Column::Int64(b) => b.len(),
            Column::Float32(b) => b.len(),
            Column::Float64(b) => b.len(),
            Column::Binary(b) => b.len(),
            Column::Utf8(b) => b.len(),
            Column::Fixed(b) => b.len(),
            Column::Date(b) => b.len(),
            Column::TimeMillis(b) => b.len(),
            Column::TimeMicros(b) => b.len(),
            Column::TimestampMillis(b) => b.len(),
            Column::TimestampMicros(b) => b.len(),
            Column::TimestampNanos(b) => b.len(),
            Column::Decimal(b) => b.len(),
            Column::Enum(b) => b.len(),
            Column::Struct { nulls, .. } | Column::Union { nulls, .. } => nulls.len(),
            Column::List { offsets, .. } | Column::Map { offsets, .. } => offsets.len() - 1,
            Column::Nullable(inner) => inner.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn offsets(capacity: usize) -> Vec<i32> {
    let mut offsets = Vec::with_capacity(capacity + 1);
    offsets.push(0);
    offsets
}

pub(crate) fn push_offset(offsets: &mut Vec<i32>, added: usize) -> Result<(), ColumnError> {
    let last = *offsets.last().expect("offsets start with 0");
    let next = i32::try_from(added).ok().and_then(|n| last.checked_add(n));
    offsets.push(next.ok_or_else(|| mismatch("fewer than 2^31 items per batch"))?);
    Ok(())
}

/// A big-endian two's-complement integer of at most 16 bytes.
pub(crate) fn decimal_i128(bytes: &[u8]) -> Option<i128> {
    if bytes.len() > 16 {
        return None;
    }
    let fill = if bytes.first().is_some_and(|b| b & 0x80 != 0) { 0xff } else { 0 };
    let mut full = [fill; 16];
    full[16 - bytes.len()..].copy_from_slice(bytes);
    Some(i128::from_be_bytes(full))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;

    use super::*;

    fn build(schema: &str, values: &[Value]) -> (Fields, Vec<ArrayRef>) {
        let schema = Schema::parse_str(schema).unwrap();
        let shape = RecordShape::of(&schema).unwrap();
        let mut columns = shape.builders(4);
        for value in values {
            shape.append(&mut columns, value).unwrap();
        }
        (shape.fields(), columns.iter_mut().map(|c| c.finish().unwrap()).collect())
    }

    #[test]
    fn maps_every_avro_kind_to_its_arrow_type() {
        let schema = r#"{"type":"record","name":"R","fields":[
            {"name":"b","type":"boolean"},
            {"name":"l","type":["null","long"]},
            {"name":"s","type":["string","null"]},
            {"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}},
            {"name":"f","type":{"type":"fixed","name":"F","size":2}},
            {"name":"a","type":{"type":"array","items":"int"}},
            {"name":"m","type":{"type":"map","values":"double"}},
            {"name":"n","type":{"type":"record","name":"N","fields":[{"name":"x","type":"bytes"}]}},
            {"name":"again","type":["null","N"]},
            {"name":"u","type":["null","int","string"]},
            {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
            {"name":"d","type":{"type":"int","logicalType":"date"}},
            {"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}}
        ]}"#;
        let record = |i: i32| {
            Value::Record(vec![
                ("b".into(), Value::Boolean(i == 0)),
                (
                    "l".into(),
                    if i == 0 {
                        Value::Union(0, Box::new(Value::Null))
                    } else {
                        Value::Union(1, Box::new(Value::Long(7)))
                    },
                ),
                ("s".into(), Value::Union(0, Box::new(Value::String("x".into())))),
                ("e".into(), Value::Enum(1, "B".into())),
                ("f".into(), Value::Fixed(2, vec![1, 2])),
                ("a".into(), Value::Array(vec![Value::Int(1), Value::Int(2)])),
                ("m".into(), Value::Map([("k".to_owned(), Value::Double(1.5))].into())),
                ("n".into(), Value::Record(vec![("x".into(), Value::Bytes(vec![9]))])),
                (
                    "again".into(),
                    if i == 0 {
                        Value::Union(0, Box::new(Value::Null))
                    } else {
                        Value::Union(
                            1,
                            Box::new(Value::Record(vec![("x".into(), Value::Bytes(vec![]))])),
                        )
                    },
                ),
                ("u".into(), Value::Union(2, Box::new(Value::String("z".into())))),
                ("ts".into(), Value::TimestampMillis(1_000)),
                ("d".into(), Value::Date(3)),
                ("dec".into(), Value::Decimal(apache_avro::Decimal::from(vec![0xff, 0x38]))),
            ])
        };
        let (fields, arrays) = build(schema, &[record(0), record(1)]);
        let types: Vec<String> = fields.iter().map(|f| format!("{}", f.data_type())).collect();
        assert_eq!(fields.len(), 13);
        assert!(!fields[0].is_nullable() && fields[1].is_nullable() && fields[2].is_nullable());
        assert!(types[3].starts_with("Dictionary(Int32, Utf8"), "{}", types[3]);
        assert_eq!(fields[4].data_type(), &DataType::FixedSizeBinary(2));
        assert!(matches!(fields[5].data_type(), DataType::List(_)));
        assert!(matches!(fields[6].data_type(), DataType::Map(_, false)));
        assert!(matches!(fields[9].data_type(), DataType::Struct(f) if f.len() == 2));
        assert_eq!(fields[12].data_type(), &DataType::Decimal128(9, 2));
        assert_eq!(arrays[1].null_count(), 1);
        assert_eq!(arrays[1].as_primitive::<arrow_array::types::Int64Type>().value(1), 7);
        assert_eq!(arrays[8].null_count(), 1);
        let union = arrays[9].as_struct();
        assert!(union.column(0).is_null(0) && union.column(1).is_valid(0));
        assert_eq!(arrays[12].as_primitive::<arrow_array::types::Decimal128Type>().value(0), -200);
        assert!(arrays.iter().all(|a| a.len() == 2));
    }

    #[test]
    fn value_of_the_wrong_type_names_its_path() {
        let schema = r#"{"type":"record","name":"R","fields":[
            {"name":"n","type":{"type":"record","name":"N","fields":[{"name":"x","type":"int"}]}}]}"#;
        let schema = Schema::parse_str(schema).unwrap();
        let shape = RecordShape::of(&schema).unwrap();
        let mut columns = shape.builders(1);
        let bad = Value::Record(vec![(
            "n".into(),
            Value::Record(vec![("x".into(), Value::String("no".into()))]),
        )]);
        let error = shape.append(&mut columns, &bad).unwrap_err().to_string();
        assert!(error.contains("/n/x") && error.contains("an int"), "{error}");
    }

    #[test]
    fn refuses_a_schema_that_is_not_a_record() {
        let schema = Schema::parse_str(r#""string""#).unwrap();
        assert!(matches!(RecordShape::of(&schema), Err(ColumnError::Unsupported(_))));
    }
}
