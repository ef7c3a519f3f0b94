//! Event decoding: each message with its writer schema (by the id in its envelope), resolved
//! to the topic's reader schema (the latest version of `{topic}-value`), so every row of a
//! file has one schema. `header.time` picks the row's hour and audit window. An event written
//! with the reader schema itself is only checked here and appended to the columns straight
//! from its bytes ([`crate::datum`]).

use std::collections::HashMap;
use std::sync::Arc;

use apache_avro::Schema;
use apache_avro::types::Value;
use bytes::Bytes;
use events::envelope;
use schema_registry::RegistryClient;

use crate::columns::RecordShape;

/// Why one message could not be decoded.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct BadRecord(pub String);

/// A decoded event.
pub struct Decoded {
    pub schema_id: i32,
    pub time_ms: i64,
    pub body: Body,
}

/// A decoded event's fields.
pub enum Body {
    /// Read with its writer schema into a record of the reader schema.
    Value(Value),
    /// A datum of the reader schema, checked whole: appended straight from its bytes.
    Datum(Bytes),
}

/// Writer schemas by id, fetched from the registry once each.
pub struct Schemas {
    registry: Arc<RegistryClient>,
    reader_id: i32,
    reader: Arc<Schema>,
    /// The reader schema's columns.
    shape: Arc<RecordShape>,
    writers: HashMap<i32, Result<Arc<Schema>, BadRecord>>,
}

impl Schemas {
    pub fn new(
        registry: Arc<RegistryClient>,
        reader_id: i32,
        reader: Arc<Schema>,
        shape: Arc<RecordShape>,
    ) -> Schemas {
        Schemas { registry, reader_id, reader, shape, writers: HashMap::new() }
    }

    pub fn reader_id(&self) -> i32 {
        self.reader_id
    }

    /// Fetches the writer schemas of `payloads` not seen yet. An unknown id is remembered as
    /// bad; a registry that cannot be reached is an error (the run stops, nothing is skipped).
    pub async fn prefetch<'a>(
        &mut self,
        payloads: impl Iterator<Item = &'a [u8]>,
    ) -> Result<(), schema_registry::ClientError> {
        for payload in payloads {
            let Ok((id, _)) = envelope::split(payload) else { continue };
            if self.writers.contains_key(&id) {
                continue;
            }
            let schema = match self.registry.schema(id).await {
                Ok(schema) => Ok(schema),
                Err(schema_registry::ClientError::UnknownSchemaId(id)) => {
                    Err(BadRecord(format!("schema id {id} is not in the registry")))
                }
                Err(e) => return Err(e),
            };
            self.writers.insert(id, schema);
        }
        Ok(())
    }

    /// A decoder for the writer schemas fetched so far.
    pub fn decoder(&self) -> Decoder<'_> {
        let mut readers = HashMap::new();
        for (&id, schema) in &self.writers {
            let Ok(schema) = schema else { continue };
            let reader = apache_avro::reader::datum::GenericDatumReader::builder(schema)
                .maybe_reader_schema((id != self.reader_id).then_some(&*self.reader))
                .build();
            readers.insert(id, reader.map_err(|e| BadRecord(format!("schema id {id}: {e}"))));
        }
        Decoder { schemas: self, readers }
    }
}

/// Decodes messages whose writer schemas were prefetched.
pub struct Decoder<'s> {
    schemas: &'s Schemas,
    readers: HashMap<i32, Result<apache_avro::reader::datum::GenericDatumReader<'s>, BadRecord>>,
}

impl Decoder<'_> {
    pub fn decode(&self, payload: &Bytes) -> Result<Decoded, BadRecord> {
        let (schema_id, mut datum) =
            envelope::split(payload).map_err(|e| BadRecord(e.to_string()))?;
        let shape = &self.schemas.shape;
        if schema_id == self.schemas.reader_id && shape.reads_datums() {
            shape
                .check_datum(datum)
                .map_err(|e| BadRecord(format!("cannot decode with schema id {schema_id}: {e}")))?;
            // The check read `header.time`, the datum's first long.
            let time_ms = envelope::header_time(payload)
                .ok_or_else(|| BadRecord("the event has no header.time (a long)".into()))?;
            let body = Body::Datum(payload.slice(envelope::PREFIX_BYTES..));
            return Ok(Decoded { schema_id, time_ms, body });
        }
        let reader = match self.readers.get(&schema_id) {
            Some(Ok(reader)) => reader,
            Some(Err(e)) => return Err(e.clone()),
            None => match self.schemas.writers.get(&schema_id) {
                Some(Err(e)) => return Err(e.clone()),
                _ => return Err(BadRecord(format!("schema id {schema_id} was not fetched"))),
            },
        };
        let value = reader.read_value(&mut datum).map_err(|e| {
            BadRecord(format!(
                "cannot decode with schema id {schema_id} as id {}: {e}",
                self.schemas.reader_id
            ))
        })?;
        if !datum.is_empty() {
            return Err(BadRecord(format!("{} bytes after the datum", datum.len())));
        }
        let time_ms = header_time(&value)
            .ok_or_else(|| BadRecord("the event has no header.time (a long)".into()))?;
        Ok(Decoded { schema_id, time_ms, body: Body::Value(value) })
    }
}

fn header_time(value: &Value) -> Option<i64> {
    let Value::Record(fields) = value else { return None };
    let (name, Value::Record(header)) = fields.first()? else { return None };
    if name != "header" {
        return None;
    }
    header.iter().find(|(n, _)| n == "time").and_then(|(_, v)| match v {
        Value::Long(t) | Value::TimestampMillis(t) => Some(*t),
        _ => None,
    })
}
