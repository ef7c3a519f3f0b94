//! `tributary`: runs the two-datacenter pipeline as separate processes from a topology file
//! (`up`, `status`, `down`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Parser, Subcommand};
use deploy::multiprocess::{DeployError, Deployment};

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
    #[arg(long, value_name = "D", value_parser = parse_duration)]
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
    #[arg(long, value_name = "D", default_value = "60s", value_parser = parse_duration)]
    loader_interval: Duration,
}

/// `90`, `90s`, `1500ms`, `5m`, `1h`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit_ms) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1_000)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60_000)
    } else if let Some(n) = text.strip_suffix('h') {
        (n, 3_600_000)
    } else {
        (text, 1_000)
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 90s, 1500ms, 5m, 1h)"))?;
    match n.checked_mul(unit_ms) {
        Some(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(format!("{text:?} must be positive and at most a few centuries")),
    }
}

fn demo(args: DemoArgs) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let options = deploy::demo::DemoOptions {
        duration: args.duration,
        data_dir: args.data_dir,
        summary_json: args.summary_json,
        rate: args.rate,
        dashboard: args.dashboard,
        loader_interval: args.loader_interval,
        ..deploy::demo::DemoOptions::default()
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tributary: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let interrupt = tokio_util::sync::CancellationToken::new();
        let on_signal = interrupt.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut term), Ok(mut int)) =
                (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
            else {
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            on_signal.cancel();
        });
        deploy::demo::run(options, interrupt).await
    });
    match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(e @ deploy::demo::DemoError::NotADemoDir(_)) => {
            eprintln!("tributary: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("tributary: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            eprintln!("tributary: {}", first.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    if let Commands::Demo(args) = cli.command {
        return demo(args);
    }
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tributary: {e}");
            // A bad topology or process name is a usage error, like a bad flag.
            match e {
                DeployError::Topology(_) | DeployError::UnknownProcess { .. } => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            }
        }
    }
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
