//! The loader's settings. Every field has a default; the binary fills them from `--config FILE`
//! (TOML, keys as the flag names with `_` for `-`) and flags.

use std::path::PathBuf;
use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// The smallest `row_group_bytes`: below it a row group is a handful of pages.
pub const ROW_GROUP_BYTES_MIN: usize = 64 << 10;
/// Iceberg's `write.target-file-size-bytes` default: 128 MiB.
pub const TARGET_FILE_BYTES_DEFAULT: u64 = 128 << 20;
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Where to write: `file:///path`, `s3://bucket/prefix` or `memory://` (binary only).
    pub store: Option<String>,
    /// `parquet` (Hive layout with commit records) or `iceberg` (a table per topic).
    pub format: Format,
    /// The Iceberg catalog, `sqlite:///PATH`; default `catalog.db` in a `file://` warehouse.
    pub catalog: Option<String>,
    /// The Iceberg namespace the topics' tables are in.
    pub namespace: String,
    /// The analytics cluster's ZooKeeper, `host:port[,…][/chroot]` (binary only).
    pub zookeeper: Option<String>,
    /// Its `zookeeper_session_timeout_ms` and `zookeeper_auth_file` (binary only).
    #[serde(flatten)]
    pub zookeeper_session: cluster::ZooKeeperArgs,
    /// The schema registry's URL (binary only).
    pub registry: Option<String>,
    /// `serve`: time between rounds, with a unit (`30s`, `5m`).
    #[serde(with = "service::duration::serde_text")]
    pub interval: Duration,
    /// `serve`: where `/metrics` listens, `HOST:PORT` (binary only).
    pub metrics: Option<String>,
    /// Regex (whole name) of the topics to load; every topic when unset. Topics starting with
    /// `_` (such as `_audit`) are loaded only when the pattern names them literally.
    pub topics: Option<String>,
    /// Consumer group whose owner nodes share partitions between loaders.
    pub group: String,
    /// This loader's name in owner nodes, commit records and audit counts; the hostname if unset.
    pub host_name: Option<String>,
    /// A partition's run commits after at most this many messages and goes on.
    pub max_messages_per_commit: u64,
    /// Rows per Parquet row group at most.
    pub row_group_rows: usize,
    /// A row group ends once its encoded pages take this many bytes in memory, whatever its
    /// rows: what bounds a file's memory while a backlog is loaded (see the README's memory
    /// bound).
    pub row_group_bytes: usize,
    /// Rows per Arrow batch handed to the Parquet writer.
    pub batch_rows: usize,
    /// Partitions loaded at once.
    pub partitions_in_parallel: usize,
    /// Bytes asked for per fetch.
    pub fetch_bytes: u32,
    /// zstd level of the Parquet pages.
    pub zstd_level: i32,
    /// Write messages that cannot be decoded here (and count them) instead of stopping.
    pub bad_records: Option<PathBuf>,
    /// Audit window.
    pub audit_window_ms: i64,
    /// Publish `loader` counts to `_audit` after each commit round.
    pub audit: bool,
    /// Staged files not named by a commit are deleted once older than this.
    pub staging_grace_ms: u64,
    /// Iceberg: snapshots older than this are expired by maintenance.
    #[serde(with = "service::duration::serde_text")]
    pub snapshot_max_age: Duration,
    /// Iceberg: `serve` maintains its tables this often.
    #[serde(with = "service::duration::serde_text")]
    pub maintenance_interval: Duration,
    /// Iceberg: a data file is rolled at this size, and maintenance compacts the files of a
    /// closed hour that are smaller.
    pub target_file_bytes: u64,
    /// Iceberg: maintenance compacts an hour's files once the hour ended this long ago (later
    /// events make a new small file, compacted at the next pass).
    #[serde(with = "service::duration::serde_text")]
    pub compaction_delay: Duration,
    /// `tls_ca`: TLS to the brokers and to an `https://` registry, trusting this CA (unset:
    /// plaintext). `tls_cert` and `tls_key`: the loader's principal to the brokers (mutual
    /// TLS), and the HTTPS certificate of `/metrics`, which with `tls_client_ca` requires
    /// client certificates signed by that CA.
    #[serde(flatten)]
    pub tls: service::tls::TlsArgs,
    /// Any other key: refused.
    #[serde(flatten)]
    pub unknown: service::config::Unknown,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            store: None,
            format: Format::Parquet,
            catalog: None,
            namespace: "default".into(),
            zookeeper: None,
            zookeeper_session: cluster::ZooKeeperArgs::default(),
            registry: None,
            interval: Duration::from_secs(60),
            metrics: None,
            topics: None,
            group: "hdfs-loader".into(),
            host_name: None,
            max_messages_per_commit: 5_000_000,
            row_group_rows: 1 << 20,
            row_group_bytes: 32 << 20,
            batch_rows: 8192,
            partitions_in_parallel: 4,
            fetch_bytes: 1 << 20,
            zstd_level: 3,
            bad_records: None,
            audit_window_ms: events::audit::WINDOW_MS_DEFAULT,
            audit: true,
            staging_grace_ms: 3_600_000,
            snapshot_max_age: Duration::from_secs(7 * 24 * 3600),
            maintenance_interval: Duration::from_secs(3600),
            target_file_bytes: TARGET_FILE_BYTES_DEFAULT,
            compaction_delay: Duration::from_secs(600),
            tls: service::tls::TlsArgs::default(),
            unknown: service::config::Unknown,
        }
    }
}

/// What the loader writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Parquet in Hive partitions, with the loader's commit records beside it.
    Parquet,
    /// An Iceberg table per topic, in a catalog.
    Iceberg,
}

impl Format {
    /// Its name in flags and config files.
    pub fn name(self) -> &'static str {
        match self {
            Format::Parquet => "parquet",
            Format::Iceberg => "iceberg",
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("topics: {0}")]
    BadTopics(#[from] regex::Error),
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: &'static str },
    #[error(transparent)]
    Tls(#[from] service::tls::TlsError),
    #[error(transparent)]
    ZooKeeper(#[from] cluster::SessionTimeoutError),
}

impl Config {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, reason| Err(ConfigError::Invalid { field, reason });
        self.topic_filter()?;
        if self.group.is_empty() || self.group.contains('/') {
            return invalid("group", "must be a non-empty name without '/'");
        }
        if self.host_name.as_deref().is_some_and(|h| h.is_empty() || h.contains('/')) {
            return invalid("host_name", "must be a non-empty name without '/'");
        }
        if self.max_messages_per_commit == 0 {
            return invalid("max_messages_per_commit", "must be at least 1");
        }
        if self.row_group_bytes < ROW_GROUP_BYTES_MIN {
            return invalid("row_group_bytes", "must be at least 65536");
        }
        if self.row_group_rows == 0 || self.batch_rows == 0 {
            return invalid("row_group_rows", "row_group_rows and batch_rows must be at least 1");
        }
        if !(1..=256).contains(&self.partitions_in_parallel) {
            return invalid("partitions_in_parallel", "must be between 1 and 256");
        }
        if !(64..=1 << 30).contains(&self.fetch_bytes) {
            return invalid("fetch_bytes", "must be between 64 and 2^30");
        }
        if !(1..=22).contains(&self.zstd_level) {
            return invalid("zstd_level", "must be between 1 and 22");
        }
        if self.target_file_bytes < 4096 {
            return invalid("target_file_bytes", "must be at least 4096");
        }
        if self.audit_window_ms <= 0 {
            return invalid("audit_window_ms", "must be positive");
        }
        if self.namespace.is_empty() || self.namespace.contains(['.', '/']) {
            return invalid("namespace", "must be a non-empty name without '.' or '/'");
        }
        if self.catalog.as_deref().is_some_and(|c| !c.starts_with("sqlite:///")) {
            return invalid("catalog", "must be sqlite:///PATH (a SQLite file)");
        }
        self.zookeeper_session.validate()?;
        Ok(())
    }

    /// The Iceberg catalog: the setting, or `catalog.db` in a local warehouse.
    pub fn catalog_uri(&self) -> Result<String, ConfigError> {
        if let Some(catalog) = &self.catalog {
            return Ok(catalog.clone());
        }
        match self.store.as_deref().and_then(|s| s.strip_prefix("file://")) {
            Some(dir) => Ok(format!("sqlite://{}/catalog.db", dir.trim_end_matches('/'))),
            None => Err(ConfigError::Invalid {
                field: "catalog",
                reason: "an Iceberg warehouse outside a local directory needs catalog = \"sqlite:///PATH\"",
            }),
        }
    }

    /// The compiled topic selection.
    pub fn topic_filter(&self) -> Result<TopicFilter, ConfigError> {
        let pattern = match &self.topics {
            Some(pattern) => Some((Regex::new(&format!("^(?:{pattern})$"))?, pattern.clone())),
            None => None,
        };
        Ok(TopicFilter { pattern })
    }

    /// `host_name`, or this machine's hostname.
    pub fn host(&self) -> String {
        self.host_name.clone().unwrap_or_else(service::host::name)
    }
}

/// Which topics a run loads.
#[derive(Debug, Clone)]
pub struct TopicFilter {
    pattern: Option<(Regex, String)>,
}

impl TopicFilter {
    pub fn selects(&self, topic: &str) -> bool {
        match &self.pattern {
            None => !topic.starts_with('_'),
            Some((regex, text)) => {
                regex.is_match(topic) && (!topic.starts_with('_') || text.contains(topic))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn underscore_topics_are_loaded_only_when_named() {
        let all = Config::default().topic_filter().unwrap();
        assert!(all.selects("page-view") && !all.selects("_audit"));
        let pattern = Config { topics: Some(".*".into()), ..Config::default() };
        assert!(!pattern.topic_filter().unwrap().selects("_audit"));
        let named = Config { topics: Some("page-view|_audit".into()), ..Config::default() };
        let named = named.topic_filter().unwrap();
        assert!(named.selects("_audit") && named.selects("page-view") && !named.selects("click"));
        let partial = Config { topics: Some("page".into()), ..Config::default() };
        assert!(!partial.topic_filter().unwrap().selects("page-view"), "matches whole names");
    }

    #[test]
    fn validate_names_the_bad_field() {
        let bad = Config { max_messages_per_commit: 0, ..Config::default() };
        assert!(bad.validate().unwrap_err().to_string().starts_with("max_messages_per_commit"));
        let bad = Config { topics: Some("(".into()), ..Config::default() };
        assert!(matches!(bad.validate(), Err(ConfigError::BadTopics(_))));
        Config::default().validate().unwrap();
    }
}
