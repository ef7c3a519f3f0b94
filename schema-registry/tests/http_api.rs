//! Every endpoint of the Confluent REST API, over real HTTP against a server on port 0.

use serde_json::{Value, json};
use testkit::registry::{API, TestRegistry, record, register};

fn user_v1() -> Value {
    record("User", json!([{ "name": "name", "type": "string" }]))
}

fn user_v2() -> Value {
    record(
        "User",
        json!([
            { "name": "name", "type": "string" },
            { "name": "age", "type": "int", "default": 0 }
        ]),
    )
}

#[tokio::test]
async fn registers_and_fetches_a_schema_by_every_path() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url();

    assert_eq!(API.get(&format!("{base}/")).await.expect_ok(), &json!({}));
    assert_eq!(API.get(&format!("{base}/subjects")).await.expect_ok(), &json!([]));
    let id = register(base, "users-value", &user_v1()).await.expect_ok()["id"].clone();
    assert_eq!(id, 1);

    assert_eq!(API.get(&format!("{base}/subjects")).await.expect_ok(), &json!(["users-value"]));
    assert_eq!(
        API.get(&format!("{base}/subjects/users-value/versions")).await.expect_ok(),
        &json!([1])
    );
    for version in ["1", "latest", "-1"] {
        let found = API.get(&format!("{base}/subjects/users-value/versions/{version}")).await;
        let body = found.expect_ok();
        assert_eq!(body["subject"], "users-value");
        assert_eq!(body["version"], 1);
        assert_eq!(body["id"], 1);
        let schema: Value = serde_json::from_str(body["schema"].as_str().unwrap()).unwrap();
        assert_eq!(schema["name"], "User");
        assert_eq!(schema["namespace"], "test");
    }
    let raw = API.get(&format!("{base}/subjects/users-value/versions/1/schema")).await;
    assert_eq!(raw.expect_ok()["fields"][0]["name"], "name");

    let by_id = API.get(&format!("{base}/schemas/ids/1")).await;
    let text = by_id.expect_ok()["schema"].as_str().unwrap().to_owned();
    assert!(by_id.body.get("schemaType").is_none(), "AVRO is implied, as in Confluent");
    let raw = API.get(&format!("{base}/schemas/ids/1/schema")).await;
    assert_eq!(raw.expect_ok(), &serde_json::from_str::<Value>(&text).unwrap());
    assert_eq!(
        API.get(&format!("{base}/schemas/ids/1/versions")).await.expect_ok(),
        &json!([{ "subject": "users-value", "version": 1 }])
    );
    assert_eq!(
        API.get(&format!("{base}/schemas/ids/1/subjects")).await.expect_ok(),
        &json!(["users-value"])
    );
    assert_eq!(API.get(&format!("{base}/schemas/types")).await.expect_ok(), &json!(["AVRO"]));
    assert_eq!(
        API.get(&format!("{base}/subjects/users-value/versions/1/referencedby")).await.expect_ok(),
        &json!([])
    );
    server.stop().await;
}

#[tokio::test]
async fn reregistering_returns_existing_id() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url();
    assert_eq!(register(base, "users-value", &user_v1()).await.expect_ok()["id"], 1);
    assert_eq!(register(base, "users-value", &user_v2()).await.expect_ok()["id"], 2);
    // The same schema, written differently, is the same schema.
    let respelled = json!({
        "schema": r#"{ "fields": [ {"type": "string", "name": "name"} ], "name": "test.User", "type": "record" }"#
    });
    let again = API.post(&format!("{base}/subjects/users-value/versions"), respelled).await;
    assert_eq!(again.expect_ok()["id"], 1);
    assert_eq!(
        API.get(&format!("{base}/subjects/users-value/versions")).await.expect_ok(),
        &json!([1, 2]),
        "re-registering adds no version"
    );
    server.stop().await;
}

#[tokio::test]
async fn the_same_schema_under_two_subjects_shares_one_id() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url();
    assert_eq!(register(base, "a-value", &user_v1()).await.expect_ok()["id"], 1);
    assert_eq!(register(base, "b-value", &user_v2()).await.expect_ok()["id"], 2);
    assert_eq!(register(base, "b-value", &user_v1()).await.expect_ok()["id"], 1);
    let b = API.get(&format!("{base}/subjects/b-value/versions/latest")).await;
    assert_eq!(b.expect_ok()["version"], 2);
    assert_eq!(b.body["id"], 1);
    assert_eq!(
        API.get(&format!("{base}/schemas/ids/1/subjects")).await.expect_ok(),
        &json!(["a-value", "b-value"])
    );
    assert_eq!(
        API.get(&format!("{base}/schemas/ids/1/versions")).await.expect_ok(),
        &json!([{ "subject": "a-value", "version": 1 }, { "subject": "b-value", "version": 2 }])
    );
    server.stop().await;
}

#[tokio::test]
async fn lookup_finds_the_version_holding_a_schema() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url();
    register(base, "users-value", &user_v1()).await.expect_ok();
    register(base, "users-value", &user_v2()).await.expect_ok();

    let found = API
        .post(
            &format!("{base}/subjects/users-value"),
            json!({ "schema": user_v2().to_string(), "schemaType": "AVRO" }),
        )
        .await;
    assert_eq!(found.expect_ok()["version"], 2);
    assert_eq!(found.body["id"], 2);
    assert_eq!(found.body["subject"], "users-value");

    let other = record("Other", json!([{ "name": "x", "type": "long" }]));
    API.post(&format!("{base}/subjects/users-value"), json!({ "schema": other.to_string() }))
        .await
        .expect_error(404, 40403);
    API.post(&format!("{base}/subjects/nobody"), json!({ "schema": other.to_string() }))
        .await
        .expect_error(404, 40401);
    server.stop().await;
}

#[tokio::test]
async fn missing_things_get_confluent_not_found_codes() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url();
    register(base, "users-value", &user_v1()).await.expect_ok();

    let message =
        API.get(&format!("{base}/subjects/nobody/versions")).await.expect_error(404, 40401);
    assert!(message.contains("nobody"), "{message}");
    API.get(&format!("{base}/subjects/nobody/versions/latest")).await.expect_error(404, 40401);
    API.get(&format!("{base}/subjects/users-value/versions/7")).await.expect_error(404, 40402);
    API.get(&format!("{base}/subjects/users-value/versions/7/schema"))
        .await
        .expect_error(404, 40402);
    API.get(&format!("{base}/schemas/ids/99")).await.expect_error(404, 40403);
    API.get(&format!("{base}/schemas/ids/99/versions")).await.expect_error(404, 40403);
    API.get(&format!("{base}/schemas/ids/99/subjects")).await.expect_error(404, 40403);
    API.get(&format!("{base}/schemas/ids/not-a-number")).await.expect_error(404, 40403);
    for bad in ["0", "-2", "one", "2147483648", "1.5"] {
        API.get(&format!("{base}/subjects/users-value/versions/{bad}"))
            .await
            .expect_error(422, 42202);
    }
    API.get(&format!("{base}/no/such/path")).await.expect_error(404, 404);
    API.put(&format!("{base}/subjects"), json!({})).await.expect_error(405, 405);
    server.stop().await;
}

#[tokio::test]
async fn soft_deleted_versions_hide_until_asked_for_and_go_for_good_when_permanent() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url();
    let subject = format!("{base}/subjects/users-value");
    register(base, "users-value", &user_v1()).await.expect_ok();
    register(base, "users-value", &user_v2()).await.expect_ok();

    assert_eq!(API.delete(&format!("{subject}/versions/1")).await.expect_ok(), &json!(1));
    assert_eq!(API.get(&format!("{subject}/versions")).await.expect_ok(), &json!([2]));
    assert_eq!(
        API.get(&format!("{subject}/versions?deleted=true")).await.expect_ok(),
        &json!([1, 2])
    );
    API.get(&format!("{subject}/versions/1")).await.expect_error(404, 40402);
    let hidden = API.get(&format!("{subject}/versions/1?deleted=true")).await;
    assert_eq!(hidden.expect_ok()["id"], 1);
    // Consumers must still decode data written with a soft-deleted schema.
    API.get(&format!("{base}/schemas/ids/1")).await.expect_ok();
    assert_eq!(API.get(&format!("{base}/schemas/ids/1/versions")).await.expect_ok(), &json!([]));
    assert_eq!(
        API.get(&format!("{base}/schemas/ids/1/versions?deleted=true")).await.expect_ok(),
        &json!([{ "subject": "users-value", "version": 1 }])
    );

    API.delete(&format!("{subject}/versions/1")).await.expect_error(404, 40406);
    API.delete(&format!("{subject}/versions/2?permanent=true")).await.expect_error(404, 40407);
    assert_eq!(
        API.delete(&format!("{subject}/versions/1?permanent=true")).await.expect_ok(),
        &json!(1)
    );
    assert_eq!(API.get(&format!("{subject}/versions?deleted=true")).await.expect_ok(), &json!([2]));
    API.get(&format!("{base}/schemas/ids/1")).await.expect_error(404, 40403);
    assert_eq!(API.delete(&format!("{subject}/versions/latest")).await.expect_ok(), &json!(2));
    API.get(&format!("{subject}/versions/latest")).await.expect_error(404, 40401);
    server.stop().await;
}

#[tokio::test]
async fn subject_delete_is_soft_first_then_permanent() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url();
    register(base, "users-value", &user_v1()).await.expect_ok();
    register(base, "users-value", &user_v2()).await.expect_ok();
    register(base, "copy-value", &user_v1()).await.expect_ok();

    API.delete(&format!("{base}/subjects/users-value?permanent=true"))
        .await
        .expect_error(404, 40405);
    assert_eq!(
        API.delete(&format!("{base}/subjects/users-value")).await.expect_ok(),
        &json!([1, 2])
    );
    assert_eq!(API.get(&format!("{base}/subjects")).await.expect_ok(), &json!(["copy-value"]));
    assert_eq!(
        API.get(&format!("{base}/subjects?deleted=true")).await.expect_ok(),
        &json!(["copy-value", "users-value"])
    );
    API.delete(&format!("{base}/subjects/users-value")).await.expect_error(404, 40404);
    assert_eq!(
        API.delete(&format!("{base}/subjects/users-value?permanent=true")).await.expect_ok(),
        &json!([1, 2])
    );
    assert_eq!(
        API.get(&format!("{base}/subjects?deleted=true")).await.expect_ok(),
        &json!(["copy-value"])
    );
    API.delete(&format!("{base}/subjects/users-value")).await.expect_error(404, 40401);
    // Schema 1 lives on in copy-value; schema 2 is gone.
    API.get(&format!("{base}/schemas/ids/1")).await.expect_ok();
    API.get(&format!("{base}/schemas/ids/2")).await.expect_error(404, 40403);
    server.stop().await;
}

#[tokio::test]
async fn ids_are_never_reused_after_a_permanent_delete_or_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url().to_owned();
    assert_eq!(register(&base, "s", &user_v1()).await.expect_ok()["id"], 1);
    assert_eq!(register(&base, "s", &user_v2()).await.expect_ok()["id"], 2);
    API.delete(&format!("{base}/subjects/s")).await.expect_ok();
    API.delete(&format!("{base}/subjects/s?permanent=true")).await.expect_ok();
    API.get(&format!("{base}/schemas/ids/2")).await.expect_error(404, 40403);

    let other = record("Other", json!([{ "name": "x", "type": "long" }]));
    assert_eq!(register(&base, "t", &other).await.expect_ok()["id"], 3);
    server.stop().await;

    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url().to_owned();
    assert_eq!(API.get(&format!("{base}/subjects")).await.expect_ok(), &json!(["t"]));
    assert_eq!(register(&base, "s", &user_v1()).await.expect_ok()["id"], 4);
    assert_eq!(register(&base, "t", &other).await.expect_ok()["id"], 3);
    server.stop().await;
}

#[tokio::test]
async fn an_incompatible_schema_is_refused_with_409() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url();
    register(base, "users-value", &user_v1()).await.expect_ok();
    let breaking = record(
        "User",
        json!([{ "name": "name", "type": "string" }, { "name": "email", "type": "string" }]),
    );
    let message = register(base, "users-value", &breaking).await.expect_error(409, 409);
    assert!(message.contains("READER_FIELD_MISSING_DEFAULT_VALUE"), "{message}");
    assert!(message.contains("email"), "{message}");
    assert_eq!(
        API.get(&format!("{base}/subjects/users-value/versions")).await.expect_ok(),
        &json!([1])
    );
    server.stop().await;
}

#[tokio::test]
async fn compatibility_endpoint_checks_without_registering() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url();
    register(base, "users-value", &user_v1()).await.expect_ok();
    let compat = format!("{base}/compatibility/subjects/users-value/versions");
    let good = json!({ "schema": user_v2().to_string() });
    let bad =
        json!({ "schema": record("User", json!([{ "name": "name", "type": "int" }])).to_string() });

    for url in [format!("{compat}/latest"), format!("{compat}/1"), compat.clone()] {
        assert_eq!(
            API.post(&url, good.clone()).await.expect_ok(),
            &json!({ "is_compatible": true })
        );
        assert_eq!(
            API.post(&url, bad.clone()).await.expect_ok(),
            &json!({ "is_compatible": false })
        );
    }
    let verbose = API.post(&format!("{compat}/latest?verbose=true"), bad.clone()).await;
    assert_eq!(verbose.expect_ok()["is_compatible"], false);
    let messages = verbose.body["messages"].as_array().unwrap();
    assert!(messages.iter().any(|m| m.as_str().unwrap().contains("TYPE_MISMATCH")), "{messages:?}");
    let verbose_ok = API.post(&format!("{compat}/latest?verbose=true"), good.clone()).await;
    assert_eq!(verbose_ok.expect_ok(), &json!({ "is_compatible": true, "messages": [] }));

    API.post(&format!("{compat}/2"), good.clone()).await.expect_error(404, 40402);
    API.post(&format!("{base}/compatibility/subjects/nobody/versions/latest"), good.clone())
        .await
        .expect_error(404, 40401);
    API.post(&format!("{compat}/zero"), good.clone()).await.expect_error(422, 42202);
    // Against all versions of a subject that has none, anything goes.
    assert_eq!(
        API.post(&format!("{base}/compatibility/subjects/nobody/versions"), bad).await.expect_ok(),
        &json!({ "is_compatible": true })
    );
    assert_eq!(
        API.get(&format!("{base}/subjects/users-value/versions")).await.expect_ok(),
        &json!([1])
    );
    server.stop().await;
}

#[tokio::test]
async fn config_sets_global_and_subject_levels() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url();

    assert_eq!(
        API.get(&format!("{base}/config")).await.expect_ok(),
        &json!({ "compatibilityLevel": "BACKWARD" })
    );
    assert_eq!(
        API.put(&format!("{base}/config"), json!({ "compatibility": "full" })).await.expect_ok(),
        &json!({ "compatibility": "FULL" })
    );
    assert_eq!(
        API.get(&format!("{base}/config")).await.expect_ok(),
        &json!({ "compatibilityLevel": "FULL" })
    );

    API.get(&format!("{base}/config/users-value")).await.expect_error(404, 40408);
    assert_eq!(
        API.get(&format!("{base}/config/users-value?defaultToGlobal=true")).await.expect_ok(),
        &json!({ "compatibilityLevel": "FULL" })
    );
    assert_eq!(
        API.put(&format!("{base}/config/users-value"), json!({ "compatibility": "NONE" }))
            .await
            .expect_ok(),
        &json!({ "compatibility": "NONE" })
    );
    assert_eq!(
        API.get(&format!("{base}/config/users-value")).await.expect_ok(),
        &json!({ "compatibilityLevel": "NONE" })
    );
    // The subject's own level governs it: NONE lets any change through.
    register(base, "users-value", &user_v1()).await.expect_ok();
    let unrelated = json!("string");
    register(base, "users-value", &unrelated).await.expect_ok();

    assert_eq!(
        API.delete(&format!("{base}/config/users-value")).await.expect_ok(),
        &json!({ "compatibilityLevel": "NONE" })
    );
    API.get(&format!("{base}/config/users-value")).await.expect_error(404, 40408);
    API.delete(&format!("{base}/config/users-value")).await.expect_error(404, 40408);
    // Back under FULL: a string cannot become a User.
    register(base, "users-value", &user_v2()).await.expect_error(409, 409);

    API.put(&format!("{base}/config"), json!({ "compatibility": "SIDEWAYS" }))
        .await
        .expect_error(422, 42203);
    API.put(&format!("{base}/config/users-value"), json!({})).await.expect_error(422, 42203);
    server.stop().await;

    // Levels survive a restart.
    let server = TestRegistry::start_in(dir.path()).await;
    assert_eq!(
        API.get(&format!("{}/config", server.url())).await.expect_ok(),
        &json!({ "compatibilityLevel": "FULL" })
    );
    server.stop().await;
}

#[tokio::test]
async fn subjects_with_reserved_characters_and_prefix_filtering_work() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url();
    // "orders/eu value" percent-encoded in the path.
    register(base, "orders%2Feu%20value", &user_v1()).await.expect_ok();
    register(base, "users-value", &user_v1()).await.expect_ok();
    assert_eq!(
        API.get(&format!("{base}/subjects")).await.expect_ok(),
        &json!(["orders/eu value", "users-value"])
    );
    assert_eq!(
        API.get(&format!("{base}/subjects?subjectPrefix=users")).await.expect_ok(),
        &json!(["users-value"])
    );
    let found = API.get(&format!("{base}/subjects/orders%2Feu%20value/versions/1")).await;
    assert_eq!(found.expect_ok()["subject"], "orders/eu value");
    assert_eq!(
        API.get(&format!("{base}/subjects?offset=1&limit=1")).await.expect_ok(),
        &json!(["users-value"])
    );
    assert_eq!(
        API.get(&format!("{base}/subjects?offset=0&limit=-1")).await.expect_ok(),
        &json!(["orders/eu value", "users-value"])
    );
    API.delete(&format!("{base}/subjects/users-value")).await.expect_ok();
    assert_eq!(
        API.get(&format!("{base}/subjects?deletedOnly=true")).await.expect_ok(),
        &json!(["users-value"])
    );
    server.stop().await;
}

#[tokio::test]
async fn plain_json_and_confluent_content_types_are_both_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let http = testkit::http::client();
    let body = json!({ "schema": user_v1().to_string() }).to_string();
    for content_type in ["application/json", "application/vnd.schemaregistry.v1+json", "text/plain"]
    {
        let answer = API
            .send(
                http.post(format!("{}/subjects/users-value/versions", server.url()))
                    .header("content-type", content_type)
                    .body(body.clone()),
            )
            .await;
        assert_eq!(answer.expect_ok()["id"], 1, "{content_type}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_registrations_agree_on_ids_and_versions() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url().to_owned();
    API.put(&format!("{base}/config"), json!({ "compatibility": "NONE" })).await.expect_ok();
    // 8 tasks register the same 4 schemas in different orders under one subject.
    let schemas: Vec<Value> =
        (0..4).map(|i| record(&format!("R{i}"), json!([{ "name": "a", "type": "int" }]))).collect();
    let mut tasks = Vec::new();
    for t in 0..8 {
        let (base, schemas) = (base.clone(), schemas.clone());
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for k in 0..4 {
                let i = (k + t) % 4;
                let id = register(&base, "shared", &schemas[i]).await.expect_ok()["id"].clone();
                ids.push((i, id));
            }
            ids
        }));
    }
    let mut by_schema = std::collections::BTreeMap::new();
    for task in tasks {
        for (i, id) in task.await.unwrap() {
            assert_eq!(*by_schema.entry(i).or_insert(id.clone()), id, "schema {i} got two ids");
        }
    }
    assert_eq!(by_schema.len(), 4);
    assert_eq!(
        API.get(&format!("{base}/subjects/shared/versions")).await.expect_ok(),
        &json!([1, 2, 3, 4]),
        "each schema became exactly one version"
    );
    server.stop().await;
}
