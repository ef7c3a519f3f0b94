//! One event from JSON to its envelope (docs/design.md, "Event envelope"): the topic's latest
//! schema (subject `{topic}-value`, cached), the header filled in where the caller left it out,
//! the datum validated and encoded in one pass.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use apache_avro::Schema;
use events::audit::AUDIT_TOPIC;
use events::envelope::{EVENT_ID_BYTES, MAGIC};
use schema_registry::RegistryClient;
use serde_json::{Map, Value};

use crate::encode::{self, EncodeError, Names};

/// Why an event was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    #[error("unknown topic {topic}: no schema is registered under {topic}-value")]
    UnknownTopic { topic: String },
    #[error("topic {topic} is reserved for the pipeline's audit counts")]
    ReservedTopic { topic: String },
    #[error("invalid topic name {topic:?}")]
    InvalidTopic { topic: String },
    #[error(
        "the schema of topic {topic} does not start with the event header record \
         (docs/design.md, \"Event envelope\")"
    )]
    NoHeader { topic: String },
    #[error("the event is not a JSON object")]
    NotAnObject,
    #[error("{0}")]
    Invalid(#[from] EncodeError),
    #[error("the encoded event is {bytes} bytes, over the limit of {limit_bytes}")]
    TooLarge { bytes: usize, limit_bytes: usize },
    #[error("the schema registry is unavailable: {0}")]
    Registry(String),
}

impl EventError {
    /// True when the event itself is at fault (HTTP 400), false when the agent cannot check
    /// it right now (HTTP 503).
    pub fn is_bad_event(&self) -> bool {
        !matches!(self, EventError::Registry(_))
    }
}

/// A topic's latest schema, ready to encode with.
#[derive(Debug)]
pub struct TopicSchema {
    pub id: i32,
    pub schema: Schema,
    names: Names,
}

impl TopicSchema {
    /// `topic`'s schema `schema`, registered as `id`: a record whose first field is the event
    /// header (docs/design.md, "Event envelope").
    pub fn new(topic: &str, id: i32, schema: Schema) -> Result<TopicSchema, EventError> {
        let header_first = matches!(&schema, Schema::Record(r)
            if r.fields.first().is_some_and(|f| f.name == "header" && is_event_header(&f.schema)));
        if !header_first {
            return Err(EventError::NoHeader { topic: topic.to_owned() });
        }
        let names = Names::of(&schema);
        Ok(TopicSchema { id, schema, names })
    }
}

/// Latest schemas by topic, asked for again after `refresh`.
pub struct Schemas {
    registry: Arc<RegistryClient>,
    refresh: Duration,
    cache: Mutex<HashMap<String, (Instant, Arc<TopicSchema>)>>,
}

/// Topics whose schema is cached at most; past that, schemas are fetched but not kept.
const TOPICS_CACHED_MAX: usize = 10_000;

impl Schemas {
    pub fn new(registry: Arc<RegistryClient>, refresh_ms: u64) -> Schemas {
        Schemas {
            registry,
            refresh: Duration::from_millis(refresh_ms),
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub async fn get(&self, topic: &str) -> Result<Arc<TopicSchema>, EventError> {
        if topic == AUDIT_TOPIC {
            return Err(EventError::ReservedTopic { topic: topic.to_owned() });
        }
        if protocol::validate_topic_name(topic).is_err() {
            return Err(EventError::InvalidTopic { topic: topic.to_owned() });
        }
        if let Some((at, schema)) = self.lock().get(topic)
            && at.elapsed() < self.refresh
        {
            return Ok(Arc::clone(schema));
        }
        let subject = format!("{topic}-value");
        let latest = match self.registry.latest(&subject).await {
            Ok(latest) => latest,
            Err(schema_registry::ClientError::Registry { status: 404, .. }) => {
                return Err(EventError::UnknownTopic { topic: topic.to_owned() });
            }
            Err(e) => return Err(EventError::Registry(e.to_string())),
        };
        let schema = Schema::parse_str(&latest.schema)
            .map_err(|e| EventError::Registry(format!("schema {}: {e}", latest.id)))?;
        let schema = Arc::new(TopicSchema::new(topic, latest.id, schema)?);
        let mut cache = self.lock();
        if cache.len() < TOPICS_CACHED_MAX || cache.contains_key(topic) {
            cache.insert(topic.to_owned(), (Instant::now(), Arc::clone(&schema)));
        }
        Ok(schema)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Arc<TopicSchema>)>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The header record (docs/design.md, "Event envelope"): `time: long, server: string,
/// service: string, id: fixed(16)`, in this order.
fn is_event_header(schema: &Schema) -> bool {
    let Schema::Record(header) = schema else { return false };
    let kinds: Vec<(&str, &Schema)> =
        header.fields.iter().map(|f| (f.name.as_str(), &f.schema)).collect();
    matches!(
        kinds.as_slice(),
        [("time", Schema::Long), ("server", Schema::String), ("service", Schema::String), ("id", Schema::Fixed(id))]
            if id.size == EVENT_ID_BYTES
    )
}

/// What the agent fills into a header that leaves fields out.
#[derive(Debug, Clone)]
pub struct HeaderDefaults {
    pub server: String,
    pub service: String,
}

/// An event in its envelope, with the header fields the spool and the audit need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedEvent {
    pub payload: Vec<u8>,
    pub time_ms: i64,
    pub id: [u8; EVENT_ID_BYTES],
}

/// Validates `event` against `schema` and encodes it in the envelope.
pub fn encode_event(
    schema: &TopicSchema,
    event: &Value,
    defaults: &HeaderDefaults,
    now_ms: i64,
    max_bytes: usize,
) -> Result<EncodedEvent, EventError> {
    let object = event.as_object().ok_or(EventError::NotAnObject)?;
    let Schema::Record(record) = &schema.schema else {
        unreachable!("TopicSchema::new admits only record schemas")
    };
    let mut payload = Vec::with_capacity(128);
    payload.push(MAGIC);
    payload.extend_from_slice(&schema.id.to_be_bytes());
    let (time_ms, id) = encode_header(schema, object.get("header"), defaults, now_ms, &mut payload)
        .map_err(|e| e.under("header"))?;
    // `header` is the first field, encoded above.
    let rest = &record.fields[1..];
    encode::encode_record(rest, &schema.names, object, Some("header"), &mut payload)?;
    if payload.len() > max_bytes {
        return Err(EventError::TooLarge { bytes: payload.len(), limit_bytes: max_bytes });
    }
    Ok(EncodedEvent { payload, time_ms, id })
}

/// Like [`encode_event`] for the JSON text of an event, in one pass over the text without a
/// `Value` tree. `None` when the fast path is not sure (the event is invalid, or a part of it
/// needs its `Value`): then [`encode_event`] of the parsed text gives the answer, error or not.
pub fn encode_event_text(
    schema: &TopicSchema,
    text: &[u8],
    defaults: &HeaderDefaults,
    now_ms: i64,
    max_bytes: usize,
) -> Option<EncodedEvent> {
    let Schema::Record(record) = &schema.schema else {
        unreachable!("TopicSchema::new admits only record schemas")
    };
    // The header comes first in the datum but anywhere in the object: the other fields are
    // encoded first, beside.
    let mut rest = Vec::with_capacity(128);
    let fields =
        crate::encode_text::encode_object(&record.fields[1..], &schema.names, text, &mut rest)
            .ok()?;
    let mut payload = Vec::with_capacity(rest.len() + 64);
    payload.push(MAGIC);
    payload.extend_from_slice(&schema.id.to_be_bytes());
    let (time_ms, id) =
        encode_header(schema, fields.header.as_ref(), defaults, now_ms, &mut payload).ok()?;
    payload.extend_from_slice(&rest);
    (payload.len() <= max_bytes).then_some(EncodedEvent { payload, time_ms, id })
}

/// Encodes the caller's header (an object, or absent/null) with `time`, `server`, `service`
/// and `id` filled in where missing; returns the event's time and id.
fn encode_header(
    schema: &TopicSchema,
    given: Option<&Value>,
    defaults: &HeaderDefaults,
    now_ms: i64,
    out: &mut Vec<u8>,
) -> Result<(i64, [u8; EVENT_ID_BYTES]), EncodeError> {
    let empty = Map::new();
    let given = match given {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(fields)) => fields,
        Some(other) => {
            return Err(EncodeError::WrongType {
                path: String::new(),
                expected: "object (record)".into(),
                got: if other.is_array() { "array" } else { "scalar" }.into(),
            });
        }
    };
    let Schema::Record(record) = &schema.schema else {
        unreachable!("checked in TopicSchema::new")
    };
    let Schema::Record(header) = &record.fields[0].schema else {
        unreachable!("checked in TopicSchema::new")
    };
    let mut time_ms = now_ms;
    let mut id = [0u8; EVENT_ID_BYTES];
    for field in &header.fields {
        let name = field.name.as_str();
        if let Some(value) = given.get(name) {
            encode::encode_value(&field.schema, &schema.names, value, out)
                .map_err(|e| e.under(name))?;
            match name {
                "time" => time_ms = value.as_i64().unwrap_or(now_ms),
                "id" => {
                    // Encoded above, so 16 bytes of hex.
                    if let Some(Ok(bytes)) = value.as_str().map(encode::decode_hex)
                        && bytes.len() == EVENT_ID_BYTES
                    {
                        id.copy_from_slice(&bytes);
                    }
                }
                _ => {}
            }
            continue;
        }
        match name {
            "time" => encode::write_long(out, now_ms),
            "server" => encode::write_bytes(out, defaults.server.as_bytes()),
            "service" => encode::write_bytes(out, defaults.service.as_bytes()),
            "id" => {
                id = rand::random();
                out.extend_from_slice(&id);
            }
            // `Schemas::get` admits only the four header fields (docs/design.md, "Event envelope").
            _ => return Err(EncodeError::MissingField { path: name.to_owned() }),
        }
    }
    match given.keys().find(|key| !header.fields.iter().any(|f| &f.name == *key)) {
        Some(unknown) => Err(EncodeError::UnknownField { path: unknown.clone() }),
        None => Ok((time_ms, id)),
    }
}
