//! `trib` against brokers found in a real ZooKeeper: producing by registry discovery, a group
//! consumer killed with SIGKILL mid-stream losing nothing, and `trib groups`.

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use testkit::broker::TestBroker;
use testkit::zookeeper::ZooKeeperServer;

const TRIB: &str = env!("CARGO_BIN_EXE_trib");

fn produce(zk: &str, payloads: &[String]) {
    let mut child = Command::new(TRIB)
        .args(["produce", "--zookeeper", zk, "--topic", "events", "--acks", "2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    let mut stdin = child.stdin.take().unwrap();
    for p in payloads {
        writeln!(stdin, "{p}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn group_consumer(zk: &str, out: &std::path::Path, follow: bool) -> Child {
    let mut args = vec![
        "consume",
        "--zookeeper",
        zk,
        "--group",
        "g",
        "--topic",
        "events",
        "--auto-commit-ms",
        "200",
    ];
    if follow {
        args.push("--follow");
    }
    Command::new(TRIB)
        .args(&args)
        .stdout(std::fs::File::create(out).unwrap())
        .stderr(std::fs::File::create(out.with_extension("err")).unwrap())
        .spawn()
        .unwrap()
}

fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_owned).collect()
}

fn trib_json(args: &[&str]) -> serde_json::Value {
    let out = Command::new(TRIB).args(args).arg("--json").output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_consumer_killed_with_sigkill_loses_nothing() {
    let zk = ZooKeeperServer::shared().connect_string();
    let mut brokers = Vec::new();
    for id in 0..2 {
        let zk = zk.clone();
        let broker = TestBroker::start_with(move |c| {
            c.broker_id = id;
            c.zookeeper = Some(zk);
            c.flush_messages = 1;
        })
        .await;
        brokers.push(broker);
    }
    brokers[0].connect().await.create_topic("events", 8, &[]).await.unwrap();
    let zk_for_blocking = zk.clone();
    tokio::task::spawn_blocking(move || {
        let zk = zk_for_blocking;
        // Wait for the topic's partitions before producing by discovery.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let described = trib_json(&["topics", "list", "--zookeeper", &zk]);
            let partitions: i64 = described
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["topic"] == "events")
                .map(|t| t["partitions"].as_i64().unwrap())
                .sum();
            if partitions == 8 {
                break;
            }
            assert!(Instant::now() < deadline, "brokers never registered: {described}");
            std::thread::sleep(Duration::from_millis(100));
        }
        let payloads: Vec<String> = (0..600).map(|i| format!("event-{i}")).collect();
        produce(&zk, &payloads[..300]);

        let dir = tempfile::tempdir().unwrap();
        let (first, second) = (dir.path().join("first.out"), dir.path().join("second.out"));
        let mut victim = group_consumer(&zk, &first, true);
        let deadline = Instant::now() + Duration::from_secs(30);
        while lines(&first).len() < 150 {
            assert!(
                Instant::now() < deadline,
                "first consumer stalled: {}",
                std::fs::read_to_string(first.with_extension("err")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        victim.kill().unwrap(); // SIGKILL: no commit, no release
        victim.wait().unwrap();
        produce(&zk, &payloads[300..]);

        // The next member waits out the dead one's session, takes every partition from the
        // committed offsets, and leaves cleanly after 3 s without new messages.
        let mut survivor = group_consumer(&zk, &second, false);
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = survivor.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "second consumer never finished");
            std::thread::sleep(Duration::from_millis(50));
        };
        let err = std::fs::read_to_string(second.with_extension("err")).unwrap();
        assert!(status.success(), "{err}");
        let (a, b) = (lines(&first), lines(&second));
        let seen: BTreeSet<&String> = a.iter().chain(&b).collect();
        let expected: BTreeSet<&String> = payloads.iter().collect();
        let missing: Vec<_> = expected.difference(&seen).collect();
        assert!(
            missing.is_empty(),
            "lost {} messages, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        );
        let duplicates = a.len() + b.len() - payloads.len();
        assert!(
            duplicates <= a.len(),
            "at most what the dead consumer read is read again: {duplicates}"
        );

        // The group as an operator sees it: every partition committed to its log end.
        let groups = trib_json(&["groups", "list", "--zookeeper", &zk]);
        assert_eq!(groups, serde_json::json!(["g"]));
        let described = trib_json(&["groups", "describe", "--zookeeper", &zk, "--group", "g"]);
        let partitions = described["partitions"].as_array().unwrap();
        assert_eq!(partitions.len(), 8, "{described}");
        for p in partitions {
            assert_eq!(p["lag"], 0, "{described}");
            assert!(p["owner"].is_null(), "released on clean exit: {described}");
        }
        assert!(described["members"].as_array().unwrap().is_empty());

        // `brokers list`: both brokers, the 8 partitions' leaderships and replicas between
        // them (replication factor 1), and the topic's bytes of log.
        let listed = trib_json(&["brokers", "list", "--zookeeper", &zk]);
        let rows = listed["brokers"].as_array().unwrap();
        assert_eq!(rows.len(), 2, "{listed}");
        let sum = |key: &str| rows.iter().map(|r| r[key].as_i64().unwrap()).sum::<i64>();
        assert_eq!((sum("leaders"), sum("replicas"), sum("under_replicated")), (8, 8, 0));
        let topic = trib_json(&["topics", "describe", "--zookeeper", &zk, "--topic", "events"]);
        let bytes: i64 = topic["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["latest"].as_i64().unwrap() - p["earliest"].as_i64().unwrap())
            .sum();
        assert!(bytes > 0);
        assert_eq!(sum("log_bytes"), bytes, "{listed}");
        assert_eq!(listed["offline_partitions"], 0);

        // `groups reset`: a plan first, committed only with --execute.
        let reset = ["groups", "reset", "--zookeeper", &zk, "--group", "g", "--topic", "events"];
        let plan = trib_json(&[&reset[..], &["--to", "earliest"]].concat());
        assert_eq!(plan["executed"], false);
        assert!(plan["partitions"].as_array().unwrap().iter().all(|p| p["new"] == 0), "{plan}");
        let described = trib_json(&["groups", "describe", "--zookeeper", &zk, "--group", "g"]);
        assert!(described["partitions"].as_array().unwrap().iter().all(|p| p["lag"] == 0));
        let out = Command::new(TRIB).args(reset).args(["--to", "3", "--execute"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("offset 3"), "no message begins at byte 3: {err}");
        assert!(
            Command::new(TRIB).args(reset).args(["--to", "soon"]).output().unwrap().status.code()
                == Some(2),
            "a bad --to is a usage error"
        );
        let done = trib_json(&[&reset[..], &["--to", "earliest", "--execute"]].concat());
        assert_eq!(done["executed"], true);
        let described = trib_json(&["groups", "describe", "--zookeeper", &zk, "--group", "g"]);
        for p in described["partitions"].as_array().unwrap() {
            assert_eq!(p["committed"], 0, "{described}");
            assert_eq!(p["lag"], p["log_end"], "{described}");
        }
        // Refused while the group has a live member (this one reads everything again, then
        // leaves after 2 s without a new message).
        let dir = tempfile::tempdir().unwrap();
        let again = dir.path().join("again.out");
        let mut member = Command::new(TRIB)
            .args(["consume", "--zookeeper", &zk, "--group", "g", "--topic", "events"])
            .args(["--idle-ms", "2000"])
            .stdout(std::fs::File::create(&again).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while lines(&again).len() < payloads.len() {
            assert!(Instant::now() < deadline, "the member never read the log again");
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = Command::new(TRIB).args(reset).args(["--to", "latest", "--execute"]).output();
        let out = out.unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "a refusal, like a bad argument: {err}");
        assert!(err.contains("has live members"), "{err}");
        assert!(member.wait().unwrap().success());

        // `groups delete`: the group and its offsets go; others stay.
        let delete = ["groups", "delete", "--zookeeper", &zk, "--group", "g"];
        assert_eq!(trib_json(&delete)["executed"], false);
        assert!(trib_json(&["groups", "list", "--zookeeper", &zk]).to_string().contains("\"g\""));
        assert_eq!(trib_json(&[&delete[..], &["--execute"]].concat())["executed"], true);
        assert_eq!(trib_json(&["groups", "list", "--zookeeper", &zk]), serde_json::json!([]));
        let out = Command::new(TRIB).args(delete).output().unwrap();
        assert!(String::from_utf8_lossy(&out.stderr).contains("no consumer group g"));
        assert_eq!(out.status.code(), Some(2));

        // --auto-offset-reset largest: a new group starts at the log end, so it reads none of
        // what is there, and stops after --idle-ms without a new message.
        let args = ["consume", "--zookeeper", &zk, "--group", "late", "--topic", "events"];
        let out = Command::new(TRIB)
            .args(args)
            .args(["--auto-offset-reset", "largest", "--idle-ms", "500"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stdout.is_empty(), "read {} bytes from the log end", out.stdout.len());
    })
    .await
    .unwrap();
    drop(brokers);
}

/// `--zookeeper-auth-file`: an authenticated cluster's group is read by anyone, and deleted
/// only by `trib` given the cluster's digest credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_of_an_authenticated_cluster_change_only_with_its_credentials() {
    let zk = format!("{}/live", ZooKeeperServer::shared().connect_string());
    let dir = tempfile::tempdir().unwrap();
    let digest = dir.path().join("zookeeper.digest");
    std::fs::write(&digest, "tributary:s3cret\n").unwrap();
    let config = cluster::ZooKeeperConfig::new(&zk).with_digest_file(Some(&digest)).unwrap();
    let session = cluster::ZooKeeper::connect(config).await.unwrap();
    cluster::Registry::new(session).commit_offset("g", "events", 0, 7).await.unwrap();
    let zk_for_trib = zk.clone();
    tokio::task::spawn_blocking(move || {
        let zk = zk_for_trib;
        let listed = trib_json(&["groups", "list", "--zookeeper", &zk]);
        assert!(listed.to_string().contains("\"g\""), "{listed}");
        let delete = ["groups", "delete", "--zookeeper", &zk, "--group", "g", "--execute"];
        let out = Command::new(TRIB).args(delete).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("want its digest credentials (zookeeper_auth_file)"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        let out = Command::new(TRIB)
            .args(delete)
            .arg("--zookeeper-auth-file")
            .arg(&digest)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(trib_json(&["groups", "list", "--zookeeper", &zk]), serde_json::json!([]));
        std::fs::write(&digest, "no-password\n").unwrap();
        let out = Command::new(TRIB)
            .args(["groups", "list", "--zookeeper", &zk, "--zookeeper-auth-file"])
            .arg(&digest)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "a bad credentials file is a usage error");
    })
    .await
    .unwrap();
}

/// `trib groups` shows a group that Kafka's own clients keep through the brokers' Kafka
/// listeners beside native groups: kcat (librdkafka) reads a topic in a group and commits;
/// `list` names the group, `describe` gives its committed record numbers, the log ends in
/// records, the lag, and the coordinator the brokers pick; with a member reading, the
/// coordinator's description of it (client id, host, assigned partitions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_show_kafka_protocol_groups() {
    let zk = ZooKeeperServer::shared().connect_string();
    let mut brokers = Vec::new();
    for id in 0..2 {
        let zk = zk.clone();
        let broker = TestBroker::start_with(move |c| {
            c.broker_id = id;
            c.zookeeper = Some(zk);
            c.kafka_port = Some(0);
            c.flush_messages = 1;
        })
        .await;
        brokers.push(broker);
    }
    brokers[0].connect().await.create_topic("events", 2, &[]).await.unwrap();
    let bootstrap = testkit::eventually(Duration::from_secs(20), "Kafka listeners", || async {
        let ports: Option<Vec<String>> = brokers
            .iter()
            .map(|b| b.broker.kafka_port().map(|p| format!("127.0.0.1:{p}")))
            .collect();
        ports.map(|p| p.join(","))
    })
    .await;
    tokio::task::spawn_blocking(move || {
        let payloads: Vec<String> = (0..30).map(|i| format!("event-{i}")).collect();
        produce(&zk, &payloads);
        let consumed = Command::new("kcat")
            .args(["-b", &bootstrap, "-G", "kafka-readers", "events", "-e", "-q"])
            .args(["-X", "auto.offset.reset=earliest", "-X", "auto.commit.interval.ms=100"])
            .output()
            .expect("kcat (scripts/test.sh installs it)");
        let err = String::from_utf8_lossy(&consumed.stderr);
        assert!(consumed.status.success(), "{err}");
        let read: BTreeSet<String> =
            String::from_utf8_lossy(&consumed.stdout).lines().map(str::to_owned).collect();
        assert_eq!(read, payloads.into_iter().collect(), "{err}");

        let listed = trib_json(&["groups", "list", "--zookeeper", &zk]);
        assert_eq!(listed, serde_json::json!(["kafka-readers"]));
        let text =
            Command::new(TRIB).args(["groups", "list", "--zookeeper", &zk]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&text.stdout), "kafka-readers  (Kafka protocol)\n");

        let describe = ["groups", "describe", "--zookeeper", &zk, "--group", "kafka-readers"];
        let deadline = Instant::now() + Duration::from_secs(20);
        let described = loop {
            let described = trib_json(&describe);
            let committed: i64 = described["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["committed"].as_i64().unwrap())
                .sum();
            if committed == 30 || Instant::now() > deadline {
                break described;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        assert_eq!(described["protocol"], "kafka");
        assert!([0, 1].contains(&described["coordinator"].as_i64().unwrap()), "{described}");
        let partitions = described["partitions"].as_array().unwrap();
        assert_eq!(partitions.len(), 2, "{described}");
        let mut total = 0;
        for p in partitions {
            assert_eq!(p["topic"], "events");
            assert_eq!(p["log_end"], p["committed"], "{described}");
            assert_eq!(p["lag"], 0, "{described}");
            total += p["committed"].as_i64().unwrap();
        }
        assert_eq!(total, 30, "{described}");
        let text = Command::new(TRIB).args(describe).output().unwrap();
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            text.starts_with("group kafka-readers (Kafka protocol): coordinator broker "),
            "{text}"
        );

        // A member at work: its coordinator describes it, and which partitions it reads.
        let mut member = Command::new("kcat")
            .args(["-b", &bootstrap, "-G", "kafka-readers", "events", "-q"])
            .args(["-X", "client.id=reader-one"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let described = loop {
            let described = trib_json(&describe);
            if described["state"] == "Stable" || Instant::now() > deadline {
                break described;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let text = Command::new(TRIB).args(describe).output().unwrap();
        let _ = member.kill();
        let _ = member.wait();
        assert_eq!(described["state"], "Stable", "{described}");
        let members = described["members"].as_array().unwrap();
        assert_eq!(members.len(), 1, "{described}");
        assert_eq!(members[0]["client_id"], "reader-one", "{described}");
        assert_eq!(members[0]["assignment"], serde_json::json!({"events": [0, 1]}), "{described}");
        for p in described["partitions"].as_array().unwrap() {
            assert_eq!(p["owner"], members[0]["member_id"], "{described}");
        }
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains("state Stable, 1 member(s)"), "{text}");
        assert!(text.contains("client reader-one"), "{text}");
    })
    .await
    .unwrap();
    drop(brokers);
}
