//! The broker in the ZooKeeper registries, against a real ZooKeeper server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::{BrokerInfo, Coordinator, Registry, ZooKeeper, ZooKeeperConfig};
use protocol::Acks;
use testkit::broker::{TestBroker, message_set};
use testkit::eventually;
use testkit::process::{Process, free_port};
use testkit::zookeeper::ZooKeeperServer;

const WAIT: Duration = Duration::from_secs(15);

async fn observer(connect: &str) -> (Arc<ZooKeeper>, Registry) {
    let session =
        ZooKeeper::connect(ZooKeeperConfig::new(connect)).await.expect("observer session");
    (session.clone(), Registry::new(session))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_registers_itself_and_creates_topics_in_the_cluster() {
    let connect = ZooKeeperServer::shared().connect_string();
    let broker = TestBroker::start_with(|c| {
        c.broker_id = 3;
        c.zookeeper = Some(connect.clone());
        c.zookeeper_session.zookeeper_session_timeout_ms = Some(2_000);
    })
    .await;
    let (session, registry) = observer(&connect).await;
    let port: u16 = broker.addr.rsplit(':').next().unwrap().parse().unwrap();
    let brokers = eventually(WAIT, "broker node", || async {
        let brokers = registry.brokers().await.unwrap();
        (!brokers.is_empty()).then_some(brokers)
    })
    .await;
    assert_eq!(brokers.get(&3), Some(&BrokerInfo::new("127.0.0.1", port)));
    let conn = broker.connect().await;
    conn.create_topic("views", 4, &[]).await.unwrap();
    conn.produce("clicks", 0, Acks::Written, message_set(&[b"x"])).await.unwrap();
    assert_eq!(registry.partitions("views").await.unwrap(), [0, 1, 2, 3]);
    assert_eq!(registry.partitions("clicks").await.unwrap(), [0], "created on first produce");
    let raw = session.get("/brokers/topics/views").await.unwrap().unwrap().0;
    let assignment: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(assignment["partitions"]["3"], serde_json::json!([3]));
    assert_eq!(assignment["config"]["replication_factor"], "1");
    let leaders = registry.partition_leaders("views").await.unwrap();
    assert!(leaders.values().all(|&l| l == 3), "{leaders:?}");
    let metadata = conn.metadata(&["views", "gone"]).await.unwrap();
    let views = metadata.topic("views").unwrap();
    assert_eq!(views.partitions.len(), 4);
    assert!(views.partitions.iter().all(|p| p.leader == 3 && p.isr == [3] && p.replicas == [3]));
    assert_eq!(metadata.topic("gone").unwrap().error, protocol::ErrorCode::UnknownTopic);
    assert_eq!(metadata.brokers.len(), 1);
    // A clean shutdown removes the broker's node at once; the topic stays, offline.
    drop(conn);
    broker.stop().await;
    assert!(registry.brokers().await.unwrap().is_empty());
    assert_eq!(registry.partitions("views").await.unwrap().len(), 4);
}

fn spawn_broker(dir: &std::path::Path, connect: &str, broker_id: i32) -> Process {
    let port = free_port();
    let config = dir.join("broker.toml");
    std::fs::write(
        &config,
        format!(
            "broker_id = {broker_id}\nport = {port}\ndata_dir = {:?}\nzookeeper = {connect:?}\nzookeeper_session_timeout_ms = 2000\n",
            dir.join("data")
        ),
    )
    .unwrap();
    let args = vec!["--config".to_owned(), config.display().to_string()];
    Process::spawn(env!("CARGO_BIN_EXE_broker").as_ref(), &args, port, &dir.join("broker.log"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_brokers_nodes_vanish_within_the_session_timeout() {
    let connect = ZooKeeperServer::shared().connect_string();
    let dir = tempfile::tempdir().unwrap();
    let mut process = spawn_broker(dir.path(), &connect, 5);
    let (_session, registry) = observer(&connect).await;
    eventually(WAIT, "registration", || async {
        registry.brokers().await.unwrap().contains_key(&5).then_some(())
    })
    .await;
    let log = std::fs::read_to_string(dir.path().join("broker.log")).unwrap();
    assert!(log.contains("registered broker"), "the broker logs its registration: {log}");
    process.child.kill().unwrap(); // SIGKILL: no chance to unregister
    process.child.wait().unwrap();
    let killed = Instant::now();
    eventually(WAIT, "expiry", || async {
        (!registry.brokers().await.unwrap().contains_key(&5)).then_some(())
    })
    .await;
    let gone_after = killed.elapsed();
    assert!(gone_after < Duration::from_millis(2_000 * 2 + 1_000), "gone after {gone_after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_broker_id_is_refused() {
    let connect = ZooKeeperServer::shared().connect_string();
    let first = TestBroker::start_with(|c| {
        c.broker_id = 1;
        c.zookeeper = Some(connect.clone());
    })
    .await;
    let (_session, registry) = observer(&connect).await;
    eventually(WAIT, "first registration", || async {
        registry.brokers().await.unwrap().contains_key(&1).then_some(())
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("broker.toml");
    std::fs::write(
        &config,
        format!(
            "broker_id = 1\nport = {}\ndata_dir = {:?}\nzookeeper = {connect:?}\n",
            free_port(),
            dir.path().join("data")
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_broker"))
        .args(["--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("broker id 1 is already registered"), "{stderr}");
    // The first broker's registration is untouched.
    assert_eq!(registry.brokers().await.unwrap().len(), 1);
    drop(first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_comes_back_after_zookeeper_restarts() {
    let server = ZooKeeperServer::start();
    let connect = server.connect_string();
    let broker = TestBroker::start_with(|c| {
        c.broker_id = 2;
        c.zookeeper = Some(connect.clone());
        c.zookeeper_session.zookeeper_session_timeout_ms = Some(2_000);
    })
    .await;
    broker.connect().await.create_topic("kept", 2, &[]).await.unwrap();
    {
        let (_session, registry) = observer(&connect).await;
        eventually(WAIT, "registration", || async {
            (registry.partition_leaders("kept").await.unwrap().len() == 2).then_some(())
        })
        .await;
    }
    // Down for longer than the session timeout, then back on the same data directory.
    let s = std::thread::spawn(move || {
        server.stop();
        std::thread::sleep(Duration::from_secs(3));
        server.restart();
        server
    });
    let server = tokio::task::spawn_blocking(move || s.join().unwrap()).await.unwrap();
    let (_session, registry) = observer(&connect).await;
    eventually(Duration::from_secs(30), "registration back", || async {
        let brokers = registry.brokers().await.ok()?;
        let leaders = registry.partition_leaders("kept").await.ok()?;
        (brokers.contains_key(&2) && leaders.values().all(|&l| l == 2)).then_some(())
    })
    .await;
    broker.stop().await;
    drop(server);
}

/// A broker starting while ZooKeeper stands still for three of its 1 s sessions waits for it,
/// as for a server not up yet, and registers once it answers (it exited with "no response from
/// connection in 400ms": a whole test cluster short of a broker under a loaded machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_starting_through_a_zookeeper_pause_registers_after_it() {
    let server = Arc::new(ZooKeeperServer::start());
    let connect = server.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let paused = Arc::clone(&server);
    let pause = std::thread::spawn(move || paused.pause(Duration::from_secs(3)));
    std::thread::sleep(Duration::from_millis(100));
    let args: Vec<String> = [
        "--broker-id",
        "4",
        "--port",
        &port.to_string(),
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
        "--zookeeper",
        &connect,
        "--zookeeper-session-timeout-ms",
        "1000",
    ]
    .map(String::from)
    .to_vec();
    let log = dir.path().join("broker.log");
    let mut process = Process::spawn(env!("CARGO_BIN_EXE_broker").as_ref(), &args, port, &log);
    tokio::task::spawn_blocking(move || pause.join().unwrap()).await.unwrap();
    let (_session, registry) = observer(&connect).await;
    let registered = async {
        while !registry.brokers().await.is_ok_and(|b| b.contains_key(&4)) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let timely = tokio::time::timeout(WAIT, registered).await.is_ok();
    let exited = process.child.try_wait().unwrap();
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(timely && exited.is_none(), "registered: {timely}, exited: {exited:?}\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zookeeper_flags_register_a_broker_started_from_the_command_line() {
    let server = ZooKeeperServer::shared();
    let connect = format!("{}/flag-registration", server.connect_string());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let args: Vec<String> = [
        "--broker-id",
        "5",
        "--port",
        &port.to_string(),
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
        "--zookeeper",
        &connect,
        "--zookeeper-session-timeout-ms",
        "2000",
        "--default-replication-factor",
        "2",
        "--min-insync-replicas",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let broker =
        Process::spawn(env!("CARGO_BIN_EXE_broker").as_ref(), &args, port, &dir.path().join("log"));
    let (_session, registry) = observer(&connect).await;
    let brokers = eventually(WAIT, "the broker's node", || async {
        let brokers = registry.brokers().await.unwrap();
        (!brokers.is_empty()).then_some(brokers)
    })
    .await;
    assert_eq!(brokers.get(&5), Some(&BrokerInfo::new("127.0.0.1", port)));
    // --default-replication-factor 2: one live broker cannot hold a new topic's two replicas;
    // --min-insync-replicas 2: a topic of one replica cannot need two.
    let conn = client::Connection::connect(&format!("127.0.0.1:{port}")).await.unwrap();
    let code = |r: Result<(), client::ClientError>| r.err().and_then(|e| e.code());
    assert_eq!(
        code(conn.create_topic("two", 1, &[]).await),
        Some(protocol::ErrorCode::InvalidConfig)
    );
    let one = [("replication_factor", "1")];
    assert_eq!(
        code(conn.create_topic("one", 1, &one).await),
        Some(protocol::ErrorCode::InvalidConfig)
    );
    let both = [("replication_factor", "1"), ("min_insync_replicas", "1")];
    conn.create_topic("one", 1, &both).await.unwrap();
    let (assignment, _) = registry.topic_assignment("one").await.unwrap().unwrap();
    assert_eq!(assignment.replication_factor(), 1);
    drop(conn);
    // The session timeout flag is applied too: after kill -9 the node goes within ~2 s, far
    // sooner than the 6 s default.
    broker.signal(nix::sys::signal::Signal::SIGKILL);
    let killed = Instant::now();
    eventually(WAIT, "the killed broker's node to vanish", || async {
        registry.brokers().await.unwrap().is_empty().then_some(())
    })
    .await;
    assert!(killed.elapsed() < Duration::from_millis(5_500), "took {:?}", killed.elapsed());
}
