//! JSON text → Avro binary in one pass over the text: the HTTP input's fast path. Parsing an
//! event into a `serde_json::Value` tree (a `String` and a map node per field), walking it and
//! freeing it was a third of the agent's CPU; here the deserializer's tokens are written as
//! Avro as they come.
//!
//! The fast path only ever succeeds with the bytes [`crate::encode`] writes for the same text:
//! a JSON object's fields may come in any order (each is encoded into a slot, then the slots
//! are written in schema order), a repeated key keeps its last value, as a parsed `Value` does.
//! Whatever it is not sure of — any error at all, a map (whose `Value` form orders and merges
//! its keys), a union of several non-null types — it either hands to the `Value` path for that
//! part (maps, unions, the header) or gives up on, and the caller encodes the event again
//! through its `Value`, which gives the precise error.

use std::fmt;

use apache_avro::Schema;
use apache_avro::schema::RecordField;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::encode::{self, Names, decode_hex, write_bytes, write_long};

/// The fast path gave up: encode the event through its `Value` instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GaveUp;

/// What the top-level object's fields came to.
pub struct EncodedFields {
    /// The `header` field, if the object had one (encoded by the caller, with its defaults).
    pub header: Option<Value>,
}

/// Encodes the JSON object `text` as the record `fields` (in schema order, after whatever
/// `out` holds), except a field named `header`, which is returned as a `Value`.
pub fn encode_object(
    fields: &[RecordField],
    names: &Names,
    text: &[u8],
    out: &mut Vec<u8>,
) -> Result<EncodedFields, GaveUp> {
    let mut de = serde_json::Deserializer::from_slice(text);
    let mut header = None;
    let seed = RecordSeed { fields, names, out, header: Some(&mut header) };
    seed.deserialize(&mut de).map_err(|_| GaveUp)?;
    de.end().map_err(|_| GaveUp)?;
    Ok(EncodedFields { header })
}

/// Any error: the message is never shown, the `Value` path gives the real one.
fn give_up<E: de::Error>() -> E {
    E::custom("not encoded on the fast path")
}

/// A record, from a JSON object.
struct RecordSeed<'a> {
    fields: &'a [RecordField],
    names: &'a Names,
    out: &'a mut Vec<u8>,
    /// At the top level: where the `header` field goes.
    header: Option<&'a mut Option<Value>>,
}

impl<'de> DeserializeSeed<'de> for RecordSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RecordSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let RecordSeed { fields, names, out, mut header } = self;
        // Each field's encoding, in the order the object gave them, then copied in schema
        // order.
        let mut scratch = Vec::with_capacity(128);
        let mut slots: Vec<Option<(usize, usize)>> = vec![None; fields.len()];
        while let Some(key) = map.next_key_seed(KeySeed { fields, header: header.is_some() })? {
            match key {
                Key::Field(index) => {
                    let start = scratch.len();
                    let seed =
                        ValueSeed { schema: &fields[index].schema, names, out: &mut scratch };
                    map.next_value_seed(seed)?;
                    slots[index] = Some((start, scratch.len()));
                }
                Key::Header => {
                    let value: Value = map.next_value()?;
                    if let Some(header) = header.as_deref_mut() {
                        *header = Some(value);
                    }
                }
            }
        }
        for (field, slot) in fields.iter().zip(&slots) {
            match slot {
                Some((start, end)) => out.extend_from_slice(&scratch[*start..*end]),
                None => match &field.default {
                    Some(default) => encode::encode_default(&field.schema, names, default, out)
                        .map_err(|_| give_up())?,
                    None => return Err(give_up()),
                },
            }
        }
        Ok(())
    }
}

/// An object key: one of the record's fields, or the top level's `header`.
enum Key {
    Field(usize),
    Header,
}

struct KeySeed<'a> {
    fields: &'a [RecordField],
    header: bool,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Key;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Key, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
        if self.header && key == "header" {
            return Ok(Key::Header);
        }
        // An unknown field is an error: the `Value` path names it.
        self.fields.iter().position(|f| f.name == key).map(Key::Field).ok_or_else(give_up)
    }
}

/// One value of `schema`.
struct ValueSeed<'a> {
    schema: &'a Schema,
    names: &'a Names,
    out: &'a mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        let ValueSeed { schema, names, out } = self;
        let schema = names.resolve(schema).map_err(|_| give_up())?;
        let nullable = match schema {
            Schema::Union(union) => match union.variants() {
                [Schema::Null, other] => Some((0, 1, other)),
                [other, Schema::Null] => Some((1, 0, other)),
                _ => None,
            },
            _ => None,
        };
        match (schema, nullable) {
            (Schema::Union(_), Some((null_index, value_index, other))) => {
                let other = names.resolve(other).map_err(|_| give_up())?;
                let visitor = SchemaVisitor {
                    schema: other,
                    names,
                    out,
                    branch: Some((null_index, value_index)),
                };
                deserializer.deserialize_any(visitor)
            }
            // Their `Value` form decides: a map's keys ordered and merged, a union's first
            // branch that fits.
            (Schema::Union(_) | Schema::Map(_), _) => {
                let value = Value::deserialize(deserializer)?;
                encode::encode_value(schema, names, &value, out).map_err(|_| give_up())
            }
            (Schema::Record(record), _) => {
                let seed = RecordSeed { fields: &record.fields, names, out, header: None };
                seed.deserialize(deserializer)
            }
            _ => deserializer.deserialize_any(SchemaVisitor { schema, names, out, branch: None }),
        }
    }
}

/// A value of a schema that is neither a record, a map nor a union; for `["null", T]`,
/// `branch` is `(null's index, T's index)` and `schema` is `T`.
struct SchemaVisitor<'a> {
    schema: &'a Schema,
    names: &'a Names,
    out: &'a mut Vec<u8>,
    branch: Option<(i64, i64)>,
}

impl SchemaVisitor<'_> {
    /// Writes the union branch of a value that is not `null`.
    fn value_branch(&mut self) {
        if let Some((_, value_index)) = self.branch {
            write_long(self.out, value_index);
        }
    }

    fn integer<E: de::Error>(mut self, n: Option<i64>, f: f64) -> Result<(), E> {
        match self.schema {
            Schema::Int | Schema::Date | Schema::TimeMillis => {
                let n = n.and_then(|n| i32::try_from(n).ok()).ok_or_else(give_up)?;
                self.value_branch();
                write_long(self.out, i64::from(n));
            }
            Schema::Long
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => {
                let n = n.ok_or_else(give_up)?;
                self.value_branch();
                write_long(self.out, n);
            }
            Schema::Float => {
                self.value_branch();
                self.out.extend_from_slice(&(f as f32).to_le_bytes());
            }
            Schema::Double => {
                self.value_branch();
                self.out.extend_from_slice(&f.to_le_bytes());
            }
            _ => return Err(give_up()),
        }
        Ok(())
    }
}

impl<'de> Visitor<'de> for SchemaVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a value of the schema")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        match (self.branch, self.schema) {
            (Some((null_index, _)), _) => write_long(self.out, null_index),
            (None, Schema::Null) => {}
            _ => return Err(give_up()),
        }
        Ok(())
    }

    fn visit_bool<E: de::Error>(mut self, b: bool) -> Result<(), E> {
        if !matches!(self.schema, Schema::Boolean) {
            return Err(give_up());
        }
        self.value_branch();
        self.out.push(u8::from(b));
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<(), E> {
        self.integer(Some(n), n as f64)
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<(), E> {
        // As `Value::as_i64`: a u64 past i64::MAX is no long.
        self.integer(i64::try_from(n).ok(), n as f64)
    }

    fn visit_f64<E: de::Error>(mut self, f: f64) -> Result<(), E> {
        if !matches!(self.schema, Schema::Float | Schema::Double) {
            return Err(give_up());
        }
        self.value_branch();
        if matches!(self.schema, Schema::Float) {
            self.out.extend_from_slice(&(f as f32).to_le_bytes());
        } else {
            self.out.extend_from_slice(&f.to_le_bytes());
        }
        Ok(())
    }

    fn visit_str<E: de::Error>(mut self, s: &str) -> Result<(), E> {
        match self.schema {
            Schema::String | Schema::Uuid(apache_avro::schema::UuidSchema::String) => {
                self.value_branch();
                write_bytes(self.out, s.as_bytes());
            }
            Schema::Bytes => {
                let bytes = decode_hex(s).map_err(|_| give_up())?;
                self.value_branch();
                write_bytes(self.out, &bytes);
            }
            Schema::Fixed(fixed) => {
                let bytes = decode_hex(s).map_err(|_| give_up())?;
                if bytes.len() != fixed.size {
                    return Err(give_up());
                }
                self.value_branch();
                self.out.extend_from_slice(&bytes);
            }
            Schema::Enum(e) => {
                let index = e.symbols.iter().position(|symbol| symbol == s).ok_or_else(give_up)?;
                self.value_branch();
                write_long(self.out, index as i64);
            }
            _ => return Err(give_up()),
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let Schema::Array(array) = self.schema else { return Err(give_up()) };
        let mut items = Vec::new();
        let mut count = 0i64;
        while seq
            .next_element_seed(ValueSeed {
                schema: &array.items,
                names: self.names,
                out: &mut items,
            })?
            .is_some()
        {
            count += 1;
        }
        self.value_branch();
        if count > 0 {
            write_long(self.out, count);
            self.out.extend_from_slice(&items);
        }
        self.out.push(0);
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, map: A) -> Result<(), A::Error> {
        let Schema::Record(record) = self.schema else { return Err(give_up()) };
        self.value_branch();
        RecordSeed { fields: &record.fields, names: self.names, out: self.out, header: None }
            .visit_map(map)
    }
}

#[cfg(test)]
mod tests {
    use apache_avro::Schema;
    use serde_json::Value;

    use crate::event::{
        EncodedEvent, HeaderDefaults, TopicSchema, encode_event, encode_event_text,
    };

    const SCHEMA: &str = r#"{"type":"record","name":"E","fields":[
        {"name":"header","type":{"type":"record","name":"H","fields":[
            {"name":"time","type":"long"},{"name":"server","type":"string"},
            {"name":"service","type":"string"},
            {"name":"id","type":{"type":"fixed","name":"Id","size":16}}]}},
        {"name":"n","type":"long"},
        {"name":"i","type":"int","default":7},
        {"name":"s","type":["null","string"],"default":null},
        {"name":"d","type":["double","null"]},
        {"name":"b","type":"bytes"},
        {"name":"f","type":{"type":"fixed","name":"F","size":2}},
        {"name":"e","type":{"type":"enum","name":"K","symbols":["A","B"]}},
        {"name":"a","type":{"type":"array","items":{"type":"record","name":"P","fields":[
            {"name":"x","type":"float"},{"name":"on","type":"boolean"}]}}},
        {"name":"m","type":{"type":"map","values":"int"}},
        {"name":"u","type":["null","long","string"]},
        {"name":"p","type":["null","P"]}
    ]}"#;

    fn topic() -> TopicSchema {
        TopicSchema::new("t", 42, Schema::parse_str(SCHEMA).unwrap()).unwrap()
    }

    fn defaults() -> HeaderDefaults {
        HeaderDefaults { server: "host".into(), service: "svc".into() }
    }

    /// Whether the fast path took `text`; when it did, it wrote what the `Value` path writes.
    fn fast_path_agrees(text: &str) -> bool {
        let schema = topic();
        let Some(fast) = encode_event_text(&schema, text.as_bytes(), &defaults(), 1_000, 1 << 20)
        else {
            return false;
        };
        let value: Value = serde_json::from_str(text).expect("the fast path took invalid JSON");
        let slow = encode_event(&schema, &value, &defaults(), 1_000, 1 << 20)
            .expect("the fast path took an event the Value path refuses");
        assert_eq!(without_id(&fast, &slow), slow.payload, "{text}");
        assert_eq!(fast.time_ms, slow.time_ms);
        true
    }

    /// `fast`'s payload with `slow`'s event id (a random one when the header has none).
    fn without_id(fast: &EncodedEvent, slow: &EncodedEvent) -> Vec<u8> {
        let at = slow.payload.windows(16).position(|w| w == slow.id).unwrap();
        let mut payload = fast.payload.clone();
        assert_eq!(&payload[at..at + 16], &fast.id, "the id sits where it does in the other");
        payload[at..at + 16].copy_from_slice(&slow.id);
        payload
    }

    const FULL: &str = r#"{"n": -5, "i": 3, "s": "hé\n", "d": 1.5, "b": "00ff", "f": "abcd",
        "e": "B", "a": [{"x": 1, "on": true}, {"on": false, "x": -2.5}], "m": {"k": 1, "j": 2},
        "u": "z", "p": {"x": 0.5, "on": true}}"#;

    #[test]
    fn the_fast_path_writes_what_the_value_path_writes() {
        let taken = [
            FULL,
            // Keys in any order, defaults filled in, the header anywhere.
            r#"{"e":"A","f":"0000","b":"","n":1,"d":null,"a":[],"m":{},"u":null,"p":null}"#,
            r#"{"header":{"time":5,"id":"000102030405060708090a0b0c0d0e0f"},"n":1,"d":2,"b":"","f":"0000","e":"A","a":[],"m":{"b":1,"a":2,"b":3},"u":7,"p":null}"#,
            r#"{"n":1,"d":2,"b":"","f":"0000","e":"A","a":[],"m":{},"u":7,"p":null,"header":null}"#,
            // A repeated key keeps its last value, as in a parsed Value.
            r#"{"n":5,"n":1,"d":2,"b":"","f":"0000","e":"A","a":[],"m":{},"u":7,"p":null}"#,
            r#"  {"n":9223372036854775807,"d":-0.0,"b":"AB","f":"0000","e":"A","a":[],"m":{},"u":"","p":null}  "#,
        ];
        for text in taken {
            assert!(fast_path_agrees(text), "not taken: {text}");
        }
    }

    #[test]
    fn what_the_fast_path_is_not_sure_of_goes_to_the_value_path() {
        let refused = [
            r#"{"n": "1"}"#,
            r#"{"n": 1.0}"#,
            r#"{"n": 9223372036854775808}"#,
            r#"{"zz": 1}"#,
            r#"[1, 2]"#,
            r#"{"n": 1"#,
            r#"{"n": 1} x"#,
            // The Value path keeps the last of a repeated key, valid or not the first.
            r#"{"n":"x","n":1,"d":2,"b":"","f":"0000","e":"A","a":[],"m":{},"u":7,"p":null}"#,
            r#"{"n":1,"d":2,"b":"0","f":"0000","e":"A","a":[],"m":{},"u":7,"p":null}"#,
            r#"{"n":1,"d":2,"b":"","f":"00","e":"A","a":[],"m":{},"u":7,"p":null}"#,
            r#"{"n":1,"d":2,"b":"","f":"0000","e":"C","a":[],"m":{},"u":7,"p":null}"#,
            r#"{"n":1,"d":2,"b":"","f":"0000","e":"A","a":[{"x":1}],"m":{},"u":7,"p":null}"#,
            r#"{"n":1,"d":2,"b":"","f":"0000","e":"A","a":[],"m":{"k":"v"},"u":7,"p":null}"#,
            r#"{"n":1,"d":2,"b":"","f":"0000","e":"A","a":[],"m":{},"u":true,"p":null}"#,
            r#"{"n":1,"d":2,"b":"","f":"0000","e":"A","a":[],"m":{},"u":7,"p":null,"header":{"x":1}}"#,
            r#"{"n":1,"d":2,"b":"","f":"0000","e":"A","a":[],"m":{},"u":7,"p":null,"header":[]}"#,
            r#"{"n":1,"i":2147483648,"d":2,"b":"","f":"0000","e":"A","a":[],"m":{},"u":7,"p":null}"#,
        ];
        for text in refused {
            assert!(!fast_path_agrees(text), "taken: {text}");
        }
    }

    #[test]
    fn the_simulated_events_take_the_fast_path() {
        let registry = events::schemas::shipped("page-view").unwrap();
        let schema = TopicSchema::new("page-view", 1, Schema::parse_str(registry.text).unwrap());
        let schema = schema.unwrap();
        let mut generator = crate::simulate::Generator::default();
        let mut taken = 0;
        while taken < 100 {
            let event = generator.generate();
            if event.topic() != "page-view" {
                continue;
            }
            let mut text = Vec::new();
            event.write_json(&mut text);
            let fast = encode_event_text(&schema, &text, &defaults(), 1_000, 1 << 20).unwrap();
            let slow = encode_event(&schema, &event.to_value(), &defaults(), 1_000, 1 << 20);
            let slow = slow.unwrap();
            assert_eq!(without_id(&fast, &slow), slow.payload);
            taken += 1;
        }
    }
}
