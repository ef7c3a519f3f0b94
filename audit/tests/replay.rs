//! Synthetic `_audit` streams, produced as real records into a real broker registered in a
//! real ZooKeeper: known loss, duplication, late arrivals and re-sent records get the right
//! verdicts, and a restarted service gives the same verdicts.

use events::audit::Tier::{Agent, Loader, Mirror};
use schema_registry::RegistryClient;
use serde_json::{Value, json};
use testkit::audit::{
    Audit, Cluster, future_window, past_window, produce_audit, produce_raw, record, test_config,
};
use testkit::registry::TestRegistry;

fn verdicts(windows: &[Value]) -> Vec<(i64, String)> {
    windows
        .iter()
        .map(|w| (w["window_start"].as_i64().unwrap(), w["verdict"].as_str().unwrap().to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_loss_duplication_and_open_windows_get_their_verdicts() {
    let registry_server = TestRegistry::start().await;
    let registry = RegistryClient::new(registry_server.url()).unwrap();
    let analytics = Cluster::start().await;
    let (w0, w1, w2, open) = (past_window(0), past_window(1), past_window(2), future_window());
    produce_audit(
        &registry,
        &analytics,
        &[
            // w0: complete, the agents' count split over two hosts.
            record(Agent, "web-1", "page-view", w0, 60),
            record(Agent, "web-2", "page-view", w0, 40),
            record(Mirror, "mirror-1", "page-view", w0, 100),
            record(Loader, "loader-1", "page-view", w0, 100),
            // w1: the loader lacks 7.
            record(Agent, "web-1", "page-view", w1, 50),
            record(Mirror, "mirror-1", "page-view", w1, 50),
            record(Loader, "loader-1", "page-view", w1, 43),
            // w2: the mirror copied 3 twice.
            record(Agent, "web-1", "page-view", w2, 20),
            record(Mirror, "mirror-1", "page-view", w2, 23),
            record(Loader, "loader-1", "page-view", w2, 23),
            // Still open: no verdict, however it looks.
            record(Agent, "web-1", "page-view", open, 5),
            record(Mirror, "mirror-1", "page-view", open, 1),
            // Another topic, complete.
            record(Agent, "web-1", "search", w0, 9),
            record(Mirror, "mirror-1", "search", w0, 9),
            record(Loader, "loader-1", "search", w0, 9),
        ],
    )
    .await;
    let audit = Audit::start(test_config(), &analytics, &[], registry_server.url()).await;
    audit.wait_window("page-view", open, "all page-view windows", |_| true).await;
    let windows = audit.windows("page-view").await;
    assert_eq!(
        verdicts(&windows),
        vec![
            (w0, "complete".into()),
            (w1, "loss".into()),
            (w2, "duplication".into()),
            (open, "open".into())
        ]
    );
    assert_eq!(windows[0]["tiers"], json!({"agent": 100, "mirror": 100, "loader": 100}));
    assert_eq!(windows[1]["missing"], json!({"loader": 7}));
    assert_eq!(windows[1]["tier_verdicts"], json!({"mirror": "complete", "loader": "loss"}));
    assert_eq!(windows[1]["loss_at"], "loader");
    assert_eq!(windows[0]["loss_at"], Value::Null);
    assert_eq!(windows[2]["duplicate"], json!({"mirror": 3, "loader": 3}));
    assert_eq!(windows[3]["missing"], json!({}), "an open window has no shortfall yet");
    assert_eq!(windows[0]["window_ms"], 1_000);

    // ?from&to select windows by start.
    let (_, body) = audit.get(&format!("/api/windows?topic=page-view&from={w1}&to={w2}")).await;
    let selected: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(verdicts(&selected), vec![(w1, "loss".into()), (w2, "duplication".into())]);

    let topics = audit.json("/api/topics").await;
    assert_eq!(topics[0]["topic"], "page-view");
    assert_eq!(
        (topics[0]["loss"].as_u64(), topics[0]["missing_events"].as_i64()),
        (Some(1), Some(7))
    );
    assert_eq!(topics[1]["topic"], "search");
    assert_eq!(topics[1]["complete"], 1);

    let summary = audit.json("/api/summary").await;
    assert_eq!(summary["windows"], json!({"complete": 2, "loss": 1, "duplication": 1, "open": 1}));
    assert_eq!(summary["reference_tier"], "agent");
    assert_eq!(summary["tiers"], json!(["agent", "mirror", "loader"]));
    assert_eq!(summary["missing_events"], json!({"loader": 7}));
    assert_eq!(summary["duplicate_events"], json!({"mirror": 3, "loader": 3}));
    // The dashboard's cards say which tiers lack events and which have too many.
    let (_, page) = audit.get("/").await;
    for shown in [
        r#"<span data-tier="loader">loader 7</span>"#,
        r#"<span data-tier="mirror">mirror 3</span> · <span data-tier="loader">loader 3</span>"#,
    ] {
        assert!(page.contains(shown), "{shown} in\n{page}");
    }

    let (_, metrics) = audit.get("/metrics").await;
    for line in [
        r#"tributary_audit_missing_events{topic="page-view",tier="loader"} 7"#,
        r#"tributary_audit_missing_events{topic="page-view",tier="mirror"} 0"#,
        r#"tributary_audit_duplicate_events{topic="page-view",tier="mirror"} 3"#,
        r#"tributary_audit_windows{topic="page-view",verdict="loss"} 1"#,
        "tributary_audit_caught_up 1",
        "tributary_audit_records_applied_total 15",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    audit.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_and_resent_records_change_verdicts_and_a_restart_keeps_them() {
    let registry_server = TestRegistry::start().await;
    let registry = RegistryClient::new(registry_server.url()).unwrap();
    let analytics = Cluster::start().await;
    let (w0, w1) = (past_window(0), past_window(1));
    produce_audit(
        &registry,
        &analytics,
        &[
            record(Agent, "web-1", "click", w0, 10),
            record(Mirror, "mirror-1", "click", w0, 4),
            record(Agent, "web-1", "click", w1, 8),
            record(Mirror, "mirror-1", "click", w1, 8),
        ],
    )
    .await;
    let audit = Audit::start(test_config(), &analytics, &[], registry_server.url()).await;
    audit.wait_window("click", w1, "click windows", |_| true).await;
    let before = audit.windows("click").await;
    assert_eq!(verdicts(&before), vec![(w0, "loss".into()), (w1, "complete".into())]);

    // The mirror's later cumulative count arrives; an old one is re-sent after it, and w1's
    // record is duplicated on the way: the largest count stands.
    produce_audit(
        &registry,
        &analytics,
        &[
            record(Mirror, "mirror-1", "click", w0, 10),
            record(Mirror, "mirror-1", "click", w0, 4),
            record(Mirror, "mirror-1", "click", w1, 8),
        ],
    )
    .await;
    let fixed = audit
        .wait_window("click", w0, "the late count to complete w0", |w| w["verdict"] == "complete")
        .await;
    assert_eq!(fixed["tiers"], json!({"agent": 10, "mirror": 10}));
    let after_late = audit.windows("click").await;
    audit.stop().await;

    // A new instance rebuilds the same books from the log: the first verdicts it gives, once
    // caught up, are the ones the old instance gave last.
    let restarted = Audit::start(test_config(), &analytics, &[], registry_server.url()).await;
    restarted.wait_caught_up().await;
    assert_eq!(restarted.windows("click").await, after_late);

    // It goes on reading: a new window's records arrive after the restart.
    let w2 = past_window(2);
    produce_audit(&registry, &analytics, &[record(Agent, "web-1", "click", w2, 3)]).await;
    let third = restarted.wait_window("click", w2, "w2 after the restart", |_| true).await;
    assert_eq!(third["verdict"], "loss", "the mirror has not reported w2");
    restarted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_that_cannot_be_reconciled_are_counted_and_skipped() {
    let registry_server = TestRegistry::start().await;
    let registry = RegistryClient::new(registry_server.url()).unwrap();
    let analytics = Cluster::start().await;
    let w0 = past_window(0);
    let mut other_window = record(Agent, "web-1", "t", w0, 5);
    other_window.window_ms = 60_000;
    produce_audit(&registry, &analytics, &[other_window, record(Agent, "web-1", "t", w0 + 1, 5)])
        .await;
    // Not an envelope at all, and an envelope naming a schema id the registry does not know.
    produce_raw(&analytics, "_audit", &[b"plain text", &[0, 0, 0, 0x7f, 0x7f, 2]]).await;
    produce_audit(&registry, &analytics, &[record(Agent, "web-1", "t", w0, 5)]).await;
    let audit = Audit::start(test_config(), &analytics, &[], registry_server.url()).await;
    let window = audit.wait_window("t", w0, "the good record", |_| true).await;
    assert_eq!(window["tiers"], json!({"agent": 5}));
    let (_, metrics) = audit.get("/metrics").await;
    for line in [
        r#"tributary_audit_records_rejected_total{reason="window_ms"} 1"#,
        r#"tributary_audit_records_rejected_total{reason="unaligned"} 1"#,
        r#"tributary_audit_records_rejected_total{reason="not_an_envelope"} 1"#,
        r#"tributary_audit_records_rejected_total{reason="unknown_schema"} 1"#,
        "tributary_audit_records_applied_total 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    // The API answers bad questions with typed errors.
    assert_eq!(audit.get("/api/windows?topic=nope").await.0, 404);
    assert_eq!(audit.get("/api/windows").await.0, 400);
    assert_eq!(audit.get("/api/windows?topic=t&from=soon").await.0, 400);
    assert_eq!(audit.get(&format!("/api/window?topic=t&start={}", w0 + 1_000)).await.0, 404);
    assert_eq!(audit.get("/topics/nope").await.0, 404);
    assert_eq!(audit.get("/no/such/page").await.0, 404);
    audit.stop().await;
}
