//! `mirror --source NAME=CONNECT/chroot [--source …] --target CONNECT/chroot --registry URL
//! [flags]`: connects to every cluster's ZooKeeper, binds the metrics listener, and copies
//! until SIGTERM or SIGINT, then drains, commits and exits.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use cluster::{Coordinator, ZooKeeper, ZooKeeperConfig};
use mirror::Config;
use schema_registry::RegistryClient;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

/// Copies every topic of the live clusters into the analytics cluster, at least once.
#[derive(Debug, Default, Parser, Deserialize)]
#[command(version, about)]
#[serde(default, deny_unknown_fields)]
struct Cli {
    /// TOML file whose keys are the flag names below (with `_` for `-`; `source` is a list);
    /// flags override it.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// A live cluster to copy from, `NAME=host:port[,host:port…]/chroot`; repeat for several.
    #[arg(long, value_name = "NAME=CONNECT")]
    source: Vec<String>,
    /// The analytics cluster's ZooKeeper, `host:port[,host:port…]/chroot`.
    #[arg(long, value_name = "CONNECT")]
    target: Option<String>,
    /// Schema registry URL (for the `_audit` schema).
    #[arg(long, value_name = "URL")]
    registry: Option<String>,
    /// Consumer group on every source cluster [default: mirror].
    #[arg(long, value_name = "G")]
    group: Option<String>,
    /// Copy only topics whose whole name matches [default: all].
    #[arg(long, value_name = "REGEX")]
    include: Option<String>,
    /// Skip topics whose whole name matches.
    #[arg(long, value_name = "REGEX")]
    exclude: Option<String>,
    /// Partitions per target broker of a topic created on the target [default: 8].
    #[arg(long, value_name = "N")]
    partitions: Option<u32>,
    /// Serve `/metrics` here.
    #[arg(long, value_name = "HOST:PORT")]
    metrics: Option<String>,
    /// Host named in audit records [default: the hostname].
    #[arg(long, value_name = "NAME")]
    host_name: Option<String>,
    /// Commit acknowledged source offsets this often [default: 1000].
    #[arg(long, value_name = "MS")]
    commit_ms: Option<u64>,
    /// Messages per source stream read and not yet acknowledged, at most [default: 20000].
    #[arg(long, value_name = "N")]
    inflight_messages: Option<usize>,
    /// Bytes sent to the target and not yet acknowledged, at most [default: 67108864].
    #[arg(long, value_name = "B")]
    buffer_bytes: Option<usize>,
    /// Audit window length [default: 600000].
    #[arg(long, value_name = "MS")]
    audit_window_ms: Option<i64>,
    /// Publish changed audit counts this often [default: 5000].
    #[arg(long, value_name = "MS")]
    audit_publish_ms: Option<u64>,
    /// Refresh lag and rates in /metrics this often [default: 5000].
    #[arg(long, value_name = "MS")]
    metrics_refresh_ms: Option<u64>,
    /// On shutdown, wait this long for the target to acknowledge what is in flight [default: 10000].
    #[arg(long, value_name = "MS")]
    drain_timeout_ms: Option<u64>,
    /// ZooKeeper session timeout of every cluster connection [default: 6000].
    #[arg(long, value_name = "MS")]
    zookeeper_session_timeout_ms: Option<u64>,
}

/// Everything `main` needs, checked.
struct Settings {
    config: Config,
    sources: Vec<(String, String)>,
    target: String,
    registry: String,
    metrics: Option<String>,
    session_timeout_ms: u64,
}

impl Cli {
    fn into_settings(self) -> anyhow::Result<Settings> {
        let mut file = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                toml::from_str::<Cli>(&text)
                    .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.message().trim()))?
            }
            None => Cli::default(),
        };
        macro_rules! apply {
            ($($field:ident),*) => { $(if self.$field.is_some() { file.$field = self.$field; })* };
        }
        apply!(
            target,
            registry,
            group,
            include,
            exclude,
            partitions,
            metrics,
            host_name,
            commit_ms,
            inflight_messages,
            buffer_bytes,
            audit_window_ms,
            audit_publish_ms,
            metrics_refresh_ms,
            drain_timeout_ms,
            zookeeper_session_timeout_ms
        );
        if !self.source.is_empty() {
            file.source = self.source;
        }
        let mut config = Config::default();
        macro_rules! set {
            ($($field:ident),*) => { $(if let Some(v) = file.$field { config.$field = v; })* };
        }
        set!(
            group,
            partitions,
            commit_ms,
            inflight_messages,
            buffer_bytes,
            audit_window_ms,
            audit_publish_ms,
            metrics_refresh_ms,
            drain_timeout_ms
        );
        config.include = file.include;
        config.exclude = file.exclude;
        config.host_name = file.host_name;
        config.validate()?;
        if file.source.is_empty() {
            anyhow::bail!("at least one --source NAME=CONNECT is required");
        }
        let mut sources: Vec<(String, String)> = Vec::new();
        for source in &file.source {
            let Some((name, connect)) = source.split_once('=') else {
                anyhow::bail!("--source {source:?} is not NAME=CONNECT");
            };
            let valid = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
            if !valid || connect.is_empty() {
                anyhow::bail!(
                    "--source {source:?}: NAME must be [A-Za-z0-9._-]+ and CONNECT not empty"
                );
            }
            if sources.iter().any(|(n, _)| n == name) {
                anyhow::bail!("--source {name:?} is given twice");
            }
            sources.push((name.to_owned(), connect.to_owned()));
        }
        let target = file.target.context("--target CONNECT is required")?;
        let registry = file.registry.context("--registry URL is required")?;
        let session_timeout_ms = file.zookeeper_session_timeout_ms.unwrap_or(6_000);
        if !(1_000..=60_000).contains(&session_timeout_ms) {
            anyhow::bail!("--zookeeper-session-timeout-ms must be between 1000 and 60000");
        }
        Ok(Settings {
            config,
            sources,
            target,
            registry,
            metrics: file.metrics,
            session_timeout_ms,
        })
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            eprintln!("mirror: {}", first.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    let settings = match cli.into_settings() {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("mirror: {e:#}");
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
            eprintln!("mirror: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn serve(settings: Settings) -> anyhow::Result<()> {
    let connect = |connect: String| async move {
        let mut config = ZooKeeperConfig::new(connect.clone());
        config.session_timeout_ms = settings.session_timeout_ms;
        let session: Arc<dyn Coordinator> = ZooKeeper::connect(config)
            .await
            .with_context(|| format!("cannot connect to ZooKeeper at {connect}"))?;
        anyhow::Ok(session)
    };
    let mut sources = Vec::new();
    for (name, source) in settings.sources {
        sources.push((name, connect(source).await?));
    }
    let target = connect(settings.target).await?;
    let registry = RegistryClient::new(&settings.registry)
        .with_context(|| format!("bad registry URL {}", settings.registry))?;
    let metrics = match &settings.metrics {
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
    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        signal.cancel();
    });
    let totals = mirror::run(settings.config, sources, target, registry, metrics, shutdown).await?;
    tracing::info!(messages = totals.messages(), events = totals.events(), "mirror stopped");
    Ok(())
}

/// Completes on the first SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) =
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        tracing::error!("cannot install signal handlers; stop the mirror with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = int.recv() => tracing::info!("SIGINT"),
    }
}
