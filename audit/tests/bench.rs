//! How fast the audit service rebuilds its books on start — the live tier counted from a live
//! cluster's earliest offset, and `_audit` replayed — and how long its pages take on the result.
//!
//! ```sh
//! cargo test --release -p audit --test bench -- --ignored --nocapture
//! AUDIT_BENCH_EVENTS=1000000 AUDIT_BENCH_WINDOWS=2000 cargo test --release -p audit --test bench -- --ignored --nocapture
//! ```

use std::time::{Duration, Instant};

use events::audit::{AUDIT_SUBJECT, AUDIT_TOPIC, Tier};
use protocol::Acks;
use schema_registry::RegistryClient;
use testkit::audit::{Audit, Cluster, past_window, record, test_config};
use testkit::broker::message_set;
use testkit::events::page_view_payloads;
use testkit::registry::TestRegistry;

const SET_MESSAGES: usize = 2_000;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Sends `payloads` in MessageSets of `SET_MESSAGES`.
async fn produce_all(cluster: &Cluster, topic: &str, payloads: &[Vec<u8>]) {
    let conn = cluster.connection().await;
    for chunk in payloads.chunks(SET_MESSAGES) {
        conn.produce(topic, 0, Acks::Written, message_set(chunk)).await.expect("produced");
    }
}

async fn time_get(audit: &Audit, path: &str) -> Duration {
    let started = Instant::now();
    let (status, body) = audit.get(path).await;
    assert_eq!(status, 200, "{path}");
    assert!(!body.is_empty());
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: cargo test --release -p audit --test bench -- --ignored --nocapture"]
async fn rebuild_rates_and_page_times() {
    let events = env_or("AUDIT_BENCH_EVENTS", 1_000_000);
    let windows = env_or("AUDIT_BENCH_WINDOWS", 2_000) as i64;
    let (topics, hosts) = (5, 4);
    let registry_server = TestRegistry::start().await;
    let registry = RegistryClient::new(registry_server.url()).unwrap();

    // The live tier: `events` page views spread over 100 windows, counted from offset 0.
    let live = Cluster::start().await;
    let templates =
        page_view_payloads(&registry, &(0..100).map(past_window).collect::<Vec<_>>()).await;
    let payloads: Vec<Vec<u8>> =
        (0..events).map(|i| templates[i % templates.len()].clone()).collect();
    produce_all(&live, "page-view", &payloads).await;
    let bytes: usize = payloads.iter().map(Vec::len).sum();
    drop(payloads);
    let empty = Cluster::start().await;
    let started = Instant::now();
    let audit =
        Audit::start(test_config(), &empty, &[("dc-a", &live)], registry_server.url()).await;
    audit.wait_caught_up().await;
    let elapsed = started.elapsed();
    let (_, metrics) = audit.get("/metrics").await;
    assert!(
        metrics
            .contains(&format!("tributary_audit_live_events_total{{cluster=\"dc-a\"}} {events}"))
    );
    println!(
        "live tier: {events} events ({:.1} MB) counted in {:.2} s: {:.0} events/s",
        bytes as f64 / 1e6,
        elapsed.as_secs_f64(),
        events as f64 / elapsed.as_secs_f64()
    );
    audit.stop().await;

    // `_audit`: every (topic, window, tier, host) once.
    let analytics = Cluster::start().await;
    let latest = registry.latest(AUDIT_SUBJECT).await.unwrap();
    let schema = registry.schema(latest.id).await.unwrap();
    let mut records = Vec::new();
    for t in 0..topics {
        for w in 0..windows {
            for tier in [Tier::Accepted, Tier::Agent, Tier::Loader] {
                for h in 0..hosts {
                    let r = record(
                        tier,
                        &format!("host-{h}"),
                        &format!("topic-{t}"),
                        past_window(w),
                        100,
                    );
                    records.push(r.encode(latest.id, &schema).unwrap());
                }
            }
        }
    }
    let count = records.len();
    produce_all(&analytics, AUDIT_TOPIC, &records).await;
    drop(records);
    let started = Instant::now();
    let audit = Audit::start(test_config(), &analytics, &[], registry_server.url()).await;
    audit.wait_caught_up().await;
    let elapsed = started.elapsed();
    let (_, metrics) = audit.get("/metrics").await;
    assert!(metrics.contains(&format!("tributary_audit_records_applied_total {count}")));
    println!(
        "_audit replay: {count} records ({topics} topics x {windows} windows x 3 tiers x {hosts} hosts) in {:.2} s: {:.0} records/s",
        elapsed.as_secs_f64(),
        count as f64 / elapsed.as_secs_f64()
    );
    for path in [
        "/",
        "/topics/topic-0",
        &format!("/topics/topic-0/windows/{}", past_window(7)),
        "/api/summary",
        "/metrics",
    ] {
        let _ = time_get(&audit, path).await; // warm
        let took = time_get(&audit, path).await;
        println!(
            "GET {path}: {:.1} ms over {} windows",
            took.as_secs_f64() * 1e3,
            topics as i64 * windows
        );
    }
    audit.stop().await;
}
