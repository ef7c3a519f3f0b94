use thiserror::Error;

/// What a coordination call can fail with, the same for every backend.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CoordError {
    #[error("no node {path}")]
    NoNode { path: String },
    #[error("node {path} already exists")]
    NodeExists { path: String },
    #[error("node {path} changed since version {expected}")]
    BadVersion { path: String, expected: i32 },
    #[error("node {path} has children")]
    NotEmpty { path: String },
    #[error("ephemeral node {path} cannot have children")]
    EphemeralParent { path: String },
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    #[error("session expired")]
    SessionExpired,
    #[error("coordination service unavailable: {0}")]
    Unavailable(String),
    #[error("coordination error: {0}")]
    Backend(String),
    /// The node belongs to an authenticated cluster connection and this session lacks its
    /// credentials.
    #[error(
        "not allowed to change {path}: its cluster's ZooKeeper nodes want its digest credentials (zookeeper_auth_file)"
    )]
    NotAuthorized { path: String },
    #[error("{0}")]
    Credentials(String),
}
