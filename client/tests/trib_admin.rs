//! `trib`'s admin commands through the real binary, against four brokers in a real ZooKeeper:
//! deleting a topic (and a broker that was down finishing it when it returns), showing and
//! changing a topic's settings live, reassigning partitions under a steady acks-all producer,
//! decommissioning a broker, electing preferred leaders, describing and consuming a tiered
//! topic's remote and local parts — and the refusals, each one line and exit code 2.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use cluster::{Registry, ZooKeeper, ZooKeeperConfig};
use serde_json::Value;
use testkit::broker::TestBroker;
use testkit::zookeeper::ZooKeeperServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

const TRIB: &str = env!("CARGO_BIN_EXE_trib");

/// `trib` as a user runs it (a test's own `RUST_LOG` would add log lines to its stderr).
fn command() -> Command {
    let mut command = Command::new(TRIB);
    command.env_remove("RUST_LOG");
    command
}

async fn trib(args: &[&str]) -> Output {
    command().args(args).output().await.expect("trib runs")
}

/// `trib ARGS --json`, which must succeed.
async fn trib_json(args: &[&str]) -> Value {
    let out = command().args(args).arg("--json").output().await.expect("trib runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// A refusal: exit code 2 and one line on stderr that contains `says`.
async fn refused(args: &[&str], says: &str) {
    let out = trib(args).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
    assert!(stderr.contains(says), "{args:?}: {stderr}");
}

async fn cluster(zk: &str, ids: &[i32]) -> BTreeMap<i32, TestBroker> {
    let mut brokers = BTreeMap::new();
    for &id in ids {
        brokers.insert(id, start(zk, id, tempfile::tempdir().unwrap()).await);
    }
    let registry = registry(zk).await;
    let all: BTreeSet<i32> = ids.iter().copied().collect();
    eventually("every broker to register", Duration::from_secs(30), async || {
        let live: BTreeSet<i32> = registry.brokers().await.unwrap().into_keys().collect();
        (live == all).then_some(())
    })
    .await;
    brokers
}

async fn start(zk: &str, id: i32, data_dir: tempfile::TempDir) -> TestBroker {
    let zk = zk.to_owned();
    TestBroker::start_in(data_dir, move |c| {
        c.broker_id = id;
        c.zookeeper = Some(zk);
        c.default_replication_factor = 3;
        c.min_insync_replicas = 2;
        c.replica_lag_ms = 3_000;
        c.retention_check_ms = 100;
        c.auto_create_topics = true;
    })
    .await
}

async fn registry(zk: &str) -> Registry {
    Registry::new(ZooKeeper::connect(ZooKeeperConfig::new(zk)).await.expect("zookeeper"))
}

async fn eventually<T>(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The partition folders of `topic` in a broker's data directory.
fn folders_of(data_dir: &Path, topic: &str) -> Vec<String> {
    let prefix = format!("{topic}-");
    std::fs::read_dir(data_dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.strip_prefix(&prefix).is_some_and(|p| p.parse::<u32>().is_ok()))
        .collect()
}

/// `topics describe --json`'s partitions: (leader, replicas, isr) by partition.
async fn placement(zk: &str, topic: &str) -> BTreeMap<i64, (i64, Vec<i64>, Vec<i64>)> {
    let described = trib_json(&["topics", "describe", "--zookeeper", zk, "--topic", topic]).await;
    let ids = |v: &Value| -> Vec<i64> {
        v.as_array().unwrap().iter().map(|i| i.as_i64().unwrap()).collect()
    };
    described["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let partition = p["partition"].as_i64().unwrap();
            (partition, (p["leader"].as_i64().unwrap(), ids(&p["replicas"]), ids(&p["isr"])))
        })
        .collect()
}

async fn produce(zk: &str, topic: &str, lines: &[String]) {
    let mut child = command()
        .args(["produce", "--zookeeper", zk, "--topic", topic, "--acks", "all"])
        // Small batches: a batch is appended whole, to one segment.
        .args(["--batch-messages", "20", "--linger-ms", "0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all((lines.join("\n") + "\n").as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Every payload in every partition of `topic`, read from each partition's leader.
async fn read_all(zk: &str, topic: &str) -> Vec<String> {
    let mut all = Vec::new();
    for partition in placement(zk, topic).await.keys() {
        let p = partition.to_string();
        let args = ["consume", "--zookeeper", zk, "--topic", topic, "--partition", &p];
        let out = trib(&args).await;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        all.extend(String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned));
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_deleted_everywhere_and_their_settings_change_live() {
    let zk = ZooKeeperServer::shared().connect_string();
    let mut brokers = cluster(&zk, &[1, 2, 3, 4]).await;
    let registry = registry(&zk).await;
    for (topic, config) in [("doomed", "segment_bytes=100000"), ("kept", "segment_bytes=2000")] {
        let args = ["topics", "create", "--zookeeper", &zk, "--topic", topic, "--partitions", "4"];
        trib_json(&[&args[..], &["--replication-factor", "3", "--config", config]].concat()).await;
    }
    let lines: Vec<String> = (0..400).map(|i| format!("message-{i:04}")).collect();
    produce(&zk, "doomed", &lines).await;
    produce(&zk, "kept", &lines).await;
    registry.commit_offset("g", "doomed", 0, 10).await.unwrap();
    registry.commit_offset("g", "kept", 0, 10).await.unwrap();
    let holding: Vec<i32> = brokers
        .iter()
        .filter(|(_, b)| !folders_of(b.data_dir(), "doomed").is_empty())
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(holding, [1, 2, 3, 4], "4 partitions × 3 replicas spread over all four");

    // Refusals: an unknown topic; a setting no broker knows; a fixed one.
    refused(
        &["topics", "delete", "--zookeeper", &zk, "--topic", "nope", "--execute"],
        "no topic nope",
    )
    .await;
    refused(&["topics", "config", "--zookeeper", &zk, "--topic", "nope"], "no topic nope").await;
    let config = ["topics", "config", "--zookeeper", &zk, "--topic", "kept"];
    refused(&[&config[..], &["--set", "colour=blue"]].concat(), "refused colour=blue").await;
    refused(&[&config[..], &["--set", "retention_ms=soon"]].concat(), "refused").await;
    refused(&[&config[..], &["--unset", "replication_factor"]].concat(), "cannot be unset").await;

    // A dry run changes nothing.
    let plan = trib_json(&["topics", "delete", "--zookeeper", &zk, "--topic", "doomed"]).await;
    assert_eq!(plan["executed"], false);
    assert_eq!(plan["groups"], serde_json::json!(["g"]));
    assert_eq!(folders_of(brokers[&1].data_dir(), "doomed").len(), 3);

    // With broker 4 down the deletion cannot finish: trib says who it waits for, the topic
    // is refused to producers meanwhile (auto-create does not bring it back), and broker 4
    // finishes it when it returns.
    let four = brokers.remove(&4).unwrap().stop().await;
    let delete = ["topics", "delete", "--zookeeper", &zk, "--topic", "doomed", "--execute"];
    let out = trib(&[&delete[..], &["--timeout-ms", "1500"]].concat()).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("waiting for brokers 4"), "{stderr}");
    for id in [1, 2, 3] {
        assert!(folders_of(brokers[&id].data_dir(), "doomed").is_empty(), "broker {id} kept it");
    }
    let conn = brokers[&1].connect().await;
    let set = testkit::broker::message_set(&["late"]);
    let late = conn.produce("doomed", -1, protocol::Acks::Written, set).await;
    assert_eq!(late.unwrap_err().code(), Some(protocol::ErrorCode::UnknownTopic));
    let topics = trib_json(&["topics", "list", "--zookeeper", &zk]).await;
    assert!(!topics.to_string().contains("doomed"), "{topics}");
    refused(&["topics", "config", "--zookeeper", &zk, "--topic", "doomed"], "being deleted").await;

    let four_dir = four.path().to_owned();
    assert_eq!(folders_of(&four_dir, "doomed").len(), 3, "broker 4 was down");
    brokers.insert(4, start(&zk, 4, four).await);
    eventually("the deletion to finish", Duration::from_secs(30), async || {
        let gone = registry.topic_assignment("doomed").await.unwrap().is_none()
            && registry.topics_being_deleted().await.unwrap().is_empty();
        gone.then_some(())
    })
    .await;
    for (id, broker) in &brokers {
        assert!(folders_of(broker.data_dir(), "doomed").is_empty(), "broker {id} kept it");
        assert!(!broker.data_dir().join(".topics/doomed.toml").exists(), "broker {id}");
    }
    assert_eq!(registry.offsets("g", "doomed").await.unwrap(), BTreeMap::new());
    assert_eq!(registry.offsets("g", "kept").await.unwrap(), BTreeMap::from([(0, 10)]));
    refused(&delete, "no topic doomed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topics_retention_changes_without_a_restart() {
    let zk = ZooKeeperServer::shared().connect_string();
    let brokers = cluster(&zk, &[1, 2, 3]).await;
    let args = ["topics", "create", "--zookeeper", &zk, "--topic", "kept", "--partitions", "1"];
    trib_json(
        &[&args[..], &["--config", "segment_bytes=2000", "--config", "min_insync_replicas=2"]]
            .concat(),
    )
    .await;
    let lines: Vec<String> = (0..400).map(|i| format!("message-{i:04}")).collect();
    produce(&zk, "kept", &lines).await;
    let config = ["topics", "config", "--zookeeper", &zk, "--topic", "kept"];
    let shown = trib_json(&config).await;
    assert_eq!(shown["config"]["segment_bytes"], "2000", "{shown}");
    assert_eq!(shown["config"]["min_insync_replicas"], "2", "{shown}");
    let segments = || -> Vec<usize> {
        brokers
            .values()
            .map(|b| {
                let dir = std::fs::read_dir(b.data_dir().join("kept-0")).unwrap();
                dir.filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".log"))
                    .count()
            })
            .collect()
    };
    assert!(segments().iter().all(|&n| n >= 4), "{:?}", segments());
    let changed = trib_json(&[&config[..], &["--set", "retention_bytes=3000"]].concat()).await;
    assert_eq!(changed["config"]["retention_bytes"], "3000", "{changed}");
    assert_eq!(changed["config"]["min_insync_replicas"], "2", "a change keeps the others");
    // Every replica applies it: old segments go within the retention check interval.
    eventually("retention to apply on every replica", Duration::from_secs(20), async || {
        segments().iter().all(|&n| n <= 3).then_some(())
    })
    .await;
    let described = trib_json(&["topics", "describe", "--zookeeper", &zk, "--topic", "kept"]).await;
    assert!(described["partitions"][0]["earliest"].as_i64().unwrap() > 0, "{described}");
    let unset = trib_json(&[&config[..], &["--unset", "retention_bytes"]].concat()).await;
    assert!(unset["config"].get("retention_bytes").is_none(), "{unset}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_move_under_an_acks_all_producer_and_leaders_return() {
    let zk = ZooKeeperServer::shared().connect_string();
    let mut brokers = cluster(&zk, &[1, 2, 3, 4]).await;
    let args = ["topics", "create", "--zookeeper", &zk, "--topic", "moving", "--partitions", "4"];
    trib_json(&[&args[..], &["--replication-factor", "3"]].concat()).await;
    let before = placement(&zk, "moving").await;

    // A steady acks-all producer throughout.
    let mut producer = command()
        .args(["produce", "--zookeeper", &zk, "--topic", "moving", "--acks", "all"])
        .args(["--batch-messages", "20"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = producer.stdin.take().unwrap();
    // Its warnings are read as they come: a pipe left unread until the end fills up and
    // blocks the producer in the middle of the moves.
    let mut stderr = producer.stderr.take().unwrap();
    let warnings = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let feeder = tokio::spawn(async move {
        let mut sent = Vec::new();
        for i in 0.. {
            if stop_rx.try_recv().is_ok() {
                break;
            }
            let line = format!("steady-{i:06}");
            stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
            sent.push(line);
            if i % 20 == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        drop(stdin);
        sent
    });

    // Refusals: a broker that is not registered; a plan that is not one.
    let dir = tempfile::tempdir().unwrap();
    let unknown = dir.path().join("unknown.json");
    std::fs::write(
        &unknown,
        r#"{"version":1,"partitions":[{"topic":"moving","partition":0,"replicas":[1,2,9]}]}"#,
    )
    .unwrap();
    let reassign = ["partitions", "reassign", "--zookeeper", &zk];
    refused(
        &[&reassign[..], &["--plan", unknown.to_str().unwrap(), "--execute"]].concat(),
        "broker 9",
    )
    .await;
    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, "{").unwrap();
    refused(
        &[&reassign[..], &["--plan", garbage.to_str().unwrap()]].concat(),
        "not a reassignment plan",
    )
    .await;

    // Partition 0 moves to the broker it lacks, in place of its preferred leader (which
    // leads it): a new leader, from the new replicas, once the new one is in sync.
    let (leader0, replicas0, _) = before[&0].clone();
    let newcomer = (1..=4).find(|b| !replicas0.contains(b)).unwrap();
    let mut target0 = replicas0.clone();
    target0[0] = newcomer;
    // Partition 1 only turns its list round: the same replicas, another preferred leader.
    let target1: Vec<i64> = before[&1].1.iter().rev().copied().collect();
    let plan = serde_json::json!({"version": 1, "partitions": [
        {"topic": "moving", "partition": 0, "replicas": target0},
        {"topic": "moving", "partition": 1, "replicas": target1},
    ]});
    let plan_file = dir.path().join("plan.json");
    std::fs::write(&plan_file, plan.to_string()).unwrap();
    let plan_arg = plan_file.to_str().unwrap();
    let shown = trib_json(&[&reassign[..], &["--plan", plan_arg]].concat()).await;
    assert_eq!(shown["executed"], false);
    let started = trib_json(
        &[&reassign[..], &["--plan", plan_arg, "--execute", "--throttle-bytes-per-s", "1000000"]]
            .concat(),
    )
    .await;
    assert_eq!(started["executed"], true);
    let again = &[&reassign[..], &["--plan", plan_arg, "--execute"]].concat();
    let out = trib(again).await;
    let in_progress = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || in_progress.contains("still being carried out"),
        "{in_progress}"
    );
    eventually("the reassignment", Duration::from_secs(60), async || {
        let verified =
            trib_json(&[&reassign[..], &["--plan", plan_arg, "--verify"]].concat()).await;
        (verified["done"] == true).then_some(())
    })
    .await;
    // `--verify` reads ZooKeeper; `describe` asks a broker, whose view follows it by a watch.
    let after =
        eventually("brokers to see the new placement", Duration::from_secs(10), async || {
            let now = placement(&zk, "moving").await;
            (now[&0].1 == target0 && now[&1].1 == target1).then_some(now)
        })
        .await;
    assert_eq!(after[&0].1, target0);
    assert_eq!(
        after[&0].2.iter().copied().collect::<BTreeSet<_>>(),
        target0.iter().copied().collect()
    );
    assert_ne!(after[&0].0, replicas0[0], "the replica that left ({leader0}) leads no more");
    assert!(target0.contains(&after[&0].0));
    assert_eq!(after[&1].1, target1);
    let old = brokers[&(replicas0[0] as i32)].data_dir().join("moving-0");
    eventually("the old replica's files to go", Duration::from_secs(10), async || {
        (!old.exists()).then_some(())
    })
    .await;
    let new = brokers[&(newcomer as i32)].data_dir().join("moving-0");
    assert!(new.exists());

    // Partition 1's leader is not its (new) preferred replica: elect-preferred moves it.
    let elect = ["partitions", "elect-preferred", "--zookeeper", &zk, "--topic", "moving"];
    let elected = trib_json(&elect).await;
    eprintln!("elect-preferred: {elected}");
    eventually("preferred replicas to lead", Duration::from_secs(10), async || {
        let now = placement(&zk, "moving").await;
        now.values().all(|(leader, replicas, _)| *leader == replicas[0]).then_some(())
    })
    .await;
    refused(
        &["partitions", "elect-preferred", "--zookeeper", &zk, "--topic", "nope"],
        "no topic nope",
    )
    .await;

    // Decommission: every replica of broker 2 moves to the others; it leads and holds nothing.
    let decommission = [&reassign[..], &["--decommission", "2"]].concat();
    let planned = trib_json(&decommission).await;
    assert!(!planned["partitions"].as_array().unwrap().is_empty(), "{planned}");
    trib_json(&[&decommission[..], &["--execute"]].concat()).await;
    eventually("broker 2 to hold nothing", Duration::from_secs(60), async || {
        let now = placement(&zk, "moving").await;
        let holds = now.values().any(|(leader, replicas, isr)| {
            *leader == 2 || replicas.contains(&2) || isr.contains(&2) || isr.len() < 3
        });
        (!holds && folders_of(brokers[&2].data_dir(), "moving").is_empty()).then_some(())
    })
    .await;
    assert_eq!(trib_json(&[&decommission[..], &["--verify"]].concat()).await["done"], true);

    // A failover takes leadership from partition 0's preferred replica; once it is back in
    // sync, elect-preferred gives it back what it leads by preference.
    let victim = placement(&zk, "moving").await[&0].1[0];
    let preferred: Vec<i64> = placement(&zk, "moving")
        .await
        .into_iter()
        .filter(|(_, (_, replicas, _))| replicas[0] == victim)
        .map(|(p, _)| p)
        .collect();
    let data_dir = brokers.remove(&(victim as i32)).unwrap().stop().await;
    eventually("leaders off the stopped broker", Duration::from_secs(30), async || {
        let now = placement(&zk, "moving").await;
        now.values().all(|(leader, _, _)| *leader != victim && *leader >= 0).then_some(())
    })
    .await;
    brokers.insert(victim as i32, start(&zk, victim as i32, data_dir).await);
    eventually("the broker back in sync", Duration::from_secs(30), async || {
        let now = placement(&zk, "moving").await;
        let synced = now.values().all(|(_, r, isr)| !r.contains(&victim) || isr.contains(&victim));
        synced.then_some(())
    })
    .await;
    let elected = trib_json(&["partitions", "elect-preferred", "--zookeeper", &zk]).await;
    eprintln!("elect-preferred: {elected}");
    eventually("the preferred replica to lead again", Duration::from_secs(10), async || {
        let now = placement(&zk, "moving").await;
        preferred.iter().all(|p| now[p].0 == victim).then_some(())
    })
    .await;

    let _ = stop_tx.send(());
    let sent = feeder.await.unwrap();
    let out = producer.wait_with_output().await.unwrap();
    let warnings = warnings.await.unwrap();
    assert!(out.status.success(), "the acks-all producer failed: {warnings}");
    let read: BTreeSet<String> = read_all(&zk, "moving").await.into_iter().collect();
    let missing: Vec<&String> = sent.iter().filter(|l| !read.contains(*l)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged messages lost: {:?}",
        missing.len(),
        sent.len(),
        &missing[..missing.len().min(5)]
    );
    assert!(sent.len() > 1000, "the producer sent only {}", sent.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_reassignment_copies_no_faster_than_its_throttle() {
    let zk = ZooKeeperServer::shared().connect_string();
    let brokers = cluster(&zk, &[1, 2]).await;
    let args = ["topics", "create", "--zookeeper", &zk, "--topic", "bulk", "--partitions", "1"];
    trib_json(
        &[&args[..], &["--replication-factor", "1", "--config", "min_insync_replicas=1"]].concat(),
    )
    .await;
    let line = "x".repeat(999);
    let lines: Vec<String> = (0..1500).map(|i| format!("{i:05}{line}")).collect();
    produce(&zk, "bulk", &lines).await;
    let (leader, replicas, _) = placement(&zk, "bulk").await[&0].clone();
    assert_eq!(replicas, [leader]);
    let other = if leader == 1 { 2 } else { 1 };
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let moves =
        serde_json::json!({"partitions": [{"topic": "bulk", "partition": 0, "replicas": [other]}]});
    std::fs::write(&plan, moves.to_string()).unwrap();
    let reassign = ["partitions", "reassign", "--zookeeper", &zk, "--plan", plan.to_str().unwrap()];
    // About 1.5 MB at 300 kB/s: five seconds at least, however fast the machine.
    let started = Instant::now();
    trib_json(&[&reassign[..], &["--execute", "--throttle-bytes-per-s", "300000"]].concat()).await;
    eventually("the throttled move", Duration::from_secs(60), async || {
        let verified = trib_json(&[&reassign[..], &["--verify"]].concat()).await;
        (verified["done"] == true).then_some(())
    })
    .await;
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(4), "1.5 MB moved in {took:?} at 300 kB/s");
    assert_eq!(placement(&zk, "bulk").await[&0].1, [other]);
    let read = read_all(&zk, "bulk").await;
    assert_eq!(read, lines, "the moved partition holds every message, in order");
    drop(brokers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_deleted_before_an_offset_on_every_replica() {
    let zk = ZooKeeperServer::shared().connect_string();
    let brokers = cluster(&zk, &[1, 2, 3]).await;
    let create =
        ["topics", "create", "--zookeeper", &zk, "--topic", "trimmed", "--partitions", "1"];
    trib_json(&[&create[..], &["--config", "segment_bytes=2000"]].concat()).await;
    let lines: Vec<String> = (0..300).map(|i| format!("message-{i:04}")).collect();
    produce(&zk, "trimmed", &lines).await;
    // Acknowledged at acks all, visible once the leader has flushed them too.
    let consume = ["consume", "--zookeeper", &zk, "--topic", "trimmed", "--json"];
    let offsets = eventually("every message to be visible", Duration::from_secs(20), async || {
        let out = trib(&consume).await;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let offsets: Vec<i64> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["offset"].as_i64().unwrap())
            .collect();
        (offsets.len() == 300).then_some(offsets)
    })
    .await;
    let (at, inside) = (offsets[120].to_string(), (offsets[120] + 1).to_string());
    let delete = ["delete-records", "--zookeeper", &zk, "--topic", "trimmed"];
    refused(&[&delete[..], &["--before", &inside]].concat(), "is not the offset of a message")
        .await;
    refused(&[&delete[..], &["--before", "99999999"]].concat(), "is past the high watermark").await;

    let deleted = trib_json(&[&delete[..], &["--before", &at]].concat()).await;
    assert_eq!(deleted["log_start"].as_i64(), Some(offsets[120]), "{deleted}");
    let earliest = ["offsets", "--zookeeper", &zk, "--topic", "trimmed", "--time", "earliest"];
    assert_eq!(trib_json(&earliest).await["offsets"][0].as_i64(), Some(offsets[120]));
    assert_eq!(read_all(&zk, "trimmed").await, lines[120..]);
    let below = trib(&["consume", "--zookeeper", &zk, "--topic", "trimmed", "--offset", "0"]).await;
    let stderr = String::from_utf8_lossy(&below.stderr);
    assert!(!below.status.success() && stderr.contains("out of range"), "{stderr}");
    // An earlier offset moves nothing back (asked by broker address, as the README shows).
    let addrs: Vec<&str> = brokers.values().map(|b| b.addr.as_str()).collect();
    let (addrs, earlier) = (addrs.join(","), offsets[50].to_string());
    let by_address =
        ["delete-records", "--brokers", &addrs, "--topic", "trimmed", "--partition", "0"];
    let again = trib_json(&[&by_address[..], &["--before", &earlier]].concat()).await;
    assert_eq!(again["log_start"].as_i64(), Some(offsets[120]), "{again}");
    // Every replica keeps the same start, and deletes the segments wholly before it.
    let want = format!("{} 120\n", offsets[120]);
    eventually("every replica to apply the log start", Duration::from_secs(20), async || {
        brokers
            .values()
            .all(|b| {
                let dir = b.data_dir().join("trimmed-0");
                let start = std::fs::read_to_string(dir.join("log-start")).unwrap_or_default();
                let first_segment = std::fs::read_dir(&dir)
                    .unwrap()
                    .filter_map(|e| {
                        e.ok()?
                            .file_name()
                            .into_string()
                            .ok()?
                            .strip_suffix(".log")?
                            .parse::<i64>()
                            .ok()
                    })
                    .min();
                start == want && first_segment.is_some_and(|base| base > 0 && base <= offsets[120])
            })
            .then_some(())
    })
    .await;

    let all = trib_json(&[&delete[..], &["--before", "latest"]].concat()).await;
    let end = trib_json(&["offsets", "--zookeeper", &zk, "--topic", "trimmed"]).await;
    assert_eq!(all["log_start"], end["offsets"][0], "{all} {end}");
    assert!(read_all(&zk, "trimmed").await.is_empty());
}

/// A topic tiered to a local directory (the store a single machine uses): `describe` shows
/// where its log starts in the store and on disk, and how many bytes each holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_shows_a_tiered_topic_in_the_store_and_on_disk() {
    let store = tempfile::tempdir().unwrap();
    let url = format!("file://{}", store.path().display());
    let broker = TestBroker::start_with(|c| {
        c.remote_store = Some(url);
        c.segment_bytes = 4000;
        c.local_retention_bytes = Some(8000);
        c.retention_check_ms = 100;
        c.remote_task_interval_ms = 100;
        c.visible_after = broker::VisibleAfter::Write;
    })
    .await;
    let create =
        ["topics", "create", "--brokers", &broker.addr, "--topic", "tiered", "--partitions", "1"];
    trib_json(&[&create[..], &["--config", "remote_storage=true"]].concat()).await;
    let conn = client::Connection::connect(&broker.addr).await.unwrap();
    for i in 0..100 {
        let set = testkit::broker::message_set(&[format!("message-{i:04}-{:>80}", "")]);
        conn.produce("tiered", 0, protocol::Acks::Written, set).await.unwrap();
    }
    let describe = ["topics", "describe", "--brokers", &broker.addr, "--topic", "tiered"];
    let described =
        eventually("the head of the log in the store only", Duration::from_secs(30), async || {
            let d = trib_json(&describe).await;
            (d["partitions"][0]["local_start"].as_i64()? > 0).then_some(d)
        })
        .await;
    let p = &described["partitions"][0];
    let (earliest, local, latest) = (
        p["earliest"].as_i64().unwrap(),
        p["local_start"].as_i64().unwrap(),
        p["latest"].as_i64().unwrap(),
    );
    assert_eq!(earliest, 0, "the log starts in the store: {described}");
    assert_eq!(p["remote_bytes"].as_i64(), Some(local - earliest), "{described}");
    assert_eq!(p["local_bytes"].as_i64(), Some(latest - local), "{described}");
    assert!(latest - local <= 8000 + 4000, "local retention holds: {described}");
    // `trib offsets --time earliest-local` answers the start on disk.
    let offsets = ["offsets", "--brokers", &broker.addr, "--topic", "tiered"];
    let local_start = trib_json(&[&offsets[..], &["--time", "earliest-local"]].concat()).await;
    assert_eq!(local_start["offsets"], serde_json::json!([local]), "{local_start}");
    // `trib consume` from the earliest offset reads the store's part and the disk's: all 100.
    let consume = ["consume", "--brokers", &broker.addr, "--topic", "tiered", "--partition", "0"];
    let consumed = command().args(consume).args(["--offset", "earliest"]).output().await.unwrap();
    assert!(consumed.status.success(), "{}", String::from_utf8_lossy(&consumed.stderr));
    let text = String::from_utf8(consumed.stdout).unwrap();
    let read: Vec<&str> = text.lines().map(|l| &l[..12]).collect();
    let expected: Vec<String> = (0..100).map(|i| format!("message-{i:04}")).collect();
    assert_eq!(read, expected);
    let table = command().args(describe).output().await.unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("local start") && text.contains("remote bytes"), "{text}");
}
