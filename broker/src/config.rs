//! Broker configuration: a TOML file whose keys are the flags' names, defaults from
//! `docs/design.md` ("Broker configuration"), and per-topic overrides that `CREATE_TOPIC` may
//! set ("CREATE_TOPIC and topic settings").

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path}{message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid {key}: {reason}")]
    Invalid { key: &'static str, reason: String },
    #[error(
        "unknown topic config key {0:?} (known: segment_bytes, segment_ms, retention_ms, retention_bytes, local_retention_ms, local_retention_bytes, remote_storage, cleanup_policy, delete_retention_ms, flush_messages, flush_ms, visible_after, message_timestamp_type, partitions)"
    )]
    UnknownTopicKey(String),
    #[error("visible_after: {0:?} is neither \"flush\" nor \"write\"")]
    NotAVisibility(String),
    #[error("message_timestamp_type: {0:?} is neither \"CreateTime\" nor \"LogAppendTime\"")]
    NotATimestampType(String),
    #[error("cleanup_policy: {0:?} is none of \"delete\", \"compact\", \"compact,delete\"")]
    NotACleanupPolicy(String),
    #[error("remote_storage: {0:?} is neither \"true\" nor \"false\"")]
    NotABool(String),
    #[error("topic config {key}: {value:?} is not a whole number")]
    NotANumber { key: String, value: String },
}

/// When appended data becomes visible to fetches (`docs/design.md`, "Visibility").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VisibleAfter {
    /// Once flushed to disk (the paper's rule): a consumer never sees data a machine crash
    /// could lose, and waits up to `flush_ms` for it.
    #[default]
    Flush,
    /// Once appended to the page cache: seen at once, but a machine crash (not a process
    /// crash) can lose data a consumer already saw.
    Write,
}

impl FromStr for VisibleAfter {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<VisibleAfter, ConfigError> {
        match s.trim() {
            "flush" => Ok(VisibleAfter::Flush),
            "write" => Ok(VisibleAfter::Write),
            other => Err(ConfigError::NotAVisibility(other.to_owned())),
        }
    }
}

impl std::fmt::Display for VisibleAfter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VisibleAfter::Flush => "flush",
            VisibleAfter::Write => "write",
        })
    }
}

/// Which time a magic-2 batch's records carry (Kafka's `message.timestamp.type`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TimestampType {
    /// The producer's, as sent.
    #[default]
    CreateTime,
    /// The leader's clock when it appends the batch: it sets the batch's timestamp type and
    /// its max timestamp, which Kafka's consumers then read as every record's timestamp.
    LogAppendTime,
}

impl FromStr for TimestampType {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<TimestampType, ConfigError> {
        match s.trim() {
            "CreateTime" => Ok(TimestampType::CreateTime),
            "LogAppendTime" => Ok(TimestampType::LogAppendTime),
            other => Err(ConfigError::NotATimestampType(other.to_owned())),
        }
    }
}

impl std::fmt::Display for TimestampType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TimestampType::CreateTime => "CreateTime",
            TimestampType::LogAppendTime => "LogAppendTime",
        })
    }
}

/// What happens to a topic's old records (`docs/design.md`, "Compacted topics"): deleted by
/// age and size (`delete`, the default), compacted to the last record of each key (`compact`),
/// or both — Kafka's `cleanup.policy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

impl CleanupPolicy {
    pub const DELETE: CleanupPolicy = CleanupPolicy { delete: true, compact: false };
}

impl FromStr for CleanupPolicy {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<CleanupPolicy, ConfigError> {
        let mut policy = CleanupPolicy::default();
        for part in s.split(',').map(str::trim) {
            match part {
                "delete" if !policy.delete => policy.delete = true,
                "compact" if !policy.compact => policy.compact = true,
                _ => return Err(ConfigError::NotACleanupPolicy(s.to_owned())),
            }
        }
        Ok(policy)
    }
}

impl std::fmt::Display for CleanupPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match (self.compact, self.delete) {
            (true, true) => "compact,delete",
            (true, false) => "compact",
            _ => "delete",
        })
    }
}

impl Serialize for CleanupPolicy {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CleanupPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Everything a broker is configured with. Field names are the config file's keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BrokerConfig {
    pub broker_id: i32,
    pub host: String,
    pub port: u16,
    /// The address clients and the other brokers are told to connect to (registered in
    /// ZooKeeper, answered in metadata), where it is not `host`:`port` — a proxy or a NAT in
    /// front of the broker. Each unset: the listening one.
    pub advertised_host: Option<String>,
    pub advertised_port: Option<u16>,
    /// The port of the Kafka protocol listener (docs/design.md, "Kafka protocol listener"), for
    /// Kafka's own clients; unset: none. 0 takes a free port (registered and answered in metadata).
    pub kafka_port: Option<u16>,
    /// The address the Kafka listener listens on; `host` when unset. Kafka clients are told
    /// `advertised_host` (or this) with the listener's port.
    pub kafka_host: Option<String>,
    /// The port Kafka clients are told to connect to, where it is not the Kafka listener's:
    /// a proxy or a NAT in front of it (with `advertised_host`).
    pub kafka_advertised_port: Option<u16>,
    pub data_dir: PathBuf,
    /// Partitions of a topic created without an explicit count.
    pub num_partitions: u32,
    /// Create unknown topics on their first produce.
    pub auto_create_topics: bool,
    pub max_request_bytes: u32,
    /// Largest `length` of one message (the bytes after its length field).
    pub max_message_bytes: u32,
    pub max_connections: u32,
    /// A client that leaves a request half sent, or a response unread (its socket accepting
    /// nothing), for this long is disconnected: such clients give their slots back.
    pub client_timeout_ms: u64,
    /// Bytes of requests larger than 4 KiB being read, over all connections; a connection
    /// whose request does not fit stops reading until others are taken. With the 4 KiB each
    /// other connection may hold, this bounds what clients can make the broker buffer.
    pub request_memory_bytes: u64,
    /// Long-poll fetches (`MULTIFETCH_WAIT`) waiting for data at once, over all connections;
    /// one more is answered at once with what is visible.
    pub max_parked_fetches: u32,
    /// The longest a long-poll fetch waits, whatever `max_wait_ms` it asks for.
    pub max_fetch_wait_ms: u64,
    /// A follower that has not reached its leader's log end for this long leaves the ISR.
    pub replica_lag_ms: u64,
    /// Replicas of each partition of a topic created without `replication_factor`.
    pub default_replication_factor: u32,
    /// In-sync replicas an `acks` 3 produce needs, for a topic that does not set its own.
    pub min_insync_replicas: u32,
    /// The longest an `acks` 3 produce waits for every in-sync replica before it is answered
    /// with error 13 (request timed out).
    pub ack_timeout_ms: u64,
    pub retention_check_ms: u64,
    /// A pass of the scrubber over every sealed segment (CRC checks; a damaged range is
    /// copied again from a replica) starts this long after the last one ended; 0: no scrub.
    pub scrub_interval_ms: u64,
    /// Bytes per second the scrubber reads at most, averaged over each segment; 0: no limit.
    pub scrub_bytes_per_s: u64,
    /// Where `/metrics` listens (`HOST:PORT`); unset serves none.
    pub metrics: Option<String>,
    /// ZooKeeper to register in, `host:port[,…][/chroot]`; unset runs standalone.
    pub zookeeper: Option<String>,
    /// `zookeeper_session_timeout_ms` and `zookeeper_auth_file` of that session.
    #[serde(flatten)]
    pub zookeeper_session: cluster::ZooKeeperArgs,
    // Defaults of every topic's log; `CREATE_TOPIC` may override them per topic.
    pub segment_bytes: u64,
    pub segment_ms: u64,
    pub retention_ms: u64,
    /// Delete head segments while a partition is larger than this; unset keeps any size.
    pub retention_bytes: Option<u64>,
    pub flush_messages: u64,
    pub flush_ms: u64,
    pub visible_after: VisibleAfter,
    /// Which time magic-2 batches carry: `CreateTime` or `LogAppendTime`.
    pub message_timestamp_type: TimestampType,
    // Compacted topics (docs/design.md, "Compacted topics").
    /// What happens to old records: `delete`, `compact` or `compact,delete`.
    pub cleanup_policy: CleanupPolicy,
    /// How long a compacted topic keeps a tombstone (a record with a null value) after the
    /// cleaner first passed its segment: what a consumer has to see a key's deletion.
    pub delete_retention_ms: u64,
    /// How often the cleaner looks for compacted partitions with sealed segments to clean.
    pub cleaner_interval_ms: u64,
    /// Bytes per second the cleaner reads at most; 0: no limit.
    pub cleaner_bytes_per_s: u64,
    // Tiered storage (docs/design.md, "Tiered storage").
    /// The object store sealed segments are uploaded to (`file:///dir`, `s3://bucket/prefix`);
    /// unset: no tiered storage.
    pub remote_store: Option<String>,
    /// Topics upload their sealed segments unless they say otherwise (Kafka's
    /// `remote.storage.enable`, as a cluster default).
    pub remote_storage: bool,
    /// What a tiered topic keeps on disk by age (unset: `retention_ms`): only segments already
    /// in the store go.
    pub local_retention_ms: Option<u64>,
    /// What a tiered topic keeps on disk by size (unset: `retention_bytes`).
    pub local_retention_bytes: Option<u64>,
    /// Bytes per second the broker uploads at most; 0: no limit.
    pub remote_upload_bytes_per_s: u64,
    /// Bytes of remote segments kept on disk for repeated reads.
    pub remote_cache_bytes: u64,
    /// How often the leader looks for sealed segments to upload and remote ones to expire.
    pub remote_task_interval_ms: u64,
    /// `tls_cert` and `tls_key` (PEM certificate chain and key): the listener speaks TLS 1.3
    /// only, and followers fetch from their leaders over TLS with this certificate as theirs.
    /// `tls_client_ca`: clients must present a certificate signed by this CA (mutual TLS); the
    /// principal is the certificate's subject CN. `tls_ca`: the CA a follower checks its
    /// leaders' certificates with [default: `tls_client_ca`].
    #[serde(flatten)]
    pub tls: service::tls::TlsArgs,
    /// Allow only what this ACL file allows; the rest gets error 14. Unset: all allowed.
    pub acl_file: Option<PathBuf>,
    /// Any other key: refused.
    #[serde(flatten)]
    pub unknown: service::config::Unknown,
}

/// The settings of one partition's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    pub segment_bytes: u64,
    pub segment_ms: u64,
    pub retention_ms: u64,
    /// Delete head segments while the log is larger than this; unset keeps any size.
    pub retention_bytes: Option<u64>,
    pub flush_messages: u64,
    pub flush_ms: u64,
    pub visible_after: VisibleAfter,
    pub timestamp_type: TimestampType,
    pub cleanup_policy: CleanupPolicy,
    pub delete_retention_ms: u64,
    /// Sealed segments go to the object store (needs the broker's `remote_store`).
    pub remote_storage: bool,
    /// What stays on disk when `remote_storage` is on; unset: `retention_ms`/`retention_bytes`.
    pub local_retention_ms: Option<u64>,
    pub local_retention_bytes: Option<u64>,
    /// The longest message the broker takes (the broker's `max_message_bytes`): also the
    /// longest a length read back from a segment file may claim.
    pub max_message_bytes: u32,
}

impl Default for BrokerConfig {
    fn default() -> BrokerConfig {
        BrokerConfig {
            broker_id: 0,
            host: "127.0.0.1".into(),
            port: protocol::DEFAULT_PORT,
            advertised_host: None,
            advertised_port: None,
            kafka_port: None,
            kafka_host: None,
            kafka_advertised_port: None,
            data_dir: PathBuf::from("/tmp/tributary-logs"),
            num_partitions: 1,
            auto_create_topics: true,
            max_request_bytes: 100 << 20,
            max_message_bytes: 1 << 20,
            max_connections: 4096,
            client_timeout_ms: 30_000,
            request_memory_bytes: 512 << 20,
            max_parked_fetches: 1024,
            max_fetch_wait_ms: 30_000,
            replica_lag_ms: 10_000,
            default_replication_factor: 1,
            min_insync_replicas: 1,
            ack_timeout_ms: 30_000,
            retention_check_ms: 5 * 60 * 1000,
            scrub_interval_ms: DAY_MS,
            scrub_bytes_per_s: 16 << 20,
            metrics: None,
            zookeeper: None,
            zookeeper_session: cluster::ZooKeeperArgs::default(),
            segment_bytes: 1 << 30,
            segment_ms: 7 * DAY_MS,
            retention_ms: 7 * DAY_MS,
            retention_bytes: None,
            // Kafka 0.7's shipped server.properties: flush every 10,000 messages or 1 s.
            flush_messages: 10_000,
            flush_ms: 1000,
            visible_after: VisibleAfter::Flush,
            message_timestamp_type: TimestampType::CreateTime,
            cleanup_policy: CleanupPolicy::DELETE,
            delete_retention_ms: DAY_MS,
            cleaner_interval_ms: 15_000,
            cleaner_bytes_per_s: 32 << 20,
            remote_store: None,
            remote_storage: false,
            local_retention_ms: None,
            local_retention_bytes: None,
            remote_upload_bytes_per_s: 64 << 20,
            remote_cache_bytes: 1 << 30,
            remote_task_interval_ms: 5000,
            tls: service::tls::TlsArgs::default(),
            acl_file: None,
            unknown: service::config::Unknown,
        }
    }
}

/// Most partitions one topic may have on a broker.
pub const PARTITIONS_MAX: u32 = 10_000;

impl BrokerConfig {
    /// Reads a TOML file; keys left out keep their defaults.
    pub fn from_file(path: &std::path::Path) -> Result<BrokerConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.into(), source })?;
        service::config::parse(&text).map_err(|(line, message)| {
            // One line: where it is, the line itself, and what is wrong with it.
            let source = text.lines().nth(line - 1).unwrap_or_default().trim();
            let message = format!(" line {line} `{source}`: {message}");
            ConfigError::Parse { path: path.into(), message }
        })
    }

    /// Checks every value; `main` and tests call it before starting a broker.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason: &str| Err(ConfigError::Invalid { key, reason: reason.into() });
        if self.broker_id < 0 {
            return invalid("broker_id", "must be 0 or more");
        }
        if self.host.is_empty() {
            return invalid("host", "must not be empty");
        }
        if self.advertised_host.as_deref().is_some_and(str::is_empty) {
            return invalid("advertised_host", "must not be empty");
        }
        if self.kafka_host.as_deref().is_some_and(str::is_empty) {
            return invalid("kafka_host", "must not be empty");
        }
        if self.kafka_advertised_port == Some(0) {
            return invalid("kafka_advertised_port", "must be a port (1 to 65535)");
        }
        if self.kafka_advertised_port.is_some() && self.kafka_port.is_none() {
            return invalid("kafka_advertised_port", "needs a Kafka listener (kafka_port)");
        }
        if self.advertised_port == Some(0) {
            return invalid("advertised_port", "must be a port (1 to 65535)");
        }
        if self.data_dir.as_os_str().is_empty() {
            return invalid("data_dir", "must not be empty");
        }
        if self.default_replication_factor == 0 {
            return invalid("default_replication_factor", "must be at least 1");
        }
        if self.min_insync_replicas == 0 {
            return invalid("min_insync_replicas", "must be at least 1");
        }
        if self.replica_lag_ms == 0 {
            return invalid("replica_lag_ms", "must be at least 1");
        }
        if self.ack_timeout_ms == 0 {
            return invalid("ack_timeout_ms", "must be at least 1");
        }
        if self.num_partitions == 0 || self.num_partitions > PARTITIONS_MAX {
            return invalid("num_partitions", "must be between 1 and 10000");
        }
        if self.max_message_bytes < 5 {
            return invalid("max_message_bytes", "must be at least 5");
        }
        if self.max_request_bytes < self.max_message_bytes {
            return invalid("max_request_bytes", "must be at least max_message_bytes");
        }
        if self.max_connections == 0 {
            return invalid("max_connections", "must be at least 1");
        }
        if self.request_memory_bytes < self.max_request_bytes as u64
            || self.request_memory_bytes > u32::MAX as u64
        {
            return invalid(
                "request_memory_bytes",
                "must be at least max_request_bytes and below 4 GiB",
            );
        }
        if self.client_timeout_ms == 0 {
            return invalid("client_timeout_ms", "must be at least 1");
        }
        if self.metrics.as_deref().is_some_and(str::is_empty) {
            return invalid("metrics", "must not be empty");
        }
        if self.zookeeper.as_deref().is_some_and(str::is_empty) {
            return invalid("zookeeper", "must not be empty");
        }
        if self.zookeeper_session.validate().is_err() {
            return invalid("zookeeper_session_timeout_ms", "must be between 1000 and 60000");
        }
        if self.retention_check_ms == 0 {
            return invalid("retention_check_ms", "must be at least 1");
        }
        self.validate_remote()?;
        let tls = self
            .tls
            .server_files()
            .map_err(|e| ConfigError::Invalid { key: "tls_cert", reason: e.to_string() })?;
        if tls.is_none() && self.tls.tls_ca.is_some() {
            return invalid("tls_ca", "needs tls_cert and tls_key (a follower's own certificate)");
        }
        if tls.is_some() && self.zookeeper.is_some() && self.replica_tls().is_none() {
            return invalid(
                "tls_ca",
                "a broker of a cluster with TLS needs tls_ca or tls_client_ca to check its leaders",
            );
        }
        for (key, path) in [
            ("tls_cert", &self.tls.tls_cert),
            ("tls_key", &self.tls.tls_key),
            ("tls_client_ca", &self.tls.tls_client_ca),
            ("tls_ca", &self.tls.tls_ca),
            ("acl_file", &self.acl_file),
        ] {
            if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                return invalid(key, "must not be empty");
            }
        }
        self.log().validate()
    }

    /// Checks the settings of tiered storage.
    fn validate_remote(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason: &str| Err(ConfigError::Invalid { key, reason: reason.into() });
        if let Some(url) = &self.remote_store {
            service::store::check_url(url)
                .map_err(|e| ConfigError::Invalid { key: "remote_store", reason: e.to_string() })?;
        }
        if self.remote_storage && self.remote_store.is_none() {
            return invalid("remote_storage", "needs remote_store: where the segments go");
        }
        if self.remote_task_interval_ms == 0 {
            return invalid("remote_task_interval_ms", "must be at least 1");
        }
        if self.cleaner_interval_ms == 0 {
            return invalid("cleaner_interval_ms", "must be at least 1");
        }
        Ok(())
    }

    /// What a follower connects to its leader with: the CA it trusts and its own certificate.
    pub fn replica_tls(&self) -> Option<service::tls::ClientTlsFiles> {
        let tls = &self.tls;
        let (cert, key) = (tls.tls_cert.clone()?, tls.tls_key.clone()?);
        let ca = tls.tls_ca.clone().or_else(|| tls.tls_client_ca.clone())?;
        Some(service::tls::ClientTlsFiles { ca, cert: Some(cert), key: Some(key) })
    }

    /// The log settings every topic starts from.
    pub fn log(&self) -> LogConfig {
        LogConfig {
            segment_bytes: self.segment_bytes,
            segment_ms: self.segment_ms,
            retention_ms: self.retention_ms,
            retention_bytes: self.retention_bytes,
            flush_messages: self.flush_messages,
            flush_ms: self.flush_ms,
            visible_after: self.visible_after,
            timestamp_type: self.message_timestamp_type,
            cleanup_policy: self.cleanup_policy,
            delete_retention_ms: self.delete_retention_ms,
            remote_storage: self.remote_storage,
            local_retention_ms: self.local_retention_ms,
            local_retention_bytes: self.local_retention_bytes,
            max_message_bytes: self.max_message_bytes,
        }
    }

    /// The address to listen on.
    pub fn listen_addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Where the Kafka listener listens, if the broker has one.
    pub fn kafka_listen_addr(&self) -> Option<String> {
        let port = self.kafka_port?;
        let host = self.kafka_host.as_deref().unwrap_or(&self.host);
        Some(if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") })
    }

    /// Parses [`BrokerConfig::listen_addr`] when it is a literal IP address.
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        self.listen_addr().parse().ok()
    }

    pub fn max_fetch_wait(&self) -> Duration {
        Duration::from_millis(self.max_fetch_wait_ms)
    }

    pub fn replica_lag(&self) -> Duration {
        Duration::from_millis(self.replica_lag_ms)
    }

    pub fn client_timeout(&self) -> Duration {
        Duration::from_millis(self.client_timeout_ms)
    }

    pub fn ack_timeout(&self) -> Duration {
        Duration::from_millis(self.ack_timeout_ms)
    }

    pub fn retention_check_interval(&self) -> Duration {
        Duration::from_millis(self.retention_check_ms)
    }

    /// Between scrub passes; `None` when the scrubber is off.
    pub fn scrub_interval(&self) -> Option<Duration> {
        (self.scrub_interval_ms > 0).then(|| Duration::from_millis(self.scrub_interval_ms))
    }
}

impl LogConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason: &str| Err(ConfigError::Invalid { key, reason: reason.into() });
        if self.segment_bytes == 0 || self.segment_bytes > i64::MAX as u64 {
            return invalid("segment_bytes", "must be at least 1");
        }
        if self.segment_ms == 0 {
            return invalid("segment_ms", "must be at least 1");
        }
        if self.retention_ms == 0 {
            return invalid("retention_ms", "must be at least 1");
        }
        if self.flush_messages == 0 {
            return invalid("flush_messages", "must be at least 1");
        }
        if self.flush_ms == 0 {
            return invalid("flush_ms", "must be at least 1");
        }
        if self.cleanup_policy.compact && self.remote_storage {
            // As in Kafka: a cleaned segment would no longer be the one in the store.
            return invalid(
                "cleanup_policy",
                "a compacted topic cannot be tiered (remote_storage)",
            );
        }
        Ok(())
    }

    /// The broker's defaults with a topic's overrides applied.
    pub fn with_overrides(&self, overrides: &TopicOverrides) -> LogConfig {
        let mut log = *self;
        if let Some(visible_after) = overrides.visible_after {
            log.visible_after = visible_after;
        }
        if let Some(timestamp_type) = overrides.timestamp_type {
            log.timestamp_type = timestamp_type;
        }
        if let Some(remote_storage) = overrides.remote_storage {
            log.remote_storage = remote_storage;
        }
        if let Some(cleanup_policy) = overrides.cleanup_policy {
            log.cleanup_policy = cleanup_policy;
        }
        for (key, &value) in &overrides.values {
            match key.as_str() {
                "segment_bytes" => log.segment_bytes = value,
                "segment_ms" => log.segment_ms = value,
                "retention_ms" => log.retention_ms = value,
                "retention_bytes" => log.retention_bytes = Some(value),
                "local_retention_ms" => log.local_retention_ms = Some(value),
                "local_retention_bytes" => log.local_retention_bytes = Some(value),
                "flush_messages" => log.flush_messages = value,
                "flush_ms" => log.flush_ms = value,
                "delete_retention_ms" => log.delete_retention_ms = value,
                _ => unreachable!("TopicOverrides::parse admits only known keys"),
            }
        }
        log
    }

    pub fn flush_interval(&self) -> Duration {
        Duration::from_millis(self.flush_ms)
    }

    /// How long segments stay on disk: `local_retention_ms` on a tiered topic, else the log's.
    pub fn local_retention_ms(&self) -> u64 {
        match self.local_retention_ms {
            Some(ms) if self.remote_storage => ms.min(self.retention_ms),
            _ => self.retention_ms,
        }
    }

    /// How many bytes stay on disk: `local_retention_bytes` on a tiered topic, else the log's.
    pub fn local_retention_bytes(&self) -> Option<u64> {
        match (self.remote_storage, self.local_retention_bytes, self.retention_bytes) {
            (true, Some(local), Some(all)) => Some(local.min(all)),
            (true, Some(local), None) => Some(local),
            _ => self.retention_bytes,
        }
    }
}

/// Keys a topic may override.
const TOPIC_KEYS: [&str; 9] = [
    "segment_bytes",
    "segment_ms",
    "retention_ms",
    "retention_bytes",
    "local_retention_ms",
    "local_retention_bytes",
    "flush_messages",
    "flush_ms",
    "delete_retention_ms",
];

/// Kafka's names for the topic settings Tributary takes, and Tributary's own: Kafka's admin
/// APIs take either.
pub(crate) const KAFKA_TOPIC_KEYS: [(&str, &str); 14] = [
    ("segment.bytes", "segment_bytes"),
    ("segment.ms", "segment_ms"),
    ("retention.ms", "retention_ms"),
    ("retention.bytes", "retention_bytes"),
    ("flush.messages", "flush_messages"),
    ("flush.ms", "flush_ms"),
    ("min.insync.replicas", "min_insync_replicas"),
    ("unclean.leader.election.enable", "unclean_leader_election"),
    ("message.timestamp.type", TIMESTAMP_TYPE),
    ("local.retention.ms", "local_retention_ms"),
    ("local.retention.bytes", "local_retention_bytes"),
    ("remote.storage.enable", REMOTE_STORAGE),
    ("cleanup.policy", CLEANUP_POLICY),
    ("delete.retention.ms", "delete_retention_ms"),
];

/// The topic setting of [`CleanupPolicy`].
pub(crate) const CLEANUP_POLICY: &str = "cleanup_policy";

/// The topic setting that turns tiered storage on.
pub(crate) const REMOTE_STORAGE: &str = "remote_storage";

/// The topic setting of [`TimestampType`].
pub(crate) const TIMESTAMP_TYPE: &str = "message_timestamp_type";

/// Tributary's key for a topic setting named by Kafka's name or its own.
pub(crate) fn topic_key(name: &str) -> &str {
    KAFKA_TOPIC_KEYS.iter().find(|(kafka, _)| *kafka == name).map_or(name, |(_, ours)| ours)
}

/// Kafka's name of one of Tributary's topic settings (its own name if Kafka has none).
pub(crate) fn kafka_topic_key(ours: &str) -> &str {
    KAFKA_TOPIC_KEYS.iter().find(|(_, o)| *o == ours).map_or(ours, |(kafka, _)| kafka)
}

impl BrokerConfig {
    /// The broker's default for a topic setting (Tributary's key), as text; `None` for one
    /// without a value (`retention_bytes` unlimited is −1, as in Kafka).
    pub(crate) fn topic_default(&self, key: &str) -> Option<String> {
        Some(match key {
            "segment_bytes" => self.segment_bytes.to_string(),
            "segment_ms" => self.segment_ms.to_string(),
            "retention_ms" => self.retention_ms.to_string(),
            "retention_bytes" => self.retention_bytes.map_or("-1".into(), |b| b.to_string()),
            // Kafka's −2: "as retention".
            "local_retention_ms" => self.local_retention_ms.map_or("-2".into(), |b| b.to_string()),
            "local_retention_bytes" => {
                self.local_retention_bytes.map_or("-2".into(), |b| b.to_string())
            }
            REMOTE_STORAGE => self.remote_storage.to_string(),
            "flush_messages" => self.flush_messages.to_string(),
            "flush_ms" => self.flush_ms.to_string(),
            "min_insync_replicas" => self.min_insync_replicas.to_string(),
            "unclean_leader_election" => "false".into(),
            "visible_after" => self.visible_after.to_string(),
            TIMESTAMP_TYPE => self.message_timestamp_type.to_string(),
            CLEANUP_POLICY => self.cleanup_policy.to_string(),
            "delete_retention_ms" => self.delete_retention_ms.to_string(),
            _ => return None,
        })
    }
}

/// Topic settings that belong to the cluster rather than to a log: how many replicas, how
/// many must be in sync for `acks` all, and whether an out-of-sync replica may lead.
pub(crate) const REPLICATION_FACTOR: &str = "replication_factor";
pub(crate) const MIN_INSYNC_REPLICAS: &str = "min_insync_replicas";
pub(crate) const CLUSTER_KEYS: [&str; 3] =
    [REPLICATION_FACTOR, MIN_INSYNC_REPLICAS, cluster::UNCLEAN_LEADER_ELECTION];

/// Splits a topic's settings into the cluster's ([`CLUSTER_KEYS`]) and its logs'.
pub(crate) fn split_cluster_keys(
    configs: &[(String, String)],
) -> (BTreeMap<String, String>, Vec<(String, String)>) {
    let (cluster, log): (Vec<_>, Vec<_>) =
        configs.iter().cloned().partition(|(k, _)| CLUSTER_KEYS.contains(&k.as_str()));
    (cluster.into_iter().collect(), log)
}

/// A topic's own settings, as stored beside its partitions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicOverrides {
    pub partitions: u32,
    /// Unset: the broker's `visible_after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visible_after: Option<VisibleAfter>,
    /// Unset: the broker's `message_timestamp_type`.
    #[serde(default, rename = "message_timestamp_type", skip_serializing_if = "Option::is_none")]
    pub timestamp_type: Option<TimestampType>,
    /// Unset: the broker's `remote_storage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_storage: Option<bool>,
    /// Unset: the broker's `cleanup_policy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup_policy: Option<CleanupPolicy>,
    /// The numeric keys of [`TOPIC_KEYS`].
    #[serde(default)]
    pub values: BTreeMap<String, u64>,
}

impl TopicOverrides {
    /// Parses `CREATE_TOPIC` configs. `partitions` may come as the request field (0 or less:
    /// the broker default) or as a `partitions` key; if both are given they must agree.
    pub fn parse(
        partitions: i32,
        configs: &[(String, String)],
        default_partitions: u32,
    ) -> Result<TopicOverrides, ConfigError> {
        let mut values = BTreeMap::new();
        let mut partitions_key = None;
        let (mut visible_after, mut timestamp_type, mut remote_storage) = (None, None, None);
        let mut cleanup_policy = None;
        for (key, value) in configs {
            if key == "visible_after" {
                visible_after = Some(value.parse()?);
                continue;
            }
            if key == TIMESTAMP_TYPE {
                timestamp_type = Some(value.parse()?);
                continue;
            }
            if key == CLEANUP_POLICY {
                cleanup_policy = Some(value.parse()?);
                continue;
            }
            if key == REMOTE_STORAGE {
                remote_storage = Some(match value.trim() {
                    "true" => true,
                    "false" => false,
                    other => return Err(ConfigError::NotABool(other.to_owned())),
                });
                continue;
            }
            let number: u64 = value
                .trim()
                .parse()
                .map_err(|_| ConfigError::NotANumber { key: key.clone(), value: value.clone() })?;
            if key == "partitions" {
                partitions_key = Some(number);
            } else if TOPIC_KEYS.contains(&key.as_str()) {
                values.insert(key.clone(), number);
            } else {
                return Err(ConfigError::UnknownTopicKey(key.clone()));
            }
        }
        let partitions = match (partitions, partitions_key) {
            (p, Some(k)) if p > 0 && p as u64 != k => {
                return Err(ConfigError::Invalid {
                    key: "partitions",
                    reason: format!("request says {p}, config says {k}"),
                });
            }
            (_, Some(k)) => k,
            (p, None) if p > 0 => p as u64,
            (_, None) => default_partitions.into(),
        };
        if partitions == 0 || partitions > PARTITIONS_MAX.into() {
            return Err(ConfigError::Invalid {
                key: "partitions",
                reason: "must be between 1 and 10000".into(),
            });
        }
        let overrides = TopicOverrides {
            partitions: partitions as u32,
            visible_after,
            timestamp_type,
            remote_storage,
            cleanup_policy,
            values,
        };
        BrokerConfig::default().log().with_overrides(&overrides).validate()?;
        Ok(overrides)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_design() {
        let c = BrokerConfig::default();
        assert_eq!(c.port, 6667);
        assert_eq!(c.segment_bytes, 1 << 30);
        assert_eq!(c.retention_ms, 7 * DAY_MS);
        assert_eq!((c.max_request_bytes, c.max_message_bytes), (100 << 20, 1 << 20));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn file_keys_are_flag_names_and_unknown_keys_fail() {
        let c: BrokerConfig = toml::from_str("port = 7000\nflush_ms = 5\n").unwrap();
        assert_eq!((c.port, c.flush_ms), (7000, 5));
        assert!(toml::from_str::<BrokerConfig>("prot = 7000").is_err());
        assert!(toml::from_str::<BrokerConfig>("port = \"x\"").is_err());
    }

    #[test]
    fn zero_limits_are_rejected() {
        let c = BrokerConfig { flush_messages: 0, ..BrokerConfig::default() };
        assert!(matches!(c.validate(), Err(ConfigError::Invalid { key: "flush_messages", .. })));
    }

    #[test]
    fn topic_overrides_parse_and_check() {
        let kv = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        let o = TopicOverrides::parse(0, &[kv("retention_ms", "60000")], 4).unwrap();
        assert_eq!(o.partitions, 4);
        assert_eq!(BrokerConfig::default().log().with_overrides(&o).retention_ms, 60000);
        assert_eq!(TopicOverrides::parse(0, &[kv("partitions", "3")], 1).unwrap().partitions, 3);
        assert!(TopicOverrides::parse(2, &[kv("partitions", "3")], 1).is_err());
        assert!(TopicOverrides::parse(1, &[kv("colour", "3")], 1).is_err());
        assert!(TopicOverrides::parse(1, &[kv("flush_ms", "soon")], 1).is_err());
        assert!(TopicOverrides::parse(1, &[kv("flush_ms", "0")], 1).is_err());
        assert!(TopicOverrides::parse(20_000, &[], 1).is_err());
    }

    #[test]
    fn cleanup_policies_parse_as_kafka_writes_them_and_compaction_is_not_tiered() {
        let kv = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        let parse = |text: &str| text.parse::<CleanupPolicy>().ok();
        assert_eq!(parse("delete"), Some(CleanupPolicy::DELETE));
        let both = CleanupPolicy { delete: true, compact: true };
        assert_eq!((parse("compact,delete"), parse("delete, compact")), (Some(both), Some(both)));
        assert_eq!(parse("compact").map(|p| p.to_string()), Some("compact".into()));
        for bad in ["", "compact,compact", "shred", "compact;delete"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        let compacted = TopicOverrides::parse(
            1,
            &[kv("cleanup_policy", "compact"), kv("delete_retention_ms", "5000")],
            1,
        )
        .unwrap();
        let log = BrokerConfig::default().log().with_overrides(&compacted);
        assert!(log.cleanup_policy.compact && !log.cleanup_policy.delete);
        assert_eq!(log.delete_retention_ms, 5000);
        let tiered = [kv("cleanup_policy", "compact"), kv("remote_storage", "true")];
        assert!(matches!(
            TopicOverrides::parse(1, &tiered, 1),
            Err(ConfigError::Invalid { key: "cleanup_policy", .. })
        ));
        assert_eq!(topic_key("cleanup.policy"), "cleanup_policy");
        assert_eq!(topic_key("delete.retention.ms"), "delete_retention_ms");
    }

    #[test]
    fn tiering_needs_a_store_and_keeps_its_local_retention_within_the_whole() {
        let kv = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        let alone = BrokerConfig { remote_storage: true, ..BrokerConfig::default() };
        assert!(matches!(
            alone.validate(),
            Err(ConfigError::Invalid { key: "remote_storage", .. })
        ));
        let bad = BrokerConfig { remote_store: Some("ftp://x".into()), ..BrokerConfig::default() };
        assert!(matches!(bad.validate(), Err(ConfigError::Invalid { key: "remote_store", .. })));
        let broker = BrokerConfig {
            remote_store: Some("s3://bucket/live".into()),
            retention_ms: 1000,
            ..BrokerConfig::default()
        };
        assert!(broker.validate().is_ok());
        let o = TopicOverrides::parse(
            1,
            &[kv("remote_storage", "true"), kv("local_retention_ms", "60000")],
            1,
        )
        .unwrap();
        let log = broker.log().with_overrides(&o);
        assert!(log.remote_storage);
        assert_eq!(log.local_retention_ms(), 1000, "never longer than the whole log's");
        assert_eq!(log.local_retention_bytes(), None);
        let o = TopicOverrides::parse(1, &[kv("local_retention_bytes", "10")], 1).unwrap();
        let log = broker.log().with_overrides(&o);
        assert_eq!(log.local_retention_bytes(), None, "not tiered: the log's own retention");
        assert!(matches!(
            TopicOverrides::parse(1, &[kv("remote_storage", "yes")], 1),
            Err(ConfigError::NotABool(_))
        ));
        assert_eq!(topic_key("remote.storage.enable"), "remote_storage");
    }

    #[test]
    fn visible_after_is_a_broker_default_and_a_topic_override() {
        let kv = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        let broker: BrokerConfig = toml::from_str("visible_after = \"write\"").unwrap();
        assert_eq!(broker.log().visible_after, VisibleAfter::Write);
        assert_eq!(BrokerConfig::default().visible_after, VisibleAfter::Flush);
        assert!(toml::from_str::<BrokerConfig>("visible_after = \"soon\"").is_err());
        let o = TopicOverrides::parse(1, &[kv("visible_after", "write")], 1).unwrap();
        assert_eq!(o.visible_after, Some(VisibleAfter::Write));
        assert_eq!(
            BrokerConfig::default().log().with_overrides(&o).visible_after,
            VisibleAfter::Write
        );
        let o = TopicOverrides::parse(1, &[kv("visible_after", "flush")], 1).unwrap();
        assert_eq!(broker.log().with_overrides(&o).visible_after, VisibleAfter::Flush);
        // Unset keeps the broker's.
        let o = TopicOverrides::parse(1, &[kv("flush_ms", "5")], 1).unwrap();
        assert_eq!(broker.log().with_overrides(&o).visible_after, VisibleAfter::Write);
        assert!(matches!(
            TopicOverrides::parse(1, &[kv("visible_after", "sometimes")], 1),
            Err(ConfigError::NotAVisibility(_))
        ));
        // Stored beside the topic, and read back; files written before the key still read.
        let o = TopicOverrides::parse(2, &[kv("visible_after", "write"), kv("flush_ms", "5")], 1)
            .unwrap();
        let text = toml::to_string(&o).unwrap();
        assert_eq!(toml::from_str::<TopicOverrides>(&text).unwrap(), o);
        let old: TopicOverrides =
            toml::from_str("partitions = 2\n[values]\nflush_ms = 5\n").unwrap();
        assert_eq!(old.visible_after, None);
    }
}
