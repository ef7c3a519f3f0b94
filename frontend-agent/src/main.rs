//! `frontend-agent serve …` runs the agent; `frontend-agent simulate …` generates activity
//! into a running agent (`--agent URL`) or into one started in-process from the serve flags.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use frontend_agent::{Agent, Brokers, Config, SpoolFull, Target};
use schema_registry::RegistryClient;
use serde::Serialize;
use service::Failure;

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

#[derive(Debug, Args, Serialize)]
struct ServeArgs {
    /// TOML file whose keys are the flag names (with `_` for `-`); flags override it.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
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
    #[command(flatten)]
    #[serde(flatten)]
    zookeeper_session: cluster::ZooKeeperArgs,
    /// Where the HTTP input listens.
    #[arg(long, value_name = "HOST:PORT")]
    http: Option<String>,
    #[command(flatten)]
    #[serde(flatten)]
    tls: service::tls::TlsArgs,
    #[arg(long, value_name = "DIR")]
    spool_dir: Option<PathBuf>,
    /// header.service of events that name none.
    #[arg(long, value_name = "NAME")]
    service: Option<String>,
    /// header.server of events that name none, and the audit's host (default: hostname).
    #[arg(long, value_name = "NAME")]
    host_name: Option<String>,
    /// 1: acknowledged once the leader appended; 2: once it flushed to disk; 3 or `all`: once
    /// every in-sync replica has it [default: all].
    #[arg(long, value_name = "1|2|3|all", value_parser = parse_acks)]
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
    spool_full: Option<SpoolFull>,
    /// Follow a newline-delimited JSON file into a topic (repeatable).
    #[arg(long, value_name = "FILE=TOPIC")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tail: Vec<String>,
    /// Batch compression: none, gzip, lz4 or zstd.
    #[arg(long, value_name = "CODEC")]
    compression: Option<String>,
    /// HTTP requests handled at once; more wait up to a second, then get 503.
    #[arg(long, value_name = "N")]
    max_concurrent_requests: Option<usize>,
    /// HTTP connections open at once; more are closed at once [default: 1024].
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Disconnect an HTTP client slower than this over a request's head or body, or idle
    /// this long [default: 30000].
    #[arg(long, value_name = "MS")]
    client_timeout_ms: Option<u64>,
}

#[derive(Debug, Args)]
struct SimulateArgs {
    /// Events per second.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    rate: u64,
    /// How long to run, with a unit: 30s, 5m, 1h.
    #[arg(long, value_name = "DURATION", value_parser = service::duration::parse_positive)]
    duration: Duration,
    #[arg(
        long,
        value_name = "T,…",
        value_delimiter = ',',
        default_value = "page-view,click,search"
    )]
    topics: Vec<String>,
    /// A running agent's URL; without it, an agent is started in-process from the serve flags.
    /// With it, of those flags only --tls-ca (the CA of an `https://` agent) and
    /// --tls-cert/--tls-key (this client's certificate, for an agent that requires one) apply.
    #[arg(long, value_name = "URL")]
    agent: Option<String>,
    #[command(flatten)]
    serve: ServeArgs,
}

impl ServeArgs {
    fn into_config(self) -> Result<Config, Failure> {
        let config: Config =
            service::config::load(self.config.as_deref(), &self).map_err(Failure::usage)?;
        config.validate().map_err(Failure::usage)?;
        config.validate_brokers().map_err(Failure::usage)?;
        RegistryClient::new(&config.registry).map_err(Failure::usage)?;
        // Unreadable certificate files are bad input too.
        config.client_tls().map_err(Failure::usage)?;
        config.server_tls().map_err(Failure::usage)?;
        Ok(config)
    }
}

impl ServeArgs {
    /// `simulate --agent`'s TLS to that agent: the only serve flags that apply to it. Any
    /// other one given is refused rather than ignored.
    fn agent_tls(&self) -> Result<Option<Arc<rustls::ClientConfig>>, Failure> {
        let given = toml::Table::try_from(self).map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
        let ignored: Vec<String> = given
            .keys()
            .filter(|k| !["tls_ca", "tls_cert", "tls_key"].contains(&k.as_str()))
            .map(|k| format!("--{}", k.replace('_', "-")))
            .collect();
        if !ignored.is_empty() || self.config.is_some() {
            let mut ignored = ignored;
            if self.config.is_some() {
                ignored.insert(0, "--config".into());
            }
            return Err(Failure::usage(anyhow::anyhow!(
                "{} configure the in-process agent and do not apply with --agent \
                 (only --tls-ca, --tls-cert and --tls-key do)",
                ignored.join(", ")
            )));
        }
        let files = self.tls.client_files().map_err(Failure::usage)?;
        files.map(|f| service::tls::client_config(&f)).transpose().map_err(Failure::usage)
    }
}

fn main() -> ExitCode {
    let cli: Cli = service::cli::parse("frontend-agent");
    service::cli::finish("frontend-agent", start(cli))
}

fn start(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Serve(args) => {
            let config = args.into_config()?;
            runtime()?.block_on(serve(config))?;
        }
        Command::Simulate(args) => {
            let target = match &args.agent {
                Some(url) => Some(Target::Http { url: url.clone(), tls: args.serve.agent_tls()? }),
                None => None,
            };
            let config = match target {
                Some(_) => None,
                None => Some(args.serve.into_config()?),
            };
            let (rate, duration) = (args.rate, args.duration);
            runtime()?.block_on(simulate(target, config, rate, duration, args.topics))?;
        }
    }
    Ok(())
}

/// Logging and the runtime, once the settings are known to be good.
fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    service::logging::init("info").map_err(Failure::usage)?;
    Ok(tokio::runtime::Runtime::new().context("cannot start the async runtime")?)
}

/// The registry client and the live brokers a config names.
async fn connect(config: &Config) -> anyhow::Result<(Arc<RegistryClient>, Brokers)> {
    let registry = Arc::new(RegistryClient::with_tls(&config.registry, config.client_tls()?)?);
    let brokers = match &config.zookeeper {
        Some(connect) => Brokers::Cluster(config.zookeeper_session.connect(connect).await?),
        None => Brokers::Addrs(config.brokers.clone()),
    };
    Ok((registry, brokers))
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let shutdown = service::shutdown::on_signal()?;
    let (registry, brokers) = connect(&config).await?;
    let listener = tokio::net::TcpListener::bind(&config.http)
        .await
        .with_context(|| format!("cannot listen on {}", config.http))?;
    let addr = listener.local_addr().context("the listener's address")?;
    let agent = Agent::start(config, brokers, registry).await?;
    println!("listening on {addr}");
    std::io::stdout().flush().context("stdout")?;
    let served = frontend_agent::serve_http(listener, agent.clone(), shutdown).await;
    agent.shutdown().await?;
    served.context("the HTTP server failed")?;
    Ok(())
}

async fn simulate(
    target: Option<Target>,
    config: Option<Config>,
    rate: u64,
    duration: Duration,
    topics: Vec<String>,
) -> anyhow::Result<()> {
    let shutdown = service::shutdown::on_signal()?;
    let (target, agent) = match (target, config) {
        (Some(target), _) => (target, None),
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

/// `--acks`: a number, or `all` for 3.
fn parse_acks(s: &str) -> Result<u8, String> {
    if s == "all" {
        Ok(3)
    } else {
        s.parse().map_err(|_| format!("acks {s:?}: expected 1, 2, 3 or all"))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn acks_all_is_three() {
        assert_eq!(super::parse_acks("all"), Ok(3));
        assert_eq!(super::parse_acks("2"), Ok(2));
        assert!(super::parse_acks("most").unwrap_err().contains("expected 1, 2, 3 or all"));
    }
}
