//! What every Tributary binary shares, so that each starts, stops, logs, reads its settings
//! and reports errors the same way. A binary's `main` is a few lines over these pieces:
//!
//! - [`cli`]: command-line parsing whose errors are one line and exit code 2; the one-line
//!   error exit ([`cli::finish`]) that keeps an error's source chain and says each cause once.
//! - [`config`]: one flag-over-file mechanism — `--config FILE` whose keys are the flag names,
//!   flags win, an unknown key is an error that names it.
//! - [`shutdown`]: one shutdown shape, a [`tokio_util::sync::CancellationToken`] cancelled by
//!   SIGINT or SIGTERM; failing to install the handlers is an error, not a silent hang.
//! - [`logging`]: `tracing` to stderr, `RUST_LOG` respected, no ANSI colours unless stderr is
//!   a terminal, JSON lines with `TRIBUTARY_LOG_FORMAT=json`.
//! - [`backoff`]: a capped, jittered exponential [`backoff::Backoff`] for every retry loop.
//! - [`durable`]: the durable write (staged file, fsync, rename, fsync the directory).
//! - [`duration`]: human durations that require a unit (`500ms`, `30s`, `5m`), for flags and
//!   keys whose names carry none; keys named `_ms` stay whole milliseconds.
//! - [`metrics`]: the Prometheus/OpenMetrics registry behind every `/metrics`, and its server.
//! - [`tls`]: TLS for every listener and client (rustls), reloadable server certificates,
//!   and the principal a client certificate names; [`pki`]: a CA of one's own (rcgen).
//! - [`proxy`]: a TCP proxy that can be cut off and healed (`tributary proxy`, tests).
//! - [`clock::now_ms`] and [`host::name`].
//!
//! Libraries chosen over hand-written code, and why: `humantime` parses and prints
//! durations (the three hand-written parsers disagreed on what a bare number meant);
//! `backon` computes exponential delays with jitter (seventeen doubling loops had one with
//! jitter); `prometheus-client`, the Prometheus project's own Rust client, keeps and encodes
//! metrics (three crates formatted the text by hand); `clap` + `serde` (through `toml`
//! tables) layer flags over the file, with no new dependency and serde's own error for an
//! unknown key — `figment` would add a layer of its own types for the same merge.

pub mod backoff;
pub mod cli;
pub mod clock;
pub mod config;
pub mod durable;
pub mod duration;
pub mod glob;
pub mod host;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod pki;
pub mod proxy;
pub mod shutdown;
pub mod store;
pub mod tls;

pub use backoff::Backoff;
pub use cli::Failure;
pub use clock::now_ms;
