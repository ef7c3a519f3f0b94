//! What the agent is configured with. Keys are the binary's flag names with `_` for `-`;
//! every one but `registry` has a default.

use std::path::PathBuf;

use protocol::Codec;
use serde::{Deserialize, Serialize};

/// What happens when an event would grow the spool past `spool_max_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpoolFull {
    /// Refuse the new events (HTTP 503 with Retry-After): nothing accepted is ever dropped.
    #[default]
    Block,
    /// Delete the oldest spool segment, unacknowledged events included; they are counted as
    /// dropped, and the audit sees them as lost because no broker acknowledged them.
    DropOldest,
}

impl std::str::FromStr for SpoolFull {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<SpoolFull, ConfigError> {
        match s {
            "block" => Ok(SpoolFull::Block),
            "drop-oldest" => Ok(SpoolFull::DropOldest),
            other => Err(ConfigError::Invalid(format!(
                "spool_full {other:?}: expected block or drop-oldest"
            ))),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Schema registry base URL, e.g. `http://127.0.0.1:8081`.
    pub registry: String,
    /// Broker or load-balancer addresses; events go to partition −1 (the broker picks).
    pub brokers: Vec<String>,
    /// ZooKeeper `host:port[,…][/chroot]` of the live cluster, to find brokers in its registry.
    pub zookeeper: Option<String>,
    /// `zookeeper_session_timeout_ms` and `zookeeper_auth_file` of that session.
    #[serde(flatten)]
    pub zookeeper_session: cluster::ZooKeeperArgs,
    /// Where the HTTP input and `/metrics` listen.
    pub http: String,
    /// The spool's directory: segments, acknowledged position, tail positions.
    pub spool_dir: PathBuf,
    /// `header.service` of events that do not name one.
    pub service: String,
    /// `header.server` of events that do not name one, and the audit's host; the machine's
    /// hostname when unset.
    pub host_name: Option<String>,
    /// 1: acknowledged once appended by the partition's leader; 2: once flushed to its disk;
    /// 3 (all): once every in-sync replica has it.
    pub acks: u8,
    pub audit_window_ms: i64,
    /// Changed audit counts are published this often (and on shutdown).
    pub audit_publish_ms: u64,
    pub spool_max_bytes: u64,
    /// A spool segment is closed at this size (at most an eighth of `spool_max_bytes`).
    pub spool_segment_bytes: u64,
    pub spool_full: SpoolFull,
    /// How often the acknowledged position is made durable (and acknowledged segments freed).
    pub spool_ack_sync_ms: u64,
    /// `FILE=TOPIC`: newline-delimited JSON files to follow.
    pub tail: Vec<String>,
    pub tail_poll_ms: u64,
    /// none, gzip, lz4 or zstd.
    pub compression: String,
    pub batch_messages: usize,
    pub batch_bytes: usize,
    pub linger_ms: u64,
    /// Largest HTTP request body.
    pub max_request_bytes: usize,
    /// HTTP requests read and handled at once; each holds its body and its events encoded
    /// (about three times `max_request_bytes`: see the README's Memory).
    pub max_concurrent_requests: usize,
    /// HTTP connections open at once; more are closed at once.
    pub max_connections: usize,
    /// An HTTP client that takes longer over a request's head or its body, or leaves its
    /// keep-alive connection idle this long, is disconnected.
    pub client_timeout_ms: u64,
    /// Largest encoded event.
    pub max_event_bytes: usize,
    /// A topic's latest schema is asked for again after this long.
    pub schema_refresh_ms: u64,
    /// Longest pause between attempts to ship after a failure.
    pub retry_backoff_max_ms: u64,
    /// How long shutdown waits for the spool to be acknowledged before leaving it for the next
    /// start.
    pub drain_timeout_ms: u64,
    /// `tls_ca`: the CA the agent checks the brokers' and the registry's certificates with
    /// (TLS to both; unset: plaintext). `tls_cert` and `tls_key`: its identity to brokers and
    /// registry (mutual TLS), and, for its HTTP input, the server certificate (HTTPS only).
    /// `tls_client_ca`: the HTTP input requires client certificates signed by this CA.
    #[serde(flatten)]
    pub tls: service::tls::TlsArgs,
    /// Any other key: refused.
    #[serde(flatten)]
    pub unknown: service::config::Unknown,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            registry: String::new(),
            brokers: Vec::new(),
            zookeeper: None,
            zookeeper_session: cluster::ZooKeeperArgs::default(),
            http: "127.0.0.1:8090".to_owned(),
            spool_dir: PathBuf::from("/tmp/tributary-agent"),
            service: "frontend".to_owned(),
            host_name: None,
            acks: 3,
            audit_window_ms: events::audit::WINDOW_MS_DEFAULT,
            audit_publish_ms: 5_000,
            spool_max_bytes: 1 << 30,
            spool_segment_bytes: 64 << 20,
            spool_full: SpoolFull::Block,
            spool_ack_sync_ms: 100,
            tail: Vec::new(),
            tail_poll_ms: 200,
            compression: "lz4".to_owned(),
            batch_messages: 1_000,
            batch_bytes: 512 << 10,
            linger_ms: 5,
            max_request_bytes: 16 << 20,
            max_concurrent_requests: 32,
            max_connections: service::http::MAX_CONNECTIONS,
            client_timeout_ms: service::http::CLIENT_TIMEOUT.as_millis() as u64,
            max_event_bytes: 1 << 20,
            schema_refresh_ms: 60_000,
            retry_backoff_max_ms: 5_000,
            drain_timeout_ms: 10_000,
            tls: service::tls::TlsArgs::default(),
            unknown: service::config::Unknown,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("invalid config: {0}")]
    Invalid(String),
}

/// One `--tail FILE=TOPIC`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailSpec {
    pub file: PathBuf,
    pub topic: String,
}

impl Config {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |reason: String| Err(ConfigError::Invalid(reason));
        if self.registry.is_empty() {
            return invalid("registry is required (the schema registry's URL)".into());
        }
        if self
            .brokers
            .iter()
            .any(|b| b.rsplit_once(':').is_none_or(|(_, p)| p.parse::<u16>().is_err()))
        {
            return invalid(format!("brokers {:?}: expected HOST:PORT,…", self.brokers));
        }
        if !matches!(self.acks, 1..=3) {
            return invalid(format!(
                "acks {}: expected 1, 2 or 3 (the spool needs acknowledgements)",
                self.acks
            ));
        }
        if self.audit_window_ms <= 0 {
            return invalid("audit_window_ms must be positive".into());
        }
        if self.spool_max_bytes < 1 << 16 {
            return invalid(format!("spool_max_bytes {} is below 64 KiB", self.spool_max_bytes));
        }
        if (self.max_event_bytes as u64) * 4 > self.spool_max_bytes {
            return invalid(
                "spool_max_bytes must hold at least four events of max_event_bytes".into(),
            );
        }
        if self.spool_segment_bytes == 0 {
            return invalid("spool_segment_bytes must be positive".into());
        }
        for (name, value) in [
            ("audit_publish_ms", self.audit_publish_ms),
            ("spool_ack_sync_ms", self.spool_ack_sync_ms),
            ("tail_poll_ms", self.tail_poll_ms),
            ("schema_refresh_ms", self.schema_refresh_ms),
            ("retry_backoff_max_ms", self.retry_backoff_max_ms),
            ("client_timeout_ms", self.client_timeout_ms),
            ("max_connections", self.max_connections as u64),
        ] {
            if value == 0 {
                return invalid(format!("{name} must be positive"));
            }
        }
        if self.batch_messages == 0
            || self.batch_bytes == 0
            || self.max_request_bytes == 0
            || self.max_concurrent_requests == 0
        {
            return invalid(
                "batch_messages, batch_bytes, max_request_bytes and max_concurrent_requests must be positive"
                    .into(),
            );
        }
        self.codec()?;
        self.tails()?;
        let tls = |e: service::tls::TlsError| ConfigError::Invalid(e.to_string());
        if self.tls.tls_ca.is_some() {
            self.tls.client_files().map_err(tls)?;
        }
        self.tls.server_files().map_err(tls)?;
        Ok(())
    }

    /// TLS to the brokers and the registry (files read), with `tls_ca`.
    pub fn client_tls(&self) -> Result<Option<std::sync::Arc<rustls::ClientConfig>>, ConfigError> {
        self.tls.client().map_err(|e| ConfigError::Invalid(e.to_string()))
    }

    /// HTTPS for the input (files read), with `tls_cert` and `tls_key`.
    pub fn server_tls(
        &self,
    ) -> Result<Option<std::sync::Arc<service::tls::ServerTls>>, ConfigError> {
        self.tls.server().map_err(|e| ConfigError::Invalid(e.to_string()))
    }

    /// For a process that finds brokers from its config (the binary): exactly one of `brokers`
    /// and `zookeeper`. [`Agent::start`](crate::Agent::start) takes brokers as an argument and
    /// does not need either.
    pub fn validate_brokers(&self) -> Result<(), ConfigError> {
        if self.brokers.is_empty() == self.zookeeper.is_none() {
            return Err(ConfigError::Invalid("give exactly one of brokers and zookeeper".into()));
        }
        Ok(())
    }

    /// The spool segment size actually used: small enough that `drop-oldest` can free room
    /// without touching the segment being written.
    pub fn segment_bytes(&self) -> u64 {
        self.spool_segment_bytes.min(self.spool_max_bytes / 8).max(1)
    }

    pub fn codec(&self) -> Result<Codec, ConfigError> {
        match self.compression.as_str() {
            "none" => Ok(Codec::None),
            "gzip" => Ok(Codec::Gzip),
            "lz4" => Ok(Codec::Lz4),
            "zstd" => Ok(Codec::Zstd),
            other => Err(ConfigError::Invalid(format!(
                "compression {other:?}: expected none, gzip, lz4 or zstd"
            ))),
        }
    }

    pub fn tails(&self) -> Result<Vec<TailSpec>, ConfigError> {
        self.tail
            .iter()
            .map(|spec| match spec.rsplit_once('=') {
                Some((file, topic)) if !file.is_empty() && !topic.is_empty() => {
                    Ok(TailSpec { file: PathBuf::from(file), topic: topic.to_owned() })
                }
                _ => Err(ConfigError::Invalid(format!("tail {spec:?}: expected FILE=TOPIC"))),
            })
            .collect()
    }

    /// `host_name`, or the machine's hostname.
    pub fn host(&self) -> String {
        self.host_name.clone().unwrap_or_else(service::host::name)
    }
}
