//! What a mirror is configured with. Every field has a default; [`Config::validate`] checks
//! them together and compiles the topic filter.

use regex::Regex;

use serde::{Deserialize, Serialize};
use thiserror::Error;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("group must be a non-empty name without '/', not {0:?}")]
    Group(String),
    #[error("{flag} is not a valid regular expression: {reason}")]
    Regex { flag: &'static str, reason: String },
    #[error("{field} must be between {min} and {max}, not {value}")]
    OutOfRange { field: &'static str, value: i64, min: i64, max: i64 },
    #[error("source {0:?}: expected NAME=CONNECT, NAME of [A-Za-z0-9._-] and CONNECT not empty")]
    Source(String),
    #[error("source {0:?} is given twice")]
    SourceTwice(String),
    #[error("at least one source NAME=CONNECT is required")]
    NoSource,
    #[error("{0} is required")]
    Missing(&'static str),
    #[error(transparent)]
    Tls(#[from] service::tls::TlsError),
    #[error(transparent)]
    ZooKeeper(#[from] cluster::SessionTimeoutError),
}

/// Everything a mirror is configured with; the keys are the binary's flag names. The
/// connection settings (`source`, `target`, `metrics`) are for the binary, which
/// connects and binds; [`crate::Mirror::start`] is handed those already built.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Config {
    /// Live clusters to copy from, each `NAME=host:port[,…]/chroot` (binary only).
    pub source: Vec<String>,
    /// The analytics cluster's ZooKeeper, `host:port[,…]/chroot` (binary only).
    pub target: Option<String>,
    /// Where `/metrics` listens, `HOST:PORT` (binary only).
    pub metrics: Option<String>,
    /// `zookeeper_session_timeout_ms` and `zookeeper_auth_file` of every cluster connection
    /// (binary only).
    #[serde(flatten)]
    pub zookeeper_session: cluster::ZooKeeperArgs,
    /// Consumer group on every source cluster.
    pub group: String,
    /// Copy only topics whose whole name matches this regular expression (all by default).
    pub include: Option<String>,
    /// Skip topics whose whole name matches this regular expression.
    pub exclude: Option<String>,
    /// Partitions, across the target cluster, of a topic the mirror creates there.
    pub partitions: u32,
    /// Source offsets acknowledged by the target are committed this often.
    pub commit_ms: u64,
    /// Runs (up to 256 KiB of consecutive messages of one partition, sent as one record)
    /// taken from one source stream and not yet acknowledged by the target, at most.
    pub inflight_messages: usize,
    /// Bytes of messages read from the sources and not yet acknowledged by the target, at
    /// most, over every stream: the mirror's memory bound for what it copies (and the
    /// producer's buffer).
    pub buffer_bytes: usize,
    /// Lag in `/metrics` is refreshed this often.
    pub metrics_refresh_ms: u64,
    /// On shutdown, wait this long for the target to acknowledge what is in flight.
    pub drain_timeout_ms: u64,
    /// `tls_ca`: TLS to every broker (source and target) and to an `https://` registry,
    /// trusting this CA. `tls_cert` and `tls_key`: the mirror's principal to the brokers
    /// (mutual TLS), and the HTTPS certificate of `/metrics`, which with `tls_client_ca`
    /// requires client certificates signed by that CA.
    #[serde(flatten)]
    pub tls: service::tls::TlsArgs,
    /// Any other key: refused.
    #[serde(flatten)]
    pub unknown: service::config::Unknown,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            source: Vec::new(),
            target: None,
            metrics: None,
            zookeeper_session: cluster::ZooKeeperArgs::default(),
            group: "mirror".into(),
            include: None,
            exclude: None,
            partitions: 8,
            commit_ms: 1_000,
            inflight_messages: 20_000,
            buffer_bytes: 64 << 20,
            metrics_refresh_ms: 5_000,
            drain_timeout_ms: 10_000,
            tls: service::tls::TlsArgs::default(),
            unknown: service::config::Unknown,
        }
    }
}

impl Config {
    /// Checks every field and compiles the topic filter.
    pub fn validate(&self) -> Result<TopicFilter, ConfigError> {
        if self.group.is_empty() || self.group.contains('/') {
            return Err(ConfigError::Group(self.group.clone()));
        }
        let range = |field, value: i64, min, max| {
            if (min..=max).contains(&value) {
                Ok(())
            } else {
                Err(ConfigError::OutOfRange { field, value, min, max })
            }
        };
        let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        range("partitions", i64::from(self.partitions), 1, 10_000)?;
        range("commit_ms", as_i64(self.commit_ms), 1, 3_600_000)?;
        range("inflight_messages", as_i64(self.inflight_messages as u64), 1, 1_000_000)?;
        range("buffer_bytes", as_i64(self.buffer_bytes as u64), 2 << 20, u32::MAX.into())?;
        range("metrics_refresh_ms", as_i64(self.metrics_refresh_ms), 10, 3_600_000)?;
        range("drain_timeout_ms", as_i64(self.drain_timeout_ms), 0, 3_600_000)?;
        self.zookeeper_session.validate()?;
        Ok(TopicFilter {
            include: whole_name("include", self.include.as_deref())?,
            exclude: whole_name("exclude", self.exclude.as_deref())?,
        })
    }

    /// The binary's settings: every source as `(name, connect)` and the target, all required.
    pub fn connections(&self) -> Result<Connections, ConfigError> {
        if self.source.is_empty() {
            return Err(ConfigError::NoSource);
        }
        let mut sources: Vec<(String, String)> = Vec::new();
        for source in &self.source {
            let (name, connect) =
                source.split_once('=').ok_or_else(|| ConfigError::Source(source.clone()))?;
            if !crate::valid_source_name(name) || connect.is_empty() {
                return Err(ConfigError::Source(source.clone()));
            }
            if sources.iter().any(|(n, _)| n == name) {
                return Err(ConfigError::SourceTwice(name.to_owned()));
            }
            sources.push((name.to_owned(), connect.to_owned()));
        }
        let target = self.target.clone().ok_or(ConfigError::Missing("target"))?;
        Ok(Connections { sources, target })
    }
}

/// What the binary connects to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connections {
    /// `(name, ZooKeeper connect string)` of every live cluster.
    pub sources: Vec<(String, String)>,
    /// The analytics cluster's ZooKeeper.
    pub target: String,
}

fn whole_name(flag: &'static str, pattern: Option<&str>) -> Result<Option<Regex>, ConfigError> {
    let Some(pattern) = pattern else { return Ok(None) };
    // The parser's message spans lines (pattern, caret, reason): keep it to one.
    let invalid = |e: regex::Error| ConfigError::Regex {
        flag,
        reason: e.to_string().split_whitespace().collect::<Vec<_>>().join(" "),
    };
    Regex::new(pattern).map_err(invalid)?;
    Regex::new(&format!("^(?:{pattern})$")).map(Some).map_err(invalid)
}

/// Which topics are copied.
#[derive(Debug, Clone)]
pub struct TopicFilter {
    include: Option<Regex>,
    exclude: Option<Regex>,
}

impl TopicFilter {
    pub fn copies(&self, topic: &str) -> bool {
        self.include.as_ref().is_none_or(|r| r.is_match(topic))
            && !self.exclude.as_ref().is_some_and(|r| r.is_match(topic))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_matches_whole_names_include_then_exclude() {
        let config = Config {
            include: Some("page-.*|_audit".into()),
            exclude: Some(".*-test".into()),
            ..Config::default()
        };
        let filter = config.validate().unwrap();
        assert!(filter.copies("page-view"));
        assert!(filter.copies("_audit"));
        assert!(!filter.copies("page-view-test"));
        assert!(!filter.copies("my-page-view"), "include matches the whole name");
        assert!(Config::default().validate().unwrap().copies("anything"));
    }

    #[test]
    fn bad_settings_are_typed_errors() {
        let bad = |config: Config| config.validate().unwrap_err();
        assert!(matches!(
            bad(Config { group: "a/b".into(), ..Config::default() }),
            ConfigError::Group(_)
        ));
        assert!(matches!(
            bad(Config { include: Some("(".into()), ..Config::default() }),
            ConfigError::Regex { flag: "include", .. }
        ));
        assert!(matches!(
            bad(Config { partitions: 0, ..Config::default() }),
            ConfigError::OutOfRange { field: "partitions", .. }
        ));
        let parsed: Config = toml::from_str("group = \"g\"\npartitions = 2").unwrap();
        assert_eq!(parsed, Config { group: "g".into(), partitions: 2, ..Config::default() });
    }
}
