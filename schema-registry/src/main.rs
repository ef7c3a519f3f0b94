//! `schema-registry`: parses flags and the config file, binds, and runs the service.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use schema_registry::Config;
use tokio::signal::unix::{SignalKind, signal};

/// Avro schema registry speaking the Confluent Schema Registry REST API.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// TOML config file; flags override its values.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1].
    #[arg(long)]
    host: Option<String>,
    /// Port to listen on; 0 picks a free one [default: 8081].
    #[arg(long)]
    port: Option<u16>,
    /// Directory of the durable log [default: schema-registry-data].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Register every `.avsc` file in DIR at start, as subject `{file stem}-value`.
    #[arg(long, value_name = "DIR")]
    register_schemas: Option<PathBuf>,
}

fn main() {
    if let Err(e) = start() {
        eprintln!("error: {}", one_line(&e));
        std::process::exit(1);
    }
}

/// The error and its causes as `a: b: c`, each said once: the library's messages already
/// include their cause's text, anyhow's contexts do not.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !line.contains(&cause) {
            line.push_str(": ");
            line.push_str(&cause);
        }
    }
    line.replace('\n', " ")
}

fn start() -> anyhow::Result<()> {
    let args = match Args::try_parse() {
        Ok(args) => args,
        // --help and --version print and exit 0 as usual.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            // Clap's first line says what is wrong; the rest is a hint to try --help.
            let rendered = e.to_string();
            let first = rendered.lines().next().unwrap_or("invalid arguments");
            anyhow::bail!("{}", first.trim_start_matches("error: "));
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();

    let mut config = match &args.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    if let Some(host) = args.host {
        config.host = host;
    }
    if let Some(port) = args.port {
        config.port = port;
    }
    if let Some(dir) = args.data_dir {
        config.data_dir = dir;
    }
    if let Some(dir) = args.register_schemas {
        config.register_schemas = Some(dir);
    }
    config.validate()?;

    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async {
        // Handlers go in before the address is announced, so a signal sent as soon as the
        // line appears stops the service cleanly instead of killing it.
        let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
        let shutdown = async move {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
            tracing::info!("shutting down");
        };
        let listener = tokio::net::TcpListener::bind((config.host.as_str(), config.port))
            .await
            .with_context(|| format!("cannot listen on {}:{}", config.host, config.port))?;
        let addr = listener.local_addr().context("cannot read the bound address")?;
        // Scripts and test fixtures read this line to learn the port (with `--port 0`).
        println!("schema-registry listening on http://{addr}");
        schema_registry::run(listener, config, shutdown).await?;
        Ok(())
    })
}
