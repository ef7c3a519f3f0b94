//! Each compatibility level accepts and refuses the schema changes the Avro resolution rules
//! say it should, through real registrations over HTTP.

use serde_json::{Value, json};
use testkit::registry::{API, TestRegistry, record, register};

struct Change {
    name: &'static str,
    old: Value,
    new: Value,
    /// New reader reads old data.
    backward: bool,
    /// Old reader reads new data.
    forward: bool,
}

fn changes() -> Vec<Change> {
    let base = || json!([{ "name": "a", "type": "int" }, { "name": "b", "type": "string" }]);
    let with = |extra: Value| {
        let mut fields = base();
        fields.as_array_mut().unwrap().push(extra);
        fields
    };
    vec![
        Change {
            name: "added field with default",
            old: record("R", base()),
            new: record("R", with(json!({ "name": "c", "type": "long", "default": 7 }))),
            backward: true,
            forward: true,
        },
        Change {
            name: "added field without default",
            old: record("R", base()),
            new: record("R", with(json!({ "name": "c", "type": "long" }))),
            backward: false,
            forward: true,
        },
        Change {
            name: "removed field without default",
            old: record("R", base()),
            new: record("R", json!([{ "name": "a", "type": "int" }])),
            backward: true,
            forward: false,
        },
        Change {
            name: "removed field with default",
            old: record("R", with(json!({ "name": "c", "type": "long", "default": 7 }))),
            new: record("R", base()),
            backward: true,
            forward: true,
        },
        Change {
            name: "type promotion int to long",
            old: record("R", json!([{ "name": "a", "type": "int" }])),
            new: record("R", json!([{ "name": "a", "type": "long" }])),
            backward: true,
            forward: false,
        },
        Change {
            name: "type promotion float to double",
            old: record("R", json!([{ "name": "a", "type": "float" }])),
            new: record("R", json!([{ "name": "a", "type": "double" }])),
            backward: true,
            forward: false,
        },
        Change {
            name: "string to bytes",
            old: record("R", json!([{ "name": "a", "type": "string" }])),
            new: record("R", json!([{ "name": "a", "type": "bytes" }])),
            backward: true,
            forward: true,
        },
        Change {
            name: "enum symbol added",
            old: json!({ "type": "enum", "name": "E", "symbols": ["A", "B"] }),
            new: json!({ "type": "enum", "name": "E", "symbols": ["A", "B", "C"] }),
            backward: true,
            forward: false,
        },
        Change {
            name: "enum symbol added, old reader has a default",
            old: json!({ "type": "enum", "name": "E", "symbols": ["A", "B"], "default": "A" }),
            new: json!({ "type": "enum", "name": "E", "symbols": ["A", "B", "C"], "default": "A" }),
            backward: true,
            forward: true,
        },
        Change {
            name: "union widened",
            old: record("R", json!([{ "name": "a", "type": ["null", "string"] }])),
            new: record("R", json!([{ "name": "a", "type": ["null", "string", "int"] }])),
            backward: true,
            forward: false,
        },
        Change {
            name: "field type changed",
            old: record("R", json!([{ "name": "a", "type": "string" }])),
            new: record("R", json!([{ "name": "a", "type": "int" }])),
            backward: false,
            forward: false,
        },
        Change {
            name: "nested record gains a required field",
            old: record(
                "R",
                json!([{ "name": "n", "type": record("N", json!([{ "name": "x", "type": "int" }])) }]),
            ),
            new: record(
                "R",
                json!([{ "name": "n", "type": record("N", json!([
                    { "name": "x", "type": "int" }, { "name": "y", "type": "int" }
                ])) }]),
            ),
            backward: false,
            forward: true,
        },
    ]
}

/// Registers `old` then `new` under a fresh subject at `level`; returns whether `new` was
/// accepted (and checks refusals are Confluent's 409).
async fn accepted(base: &str, subject: &str, level: &str, old: &Value, new: &Value) -> bool {
    API.put(&format!("{base}/config/{subject}"), json!({ "compatibility": level }))
        .await
        .expect_ok();
    register(base, subject, old).await.expect_ok();
    let answer = register(base, subject, new).await;
    match answer.status {
        200 => true,
        _ => {
            answer.expect_error(409, 409);
            false
        }
    }
}

#[tokio::test]
async fn every_level_accepts_exactly_the_changes_its_direction_allows() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let mut n = 0;
    for change in changes() {
        for (level, expected) in [
            ("NONE", true),
            ("BACKWARD", change.backward),
            ("BACKWARD_TRANSITIVE", change.backward),
            ("FORWARD", change.forward),
            ("FORWARD_TRANSITIVE", change.forward),
            ("FULL", change.backward && change.forward),
            ("FULL_TRANSITIVE", change.backward && change.forward),
        ] {
            n += 1;
            let subject = format!("s{n}");
            let got = accepted(server.url(), &subject, level, &change.old, &change.new).await;
            assert_eq!(got, expected, "{} under {level}", change.name);
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn transitive_levels_check_every_earlier_version_not_just_the_latest() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url();
    // v1 has only `a`; v2 adds `b` with a default; v3 drops b's default. v3 reads v2's data
    // (b is there) but not v1's (b is missing and has no default).
    let v1 = record("R", json!([{ "name": "a", "type": "int" }]));
    let v2 = record(
        "R",
        json!([{ "name": "a", "type": "int" }, { "name": "b", "type": "int", "default": 0 }]),
    );
    let v3 = record("R", json!([{ "name": "a", "type": "int" }, { "name": "b", "type": "int" }]));
    for (level, expected) in [
        ("BACKWARD", true),
        ("BACKWARD_TRANSITIVE", false),
        ("FULL", true),
        ("FULL_TRANSITIVE", false),
    ] {
        let subject = format!("t-{level}");
        API.put(&format!("{base}/config/{subject}"), json!({ "compatibility": level }))
            .await
            .expect_ok();
        register(base, &subject, &v1).await.expect_ok();
        register(base, &subject, &v2).await.expect_ok();
        let answer = register(base, &subject, &v3).await;
        assert_eq!(answer.status == 200, expected, "{level}: {answer:?}");
    }
    server.stop().await;
}

#[tokio::test]
async fn soft_deleted_versions_are_not_checked_against() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url();
    let v1 = record("R", json!([{ "name": "a", "type": "string" }]));
    let v2 = record("R", json!([{ "name": "a", "type": "int" }]));
    register(base, "s", &v1).await.expect_ok();
    register(base, "s", &v2).await.expect_error(409, 409);
    API.delete(&format!("{base}/subjects/s/versions/1")).await.expect_ok();
    assert_eq!(register(base, "s", &v2).await.expect_ok()["id"], 2);
    server.stop().await;
}

#[tokio::test]
async fn the_global_level_applies_where_a_subject_has_none() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestRegistry::start_in(dir.path()).await;
    let base = server.url();
    let old = record("R", json!([{ "name": "a", "type": "int" }]));
    let new = record("R", json!([{ "name": "a", "type": "int" }, { "name": "b", "type": "int" }]));
    register(base, "s", &old).await.expect_ok();
    register(base, "s", &new).await.expect_error(409, 409);
    API.put(&format!("{base}/config"), json!({ "compatibility": "FORWARD" })).await.expect_ok();
    register(base, "s", &new).await.expect_ok();
    server.stop().await;
}
