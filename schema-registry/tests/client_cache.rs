//! The registry client: registration, id → schema and (subject, schema) → id caches, and
//! typed errors.

use schema_registry::client::{ClientError, RegistryClient};
use serde_json::json;
use testkit::registry::{TestRegistry, record};

#[tokio::test]
async fn caches_schemas_by_id_and_ids_by_subject_and_schema() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let client = RegistryClient::new(server.url()).unwrap();
    let v1 = record("R", json!([{ "name": "a", "type": "int" }])).to_string();
    let id = client.register("r-value", &v1).await.unwrap();
    // Another client registers a schema this one has not seen.
    let other = RegistryClient::new(server.url()).unwrap();
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
async fn registry_errors_arrive_with_their_confluent_codes() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let client = RegistryClient::new(server.url()).unwrap();
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
