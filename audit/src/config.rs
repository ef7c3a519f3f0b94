//! The audit service's settings: a TOML file whose keys are the binary's flag names with `_`
//! for `-`. The connection settings (`zookeeper`, `live`, `registry`, `http`) are for the
//! binary, which connects and binds; the library is handed those already built.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("{key} must be positive, got {value}")]
    NotPositive { key: &'static str, value: i64 },
    #[error("{key} must not be negative, got {value}")]
    Negative { key: &'static str, value: i64 },
    #[error(transparent)]
    ZooKeeper(#[from] cluster::SessionTimeoutError),
    #[error("{key} must be at least {min}, got {value}")]
    TooSmall { key: &'static str, min: u32, value: u32 },
    #[error("live cluster {0:?} is not NAME=CONNECT (e.g. dc-a=127.0.0.1:2181/tributary/live-a)")]
    BadLive(String),
    #[error("live cluster name {0:?} is given twice")]
    DuplicateLive(String),
    #[error("live cluster name {0:?} must be 1-64 characters of A-Z a-z 0-9 . _ -")]
    BadLiveName(String),
    #[error("{0}")]
    Tls(String),
}

/// One live cluster: the name its counts carry as `host`, and its ZooKeeper connect string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveCluster {
    pub name: String,
    pub connect: String,
}

impl std::str::FromStr for LiveCluster {
    type Err = ConfigError;

    /// `NAME=host:port[,host:port…][/chroot]`.
    fn from_str(s: &str) -> Result<LiveCluster, ConfigError> {
        let (name, connect) = s.split_once('=').ok_or_else(|| ConfigError::BadLive(s.into()))?;
        let valid_name = (1..=64).contains(&name.len())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !valid_name {
            return Err(ConfigError::BadLiveName(name.into()));
        }
        if connect.is_empty() {
            return Err(ConfigError::BadLive(s.into()));
        }
        Ok(LiveCluster { name: name.into(), connect: connect.into() })
    }
}

/// The smallest fetch the client accepts.
const FETCH_BYTES_MIN: u32 = 64;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// ZooKeeper of the analytics cluster, whose `_audit` topic is read (binary only).
    pub zookeeper: Option<String>,
    /// Live clusters to count, each `NAME=CONNECT` (binary only).
    pub live: Vec<String>,
    /// Schema registry URL, to decode `_audit` records (binary only).
    pub registry: Option<String>,
    /// `HOST:PORT` the dashboard listens on (binary only).
    pub http: String,
    /// Window length; must equal the window of every tier's records.
    pub audit_window_ms: i64,
    /// `zookeeper_session_timeout_ms` and `zookeeper_auth_file` of every cluster connection
    /// (binary only).
    #[serde(flatten)]
    pub zookeeper_session: cluster::ZooKeeperArgs,
    /// How long after a window closes its counts may still grow before a shortfall is loss.
    pub grace_ms: i64,
    /// The same for the `loader` tier, a batch job that counts a window only once a run has
    /// loaded it: cover its run interval. Unset: `grace_ms`. Never shorter than `grace_ms`.
    pub loader_grace_ms: Option<i64>,
    /// A tier that has not counted, for longer than this, events the tier before it counted is
    /// flagged as holding them back (dashboard, `/api/summary`); the loader tier, a batch job,
    /// after its grace instead.
    pub held_ms: i64,
    /// Windows that ended longer ago than this are forgotten.
    pub history_ms: i64,
    /// Windows shown per topic on the overview page.
    pub dashboard_windows: usize,
    /// The dashboard reloads itself this often.
    pub refresh_s: u64,
    /// At the end of a partition, a long poll waits this long at most for new data.
    pub fetch_wait_ms: u64,
    /// Bytes asked for per fetch.
    pub fetch_bytes: u32,
    /// Look for new brokers, topics and partitions at least this often (watches also trigger).
    pub discovery_ms: u64,
    /// Longest pause between retries of a failed fetch or registry read (doubling from 100 ms).
    pub retry_backoff_max_ms: u64,
    /// Give verdicts after this long even if a source could not be read to its end by then.
    pub catch_up_max_ms: u64,
    /// `tls_ca`: TLS to the brokers read and to an `https://` registry, trusting this CA.
    /// `tls_cert` and `tls_key`: the dashboard, API and metrics speak HTTPS (TLS 1.3) only, and
    /// the audit's principal to the brokers. `tls_client_ca`: a client certificate signed by
    /// this CA lets a client in (principal: its CN).
    #[serde(flatten)]
    pub tls: service::tls::TlsArgs,
    /// A file holding a bearer token: a request without a client certificate must carry
    /// `Authorization: Bearer {token}` or the cookie a browser gets from `/?token={token}`.
    /// Unset: none needed.
    pub token_file: Option<PathBuf>,
    /// Any other key: refused.
    #[serde(flatten)]
    pub unknown: service::config::Unknown,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            zookeeper: None,
            live: Vec::new(),
            registry: None,
            http: "127.0.0.1:8080".into(),
            audit_window_ms: events::audit::WINDOW_MS_DEFAULT,
            zookeeper_session: cluster::ZooKeeperArgs::default(),
            grace_ms: 900_000,
            loader_grace_ms: None,
            held_ms: 30_000,
            history_ms: 7 * 24 * 3_600_000,
            dashboard_windows: 12,
            refresh_s: 10,
            fetch_wait_ms: 200,
            fetch_bytes: 1 << 20,
            discovery_ms: 5_000,
            retry_backoff_max_ms: 5_000,
            catch_up_max_ms: 120_000,
            tls: service::tls::TlsArgs::default(),
            token_file: None,
            unknown: service::config::Unknown,
        }
    }
}

impl Config {
    /// The live clusters, parsed.
    pub fn live_clusters(&self) -> Result<Vec<LiveCluster>, ConfigError> {
        let mut clusters: Vec<LiveCluster> = Vec::with_capacity(self.live.len());
        for entry in &self.live {
            let cluster: LiveCluster = entry.parse()?;
            if clusters.iter().any(|c| c.name == cluster.name) {
                return Err(ConfigError::DuplicateLive(cluster.name));
            }
            clusters.push(cluster);
        }
        Ok(clusters)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("audit_window_ms", self.audit_window_ms),
            ("history_ms", self.history_ms),
            ("held_ms", self.held_ms),
            ("dashboard_windows", self.dashboard_windows as i64),
            ("refresh_s", self.refresh_s as i64),
            ("discovery_ms", self.discovery_ms as i64),
            ("retry_backoff_max_ms", self.retry_backoff_max_ms as i64),
        ];
        for (key, value) in positive {
            if value <= 0 {
                return Err(ConfigError::NotPositive { key, value });
            }
        }
        for (key, value) in
            [("grace_ms", self.grace_ms), ("loader_grace_ms", self.loader_grace_ms.unwrap_or(0))]
        {
            if value < 0 {
                return Err(ConfigError::Negative { key, value });
            }
        }
        if self.fetch_bytes < FETCH_BYTES_MIN {
            return Err(ConfigError::TooSmall {
                key: "fetch_bytes",
                min: FETCH_BYTES_MIN,
                value: self.fetch_bytes,
            });
        }
        self.zookeeper_session.validate()?;
        self.live_clusters()?;
        self.server_tls().map_err(|e| ConfigError::Tls(e.to_string()))?;
        Ok(())
    }

    /// The listener's certificate files, if it speaks HTTPS: with a token file, a client
    /// certificate is one way in and the token the other.
    pub fn server_tls(
        &self,
    ) -> Result<Option<service::tls::ServerTlsFiles>, service::tls::TlsError> {
        Ok(self.tls.server_files()?.map(|files| service::tls::ServerTlsFiles {
            client_certificate_optional: self.token_file.is_some(),
            ..files
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_follow_design() {
        let config = Config::default();
        config.validate().unwrap();
        assert_eq!(config.audit_window_ms, 600_000);
    }

    #[test]
    fn live_clusters_parse_and_reject_bad_entries() {
        let config = Config {
            live: vec!["dc-a=127.0.0.1:2181/tributary/live-a".into(), "dc-b=zk:2181".into()],
            ..Config::default()
        };
        let clusters = config.live_clusters().unwrap();
        assert_eq!(
            clusters[0],
            LiveCluster { name: "dc-a".into(), connect: "127.0.0.1:2181/tributary/live-a".into() }
        );
        let bad = |entry: &str| Config { live: vec![entry.into()], ..Config::default() }.validate();
        assert!(matches!(bad("no-equals"), Err(ConfigError::BadLive(_))));
        assert!(matches!(bad("dc a=zk:2181"), Err(ConfigError::BadLiveName(_))));
        assert!(matches!(bad("dc-a="), Err(ConfigError::BadLive(_))));
        let twice = Config { live: vec!["a=z:1".into(), "a=z:2".into()], ..Config::default() };
        assert!(matches!(twice.validate(), Err(ConfigError::DuplicateLive(_))));
    }

    #[test]
    fn bad_numbers_are_typed_errors() {
        let zero_window = Config { audit_window_ms: 0, ..Config::default() };
        assert!(matches!(
            zero_window.validate(),
            Err(ConfigError::NotPositive { key: "audit_window_ms", .. })
        ));
        let negative_grace = Config { grace_ms: -1, ..Config::default() };
        assert!(matches!(
            negative_grace.validate(),
            Err(ConfigError::Negative { key: "grace_ms", .. })
        ));
    }
}
