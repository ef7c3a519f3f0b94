//! The registry client: registration, id → schema and (subject, schema) → id caches, the
//! envelope through the registry, and typed errors.

mod common;

use std::path::PathBuf;

use apache_avro::types::Value;
use common::{Server, record};
use schema_registry::client::{ClientError, RegistryClient};
use schema_registry::envelope::EnvelopeError;
use serde_json::json;

fn schemas_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/schemas"))
}

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
async fn caches_schemas_by_id_and_ids_by_subject_and_schema() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path()).await;
    let client = RegistryClient::new(&server.url).unwrap();
    let v1 = record("R", json!([{ "name": "a", "type": "int" }])).to_string();
    let id = client.register("r-value", &v1).await.unwrap();
    // Another client registers a schema this one has not seen.
    let other = RegistryClient::new(&server.url).unwrap();
    let v2 = record("Q", json!([{ "name": "b", "type": "int" }])).to_string();
    let unseen = other.register("q-value", &v2).await.unwrap();
    server.stop().await;

    // The registry is gone: only cached answers can come back.
    let respelled =
        r#"{"name": "test.R", "type": "record", "fields": [{"type": "int", "name": "a"}]}"#;
    assert_eq!(client.register("r-value", respelled).await.unwrap(), id);
    assert!(client.schema(id).await.is_ok());
    assert!(matches!(client.schema(unseen).await, Err(ClientError::Http { .. })));
    assert!(matches!(client.register("other-subject", &v1).await, Err(ClientError::Http { .. })));
}

#[tokio::test]
async fn encodes_and_decodes_events_through_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path()).await;
    let client = RegistryClient::new(&format!("{}/", server.url)).unwrap();
    let registered = client.register_dir(schemas_dir()).await.unwrap();
    let subjects: Vec<&str> = registered.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(subjects, ["_audit-value", "click-value", "page-view-value", "search-value"]);
    let audit_id = registered[0].1;

    let bytes = client.encode(audit_id, audit_record()).await.unwrap();
    assert_eq!(&bytes[..5], &[&[0u8][..], &audit_id.to_be_bytes()].concat()[..]);
    // A second client, with empty caches, fetches the schema by id to decode.
    let reader = RegistryClient::new(&server.url).unwrap();
    assert_eq!(reader.decode(&bytes).await.unwrap(), (audit_id, audit_record()));

    let mut unknown = bytes.clone();
    unknown[1..5].copy_from_slice(&999i32.to_be_bytes());
    assert!(matches!(reader.decode(&unknown).await, Err(ClientError::UnknownSchemaId(999))));
    assert!(matches!(
        reader.encode(999, audit_record()).await,
        Err(ClientError::UnknownSchemaId(999))
    ));
    let mut wrong_magic = bytes.clone();
    wrong_magic[0] = 0xff;
    assert!(matches!(
        reader.decode(&wrong_magic).await,
        Err(ClientError::Envelope(EnvelopeError::WrongMagic(0xff)))
    ));
    assert!(matches!(
        reader.decode(&bytes[..3]).await,
        Err(ClientError::Envelope(EnvelopeError::Truncated { .. }))
    ));
    server.stop().await;
}

#[tokio::test]
async fn registry_errors_arrive_with_their_confluent_codes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path()).await;
    let client = RegistryClient::new(&server.url).unwrap();
    let v1 = record("R", json!([{ "name": "a", "type": "int" }])).to_string();
    let v2 = record(
        "R",
        json!([{ "name": "a", "type": "int" }, { "name": "b", "type": "int", "default": 1 }]),
    )
    .to_string();
    let breaking = record("R", json!([{ "name": "a", "type": "string" }])).to_string();
    let id1 = client.register("r-value", &v1).await.unwrap();
    let id2 = client.register("r-value", &v2).await.unwrap();
    let latest = client.latest("r-value").await.unwrap();
    assert_eq!((latest.version, latest.id), (2, id2));
    assert_ne!(id1, id2);

    match client.register("r-value", &breaking).await {
        Err(ClientError::Registry { status: 409, error_code: 409, message, .. }) => {
            assert!(message.contains("TYPE_MISMATCH"), "{message}")
        }
        other => panic!("expected a 409, got {other:?}"),
    }
    assert!(matches!(
        client.latest("nobody").await,
        Err(ClientError::Registry { status: 404, error_code: 40401, .. })
    ));
    assert!(matches!(
        client.register("r-value", "{not avro").await,
        Err(ClientError::InvalidSchema(_))
    ));
    server.stop().await;

    for bad in ["", "not a url", "ftp://host/", "mailto:someone@example.com"] {
        assert!(matches!(RegistryClient::new(bad), Err(ClientError::InvalidUrl(_))), "{bad}");
    }
}
