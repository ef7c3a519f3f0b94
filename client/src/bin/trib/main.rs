//! `trib`: Tributary at a terminal. Produces stdin lines to a topic, prints a partition's
//! messages or consumes as a member of a group, lists and creates topics, reads offsets and
//! describes consumer groups, against brokers given by address or found in ZooKeeper.
//!
//! Exit codes: 0 success, 1 a failure while running (unreachable broker, broker error),
//! 2 bad arguments — each reported on one line of stderr.

mod brokers;
mod cli;
mod consume;
mod groups;
mod offsets;
mod produce;
mod progress;
mod topics;

use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;

use cli::{Cli, Command};

/// Exit code of a failure while running.
const EXIT_FAILURE: u8 = 1;
/// Exit code of bad arguments, as clap and most Unix tools use.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    init_logging();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("trib: error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("trib: error: {e:#}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let json = cli.json;
    match cli.command {
        Command::Produce(args) => produce::run(args, json).await,
        Command::Consume(args) => consume::run(args, json).await,
        Command::Topics { command } => topics::run(command, json).await,
        Command::Offsets(args) => offsets::run(args, json).await,
        Command::Groups { command } => groups::run(command, json).await,
    }
}

/// Help and version go to stdout with success; a bad argument is one line and exit code 2.
fn usage_error(error: clap::Error) -> ExitCode {
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = error.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = error.print();
            ExitCode::from(EXIT_USAGE)
        }
        _ => {
            // clap's first paragraph, e.g. "required arguments were not provided:\n  --topic"
            let rendered = error.render().to_string();
            let paragraph: Vec<&str> = rendered
                .trim_start()
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            let message = paragraph.join(" ");
            let message = message.strip_prefix("error: ").unwrap_or(&message);
            eprintln!("trib: error: {message} (see trib --help)");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// Logs to stderr at `RUST_LOG`; by default only errors, since a failure is reported anyway
/// (`RUST_LOG=warn` shows retries and unreachable brokers as they happen).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
