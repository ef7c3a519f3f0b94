//! The live tier: the service counts the events present in each live cluster by their
//! `header.time`, per cluster name, and reconciles them with the agents' `_audit` counts.

use events::audit::Tier::{Agent, Mirror};
use schema_registry::RegistryClient;
use serde_json::json;
use testkit::audit::{
    Audit, Brokers, Cluster, past_window, produce_audit, produce_events, produce_events_to,
    produce_raw, record, test_config,
};
use testkit::events::page_view_payloads;
use testkit::registry::TestRegistry;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_clusters_are_counted_by_header_time_and_a_restart_counts_the_same() {
    let registry_server = TestRegistry::start().await;
    let registry = RegistryClient::new(registry_server.url()).unwrap();
    let analytics = Cluster::start().await;
    let (dc_a, dc_b) = (Cluster::start().await, Cluster::start().await);
    let (w0, w1) = (past_window(0), past_window(1));

    // dc-a holds 3 events of w0 and 2 of w1; dc-b 1 of w1. The agents sent 3 + 4.
    produce_events(&registry, &dc_a, "page-view", &[w0, w0 + 500, w0 + 999, w1 + 1, w1 + 2]).await;
    produce_events(&registry, &dc_b, "page-view", &[w1 + 700]).await;
    // Neither internal topics nor messages without an event header are counted.
    produce_events(&registry, &dc_a, "_internal", &[w0, w0]).await;
    produce_raw(&dc_a, "page-view", &[b"not an event"]).await;
    produce_audit(
        &registry,
        &analytics,
        &[
            record(Agent, "web-1", "page-view", w0, 3),
            record(Agent, "web-1", "page-view", w1, 4),
            record(Mirror, "mirror-1", "page-view", w0, 3),
            record(Mirror, "mirror-1", "page-view", w1, 3),
        ],
    )
    .await;

    let live = [("dc-a", &dc_a), ("dc-b", &dc_b)];
    let audit = Audit::start(test_config(), &analytics, &live, registry_server.url()).await;
    audit
        .wait_window("page-view", w1, "both live clusters counted", |w| w["tiers"]["live"] == 3)
        .await;
    let windows = audit.windows("page-view").await;
    assert_eq!(windows[0]["tiers"], json!({"agent": 3, "live": 3, "mirror": 3}));
    assert_eq!(windows[0]["verdict"], "complete");
    assert_eq!(windows[1]["tiers"], json!({"agent": 4, "live": 3, "mirror": 3}));
    assert_eq!(windows[1]["verdict"], "loss");
    assert_eq!(windows[1]["missing"], json!({"live": 1, "mirror": 1}));
    let topics = audit.json("/api/topics").await;
    assert_eq!(topics.as_array().unwrap().len(), 1, "_internal is not counted: {topics}");

    // The live tier's hosts are the clusters' names.
    let detail = audit.json(&format!("/api/window?topic=page-view&start={w1}")).await;
    let hosts: Vec<(&str, i64)> = detail["hosts"]["live"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["host"].as_str().unwrap(), h["count"].as_i64().unwrap()))
        .collect();
    assert_eq!(hosts.len(), 2);
    assert!(hosts.contains(&("dc-a", 2)) && hosts.contains(&("dc-b", 1)), "{hosts:?}");

    let (_, metrics) = audit.get("/metrics").await;
    for line in [
        r#"tributary_audit_live_events_total{cluster="dc-a"} 5"#,
        r#"tributary_audit_live_events_total{cluster="dc-b"} 1"#,
        r#"tributary_audit_live_unreadable_total{cluster="dc-a"} 1"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }

    // Events that arrive later are counted, in a topic seen for the first time too.
    produce_events(&registry, &dc_b, "page-view", &[w1 + 800]).await;
    produce_events(&registry, &dc_b, "click", &[w0]).await;
    produce_audit(&registry, &analytics, &[record(Mirror, "mirror-1", "page-view", w1, 4)]).await;
    audit.wait_window("page-view", w1, "the late event", |w| w["verdict"] == "complete").await;
    audit.wait_window("click", w0, "a new live topic", |w| w["tiers"]["live"] == 1).await;
    let before = (audit.windows("page-view").await, audit.windows("click").await);
    audit.stop().await;

    // Restarted, the service recounts the live clusters from their earliest offsets: the same
    // counts and verdicts, and no double counting.
    let restarted = Audit::start(test_config(), &analytics, &live, registry_server.url()).await;
    restarted.wait_caught_up().await;
    let after = (restarted.windows("page-view").await, restarted.windows("click").await);
    assert_eq!(after, before);
    restarted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_and_a_partition_added_later_are_found() {
    let registry_server = TestRegistry::start().await;
    let registry = RegistryClient::new(registry_server.url()).unwrap();
    let analytics = Cluster::start().await;
    let mut dc_a = Cluster::start().await;
    let w0 = past_window(0);
    let audit =
        Audit::start(test_config(), &analytics, &[("dc-a", &dc_a)], registry_server.url()).await;
    audit.wait_caught_up().await;

    // A topic with two partitions appears after the start; events land in both.
    let conn = dc_a.connection().await;
    conn.create_topic("search", 2, &[]).await.unwrap();
    produce_events(&registry, &dc_a, "search", &[w0, w0]).await;
    produce_events_to(&registry, &dc_a, "search", 1, &[w0 + 10]).await;
    audit.wait_window("search", w0, "both partitions counted", |w| w["tiers"]["live"] == 3).await;

    // A second broker joins the live cluster, and the topic grows a partition, spread over
    // the brokers live now: its events are found too, wherever it is led.
    dc_a.add_broker(1).await;
    let cluster = cluster::Registry::new(std::sync::Arc::clone(&dc_a.coordinator));
    testkit::eventually(
        std::time::Duration::from_secs(30),
        "the second broker registered",
        || async { (cluster.brokers().await.ok()?.len() == 2).then_some(()) },
    )
    .await;
    conn.create_topic("search", 3, &[]).await.unwrap();
    let Brokers::ZooKeeper(brokers) = &dc_a.brokers else {
        panic!("the cluster runs on ZooKeeper")
    };
    let leader = brokers.leader_of("search", 2).await;
    let conn = client::Connection::connect(&leader).await.unwrap();
    let payloads = page_view_payloads(&registry, &[w0]).await;
    conn.produce("search", 2, protocol::Acks::Written, testkit::broker::message_set(&payloads))
        .await
        .unwrap();
    audit
        .wait_window("search", w0, "the new partition's events", |w| w["tiers"]["live"] == 4)
        .await;
    audit.stop().await;
}
