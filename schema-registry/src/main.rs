//! `schema-registry`: parses flags and the config file, binds, and runs the service until
//! SIGTERM or SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use schema_registry::{CompatibilityLevel, Config};
use serde::Serialize;
use service::Failure;

/// Avro schema registry speaking the Confluent Schema Registry REST API.
#[derive(Debug, Parser, Serialize)]
#[command(version)]
struct Cli {
    /// TOML file whose keys are the flag names (with `_` for `-`); flags override its values.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1].
    #[arg(long)]
    host: Option<String>,
    /// Port to listen on; 0 picks a free one [default: 8081]. `/metrics` is served there too.
    #[arg(long)]
    port: Option<u16>,
    /// Directory of the durable log [default: schema-registry-data].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Global compatibility level until `PUT /config` changes it [default: BACKWARD].
    #[arg(long, value_name = "LEVEL")]
    compatibility: Option<CompatibilityLevel>,
    /// Largest request body accepted [default: 1048576].
    #[arg(long, value_name = "B")]
    max_request_bytes: Option<usize>,
    /// Requests served at once; more wait for a slot [default: 256].
    #[arg(long, value_name = "N")]
    max_concurrent_requests: Option<usize>,
    /// Connections open at once; more are closed at once [default: 1024].
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Disconnect a client slower than this over a request's head or body, or idle this long
    /// [default: 30000].
    #[arg(long, value_name = "MS")]
    client_timeout_ms: Option<u64>,
    /// Register every `.avsc` file in DIR at start, as subject `{file stem}-value`.
    #[arg(long, value_name = "DIR")]
    register_schemas: Option<PathBuf>,
    #[command(flatten)]
    #[serde(flatten)]
    tls: service::tls::ServerTlsArgs,
    /// Principals that may register, delete and set compatibility, comma separated (globs);
    /// others get 403. Needs --tls-client-ca.
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    write_principals: Option<Vec<String>>,
}

fn main() -> ExitCode {
    let cli: Cli = service::cli::parse("schema-registry");
    service::cli::finish("schema-registry", start(cli))
}

fn start(cli: Cli) -> Result<(), Failure> {
    let config: Config =
        service::config::load(cli.config.as_deref(), &cli).map_err(Failure::usage)?;
    config.validate().map_err(Failure::usage)?;
    service::cli::run(serve(config))
}

async fn serve(config: Config) -> anyhow::Result<()> {
    // Handlers go in before the address is announced, so a signal sent as soon as the line
    // appears stops the service cleanly instead of killing it.
    let shutdown = service::shutdown::on_signal()?;
    let listener = tokio::net::TcpListener::bind((config.host.as_str(), config.port))
        .await
        .with_context(|| format!("cannot listen on {}:{}", config.host, config.port))?;
    let addr = listener.local_addr().context("cannot read the bound address")?;
    // Scripts and test fixtures read this line to learn the port (with `--port 0`).
    let scheme = if config.tls.tls_cert.is_some() { "https" } else { "http" };
    println!("schema-registry listening on {scheme}://{addr}");
    schema_registry::run(listener, config, shutdown).await?;
    Ok(())
}
