//! JSON event → Avro binary datum, validated against the topic's schema in one pass.
//!
//! The HTTP input and the library path hand in events as JSON objects whose field names are the
//! schema's (docs/design.md, "Agent API"). A union is written as its bare value (or `null`),
//! `fixed` and `bytes` as lowercase hex, an enum as its symbol. Walking the schema and the JSON
//! together and writing Avro binary straight away avoids building an intermediate value per
//! event on the hot path.

use std::collections::HashMap;

use apache_avro::Schema;
use serde_json::{Map, Value};

/// Why an event does not fit its schema. `path` names the field, e.g. `header.time` (empty for
/// the event itself). It is built as the error travels up, so encoding that succeeds never
/// spends an allocation on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    #[error("missing field {}", shown(path))]
    MissingField { path: String },
    #[error("field {}: expected {expected}, got {got}", shown(path))]
    WrongType { path: String, expected: String, got: String },
    #[error("unknown field {}", shown(path))]
    UnknownField { path: String },
    #[error("field {}: {reason}", shown(path))]
    BadValue { path: String, reason: String },
    #[error("field {}: schema type {kind} is not supported by the agent", shown(path))]
    Unsupported { path: String, kind: &'static str },
}

impl EncodeError {
    fn path_mut(&mut self) -> &mut String {
        match self {
            EncodeError::MissingField { path }
            | EncodeError::WrongType { path, .. }
            | EncodeError::UnknownField { path }
            | EncodeError::BadValue { path, .. }
            | EncodeError::Unsupported { path, .. } => path,
        }
    }

    /// The same error, inside field `name`.
    pub fn under(mut self, name: &str) -> EncodeError {
        let path = self.path_mut();
        *path = match path.as_str() {
            "" => name.to_owned(),
            p if p.starts_with('[') => format!("{name}{p}"),
            p => format!("{name}.{p}"),
        };
        self
    }

    /// The same error, inside item `index` of an array.
    fn at(mut self, index: usize) -> EncodeError {
        let path = self.path_mut();
        *path = match path.as_str() {
            "" => format!("[{index}]"),
            p if p.starts_with('[') => format!("[{index}]{p}"),
            p => format!("[{index}].{p}"),
        };
        self
    }
}

fn shown(path: &str) -> &str {
    if path.is_empty() { "(event)" } else { path }
}

/// Named types of a schema (records, enums, fixed) by full name, to follow `Ref`s.
#[derive(Debug, Default)]
pub struct Names {
    named: HashMap<String, Schema>,
}

impl Names {
    pub fn of(schema: &Schema) -> Names {
        let mut names = Names::default();
        names.collect(schema);
        names
    }

    fn collect(&mut self, schema: &Schema) {
        match schema {
            Schema::Record(record) => {
                self.named.insert(record.name.fullname(None), schema.clone());
                for field in &record.fields {
                    self.collect(&field.schema);
                }
            }
            Schema::Enum(e) => {
                self.named.insert(e.name.fullname(None), schema.clone());
            }
            Schema::Fixed(f) => {
                self.named.insert(f.name.fullname(None), schema.clone());
            }
            Schema::Array(a) => self.collect(&a.items),
            Schema::Map(m) => self.collect(&m.types),
            Schema::Union(u) => u.variants().iter().for_each(|s| self.collect(s)),
            _ => {}
        }
    }

    pub(crate) fn resolve<'a>(&'a self, schema: &'a Schema) -> Result<&'a Schema, EncodeError> {
        match schema {
            Schema::Ref { name } => {
                self.named.get(&name.fullname(None)).ok_or_else(|| EncodeError::BadValue {
                    path: String::new(),
                    reason: format!("schema names unknown type {}", name.fullname(None)),
                })
            }
            other => Ok(other),
        }
    }
}

/// Writes `value` as the Avro binary encoding of `schema` onto `out`. On error `out` holds a
/// partial datum: the caller discards it.
pub fn encode_value(
    schema: &Schema,
    names: &Names,
    value: &Value,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let schema = names.resolve(schema)?;
    let wrong = |expected: &str| EncodeError::WrongType {
        path: String::new(),
        expected: expected.to_owned(),
        got: kind_of(value).to_owned(),
    };
    match schema {
        Schema::Null => value.is_null().then_some(()).ok_or_else(|| wrong("null")),
        Schema::Boolean => {
            let b = value.as_bool().ok_or_else(|| wrong("boolean"))?;
            out.push(u8::from(b));
            Ok(())
        }
        Schema::Int | Schema::Date | Schema::TimeMillis => {
            let n = value.as_i64().ok_or_else(|| wrong("int"))?;
            let n = i32::try_from(n).map_err(|_| wrong("int (32-bit)"))?;
            write_long(out, i64::from(n));
            Ok(())
        }
        Schema::Long
        | Schema::TimeMicros
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => {
            let n = value.as_i64().ok_or_else(|| wrong("long"))?;
            write_long(out, n);
            Ok(())
        }
        Schema::Float => {
            let f = value.as_f64().ok_or_else(|| wrong("float"))?;
            out.extend_from_slice(&(f as f32).to_le_bytes());
            Ok(())
        }
        Schema::Double => {
            let f = value.as_f64().ok_or_else(|| wrong("double"))?;
            out.extend_from_slice(&f.to_le_bytes());
            Ok(())
        }
        Schema::String | Schema::Uuid(apache_avro::schema::UuidSchema::String) => {
            let s = value.as_str().ok_or_else(|| wrong("string"))?;
            write_bytes(out, s.as_bytes());
            Ok(())
        }
        Schema::Bytes => {
            let s = value.as_str().ok_or_else(|| wrong("hex string (bytes)"))?;
            let bytes = decode_hex(s).map_err(bad)?;
            write_bytes(out, &bytes);
            Ok(())
        }
        Schema::Fixed(fixed) => {
            let s = value.as_str().ok_or_else(|| wrong("hex string (fixed)"))?;
            let bytes = decode_hex(s).map_err(bad)?;
            if bytes.len() != fixed.size {
                let reason = format!("{} bytes, the fixed type needs {}", bytes.len(), fixed.size);
                return Err(bad(reason));
            }
            out.extend_from_slice(&bytes);
            Ok(())
        }
        Schema::Enum(e) => {
            let s = value.as_str().ok_or_else(|| wrong("enum symbol"))?;
            let index = e
                .symbols
                .iter()
                .position(|symbol| symbol == s)
                .ok_or_else(|| bad(format!("{s:?} is not one of {}", e.symbols.join(", "))))?;
            write_long(out, index as i64);
            Ok(())
        }
        Schema::Array(array) => {
            let items = value.as_array().ok_or_else(|| wrong("array"))?;
            if !items.is_empty() {
                write_long(out, items.len() as i64);
                for (i, item) in items.iter().enumerate() {
                    encode_value(&array.items, names, item, out).map_err(|e| e.at(i))?;
                }
            }
            out.push(0);
            Ok(())
        }
        Schema::Map(map) => {
            let entries = value.as_object().ok_or_else(|| wrong("object (map)"))?;
            if !entries.is_empty() {
                write_long(out, entries.len() as i64);
                for (key, item) in entries {
                    write_bytes(out, key.as_bytes());
                    encode_value(&map.types, names, item, out).map_err(|e| e.under(key))?;
                }
            }
            out.push(0);
            Ok(())
        }
        Schema::Union(union) => encode_union(union.variants(), names, value, out),
        Schema::Record(record) => {
            let object = value.as_object().ok_or_else(|| wrong("object (record)"))?;
            encode_record(&record.fields, names, object, None, out)
        }
        Schema::Decimal(_) => Err(unsupported("decimal")),
        Schema::BigDecimal => Err(unsupported("big-decimal")),
        Schema::Uuid(_) => Err(unsupported("uuid over bytes or fixed")),
        Schema::Duration(_) => Err(unsupported("duration")),
        Schema::Ref { .. } => Err(unsupported("nested reference")),
    }
}

/// A record's fields in schema order; a missing field takes its default, an unknown one is
/// an error (it is most likely a misspelt field whose value would otherwise be lost), except
/// `known`, a key the caller encodes itself.
pub fn encode_record(
    fields: &[apache_avro::schema::RecordField],
    names: &Names,
    object: &Map<String, Value>,
    known: Option<&str>,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    for field in fields {
        let encoded = match object.get(&field.name) {
            Some(value) => encode_value(&field.schema, names, value, out),
            None => match &field.default {
                Some(default) => encode_default(&field.schema, names, default, out),
                None => return Err(EncodeError::MissingField { path: field.name.clone() }),
            },
        };
        encoded.map_err(|e| e.under(&field.name))?;
    }
    let unknown =
        |key: &&String| Some(key.as_str()) != known && !fields.iter().any(|f| &f.name == *key);
    match object.keys().find(unknown) {
        Some(name) => Err(EncodeError::UnknownField { path: name.clone() }),
        None => Ok(()),
    }
}

/// A union takes the bare value: `null` picks the null branch, anything else the first
/// branch it fits.
fn encode_union(
    variants: &[Schema],
    names: &Names,
    value: &Value,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let start = out.len();
    let mut first_error = None;
    for (index, variant) in variants.iter().enumerate() {
        if value.is_null() != matches!(variant, Schema::Null) {
            continue;
        }
        write_long(out, index as i64);
        match encode_value(variant, names, value, out) {
            Ok(()) => return Ok(()),
            Err(e) => {
                out.truncate(start);
                first_error.get_or_insert(e);
            }
        }
    }
    let branches: Vec<String> = variants.iter().map(schema_name).collect();
    Err(match first_error {
        // One branch could take this kind of value: its complaint is the most precise.
        Some(e) if variants.iter().filter(|v| !matches!(v, Schema::Null)).count() == 1 => e,
        _ => EncodeError::WrongType {
            path: String::new(),
            expected: format!("one of {}", branches.join(", ")),
            got: kind_of(value).to_owned(),
        },
    })
}

/// A field default, which Avro writes in JSON with a union's default in its first branch and
/// bytes/fixed as ISO-8859-1 strings.
pub(crate) fn encode_default(
    schema: &Schema,
    names: &Names,
    default: &Value,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    match names.resolve(schema)? {
        Schema::Union(union) => {
            let first = union.variants().first().ok_or_else(|| bad("empty union".into()))?;
            write_long(out, 0);
            encode_default(first, names, default, out)
        }
        Schema::Bytes | Schema::Fixed(_) => {
            let text = default.as_str().ok_or_else(|| bad("bad default".into()))?;
            let bytes: Vec<u8> = text.chars().map(|c| c as u32 as u8).collect();
            if matches!(schema, Schema::Bytes) {
                write_bytes(out, &bytes);
            } else {
                out.extend_from_slice(&bytes);
            }
            Ok(())
        }
        other => encode_value(other, names, default, out),
    }
}

/// Avro `long`/`int`: zig-zag, then a little-endian base-128 varint.
pub fn write_long(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Avro `string`/`bytes`: a `long` length, then the bytes.
pub fn write_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    write_long(out, bytes.len() as i64);
    out.extend_from_slice(bytes);
}

/// Lowercase (or uppercase) hex to bytes.
pub fn decode_hex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err(format!("hex string of odd length {}", s.len()));
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(format!("{:?} is not a hex digit", c as char)),
    };
    s.as_bytes().chunks_exact(2).map(|pair| Ok(digit(pair[0])? << 4 | digit(pair[1])?)).collect()
}

/// Bytes to lowercase hex.
pub fn encode_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

fn bad(reason: String) -> EncodeError {
    EncodeError::BadValue { path: String::new(), reason }
}

fn unsupported(kind: &'static str) -> EncodeError {
    EncodeError::Unsupported { path: String::new(), kind }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn schema_name(schema: &Schema) -> String {
    match schema {
        Schema::Record(r) => r.name.name().to_owned(),
        Schema::Enum(e) => e.name.name().to_owned(),
        Schema::Fixed(f) => f.name.name().to_owned(),
        Schema::Ref { name } => name.name().to_owned(),
        other => format!("{:?}", apache_avro::schema::SchemaKind::from(other)).to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apache_avro::types::Value as Avro;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::parse_str(
            r#"{"type":"record","name":"E","fields":[
                {"name":"n","type":"long"},
                {"name":"m","type":["null","long"],"default":null},
                {"name":"s","type":"string"},
                {"name":"b","type":"bytes"},
                {"name":"f","type":{"type":"fixed","name":"F","size":2}},
                {"name":"e","type":{"type":"enum","name":"K","symbols":["A","B"]}},
                {"name":"a","type":{"type":"array","items":"int"}},
                {"name":"x","type":{"type":"map","values":"double"}},
                {"name":"g","type":"F"},
                {"name":"d","type":"int","default":7}
            ]}"#,
        )
        .unwrap()
    }

    fn decode(schema: &Schema, datum: &[u8]) -> Avro {
        let reader =
            apache_avro::reader::datum::GenericDatumReader::builder(schema).build().unwrap();
        reader.read_value(&mut &datum[..]).unwrap()
    }

    #[test]
    fn encoding_reads_back_with_apache_avro() {
        let schema = schema();
        let names = Names::of(&schema);
        let event = json!({"n": -5, "m": 12, "s": "hé", "b": "00ff", "f": "abcd", "e": "B",
            "a": [1, 2], "x": {"k": 1.5}, "g": "0102"});
        let mut out = Vec::new();
        encode_value(&schema, &names, &event, &mut out).unwrap();
        let Avro::Record(fields) = decode(&schema, &out) else { panic!("record") };
        assert_eq!(fields[0].1, Avro::Long(-5));
        assert_eq!(fields[1].1, Avro::Union(1, Box::new(Avro::Long(12))));
        assert_eq!(fields[2].1, Avro::String("hé".into()));
        assert_eq!(fields[3].1, Avro::Bytes(vec![0, 255]));
        assert_eq!(fields[4].1, Avro::Fixed(2, vec![0xab, 0xcd]));
        assert_eq!(fields[5].1, Avro::Enum(1, "B".into()));
        assert_eq!(fields[6].1, Avro::Array(vec![Avro::Int(1), Avro::Int(2)]));
        assert_eq!(fields[8].1, Avro::Fixed(2, vec![1, 2]));
        assert_eq!(fields[9].1, Avro::Int(7), "default filled in");
    }

    #[test]
    fn each_kind_of_bad_value_names_its_field() {
        let schema = schema();
        let names = Names::of(&schema);
        let base =
            json!({"n": 1, "s": "", "b": "", "f": "0000", "e": "A", "a": [], "x": {}, "g": "0000"});
        let cases = [
            ("n", json!("1"), "field n: expected long, got string"),
            ("m", json!("x"), "field m: expected long, got string"),
            ("f", json!("00"), "field f: 1 bytes, the fixed type needs 2"),
            ("b", json!("zz"), "field b: 'z' is not a hex digit"),
            ("e", json!("C"), "field e: \"C\" is not one of A, B"),
            ("a", json!([1, "2"]), "field a[1]: expected int, got string"),
            ("zz", json!(1), "unknown field zz"),
        ];
        for (field, value, message) in cases {
            let mut event = base.clone();
            event[field] = value;
            let err = encode_value(&schema, &names, &event, &mut Vec::new()).unwrap_err();
            assert_eq!(err.to_string(), message);
        }
        let mut event = base.clone();
        event.as_object_mut().unwrap().remove("s");
        let err = encode_value(&schema, &names, &event, &mut Vec::new()).unwrap_err();
        assert_eq!(err, EncodeError::MissingField { path: "s".into() });
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(decode_hex(&encode_hex(&[0, 1, 0xfe])).unwrap(), vec![0, 1, 0xfe]);
        assert!(decode_hex("abc").is_err());
    }
}
