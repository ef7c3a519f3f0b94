//! Logs: `tracing` events to stderr, filtered by `RUST_LOG` (e.g. `RUST_LOG=broker=debug`)
//! or else the binary's default level; ANSI colours only when stderr is a terminal, so log
//! files stay plain text; and with `TRIBUTARY_LOG_FORMAT=json`, one JSON object per line for
//! a log shipper.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The environment variable choosing the log format: `text` (default) or `json`.
pub const FORMAT_VAR: &str = "TRIBUTARY_LOG_FORMAT";

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoggingError {
    #[error("{FORMAT_VAR}={0:?} is neither \"text\" nor \"json\"")]
    Format(String),
    #[error("RUST_LOG={value:?} is not a valid filter: {reason}")]
    Filter { value: String, reason: String },
}

/// Starts logging to stderr at `default_level` (`info`, `warn`, …) unless `RUST_LOG` says
/// otherwise. A second call in one process is ignored (tests start many services).
pub fn init(default_level: &str) -> Result<(), LoggingError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(value) if !value.trim().is_empty() => EnvFilter::try_new(&value)
            .map_err(|e| LoggingError::Filter { value, reason: e.to_string() })?,
        _ => EnvFilter::new(default_level),
    };
    let json = match std::env::var(FORMAT_VAR).as_deref() {
        Err(_) | Ok("") | Ok("text") => false,
        Ok("json") => true,
        Ok(other) => return Err(LoggingError::Format(other.to_owned())),
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _already_set = if json {
        builder.json().with_current_span(false).try_init()
    } else {
        builder.with_ansi(std::io::stderr().is_terminal()).try_init()
    };
    Ok(())
}
