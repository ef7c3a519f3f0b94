//! The mirror as a library, with real ZooKeeper (one chroot per cluster) and in-process
//! brokers registered in it: two live clusters into one analytics cluster, compressed
//! wrappers, an analytics outage, a mirror that copies everything again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cluster::Coordinator;
use mirror::{Config, Mirror};
use protocol::record_batch::RecordBatchRef;
use protocol::{Acks, Codec, MessageSetIter};
use testkit::broker::wrapper;
use testkit::cluster::TestCluster;
use testkit::events::raw_events;
use testkit::eventually;
use testkit::mirror::{WAIT, held_twice};

fn config() -> Config {
    Config {
        partitions: 3,
        commit_ms: 100,
        metrics_refresh_ms: 100,
        drain_timeout_ms: 5_000,
        ..Config::default()
    }
}

async fn start(
    config: Config,
    sources: &[(&str, &TestCluster)],
    target: &TestCluster,
    metrics: Option<tokio::net::TcpListener>,
) -> Mirror {
    let mut sessions: Vec<(String, Arc<dyn Coordinator>)> = Vec::new();
    for (name, cluster) in sources {
        sessions.push(((*name).to_owned(), cluster.session().await));
    }
    Mirror::start(config, sessions, target.session().await, metrics).await.unwrap()
}

/// Offsets the mirror's group committed on `cluster` for `topic`, per partition.
async fn committed(cluster: &TestCluster, topic: &str) -> Vec<(i32, Option<i64>)> {
    let registry = cluster.registry();
    let mut offsets = Vec::new();
    for partition in registry.partitions(topic).await.unwrap() {
        offsets.push((partition, registry.offset("mirror", topic, partition).await.unwrap()));
    }
    offsets
}

/// Whether the group committed the end of every partition of `topic`.
async fn committed_to_end(cluster: &TestCluster, topic: &str) -> bool {
    for (partition, offset) in committed(cluster, topic).await {
        let leader = cluster.leader_of(topic, partition).await;
        let conn = client::Connection::connect(&leader).await.unwrap();
        let end = conn.offsets(topic, partition, -1, 1).await;
        if end.ok().and_then(|e| e.first().copied()) != offset.or(Some(0)) {
            return false;
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_live_clusters_arrive_complete_once_and_new_topics_follow() {
    let (live_a, live_b, analytics) =
        tokio::join!(TestCluster::start(1), TestCluster::start(1), TestCluster::start(2));
    live_a.create_topic("page-view", 2).await;
    live_b.create_topic("page-view", 2).await;
    live_b.create_topic("click", 1).await;
    let time = service::now_ms();
    let a_views = raw_events("live-a", "page-view", 0, 300, time);
    let b_views = raw_events("live-b", "page-view", 0, 300, time);
    let b_clicks = raw_events("live-b", "click", 0, 200, time);
    live_a.produce("page-view", 2, &a_views).await;
    live_b.produce("page-view", 2, &b_views).await;
    live_b.produce("click", 1, &b_clicks).await;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics_url = format!("http://{}/metrics", listener.local_addr().unwrap());
    let sources = [("live-a", &live_a), ("live-b", &live_b)];
    let mirror = start(config(), &sources, &analytics, Some(listener)).await;

    let all_views: Vec<Bytes> = a_views.iter().chain(&b_views).cloned().collect();
    analytics.wait_for_all("page-view", &all_views, "page views of both clusters").await;
    analytics.wait_for_all("click", &b_clicks, "clicks").await;
    let partitions = analytics.registry().partitions("page-view").await.unwrap();
    assert_eq!(partitions.len(), 3, "--partitions of the copied topic");

    // A topic created on a live cluster later is copied without a restart.
    live_a.create_topic("search", 1).await;
    let searches = raw_events("live-a", "search", 0, 100, time);
    live_a.produce("search", 1, &searches).await;
    analytics.wait_for_all("search", &searches, "the later topic").await;

    // Offsets are committed once acknowledged: the lag goes to zero.
    eventually(WAIT, "source offsets committed to the end", || async {
        (committed_to_end(&live_a, "page-view").await && committed_to_end(&live_b, "click").await)
            .then_some(())
    })
    .await;
    let http = testkit::http_client();
    let text = eventually(WAIT, "lag 0 in /metrics", || async {
        let text = http.get(&metrics_url).send().await.ok()?.text().await.ok()?;
        text.contains(
            "tributary_mirror_lag_bytes{source=\"live-b\",topic=\"click\",partition=\"0\"} 0",
        )
        .then_some(text)
    })
    .await;
    for family in [
        "tributary_mirror_messages_total",
        "tributary_mirror_events_total",
        "tributary_mirror_bytes_total",
        "tributary_mirror_record_age_seconds",
    ] {
        assert!(text.contains(&format!("{family}{{source=\"live-a\",topic=\"page-view\"")));
    }
    let samples = testkit::metrics::parse(&text);
    let page_views = [("source", "live-a"), ("topic", "page-view")];
    assert!(testkit::metrics::value(&samples, "tributary_mirror_events_total", &page_views) > 0.0);

    // Each event once: two sources' partitions of one topic meet in the target's, each with
    // its own writer.
    for topic in ["page-view", "click", "search"] {
        assert_eq!(held_twice(&analytics, topic).await.len(), 0, "{topic} held twice");
    }
    assert_eq!(analytics.payloads("page-view").await.len(), 600);

    let totals = mirror.totals();
    mirror.shutdown().await.unwrap();
    assert!(totals.events() >= 900, "{} events", totals.events());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_wrappers_arrive_still_compressed_and_identical() {
    let (live, analytics) = tokio::join!(TestCluster::start(1), TestCluster::start(1));
    live.create_topic("page-view", 1).await;
    let time = service::now_ms();
    let plain = raw_events("live", "page-view", 0, 3, time);
    let gzip = wrapper(Codec::Gzip, &raw_events("live", "page-view", 3, 5, time));
    let zstd = wrapper(Codec::Zstd, &raw_events("live", "page-view", 8, 7, time));
    let conn = live.brokers[0].connect().await;
    conn.produce("page-view", 0, Acks::Written, testkit::broker::message_set(&plain))
        .await
        .unwrap();
    for set in [&gzip, &zstd] {
        conn.produce("page-view", 0, Acks::Written, set.clone()).await.unwrap();
    }

    let config = Config { partitions: 1, ..config() };
    let mirror = start(config, &[("live", &live)], &analytics, None).await;

    // Every framed message on the target, as stored.
    let target = analytics.brokers[0].connect().await;
    // (Each copy is followed by the record of its writer's position: a control batch.)
    let stored = eventually(WAIT, "five messages copied", || async {
        let set = target.fetch("page-view", 0, 0, 1 << 20).await.ok()?;
        let messages: Vec<Bytes> = MessageSetIter::new(&set, 0)
            .map(|m| {
                let (offset, message) = m.unwrap();
                set.slice(offset as usize..offset as usize + message.size_bytes())
            })
            .filter(|m| {
                let batch = m.get(9..).and_then(|b| RecordBatchRef::parse(b).ok());
                !batch.is_some_and(|b| b.is_control())
            })
            .collect();
        (messages.len() >= 5).then_some(messages)
    })
    .await;
    let stored: BTreeSet<Bytes> = stored.into_iter().collect();
    assert!(stored.contains(&gzip), "the gzip wrapper arrives byte for byte");
    assert!(stored.contains(&zstd), "the zstd wrapper arrives byte for byte");

    // The metrics look inside the wrappers: 3 + 5 + 7 events.
    assert_eq!(mirror.totals().messages(), 5);
    assert_eq!(mirror.totals().events(), 15);
    mirror.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn analytics_down_for_20_s_the_mirror_waits_commits_nothing_unacknowledged_and_catches_up() {
    let (live, mut analytics) = tokio::join!(TestCluster::start(1), TestCluster::start(1));
    live.create_topic("page-view", 2).await;
    let time = service::now_ms();
    let before = raw_events("live", "page-view", 0, 200, time);
    live.produce("page-view", 2, &before).await;
    let mirror = start(config(), &[("live", &live)], &analytics, None).await;
    analytics.wait_for_all("page-view", &before, "the first events").await;
    eventually(WAIT, "first events committed", || async {
        committed_to_end(&live, "page-view").await.then_some(())
    })
    .await;
    let committed_before = committed(&live, "page-view").await;

    let stopped = analytics.stop_broker(0).await;
    let during = raw_events("live", "page-view", 200, 300, time);
    live.produce("page-view", 2, &during).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        committed(&live, "page-view").await,
        committed_before,
        "nothing the target did not acknowledge is committed"
    );

    analytics.start_again(stopped).await;
    let all: Vec<Bytes> = before.iter().chain(&during).cloned().collect();
    analytics.wait_for_all("page-view", &all, "every event after the outage").await;
    eventually(WAIT, "caught up and committed", || async {
        committed_to_end(&live, "page-view").await.then_some(())
    })
    .await;
    assert_eq!(held_twice(&analytics, "page-view").await.len(), 0);
    mirror.shutdown().await.unwrap();
}

/// A mirror that copies everything again from the sources' first offsets — its committed
/// offsets lost, or never committed before a crash (here: another group) — appends nothing
/// twice: the target has each source partition's writer at its end, and what a copy holds
/// before that position is not appended again. Then it copies on from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_that_copies_everything_again_appends_nothing_twice() {
    let (live, analytics) = tokio::join!(TestCluster::start(1), TestCluster::start(2));
    live.create_topic("page-view", 3).await;
    let time = service::now_ms();
    let first = raw_events("live", "page-view", 0, 500, time);
    live.produce("page-view", 3, &first).await;
    let mirror =
        start(Config { partitions: 2, ..config() }, &[("live", &live)], &analytics, None).await;
    analytics.wait_for_all("page-view", &first, "the first events").await;
    mirror.shutdown().await.unwrap();

    let more = raw_events("live", "page-view", 500, 200, time);
    live.produce("page-view", 3, &more).await;
    let again = Config { group: "mirror-again".into(), partitions: 2, ..config() };
    let mirror = start(again, &[("live", &live)], &analytics, None).await;
    let all: Vec<Bytes> = first.iter().chain(&more).cloned().collect();
    analytics.wait_for_all("page-view", &all, "every event after the second start").await;
    // Everything read again is acknowledged (the first 500 as in the target already).
    let totals = mirror.totals();
    eventually(WAIT, "all 700 messages copied again", || async {
        (totals.messages() >= 700).then_some(())
    })
    .await;
    let twice = held_twice(&analytics, "page-view").await;
    assert!(twice.is_empty(), "{} events held twice", twice.len());
    assert_eq!(analytics.payloads("page-view").await.len(), 700);
    mirror.shutdown().await.unwrap();
}
