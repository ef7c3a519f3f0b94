//! Delivery against real brokers: a broker outage, a full spool under both policies, brokers
//! found in ZooKeeper, and a tailed file rotated while it is read.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use cluster::{ZooKeeper, ZooKeeperConfig};
use frontend_agent::{Agent, Brokers, SpoolFull, serve_http};
use schema_registry::RegistryClient;
use testkit::agent::{DEADLINE, config, start};
use testkit::broker::TestBroker;
use testkit::events::{event_id, id_counts, page_view_json, wait_for_ids};
use testkit::registry::TestRegistry;
use testkit::zookeeper::ZooKeeperServer;
use tokio_util::sync::CancellationToken;

/// Sends batches of 20 page views with fresh ids every 100 ms until `stop`; returns the ids
/// of every accepted batch.
fn keep_sending(agent: Agent, stop: CancellationToken) -> tokio::task::JoinHandle<Vec<i64>> {
    tokio::spawn(async move {
        let mut accepted = Vec::new();
        let mut n = 0;
        while !stop.is_cancelled() {
            let ids: Vec<i64> = (n..n + 20).collect();
            n += 20;
            let events: Vec<_> = ids.iter().map(|&i| page_view_json(i)).collect();
            if agent.send_batch("page-view", &events).await.is_ok() {
                accepted.extend(ids);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        accepted
    })
}

/// An address nothing listens on (yet).
fn dead_addr() -> String {
    format!("127.0.0.1:{}", testkit::process::free_port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_accepted_during_a_30s_broker_outage_all_reach_the_broker_afterwards() {
    let broker = TestBroker::start().await;
    let addr = broker.addr.clone();
    let registry = TestRegistry::start().await;
    let spool = tempfile::tempdir().unwrap();
    let agent = start(config(registry.url(), spool.path(), &[&addr])).await;
    let stop = CancellationToken::new();
    let sender = keep_sending(agent.clone(), stop.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let data = broker.stop().await;
    let accepted_before_outage = agent.accepted();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(agent.accepted() > accepted_before_outage + 100, "events keep being accepted");
    assert!(agent.unacknowledged() > 100, "and wait in the spool");
    let _broker = TestBroker::start_at(data, &addr, |_| {}).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.cancel();
    let accepted = sender.await.unwrap();
    let counts = wait_for_ids(&addr, "page-view", &accepted).await;
    let duplicates: usize = counts.values().map(|c| c - 1).sum();
    println!("{} accepted, all in the broker; {duplicates} duplicates", accepted.len());
    testkit::eventually(DEADLINE, "every event acknowledged", || async {
        (agent.acknowledged() == accepted.len() as u64 && agent.unacknowledged() == 0).then_some(())
    })
    .await;
    assert!(agent.metrics().ship_failures.get() > 0, "the outage was noticed");
    agent.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_full_spool_under_block_answers_503_with_retry_after_and_drops_nothing() {
    let registry = TestRegistry::start().await;
    let spool = tempfile::tempdir().unwrap();
    let addr = dead_addr();
    let mut cfg = config(registry.url(), spool.path(), &[&addr]);
    cfg.spool_max_bytes = 64 << 10;
    cfg.max_event_bytes = 4 << 10;
    cfg.spool_full = SpoolFull::Block;
    let agent = start(cfg).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/events/page-view", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(serve_http(listener, agent.clone(), stop.clone()));
    let http = testkit::http_client();
    let mut accepted = Vec::new();
    let mut n = 0;
    let refusal = loop {
        let ids: Vec<i64> = (n..n + 50).collect();
        n += 50;
        let body: Vec<_> = ids.iter().map(|&i| page_view_json(i)).collect();
        let r = http.post(&url).json(&body).send().await.unwrap();
        if r.status() != 200 {
            break r;
        }
        accepted.extend(ids);
        assert!(n < 100_000, "the spool never filled");
    };
    assert_eq!(refusal.status(), 503);
    assert_eq!(refusal.headers()["retry-after"], "1");
    assert!(accepted.len() > 200, "{} accepted before the spool filled", accepted.len());

    let _broker = TestBroker::start_at(tempfile::tempdir().unwrap(), &addr, |_| {}).await;
    let counts = wait_for_ids(&addr, "page-view", &accepted).await;
    assert_eq!(counts.len(), accepted.len(), "every accepted event and nothing else");
    testkit::eventually(DEADLINE, "room again once acknowledged", || async {
        let r = http.post(&url).json(&vec![page_view_json(1_000_000)]).send().await.unwrap();
        (r.status() == 200).then_some(())
    })
    .await;
    // A request that could never fit, however empty the spool: 400, not a 503 to retry forever.
    let rejected_before = agent.metrics().rejected_requests.get();
    let huge: Vec<_> = (2_000_000..2_002_000).map(page_view_json).collect();
    let r = http.post(&url).json(&huge).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("exceed the whole spool"), "{body}");
    assert_eq!(agent.metrics().rejected_requests.get(), rejected_before + 1);
    assert_eq!(agent.metrics().dropped.get(), 0);
    assert!(agent.metrics().refused_full.get() >= 1);
    stop.cancel();
    agent.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_full_spool_under_drop_oldest_drops_the_oldest_and_counts_them() {
    let registry = TestRegistry::start().await;
    let spool = tempfile::tempdir().unwrap();
    let addr = dead_addr();
    let mut cfg = config(registry.url(), spool.path(), &[&addr]);
    cfg.spool_max_bytes = 64 << 10;
    cfg.max_event_bytes = 4 << 10;
    cfg.spool_full = SpoolFull::DropOldest;
    let agent = start(cfg).await;
    for batch in 0..40 {
        let events: Vec<_> = (batch * 50..batch * 50 + 50).map(page_view_json).collect();
        agent.send_batch("page-view", &events).await.expect("drop-oldest never refuses");
    }
    let dropped = agent.metrics().dropped.get();
    assert!(dropped > 0, "the spool overflowed");
    assert!(
        agent.metrics().render().contains(&format!("tributary_agent_dropped_total {dropped}\n"))
    );

    let _broker = TestBroker::start_at(tempfile::tempdir().unwrap(), &addr, |_| {}).await;
    testkit::eventually(DEADLINE, "the rest acknowledged", || async {
        (agent.acknowledged() + dropped == 2_000).then_some(())
    })
    .await;
    // Acknowledged once appended; visible to a fetch once the broker flushed.
    let counts = testkit::eventually(DEADLINE, "exactly the events not dropped", || async {
        let counts = id_counts(&addr, "page-view").await;
        (counts.len() as u64 == 2_000 - dropped).then_some(counts)
    })
    .await;
    assert!(!counts.contains_key(&event_id(0)), "the oldest were dropped");
    assert!((1_950..2_000).all(|n| counts.contains_key(&event_id(n))), "the newest were kept");
    agent.shutdown().await.unwrap();
}

#[tokio::test]
async fn brokers_registered_in_zookeeper_are_found_and_shipped_to() {
    let connect = ZooKeeperServer::shared().connect_string();
    let broker_connect = connect.clone();
    let broker = TestBroker::start_with(move |c| c.zookeeper = Some(broker_connect)).await;
    let registry = TestRegistry::start().await;
    let spool = tempfile::tempdir().unwrap();
    // The library takes the cluster as an argument: the config names no brokers.
    let cfg = config(registry.url(), spool.path(), &[]);
    let session = ZooKeeper::connect(ZooKeeperConfig::new(connect)).await.unwrap();
    let client = Arc::new(RegistryClient::new(registry.url()).unwrap());
    let agent = Agent::start(cfg, Brokers::Cluster(session), client).await.unwrap();
    let events: Vec<_> = (0..100).map(page_view_json).collect();
    agent.send_batch("page-view", &events).await.unwrap();
    wait_for_ids(&broker.addr, "page-view", &(0..100).collect::<Vec<_>>()).await;
    agent.shutdown().await.unwrap();
}

fn append_lines(path: &std::path::Path, ids: std::ops::Range<i64>) {
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    for n in ids {
        writeln!(file, "{}", page_view_json(n)).unwrap();
    }
    file.sync_all().unwrap();
}

/// A broker, a registry, a spool and a log directory, and an agent config that tails
/// `events.log` into `page-view`.
struct Tailing {
    broker: TestBroker,
    _registry: TestRegistry,
    _dirs: [tempfile::TempDir; 2],
    log: std::path::PathBuf,
    config: frontend_agent::Config,
}

impl Tailing {
    async fn start() -> Tailing {
        let broker = TestBroker::start().await;
        let registry = TestRegistry::start().await;
        let (spool, logs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let log = logs.path().join("events.log");
        let mut config = config(registry.url(), spool.path(), &[&broker.addr]);
        config.tail = vec![format!("{}=page-view", log.display())];
        config.tail_poll_ms = 20;
        Tailing { broker, _registry: registry, _dirs: [spool, logs], log, config }
    }
}

#[tokio::test]
async fn a_tailed_file_rotated_while_read_loses_no_line_and_a_restart_rereads_none() {
    let t = Tailing::start().await;
    let (broker, log, cfg) = (&t.broker, &t.log, t.config.clone());
    append_lines(log, 0..100);
    let agent = start(cfg.clone()).await;
    wait_for_ids(&broker.addr, "page-view", &(0..100).collect::<Vec<_>>()).await;

    // A line cut short, completed later; a bad line; then rotation by rename right after more
    // lines, before the tailer can have read them all.
    let mut file = std::fs::OpenOptions::new().append(true).open(log).unwrap();
    let partial = page_view_json(100).to_string();
    file.write_all(&partial.as_bytes()[..10]).unwrap();
    file.flush().unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    file.write_all(&partial.as_bytes()[10..]).unwrap();
    file.write_all(b"\nnot json\n").unwrap();
    drop(file);
    append_lines(log, 101..2_000);
    std::fs::rename(log, log.with_extension("log.1")).unwrap();
    append_lines(log, 2_000..2_100);
    wait_for_ids(&broker.addr, "page-view", &(0..2_100).collect::<Vec<_>>()).await;
    assert_eq!(agent.metrics().rejected.get(), 1, "the bad line is counted and skipped");
    agent.shutdown().await.unwrap();

    let agent = start(cfg).await;
    append_lines(log, 2_100..2_150);
    let counts = wait_for_ids(&broker.addr, "page-view", &(0..2_150).collect::<Vec<_>>()).await;
    assert_eq!(counts.len(), 2_150);
    assert!(counts.values().all(|&c| c == 1), "no line read twice across the restart");
    agent.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_tailed_file_rotated_while_the_agent_is_down_is_read_to_its_end_first() {
    let t = Tailing::start().await;
    let (broker, log, cfg) = (&t.broker, &t.log, t.config.clone());
    append_lines(log, 0..100);
    let agent = start(cfg.clone()).await;
    wait_for_ids(&broker.addr, "page-view", &(0..100).collect::<Vec<_>>()).await;
    agent.shutdown().await.unwrap();

    // While the agent is down the application writes on, then its log is rotated by rename
    // and a new file started.
    append_lines(log, 100..300);
    std::fs::rename(log, log.with_extension("log.1")).unwrap();
    append_lines(log, 300..400);
    let agent = start(cfg).await;
    let counts = wait_for_ids(&broker.addr, "page-view", &(0..400).collect::<Vec<_>>()).await;
    assert_eq!(counts.len(), 400);
    assert!(counts.values().all(|&c| c == 1), "no line read twice");
    agent.shutdown().await.unwrap();
}

#[tokio::test]
async fn tailed_lines_more_than_the_whole_spool_holds_are_spooled_in_parts() {
    let t = Tailing::start().await;
    let (broker, log, mut cfg) = (&t.broker, &t.log, t.config.clone());
    cfg.spool_max_bytes = 64 << 10;
    cfg.max_event_bytes = 4 << 10;
    // Written before the agent starts, so that its first read takes them all at once.
    append_lines(log, 0..3_000);
    let agent = start(cfg).await;
    let counts = wait_for_ids(&broker.addr, "page-view", &(0..3_000).collect::<Vec<_>>()).await;
    assert_eq!(counts.len(), 3_000);
    assert!(counts.values().all(|&c| c == 1), "no line spooled twice");
    assert_eq!(agent.metrics().rejected.get(), 0);
    agent.shutdown().await.unwrap();
}
