//! The event envelope: `0x00 | i32 id | Avro datum` round-trips, its header reads without the
//! schema, and every malformed payload is a typed error.

use apache_avro::Schema;
use apache_avro::types::Value;
use events::envelope::{self, EnvelopeError, EventHeader};
use proptest::prelude::*;

fn shipped(name: &str) -> Schema {
    let path = format!("{}/schemas/{name}.avsc", env!("CARGO_MANIFEST_DIR"));
    Schema::parse_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn header_value(h: &EventHeader) -> Value {
    Value::Record(vec![
        ("time".into(), Value::Long(h.time)),
        ("server".into(), Value::String(h.server.clone())),
        ("service".into(), Value::String(h.service.clone())),
        ("id".into(), Value::Fixed(16, h.id.to_vec())),
    ])
}

fn page_view(h: &EventHeader, member: Option<i64>, url: &str) -> Value {
    Value::Record(vec![
        ("header".into(), header_value(h)),
        (
            "member_id".into(),
            match member {
                Some(m) => Value::Union(1, Box::new(Value::Long(m))),
                None => Value::Union(0, Box::new(Value::Null)),
            },
        ),
        ("page_key".into(), Value::String("profile".into())),
        ("url".into(), Value::String(url.into())),
        ("referrer".into(), Value::Union(0, Box::new(Value::Null))),
        ("duration_ms".into(), Value::Int(12)),
    ])
}

fn sample_header() -> EventHeader {
    EventHeader {
        time: 1_700_000_000_000,
        server: "web-17".into(),
        service: "frontend".into(),
        id: *b"0123456789abcdef",
    }
}

proptest! {
    #[test]
    fn an_event_round_trips_and_its_header_reads_without_the_schema(
        schema_id in any::<i32>(),
        time in any::<i64>(),
        server in ".{0,40}",
        service in ".{0,40}",
        id in any::<[u8; 16]>(),
        member in any::<Option<i64>>(),
        url in ".{0,80}",
    ) {
        let schema = shipped("page-view");
        let header = EventHeader { time, server, service, id };
        let event = page_view(&header, member, &url);
        let bytes = envelope::encode(schema_id, &schema, event.clone()).unwrap();
        prop_assert_eq!(bytes[0], 0);
        prop_assert_eq!(&bytes[1..5], &schema_id.to_be_bytes());
        prop_assert_eq!(EventHeader::read(&bytes).unwrap(), (schema_id, header));
        prop_assert_eq!(envelope::decode(&bytes, &schema).unwrap(), (schema_id, event));
    }

    #[test]
    fn no_byte_string_makes_the_decoders_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let schema = shipped("page-view");
        let _ = envelope::decode(&bytes, &schema);
        let _ = EventHeader::read(&bytes);
    }
}

#[test]
fn wrong_magic_and_truncated_payloads_are_typed_errors() {
    let schema = shipped("page-view");
    let good = envelope::encode(7, &schema, page_view(&sample_header(), None, "/")).unwrap();

    let mut wrong = good.clone();
    wrong[0] = 1;
    assert!(matches!(envelope::decode(&wrong, &schema), Err(EnvelopeError::WrongMagic(1))));
    assert!(matches!(EventHeader::read(&wrong), Err(EnvelopeError::WrongMagic(1))));

    for len in 0..5 {
        assert!(
            matches!(
                envelope::split(&good[..len]),
                Err(EnvelopeError::Truncated { needed: 5, .. })
            ),
            "{len} bytes"
        );
    }
    for len in 5..good.len() {
        assert!(
            matches!(
                envelope::decode(&good[..len], &schema),
                Err(EnvelopeError::Undecodable { schema_id: 7, .. })
            ),
            "{len} bytes"
        );
    }
    let header_end = 5 + 6 + 7 + 9 + 16; // time varint, "web-17", "frontend", id
    for len in 5..header_end {
        assert!(
            matches!(EventHeader::read(&good[..len]), Err(EnvelopeError::BadHeader(_))),
            "{len} bytes"
        );
    }
    let mut trailing = good.clone();
    trailing.push(0);
    assert!(matches!(
        envelope::decode(&trailing, &schema),
        Err(EnvelopeError::TrailingBytes { schema_id: 7, trailing: 1 })
    ));
}

#[test]
fn a_value_that_does_not_fit_the_schema_is_not_encoded() {
    let schema = shipped("page-view");
    let wrong = Value::Record(vec![("header".into(), Value::Null)]);
    assert!(matches!(
        envelope::encode(3, &schema, wrong),
        Err(EnvelopeError::Unencodable { schema_id: 3, .. })
    ));
}

#[test]
fn every_shipped_event_starts_with_the_design_header_and_audit_matches_design() {
    use apache_avro::schema::RecordSchema;
    let fields = |s: &Schema| -> Vec<(String, String)> {
        let Schema::Record(RecordSchema { fields, .. }) = s else { panic!("not a record: {s:?}") };
        fields
            .iter()
            .map(|f| {
                (f.name.clone(), format!("{:?}", apache_avro::schema::SchemaKind::from(&f.schema)))
            })
            .collect()
    };
    for event in ["page-view", "click", "search"] {
        let schema = shipped(event);
        let Schema::Record(record) = &schema else { panic!("{event} is not a record") };
        assert_eq!(record.fields[0].name, "header", "{event}");
        let header = &record.fields[0].schema;
        assert_eq!(
            fields(header),
            [
                ("time".into(), "Long".into()),
                ("server".into(), "String".into()),
                ("service".into(), "String".into()),
                ("id".into(), "Fixed".into()),
            ],
            "{event}"
        );
        let Schema::Record(h) = header else { unreachable!() };
        assert!(matches!(&h.fields[3].schema, Schema::Fixed(f) if f.size == 16), "{event}");
    }
    assert_eq!(
        fields(&shipped("_audit")),
        [
            ("tier".into(), "String".into()),
            ("host".into(), "String".into()),
            ("topic".into(), "String".into()),
            ("window_start".into(), "Long".into()),
            ("window_ms".into(), "Long".into()),
            ("count".into(), "Long".into()),
        ]
    );
}
