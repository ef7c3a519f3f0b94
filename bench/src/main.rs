//! `tributary-bench`: the paper's experiment (§5) — one producer and one consumer against one
//! broker, 200-byte messages, one per request and in batches of 50 — run side by side against
//! RabbitMQ, ActiveMQ, NATS JetStream and Redis Streams, plus end-to-end latency, bytes on disk
//! per message, the machine's own ceilings, and Tributary's throughput as its log grows.
//!
//! Each system is started on 127.0.0.1 in its own temporary directory, measured, and stopped
//! by its pid. A system that cannot start is skipped and the report says why.
//!
//! `cargo build --release -p broker -p bench && target/release/tributary-bench --out bench/results/DATE`
//!
//! `tributary-bench replication` measures replication instead: see [`replication`];
//! `tributary-bench pipeline` the whole multi-process pipeline: see [`pipeline`];
//! `tributary-bench tiered` tiered storage: see [`tiered`];
//! `tributary-bench transactions` exactly once over the Kafka listener: see [`transactions`].

mod ceiling;
mod growth;
mod peer;
mod peers;
mod pipeline;
mod progress;
mod replication;
mod report;
mod service;
mod tiered;
mod transactions;
mod tributary;
mod workload;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;

use crate::peer::{BenchResult, Launcher};
use crate::progress::Progress;
use crate::report::{Report, SystemResult};

#[derive(Debug, Parser)]
#[command(name = "tributary-bench", version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    mode: Option<Mode>,
    /// Messages per mode (the paper used 10 million).
    #[arg(long)]
    messages: Option<u64>,
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(8..=(1 << 20)))]
    message_bytes: u64,
    /// Messages per request in the batch mode.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    batch: u64,
    /// Systems to run, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tributary,tributary-write,redis,nats,rabbitmq,activemq"
    )]
    systems: Vec<String>,
    /// A small run (about a minute) that checks every system moves exactly N messages.
    #[arg(long)]
    quick: bool,
    /// Where report.md, results.json and throughput.svg go.
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// The broker binary; by default the one beside this binary.
    #[arg(long)]
    broker_bin: Option<PathBuf>,
    /// Offered rate of the latency run, messages per second.
    #[arg(long)]
    latency_rate: Option<u64>,
    #[arg(long)]
    latency_seconds: Option<u64>,
    /// Log sizes (GiB) at which to measure Tributary as its log grows; skipped past free disk.
    #[arg(long, value_delimiter = ',')]
    log_gib: Option<Vec<f64>>,
    /// Where systems keep their data while they run; a temporary directory by default.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Run nothing: write report.md and throughput.svg again from a run's results.json.
    #[arg(long, value_name = "RESULTS_JSON")]
    render: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
enum Mode {
    /// Replication's cost (replication factor 3 with acks all against 1 with acks 1) and its
    /// failover time over repeated `kill -9` of a leader, on three brokers in a ZooKeeper.
    Replication(replication::ReplicationArgs),
    /// The whole pipeline as `tributary up` runs it, at stepped offered rates: events/s per
    /// tier, backlog, freshness, CPU per event and peak memory of every process.
    Pipeline(pipeline::PipelineArgs),
    /// Tiered storage: upload throughput and its cost to produce latency, and a consumer
    /// reading history from the object store (cold and cached) against local disk.
    Tiered(tiered::TieredArgs),
    /// Exactly once over the Kafka listener: confluent-kafka producers plain (acks all),
    /// idempotent and transactional, their throughputs and ratios.
    Transactions(transactions::TransactionsArgs),
}

/// What one run does, after `--quick` and the explicit flags are applied.
struct Plan {
    messages: u64,
    message_bytes: usize,
    batch: usize,
    latency_rate: u64,
    latency: Duration,
    log_bytes: Vec<u64>,
    growth_window_messages: u64,
    ceiling_bytes: usize,
}

impl Cli {
    fn plan(&self) -> Plan {
        let quick = self.quick;
        let gib = |g: f64| (g * (1u64 << 30) as f64) as u64;
        Plan {
            messages: self.messages.unwrap_or(if quick { 20_000 } else { 10_000_000 }),
            message_bytes: self.message_bytes as usize,
            batch: self.batch as usize,
            latency_rate: self.latency_rate.unwrap_or(if quick { 1_000 } else { 10_000 }),
            latency: Duration::from_secs(self.latency_seconds.unwrap_or(if quick {
                2
            } else {
                10
            })),
            log_bytes: match &self.log_gib {
                Some(sizes) => sizes.iter().map(|&g| gib(g)).collect(),
                None if quick => vec![16 << 20, 64 << 20],
                None => vec![gib(1.0), gib(5.0), gib(20.0)],
            },
            growth_window_messages: if quick { 20_000 } else { 2_000_000 },
            ceiling_bytes: if quick { 64 << 20 } else { 2 << 30 },
        }
    }
}

fn launchers(cli: &Cli) -> BenchResult<Vec<Box<dyn Launcher>>> {
    let broker_bin = match &cli.broker_bin {
        Some(path) => path.clone(),
        None => tributary::Tributary::beside_this_binary()?,
    };
    use tributary::{Tributary, VisibleAfter};
    let mut all: Vec<Box<dyn Launcher>> = vec![
        Box::new(Tributary {
            broker_bin: broker_bin.clone(),
            visible_after: VisibleAfter::Flush,
            tls: false,
        }),
        Box::new(Tributary {
            broker_bin: broker_bin.clone(),
            visible_after: VisibleAfter::Write,
            tls: false,
        }),
        Box::new(Tributary { broker_bin, visible_after: VisibleAfter::Flush, tls: true }),
    ];
    all.extend(peers::all());
    for name in &cli.systems {
        anyhow::ensure!(
            all.iter().any(|l| l.name() == name),
            "unknown system {name:?} (known: tributary, tributary-write, tributary-tls, redis, nats, rabbitmq, activemq)"
        );
    }
    all.retain(|l| cli.systems.iter().any(|s| s == l.name()));
    Ok(all)
}

fn main() -> std::process::ExitCode {
    let cli: Cli = ::service::cli::parse("tributary-bench");
    let result = tokio::runtime::Runtime::new()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(run(cli)));
    ::service::cli::finish("tributary-bench", result.map_err(::service::Failure::Runtime))
}

async fn run(cli: Cli) -> BenchResult<()> {
    match cli.mode {
        Some(Mode::Replication(args)) => return replication::run(args, today(), machine()).await,
        Some(Mode::Pipeline(args)) => return pipeline::run(args).await,
        Some(Mode::Tiered(args)) => return tiered::run(args, today(), machine()).await,
        Some(Mode::Transactions(args)) => {
            return transactions::run(args, today(), machine()).await;
        }
        None => {}
    }
    if let Some(results) = &cli.render {
        let text = std::fs::read_to_string(results)
            .with_context(|| format!("reading {}", results.display()))?;
        let report: Report = serde_json::from_str(&text)
            .with_context(|| format!("parsing {}", results.display()))?;
        report.write(&cli.out)?;
        println!("{}", report.table());
        return Ok(());
    }
    let plan = cli.plan();
    let launchers = launchers(&cli)?;
    let temp = tempfile_dir(cli.work_dir.as_deref())?;
    let mut systems = Vec::new();
    for launcher in &launchers {
        systems.push(run_system(launcher.as_ref(), &temp.join(launcher.name()), &plan).await);
    }
    let mut log_growth = Vec::new();
    if let Some(tributary) = launchers.iter().find(|l| l.name() == "tributary") {
        let dir = temp.join("tributary-growth");
        match growth::measure(
            tributary.as_ref(),
            &dir,
            &plan.log_bytes,
            plan.growth_window_messages,
            plan.message_bytes,
            plan.batch,
        )
        .await
        {
            Ok(points) => log_growth = points,
            Err(e) => eprintln!("bench: log growth run failed: {e:#}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    eprintln!("bench: measuring the machine's ceilings …");
    let ceiling_bytes = plan.ceiling_bytes;
    let ceilings = tokio::task::spawn_blocking(move || ceiling::measure(ceiling_bytes)).await??;
    let report = Report {
        date: today(),
        machine: machine(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        messages: plan.messages,
        message_bytes: plan.message_bytes,
        batch: plan.batch,
        ceilings,
        systems,
        log_growth,
    };
    report
        .write(&cli.out)
        .with_context(|| format!("writing the report to {}", cli.out.display()))?;
    println!("{}", report.table());
    println!("report: {}", cli.out.join("report.md").display());
    let _ = std::fs::remove_dir_all(&temp);
    Ok(())
}

/// Runs every workload against one system; a failure ends that system's run and is reported.
async fn run_system(launcher: &dyn Launcher, dir: &std::path::Path, plan: &Plan) -> SystemResult {
    let mut result = SystemResult {
        name: launcher.name().to_owned(),
        description: launcher.describe(),
        error: None,
        produce_single: None,
        produce_batch: None,
        consume_single: None,
        consume_batch: None,
        disk_bytes_per_message: None,
        latency: None,
    };
    eprintln!("bench: starting {} …", launcher.name());
    if let Err(e) = std::fs::create_dir_all(dir) {
        result.error = Some(format!("cannot create {}: {e}", dir.display()));
        return result;
    }
    let running = match launcher.start(dir).await {
        Ok(running) => running,
        Err(e) => {
            eprintln!("bench: {} cannot start; the run goes on without it: {e:#}", launcher.name());
            result.error = Some(format!("{e:#}"));
            return result;
        }
    };
    let name = launcher.name();
    let (n, bytes) = (plan.messages, plan.message_bytes);
    let steps = async {
        let p = Progress::new(format!("{name}: produce, 1 message per request"));
        result.produce_single =
            Some(workload::produce(running.as_ref(), "single", n, bytes, 1, &p).await?);
        // Measured before anything is consumed: queues delete what their consumers acknowledge.
        result.disk_bytes_per_message = Some(running.disk_bytes()? as f64 / n as f64);
        let p = Progress::new(format!("{name}: consume the 1/request stream"));
        result.consume_single =
            Some(workload::consume(running.as_ref(), "single", n, bytes, &p).await?);
        let p = Progress::new(format!("{name}: produce, {} per request", plan.batch));
        result.produce_batch =
            Some(workload::produce(running.as_ref(), "batch", n, bytes, plan.batch, &p).await?);
        let p = Progress::new(format!("{name}: consume the batch stream"));
        result.consume_batch =
            Some(workload::consume(running.as_ref(), "batch", n, bytes, &p).await?);
        // The throughput steps leave gigabytes of dirty pages; their writeback would land in
        // the fsyncs of the latency run. Every system starts that run with it done.
        tokio::task::spawn_blocking(nix::unistd::sync).await?;
        eprintln!("bench: {name}: latency at {}/s for {:?} …", plan.latency_rate, plan.latency);
        result.latency = Some(
            workload::latency(running.as_ref(), "latency", plan.latency_rate, plan.latency, bytes)
                .await?,
        );
        BenchResult::Ok(())
    };
    if let Err(e) = steps.await {
        eprintln!("bench: {name} failed: {e:#}");
        result.error = Some(format!("failed part-way: {e:#}"));
    }
    if let Err(e) = running.stop().await {
        eprintln!("bench: stopping {name}: {e:#}");
    }
    let _ = std::fs::remove_dir_all(dir);
    result
}

fn tempfile_dir(base: Option<&std::path::Path>) -> BenchResult<PathBuf> {
    let base = base.map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("tributary-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

pub(crate) fn today() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(|| "unknown date".into(), |s| s.trim().to_owned())
}

/// CPU model, cores, memory and kernel, from /proc.
pub(crate) fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("unknown CPU")
        .trim()
        .to_owned();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_kib: u64 = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let kernel = read("/proc/sys/kernel/osrelease");
    format!(
        "{model}, {cores} cores, {:.0} GiB memory, Linux {}",
        mem_kib as f64 / (1 << 20) as f64,
        kernel.trim()
    )
}
