//! Avro binary → Arrow columns in one walk, without an `apache_avro::types::Value` per event:
//! the loader's path for an event written with the topic's reader schema, which is nearly
//! every event. Building, walking and freeing a `Value` tree (a `String` per field name) was
//! about two thirds of the loader's CPU.
//!
//! A datum is first checked whole ([`RecordShape::check_datum`]), so that a bad record is
//! refused before any of its fields reaches a column and the columns never end uneven; then
//! appended ([`RecordShape::append_datum`]). Events of other writer schemas go through
//! apache-avro's schema resolution and [`RecordShape::append`], as before.

use crate::columns::{
    Column, ColumnError, DatumError, RecordShape, Shape, decimal_i128, mismatch, push_offset,
};

/// Items of one array or map block at most when each item may take no bytes (a `null`, or a
/// record of nulls): a larger count is refused instead of looping over it.
const EMPTY_ITEMS_MAX: i64 = 1 << 20;

impl RecordShape {
    /// Whether [`RecordShape::append_datum`] reads this schema.
    pub fn reads_datums(&self) -> bool {
        self.direct
    }

    /// Checks that `datum` is exactly one record of this schema: every length within the
    /// datum, strings UTF-8, enum symbols and union branches that exist, nothing left over.
    pub fn check_datum(&self, datum: &[u8]) -> Result<(), DatumError> {
        let mut cursor = Cursor { bytes: datum, at: 0 };
        for (_, shape) in &self.fields {
            check(shape, &mut cursor)?;
        }
        if cursor.at != datum.len() {
            return Err(cursor.error("bytes after the record"));
        }
        Ok(())
    }

    /// Appends one datum, checked by [`RecordShape::check_datum`], to `columns`.
    pub fn append_datum(&self, columns: &mut [Column], datum: &[u8]) -> Result<(), ColumnError> {
        let mut cursor = Cursor { bytes: datum, at: 0 };
        for ((name, shape), column) in self.fields.iter().zip(columns) {
            append(shape, column, &mut cursor).map_err(|e| e.within(name))?;
        }
        Ok(())
    }
}

/// Reads Avro binary from a datum, never past its end.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn error(&self, reason: &'static str) -> DatumError {
        DatumError { reason, at: self.at }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DatumError> {
        let end = self.at.checked_add(n).filter(|&end| end <= self.bytes.len());
        let end = end.ok_or_else(|| self.error("value past the end"))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    /// The next `N` bytes, as an array (a `float`'s or a `double`'s).
    fn take_array<const N: usize>(&mut self) -> Result<[u8; N], DatumError> {
        let taken = self.take(N)?.first_chunk::<N>().copied();
        taken.ok_or_else(|| self.error("value past the end"))
    }

    /// A `long`: zig-zag over a little-endian base-128 varint of at most 10 bytes.
    fn long(&mut self) -> Result<i64, DatumError> {
        let mut z: u64 = 0;
        for shift in (0..70).step_by(7) {
            let &byte = self.bytes.get(self.at).ok_or_else(|| self.error("varint past the end"))?;
            self.at += 1;
            z |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok((z >> 1) as i64 ^ -((z & 1) as i64));
            }
        }
        Err(self.error("varint longer than 10 bytes"))
    }

    fn int(&mut self) -> Result<i32, DatumError> {
        let at = self.at;
        let n = self.long()?;
        i32::try_from(n).map_err(|_| DatumError { reason: "int out of range", at })
    }

    fn boolean(&mut self) -> Result<bool, DatumError> {
        match self.take(1)? {
            [0] => Ok(false),
            [1] => Ok(true),
            _ => Err(DatumError { reason: "boolean neither 0 nor 1", at: self.at - 1 }),
        }
    }

    fn bytes(&mut self) -> Result<&'a [u8], DatumError> {
        let at = self.at;
        let len = self.long()?;
        let len = usize::try_from(len).map_err(|_| DatumError { reason: "negative length", at })?;
        self.take(len)
    }

    fn string(&mut self) -> Result<&'a str, DatumError> {
        let at = self.at;
        let bytes = self.bytes()?;
        std::str::from_utf8(bytes).map_err(|_| DatumError { reason: "string not UTF-8", at })
    }

    /// The branch index of a union of `variants` branches.
    fn branch(&mut self, variants: u32) -> Result<u32, DatumError> {
        let at = self.at;
        let index = self.long()?;
        u32::try_from(index)
            .ok()
            .filter(|&i| i < variants)
            .ok_or(DatumError { reason: "union branch out of range", at })
    }

    /// The item count of the next block of an array or map (0 ends it); a negative count is
    /// followed by the block's size in bytes, which is skipped over.
    fn block(&mut self, item: &Shape) -> Result<usize, DatumError> {
        let at = self.at;
        let mut count = self.long()?;
        if count < 0 {
            count =
                count.checked_neg().ok_or(DatumError { reason: "block count out of range", at })?;
            self.long()?;
        }
        // An item takes a byte at least, unless it can take none.
        let room = (self.bytes.len() - self.at) as i64;
        let max = if takes_bytes(item) { room } else { EMPTY_ITEMS_MAX };
        if count > max {
            return Err(DatumError { reason: "block count larger than the datum", at });
        }
        Ok(count as usize)
    }
}

/// Whether every value of `shape` takes at least one byte.
fn takes_bytes(shape: &Shape) -> bool {
    match shape {
        Shape::Null => false,
        Shape::Fixed(size) => *size > 0,
        Shape::Decimal { fixed: Some(size), .. } => *size > 0,
        Shape::Record(fields) => fields.iter().any(|(_, s)| takes_bytes(s)),
        _ => true,
    }
}

/// Reads one value of `shape`, checking it.
fn check(shape: &Shape, c: &mut Cursor) -> Result<(), DatumError> {
    match shape {
        Shape::Null => {}
        Shape::Boolean => {
            c.boolean()?;
        }
        Shape::Int | Shape::Date | Shape::TimeMillis => {
            c.int()?;
        }
        Shape::Long
        | Shape::TimeMicros
        | Shape::TimestampMillis
        | Shape::TimestampMicros
        | Shape::TimestampNanos
        | Shape::LocalTimestampMillis
        | Shape::LocalTimestampMicros
        | Shape::LocalTimestampNanos => {
            c.long()?;
        }
        Shape::Float => {
            c.take(4)?;
        }
        Shape::Double => {
            c.take(8)?;
        }
        Shape::Bytes => {
            c.bytes()?;
        }
        Shape::String => {
            c.string()?;
        }
        Shape::Fixed(size) => {
            c.take(*size as usize)?;
        }
        Shape::Decimal { fixed, .. } => {
            let at = c.at;
            let bytes = match fixed {
                Some(size) => c.take(*size)?,
                None => c.bytes()?,
            };
            if bytes.len() > 16 {
                return Err(DatumError { reason: "decimal over 16 bytes", at });
            }
        }
        Shape::Enum(symbols) => {
            let at = c.at;
            let index = c.long()?;
            if usize::try_from(index).map_or(true, |i| i >= symbols.len()) {
                return Err(DatumError { reason: "enum index out of range", at });
            }
        }
        Shape::Record(fields) => {
            for (_, field) in fields {
                check(field, c)?;
            }
        }
        Shape::Array(item) => loop {
            let count = c.block(item)?;
            if count == 0 {
                break;
            }
            for _ in 0..count {
                check(item, c)?;
            }
        },
        Shape::Map(value) => loop {
            let count = c.block(value)?;
            if count == 0 {
                break;
            }
            for _ in 0..count {
                c.string()?;
                check(value, c)?;
            }
        },
        Shape::Nullable(null, inner) => {
            if c.branch(2)? != *null {
                check(inner, c)?;
            }
        }
        Shape::Union { branches, variants } => {
            let index = c.branch(*variants)?;
            if let Some((_, branch)) = branches.iter().find(|(i, _)| *i == index) {
                check(branch, c)?;
            }
        }
        Shape::Uuid | Shape::BigDecimal => return Err(c.error("type not read directly")),
    }
    Ok(())
}

/// Reads one value of `shape` (checked before) into `column`.
fn append(shape: &Shape, column: &mut Column, c: &mut Cursor) -> Result<(), ColumnError> {
    let bad = ColumnError::Datum;
    match (shape, column) {
        (Shape::Null, Column::Null(n)) => *n += 1,
        (Shape::Boolean, Column::Boolean(b)) => b.append_value(c.boolean().map_err(bad)?),
        (Shape::Int, Column::Int32(b)) => b.append_value(c.int().map_err(bad)?),
        (Shape::Long, Column::Int64(b)) => b.append_value(c.long().map_err(bad)?),
        (Shape::Float, Column::Float32(b)) => {
            b.append_value(f32::from_le_bytes(c.take_array().map_err(bad)?));
        }
        (Shape::Double, Column::Float64(b)) => {
            b.append_value(f64::from_le_bytes(c.take_array().map_err(bad)?));
        }
        (Shape::Bytes, Column::Binary(b)) => b.append_value(c.bytes().map_err(bad)?),
        (Shape::String, Column::Utf8(b)) => b.append_value(c.string().map_err(bad)?),
        (Shape::Fixed(size), Column::Fixed(b)) => {
            b.append_value(c.take(*size as usize).map_err(bad)?)?;
        }
        (Shape::Date, Column::Date(b)) => b.append_value(c.int().map_err(bad)?),
        (Shape::TimeMillis, Column::TimeMillis(b)) => b.append_value(c.int().map_err(bad)?),
        (Shape::TimeMicros, Column::TimeMicros(b)) => b.append_value(c.long().map_err(bad)?),
        (Shape::TimestampMillis | Shape::LocalTimestampMillis, Column::TimestampMillis(b)) => {
            b.append_value(c.long().map_err(bad)?);
        }
        (Shape::TimestampMicros | Shape::LocalTimestampMicros, Column::TimestampMicros(b)) => {
            b.append_value(c.long().map_err(bad)?);
        }
        (Shape::TimestampNanos | Shape::LocalTimestampNanos, Column::TimestampNanos(b)) => {
            b.append_value(c.long().map_err(bad)?);
        }
        (Shape::Decimal { fixed, .. }, Column::Decimal(b)) => {
            let bytes = match fixed {
                Some(size) => c.take(*size),
                None => c.bytes(),
            };
            let value = decimal_i128(bytes.map_err(bad)?);
            b.append_value(value.ok_or_else(|| mismatch("a decimal of 16 bytes at most"))?);
        }
        (Shape::Enum(symbols), Column::Enum(b)) => {
            let index = c.long().map_err(bad)?;
            let symbol = usize::try_from(index).ok().and_then(|i| symbols.get(i));
            b.append_value(symbol.ok_or_else(|| mismatch("an enum symbol"))?);
        }
        (Shape::Record(fields), Column::Struct { children, nulls, .. }) => {
            for ((name, field), child) in fields.iter().zip(children) {
                append(field, child, c).map_err(|e| e.within(name))?;
            }
            nulls.append_non_null();
        }
        (Shape::Array(item), Column::List { values, offsets, nulls, .. }) => {
            let mut items = 0;
            loop {
                let count = c.block(item).map_err(bad)?;
                if count == 0 {
                    break;
                }
                for _ in 0..count {
                    append(item, values, c).map_err(|e| e.within("item"))?;
                }
                items += count;
            }
            push_offset(offsets, items)?;
            nulls.append_non_null();
        }
        (Shape::Map(value), Column::Map { keys, values, offsets, nulls, .. }) => {
            let mut entries = 0;
            loop {
                let count = c.block(value).map_err(bad)?;
                if count == 0 {
                    break;
                }
                for _ in 0..count {
                    let key = c.string().map_err(bad)?;
                    keys.append_value(key);
                    append(value, values, c).map_err(|e| e.within(key))?;
                }
                entries += count;
            }
            push_offset(offsets, entries)?;
            nulls.append_non_null();
        }
        (Shape::Nullable(null, inner), Column::Nullable(column)) => {
            if c.branch(2).map_err(bad)? == *null {
                column.append_null();
            } else {
                append(inner, column, c)?;
            }
        }
        (Shape::Union { branches, variants }, Column::Union { children, nulls, .. }) => {
            let index = c.branch(*variants).map_err(bad)?;
            let chosen = branches.iter().position(|(i, _)| *i == index);
            for (position, child) in children.iter_mut().enumerate() {
                if Some(position) == chosen {
                    append(&branches[position].1, child, c)
                        .map_err(|e| e.within(&format!("member{position}")))?;
                } else {
                    child.append_null();
                }
            }
            nulls.append(chosen.is_some());
        }
        (_, column) => return Err(mismatch(column.expected())),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use apache_avro::Schema;
    use apache_avro::types::Value;
    use arrow_array::ArrayRef;

    use super::*;

    const SCHEMA: &str = r#"{"type":"record","name":"R","fields":[
        {"name":"header","type":{"type":"record","name":"H","fields":[
            {"name":"time","type":"long"},{"name":"server","type":"string"}]}},
        {"name":"b","type":"boolean"},
        {"name":"i","type":"int"},
        {"name":"l","type":["null","long"]},
        {"name":"s","type":["string","null"]},
        {"name":"fl","type":"float"},
        {"name":"db","type":"double"},
        {"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}},
        {"name":"f","type":{"type":"fixed","name":"F","size":2}},
        {"name":"a","type":{"type":"array","items":"int"}},
        {"name":"m","type":{"type":"map","values":"double"}},
        {"name":"n","type":{"type":"record","name":"N","fields":[{"name":"x","type":"bytes"}]}},
        {"name":"again","type":["null","N"]},
        {"name":"u","type":["null","int","string"]},
        {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"d","type":{"type":"int","logicalType":"date"}},
        {"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
        {"name":"decf","type":{"type":"fixed","name":"D","size":3,"logicalType":"decimal","precision":6,"scale":1}}
    ]}"#;

    fn record(i: i32) -> Value {
        let union = |index, value| Value::Union(index, Box::new(value));
        Value::Record(vec![
            (
                "header".into(),
                Value::Record(vec![
                    ("time".into(), Value::Long(1_700_000_000_000 + i64::from(i))),
                    ("server".into(), Value::String(format!("host-{i}"))),
                ]),
            ),
            ("b".into(), Value::Boolean(i % 2 == 0)),
            ("i".into(), Value::Int(-i * 1000)),
            ("l".into(), if i % 3 == 0 { union(0, Value::Null) } else { union(1, Value::Long(7)) }),
            (
                "s".into(),
                if i % 2 == 0 {
                    union(0, Value::String("é".into()))
                } else {
                    union(1, Value::Null)
                },
            ),
            ("fl".into(), Value::Float(1.5 * i as f32)),
            ("db".into(), Value::Double(-2.25 * f64::from(i))),
            ("e".into(), Value::Enum((i % 2) as u32, if i % 2 == 0 { "A" } else { "B" }.into())),
            ("f".into(), Value::Fixed(2, vec![1, i as u8])),
            ("a".into(), Value::Array((0..i).map(Value::Int).collect())),
            (
                "m".into(),
                Value::Map(
                    (0..i).map(|k| (format!("k{k}"), Value::Double(f64::from(k)))).collect(),
                ),
            ),
            ("n".into(), Value::Record(vec![("x".into(), Value::Bytes(vec![9; i as usize]))])),
            (
                "again".into(),
                if i % 2 == 0 {
                    union(0, Value::Null)
                } else {
                    union(1, Value::Record(vec![("x".into(), Value::Bytes(vec![]))]))
                },
            ),
            (
                "u".into(),
                match i % 3 {
                    0 => union(0, Value::Null),
                    1 => union(1, Value::Int(i)),
                    _ => union(2, Value::String("z".into())),
                },
            ),
            ("ts".into(), Value::TimestampMillis(1_000 * i64::from(i))),
            ("d".into(), Value::Date(i)),
            ("dec".into(), Value::Decimal(apache_avro::Decimal::from(vec![0xff, 0x38 + i as u8]))),
            ("decf".into(), Value::Decimal(apache_avro::Decimal::from(vec![0, 1, i as u8]))),
        ])
    }

    fn datum(schema: &Schema, value: Value) -> Vec<u8> {
        let writer =
            apache_avro::writer::datum::GenericDatumWriter::builder(schema).build().unwrap();
        writer.write_value_to_vec(value).unwrap()
    }

    /// Avro's `long`, for hand-made datums.
    fn write_long(out: &mut Vec<u8>, n: i64) {
        let mut z = ((n << 1) ^ (n >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }

    fn finish(columns: &mut [Column]) -> Vec<ArrayRef> {
        columns.iter_mut().map(|c| c.finish().unwrap()).collect()
    }

    #[test]
    fn datums_become_the_same_columns_as_their_decoded_values() {
        let schema = Schema::parse_str(SCHEMA).unwrap();
        let shape = RecordShape::of(&schema).unwrap();
        assert!(shape.reads_datums());
        let mut from_values = shape.builders(4);
        let mut from_datums = shape.builders(4);
        for i in 0..7 {
            let value = record(i);
            let datum = datum(&schema, value.clone());
            shape.append(&mut from_values, &value).unwrap();
            shape.check_datum(&datum).unwrap();
            shape.append_datum(&mut from_datums, &datum).unwrap();
        }
        assert_eq!(finish(&mut from_values), finish(&mut from_datums));
    }

    #[test]
    fn a_bad_datum_is_refused_by_the_check() {
        let schema = Schema::parse_str(SCHEMA).unwrap();
        let shape = RecordShape::of(&schema).unwrap();
        let datum = datum(&schema, record(2));
        for cut in 0..datum.len() {
            assert!(shape.check_datum(&datum[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = datum.clone();
        longer.push(0);
        assert_eq!(shape.check_datum(&longer).unwrap_err().reason, "bytes after the record");
        // header.time, then server: a string whose bytes are not UTF-8.
        let mut bad_utf8 = datum.clone();
        let server = 6 + 1;
        assert_eq!(&bad_utf8[server..server + 6], b"host-2");
        bad_utf8[server] = 0xff;
        assert_eq!(shape.check_datum(&bad_utf8).unwrap_err().reason, "string not UTF-8");
        // A block count far larger than the bytes left.
        let huge = Schema::parse_str(
            r#"{"type":"record","name":"R","fields":[
                {"name":"header","type":{"type":"record","name":"H","fields":[{"name":"time","type":"long"}]}},
                {"name":"a","type":{"type":"array","items":"long"}},
                {"name":"z","type":{"type":"array","items":"null"}}]}"#,
        )
        .unwrap();
        let shape = RecordShape::of(&huge).unwrap();
        let block = |count: i64| {
            let mut out = vec![2]; // time 1
            write_long(&mut out, count);
            out
        };
        assert_eq!(
            shape.check_datum(&block(1 << 40)).unwrap_err().reason,
            "block count larger than the datum"
        );
        let mut nulls = vec![2, 0];
        write_long(&mut nulls, 1 << 40);
        assert_eq!(
            shape.check_datum(&nulls).unwrap_err().reason,
            "block count larger than the datum"
        );
        assert_eq!(
            shape
                .check_datum(&[2, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80])
                .unwrap_err()
                .reason,
            "varint longer than 10 bytes"
        );
    }

    #[test]
    fn schemas_with_types_read_by_apache_avro_only_take_the_value_path() {
        let uuid = Schema::parse_str(
            r#"{"type":"record","name":"R","fields":[
                {"name":"header","type":{"type":"record","name":"H","fields":[{"name":"time","type":"long"}]}},
                {"name":"id","type":{"type":"string","logicalType":"uuid"}}]}"#,
        )
        .unwrap();
        assert!(!RecordShape::of(&uuid).unwrap().reads_datums());
        let headless = Schema::parse_str(
            r#"{"type":"record","name":"R","fields":[{"name":"time","type":"long"}]}"#,
        )
        .unwrap();
        assert!(!RecordShape::of(&headless).unwrap().reads_datums());
    }
}
