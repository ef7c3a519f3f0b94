//! Bad requests get Confluent-style error bodies, never a bare 500 or a crash, and the server
//! keeps serving afterwards.

use reqwest::Method;
use schema_registry::Config;
use serde_json::json;
use testkit::registry::{API, TestRegistry, record, register};

async fn small_limit_server(dir: &std::path::Path) -> TestRegistry {
    TestRegistry::start_with(Config {
        data_dir: dir.to_path_buf(),
        max_request_bytes: 64 * 1024,
        ..Config::default()
    })
    .await
}

async fn raw_post(url: &str, body: impl Into<reqwest::Body>) -> testkit::http::Answer {
    API.send(
        testkit::http::client()
            .request(Method::POST, url)
            .header("content-type", "application/vnd.schemaregistry.v1+json")
            .body(body),
    )
    .await
}

#[tokio::test]
async fn malformed_json_is_a_400_error_body() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let url = format!("{}/subjects/s/versions", server.url());
    for body in ["{", "not json", "", "{\"schema\": }"] {
        raw_post(&url, body).await.expect_error(400, 400);
    }
    // Well-formed JSON of the wrong shape.
    for body in ["{}", "[]", "{\"schema\": 42}", "\"schema\""] {
        raw_post(&url, body).await.expect_error(422, 422);
    }
    API.send(testkit::http::client().put(format!("{}/config", server.url())).body("{{"))
        .await
        .expect_error(400, 400);
    server.stop().await;
}

#[tokio::test]
async fn a_schema_that_is_not_avro_is_42201() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let url = format!("{}/subjects/s/versions", server.url());
    for schema in [
        "",
        "{",
        r#"{"type": "not-a-type"}"#,
        r#"{"type": "record", "name": "R"}"#,
        r#"{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", "default": "x"}]}"#,
        r#"{"type": "enum", "name": "E", "symbols": ["A", "A"]}"#,
        r#"{"type": "fixed", "name": "F", "size": -1}"#,
        r#"["int", "int"]"#,
        r#""Undefined""#,
    ] {
        let answer = API.post(&url, json!({ "schema": schema })).await;
        answer.expect_error(422, 42201);
    }
    let message = API
        .post(&url, json!({ "schema": "\"int\"", "schemaType": "PROTOBUF" }))
        .await
        .expect_error(422, 42201);
    assert!(message.contains("PROTOBUF"), "{message}");
    API.post(
        &url,
        json!({ "schema": "\"int\"", "references": [{ "name": "x", "subject": "y", "version": 1 }] }),
    )
    .await
    .expect_error(422, 42201);
    // The compatibility and look-up endpoints validate the same way.
    API.post(
        &format!("{}/compatibility/subjects/s/versions", server.url()),
        json!({ "schema": "{" }),
    )
    .await
    .expect_error(422, 42201);
    API.post(&format!("{}/subjects/s", server.url()), json!({ "schema": "nope" }))
        .await
        .expect_error(422, 42201);
    assert_eq!(API.get(&format!("{}/subjects", server.url())).await.expect_ok(), &json!([]));
    server.stop().await;
}

#[tokio::test]
async fn an_unknown_compatibility_level_is_42203() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    for body in [
        json!({ "compatibility": "SIDEWAYS" }),
        json!({ "compatibility": "" }),
        json!({ "compatibility": null }),
        json!({}),
    ] {
        API.put(&format!("{}/config", server.url()), body.clone()).await.expect_error(422, 42203);
        API.put(&format!("{}/config/s", server.url()), body).await.expect_error(422, 42203);
    }
    API.put(&format!("{}/config", server.url()), json!({ "compatibility": 3 }))
        .await
        .expect_error(422, 422);
    server.stop().await;
}

#[tokio::test]
async fn a_body_over_the_size_limit_is_a_413_error_body() {
    let dir = tempfile::tempdir().unwrap();
    let server = small_limit_server(dir.path()).await;
    let url = format!("{}/subjects/s/versions", server.url());
    let doc = "x".repeat(100 * 1024);
    let huge = record("R", json!([{ "name": "a", "type": "int", "doc": doc }]));
    let answer = raw_post(&url, json!({ "schema": huge.to_string() }).to_string()).await;
    answer.expect_error(413, 413);
    // Without a Content-Length (a chunked body) the limit still holds.
    let (status, body) = chunked_post(server.url(), "/subjects/s/versions", 64, 4096).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&body).unwrap()["error_code"], 413);
    // Under the limit, the same kind of request works.
    let small = record("R", json!([{ "name": "a", "type": "int" }]));
    register(server.url(), "s", &small).await.expect_ok();
    server.stop().await;
}

/// POSTs `chunks` chunks of `chunk_bytes` spaces with `Transfer-Encoding: chunked` over a
/// raw socket; returns the status and the body (or what arrived before the server closed).
async fn chunked_post(base: &str, path: &str, chunks: usize, chunk_bytes: usize) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = format!("{chunk_bytes:x}\r\n{}\r\n", " ".repeat(chunk_bytes));
    for _ in 0..chunks {
        // The server may answer and close before the whole body is sent.
        if stream.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    // A close-delimited or chunked body: take the JSON object inside.
    let json = body
        .find('{')
        .and_then(|start| body.rfind('}').map(|end| body[start..=end].to_owned()))
        .unwrap_or_default();
    (status, json)
}

#[tokio::test]
async fn bad_subjects_versions_and_query_flags_are_errors_not_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url();
    let schema = record("R", json!([{ "name": "a", "type": "int" }]));
    let long_subject = "s".repeat(2000);
    register(base, &long_subject, &schema).await.expect_error(422, 42208);
    register(base, "tab%09subject", &schema).await.expect_error(422, 42208);
    API.put(&format!("{base}/config/{long_subject}"), json!({ "compatibility": "NONE" }))
        .await
        .expect_error(422, 42208);
    register(base, "s", &schema).await.expect_ok();
    // Query flags read as Confluent reads them: `true` in any case, anything else false.
    API.delete(&format!("{base}/subjects/s/versions/1")).await.expect_ok();
    API.get(&format!("{base}/subjects/s/versions?deleted=maybe")).await.expect_error(404, 40401);
    assert_eq!(
        API.get(&format!("{base}/subjects/s/versions?deleted=True")).await.expect_ok(),
        &json!([1])
    );
    register(base, "s", &schema).await.expect_ok();
    // Invalid UTF-8 in a percent-encoded subject.
    API.get(&format!("{base}/subjects/%FF%FE/versions")).await.expect_error(400, 400);
    API.get(&format!("{base}/subjects/s/versions/99999999999999999999"))
        .await
        .expect_error(422, 42202);
    // Still serving.
    assert_eq!(API.get(&format!("{base}/subjects")).await.expect_ok(), &json!(["s"]));
    server.stop().await;
}

#[tokio::test]
async fn deeply_nested_schemas_are_answered_not_a_stack_overflow() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    for depth in [10, 60, 126, 127, 200, 5000] {
        let url = format!("{}/subjects/deep{depth}/versions", server.url());
        let mut schema = "\"int\"".to_owned();
        for _ in 0..depth {
            schema = format!("{{\"type\":\"array\",\"items\":{schema}}}");
        }
        let answer = API.post(&url, json!({ "schema": schema })).await;
        assert!(
            answer.status == 200 || answer.body["error_code"] == 42201,
            "depth {depth}: {answer:?}"
        );
        // Checking it against itself runs the compatibility check at that depth.
        let check = API
            .post(
                &format!("{}/compatibility/subjects/deep{depth}/versions", server.url()),
                json!({ "schema": schema }),
            )
            .await;
        let expected =
            if answer.status == 200 { json!({ "is_compatible": true }) } else { json!(42201) };
        let got =
            if check.status == 200 { check.body.clone() } else { check.body["error_code"].clone() };
        assert_eq!(got, expected, "depth {depth}");
    }
    let mut record = "\"int\"".to_owned();
    for level in 0..60 {
        record = format!(
            "{{\"type\":\"record\",\"name\":\"R{level}\",\"fields\":[{{\"name\":\"f\",\"type\":{record}}}]}}"
        );
    }
    let answer = API
        .post(
            &format!("{}/subjects/deep-record/versions", server.url()),
            json!({ "schema": record }),
        )
        .await;
    assert!(answer.status == 200 || answer.body["error_code"] == 42201, "{answer:?}");
    assert_eq!(API.get(&format!("{}/", server.url())).await.expect_ok(), &json!({}));
    server.stop().await;
}
