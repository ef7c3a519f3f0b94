//! Kafka's own clients, unchanged, against three `broker` processes in a real ZooKeeper, each
//! with a Kafka listener (`--kafka-port 0`): kcat (librdkafka 2.0 from Debian), confluent-kafka
//! (librdkafka 2.x from PyPI) and kafka-python 3. The Python parts are scripts beside this file
//! (`tests/kafka/`), each printing what it saw as one JSON line; `scripts/test.sh` installs the
//! clients.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cluster::Registry;
use testkit::broker_processes::{BrokerProcesses, registry};
use testkit::eventually;
use testkit::process::free_port;
use testkit::proxy::AckDropper;
use testkit::zookeeper::ZooKeeperServer;

const BINARY: &str = env!("CARGO_BIN_EXE_broker");
const WAIT: Duration = Duration::from_secs(60);

struct Cluster {
    brokers: BrokerProcesses,
    registry: Registry,
    /// Every broker's Kafka listener, `host:port,…`.
    bootstrap: String,
}

/// Three brokers, topics of 3 partitions and replication factor 3 (2 in sync for acks all),
/// retention checked every 200 ms, the cleaner every 300 ms.
async fn cluster() -> Cluster {
    cluster_with(&[]).await
}

/// [`cluster`] with more arguments for every broker.
async fn cluster_with(more: &[&str]) -> Cluster {
    let connect = ZooKeeperServer::shared().connect_string();
    let mut args = vec![
        "--kafka-port",
        "0",
        "--flush-ms",
        "10",
        "--num-partitions",
        "3",
        "--default-replication-factor",
        "3",
        "--min-insync-replicas",
        "2",
        "--retention-check-ms",
        "200",
        "--cleaner-interval-ms",
        "300",
    ];
    args.extend_from_slice(more);
    let brokers = BrokerProcesses::start(Path::new(BINARY), &connect, 3, &args);
    let registry = registry(&connect).await;
    let bootstrap = eventually(WAIT, "three brokers with Kafka listeners registered", || async {
        let brokers = registry.brokers().await.ok()?;
        let listeners: Vec<String> = brokers
            .values()
            .filter_map(|b| b.kafka_port.map(|port| format!("{}:{port}", b.host)))
            .collect();
        (listeners.len() == 3).then(|| listeners.join(","))
    })
    .await;
    Cluster { brokers, registry, bootstrap }
}

/// Runs a client command to its end; its stdout, or a panic with everything it printed.
fn run(program: &str, args: &[&str], stdin: &[u8]) -> String {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/test.sh installs Kafka's clients)"));
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let output = child.wait_with_output().unwrap();
    let (out, err) =
        (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{program} {args:?} failed: {}\n{out}\n{err}", output.status);
    out.into_owned()
}

fn script(name: &str) -> String {
    format!("{}/tests/kafka/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The JSON object a script printed last.
fn report(out: &str) -> serde_json::Value {
    serde_json::from_str(out.lines().last().expect("a report line")).expect("a JSON report")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_produces_keys_and_headers_and_reads_them_back_with_their_offsets() {
    let cluster = cluster().await;
    let b = cluster.bootstrap.as_str();
    let lines: Vec<String> = (0..50).map(|i| format!("key-{i}\tvalue {i} with spaces")).collect();
    let input = lines.join("\n") + "\n";
    run(
        "kcat",
        &["-b", b, "-P", "-t", "kcat", "-p", "1", "-K", "\t", "-H", "source=kcat", "-H", "n=1"],
        input.as_bytes(),
    );
    let read = eventually(WAIT, "kcat to read the 50 messages back", || async {
        let out = run(
            "kcat",
            &["-b", b, "-C", "-t", "kcat", "-p", "1", "-e", "-f", "%o\t%k\t%s\t%h\n"],
            b"",
        );
        let read: Vec<String> = out.lines().map(str::to_owned).collect();
        (read.len() == 50).then_some(read)
    })
    .await;
    for (i, line) in read.iter().enumerate() {
        assert_eq!(*line, format!("{i}\tkey-{i}\tvalue {i} with spaces\tsource=kcat,n=1"));
    }
    // From an offset in the middle, and the offsets kcat is told.
    let from_ten =
        run("kcat", &["-b", b, "-C", "-t", "kcat", "-p", "1", "-o", "10", "-e", "-f", "%o\n"], b"");
    assert_eq!(from_ten.lines().next(), Some("10"));
    let ends = run("kcat", &["-b", b, "-Q", "-t", "kcat:1:-1"], b"");
    assert!(ends.contains("offset 50"), "{ends}");

    // kcat -L: leaders and in-sync replicas as ZooKeeper has them.
    let listing = run("kcat", &["-b", b, "-L", "-t", "kcat", "-J"], b"");
    let listing: serde_json::Value = serde_json::from_str(&listing).unwrap();
    let states = cluster.registry.partition_states("kcat").await.unwrap();
    let partitions = listing["topics"][0]["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 3);
    for p in partitions {
        let (state, _) = &states[&(p["partition"].as_i64().unwrap() as i32)];
        assert_eq!(p["leader"].as_i64(), Some(i64::from(state.leader)));
        let mut isrs: Vec<i64> =
            p["isrs"].as_array().unwrap().iter().map(|i| i["id"].as_i64().unwrap()).collect();
        isrs.sort();
        let mut expected: Vec<i64> = state.isr.iter().map(|&i| i64::from(i)).collect();
        expected.sort();
        assert_eq!(isrs, expected);
    }
    drop(cluster.brokers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_groups_share_partitions_rebalance_and_resume_at_committed_offsets() {
    let cluster = cluster().await;
    let out = run("python3", &[&script("groups.py"), &cluster.bootstrap, "grouped"], b"");
    let report = report(&out);
    eprintln!("confluent-kafka groups: {report}");
    assert_eq!(report["resumed"], 1000);
    let assigned = report["three_members_assignment"].as_object().unwrap();
    assert!(assigned.values().all(|a| a.as_array().unwrap().len() == 2), "{assigned:?}");
    // Committed offsets are record numbers in ZooKeeper.
    let offsets = cluster.registry.kafka_offsets("grouped-readers").await.unwrap();
    let committed: i64 = offsets["grouped"].values().sum();
    assert_eq!(committed, 7000, "{offsets:?}");
    drop(cluster.brokers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_that_commit_in_their_revocation_callbacks_read_nothing_twice() {
    let cluster = cluster().await;
    let out =
        run("python3", &[&script("rebalance_commits.py"), &cluster.bootstrap, "revoked"], b"");
    let report = report(&out);
    eprintln!("commits in revocation callbacks: {report}");
    assert_eq!(
        (report["distinct"].clone(), report["delivered_twice"].clone()),
        (6000.into(), 0.into())
    );
    assert_eq!(report["refused_commits"], 0, "{report}");
    drop(cluster.brokers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_members_keep_their_partitions_and_admin_clients_manage_groups() {
    let cluster = cluster().await;
    let out = run("python3", &[&script("group_admin.py"), &cluster.bootstrap, "managed"], b"");
    let report = report(&out);
    eprintln!("group admin: {report}");
    assert_eq!(report["static_restart"]["a_rebalances_during"], 0);
    assert_eq!(report["delete_with_members"], "NON_EMPTY_GROUP");
    assert_eq!(report["commit_unknown_topic"], "UNKNOWN_TOPIC_OR_PART");
    let deleted = &report["kafka_python_delete_groups"];
    assert_eq!(deleted["managed-meta"], "OK", "{deleted}");
    assert!(deleted["managed-never"].as_str().unwrap().contains("GroupIdNotFound"), "{deleted}");
    // Deleted from ZooKeeper, with its offsets.
    let groups = cluster.registry.kafka_groups().await.unwrap();
    assert!(!groups.iter().any(|g| g.starts_with("managed")), "{groups:?}");
    drop(cluster.brokers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_clients_change_configs_add_partitions_and_delete_topics() {
    let cluster = cluster().await;
    let out = run("python3", &[&script("topic_admin.py"), &cluster.bootstrap, "administered"], b"");
    let report = report(&out);
    eprintln!("topic admin: {report}");
    let refusals = &report["refusals"];
    assert_eq!(refusals["bad_policy"], "INVALID_CONFIG", "{refusals}");
    assert_eq!(refusals["unknown"], "INVALID_CONFIG", "{refusals}");
    assert_eq!(refusals["not_a_number"], "INVALID_CONFIG", "{refusals}");
    assert_eq!(refusals["describe_missing"], "UNKNOWN_TOPIC_OR_PART", "{refusals}");
    assert_eq!(refusals["fewer_partitions"], "INVALID_PARTITIONS", "{refusals}");
    assert_eq!(refusals["delete_again"], "UNKNOWN_TOPIC_OR_PART", "{refusals}");
    let unknown_broker = refusals["reassign_to_unknown_broker"].as_str().unwrap();
    assert!(unknown_broker.contains("InvalidReplicationAssignment"), "{refusals}");
    assert_eq!(report["elected"]["1"], "NONE", "{report}");
    assert_eq!(report["elected_again"]["1"], "ELECTION_NOT_NEEDED", "{report}");
    assert_eq!(report["cluster"]["brokers"], 3);
    assert_eq!(report["invalid_topic"]["errors"], serde_json::json!(["TOPIC_EXCEPTION"]));
    assert!(report["invalid_topic"]["seconds"].as_f64().unwrap() < 10.0, "{report}");
    assert_eq!(report["kafka_python_cluster"]["brokers"], 3);
    // Gone from the registry too.
    let topics = cluster.registry.topics().await.unwrap();
    assert!(!topics.iter().any(|t| t.starts_with("administered")), "{topics:?}");
    drop(cluster.brokers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_by_time_is_exact_to_the_record() {
    let cluster = cluster().await;
    let out = run("python3", &[&script("timestamps.py"), &cluster.bootstrap, "stamped"], b"");
    let report = report(&out);
    eprintln!("timestamps: {report}");
    assert_eq!(report["produced"], 300);
    assert_eq!(report["librdkafka_asked"], 592);
    assert_eq!(report["kcat_wrong"], serde_json::json!([]));
    assert_eq!(report["librdkafka_wrong"], serde_json::json!([]));
    assert_eq!(report["read_as_sent"], true);
    drop(cluster.brokers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_append_time_topic_stamps_records_with_the_leaders_clock() {
    let cluster = cluster().await;
    let out = run("python3", &[&script("append_time.py"), &cluster.bootstrap, "appended"], b"");
    let report = report(&out);
    eprintln!("append time: {report}");
    assert_eq!(report["described"], "LogAppendTime");
    assert_eq!(report["delivered"], 100);
    assert_eq!(report["delivered_stamped"], true);
    assert_eq!(report["read_as_delivered"], true);
    assert_eq!(report["by_time_wrong"], serde_json::json!([]));
    drop(cluster.brokers);
}

/// The segment files and the log start file of `topic`'s partition 0 on broker `id`.
fn partition_files(cluster: &Cluster, id: i32, topic: &str) -> (Vec<String>, String) {
    let dir = cluster.brokers.data_dir(id).join(format!("{topic}-0"));
    let mut segments: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            let names = entries.filter_map(|e| e.ok()?.file_name().into_string().ok());
            names.filter(|name| name.ends_with(".log")).collect()
        })
        .unwrap_or_default();
    segments.sort();
    (segments, std::fs::read_to_string(dir.join("log-start")).unwrap_or_default())
}

/// DeleteRecords from both Python admin clients (`tests/kafka/delete_records.py`): the log
/// start moves on every replica alike (the same start file, the segments wholly before it
/// deleted), and a new leader starts where the old one did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_moves_the_log_start_of_every_replica() {
    let mut cluster = cluster().await;
    let args = [script("delete_records.py"), cluster.bootstrap.clone(), "trimmed".into()];
    let out = run("python3", &[&args[0], &args[1], &args[2], "delete"], b"");
    let deleted = report(&out);
    eprintln!("delete records: {deleted}");
    assert_eq!(deleted["read_from_10"], 120);
    assert_eq!(deleted["kafka_python_low_watermark"], 150);
    assert_eq!(deleted["past_the_end"], "OFFSET_OUT_OF_RANGE");
    let files = eventually(WAIT, "every replica at the same start", || async {
        let files: Vec<_> = (0..3).map(|id| partition_files(&cluster, id, "trimmed")).collect();
        let same = files.iter().all(|f| *f == files[0]);
        (same && !files[0].1.is_empty()).then_some(files)
    })
    .await;
    let (segments, start) = &files[0];
    eprintln!("every replica: segments {segments:?}, log start {start:?}");
    // 200 records of about 100 bytes in segments of 4 KiB: about five, three of them before
    // record 150.
    assert!((1..=3).contains(&segments.len()), "{segments:?} with start {start}");
    let (leader, _) = cluster.registry.leader("trimmed", 0).await.unwrap().unwrap();
    cluster.brokers.kill(leader);
    eventually(WAIT, "another leader", || async {
        let state = cluster.registry.partition_state("trimmed", 0).await.ok()??;
        (state.0.leader >= 0 && state.0.leader != leader).then_some(())
    })
    .await;
    let out = run("python3", &[&args[0], &args[1], &args[2], "check"], b"");
    eprintln!("after the leader's death: {}", report(&out));
}

/// A compacted topic (`tests/kafka/compacted.py`): read back after the cleaner ran, it holds
/// the last value of each key at its offset and no expired tombstone, a keyless record is
/// refused with INVALID_RECORD, and every replica's segments end byte-identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_topic_keeps_the_last_value_of_each_key_on_every_replica() {
    let cluster = cluster().await;
    let out = run("python3", &[&script("compacted.py"), &cluster.bootstrap, "compacted"], b"");
    let report = report(&out);
    eprintln!("compacted: {report}");
    assert_eq!(report["cleanup.policy"], "compact");
    assert_eq!(report["keyless"], "INVALID_RECORD");
    assert_eq!((report["keys"].clone(), report["tombstones_left"].clone()), (35.into(), 0.into()));
    let read = report["records_read"].as_u64().unwrap();
    let written = report["last_offset"].as_u64().unwrap() + 1;
    assert!(read * 4 < written, "{read} of {written} records read back");
    let contents = |id: i32| -> Vec<(String, Vec<u8>)> {
        let dir = cluster.brokers.data_dir(id).join("compacted-0");
        let (segments, _) = partition_files(&cluster, id, "compacted");
        segments
            .iter()
            .map(|s| (s.clone(), std::fs::read(dir.join(s)).unwrap_or_default()))
            .collect()
    };
    eventually(WAIT, "every replica's segments byte-identical", || async {
        let replicas: Vec<_> = (0..3).map(contents).collect();
        (replicas.iter().all(|r| *r == replicas[0]) && replicas[0].len() > 1).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_idempotent_producer_is_read_back_once() {
    let cluster = cluster().await;
    let out = run("python3", &[&script("idempotent.py"), &cluster.bootstrap, "idempotent"], b"");
    let report = report(&out);
    eprintln!("kafka-python: {report}");
    assert_eq!(report["idempotent"], true);
    assert_eq!((report["read"].clone(), report["distinct"].clone()), (1000.into(), 1000.into()));
    drop(cluster.brokers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_under_an_acks_all_producer_loses_nothing() {
    // Three leaders killed in CI; the fifty:
    // `KAFKA_FAILOVER_KILLS=50 cargo test -p broker --test kafka_clients a_leader_killed -- --nocapture`.
    leaders_killed_under_confluent_kafka(false).await;
}

/// [`a_leader_killed_under_an_acks_all_producer_loses_nothing`] with every fifth produce
/// answer lost as well (each broker advertises a proxy in front of its Kafka listener that
/// closes the connection instead of relaying it): nothing is stored twice. Fifty kills:
/// `KAFKA_FAILOVER_KILLS=50 cargo test -p broker --test kafka_clients lost_answers_and -- --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_answers_and_leaders_killed_store_nothing_twice_under_confluent_kafka() {
    leaders_killed_under_confluent_kafka(true).await;
}

/// Kills the leader of partition 0 again and again under confluent-kafka's idempotent acks-all
/// producer (`tests/kafka/failover.py`); with `lost_answers`, behind proxies that lose every
/// fifth produce answer.
async fn leaders_killed_under_confluent_kafka(lost_answers: bool) {
    let kills = number_from_env("KAFKA_FAILOVER_KILLS", 3);
    let more: &[&str] = if lost_answers { &["--kafka-advertised-port", "0"] } else { &[] };
    let mut cluster = cluster_with(more).await;
    let mut proxies = Vec::new();
    if lost_answers {
        for id in 0..3 {
            let (_, _, kafka, advertised) = cluster.brokers.advertised_ports(id);
            let listen = SocketAddr::from(([127, 0, 0, 1], advertised));
            let upstream = SocketAddr::from(([127, 0, 0, 1], kafka));
            // Kafka's Produce is API key 0.
            proxies.push(AckDropper::start(listen, upstream, &[0], 5).await);
        }
    }
    let mut producer = Command::new("python3")
        .args([&script("failover.py"), &cluster.bootstrap, "failover"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    let in_sync_leader = || async {
        eventually(WAIT, "partition 0 led with every replica in sync", || async {
            let state = cluster.registry.partition_state("failover", 0).await.ok()??;
            (state.0.leader >= 0 && state.0.isr.len() == 3).then_some(state.0.leader)
        })
        .await
    };
    let mut killed = Vec::new();
    for _ in 0..kills {
        let leader = in_sync_leader().await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        cluster.brokers.kill(leader);
        killed.push(leader);
        eventually(WAIT, "another leader of partition 0", || async {
            let state = cluster.registry.partition_state("failover", 0).await.ok()??;
            (state.0.leader >= 0 && state.0.leader != leader).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        cluster.brokers.restart(leader);
    }
    in_sync_leader().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    producer.stdin.take().unwrap().write_all(b"stop\n").unwrap();
    let output = producer.wait_with_output().unwrap();
    let (out, err) =
        (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "failover.py: {out}\n{err}");
    let report = report(&out);
    let lost: u64 = proxies.iter().map(AckDropper::dropped).sum();
    eprintln!(
        "leaders {killed:?} killed under confluent-kafka acks all, {lost} answers lost: {report}"
    );
    assert!(!lost_answers || lost > 0, "no answer was lost");
    assert_eq!(report["missing"], 0);
    // Every message was acknowledged in the end: no producer stalled past its timeout.
    assert_eq!(report["failed"], 0, "{report}");
    // Idempotent: a batch retried across the failover is not appended twice.
    assert_eq!(report["repeats"], 0, "{report}");
    assert!(report["acknowledged"].as_u64().unwrap() > 1000, "{report}");
}

/// confluent-kafka's idempotent producer, with every fourth produce answer lost on its way
/// back (a proxy in front of the Kafka listener, which the broker advertises, closes the
/// connection instead of relaying it): librdkafka sends those batches again, and the broker
/// answers each where it is — every message is in the log once. The same run without
/// idempotence stores some twice, which shows that answers were lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_produce_answers_store_nothing_twice_under_an_idempotent_kafka_producer() {
    const COUNT: u64 = 10_000;
    let (kafka, advertised) = (free_port(), free_port());
    let connect = ZooKeeperServer::shared().connect_string();
    let (kafka_arg, advertised_arg) = (kafka.to_string(), advertised.to_string());
    let args = ["--kafka-port", &kafka_arg, "--kafka-advertised-port", &advertised_arg];
    let brokers = BrokerProcesses::start(Path::new(BINARY), &connect, 1, &args);
    let listen = SocketAddr::from(([127, 0, 0, 1], advertised));
    let upstream = SocketAddr::from(([127, 0, 0, 1], kafka));
    // Kafka's Produce is API key 0.
    let proxy = AckDropper::start(listen, upstream, &[0], 4).await;
    let bootstrap = proxy.addr().to_string();
    let mut lost = 0;
    for (topic, idempotence) in [("answers-lost", "true"), ("answers-lost-plain", "false")] {
        let script = script("lost_answers.py");
        let count = COUNT.to_string();
        let out = run("python3", &[&script, &bootstrap, topic, idempotence, &count], b"");
        let report = report(&out);
        let dropped = proxy.dropped() - lost;
        lost += dropped;
        eprintln!("enable.idempotence={idempotence}, {dropped} produce answers lost: {report}");
        assert!(dropped > 0, "no answer was lost");
        assert_eq!(report["acknowledged"], COUNT, "{report}");
        assert_eq!(report["distinct"], COUNT, "{report}");
        let read = report["read"].as_u64().unwrap();
        match idempotence {
            "true" => assert_eq!(read, COUNT, "a message stored twice: {report}"),
            _ => assert!(read > COUNT, "no message stored twice without idempotence: {report}"),
        }
    }
    drop(brokers);
}

/// confluent-kafka's transactional producer: what read_committed and read_uncommitted
/// consumers see of committed and aborted transactions, a zombie fenced, a transaction open
/// past its timeout aborted, and a consume-transform-produce loop whose offsets commit with
/// its output (`tests/kafka/transactions.py` asserts each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_transactions_commit_abort_fence_and_time_out() {
    let cluster = cluster().await;
    let out = run("python3", &[&script("transactions.py"), &cluster.bootstrap, "transacted"], b"");
    eprintln!("confluent-kafka: {}", report(&out));
    // A native reader of committed transactions (the loader's) reads what read_committed did;
    // one that reads everything also reads the aborted and the expired transactions.
    let committed = read_natively(&cluster, "transacted", true).await;
    let everything = read_natively(&cluster, "transacted", false).await;
    let count =
        |values: &[String], prefix: &str| values.iter().filter(|v| v.starts_with(prefix)).count();
    for prefix in ["committed", "later", "second", "after-expiry"] {
        assert_eq!(count(&committed, prefix), count(&everything, prefix), "{prefix}");
    }
    assert_eq!(committed.len(), 150, "committed, later, second, after-expiry");
    assert_eq!(count(&committed, "aborted") + count(&committed, "expired"), 0);
    assert_eq!(count(&everything, "aborted"), 50);
    assert_eq!(count(&everything, "expired"), 10);
}

/// Every value of `topic`'s three partitions as a native consumer reads them from each
/// partition's leader, with or without [`client::SimpleConsumerConfig::read_committed`].
async fn read_natively(cluster: &Cluster, topic: &str, read_committed: bool) -> Vec<String> {
    let mut values = Vec::new();
    for partition in 0..3 {
        let (state, _) = cluster.registry.partition_state(topic, partition).await.unwrap().unwrap();
        let config = client::SimpleConsumerConfig { read_committed, ..Default::default() };
        let addr = cluster.brokers.addr(state.leader);
        let consumer = client::SimpleConsumer::connect(&addr, config).await.unwrap();
        let mut offset = consumer.earliest_offset(topic, partition).await.unwrap();
        let end = consumer.latest_offset(topic, partition).await.unwrap();
        while offset < end {
            let fetched = consumer.fetch(topic, partition, offset).await.unwrap();
            if fetched.is_empty() {
                break;
            }
            for message in fetched.iter() {
                values.push(String::from_utf8_lossy(&message.unwrap().payload).into_owned());
            }
            offset = fetched.end_offset();
        }
    }
    values
}

/// A consume-transform-produce loop under confluent-kafka's transactional producer, killed -9
/// again and again mid-transaction and started again each time: every input record is in
/// its output once (read committed), its committed offsets where its output says. Twenty
/// kills, as the issue asks:
/// `TXN_KILLS=20 cargo test -p broker --test kafka_clients a_transform_loop -- --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transform_loop_killed_mid_transaction_moves_every_record_once() {
    let kills = number_from_env("TXN_KILLS", 5).to_string();
    let cluster = cluster().await;
    let script = script("transform_kills.py");
    let out = run("python3", &[&script, &cluster.bootstrap, "transformed", &kills, "3000"], b"");
    eprintln!("transform loop killed -9: {}", report(&out));
}

/// A transaction over three partitions, its records written, a partition leader killed -9,
/// then its commit: the transaction is read whole or not at all (committed: whole).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_before_the_commit_leaves_the_transaction_whole() {
    let mut cluster = cluster().await;
    let mut client = Command::new("python3")
        .args([&script("txn_leader_kill.py"), &cluster.bootstrap, "txn-killed"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3");
    let mut out = std::io::BufReader::new(client.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "flushed", "the script ended early");
    let state = cluster.registry.partition_state("txn-killed", 1).await.unwrap().unwrap();
    cluster.brokers.kill(state.0.leader);
    client.stdin.take().unwrap().write_all(b"commit\n").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let status = client.wait().unwrap();
    eprintln!("leader {} of partition 1 killed before the commit: {rest}", state.0.leader);
    assert!(status.success(), "txn_leader_kill.py: {rest}");
    cluster.brokers.restart(state.0.leader);
}

/// A transaction decided by a coordinator that then died: its records written, the decision
/// (PrepareCommit) put in the registry as the coordinator writes it, the coordinator killed -9
/// before any marker. The broker that coordinates the id next finds the decision and writes
/// the markers: a read_committed consumer reads the whole transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_decided_by_a_coordinator_that_died_is_finished_by_the_next() {
    let mut cluster = cluster().await;
    let (topic, id) = ("taken-over", "takeover-taken-over");
    let mut client = Command::new("python3")
        .args([&script("txn_takeover.py"), &cluster.bootstrap, topic])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3");
    let mut out = std::io::BufReader::new(client.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "flushed", "the script ended early");
    let coordinator = cluster::kafka_coordinator(id, 0..3).unwrap();
    cluster.brokers.kill(coordinator);
    let (mut record, version) = cluster.registry.transaction(id).await.unwrap().unwrap();
    assert_eq!(record.phase, cluster::TxnPhase::Ongoing);
    assert_eq!(record.partitions[topic].len(), 3, "{record:?}");
    record.phase = cluster::TxnPhase::PrepareCommit;
    cluster.registry.write_transaction(id, &record, Some(version)).await.unwrap();
    client.stdin.take().unwrap().write_all(b"read\n").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let status = client.wait().unwrap();
    eprintln!("coordinator {coordinator} killed after deciding: {rest}");
    assert!(status.success(), "txn_takeover.py: {rest}");
    let (record, _) = cluster.registry.transaction(id).await.unwrap().unwrap();
    assert_eq!(record.phase, cluster::TxnPhase::CompleteCommit);
    cluster.brokers.restart(coordinator);
}

/// A seconds setting from the environment, or `default`.
fn number_from_env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The soak through Kafka's clients (`tests/kafka/soak.py`): a producer at acks all, three
/// group members that leave and join every few seconds and commit in their revocation
/// callbacks, and a broker killed -9 (and started again 5 s later) every
/// `KAFKA_SOAK_KILL_SECS`, for `KAFKA_SOAK_SECS`. In the test run 40 s with one kill; the
/// ten-minute run is
/// `KAFKA_SOAK_SECS=600 KAFKA_SOAK_KILL_SECS=60 cargo test -p broker --test kafka_clients soak -- --nocapture`.
/// Every acknowledged message is consumed; a message delivered twice must be delivered again
/// within 45 s of a kill (members only leave cleanly, so nothing else may repeat one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soak_with_churning_members_and_killed_brokers_consumes_every_message() {
    let seconds = number_from_env("KAFKA_SOAK_SECS", 40);
    let every = number_from_env("KAFKA_SOAK_KILL_SECS", 20).max(10);
    let mut cluster = cluster().await;
    // librdkafka logs every refused connection to stderr: into a file, as a pipe nobody reads
    // until the end fills and then blocks its threads, producer and consumers with them.
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let soak = Command::new("python3")
        .args([&script("soak.py"), &cluster.bootstrap, "soak", &seconds.to_string()])
        .stdout(Stdio::piped())
        .stderr(stderr.reopen().unwrap())
        .spawn()
        .expect("python3");
    let started = Instant::now();
    let unix_now = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    let mut kills: Vec<(i32, f64)> = Vec::new();
    let mut at = every;
    while at + 5 < seconds {
        tokio::time::sleep(Duration::from_secs(at).saturating_sub(started.elapsed())).await;
        let victim = kills.len() as i32 % cluster.brokers.count();
        cluster.brokers.kill(victim);
        kills.push((victim, unix_now()));
        tokio::time::sleep(Duration::from_secs(5)).await;
        cluster.brokers.restart(victim);
        at += every;
    }
    let output =
        tokio::task::spawn_blocking(move || soak.wait_with_output().unwrap()).await.unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    let err = std::fs::read_to_string(stderr.path()).unwrap_or_default();
    assert!(out.lines().last().is_some(), "soak.py printed no report: {err}");
    let report = report(&out);
    let repeats: Vec<f64> =
        report["duplicate_times"].as_array().unwrap().iter().map(|t| t.as_f64().unwrap()).collect();
    let after_kill = |t: f64| kills.iter().any(|&(_, k)| k <= t && t <= k + 45.0);
    let unexplained: Vec<f64> = repeats.iter().copied().filter(|&t| !after_kill(t)).collect();
    eprintln!(
        "soak of {seconds} s, brokers killed {:?}: sent {}, acknowledged {}, consumed {}, \
         missing {}, delivered twice {} ({} not after a kill), members started {}, left {}, \
         refused commits {}, failed deliveries {}",
        kills.iter().map(|(id, _)| id).collect::<Vec<_>>(),
        report["sent"],
        report["acknowledged"],
        report["consumed"],
        report["missing"],
        repeats.len(),
        unexplained.len(),
        report["members_started"],
        report["members_left"],
        report["refused_commits"],
        report["failed_deliveries"],
    );
    if !output.status.success() {
        // What the cluster looked like at the end, and every broker's log, kept for a look.
        let states = cluster.registry.partition_states("soak").await;
        eprintln!("partition states at the end: {states:?}\nsoak.py progress:\n{err}");
        let kept = std::env::temp_dir().join("tributary-kafka-soak");
        let _ = std::fs::create_dir_all(&kept);
        for id in 0..cluster.brokers.count() {
            let _ = std::fs::write(kept.join(format!("broker-{id}.log")), cluster.brokers.log(id));
        }
        eprintln!("broker logs kept in {}", kept.display());
    }
    assert!(output.status.success(), "soak.py: {out}\n{err}");
    assert_eq!(report["missing"], 0, "{out}");
    assert!(report["acknowledged"].as_u64().unwrap() > 1000, "{out}");
    assert!(
        unexplained.is_empty(),
        "messages delivered twice with no broker killed before: {unexplained:?}"
    );
    drop(cluster.brokers);
}
