//! `frontend-agent serve …` runs the agent; `frontend-agent simulate …` generates activity
//! into a running agent (`--agent URL`) or into one started in-process from the serve flags.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use cluster::{ZooKeeper, ZooKeeperConfig};
use frontend_agent::{Agent, Brokers, Config, SpoolFull, Target};
use schema_registry::RegistryClient;
use tokio_util::sync::CancellationToken;

/// The frontend agent: ships activity events to the live brokers through a durable spool.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Accept events over HTTP (and from tailed files) and ship them.
    Serve(ServeArgs),
    /// Generate realistic activity for demos and benchmarks.
    Simulate(SimulateArgs),
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// TOML file whose keys are the flag names (with `_` for `-`); flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Schema registry URL.
    #[arg(long, value_name = "URL")]
    registry: Option<String>,
    /// Broker or load-balancer addresses (events go to partition −1).
    #[arg(long, value_name = "HOST:PORT,…", value_delimiter = ',')]
    brokers: Option<Vec<String>>,
    /// Find brokers in this ZooKeeper: host:port[,…][/chroot].
    #[arg(long, value_name = "CONNECT")]
    zookeeper: Option<String>,
    /// Where the HTTP input listens.
    #[arg(long, value_name = "HOST:PORT")]
    http: Option<String>,
    #[arg(long, value_name = "DIR")]
    spool_dir: Option<PathBuf>,
    /// header.service of events that name none.
    #[arg(long, value_name = "NAME")]
    service: Option<String>,
    /// header.server of events that name none, and the audit's host (default: hostname).
    #[arg(long, value_name = "NAME")]
    host_name: Option<String>,
    /// 1: acknowledged once appended; 2: once flushed to disk.
    #[arg(long, value_name = "1|2")]
    acks: Option<u8>,
    #[arg(long, value_name = "MS")]
    audit_window_ms: Option<i64>,
    /// How often changed audit counts are published.
    #[arg(long, value_name = "MS")]
    audit_publish_ms: Option<u64>,
    #[arg(long, value_name = "B")]
    spool_max_bytes: Option<u64>,
    /// What to do when the spool is full.
    #[arg(long, value_name = "block|drop-oldest")]
    spool_full: Option<String>,
    /// Follow a newline-delimited JSON file into a topic (repeatable).
    #[arg(long, value_name = "FILE=TOPIC")]
    tail: Vec<String>,
    /// Batch compression: none, gzip, lz4 or zstd.
    #[arg(long, value_name = "CODEC")]
    compression: Option<String>,
}

#[derive(Debug, Args)]
struct SimulateArgs {
    /// Events per second.
    #[arg(long, value_name = "N")]
    rate: u64,
    /// Seconds to run.
    #[arg(long, value_name = "S")]
    duration: f64,
    #[arg(
        long,
        value_name = "T,…",
        value_delimiter = ',',
        default_value = "page-view,click,search"
    )]
    topics: Vec<String>,
    /// A running agent's URL; without it, an agent is started in-process from the serve flags.
    #[arg(long, value_name = "URL")]
    agent: Option<String>,
    #[command(flatten)]
    serve: ServeArgs,
}

impl ServeArgs {
    fn into_config(self) -> anyhow::Result<Config> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        macro_rules! apply {
            ($($field:ident),*) => { $(if let Some(v) = self.$field { config.$field = v; })* };
        }
        apply!(
            registry,
            brokers,
            http,
            spool_dir,
            service,
            acks,
            audit_window_ms,
            audit_publish_ms,
            spool_max_bytes,
            compression
        );
        if self.zookeeper.is_some() {
            config.zookeeper = self.zookeeper;
        }
        if self.host_name.is_some() {
            config.host_name = self.host_name;
        }
        if let Some(policy) = self.spool_full {
            config.spool_full = policy.parse::<SpoolFull>()?;
        }
        if !self.tail.is_empty() {
            config.tail = self.tail;
        }
        config.validate()?;
        config.validate_brokers()?;
        RegistryClient::new(&config.registry)?;
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
            eprintln!("frontend-agent: {}", first.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Serve(args) => match args.into_config() {
            Ok(config) => {
                init_logging();
                serve(config)
            }
            Err(e) => return usage_error(&e),
        },
        Command::Simulate(args) => {
            if args.rate == 0 || !args.duration.is_finite() || args.duration <= 0.0 {
                return usage_error(&anyhow::anyhow!("--rate and --duration must be positive"));
            }
            let config = match &args.agent {
                Some(_) => None,
                None => match args.serve.into_config() {
                    Ok(config) => Some(config),
                    Err(e) => return usage_error(&e),
                },
            };
            init_logging();
            let duration = Duration::from_secs_f64(args.duration);
            simulate(args.agent, config, args.rate, duration, args.topics)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("frontend-agent: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn usage_error(e: &anyhow::Error) -> ExitCode {
    eprintln!("frontend-agent: {e:#}");
    ExitCode::from(2)
}

fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// The registry client and the live brokers a config names.
async fn connect(config: &Config) -> anyhow::Result<(Arc<RegistryClient>, Brokers)> {
    let registry = Arc::new(RegistryClient::new(&config.registry)?);
    let brokers = match &config.zookeeper {
        Some(connect) => {
            let zk_config = ZooKeeperConfig {
                session_timeout_ms: config.zookeeper_session_timeout_ms,
                ..ZooKeeperConfig::new(connect.clone())
            };
            let session = ZooKeeper::connect(zk_config)
                .await
                .with_context(|| format!("cannot reach ZooKeeper at {connect}"))?;
            Brokers::Cluster(session)
        }
        None => Brokers::Addrs(config.brokers.clone()),
    };
    Ok((registry, brokers))
}

#[tokio::main]
async fn serve(config: Config) -> anyhow::Result<()> {
    let (registry, brokers) = connect(&config).await?;
    let listener = tokio::net::TcpListener::bind(&config.http)
        .await
        .with_context(|| format!("cannot listen on {}", config.http))?;
    let addr = listener.local_addr().context("the listener's address")?;
    let agent = Agent::start(config, brokers, registry).await?;
    println!("listening on {addr}");
    std::io::stdout().flush().context("stdout")?;
    let served = frontend_agent::serve_http(listener, agent.clone(), shutdown_signal()).await;
    agent.shutdown().await?;
    served.context("the HTTP server failed")?;
    Ok(())
}

#[tokio::main]
async fn simulate(
    agent_url: Option<String>,
    config: Option<Config>,
    rate: u64,
    duration: Duration,
    topics: Vec<String>,
) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        signal.cancel();
    });
    let (target, agent) = match (agent_url, config) {
        (Some(url), _) => (Target::Http(url), None),
        (None, Some(config)) => {
            let (registry, brokers) = connect(&config).await?;
            let agent = Agent::start(config, brokers, registry).await?;
            (Target::Agent(agent.clone()), Some(agent))
        }
        (None, None) => unreachable!("main builds a config when no agent URL is given"),
    };
    let report = frontend_agent::simulate(target, rate, duration, &topics, shutdown).await?;
    let per_topic: Vec<String> = report.accepted.iter().map(|(t, n)| format!("{t}: {n}")).collect();
    println!(
        "accepted {} events ({}), refused {}",
        report.accepted_total(),
        per_topic.join(", "),
        report.refused
    );
    if let Some(agent) = agent {
        agent.shutdown().await?;
        println!("acknowledged {}", agent.acknowledged());
    }
    Ok(())
}

/// Completes on the first SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) =
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        tracing::error!("cannot install signal handlers; stop the agent with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = int.recv() => tracing::info!("SIGINT"),
    }
}
