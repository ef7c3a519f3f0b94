//! `tributary-bench transactions`: what exactly-once costs a Kafka producer, on three
//! processes of the release `broker` (Kafka listeners on) in a real ZooKeeper. confluent-kafka
//! producers (`bench/kafka/transactions.py`, `--producers` threads) write the same records —
//! `--message-bytes` each — into a topic of 3 partitions, replication factor 3,
//! `min_insync_replicas` 2, three ways: plain with acks all, idempotent, and transactional,
//! committing every `--per-transaction` records. Rounds alternate; the ratios of the medians
//! to plain acks all are reported.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, ensure};
use serde::{Deserialize, Serialize};
use testkit::broker_processes::{BrokerProcesses, registry};
use testkit::zookeeper::ZooKeeperServer;

use crate::peer::BenchResult;

#[derive(Debug, Clone, clap::Args)]
pub struct TransactionsArgs {
    /// Records per mode and round.
    #[arg(long, default_value_t = 200_000)]
    pub records: u64,
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=(1 << 20)))]
    pub message_bytes: u64,
    /// Producers of each mode, each a thread with its own client.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub producers: u64,
    /// Records per transaction in the transactional mode.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub per_transaction: u64,
    /// Rounds, each of every mode.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub rounds: u64,
    /// The broker binary; by default the one beside this binary.
    #[arg(long)]
    pub broker_bin: Option<PathBuf>,
    /// Where report.md and results.json go.
    #[arg(long, default_value = "bench-results/transactions")]
    pub out: PathBuf,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct TransactionsReport {
    pub date: String,
    pub machine: String,
    pub command: String,
    pub records: u64,
    pub message_bytes: u64,
    pub producers: u64,
    pub per_transaction: u64,
    /// Records per second of each round, per mode.
    pub plain: Vec<f64>,
    pub idempotent: Vec<f64>,
    pub transactional: Vec<f64>,
    pub idempotent_ratio: f64,
    pub transactional_ratio: f64,
    /// Deliveries the clients reported failed (must be 0).
    pub failed_deliveries: u64,
}

pub async fn run(args: TransactionsArgs, date: String, machine: String) -> BenchResult<()> {
    let broker_bin = match &args.broker_bin {
        Some(path) => path.clone(),
        None => crate::tributary::Tributary::beside_this_binary()?,
    };
    ensure!(
        broker_bin.is_file(),
        "no broker binary at {} (build it: cargo build --release -p broker)",
        broker_bin.display()
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("kafka/transactions.py");
    let zookeeper = tokio::task::spawn_blocking(ZooKeeperServer::start).await.map_err(|_| {
        anyhow::anyhow!("ZooKeeper did not start (is Debian's zookeeper installed?)")
    })?;
    let connect = zookeeper.connect_string();
    let broker_args = [
        "--kafka-port",
        "0",
        "--flush-ms",
        "10",
        "--default-replication-factor",
        "3",
        "--min-insync-replicas",
        "2",
        "--num-partitions",
        "3",
    ];
    let brokers = BrokerProcesses::start(&broker_bin, &connect, 3, &broker_args);
    let registry = registry(&connect).await;
    let mut bootstrap = None;
    for _ in 0..3_000 {
        let listeners: Vec<String> = registry
            .brokers()
            .await
            .unwrap_or_default()
            .values()
            .filter_map(|b| b.kafka_port.map(|port| format!("{}:{port}", b.host)))
            .collect();
        if listeners.len() == 3 {
            bootstrap = Some(listeners.join(","));
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let Some(bootstrap) = bootstrap else {
        let mut brokers = brokers;
        anyhow::bail!("three brokers did not register\n{}", brokers.report());
    };
    let (mut plain, mut idempotent, mut transactional, mut failed) =
        (Vec::new(), Vec::new(), Vec::new(), 0);
    for round in 0..args.rounds {
        let topic = format!("bench-{round}");
        let output = Command::new("python3")
            .arg(&script)
            .args([&bootstrap, &topic])
            .args(["--records", &args.records.to_string()])
            .args(["--producers", &args.producers.to_string()])
            .args(["--per-transaction", &args.per_transaction.to_string()])
            .args(["--message-bytes", &args.message_bytes.to_string()])
            .output()
            .context("python3 (pip install confluent-kafka)")?;
        let out = String::from_utf8_lossy(&output.stdout);
        ensure!(
            output.status.success(),
            "transactions.py failed: {out}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let rates: serde_json::Value =
            serde_json::from_str(out.lines().last().unwrap_or_default()).context("its report")?;
        let rate = |mode: &str| rates[mode]["records_per_s"].as_f64().unwrap_or(f64::NAN);
        for mode in ["plain", "idempotent", "transactional"] {
            failed += rates[mode]["failed_deliveries"].as_u64().unwrap_or(0);
        }
        println!(
            "round {round}: plain {:.0}/s, idempotent {:.0}/s, transactional {:.0}/s",
            rate("plain"),
            rate("idempotent"),
            rate("transactional")
        );
        plain.push(rate("plain"));
        idempotent.push(rate("idempotent"));
        transactional.push(rate("transactional"));
    }
    drop(brokers);
    let report = TransactionsReport {
        date,
        machine,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        records: args.records,
        message_bytes: args.message_bytes,
        producers: args.producers,
        per_transaction: args.per_transaction,
        idempotent_ratio: median(&idempotent) / median(&plain),
        transactional_ratio: median(&transactional) / median(&plain),
        plain,
        idempotent,
        transactional,
        failed_deliveries: failed,
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    std::fs::write(args.out.join("results.json"), serde_json::to_string_pretty(&report)?)?;
    std::fs::write(args.out.join("report.md"), report.markdown())?;
    println!("{}", report.markdown());
    ensure!(failed == 0, "{failed} deliveries failed");
    Ok(())
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

impl TransactionsReport {
    fn markdown(&self) -> String {
        let rounds =
            |rates: &[f64]| rates.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", ");
        format!(
            "# Exactly once over the Kafka listener, {date}\n\n\
             `{command}` on {machine}: {producers} confluent-kafka producers, {records} records \
             of {bytes} bytes per mode and round, a topic of 3 partitions, replication factor 3, \
             min ISR 2, acks all.\n\n\
             | mode | records/s (median) | rounds |\n|---|---|---|\n\
             | plain | {plain:.0} | {plain_rounds} |\n\
             | idempotent | {idempotent:.0} | {idempotent_rounds} |\n\
             | transactional, {per} records per transaction | {transactional:.0} | {transactional_rounds} |\n\n\
             **Idempotent / plain: {idempotent_ratio:.2}** (aim ≥ 0.95); \
             **transactional / plain: {transactional_ratio:.2}** (aim ≥ 0.7). \
             Failed deliveries: {failed}.\n",
            date = self.date,
            command = self.command,
            machine = self.machine,
            producers = self.producers,
            records = self.records,
            bytes = self.message_bytes,
            plain = median(&self.plain),
            plain_rounds = rounds(&self.plain),
            idempotent = median(&self.idempotent),
            idempotent_rounds = rounds(&self.idempotent),
            per = self.per_transaction,
            transactional = median(&self.transactional),
            transactional_rounds = rounds(&self.transactional),
            idempotent_ratio = self.idempotent_ratio,
            transactional_ratio = self.transactional_ratio,
            failed = self.failed_deliveries,
        )
    }
}
