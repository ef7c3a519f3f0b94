//! `hdfs-loader-bench`: events per second from a real broker to committed Parquet, in the Hive
//! layout and as an Iceberg table.
//!
//! Starts the release `broker` binary (a process of its own, on a free port, in a temporary
//! directory), a schema registry in this process with the shipped schemas, fills topic
//! `page-view` with page-view events over `--partitions` partitions, registers the broker in
//! an embedded coordinator, and times one `run_once` of the loader from the first fetch to the
//! last commit, into a local directory (or `--store URL`), once per `--format` (both by
//! default, the same log each time), with the CPU time this process spent.
//!
//! With `--rounds N` the events are produced and loaded in N rounds, as `serve` loads a live
//! topic every interval (only the loader's runs are timed), and `--hours H` spreads their
//! times over H hours: an Iceberg table then holds a file per partition per hour per round.
//! For the Iceberg format the bench then times a compaction pass and prints the files per hour
//! before and after it, and checks that the table's rows and distinct ids did not change.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use apache_avro::types::Value;
use clap::Parser;
use client::{
    Connection, Producer, ProducerConfig, SimpleConsumer, SimpleConsumerConfig, StaticBrokers,
};
use cluster::{BrokerInfo, Coordinator, Embedded, Registry};
use hdfs_loader::Config;
use schema_registry::RegistryClient;
use tokio_util::sync::CancellationToken;

const TOPIC: &str = "page-view";

#[derive(Debug, Parser)]
#[command(about = "Times the loader from a real broker to committed Parquet")]
struct Args {
    /// Page-view events to produce and load.
    #[arg(long, default_value_t = 2_000_000)]
    events: u64,
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// The broker binary; by default `broker` beside this one (`target/release/broker`).
    #[arg(long)]
    broker_bin: Option<PathBuf>,
    /// Where to write; a temporary directory by default.
    #[arg(long)]
    store: Option<String>,
    #[arg(long, default_value_t = 4)]
    partitions_in_parallel: usize,
    /// `parquet`, `iceberg`, or both (one after the other, over the same log).
    #[arg(long, value_delimiter = ',', default_values = ["parquet", "iceberg"])]
    format: Vec<hdfs_loader::Format>,
    /// Produce and load the events in this many rounds (a loader run per format each).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
    /// Spread the events' times over this many hours (default: 3 ms apart).
    #[arg(long)]
    hours: Option<f64>,
}

struct BrokerProcess(Child);

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() -> std::process::ExitCode {
    let args: Args = service::cli::parse("hdfs-loader-bench");
    service::cli::finish("hdfs-loader-bench", bench(args).map_err(service::Failure::Runtime))
}

#[tokio::main]
async fn bench(args: Args) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let broker_bin = match args.broker_bin.clone() {
        Some(path) => path,
        None => std::env::current_exe()?.with_file_name("broker"),
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let data_dir = work.path().join("broker");
    let _broker = BrokerProcess(
        Command::new(&broker_bin)
            .args(["--port", &port.to_string(), "--data-dir", data_dir.to_str().context("path")?])
            .args(["--num-partitions", &args.partitions.to_string(), "--flush-ms", "100"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| {
                format!("cannot start {} (cargo build --release -p broker)", broker_bin.display())
            })?,
    );
    let addr = format!("127.0.0.1:{port}");
    let connection = connect(&addr).await?;
    connection.create_topic(TOPIC, args.partitions as i32, &[]).await?;

    let registry_url = start_registry(work.path()).await?;
    let registry = Arc::new(RegistryClient::new(&registry_url)?);
    let schema_id = registry.latest("page-view-value").await?.id;

    let spacing_ms = match args.hours {
        Some(hours) if hours > 0.0 => hours * 3_600_000.0 / args.events.max(1) as f64,
        Some(hours) => bail!("--hours {hours}: must be positive"),
        None => 3.0,
    };
    let embedded = Embedded::new();
    let coordinator: Arc<dyn Coordinator> = embedded.session("/bench")?;
    let cluster = Registry::new(Arc::clone(&coordinator));
    cluster.register_broker(0, &BrokerInfo::new("127.0.0.1", port)).await?;
    // The broker runs alone (no registry of its own): describe its partitions to one.
    cluster.create_topic_led_by(TOPIC, args.partitions, 0).await?;
    let mut runs = Vec::new();
    for format in &args.format {
        let store_url = match &args.store {
            Some(url) => format!("{}/{}", url.trim_end_matches('/'), format.name()),
            None => format!("file://{}", work.path().join(format.name()).display()),
        };
        let store = hdfs_loader::store_from_url(&store_url)?;
        let config = Config {
            store: Some(store_url),
            format: *format,
            host_name: Some("bench".into()),
            partitions_in_parallel: args.partitions_in_parallel,
            fetch_bytes: 4 << 20,
            ..Config::default()
        };
        runs.push(Run { format: *format, config, store, rows: 0, elapsed: 0.0, cpu: 0.0 });
    }

    let mut producing = Duration::ZERO;
    for round in 0..args.rounds {
        let from = args.events * round / args.rounds;
        let to = args.events * (round + 1) / args.rounds;
        let produced = Instant::now();
        produce(&addr, &registry, schema_id, from..to, spacing_ms).await?;
        wait_visible(&addr, args.partitions).await?;
        producing += produced.elapsed();
        for run in &mut runs {
            let cpu = cpu_seconds();
            let started = Instant::now();
            let summary = hdfs_loader::run_once(
                &run.config,
                Arc::clone(&coordinator),
                Arc::clone(&run.store),
                Arc::clone(&registry),
                CancellationToken::new(),
            )
            .await?;
            run.elapsed += started.elapsed().as_secs_f64();
            run.cpu += cpu_seconds() - cpu;
            if !summary.errors.is_empty() {
                bail!("the run failed: {:?}", summary.errors);
            }
            run.rows += summary.rows;
        }
    }
    let log_bytes = log_bytes(&addr, args.partitions).await?;
    println!(
        "produced {} events ({:.1} MiB of log) in {:.1} s, in {} round(s)",
        args.events,
        log_bytes as f64 / (1 << 20) as f64,
        producing.as_secs_f64(),
        args.rounds
    );
    for run in runs {
        let (format, elapsed) = (run.format, run.elapsed);
        if run.rows != args.events {
            bail!("{format:?}: loaded {} rows of {} events", run.rows, args.events);
        }
        let output = hdfs_loader::Output::open(&run.config, run.store).await?;
        let parquet_bytes = data_bytes(&output).await?;
        println!(
            "{format:?}: loaded {} events over {} partitions in {elapsed:.2} s: {:.0} events/s, {:.1} MiB/s of log, {:.2} µs CPU/event; Parquet {:.1} MiB ({:.1} bytes/event)",
            run.rows,
            args.partitions,
            run.rows as f64 / elapsed,
            log_bytes as f64 / (1 << 20) as f64 / elapsed,
            run.cpu * 1e6 / run.rows as f64,
            parquet_bytes as f64 / (1 << 20) as f64,
            parquet_bytes as f64 / run.rows as f64,
        );
        if let hdfs_loader::Output::Iceberg(tables) = &output {
            compaction(tables, &output, &run.config, args.events, work.path()).await?;
        }
    }
    Ok(())
}

/// One format's loader: its settings and what its runs took.
struct Run {
    format: hdfs_loader::Format,
    config: Config,
    store: Arc<dyn object_store::ObjectStore>,
    rows: u64,
    elapsed: f64,
    cpu: f64,
}

/// Times a compaction pass of the topic's table (every hour closed), printing its files per
/// hour before and after; fails if the table's rows or distinct ids changed.
async fn compaction(
    tables: &hdfs_loader::table::Tables,
    output: &hdfs_loader::Output,
    config: &Config,
    events: u64,
    work: &std::path::Path,
) -> anyhow::Result<()> {
    let options = hdfs_loader::table::compact::CompactOptions {
        delay_ms: 0,
        ..hdfs_loader::table::compact::CompactOptions::of(config, service::now_ms())
    };
    let before = files_per_hour(tables).await?;
    let cpu = cpu_seconds();
    let started = Instant::now();
    let done = tables.compact(TOPIC, &options).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu;
    let after = files_per_hour(tables).await?;
    let mut ids = hdfs_loader::readback::DistinctIds::new_in(work)?;
    let rows = hdfs_loader::readback::count_topic(output, TOPIC, &mut ids).await?;
    let distinct = ids.count()?;
    if rows != events || distinct != events {
        bail!(
            "after compaction the table reads {rows} rows, {distinct} distinct ids, of {events} events"
        );
    }
    println!(
        "Iceberg compaction: {} hours, {} files into {} in {elapsed:.2} s ({:.0} rows/s, {:.2} µs CPU/row); files per hour before: {before}; after: {after}; rows and distinct ids unchanged ({rows})",
        done.hours,
        done.files_removed,
        done.files_added,
        done.rows as f64 / elapsed,
        cpu * 1e6 / done.rows.max(1) as f64,
    );
    Ok(())
}

/// The table's files per hour: mean and largest, over the hours it has.
async fn files_per_hour(tables: &hdfs_loader::table::Tables) -> anyhow::Result<String> {
    let state = tables.state(TOPIC).await?.context("no table")?;
    let mut hours = std::collections::BTreeMap::<Option<i64>, usize>::new();
    for file in &state.files {
        *hours.entry(file.hour.map(|h| h.start_ms)).or_default() += 1;
    }
    let most = hours.values().copied().max().unwrap_or(0);
    let mean = state.files.len() as f64 / hours.len().max(1) as f64;
    Ok(format!("mean {mean:.1}, most {most} ({} files, {} hours)", state.files.len(), hours.len()))
}

/// Bytes of the committed data files of the topic.
async fn data_bytes(output: &hdfs_loader::Output) -> anyhow::Result<u64> {
    use object_store::ObjectStoreExt;
    let mut bytes = 0;
    for path in hdfs_loader::readback::files(output, TOPIC).await? {
        bytes += output.store().head(&path).await?.size;
    }
    Ok(bytes)
}

/// CPU time this process has used (user and system), in seconds.
fn cpu_seconds() -> f64 {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .expect("getrusage");
    let seconds = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    seconds(usage.user_time()) + seconds(usage.system_time())
}

async fn connect(addr: &str) -> anyhow::Result<Connection> {
    for _ in 0..200 {
        if let Ok(connection) = Connection::connect(addr).await {
            return Ok(connection);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    bail!("the broker did not listen on {addr}")
}

async fn start_registry(dir: &std::path::Path) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let config = schema_registry::Config {
        data_dir: dir.join("registry"),
        register_schemas: Some(events::schemas::source_dir()),
        ..schema_registry::Config::default()
    };
    tokio::spawn(async move {
        if let Err(e) =
            schema_registry::run(listener, config, tokio_util::sync::CancellationToken::new()).await
        {
            eprintln!("registry failed: {e}");
        }
    });
    let client = RegistryClient::new(&url)?;
    for _ in 0..400 {
        if client.latest("page-view-value").await.is_ok() {
            return Ok(url);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    bail!("the registry did not register the shipped schemas")
}

/// Produces events `numbers`, event `n` at `n * spacing_ms` after the base time.
async fn produce(
    addr: &str,
    registry: &RegistryClient,
    schema_id: i32,
    numbers: std::ops::Range<u64>,
    spacing_ms: f64,
) -> anyhow::Result<()> {
    let config = ProducerConfig {
        batch_messages: 2_000,
        batch_bytes: 1 << 20,
        linger_ms: 5,
        ..ProducerConfig::default()
    };
    let producer = Producer::new(config, Arc::new(StaticBrokers::new([addr.to_owned()])))?;
    let schema = registry.schema(schema_id).await?;
    let base_ms: i64 = 1_764_547_200_000;
    let mut pending = std::collections::VecDeque::new();
    for n in numbers.start as i64..numbers.end as i64 {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&n.to_be_bytes());
        let event = Value::Record(vec![
            (
                "header".into(),
                Value::Record(vec![
                    ("time".into(), Value::Long(base_ms + (n as f64 * spacing_ms) as i64)),
                    ("server".into(), Value::String(format!("web-{}", n % 16))),
                    ("service".into(), Value::String("frontend".into())),
                    ("id".into(), Value::Fixed(16, id.to_vec())),
                ]),
            ),
            (
                "member_id".into(),
                if n % 3 == 0 {
                    Value::Union(0, Box::new(Value::Null))
                } else {
                    Value::Union(1, Box::new(Value::Long(n % 1_000_003)))
                },
            ),
            ("page_key".into(), Value::String(format!("page-{}", n % 40))),
            (
                "url".into(),
                Value::String(format!("https://www.example.com/in/member-{}", n % 100_003)),
            ),
            (
                "referrer".into(),
                if n % 2 == 0 {
                    Value::Union(0, Box::new(Value::Null))
                } else {
                    Value::Union(1, Box::new(Value::String("https://www.example.com/feed".into())))
                },
            ),
            ("duration_ms".into(), Value::Int((n % 700) as i32)),
        ]);
        let payload = events::envelope::encode(schema_id, &schema, event)?;
        pending.push_back(producer.enqueue(TOPIC, None, &payload).await?);
        // Bound what waits for acknowledgement.
        while pending.len() > 100_000 {
            pending.pop_front().expect("non-empty").await?;
        }
    }
    for sent in pending {
        sent.await?;
    }
    producer.close().await;
    Ok(())
}

async fn log_ends(addr: &str, partitions: u32) -> anyhow::Result<Vec<i64>> {
    let consumer = SimpleConsumer::connect(addr, SimpleConsumerConfig::default()).await?;
    let mut ends = Vec::new();
    for partition in 0..partitions as i32 {
        ends.push(consumer.latest_offset(TOPIC, partition).await?);
    }
    Ok(ends)
}

async fn log_bytes(addr: &str, partitions: u32) -> anyhow::Result<i64> {
    Ok(log_ends(addr, partitions).await?.iter().sum())
}

/// Waits until the broker has flushed (made visible) everything produced.
async fn wait_visible(addr: &str, partitions: u32) -> anyhow::Result<()> {
    let mut last = log_ends(addr, partitions).await?;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = log_ends(addr, partitions).await?;
        if now == last {
            return Ok(());
        }
        last = now;
    }
    bail!("the log ends kept moving")
}
