//! `tributary-bench replication`: what replication costs and how fast it fails over, on
//! three processes of the release `broker` in a real ZooKeeper (Debian's, started here).
//!
//! 1. Throughput: the paper's producer — batches of `--batch` messages of `--message-bytes`,
//!    pipelined on one connection to one partition's leader — into a topic with replication
//!    factor 1 and acks 1, and into one with replication factor 3, `min_insync_replicas` 2
//!    and acks all, the latter also as an idempotent producer (each batch one magic-2 message
//!    with a producer id and sequence, as IDEMPOTENT_PRODUCE); rounds alternate, and the
//!    ratios of the medians are reported.
//! 2. Failover: the leader of a partition of a replication-factor-3 topic is killed with
//!    `kill -9` `--kills` times (each restarted; the cluster heals before the next kill) while
//!    an acks-all producer offers `--rate` messages a second; each failover is the time from
//!    the kill to the first acks-all produce to that partition that succeeds. At the end every
//!    acknowledged message is looked for in the partitions' logs.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use bytes::{Bytes, BytesMut};
use client::{Connection, ConnectionConfig};
use protocol::record_batch::RecordBatchBuilder;
use protocol::{Acks, Codec, ProduceRequest, Request};
use serde::{Deserialize, Serialize};
use testkit::broker_processes::{
    BrokerProcesses, KillPlan, kill_leaders, read_partition, registry,
};
use testkit::zookeeper::ZooKeeperServer;

use crate::peer::BenchResult;

/// Produce requests in flight on the throughput run's connection.
const IN_FLIGHT_MAX: usize = 512;

#[derive(Debug, Clone, clap::Args)]
pub struct ReplicationArgs {
    /// Messages per throughput round.
    #[arg(long, default_value_t = 2_000_000)]
    pub messages: u64,
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(8..=(1 << 20)))]
    pub message_bytes: u64,
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub batch: u64,
    /// Throughput rounds per topic, alternating.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub rounds: u64,
    /// Leaders killed in the failover run.
    #[arg(long, default_value_t = 50)]
    pub kills: usize,
    /// Messages per second the failover run's producer offers.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub rate: u64,
    /// The brokers' ZooKeeper session timeout: a killed leader's partitions move once it ends.
    #[arg(long, default_value_t = 6_000, value_parser = clap::value_parser!(u64).range(1_000..=60_000))]
    pub session_timeout_ms: u64,
    /// The broker binary; by default the one beside this binary.
    #[arg(long)]
    pub broker_bin: Option<PathBuf>,
    /// Where report.md and results.json go.
    #[arg(long, default_value = "bench-results/replication")]
    pub out: PathBuf,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ReplicationReport {
    pub date: String,
    pub machine: String,
    pub command: String,
    pub messages: u64,
    pub message_bytes: u64,
    pub batch: u64,
    /// Messages per second of each round, replication factor 1 with acks 1.
    pub rf1_acks1: Vec<f64>,
    /// Messages per second of each round, replication factor 3 with acks all.
    pub rf3_acks_all: Vec<f64>,
    pub ratio: f64,
    /// Messages per second of each round, replication factor 3 with acks all, idempotent.
    #[serde(default)]
    pub rf3_idempotent: Vec<f64>,
    /// Its median over the plain acks-all median.
    #[serde(default)]
    pub idempotent_ratio: f64,
    pub session_timeout_ms: u64,
    /// Each kill's failover, in ms, in kill order.
    pub failovers_ms: Vec<f64>,
    pub acknowledged: u64,
    pub unacknowledged: u64,
    /// Acknowledged messages missing from the logs at the end (must be 0).
    pub lost: u64,
}

pub async fn run(args: ReplicationArgs, date: String, machine: String) -> BenchResult<()> {
    let broker_bin = match &args.broker_bin {
        Some(path) => path.clone(),
        None => crate::tributary::Tributary::beside_this_binary()?,
    };
    ensure!(
        broker_bin.is_file(),
        "no broker binary at {} (build it: cargo build --release -p broker)",
        broker_bin.display()
    );
    let zookeeper = tokio::task::spawn_blocking(ZooKeeperServer::start).await.map_err(|_| {
        anyhow::anyhow!("ZooKeeper did not start (is Debian's zookeeper installed?)")
    })?;
    let connect = zookeeper.connect_string();
    let session = args.session_timeout_ms.to_string();
    let broker_args = ["--zookeeper-session-timeout-ms", &session, "--flush-ms", "10"];
    let mut brokers = BrokerProcesses::start(&broker_bin, &connect, 3, &broker_args);
    let registry = registry(&connect).await;
    let registered = wait_for(Duration::from_secs(60), "three brokers registered", || async {
        registry.brokers().await.is_ok_and(|b| b.len() == 3)
    })
    .await;
    if let Err(e) = registered {
        anyhow::bail!("{e}\n{}", brokers.report());
    }
    let admin = Connection::connect(&brokers.addr(0)).await?;
    let replicated = [("replication_factor", "3"), ("min_insync_replicas", "2")];
    admin.create_topic("rf1", 1, &[("replication_factor", "1")]).await?;
    admin.create_topic("rf3", 1, &replicated).await?;
    admin.create_topic("failover", 3, &replicated).await?;
    for (topic, partitions) in [("rf1", 1), ("rf3", 1), ("failover", 3)] {
        for partition in 0..partitions {
            wait_for(Duration::from_secs(60), "every replica in sync", || async {
                let state = registry.partition_state(topic, partition).await.ok().flatten();
                let replicas = if topic == "rf1" { 1 } else { 3 };
                state.is_some_and(|(s, _)| s.leader >= 0 && s.isr.len() == replicas)
            })
            .await?;
        }
    }

    let (mut rf1, mut rf3, mut idempotent) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..args.rounds {
        let runs = [
            ("rf1", Acks::Written, false, &mut rf1),
            ("rf3", Acks::All, false, &mut rf3),
            ("rf3", Acks::All, true, &mut idempotent),
        ];
        for (topic, acks, idempotence, rates) in runs {
            let (_, leader) = registry.leader(topic, 0).await?.context("a leader")?;
            let rate = match idempotence {
                false => produce(&leader.addr(), topic, acks, &args).await?,
                true => produce_idempotent(&leader.addr(), topic, &args).await?,
            };
            let how = if idempotence { " idempotent" } else { "" };
            eprintln!("bench: round {round}: {topic} {acks:?}{how}: {rate:.0} msg/s");
            rates.push(rate);
        }
    }
    let ratio = median(&rf3) / median(&rf1);
    let idempotent_ratio = median(&idempotent) / median(&rf3);

    eprintln!("bench: killing {} leaders …", args.kills);
    let plan = KillPlan {
        topic: "failover".into(),
        partitions: 3,
        kills: args.kills,
        wipe_at: None,
        rate: args.rate,
        message_bytes: args.message_bytes as usize,
        idempotence: false,
    };
    let kills = kill_leaders(&mut brokers, &registry, &plan).await;
    let mut lost = 0;
    for (partition, acknowledged) in &kills.acknowledged {
        // A leader elected late (a session lost under load after the last heal) serves up to
        // its high watermark, which reaches its log's end once its followers fetch again: what
        // is missing is asked again for a while before it counts as lost.
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (leader_id, leader) =
                registry.leader("failover", *partition).await?.context("a leader")?;
            let log: BTreeSet<Vec<u8>> = read_partition(&leader.addr(), "failover", *partition)
                .await
                .into_iter()
                .map(|(_, payload)| payload)
                .collect();
            let missing = acknowledged.iter().filter(|m| !log.contains(*m)).count() as u64;
            if missing == 0 || Instant::now() > deadline {
                if missing > 0 {
                    eprintln!(
                        "bench: failover/{partition}: {missing} acknowledged missing from broker {leader_id}'s log ({} messages)",
                        log.len()
                    );
                }
                lost += missing;
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let report = ReplicationReport {
        date,
        machine,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        messages: args.messages,
        message_bytes: args.message_bytes,
        batch: args.batch,
        rf1_acks1: rf1,
        rf3_acks_all: rf3,
        ratio,
        rf3_idempotent: idempotent,
        idempotent_ratio,
        session_timeout_ms: args.session_timeout_ms,
        failovers_ms: kills.failovers.iter().map(|d| d.as_secs_f64() * 1e3).collect(),
        acknowledged: kills.acknowledged.values().map(|m| m.len() as u64).sum(),
        unacknowledged: kills.unacknowledged,
        lost,
    };
    write(&report, &args.out)?;
    println!("{}", report.markdown());
    println!("report: {}", args.out.join("report.md").display());
    ensure!(lost == 0, "{lost} acknowledged messages are missing");
    Ok(())
}

/// Messages per second of one throughput round: `args.messages` in batches, pipelined.
async fn produce(addr: &str, topic: &str, acks: Acks, args: &ReplicationArgs) -> BenchResult<f64> {
    let config =
        ConnectionConfig { in_flight_max: IN_FLIGHT_MAX * 2, ..ConnectionConfig::default() };
    let conn = Connection::connect_with(addr, config).await?;
    let payload = vec![b'x'; args.message_bytes as usize];
    let mut set = BytesMut::new();
    for _ in 0..args.batch {
        protocol::encode_message(&mut set, Codec::None, &payload);
    }
    let set: Bytes = set.freeze();
    let batches = args.messages.div_ceil(args.batch);
    let mut in_flight = VecDeque::new();
    let started = Instant::now();
    for _ in 0..batches {
        let request = Request::Produce(ProduceRequest {
            topic: topic.to_owned(),
            partition: 0,
            acks,
            messages: set.clone(),
        });
        in_flight.push_back(conn.enqueue(request).await?.context("acks ≥ 1 is answered")?);
        while in_flight.len() > IN_FLIGHT_MAX {
            in_flight.pop_front().expect("in flight").wait().await?;
        }
    }
    while let Some(pending) = in_flight.pop_front() {
        pending.wait().await?;
    }
    Ok((batches * args.batch) as f64 / started.elapsed().as_secs_f64())
}

/// [`produce`] with acks all as one idempotent producer: each batch a magic-2 message of
/// `--batch` records carrying the producer id and the next sequence, sent as
/// IDEMPOTENT_PRODUCE. The batches are built before the clock starts, as [`produce`]'s set is:
/// what is timed is the brokers' work.
async fn produce_idempotent(addr: &str, topic: &str, args: &ReplicationArgs) -> BenchResult<f64> {
    let config =
        ConnectionConfig { in_flight_max: IN_FLIGHT_MAX * 2, ..ConnectionConfig::default() };
    let conn = Connection::connect_with(addr, config).await?;
    let producer = conn.init_producer_id().await?;
    let payload = vec![b'x'; args.message_bytes as usize];
    let mut sets = Vec::new();
    let mut sequence = 0i32;
    let now = service::now_ms();
    for _ in 0..args.messages.div_ceil(args.batch) {
        let mut batch = RecordBatchBuilder::new(0).with_producer(
            producer.producer_id,
            producer.producer_epoch,
            sequence,
        );
        for i in 0..args.batch {
            batch.push(i as i64, now, None, Some(&payload), &[]);
        }
        sequence = sequence.wrapping_add(args.batch as i32) & i32::MAX;
        let mut set = BytesMut::new();
        protocol::encode_batch_message(&mut set, &batch.finish());
        sets.push(set.freeze());
    }
    let batches = sets.len() as u64;
    let mut in_flight = VecDeque::new();
    let started = Instant::now();
    for set in sets {
        let request = Request::IdempotentProduce(ProduceRequest {
            topic: topic.to_owned(),
            partition: 0,
            acks: Acks::All,
            messages: set,
        });
        in_flight.push_back(conn.enqueue(request).await?.context("acks all is answered")?);
        while in_flight.len() > IN_FLIGHT_MAX {
            in_flight.pop_front().expect("in flight").wait().await?;
        }
    }
    while let Some(pending) = in_flight.pop_front() {
        pending.wait().await?;
    }
    Ok((batches * args.batch) as f64 / started.elapsed().as_secs_f64())
}

pub(crate) async fn wait_for<F, Fut>(timeout: Duration, what: &str, mut check: F) -> BenchResult<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        ensure!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The value at quantile `q` (nearest rank) of `values`.
pub(crate) fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn write(report: &ReplicationReport, out: &Path) -> BenchResult<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    std::fs::write(out.join("results.json"), serde_json::to_string_pretty(report)?)?;
    std::fs::write(out.join("report.md"), report.markdown())?;
    Ok(())
}

impl ReplicationReport {
    fn markdown(&self) -> String {
        let rounds =
            |rates: &[f64]| rates.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", ");
        let mb = |rate: f64| rate * self.message_bytes as f64 / 1e6;
        let (rf1, rf3) = (median(&self.rf1_acks1), median(&self.rf3_acks_all));
        let idempotent = median(&self.rf3_idempotent);
        let failovers = &self.failovers_ms;
        let budget = self.session_timeout_ms as f64 + 2_000.0;
        let p99 = quantile(failovers, 0.99);
        let by_kill: BTreeMap<usize, f64> = failovers.iter().copied().enumerate().collect();
        let list = by_kill.values().map(|ms| format!("{ms:.0}")).collect::<Vec<_>>().join(", ");
        let text = format!(
            "# Replication: cost and failover\n\n\
             {date}, {machine}.\n\n`{command}`\n\n\
             Three `broker` processes in one ZooKeeper (session timeout {session} ms). \
             Throughput: batches of {batch} messages of {bytes} bytes, pipelined ({IN_FLIGHT_MAX} \
             in flight) on one connection to one partition's leader, {messages} messages a round.\n\n\
             | topic | acks | msg/s (median) | MB/s | rounds |\n|---|---|---:|---:|---|\n\
             | replication factor 1 | 1 | {rf1:.0} | {rf1_mb:.1} | {rf1_rounds} |\n\
             | replication factor 3, min ISR 2 | all | {rf3:.0} | {rf3_mb:.1} | {rf3_rounds} |\n\
             | replication factor 3, min ISR 2, idempotent | all | {idempotent:.0} | {idem_mb:.1} | {idem_rounds} |\n\n\
             **Ratio (RF3 acks all / RF1 acks 1): {ratio:.2}** (aim ≥ 0.5). \
             **Idempotent / plain, both RF3 acks all: {idempotent_ratio:.2}** (aim ≥ 0.95).\n\n\
             Failover over {kills} `kill -9` of a partition leader (leader killed → first \
             successful acks-all produce to its partition), while a producer offered acks-all \
             messages: p50 {p50:.0} ms, p99 {p99:.0} ms, max {max:.0} ms; aim p99 < session \
             timeout + 2 s = {budget:.0} ms: **{verdict}**.\n\n\
             Acknowledged {acked}, not acknowledged {unacked} (sent while a partition had no \
             leader), **lost {lost}**.\n\nEach failover (ms), in kill order: {list}\n",
            date = self.date,
            machine = self.machine,
            command = self.command,
            session = self.session_timeout_ms,
            batch = self.batch,
            bytes = self.message_bytes,
            messages = self.messages,
            rf1_mb = mb(rf1),
            rf3_mb = mb(rf3),
            rf1_rounds = rounds(&self.rf1_acks1),
            rf3_rounds = rounds(&self.rf3_acks_all),
            idem_mb = mb(idempotent),
            idem_rounds = rounds(&self.rf3_idempotent),
            idempotent_ratio = self.idempotent_ratio,
            ratio = self.ratio,
            kills = failovers.len(),
            p50 = quantile(failovers, 0.5),
            max = failovers.iter().copied().fold(0.0, f64::max),
            verdict = if p99 < budget { "met" } else { "missed" },
            acked = self.acknowledged,
            unacked = self.unacknowledged,
            lost = self.lost,
        );
        if failovers.is_empty() {
            let cut = text.find("Failover over").unwrap_or(text.len());
            return format!(
                "{}No leader was killed (`--kills 0`): throughput only.\n",
                &text[..cut]
            );
        }
        text
    }
}
