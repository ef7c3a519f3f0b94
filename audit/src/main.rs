//! `audit --zookeeper CONNECT [--live NAME=CONNECT …] --registry URL --http HOST:PORT`: parses
//! the configuration, connects ZooKeeper for the analytics cluster and each live cluster,
//! binds, and runs the audit service until SIGTERM or SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use audit::Config;
use clap::Parser;
use cluster::{Coordinator, ZooKeeper, ZooKeeperConfig};
use schema_registry::RegistryClient;
use tokio_util::sync::CancellationToken;

/// Reconciles per-window event counts of every pipeline tier and shows loss on a dashboard.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// TOML file whose keys are the flag names below (with `_` for `-`); flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// ZooKeeper of the analytics cluster (`host:port[,…][/chroot]`), whose `_audit` is read.
    #[arg(long, value_name = "CONNECT")]
    zookeeper: Option<String>,
    /// A live cluster to count, `NAME=host:port[/chroot]`; repeat for each. Replaces the file's list.
    #[arg(long, value_name = "NAME=CONNECT")]
    live: Vec<String>,
    /// Schema registry URL, to decode `_audit` records.
    #[arg(long, value_name = "URL")]
    registry: Option<String>,
    /// Where the dashboard, API and metrics listen.
    #[arg(long, value_name = "HOST:PORT")]
    http: Option<String>,
    /// Window length (every tier's records must use the same).
    #[arg(long, value_name = "MS")]
    window_ms: Option<i64>,
    /// How long after a window closes a shortfall may still be made good before it is loss.
    #[arg(long, value_name = "MS")]
    grace_ms: Option<i64>,
    /// The same for the loader tier, a batch job: cover its run interval (default: --grace-ms).
    #[arg(long, value_name = "MS")]
    loader_grace_ms: Option<i64>,
}

struct Settings {
    config: Config,
    zookeeper: String,
    registry: String,
}

impl Cli {
    fn into_settings(self) -> anyhow::Result<Settings> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        if self.zookeeper.is_some() {
            config.zookeeper = self.zookeeper;
        }
        if !self.live.is_empty() {
            config.live = self.live;
        }
        if self.registry.is_some() {
            config.registry = self.registry;
        }
        if let Some(http) = self.http {
            config.http = http;
        }
        if let Some(window_ms) = self.window_ms {
            config.window_ms = window_ms;
        }
        if let Some(grace_ms) = self.grace_ms {
            config.grace_ms = grace_ms;
        }
        if self.loader_grace_ms.is_some() {
            config.loader_grace_ms = self.loader_grace_ms;
        }
        config.validate()?;
        let zookeeper =
            config.zookeeper.clone().context("--zookeeper (the analytics cluster) is required")?;
        let registry = config.registry.clone().context("--registry is required")?;
        Ok(Settings { config, zookeeper, registry })
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            eprintln!("audit: {}", first.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    let settings = match cli.into_settings() {
        Ok(settings) => settings,
        Err(e) => {
            // One line: a TOML parse error spans several.
            let text = format!("{e:#}");
            eprintln!("audit: {}", text.split_whitespace().collect::<Vec<_>>().join(" "));
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match serve(settings) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("audit: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn connect(connect: &str) -> anyhow::Result<Arc<dyn Coordinator>> {
    let zookeeper = ZooKeeper::connect(ZooKeeperConfig::new(connect))
        .await
        .with_context(|| format!("cannot connect to ZooKeeper at {connect}"))?;
    Ok(zookeeper)
}

#[tokio::main]
async fn serve(settings: Settings) -> anyhow::Result<()> {
    let Settings { config, zookeeper, registry } = settings;
    let registry = RegistryClient::new(&registry)?;
    let analytics = connect(&zookeeper).await?;
    let mut live = Vec::new();
    for cluster in config.live_clusters()? {
        live.push((cluster.name, connect(&cluster.connect).await?));
    }
    let listener = tokio::net::TcpListener::bind(&config.http)
        .await
        .with_context(|| format!("cannot listen on {}", config.http))?;
    let addr = listener.local_addr()?;
    println!("listening on {addr}");
    use std::io::Write;
    std::io::stdout().flush()?;

    let shutdown = CancellationToken::new();
    let signalled = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        signalled.cancel();
    });
    audit::run(config, analytics, live, registry, listener, shutdown).await?;
    Ok(())
}

/// Completes on the first SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) =
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        tracing::error!("cannot install signal handlers; stop the audit service with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = int.recv() => tracing::info!("SIGINT"),
    }
}
