//! `hdfs-loader run|serve|status`: parses flags and `--config FILE`, connects ZooKeeper and
//! the store, installs SIGTERM/SIGINT handling, and calls the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use cluster::Coordinator;
use hdfs_loader::Config;
use schema_registry::RegistryClient;
use serde::Serialize;
use service::Failure;

/// Loads the analytics cluster's topics into Parquet in an object store, data and offsets
/// committed together.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Load every selected partition from its committed offset to the log end, then exit.
    Run(LoadArgs),
    /// Load continuously, a round every `--interval`.
    Serve(ServeArgs),
    /// Print per partition the committed offset, log end, lag and last commit, and per hour
    /// whether every partition has passed it.
    Status(StatusArgs),
    /// Iceberg: compact the small files of closed hours, expire old snapshots and delete files
    /// no snapshot references, then exit.
    Maintain(MaintainArgs),
}

#[derive(Debug, Args, Serialize)]
struct MaintainArgs {
    #[command(flatten)]
    #[serde(flatten)]
    common: Common,
    /// Expire snapshots older than this, with a unit (default 168h).
    #[arg(long, value_name = "DURATION", value_parser = service::duration::checked)]
    snapshot_max_age: Option<String>,
    /// Keep unreferenced files younger than this (a run in progress writes them; default 1 h).
    #[arg(long, value_name = "MS")]
    staging_grace_ms: Option<u64>,
    /// Compact the files of a closed hour smaller than this into files of this size
    /// (default 134217728, 128 MiB).
    #[arg(long, value_name = "B")]
    target_file_bytes: Option<u64>,
    /// Compact an hour once it ended this long ago, with a unit (default 10m).
    #[arg(long, value_name = "DURATION", value_parser = service::duration::checked)]
    compaction_delay: Option<String>,
    #[arg(long)]
    #[serde(skip)]
    json: bool,
}

#[derive(Debug, Args, Serialize)]
struct Common {
    /// TOML file whose keys are the flag names (with `_` for `-`); flags override it.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// Where to write: file:///path, s3://bucket/prefix or memory://.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// What is written: `parquet` (Hive layout, commit records beside it) or `iceberg` (a table
    /// per topic).
    #[arg(long, value_name = "FORMAT")]
    format: Option<hdfs_loader::Format>,
    /// The Iceberg catalog, sqlite:///PATH (default: catalog.db in a file:// warehouse).
    #[arg(long, value_name = "URI")]
    catalog: Option<String>,
    /// The Iceberg namespace of the topics' tables.
    #[arg(long, value_name = "NAME")]
    namespace: Option<String>,
    /// The analytics cluster's ZooKeeper, `host:port[,…][/chroot]`.
    #[arg(long, value_name = "CONNECT")]
    zookeeper: Option<String>,
    #[command(flatten)]
    #[serde(flatten)]
    zookeeper_session: cluster::ZooKeeperArgs,
}

#[derive(Debug, Args, Serialize)]
struct LoadArgs {
    #[command(flatten)]
    #[serde(flatten)]
    common: Common,
    /// The schema registry, e.g. http://127.0.0.1:8081.
    #[arg(long, value_name = "URL")]
    registry: Option<String>,
    /// Regex of the topics to load (whole names); `_` topics only when named.
    #[arg(long, value_name = "REGEX")]
    topics: Option<String>,
    #[arg(long, value_name = "NAME")]
    group: Option<String>,
    #[arg(long, value_name = "NAME")]
    host_name: Option<String>,
    #[arg(long, value_name = "N")]
    max_messages_per_commit: Option<u64>,
    #[arg(long, value_name = "N")]
    row_group_rows: Option<usize>,
    /// End a row group once its encoded pages take this many bytes in memory.
    #[arg(long, value_name = "B")]
    row_group_bytes: Option<usize>,
    #[arg(long, value_name = "N")]
    batch_rows: Option<usize>,
    #[arg(long, value_name = "N")]
    partitions_in_parallel: Option<usize>,
    #[arg(long, value_name = "B")]
    fetch_bytes: Option<u32>,
    #[arg(long, value_name = "N")]
    zstd_level: Option<i32>,
    /// Write undecodable messages here and count them instead of stopping.
    #[arg(long, value_name = "DIR")]
    bad_records: Option<PathBuf>,
    #[arg(long, value_name = "MS")]
    audit_window_ms: Option<i64>,
    /// Publish `loader` audit counts to `_audit`.
    #[arg(long, value_name = "BOOL")]
    audit: Option<bool>,
    #[arg(long, value_name = "MS")]
    staging_grace_ms: Option<u64>,
    /// Iceberg: roll a data file at this size (default 134217728, 128 MiB); maintenance
    /// compacts the smaller files of a closed hour into files of it.
    #[arg(long, value_name = "B")]
    target_file_bytes: Option<u64>,
    #[command(flatten)]
    #[serde(flatten)]
    tls: service::tls::TlsArgs,
    /// Print the run's summary as JSON.
    #[arg(long)]
    #[serde(skip)]
    json: bool,
}

#[derive(Debug, Args, Serialize)]
struct ServeArgs {
    #[command(flatten)]
    #[serde(flatten)]
    load: LoadArgs,
    /// Time between rounds, with a unit: `500ms`, `30s`, `5m`, `1h` (default 1m).
    #[arg(long, value_name = "DURATION", value_parser = service::duration::checked)]
    interval: Option<String>,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics.
    #[arg(long, value_name = "HOST:PORT")]
    metrics: Option<String>,
    /// Iceberg: maintain the tables this often, with a unit (default 1h).
    #[arg(long, value_name = "DURATION", value_parser = service::duration::checked)]
    maintenance_interval: Option<String>,
    /// Iceberg: maintenance expires snapshots older than this, with a unit (default 168h).
    #[arg(long, value_name = "DURATION", value_parser = service::duration::checked)]
    snapshot_max_age: Option<String>,
    /// Iceberg: maintenance compacts an hour once it ended this long ago, with a unit
    /// (default 10m).
    #[arg(long, value_name = "DURATION", value_parser = service::duration::checked)]
    compaction_delay: Option<String>,
}

#[derive(Debug, Args, Serialize)]
struct StatusArgs {
    #[command(flatten)]
    #[serde(flatten)]
    common: Common,
    #[arg(long)]
    #[serde(skip)]
    json: bool,
}

fn main() -> ExitCode {
    let cli: Cli = service::cli::parse("hdfs-loader");
    service::cli::finish("hdfs-loader", start(cli))
}

/// The configuration: the file named by `common`, then `flags`; checked.
fn config(common: &Common, flags: &impl Serialize, loads: bool) -> Result<Config, Failure> {
    let config: Config =
        service::config::load(common.config.as_deref(), flags).map_err(Failure::usage)?;
    config.validate().map_err(Failure::usage)?;
    let store =
        config.store.as_deref().context("--store URL is required").map_err(Failure::Usage)?;
    hdfs_loader::store_from_url(store).map_err(Failure::usage)?;
    if loads {
        if config.zookeeper.is_none() {
            return Err(Failure::usage(anyhow::anyhow!("--zookeeper CONNECT is required")));
        }
        let registry = config
            .registry
            .as_deref()
            .context("--registry URL is required")
            .map_err(Failure::Usage)?;
        RegistryClient::new(registry).map_err(Failure::usage)?;
        config.tls.client().map_err(Failure::usage)?;
        config.tls.server().map_err(Failure::usage)?;
    }
    if config.format == hdfs_loader::Format::Iceberg {
        config.catalog_uri().map_err(Failure::usage)?;
    }
    Ok(config)
}

fn start(cli: Cli) -> Result<(), Failure> {
    let (config, json) = match &cli.command {
        Command::Run(args) => (config(&args.common, args, true)?, args.json),
        Command::Serve(args) => (config(&args.load.common, args, true)?, args.load.json),
        Command::Status(args) => (config(&args.common, args, false)?, args.json),
        Command::Maintain(args) => (config(&args.common, args, false)?, args.json),
    };
    service::logging::init("info").map_err(Failure::usage)?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let code = runtime.block_on(execute(&cli.command, config, json))?;
    if code != ExitCode::SUCCESS {
        return Err(Failure::Runtime(anyhow::anyhow!("the run ended with errors")));
    }
    Ok(())
}

async fn execute(command: &Command, config: Config, json: bool) -> anyhow::Result<ExitCode> {
    let shutdown = service::shutdown::on_signal()?;
    let store = hdfs_loader::store_from_url(config.store.as_deref().expect("checked"))?;
    let coordinator: Option<Arc<dyn Coordinator>> = match &config.zookeeper {
        Some(connect) => Some(config.zookeeper_session.connect(connect).await?),
        None => None,
    };
    if let Command::Maintain(_) = command {
        let output = hdfs_loader::Output::open(&config, store).await?;
        let done = hdfs_loader::maintain(&output, &config).await?;
        if json {
            println!("{}", serde_json::to_string_pretty(&done)?);
        } else {
            for m in &done {
                let c = &m.compacted;
                if c.hours > 0 {
                    println!(
                        "{}  compacted {} hours: {} files ({} bytes) into {} ({} bytes), {} rows",
                        m.table,
                        c.hours,
                        c.files_removed,
                        c.bytes_removed,
                        c.files_added,
                        c.bytes_added,
                        c.rows
                    );
                } else if c.conflict {
                    println!(
                        "{}  compaction met a commit and was not kept; the next pass tries again",
                        m.table
                    );
                }
                println!(
                    "{}  snapshots expired {}  kept {}  orphan files deleted {} ({} bytes)  younger than the grace {}",
                    m.table,
                    m.snapshots_expired,
                    m.snapshots_kept,
                    m.orphans_deleted,
                    m.orphan_bytes_deleted,
                    m.orphans_in_grace
                );
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Command::Status(_) = command {
        let cluster = coordinator.map(cluster::Registry::new);
        let output = hdfs_loader::Output::open(&config, store).await?;
        let status = hdfs_loader::status(&output, cluster.as_ref(), config.tls.client()?).await?;
        if json {
            println!("{}", serde_json::to_string_pretty(&status)?);
        } else {
            print!("{}", status.to_text());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let coordinator = coordinator.expect("checked before the runtime started");
    let registry_url = config.registry.as_deref().expect("checked before the runtime started");
    let registry = Arc::new(RegistryClient::with_tls(registry_url, config.tls.client()?)?);
    if let Command::Serve(_) = command {
        let metrics = match &config.metrics {
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen for metrics on {addr}"))?;
                println!("metrics listening on {}", listener.local_addr()?);
                Some(listener)
            }
            None => None,
        };
        hdfs_loader::serve(&config, coordinator, store, registry, metrics, shutdown).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let summary = hdfs_loader::run_once(&config, coordinator, store, registry, shutdown).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        for p in &summary.partitions {
            println!(
                "{}/{}  [{}, {})  rows {}  commits {}{}",
                p.topic,
                p.partition,
                p.start,
                p.end,
                p.rows,
                p.commits,
                if p.fenced { "  fenced" } else { "" }
            );
        }
        for skipped in &summary.skipped {
            println!("{skipped}  owned by another loader");
        }
        println!("rows {}  audit records {}", summary.rows, summary.audit_records_published);
    }
    for error in &summary.errors {
        eprintln!("hdfs-loader: {error}");
    }
    Ok(if summary.errors.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
