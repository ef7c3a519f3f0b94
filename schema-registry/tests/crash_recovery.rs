//! What was acknowledged survives: `kill -9` of the real binary mid-registration, and torn or
//! corrupt log tails left by a crash.

use std::sync::Arc;
use std::time::Duration;

use schema_registry::store::{LOG_FILE_NAME, Record, encode_frame};
use schema_registry::{CompatibilityLevel, Registry, RegistryError};
use serde_json::{Value, json};
use testkit::registry::{API, RegistryProcess, TestRegistry, record, register};

const BINARY: &str = env!("CARGO_BIN_EXE_schema-registry");

#[derive(Clone)]
struct Acked {
    subject: String,
    schema: Value,
    id: i64,
}

/// Registers schema after schema until a request fails (the process was killed).
async fn register_until_killed(
    base: String,
    first: usize,
    acked: Arc<std::sync::Mutex<Vec<Acked>>>,
) {
    let http = testkit::http_client();
    for i in first.. {
        let subject = format!("s{}", i % 4);
        let schema = record(&format!("R{i}"), json!([{ "name": format!("f{i}"), "type": "int" }]));
        let sent = http
            .post(format!("{base}/subjects/{subject}/versions"))
            .json(&json!({ "schema": schema.to_string() }))
            .send()
            .await;
        let Ok(response) = sent else { return };
        let Ok(body) = response.json::<Value>().await else { return };
        let id = body["id"].as_i64().expect("a registration answered without an id");
        acked.lock().unwrap().push(Acked { subject, schema, id });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_no_acknowledged_schema() {
    let mut registry = RegistryProcess::start(BINARY);
    API.put(&format!("{}/config", registry.url()), json!({ "compatibility": "NONE" }))
        .await
        .expect_ok();
    let acked = Arc::new(std::sync::Mutex::new(Vec::new()));
    for round in 0..3u64 {
        let first = acked.lock().unwrap().len();
        let task = tokio::spawn(register_until_killed(registry.url(), first, Arc::clone(&acked)));
        tokio::time::sleep(Duration::from_millis(300 + 150 * round)).await;
        registry.kill();
        task.await.unwrap();
        let before = acked.lock().unwrap().len();
        assert!(before > first, "round {round} registered nothing: {}", registry.log());
        eprintln!("round {round}: {} registrations acknowledged so far", before);

        registry.restart();
        let base = registry.url();
        let so_far = acked.lock().unwrap().clone();
        for a in &so_far {
            let found = API
                .post(
                    &format!("{base}/subjects/{}", a.subject),
                    json!({ "schema": a.schema.to_string() }),
                )
                .await;
            assert_eq!(found.expect_ok()["id"], a.id, "{} lost after kill -9", a.schema);
            let by_id = API.get(&format!("{base}/schemas/ids/{}", a.id)).await;
            let stored: Value =
                serde_json::from_str(by_id.expect_ok()["schema"].as_str().unwrap()).unwrap();
            assert_eq!(stored["name"], a.schema["name"]);
        }
        assert_eq!(
            API.get(&format!("{base}/config")).await.expect_ok()["compatibilityLevel"],
            "NONE"
        );
    }
    // Ids keep growing past every acknowledged one.
    let max = acked.lock().unwrap().iter().map(|a| a.id).max().unwrap();
    let fresh = record("Fresh", json!([{ "name": "x", "type": "int" }]));
    let id = register(&registry.url(), "fresh", &fresh).await.expect_ok()["id"].as_i64().unwrap();
    assert!(id > max, "id {id} reused (max acknowledged {max})");
}

async fn register_three(dir: &std::path::Path) {
    let server = TestRegistry::start_in(dir).await;
    for i in 1..=3 {
        let schema = record(&format!("R{i}"), json!([{ "name": "a", "type": "int" }]));
        assert_eq!(register(server.url(), &format!("s{i}"), &schema).await.expect_ok()["id"], i);
    }
    server.stop().await;
}

#[tokio::test]
async fn a_torn_tail_is_dropped_on_start_and_later_writes_survive() {
    let dir = tempfile::tempdir().unwrap();
    register_three(dir.path()).await;
    let log = dir.path().join(LOG_FILE_NAME);
    let intact = std::fs::read(&log).unwrap();
    // Half a frame: what a crash mid-append leaves.
    let frame = encode_frame(br#"{"op":"set_global_level","level":"NONE"}"#);
    let mut torn = intact.clone();
    torn.extend_from_slice(&frame[..frame.len() / 2]);
    std::fs::write(&log, &torn).unwrap();

    let server = TestRegistry::start_in(dir.path()).await;
    assert_eq!(
        API.get(&format!("{}/subjects", server.url())).await.expect_ok(),
        &json!(["s1", "s2", "s3"])
    );
    assert_eq!(
        API.get(&format!("{}/config", server.url())).await.expect_ok()["compatibilityLevel"],
        "BACKWARD",
        "the torn record must not apply"
    );
    let fourth = record("R4", json!([{ "name": "a", "type": "int" }]));
    assert_eq!(register(server.url(), "s4", &fourth).await.expect_ok()["id"], 4);
    server.stop().await;
    assert_eq!(&std::fs::read(&log).unwrap()[..intact.len()], &intact[..]);

    // The fourth registration was appended after the cut, not behind the torn bytes.
    let server = TestRegistry::start_in(dir.path()).await;
    assert_eq!(
        API.get(&format!("{}/subjects", server.url())).await.expect_ok(),
        &json!(["s1", "s2", "s3", "s4"])
    );
    server.stop().await;
}

#[tokio::test]
async fn a_corrupt_last_record_is_dropped_and_earlier_ones_kept() {
    let dir = tempfile::tempdir().unwrap();
    register_three(dir.path()).await;
    let log = dir.path().join(LOG_FILE_NAME);
    let mut bytes = std::fs::read(&log).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 0x20;
    std::fs::write(&log, &bytes).unwrap();

    let server = TestRegistry::start_in(dir.path()).await;
    assert_eq!(
        API.get(&format!("{}/subjects", server.url())).await.expect_ok(),
        &json!(["s1", "s2"])
    );
    API.get(&format!("{}/schemas/ids/2", server.url())).await.expect_ok();
    server.stop().await;
}

#[tokio::test]
async fn a_record_that_passes_its_checksum_but_does_not_decode_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    register_three(dir.path()).await;
    let log = dir.path().join(LOG_FILE_NAME);
    let mut bytes = std::fs::read(&log).unwrap();
    // Not a torn write but a record this version cannot read: refusing to start is safer
    // than dropping it and everything after it.
    bytes.extend_from_slice(&encode_frame(br#"{"op":"from_the_future"}"#));
    bytes.extend_from_slice(&encode_frame(
        &serde_json::to_vec(&Record::SetGlobalLevel { level: CompatibilityLevel::None }).unwrap(),
    ));
    std::fs::write(&log, &bytes).unwrap();
    let opened = Registry::open(dir.path(), CompatibilityLevel::Backward).await;
    assert!(matches!(opened, Err(RegistryError::Store(_))), "{opened:?}");
    assert_eq!(std::fs::read(&log).unwrap(), bytes, "the log must be left as it was");
}

#[tokio::test]
async fn a_second_registry_on_the_same_data_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let first = Registry::open(dir.path(), CompatibilityLevel::Backward).await.unwrap();
    let second = Registry::open(dir.path(), CompatibilityLevel::Backward).await;
    assert!(
        matches!(second, Err(RegistryError::Store(schema_registry::store::StoreError::Locked(_)))),
        "{second:?}"
    );
    drop(first);
    Registry::open(dir.path(), CompatibilityLevel::Backward).await.unwrap();
}
