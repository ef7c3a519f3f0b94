//! One event from JSON to its envelope (DESIGN.md, "Event envelope"): the topic's latest
//! schema (subject `{topic}-value`, cached), the header filled in where the caller left it out,
//! the datum validated and encoded in one pass.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use apache_avro::Schema;
use schema_registry::RegistryClient;
use schema_registry::audit::AUDIT_TOPIC;
use schema_registry::envelope::{EVENT_ID_BYTES, MAGIC};
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
    #[error("the schema of topic {topic} does not start with the event header record")]
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
        if let Some((at, schema)) = self.lock().get(topic) {
            if at.elapsed() < self.refresh {
                return Ok(Arc::clone(schema));
            }
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
        let header_first = matches!(&schema, Schema::Record(r)
            if r.fields.first().is_some_and(|f| f.name == "header" && matches!(f.schema, Schema::Record(_))));
        if !header_first {
            return Err(EventError::NoHeader { topic: topic.to_owned() });
        }
        let names = Names::of(&schema);
        let schema = Arc::new(TopicSchema { id: latest.id, schema, names });
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
        unreachable!("Schemas::get admits only record schemas")
    };
    let header_field = &record.fields[0];
    let header = fill_header(object.get("header"), defaults, now_ms)?;
    let time_ms = header.get("time").and_then(Value::as_i64);
    let id_hex = header.get("id").and_then(Value::as_str).map(encode::decode_hex);
    let mut payload = Vec::with_capacity(128);
    payload.push(MAGIC);
    payload.extend_from_slice(&schema.id.to_be_bytes());
    let header = Value::Object(header);
    encode::encode_value(&header_field.schema, &schema.names, &header, "header", &mut payload)?;
    // `header` is the first field, encoded above from its filled-in copy.
    let rest = &record.fields[1..];
    encode::encode_record(rest, &schema.names, object, "", Some("header"), &mut payload)?;
    if payload.len() > max_bytes {
        return Err(EventError::TooLarge { bytes: payload.len(), limit_bytes: max_bytes });
    }
    // The header encoded, so `time` is a long and `id` 16 bytes of hex.
    let time_ms = time_ms.unwrap_or(now_ms);
    let mut id = [0; EVENT_ID_BYTES];
    if let Some(Ok(bytes)) = id_hex {
        id.copy_from_slice(&bytes);
    }
    Ok(EncodedEvent { payload, time_ms, id })
}

/// The caller's header (an object, or absent/null) with `time`, `server`, `service` and `id`
/// filled in where missing.
fn fill_header(
    given: Option<&Value>,
    defaults: &HeaderDefaults,
    now_ms: i64,
) -> Result<Map<String, Value>, EventError> {
    let mut header = match given {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(fields)) => fields.clone(),
        Some(other) => {
            return Err(EventError::Invalid(EncodeError::WrongType {
                path: "header".into(),
                expected: "object (record)".into(),
                got: if other.is_array() { "array" } else { "scalar" }.into(),
            }));
        }
    };
    header.entry("time").or_insert_with(|| Value::from(now_ms));
    header.entry("server").or_insert_with(|| Value::from(defaults.server.as_str()));
    header.entry("service").or_insert_with(|| Value::from(defaults.service.as_str()));
    header.entry("id").or_insert_with(|| {
        Value::from(encode::encode_hex(&rand::random::<[u8; EVENT_ID_BYTES]>()))
    });
    Ok(header)
}
