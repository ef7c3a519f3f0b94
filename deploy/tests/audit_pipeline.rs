//! The audit over the whole pipeline (issue 12): agent → live cluster → mirror → analytics
//! cluster → loader, each the real library its binary runs, on the embedded coordination
//! backend and a real registry over HTTP. With nothing lost every closed window is complete
//! at every tier; after a live segment is deleted before the mirror reads it, the audit flags
//! exactly that topic and window, at the mirror (and the loader after it), and nothing else.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use client::group::lag::total_lag;
use deploy::demo::cluster::{Cluster, ClusterSpec, session};
use schema_registry::RegistryClient;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const WINDOW_MS: i64 = 10_000;
const EVENTS_PER_TOPIC: usize = 300;
const WAIT: Duration = Duration::from_secs(60);

fn event(topic: &str, time_ms: i64, n: usize) -> Value {
    let header = json!({"time": time_ms, "server": "web-1", "service": "test"});
    match topic {
        "click" => json!({"header": header, "member_id": n, "page_key": "feed",
                          "element": format!("button-{n}"), "target_url": null}),
        _ => json!({"header": header, "member_id": null, "page_key": "profile",
                    "url": format!("/in/member-{n}"), "referrer": null, "duration_ms": 12}),
    }
}

/// Messages in a segment file (each holds one event: the agent sends them uncompressed here).
/// Events in a segment: a record each, in the agent's batches (one magic-2 message per chunk).
fn events_in(segment: &Path) -> usize {
    let bytes = std::fs::read(segment).unwrap();
    protocol::MessageSetIter::new(&bytes, 0)
        .map(|message| {
            let (_, message) = message.unwrap();
            match message.magic {
                protocol::MAGIC_BATCH => {
                    let batch = protocol::record_batch::RecordBatchRef::parse(message.payload);
                    batch.unwrap().record_count() as usize
                }
                _ => 1,
            }
        })
        .sum()
}

async fn audit_window(http: &reqwest::Client, dashboard: &str, topic: &str, start: i64) -> Value {
    let url = format!("{dashboard}/api/windows?topic={topic}");
    let windows: Value = http.get(url).send().await.unwrap().json().await.unwrap();
    windows
        .as_array()
        .and_then(|w| w.iter().find(|w| w["window_start"] == start).cloned())
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_live_segment_lost_before_the_mirror_is_flagged_at_that_topic_window_and_tier() {
    let registry = testkit::registry::TestRegistry::start().await;
    let registry_client = Arc::new(RegistryClient::new(registry.url()).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let embedded = cluster::Embedded::new();
    let live_spec = ClusterSpec { segment_bytes: 4_096, ..ClusterSpec::new("live-a", 1, 1) };
    let mut live = Cluster::start(&embedded, &live_spec, dir.path()).await.unwrap();
    let analytics =
        Cluster::start(&embedded, &ClusterSpec::new("analytics", 1, 1), dir.path()).await.unwrap();

    // The agent ships uncompressed, small batches: many small segments on the live broker.
    let agent = frontend_agent::Agent::start(
        frontend_agent::Config {
            registry: registry.url().to_owned(),
            brokers: live.addrs.clone(),
            spool_dir: dir.path().join("spool"),
            host_name: Some("web-1".into()),
            audit_window_ms: WINDOW_MS,
            audit_publish_ms: 200,
            compression: "none".into(),
            batch_messages: 5,
            ..frontend_agent::Config::default()
        },
        frontend_agent::Brokers::Cluster(session(&embedded, &live.chroot).unwrap()),
        Arc::clone(&registry_client),
    )
    .await
    .unwrap();
    // Every event in one window that has already closed.
    let window = (service::now_ms() - 60_000).div_euclid(WINDOW_MS) * WINDOW_MS;
    for topic in ["page-view", "click"] {
        let events: Vec<Value> =
            (0..EVENTS_PER_TOPIC).map(|n| event(topic, window + 1_000 + n as i64, n)).collect();
        assert_eq!(agent.send_batch(topic, &events).await.unwrap(), EVENTS_PER_TOPIC);
    }
    testkit::eventually(WAIT, "the live broker to acknowledge every event", || async {
        (agent.acknowledged() == 2 * EVENTS_PER_TOPIC as u64).then_some(())
    })
    .await;

    // The audit, counting the live cluster from the start.
    let audit_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dashboard = format!("http://{}", audit_listener.local_addr().unwrap());
    let stop_audit = CancellationToken::new();
    let audit_task = tokio::spawn(audit::run(
        audit::Config { audit_window_ms: WINDOW_MS, grace_ms: 1_000, ..audit::Config::default() },
        session(&embedded, &analytics.chroot).unwrap(),
        vec![("live-a".into(), session(&embedded, &live.chroot).unwrap())],
        RegistryClient::new(registry.url()).unwrap(),
        audit_listener,
        stop_audit.clone(),
    ));
    let http = testkit::http_client();
    testkit::eventually(WAIT, "the audit to count the live cluster", || async {
        let report = audit_window(&http, &dashboard, "click", window).await;
        (report["tiers"]["live"] == EVENTS_PER_TOPIC).then_some(())
    })
    .await;

    // The drill: the live broker stops, its first segment of `click` is deleted, it restarts.
    agent.shutdown().await.unwrap();
    let data_dir = live.data_dirs[0].clone();
    live.stop().await;
    let first_segment = data_dir.join("click-0/00000000000000000000.log");
    let lost = events_in(&first_segment);
    assert!(lost > 0 && lost < EVENTS_PER_TOPIC, "the segment holds {lost} events");
    std::fs::remove_file(&first_segment).unwrap();
    live = Cluster::start(&embedded, &live_spec, dir.path()).await.unwrap();

    // Only now the mirror, and then the loader.
    let mirror = mirror::Mirror::start(
        mirror::Config { partitions: 1, ..mirror::Config::default() },
        vec![("live-a".into(), session(&embedded, &live.chroot).unwrap())],
        session(&embedded, &analytics.chroot).unwrap(),
        None,
    )
    .await
    .unwrap();
    let live_registry = cluster::Registry::new(session(&embedded, &live.chroot).unwrap());
    let group = mirror::Config::default().group;
    testkit::eventually(WAIT, "the mirror to catch up", || async {
        (total_lag(&live_registry, &group).await.ok() == Some(Some(0))
            && mirror.totals().events() >= (2 * EVENTS_PER_TOPIC - lost) as u64)
            .then_some(())
    })
    .await;
    let store = hdfs_loader::store_from_url("memory://").unwrap();
    let mut loader = hdfs_loader::Loader::new(
        hdfs_loader::Config {
            host_name: Some("loader-1".into()),
            audit_window_ms: WINDOW_MS,
            ..hdfs_loader::Config::default()
        },
        session(&embedded, &analytics.chroot).unwrap(),
        store,
        Arc::clone(&registry_client),
    )
    .unwrap();
    let loaded = loader.run(&CancellationToken::new()).await.unwrap();
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    assert_eq!(loaded.rows, (2 * EVENTS_PER_TOPIC - lost) as u64);

    // The verdicts: page-view complete at every tier; click lost `lost` events at the mirror
    // and so at the loader, while the live tier counted them before they were deleted.
    let complete = testkit::eventually(WAIT, "page-view complete at every tier", || async {
        let report = audit_window(&http, &dashboard, "page-view", window).await;
        (report["verdict"] == "complete" && report["tiers"]["loader"] == EVENTS_PER_TOPIC)
            .then_some(report)
    })
    .await;
    for tier in ["agent", "live", "mirror", "loader"] {
        assert_eq!(complete["tiers"][tier], EVENTS_PER_TOPIC, "{tier}: {complete}");
    }
    let flagged = testkit::eventually(WAIT, "click flagged as loss", || async {
        let report = audit_window(&http, &dashboard, "click", window).await;
        (report["verdict"] == "loss" && report["missing"]["loader"] == lost).then_some(report)
    })
    .await;
    assert_eq!(flagged["missing"]["mirror"], lost, "{flagged}");
    assert!(flagged["missing"].get("live").is_none(), "{flagged}");
    assert_eq!(flagged["tiers"]["agent"], EVENTS_PER_TOPIC, "{flagged}");

    // And a person looking at the dashboard sees it: the click row is marked as loss.
    let page = http.get(format!("{dashboard}/topics/click")).send().await.unwrap();
    let html = page.text().await.unwrap();
    assert!(html.contains("loss"), "{html}");

    loader.close().await;
    mirror.shutdown().await.unwrap();
    stop_audit.cancel();
    audit_task.await.unwrap().unwrap();
    live.stop().await;
    analytics.stop().await;
}
