//! The envelope through a real registry over HTTP: encoded with the schema an id names,
//! decoded by a client that fetches it, and typed errors for unknown ids and bad bytes.

use apache_avro::types::Value;
use events::envelope::{CodecError, EnvelopeError, decode_with, encode_with};
use schema_registry::{ClientError, RegistryClient};
use testkit::registry::TestRegistry;

fn audit_record() -> Value {
    Value::Record(vec![
        ("tier".into(), Value::String("agent".into())),
        ("host".into(), Value::String("web-17".into())),
        ("topic".into(), Value::String("page-view".into())),
        ("window_start".into(), Value::Long(1_700_000_400_000)),
        ("window_ms".into(), Value::Long(600_000)),
        ("count".into(), Value::Long(42)),
    ])
}

#[tokio::test]
async fn encodes_and_decodes_events_through_the_registry() {
    let registry = TestRegistry::start().await;
    let client = RegistryClient::new(&format!("{}/", registry.url())).unwrap();
    let registered = events::schemas::register(&client).await.unwrap();
    let subjects: Vec<&str> = registered.iter().map(|(s, _)| *s).collect();
    assert_eq!(subjects, ["page-view-value", "click-value", "search-value", "_audit-value"]);
    let audit_id = registered[3].1;

    let bytes = encode_with(&client, audit_id, audit_record()).await.unwrap();
    assert_eq!(&bytes[..5], &[&[0u8][..], &audit_id.to_be_bytes()].concat()[..]);
    // A second client, with empty caches, fetches the schema by id to decode.
    let reader = RegistryClient::new(registry.url()).unwrap();
    assert_eq!(decode_with(&reader, &bytes).await.unwrap(), (audit_id, audit_record()));

    let mut unknown = bytes.clone();
    unknown[1..5].copy_from_slice(&999i32.to_be_bytes());
    assert!(matches!(
        decode_with(&reader, &unknown).await,
        Err(CodecError::Registry(ClientError::UnknownSchemaId(999)))
    ));
    assert!(matches!(
        encode_with(&reader, 999, audit_record()).await,
        Err(CodecError::Registry(ClientError::UnknownSchemaId(999)))
    ));
    let mut wrong_magic = bytes.clone();
    wrong_magic[0] = 0xff;
    assert!(matches!(
        decode_with(&reader, &wrong_magic).await,
        Err(CodecError::Envelope(EnvelopeError::WrongMagic(0xff)))
    ));
    assert!(matches!(
        decode_with(&reader, &bytes[..3]).await,
        Err(CodecError::Envelope(EnvelopeError::Truncated { .. }))
    ));
}
