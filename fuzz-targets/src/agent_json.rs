//! Any bytes as the JSON body of an event posted to the agent: encoding it against each
//! shipped event schema never panics, what encodes is a datum of that schema, and the HTTP
//! input's one-pass path over the text writes exactly what the path through a parsed `Value`
//! writes, whenever it takes the text at all.

use std::sync::OnceLock;

use apache_avro::Schema;
use frontend_agent::encode::{Names, encode_value};
use frontend_agent::event::{HeaderDefaults, TopicSchema, encode_event, encode_event_text};

const TOPICS: [&str; 3] = ["page-view", "click", "search"];

fn schemas() -> &'static Vec<(Schema, Names, TopicSchema)> {
    static SCHEMAS: OnceLock<Vec<(Schema, Names, TopicSchema)>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        TOPICS
            .iter()
            .map(|name| {
                let text = events::schemas::shipped(name).unwrap().text;
                let schema = Schema::parse_str(text).expect("a shipped schema parses");
                let names = Names::of(&schema);
                let topic = TopicSchema::new(name, 1, schema.clone()).expect("an event schema");
                (schema, names, topic)
            })
            .collect()
    })
}

/// One input.
pub fn check(data: &[u8]) {
    let defaults = HeaderDefaults { server: "fuzz".into(), service: "fuzz".into() };
    for (_, _, topic) in schemas() {
        if let Some(fast) = encode_event_text(topic, data, &defaults, 1_000, 1 << 20) {
            let value: serde_json::Value =
                serde_json::from_slice(data).expect("the fast path takes only valid JSON");
            let slow = encode_event(topic, &value, &defaults, 1_000, 1 << 20)
                .expect("the fast path takes only what the Value path takes");
            // The two differ only in a random event id where the header has none.
            let at = slow.payload.windows(16).position(|w| w == slow.id).expect("the id");
            let mut same = fast.payload.clone();
            same[at..at + 16].copy_from_slice(&slow.id);
            assert_eq!(same, slow.payload, "the fast path writes the same datum");
            assert_eq!(fast.time_ms, slow.time_ms);
        }
    }
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    for (schema, names, _) in schemas() {
        let mut out = Vec::new();
        if encode_value(schema, names, &value, &mut out).is_ok() {
            let reader = apache_avro::reader::datum::GenericDatumReader::builder(schema)
                .build()
                .expect("a reader of a shipped schema");
            let mut datum = &out[..];
            let read = reader.read_value(&mut datum);
            assert!(read.is_ok(), "what the agent encodes decodes: {read:?}");
            assert!(datum.is_empty(), "and is exactly one datum");
        }
    }
}
