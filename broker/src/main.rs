//! `broker --config FILE [flags]`: parses the configuration, binds, and runs until SIGTERM or
//! SIGINT, then flushes every partition and exits.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use broker::{BrokerConfig, VisibleAfter};
use clap::Parser;

/// A Tributary broker: partitioned append-only logs served over TCP.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// TOML file whose keys are the flag names below (with `_` for `-`); flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[arg(long, value_name = "N")]
    broker_id: Option<i32>,
    /// Address to listen on.
    #[arg(long, value_name = "H")]
    host: Option<String>,
    #[arg(long, value_name = "P")]
    port: Option<u16>,
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Partitions of a topic created without an explicit count.
    #[arg(long, value_name = "N")]
    num_partitions: Option<u32>,
    /// Create an unknown topic on its first produce.
    #[arg(long, value_name = "BOOL")]
    auto_create_topics: Option<bool>,
    /// Largest request accepted, checked before anything is allocated.
    #[arg(long, value_name = "B")]
    max_request_bytes: Option<u32>,
    /// Largest message (its bytes after the length field).
    #[arg(long, value_name = "B")]
    max_message_bytes: Option<u32>,
    /// Connections beyond this many are closed at once.
    #[arg(long, value_name = "N")]
    max_connections: Option<u32>,
    /// Long-poll fetches waiting for data at once; one more is answered at once.
    #[arg(long, value_name = "N")]
    max_parked_fetches: Option<u32>,
    /// The longest a long-poll fetch waits, whatever it asks for.
    #[arg(long, value_name = "MS")]
    max_fetch_wait_ms: Option<u64>,
    /// Flush a partition after this many messages...
    #[arg(long, value_name = "N")]
    flush_messages: Option<u64>,
    /// ...or when its oldest unflushed message is this old.
    #[arg(long, value_name = "MS")]
    flush_ms: Option<u64>,
    /// Roll to a new segment file at this size...
    #[arg(long, value_name = "B")]
    segment_bytes: Option<u64>,
    /// ...or when the last segment is this old.
    #[arg(long, value_name = "MS")]
    segment_ms: Option<u64>,
    /// When appended data becomes visible to fetches: `flush` (once on disk) or `write` (once
    /// in the page cache; a machine crash can lose data a consumer saw).
    #[arg(long, value_name = "flush|write")]
    visible_after: Option<VisibleAfter>,
    /// Delete segments last modified longer ago than this.
    #[arg(long, value_name = "MS")]
    retention_ms: Option<u64>,
    /// Delete head segments while a partition is larger than this.
    #[arg(long, value_name = "B")]
    retention_bytes: Option<u64>,
    /// How often to look for segments to delete.
    #[arg(long, value_name = "MS")]
    retention_check_ms: Option<u64>,
    /// Register in this ZooKeeper (`host:port[,host:port…][/chroot]`); standalone without it.
    #[arg(long, value_name = "CONNECT")]
    zookeeper: Option<String>,
    /// ZooKeeper session timeout.
    #[arg(long, value_name = "MS")]
    zookeeper_session_timeout_ms: Option<u64>,
}

impl Cli {
    fn into_config(self) -> anyhow::Result<BrokerConfig> {
        let mut config = match &self.config {
            Some(path) => BrokerConfig::from_file(path)?,
            None => BrokerConfig::default(),
        };
        macro_rules! apply {
            ($($field:ident),*) => { $(if let Some(v) = self.$field { config.$field = v; })* };
        }
        apply!(
            broker_id,
            host,
            port,
            data_dir,
            num_partitions,
            auto_create_topics,
            max_request_bytes,
            max_message_bytes,
            max_connections,
            max_parked_fetches,
            max_fetch_wait_ms,
            flush_messages,
            flush_ms,
            segment_bytes,
            segment_ms,
            visible_after,
            retention_ms,
            retention_check_ms,
            zookeeper_session_timeout_ms
        );
        // Optional in the file too: a flag sets them, its absence keeps the file's value.
        if self.zookeeper.is_some() {
            config.zookeeper = self.zookeeper;
        }
        if self.retention_bytes.is_some() {
            config.retention_bytes = self.retention_bytes;
        }
        config.validate()?;
        Ok(config)
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            eprintln!("broker: {}", first.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    let config = match cli.into_config() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("broker: {e:#}");
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
    match serve(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("broker: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn serve(config: BrokerConfig) -> anyhow::Result<()> {
    let addr = config.listen_addr();
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    broker::run(listener, config, shutdown_signal()).await?;
    Ok(())
}

/// Completes on the first SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) =
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        tracing::error!("cannot install signal handlers; stop the broker with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = int.recv() => tracing::info!("SIGINT"),
    }
}
