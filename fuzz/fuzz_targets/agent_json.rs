//! Any bytes as the JSON body of an event posted to the agent: encoding it against each
//! shipped event schema never panics, and what encodes is a datum of that schema.
#![no_main]

use std::sync::OnceLock;

use apache_avro::Schema;
use frontend_agent::encode::{Names, encode_value};
use libfuzzer_sys::fuzz_target;

fn schemas() -> &'static Vec<(Schema, Names)> {
    static SCHEMAS: OnceLock<Vec<(Schema, Names)>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        ["page-view", "click", "search"]
            .iter()
            .map(|name| {
                let schema = Schema::parse_str(events::schemas::shipped(name).unwrap().text)
                    .expect("a shipped schema parses");
                let names = Names::of(&schema);
                (schema, names)
            })
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    for (schema, names) in schemas() {
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
});
