//! Tributary's schema registry: the service that maps the schema id carried in every event's
//! payload back to its Avro schema (the Kafka paper, §5 "Kafka Usage at LinkedIn": "a schema
//! registry service is used to map the schema id to actual schema"), and the pieces every
//! tier uses with it.
//!
//! In the pipeline, the frontend agent registers its event schemas and encodes events as
//! `0x00 | i32 schema id | Avro datum` (the `events` crate owns that envelope); the mirror
//! passes bytes through; the HDFS loader and the audit service look schemas up by id
//! ([`client`]) to decode.
//!
//! The service speaks the Confluent Schema Registry REST API for Avro ([`api`]), so existing
//! Confluent serializers and tools work against it unchanged. It checks compatibility by the
//! Avro specification's resolution rules ([`resolution`], [`compatibility`]) and keeps every
//! change in an fsynced, checksummed append-only log ([`store`]) before acknowledging it.

pub mod api;
pub mod client;
pub mod compatibility;
pub mod config;
pub mod error;
mod metrics;
pub mod registry;
pub mod resolution;
pub mod schema;
pub mod schema_files;
mod state;
pub mod store;

use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use crate::client::{ClientError, RegistryClient};
pub use crate::compatibility::CompatibilityLevel;
pub use crate::config::Config;
pub use crate::error::RegistryError;
pub use crate::registry::Registry;

/// Why the service could not start or stopped serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("cannot open the registry: {0}")]
    Open(#[source] RegistryError),
    #[error(transparent)]
    SchemaFiles(#[from] schema_files::SchemaFileError),
    #[error("cannot register {path}: {source}")]
    Register {
        path: PathBuf,
        #[source]
        source: RegistryError,
    },
    #[error("serving failed: {0}")]
    Serve(#[source] std::io::Error),
    #[error("TLS: {0}")]
    Tls(#[from] service::tls::TlsError),
}

/// Serves the registry on `listener` until `shutdown` is cancelled. Opens (and replays) the log
/// in `config.data_dir` and registers `config.register_schemas` first; requests that arrive
/// meanwhile wait in the listener's backlog.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    config.validate()?;
    let tls = config.tls.load()?;
    let registry =
        Registry::open(&config.data_dir, config.compatibility).await.map_err(RunError::Open)?;
    if let Some(dir) = config.register_schemas.clone() {
        register_dir(&registry, dir).await?;
    }
    let (app, limits) = api::router(Arc::new(registry), &config);
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, data_dir = %config.data_dir.display(), "schema registry serving");
    }
    if let Some(tls) = &tls {
        service::tls::reload_on_sighup(Arc::clone(tls), shutdown.clone());
    }
    service::http::serve(listener, tls, app, shutdown, limits).await.map_err(RunError::Serve)
}

/// Registers every `.avsc` file in `dir` (see [`schema_files`]) in `registry`. Files already
/// registered keep their ids, so this is safe on every start.
pub async fn register_dir(
    registry: &Registry,
    dir: PathBuf,
) -> Result<Vec<(String, i32)>, RunError> {
    let files = schema_files::load_dir(dir).await?;
    let mut registered = Vec::with_capacity(files.len());
    for file in files {
        let id = registry
            .register(&file.subject, &file.text)
            .await
            .map_err(|source| RunError::Register { path: file.path.clone(), source })?;
        tracing::info!(subject = %file.subject, id, path = %file.path.display(), "registered shipped schema");
        registered.push((file.subject, id));
    }
    Ok(registered)
}
