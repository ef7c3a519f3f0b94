//! What can go wrong running the deployment.

use std::path::PathBuf;

use super::pki::PkiError;
use super::topology::TopologyError;

/// What can go wrong running the deployment.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeployError {
    #[error(transparent)]
    Topology(#[from] TopologyError),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("cannot find the directory of the running tributary: {0}")]
    CurrentExe(std::io::Error),
    #[error("{name}: program {program} not found ({hint})")]
    MissingProgram { name: String, program: String, hint: String },
    #[error("cannot start {program}: {source}")]
    Spawn { program: String, source: std::io::Error },
    #[error(
        "{name} did not become ready: {reason}; stopped what this run started. Log {log}:\n{tail}"
    )]
    NotReady { name: String, reason: String, log: PathBuf, tail: String },
    #[error("no process named {name:?} in this topology (see `tributary status`)")]
    UnknownProcess { name: String },
    #[error("cannot write to the terminal: {0}")]
    Output(std::io::Error),
    #[error(transparent)]
    Pki(#[from] PkiError),
}
