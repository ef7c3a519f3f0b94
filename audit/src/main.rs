//! `audit --zookeeper CONNECT [--live NAME=CONNECT …] --registry URL --http HOST:PORT`: parses
//! the configuration, connects ZooKeeper for the analytics cluster and each live cluster,
//! binds, and runs the audit service until SIGTERM or SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use audit::Config;
use clap::Parser;
use cluster::Coordinator;
use schema_registry::RegistryClient;
use serde::Serialize;
use service::Failure;

/// Reconciles per-window event counts of every pipeline tier and shows loss on a dashboard.
#[derive(Debug, Parser, Serialize)]
#[command(version, about)]
#[command(mut_arg("tls_client_ca", |a| a.help("A client certificate signed by this CA lets a client in")))]
struct Cli {
    /// TOML file whose keys are the flag names below (with `_` for `-`); flags override it.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// ZooKeeper of the analytics cluster (`host:port[,…][/chroot]`), whose `_audit` is read.
    #[arg(long, value_name = "CONNECT")]
    zookeeper: Option<String>,
    /// A live cluster to count, `NAME=host:port[/chroot]`; repeat for each. Replaces the file's list.
    #[arg(long, value_name = "NAME=CONNECT")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    live: Vec<String>,
    /// Schema registry URL, to decode `_audit` records.
    #[arg(long, value_name = "URL")]
    registry: Option<String>,
    /// Where the dashboard, API and metrics listen [default: 127.0.0.1:8080].
    #[arg(long, value_name = "HOST:PORT")]
    http: Option<String>,
    /// Window length (every tier's records must use the same).
    #[arg(long, value_name = "MS")]
    audit_window_ms: Option<i64>,
    /// How long after a window closes a shortfall may still be made good before it is loss.
    #[arg(long, value_name = "MS")]
    grace_ms: Option<i64>,
    /// The same for the loader tier, a batch job: cover its run interval (default: --grace-ms).
    #[arg(long, value_name = "MS")]
    loader_grace_ms: Option<i64>,
    /// A tier that has held events its upstream tier counted for longer than this is flagged
    /// (the loader tier: after --loader-grace-ms) [default: 30000].
    #[arg(long, value_name = "MS")]
    held_ms: Option<i64>,
    #[command(flatten)]
    #[serde(flatten)]
    zookeeper_session: cluster::ZooKeeperArgs,
    #[command(flatten)]
    #[serde(flatten)]
    tls: service::tls::TlsArgs,
    /// A file with a bearer token: requests without a client certificate must send
    /// `Authorization: Bearer TOKEN`.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli: Cli = service::cli::parse("audit");
    service::cli::finish("audit", start(cli))
}

fn start(cli: Cli) -> Result<(), Failure> {
    let config: Config =
        service::config::load(cli.config.as_deref(), &cli).map_err(Failure::usage)?;
    config.validate().map_err(Failure::usage)?;
    let required = |value: &Option<String>, what: &str| {
        value.clone().ok_or_else(|| Failure::usage(anyhow::anyhow!("{what} is required")))
    };
    let zookeeper = required(&config.zookeeper, "--zookeeper (the analytics cluster)")?;
    let registry = required(&config.registry, "--registry")?;
    RegistryClient::new(&registry).map_err(Failure::usage)?;
    config.tls.client().map_err(Failure::usage)?;
    service::cli::run(serve(config, zookeeper, registry))
}

async fn serve(config: Config, zookeeper: String, registry: String) -> anyhow::Result<()> {
    let shutdown = service::shutdown::on_signal()?;
    let registry = RegistryClient::with_tls(&registry, config.tls.client()?)?;
    let analytics: Arc<dyn Coordinator> = config.zookeeper_session.connect(&zookeeper).await?;
    let mut live = Vec::new();
    for cluster in config.live_clusters()? {
        let session: Arc<dyn Coordinator> =
            config.zookeeper_session.connect(&cluster.connect).await?;
        live.push((cluster.name, session));
    }
    let listener = tokio::net::TcpListener::bind(&config.http)
        .await
        .with_context(|| format!("cannot listen on {}", config.http))?;
    let addr = listener.local_addr()?;
    println!("listening on {addr}");
    use std::io::Write;
    std::io::stdout().flush()?;

    audit::run(config, analytics, live, registry, listener, shutdown).await?;
    Ok(())
}
