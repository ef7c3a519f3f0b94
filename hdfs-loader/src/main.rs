//! `hdfs-loader run|serve|status`: parses flags and `--config FILE`, connects ZooKeeper and
//! the store, installs SIGTERM/SIGINT handling, and calls the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use cluster::{Coordinator, ZooKeeper, ZooKeeperConfig};
use hdfs_loader::Config;
use schema_registry::RegistryClient;
use tokio_util::sync::CancellationToken;

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
    Serve {
        #[command(flatten)]
        load: LoadArgs,
        /// Time between rounds: `500ms`, `30s`, `5m`, `1h` (default 1m).
        #[arg(long, value_name = "DURATION")]
        interval: Option<String>,
    },
    /// Print per partition the committed offset, log end, lag and last commit, and per hour
    /// whether every partition has passed it.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
struct Common {
    /// TOML file whose keys are the flag names (with `_` for `-`); flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Where to write: file:///path, s3://bucket/prefix or memory://.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// The analytics cluster's ZooKeeper, `host:port[,…][/chroot]`.
    #[arg(long, value_name = "CONNECT")]
    zookeeper: Option<String>,
    #[arg(long, value_name = "MS")]
    zookeeper_session_timeout_ms: Option<u64>,
}

#[derive(Debug, Args)]
struct LoadArgs {
    #[command(flatten)]
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
    window_ms: Option<i64>,
    /// Publish `loader` audit counts to `_audit`.
    #[arg(long, value_name = "BOOL")]
    audit: Option<bool>,
    #[arg(long, value_name = "MS")]
    staging_grace_ms: Option<u64>,
    /// Print the run's summary as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct StatusArgs {
    #[command(flatten)]
    common: Common,
    #[arg(long)]
    json: bool,
}

/// The file's keys the binary itself uses; the rest are the library's [`Config`].
#[derive(Debug, Default)]
struct FileKeys {
    store: Option<String>,
    zookeeper: Option<String>,
    zookeeper_session_timeout_ms: Option<u64>,
    registry: Option<String>,
    interval: Option<String>,
    loader: Config,
}

fn read_file(path: Option<&PathBuf>) -> anyhow::Result<FileKeys> {
    let Some(path) = path else { return Ok(FileKeys::default()) };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut table: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not valid TOML", path.display()))?;
    let mut string = |key: &str| -> anyhow::Result<Option<String>> {
        match table.remove(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s)),
            Some(_) => bail!("{}: {key} must be a string", path.display()),
        }
    };
    let store = string("store")?;
    let zookeeper = string("zookeeper")?;
    let registry = string("registry")?;
    let interval = string("interval")?;
    let zookeeper_session_timeout_ms = match table.remove("zookeeper_session_timeout_ms") {
        None => None,
        Some(toml::Value::Integer(n)) if n > 0 => Some(n as u64),
        Some(_) => {
            bail!("{}: zookeeper_session_timeout_ms must be a positive integer", path.display())
        }
    };
    let loader: Config =
        toml::Value::Table(table).try_into().with_context(|| format!("{}", path.display()))?;
    Ok(FileKeys { store, zookeeper, zookeeper_session_timeout_ms, registry, interval, loader })
}

/// Everything a command needs, flags applied over the file.
struct Settings {
    store: String,
    zookeeper: Option<ZooKeeperConfig>,
    registry: Option<String>,
    interval: Duration,
    loader: Config,
}

fn settings(
    common: &Common,
    load: Option<&LoadArgs>,
    interval: Option<&str>,
) -> anyhow::Result<Settings> {
    let file = read_file(common.config.as_ref())?;
    let store = common.store.clone().or(file.store).context("--store URL is required")?;
    let zookeeper = common.zookeeper.clone().or(file.zookeeper).map(|connect| {
        let mut zk = ZooKeeperConfig::new(connect);
        if let Some(ms) = common.zookeeper_session_timeout_ms.or(file.zookeeper_session_timeout_ms)
        {
            zk.session_timeout_ms = ms;
        }
        zk
    });
    let interval_text = interval.map(str::to_owned).or(file.interval);
    let interval = match interval_text {
        Some(text) => parse_duration(&text).with_context(|| format!("--interval {text:?}"))?,
        None => Duration::from_secs(60),
    };
    let mut loader = file.loader;
    let mut registry = file.registry;
    if let Some(args) = load {
        macro_rules! apply {
            ($($field:ident),*) => { $(if let Some(v) = &args.$field { loader.$field = v.clone(); })* };
        }
        apply!(
            group,
            max_messages_per_commit,
            row_group_rows,
            batch_rows,
            partitions_in_parallel,
            fetch_bytes,
            zstd_level,
            window_ms,
            audit,
            staging_grace_ms
        );
        if args.topics.is_some() {
            loader.topics = args.topics.clone();
        }
        if args.host_name.is_some() {
            loader.host_name = args.host_name.clone();
        }
        if args.bad_records.is_some() {
            loader.bad_records = args.bad_records.clone();
        }
        if args.registry.is_some() {
            registry = args.registry.clone();
        }
    }
    loader.validate()?;
    hdfs_loader::store_from_url(&store)?;
    Ok(Settings { store, zookeeper, registry, interval, loader })
}

/// A message on one line (TOML errors quote the file over several).
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `500ms`, `30s`, `5m`, `1h`, or a number of seconds.
fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().context("expected a number followed by ms, s, m or h")?;
    let ms = match unit {
        "ms" => n,
        "" | "s" => n.saturating_mul(1_000),
        "m" => n.saturating_mul(60_000),
        "h" => n.saturating_mul(3_600_000),
        _ => bail!("unknown unit {unit:?} (ms, s, m or h)"),
    };
    if ms == 0 {
        bail!("must be positive");
    }
    Ok(Duration::from_millis(ms))
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            eprintln!("hdfs-loader: {}", first.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    let (settings, json) = match &cli.command {
        Command::Run(args) => (settings(&args.common, Some(args), None), args.json),
        Command::Serve { load, interval } => {
            (settings(&load.common, Some(load), interval.as_deref()), load.json)
        }
        Command::Status(args) => (settings(&args.common, None, None), args.json),
    };
    let settings = match settings {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("hdfs-loader: {}", one_line(&format!("{e:#}")));
            return ExitCode::from(2);
        }
    };
    if !matches!(cli.command, Command::Status(_)) {
        let missing = if settings.zookeeper.is_none() {
            Some("--zookeeper CONNECT")
        } else if settings.registry.is_none() {
            Some("--registry URL")
        } else {
            None
        };
        if let Some(missing) = missing {
            eprintln!("hdfs-loader: {missing} is required");
            return ExitCode::from(2);
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match execute(&cli.command, settings, json) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hdfs-loader: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn execute(command: &Command, settings: Settings, json: bool) -> anyhow::Result<ExitCode> {
    let store = hdfs_loader::store_from_url(&settings.store)?;
    let coordinator: Option<Arc<dyn Coordinator>> = match &settings.zookeeper {
        Some(zk) => Some(
            ZooKeeper::connect(zk.clone())
                .await
                .with_context(|| format!("cannot connect to ZooKeeper at {}", zk.connect))?,
        ),
        None => None,
    };
    if let Command::Status(_) = command {
        let cluster = coordinator.map(cluster::Registry::new);
        let status = hdfs_loader::status(store, cluster.as_ref()).await?;
        if json {
            println!("{}", serde_json::to_string_pretty(&status)?);
        } else {
            print!("{}", status.to_text());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let coordinator = coordinator.expect("checked in main");
    let registry_url = settings.registry.as_deref().expect("checked in main");
    let registry = Arc::new(RegistryClient::new(registry_url)?);
    let shutdown = CancellationToken::new();
    tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            shutdown_signal().await;
            shutdown.cancel();
        }
    });
    match command {
        Command::Serve { .. } => {
            hdfs_loader::serve(
                &settings.loader,
                coordinator,
                store,
                registry,
                settings.interval,
                shutdown,
            )
            .await?;
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            let summary =
                hdfs_loader::run_once(&settings.loader, coordinator, store, registry, shutdown)
                    .await?;
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
                println!(
                    "rows {}  audit records {}",
                    summary.rows, summary.audit_records_published
                );
            }
            for error in &summary.errors {
                eprintln!("hdfs-loader: {error}");
            }
            Ok(if summary.errors.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
    }
}

/// Completes on the first SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) =
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        tracing::error!("cannot install signal handlers; stop the loader with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: committing what is staged, then stopping"),
        _ = int.recv() => tracing::info!("SIGINT: committing what is staged, then stopping"),
    }
}
