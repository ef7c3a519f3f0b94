//! Why the demo could not run.

use std::path::PathBuf;

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DemoError {
    #[error("{path}: {source}")]
    DataDir { path: PathBuf, source: std::io::Error },
    #[error(
        "{0} is not empty and was not made by `tributary demo`; give an empty or new directory with --data-dir"
    )]
    NotADemoDir(PathBuf),
    #[error("cannot listen for the {what}: {source}")]
    Bind { what: String, source: std::io::Error },
    #[error("broker {id} of {cluster}: {source}")]
    Broker { cluster: String, id: u32, source: broker::BrokerError },
    #[error("coordination session in {chroot}: {source}")]
    Coordination { chroot: String, source: ::cluster::CoordError },
    #[error("schema registry: {0}")]
    Registry(schema_registry::ClientError),
    #[error("frontend agent: {0}")]
    Agent(#[from] frontend_agent::AgentError),
    #[error("mirror: {0}")]
    Mirror(#[from] mirror::MirrorError),
    #[error("loader: {0}")]
    Loader(#[from] hdfs_loader::LoadError),
    #[error("object store: {0}")]
    Store(#[from] hdfs_loader::StoreUrlError),
    #[error("audit service: {0}")]
    Audit(String),
    #[error("cannot write the summary to {path}: {source}")]
    SummaryFile { path: PathBuf, source: std::io::Error },
    #[error("TLS: {0}")]
    Tls(String),
}
