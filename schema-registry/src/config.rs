//! The service's configuration: a TOML file, overridden by command-line flags, checked before
//! anything starts.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::compatibility::CompatibilityLevel;

/// Largest accepted `max_request_bytes`: a schema in a request becomes one log record, and
/// records stay well below [`crate::store::RECORD_BYTES_MAX`].
pub const MAX_REQUEST_BYTES_LIMIT: usize = 16 * 1024 * 1024;

/// Everything the service needs to start. Field names are the TOML keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Address the binary binds (`run` takes an already bound listener).
    pub host: String,
    pub port: u16,
    /// Directory of the durable log; created if missing.
    pub data_dir: PathBuf,
    /// Global compatibility level until `PUT /config` changes it.
    pub compatibility: CompatibilityLevel,
    /// Largest request body accepted; larger ones get a 413 error body.
    pub max_request_bytes: usize,
    /// Requests served at once; further ones wait for a slot.
    pub max_concurrent_requests: usize,
    /// Connections open at once; more are closed at once.
    pub max_connections: usize,
    /// A client that takes longer over a request's head or its body, or leaves its
    /// keep-alive connection idle this long, is disconnected.
    pub client_timeout_ms: u64,
    /// Directory of `.avsc` files to register at start, each as subject `{file stem}-value`.
    pub register_schemas: Option<PathBuf>,
    /// `tls_cert` and `tls_key` (PEM): serve HTTPS (TLS 1.3) only. `tls_client_ca`: clients
    /// must present a certificate signed by this CA (principal: its subject CN).
    #[serde(flatten)]
    pub tls: service::tls::ServerTlsArgs,
    /// Principals (globs, `*` any run of characters) that may write: register, delete, and
    /// change compatibility. Empty: every client may. Needs `tls_client_ca`.
    pub write_principals: Vec<String>,
    /// Any other key: refused.
    #[serde(flatten)]
    pub unknown: service::config::Unknown,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            host: "127.0.0.1".to_owned(),
            port: 8081,
            data_dir: PathBuf::from("schema-registry-data"),
            compatibility: CompatibilityLevel::Backward,
            max_request_bytes: 1024 * 1024,
            max_concurrent_requests: 256,
            max_connections: service::http::MAX_CONNECTIONS,
            client_timeout_ms: service::http::CLIENT_TIMEOUT.as_millis() as u64,
            register_schemas: None,
            tls: service::tls::ServerTlsArgs::default(),
            write_principals: Vec::new(),
            unknown: service::config::Unknown,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}:{line}: {message}")]
    Parse { path: PathBuf, line: usize, message: String },
    #[error("invalid config: {0}")]
    Invalid(String),
}

impl Config {
    /// Reads a TOML file; keys it leaves out keep their defaults.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Config::from_toml(&text).map_err(|(line, message)| ConfigError::Parse {
            path: path.to_path_buf(),
            line,
            message,
        })
    }

    /// Parses TOML text; on failure returns the 1-based line and a one-line message.
    fn from_toml(text: &str) -> Result<Config, (usize, String)> {
        service::config::parse(text)
    }

    /// Checks every value before the service starts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.host.trim().is_empty() {
            return Err(ConfigError::Invalid("host is empty".to_owned()));
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err(ConfigError::Invalid("data_dir is empty".to_owned()));
        }
        if !(1024..=MAX_REQUEST_BYTES_LIMIT).contains(&self.max_request_bytes) {
            return Err(ConfigError::Invalid(format!(
                "max_request_bytes must be between 1024 and {MAX_REQUEST_BYTES_LIMIT}, not {}",
                self.max_request_bytes
            )));
        }
        if !(1..=65_536).contains(&self.max_concurrent_requests) {
            return Err(ConfigError::Invalid(format!(
                "max_concurrent_requests must be between 1 and 65536, not {}",
                self.max_concurrent_requests
            )));
        }
        if !(1..=1_000_000).contains(&self.max_connections) {
            return Err(ConfigError::Invalid(format!(
                "max_connections must be between 1 and 1000000, not {}",
                self.max_connections
            )));
        }
        if self.client_timeout_ms == 0 {
            return Err(ConfigError::Invalid("client_timeout_ms must be at least 1".to_owned()));
        }
        self.tls.files().map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if !self.write_principals.is_empty() && self.tls.tls_client_ca.is_none() {
            return Err(ConfigError::Invalid(
                "write_principals needs tls_client_ca: without client certificates nobody has a \
                 principal"
                    .to_owned(),
            ));
        }
        if let Some(bad) = self.write_principals.iter().find(|p| p.is_empty()) {
            return Err(ConfigError::Invalid(format!(
                "write_principals has an empty pattern {bad:?}"
            )));
        }
        Ok(())
    }

    pub fn client_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.client_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_sets_only_the_keys_it_names() {
        let config =
            Config::from_toml("port = 9000\ncompatibility = \"full_transitive\"\n").unwrap();
        assert_eq!(config.port, 9000);
        assert_eq!(config.compatibility, CompatibilityLevel::FullTransitive);
        assert_eq!(config.host, Config::default().host);
        config.validate().unwrap();
    }

    #[test]
    fn bad_values_are_one_line_errors_with_their_line() {
        let (line, message) = Config::from_toml("host = \"h\"\nport = \"eighty\"\n").unwrap_err();
        assert_eq!(line, 2);
        assert!(!message.contains('\n'));
        let (line, message) = Config::from_toml("\n\ncompatibility = \"SIDEWAYS\"").unwrap_err();
        assert_eq!(line, 3);
        assert!(message.contains("SIDEWAYS"), "{message}");
        let (line, message) = Config::from_toml("port = 1\ncolour = \"blue\"").unwrap_err();
        assert_eq!(line, 2);
        assert!(message.contains("colour"), "{message}");
        let (line, message) = Config::from_toml("port = 1\n\ntls_cert = 7").unwrap_err();
        assert_eq!(line, 3, "{message}");
    }

    #[test]
    fn out_of_range_limits_are_rejected() {
        let config = Config { max_request_bytes: MAX_REQUEST_BYTES_LIMIT + 1, ..Config::default() };
        assert!(matches!(config.validate(), Err(ConfigError::Invalid(_))));
        let config = Config { max_concurrent_requests: 0, ..Config::default() };
        assert!(matches!(config.validate(), Err(ConfigError::Invalid(_))));
    }
}
