//! `mirror --source NAME=CONNECT/chroot [--source …] --target CONNECT/chroot [flags]`: connects to every cluster's ZooKeeper, binds the metrics listener, and copies
//! until SIGTERM or SIGINT, then drains, commits and exits.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use cluster::Coordinator;
use mirror::Config;
use serde::Serialize;
use service::Failure;

/// Copies every topic of the live clusters into the analytics cluster, exactly once.
#[derive(Debug, Parser, Serialize)]
#[command(version, about)]
struct Cli {
    /// TOML file whose keys are the flag names below (with `_` for `-`; `source` is a list);
    /// flags override it.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// A live cluster to copy from, `NAME=host:port[,host:port…]/chroot`; repeat for several.
    #[arg(long, value_name = "NAME=CONNECT")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    source: Vec<String>,
    /// The analytics cluster's ZooKeeper, `host:port[,host:port…]/chroot`.
    #[arg(long, value_name = "CONNECT")]
    target: Option<String>,
    /// Consumer group on every source cluster [default: mirror].
    #[arg(long, value_name = "G")]
    group: Option<String>,
    /// Copy only topics whose whole name matches [default: all].
    #[arg(long, value_name = "REGEX")]
    include: Option<String>,
    /// Skip topics whose whole name matches.
    #[arg(long, value_name = "REGEX")]
    exclude: Option<String>,
    /// Partitions, across the target cluster, of a topic created there [default: 8].
    #[arg(long, value_name = "N")]
    partitions: Option<u32>,
    /// Serve `/metrics` here.
    #[arg(long, value_name = "HOST:PORT")]
    metrics: Option<String>,
    /// Commit acknowledged source offsets this often [default: 1000].
    #[arg(long, value_name = "MS")]
    commit_ms: Option<u64>,
    /// Runs of messages (≤ 256 KiB each) per source stream read and not yet acknowledged, at
    /// most [default: 20000].
    #[arg(long, value_name = "N")]
    inflight_messages: Option<usize>,
    /// Bytes read from the sources and not yet acknowledged by the target, at most, over
    /// every stream [default: 67108864].
    #[arg(long, value_name = "B")]
    buffer_bytes: Option<usize>,
    /// Refresh lag in /metrics this often [default: 5000].
    #[arg(long, value_name = "MS")]
    metrics_refresh_ms: Option<u64>,
    /// On shutdown, wait this long for the target to acknowledge what is in flight [default: 10000].
    #[arg(long, value_name = "MS")]
    drain_timeout_ms: Option<u64>,
    #[command(flatten)]
    #[serde(flatten)]
    zookeeper_session: cluster::ZooKeeperArgs,
    #[command(flatten)]
    #[serde(flatten)]
    tls: service::tls::TlsArgs,
}

fn main() -> ExitCode {
    let cli: Cli = service::cli::parse("mirror");
    service::cli::finish("mirror", start(cli))
}

fn start(cli: Cli) -> Result<(), Failure> {
    let config: Config =
        service::config::load(cli.config.as_deref(), &cli).map_err(Failure::usage)?;
    config.validate().map_err(Failure::usage)?;
    config.connections().map_err(Failure::usage)?;
    config.tls.client().map_err(Failure::usage)?;
    config.tls.server().map_err(Failure::usage)?;
    service::cli::run(serve(config))
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let shutdown = service::shutdown::on_signal()?;
    let mirror::Connections { sources, target } = config.connections()?;
    let mut sessions = Vec::new();
    for (name, source) in sources {
        let session: Arc<dyn Coordinator> = config.zookeeper_session.connect(&source).await?;
        sessions.push((name, session));
    }
    let target = config.zookeeper_session.connect(&target).await?;
    let metrics = match &config.metrics {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            let local = listener.local_addr()?;
            use std::io::Write as _;
            println!("listening on {local}");
            std::io::stdout().flush()?;
            Some(listener)
        }
        None => None,
    };
    let totals = mirror::run(config, sessions, target, metrics, shutdown).await?;
    tracing::info!(messages = totals.messages(), events = totals.events(), "mirror stopped");
    Ok(())
}
