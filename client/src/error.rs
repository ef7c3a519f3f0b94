use protocol::{ApiKey, DecodeError, EncodeError, ErrorCode};
use thiserror::Error;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: String, source: std::io::Error },
    #[error("connection to {addr} closed: {reason}")]
    Closed { addr: String, reason: String },
    #[error("broker answered {api:?} with error {code}")]
    Broker { api: ApiKey, code: ErrorCode },
    #[error("cannot encode request: {0}")]
    Encode(#[from] EncodeError),
    #[error("undecodable {api:?} response: {source}")]
    Decode { api: ApiKey, source: DecodeError },
}

impl ClientError {
    /// The broker's error code, if the broker answered with one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Broker { code, .. } => Some(*code),
            _ => None,
        }
    }
}
