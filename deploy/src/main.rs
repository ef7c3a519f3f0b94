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
    if let Commands::Demo(args) = cli.command {
        return demo(args);
    }
    run(cli.command).map_err(|e| match e {
        // A bad topology or process name is a usage error, like a bad flag.
        DeployError::Topology(_) | DeployError::UnknownProcess { .. } => Failure::usage(e),
        e => Failure::Runtime(e.into()),
    })
}

fn run(command: Commands) -> Result<(), DeployError> {
    let mut out = std::io::stdout().lock();
    match command {
        Commands::Demo(_) => unreachable!("demo runs before"),
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
