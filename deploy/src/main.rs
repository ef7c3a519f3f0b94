//! `tributary`: runs the two-datacenter pipeline as separate processes from a topology file
//! (`up`, `status`, `down`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

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
