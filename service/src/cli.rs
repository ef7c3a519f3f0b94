//! How every binary parses its command line and ends: a usage error (a bad flag, an unknown
//! config key, a bad value) is one line on stderr, `{binary}: {what}`, and exit code 2; a
//! failure while running is one line and exit code 1. `--help` and `--version` print and
//! exit 0 as usual.

use std::process::ExitCode;

/// Why a binary stopped without success.
#[derive(Debug)]
pub enum Failure {
    /// Bad input from the user: exit code 2.
    Usage(anyhow::Error),
    /// Something failed while running: exit code 1.
    Runtime(anyhow::Error),
}

impl Failure {
    pub fn usage(error: impl Into<anyhow::Error>) -> Failure {
        Failure::Usage(error.into())
    }
}

/// `?` on an `anyhow::Error` in a binary's body is a runtime failure.
impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Failure {
        Failure::Runtime(error)
    }
}

/// The common tail of every server binary's `main`, once its configuration is valid: starts
/// logging at `info` (unless `RUST_LOG` says otherwise) and a multi-threaded runtime, and runs
/// `body` on it to the end. Logging comes after validation so that a usage error stays one line.
pub fn run<F>(body: F) -> Result<(), Failure>
where
    F: std::future::Future<Output = anyhow::Result<()>>,
{
    crate::logging::init("info").map_err(Failure::usage)?;
    let runtime = tokio::runtime::Runtime::new()
        .map_err(|e| anyhow::Error::from(e).context("cannot start the async runtime"))?;
    runtime.block_on(body)?;
    Ok(())
}

/// Parses the command line into `C`. On a bad argument prints `{binary}: {what clap says}` on
/// one line and exits with code 2; `--help` and `--version` print and exit 0; a missing
/// subcommand prints the help and exits 2.
pub fn parse<C: clap::Parser>(binary: &str) -> C {
    match C::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            e.exit()
        }
        Err(e) => {
            eprintln!("{binary}: {}", clap_message(&e));
            std::process::exit(2);
        }
    }
}

/// Clap's first paragraph on one line, e.g. `the following required arguments were not
/// provided: --topic <TOPIC>` (the first line alone would leave out which).
fn clap_message(error: &clap::Error) -> String {
    let rendered = error.render().to_string();
    let paragraph: Vec<&str> = rendered
        .trim_start()
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect();
    let message = paragraph.join(" ");
    message.strip_prefix("error: ").unwrap_or(&message).to_owned()
}

/// The exit code for `result`, after printing a failure as one line.
pub fn finish(binary: &str, result: Result<(), Failure>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(e)) => {
            eprintln!("{binary}: {}", one_line(&e));
            ExitCode::from(2)
        }
        Err(Failure::Runtime(e)) => {
            // Not through `tracing` as well: stderr is the log, and the line is said once.
            eprintln!("{binary}: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, `a: b: c`, each cause said once: a library error whose
/// message already includes its source's text is not followed by that text again (anyhow's
/// `{:#}` would repeat it), and multi-line messages (TOML quotes the file) are joined.
pub fn one_line(error: &anyhow::Error) -> String {
    let mut line = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !line.contains(&cause) {
            line.push_str(": ");
            line.push_str(&cause);
        }
    }
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Args {
        #[arg(long)]
        topic: String,
    }

    #[test]
    fn a_clap_error_is_one_line_that_names_the_argument() {
        let error = Args::try_parse_from(["x"]).unwrap_err();
        let message = clap_message(&error);
        assert!(!message.contains('\n') && message.contains("--topic"), "{message}");
        assert!(!message.starts_with("error:"), "{message}");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("no broker answered for topic x: {0}")]
    struct NoBroker(#[source] std::io::Error);

    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let error = anyhow::Error::new(NoBroker(io)).context("cannot find brokers for topic x");
        assert_eq!(
            one_line(&error),
            "cannot find brokers for topic x: no broker answered for topic x: Connection refused"
        );
    }

    #[test]
    fn causes_a_message_leaves_out_are_kept() {
        let error = anyhow::anyhow!("inner").context("outer");
        assert_eq!(one_line(&error), "outer: inner");
        let multi = anyhow::anyhow!("line one\n  line two");
        assert_eq!(one_line(&multi), "line one line two");
    }
}
