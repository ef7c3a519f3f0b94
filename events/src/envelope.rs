//! The event envelope of docs/design.md (Confluent's wire format): `0x00 | i32 schema id
//! (big-endian) | Avro binary datum`. The first field of every event is the `header` record,
//! so [`EventHeader::read`] gets `time`, `server`, `service` and `id` without the schema, and
//! [`header_time`] the time alone without allocating. [`decode_with`] and [`encode_with`] look
//! the schema up in the registry.

use std::io::Read;

use apache_avro::Schema;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use apache_avro::writer::datum::GenericDatumWriter;
use schema_registry::{ClientError, RegistryClient};

/// First byte of every envelope.
pub const MAGIC: u8 = 0;
/// Magic byte plus schema id.
pub const PREFIX_BYTES: usize = 5;
/// Size of the header's `id` (a `fixed(16)`).
pub const EVENT_ID_BYTES: usize = 16;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnvelopeError {
    #[error("wrong magic byte {0:#04x} (expected 0x00): not a schema-registry envelope")]
    WrongMagic(u8),
    #[error("truncated payload: {len} bytes, the envelope needs at least {needed}")]
    Truncated { len: usize, needed: usize },
    #[error("schema {schema_id}: the datum does not decode: {source}")]
    Undecodable {
        schema_id: i32,
        #[source]
        source: apache_avro::Error,
    },
    #[error("schema {schema_id}: {trailing} bytes follow the datum")]
    TrailingBytes { schema_id: i32, trailing: usize },
    #[error("schema {schema_id}: the value does not fit the schema: {source}")]
    Unencodable {
        schema_id: i32,
        #[source]
        source: apache_avro::Error,
    },
    #[error("the event header is malformed: {0}")]
    BadHeader(&'static str),
}

/// Encodes `datum` with `schema` (registered under `schema_id`) into an envelope.
pub fn encode(
    schema_id: i32,
    schema: &Schema,
    datum: impl Into<Value>,
) -> Result<Vec<u8>, EnvelopeError> {
    let unencodable = |source| EnvelopeError::Unencodable { schema_id, source };
    let writer = GenericDatumWriter::builder(schema).build().map_err(unencodable)?;
    let mut bytes = Vec::with_capacity(64);
    bytes.push(MAGIC);
    bytes.extend_from_slice(&schema_id.to_be_bytes());
    writer.write_value(&mut bytes, datum).map_err(unencodable)?;
    Ok(bytes)
}

/// Splits an envelope into its schema id and the Avro datum that follows.
pub fn split(payload: &[u8]) -> Result<(i32, &[u8]), EnvelopeError> {
    let Some((&magic, rest)) = payload.split_first() else {
        return Err(EnvelopeError::Truncated { len: 0, needed: PREFIX_BYTES });
    };
    if magic != MAGIC {
        return Err(EnvelopeError::WrongMagic(magic));
    }
    let Some((id, datum)) = rest.split_first_chunk::<4>() else {
        return Err(EnvelopeError::Truncated { len: payload.len(), needed: PREFIX_BYTES });
    };
    Ok((i32::from_be_bytes(*id), datum))
}

/// Decodes an envelope whose schema id names `schema` (the caller looked it up; [`decode_with`]
/// does it for you).
pub fn decode(payload: &[u8], schema: &Schema) -> Result<(i32, Value), EnvelopeError> {
    let (schema_id, mut datum) = split(payload)?;
    let undecodable = |source| EnvelopeError::Undecodable { schema_id, source };
    let reader = GenericDatumReader::builder(schema).build().map_err(undecodable)?;
    let value = reader.read_value(&mut datum).map_err(undecodable)?;
    if !datum.is_empty() {
        return Err(EnvelopeError::TrailingBytes { schema_id, trailing: datum.len() });
    }
    Ok((schema_id, value))
}

/// Why an envelope could not be decoded or encoded with the registry's schema.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    #[error(transparent)]
    Registry(#[from] ClientError),
}

/// Decodes an envelope with the schema its id names, fetched from (and cached by) `registry`.
pub async fn decode_with(
    registry: &RegistryClient,
    payload: &[u8],
) -> Result<(i32, Value), CodecError> {
    let (schema_id, _) = split(payload)?;
    let schema = registry.schema(schema_id).await?;
    Ok(decode(payload, &schema)?)
}

/// Encodes `datum` with the schema registered as `schema_id`, fetched from `registry`.
pub async fn encode_with(
    registry: &RegistryClient,
    schema_id: i32,
    datum: impl Into<Value>,
) -> Result<Vec<u8>, CodecError> {
    let schema = registry.schema(schema_id).await?;
    Ok(encode(schema_id, &schema, datum)?)
}

/// `header.time` of an event envelope (ms since the epoch) without its schema and without
/// allocating: the zig-zag varint right after the 5-byte prefix. `None` for a payload that is
/// not an envelope or whose header is cut short.
pub fn header_time(payload: &[u8]) -> Option<i64> {
    let (_, mut datum) = split(payload).ok()?;
    read_long(&mut datum).ok()
}

/// The `header` record every event starts with (docs/design.md, "Event envelope").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventHeader {
    /// Creation time, ms since the epoch.
    pub time: i64,
    pub server: String,
    pub service: String,
    /// Random per event; lets downstream tiers recognise duplicates.
    pub id: [u8; EVENT_ID_BYTES],
}

impl EventHeader {
    /// Reads the header from an event envelope without its schema: Avro binary has no field
    /// tags, so the header's fields are the first bytes after the 5-byte prefix.
    pub fn read(payload: &[u8]) -> Result<(i32, EventHeader), EnvelopeError> {
        let (schema_id, mut datum) = split(payload)?;
        let time = read_long(&mut datum)?;
        let server = read_string(&mut datum)?;
        let service = read_string(&mut datum)?;
        let mut id = [0; EVENT_ID_BYTES];
        datum.read_exact(&mut id).map_err(|_| EnvelopeError::BadHeader("truncated id"))?;
        Ok((schema_id, EventHeader { time, server, service, id }))
    }
}

/// An Avro `long`: zig-zag encoded, as a varint of at most 10 bytes.
fn read_long(input: &mut &[u8]) -> Result<i64, EnvelopeError> {
    let mut raw: u64 = 0;
    for i in 0..10 {
        let (&byte, rest) =
            input.split_first().ok_or(EnvelopeError::BadHeader("truncated long"))?;
        *input = rest;
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    Err(EnvelopeError::BadHeader("long longer than 10 bytes"))
}

/// An Avro `string`: a `long` length, then UTF-8 bytes.
fn read_string(input: &mut &[u8]) -> Result<String, EnvelopeError> {
    let len = usize::try_from(read_long(input)?)
        .map_err(|_| EnvelopeError::BadHeader("negative string length"))?;
    // The length is checked against the bytes present before anything is allocated.
    let bytes = input.get(..len).ok_or(EnvelopeError::BadHeader("truncated string"))?;
    *input = &input[len..];
    String::from_utf8(bytes.to_vec()).map_err(|_| EnvelopeError::BadHeader("string is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_time_reads_the_first_varint_of_an_envelope() {
        // time -5 zig-zags to 9; then the strings would follow.
        assert_eq!(header_time(b"\0\0\0\0\x07\x09\x06web"), Some(-5));
        assert_eq!(header_time(b"\0\0\0\0\x07\xac\x02"), Some(150));
        assert_eq!(header_time(b""), None);
        assert_eq!(header_time(b"\x01\0\0\0\x07\x02"), None, "wrong magic");
        assert_eq!(header_time(b"\0\0\0"), None, "truncated prefix");
        assert_eq!(header_time(b"\0\0\0\0\x07\x80\x80"), None, "truncated varint");
    }
}
