//! `tributary`: runs the two-datacenter pipeline as separate processes from a topology file
//! (`up`, `status`, `down`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use clap::{Parser, Subcommand};
use deploy::multiprocess::{DeployError, Deployment};
use service::Failure;

/// The Tributary launcher.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Debug, Subcommand)]
enum Commands {
    /// Run the whole two-datacenter pipeline in this process on embedded defaults: two live
    /// clusters, the analytics cluster, the schema registry, simulated frontends and their
    /// agents, the mirror, the loader and the audit dashboard. Drains and prints a summary on
    /// Ctrl-C or after --duration.
    Demo(DemoArgs),
    /// Start every process of the topology that is not running, in order, each once the one
    /// before it is ready.
    Up {
        /// The topology file.
        #[arg(long, value_name = "FILE", default_value = "deploy/local.toml")]
        config: PathBuf,
    },
    /// One line per process: name, pid, alive/dead/stopped, uptime, address.
    Status {
        /// The topology file.
        #[arg(long, value_name = "FILE", default_value = "deploy/local.toml")]
        config: PathBuf,
    },
    /// Stop the processes in reverse start order (SIGTERM, then SIGKILL after
    /// `stop_timeout_ms`) and remove their pid files.
    Down {
        /// The topology file.
        #[arg(long, value_name = "FILE", default_value = "deploy/local.toml")]
        config: PathBuf,
        /// Stop only these processes (names as `status` shows them).
        #[arg(value_name = "NAME")]
        names: Vec<String>,
    },
    /// Against a deployment `up` started: kill -9 and restart, pause past the ZooKeeper
    /// session, and cut the network path of, random processes one after another while
    /// traffic runs; then stop the traffic, drain, and report. Exits 1 if an acknowledged
    /// event is missing from Parquet or an audit window is in loss.
    Chaos(ChaosArgs),
    /// A TCP proxy in front of one address, as the topology puts in front of each broker
    /// with `broker.proxy_port_offset`: SIGUSR1 closes every relayed connection and refuses
    /// new ones (a cut network path), SIGUSR2 lets connections through again.
    Proxy {
        /// Where to listen.
        #[arg(long, value_name = "HOST:PORT")]
        listen: std::net::SocketAddr,
        /// Where every connection is relayed.
        #[arg(long, value_name = "HOST:PORT")]
        upstream: std::net::SocketAddr,
    },
}

fn proxy(listen: std::net::SocketAddr, upstream: std::net::SocketAddr) -> Result<(), Failure> {
    use tokio::signal::unix::{SignalKind, signal};
    service::logging::init("info").map_err(Failure::usage)?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the runtime")?;
    runtime.block_on(async {
        let stop = service::shutdown::on_signal().context("cannot handle SIGTERM")?;
        let proxy = service::proxy::TcpProxy::bind(listen, upstream)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        let mut cut = signal(SignalKind::user_defined1()).context("cannot handle SIGUSR1")?;
        let mut heal = signal(SignalKind::user_defined2()).context("cannot handle SIGUSR2")?;
        tracing::info!("listening on {}, relaying to {upstream}", proxy.addr());
        loop {
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                _ = cut.recv() => {
                    proxy.cut();
                    tracing::warn!("SIGUSR1: cut; connections closed and refused");
                }
                _ = heal.recv() => {
                    proxy.heal();
                    tracing::warn!("SIGUSR2: healed; connections relayed again");
                }
            }
        }
    })
}

#[derive(Debug, clap::Args)]
struct ChaosArgs {
    /// The topology file of the running deployment.
    #[arg(long, value_name = "FILE", default_value = "deploy/local.toml")]
    config: PathBuf,
    /// How long to inject faults (e.g. 2m, 30m).
    #[arg(long, value_name = "D", value_parser = service::duration::parse_positive)]
    duration: Duration,
    /// Seeds the choice of faults, targets and timings; the time of day without it.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// The kinds of fault, comma-separated: kill, pause, cut (cut needs `broker.proxies`).
    /// Every kind the topology allows without it.
    #[arg(long, value_name = "KINDS", value_delimiter = ',')]
    faults: Vec<deploy::chaos::fault::FaultKind>,
    /// Witness events per second (ids known, each looked for in Parquet), over all agents.
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    rate: u64,
    /// How long to wait after the faults for the pipeline to drain.
    #[arg(long, value_name = "D", default_value = "10m", value_parser = service::duration::parse_positive)]
    drain_timeout: Duration,
    /// Also write the report, with every fault, as JSON to this file.
    #[arg(long, value_name = "FILE")]
    report_json: Option<PathBuf>,
}

fn chaos(args: ChaosArgs) -> Result<(), Failure> {
    service::logging::init("warn").map_err(Failure::usage)?;
    let deployment = Deployment::load(&args.config).map_err(Failure::usage)?;
    let seed = args.seed.unwrap_or_else(|| {
        SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs()
    });
    let options = deploy::chaos::ChaosOptions {
        duration: args.duration,
        seed,
        faults: args.faults,
        rate: args.rate,
        drain_timeout: args.drain_timeout,
        report_json: args.report_json,
    };
    let mut out = std::io::stdout().lock();
    let report = match deploy::chaos::run(&deployment, &options, &mut out) {
        Ok(report) => report,
        Err(
            e @ (deploy::chaos::ChaosError::NotRunning { .. }
            | deploy::chaos::ChaosError::NoTarget { .. }),
        ) => return Err(Failure::usage(e)),
        Err(e) => return Err(Failure::Runtime(e.into())),
    };
    use std::io::Write;
    writeln!(out, "{report}").context("cannot write the report")?;
    if report.passed() {
        Ok(())
    } else {
        Err(Failure::Runtime(anyhow::anyhow!(
            "chaos found {} acknowledged events missing from Parquet and {} audit windows in loss{}",
            report.acknowledged_missing,
            report.windows.get("loss").copied().unwrap_or(0),
            if report.drained { "" } else { " (the pipeline did not drain in time)" }
        )))
    }
}

#[derive(Debug, clap::Args)]
struct DemoArgs {
    /// Run this long (e.g. 60s, 5m, 1h), then drain; until Ctrl-C without it.
    #[arg(long, value_name = "D", value_parser = service::duration::parse_positive)]
    duration: Option<Duration>,
    /// Where every broker, the registry, the agents' spools and the Parquet output live. Emptied
    /// first if an earlier demo made it; any other non-empty directory is refused.
    #[arg(long, value_name = "DIR", default_value = "/tmp/tributary-demo")]
    data_dir: PathBuf,
    /// Also write the summary as JSON to this file.
    #[arg(long, value_name = "FILE")]
    summary_json: Option<PathBuf>,
    /// Events per second each of the two simulated frontends produces.
    #[arg(long, value_name = "N", default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    rate: u64,
    /// Where the audit dashboard listens (a free port if this one is taken).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080")]
    dashboard: String,
    /// How often the loader runs.
    #[arg(long, value_name = "D", default_value = "60s", value_parser = service::duration::parse_positive)]
    loader_interval: Duration,
    /// Mutual TLS between every service, with a CA and certificates made under
    /// DATA_DIR/pki; the dashboard then wants the token it prints. Plaintext without it.
    #[arg(long)]
    tls: bool,
}

fn demo(args: DemoArgs) -> Result<(), Failure> {
    service::logging::init("warn").map_err(Failure::usage)?;
    let options = deploy::demo::DemoOptions {
        duration: args.duration,
        data_dir: args.data_dir,
        summary_json: args.summary_json,
        rate: args.rate,
        dashboard: args.dashboard,
        loader_interval: args.loader_interval,
        tls: args.tls,
        ..deploy::demo::DemoOptions::default()
    };
    let runtime = tokio::runtime::Runtime::new().context("cannot start the runtime")?;
    let result = runtime.block_on(async {
        let interrupt = service::shutdown::on_signal()?;
        anyhow::Ok(deploy::demo::run(options, interrupt).await)
    })?;
    match result {
        Ok(_) => Ok(()),
        Err(e @ deploy::demo::DemoError::NotADemoDir(_)) => Err(Failure::usage(e)),
        Err(e) => Err(Failure::Runtime(e.into())),
    }
}

fn main() -> ExitCode {
    let cli: Cli = service::cli::parse("tributary");
    service::cli::finish("tributary", start(cli))
}

fn start(cli: Cli) -> Result<(), Failure> {
    let command = match cli.command {
        Commands::Demo(args) => return demo(args),
        Commands::Chaos(args) => return chaos(args),
        Commands::Proxy { listen, upstream } => return proxy(listen, upstream),
        command => command,
    };
    run(command).map_err(|e| match e {
        // A bad topology or process name is a usage error, like a bad flag.
        DeployError::Topology(_) | DeployError::UnknownProcess { .. } => Failure::usage(e),
        e => Failure::Runtime(e.into()),
    })
}

fn run(command: Commands) -> Result<(), DeployError> {
    let mut out = std::io::stdout().lock();
    match command {
        Commands::Demo(_) | Commands::Chaos(_) | Commands::Proxy { .. } => {
            unreachable!("run before")
        }
        Commands::Up { config } => Deployment::load(&config)?.up(&mut out),
        Commands::Status { config } => {
            let now = SystemTime::now();
            for process in Deployment::load(&config)?.status()? {
                use std::io::Write;
                writeln!(out, "{}", process.line(now)).map_err(DeployError::Output)?;
            }
            Ok(())
        }
        Commands::Down { config, names } => Deployment::load(&config)?.down(&names, &mut out),
    }
}
