//! The topology file (`deploy/local.toml`): which processes run, on which ports, with which
//! settings. Every key is documented in `deploy/local.toml`; this module parses it, fills the
//! defaults and checks it before anything starts, naming the offending key in its error.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use std::time::Duration;

use serde::Deserialize;

/// Where every process listens: the deployment is loopback-only.
pub const HOST: &str = "127.0.0.1";

/// A bad topology file. Each message names the key it is about.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopologyError {
    #[error("cannot read topology file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: line {line}: {message}")]
    Syntax { path: PathBuf, line: usize, message: String },
    #[error("{path}: key `{key}`: {message}")]
    Key { path: PathBuf, key: String, message: String },
}

/// The parsed and checked topology. Relative paths are already resolved against the directory
/// of the topology file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Pids, logs, generated configs and every process's data live under it.
    pub run_dir: PathBuf,
    /// How long `up` waits for one process to become ready.
    #[serde(default = "defaults::ready_timeout_ms")]
    pub ready_timeout_ms: u64,
    /// How long `down` waits after SIGTERM before SIGKILL.
    #[serde(default = "defaults::stop_timeout_ms")]
    pub stop_timeout_ms: u64,
    /// Audit window of every tier (agents, mirror, loader, audit service).
    #[serde(default = "defaults::audit_window_ms")]
    pub audit_window_ms: u64,
    #[serde(default)]
    pub binaries: Binaries,
    #[serde(default)]
    pub zookeeper: ZooKeeper,
    #[serde(default)]
    pub seaweedfs: SeaweedFs,
    #[serde(default)]
    pub schema_registry: Service,
    /// Settings every broker gets (`config`, `settings`); ports are per cluster.
    #[serde(default)]
    pub broker: Broker,
    /// Live clusters by name, each with brokers, a load balancer, an agent and a simulator.
    pub live: BTreeMap<String, LiveCluster>,
    pub analytics: Analytics,
    #[serde(default)]
    pub agent: Service,
    #[serde(default)]
    pub simulator: Simulator,
    #[serde(default)]
    pub mirror: Service,
    #[serde(default)]
    pub loader: Loader,
    #[serde(default)]
    pub audit: Service,
    #[serde(default)]
    pub prometheus: Prometheus,
    #[serde(default)]
    pub security: Security,
}

/// How the processes talk to each other.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Security {
    /// Mutual TLS between every process of ours (and Prometheus), with a CA and one
    /// certificate per process generated under `{run_dir}/pki`, an ACL file per cluster, the
    /// registry's writes for the operator only, and a bearer token for the dashboard.
    /// `false`: plaintext and unauthenticated, as a single-user sandbox.
    #[serde(default = "defaults::tls")]
    pub tls: bool,
    /// Digest credentials for every process's ZooKeeper session, made under
    /// `{run_dir}/pki/zookeeper.digest`: the nodes Tributary creates (registrations, partition
    /// state, group offsets and owners, admin requests) may be changed only with them, and
    /// read by anyone. `false`: open nodes.
    #[serde(default = "defaults::tls")]
    pub zookeeper_acls: bool,
}

impl Default for Security {
    fn default() -> Self {
        Security { tls: defaults::tls(), zookeeper_acls: defaults::tls() }
    }
}

/// The Prometheus that scrapes every process's `/metrics` and evaluates the alert rules.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prometheus {
    #[serde(default = "defaults::prometheus_port")]
    pub port: u16,
    /// How often every target is scraped and the rules evaluated, with a unit.
    #[serde(default = "defaults::scrape_interval", with = "service::duration::serde_text")]
    pub scrape_interval: Duration,
    /// How long samples are kept (Prometheus' own duration syntax, e.g. `15d`).
    #[serde(default = "defaults::prometheus_retention")]
    pub retention: String,
    /// The alert rules file.
    #[serde(default = "defaults::prometheus_rules")]
    pub rules: PathBuf,
}

impl Default for Prometheus {
    fn default() -> Self {
        Prometheus {
            port: defaults::prometheus_port(),
            scrape_interval: defaults::scrape_interval(),
            retention: defaults::prometheus_retention(),
            rules: defaults::prometheus_rules(),
        }
    }
}

/// Where the programs are.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binaries {
    /// Directory of `broker`, `schema-registry`, `frontend-agent`, `mirror`, `hdfs-loader` and
    /// `audit`; unset: the directory of the running `tributary`.
    pub dir: Option<PathBuf>,
    #[serde(default = "defaults::java")]
    pub java: String,
    #[serde(default = "defaults::zookeeper_classpath")]
    pub zookeeper_classpath: String,
    #[serde(default = "defaults::weed")]
    pub weed: String,
    #[serde(default = "defaults::haproxy")]
    pub haproxy: String,
    #[serde(default = "defaults::prometheus")]
    pub prometheus: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZooKeeper {
    #[serde(default = "defaults::zookeeper_port")]
    pub port: u16,
    /// ZooKeeper's clock; sessions may last 2 to 20 ticks.
    #[serde(default = "defaults::tick_ms")]
    pub tick_ms: u64,
    /// Every cluster's chroot is `{chroot_prefix}/{cluster name}`.
    #[serde(default = "defaults::chroot_prefix")]
    pub chroot_prefix: String,
    #[serde(default = "defaults::heap_mb")]
    pub heap_mb: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeaweedFs {
    #[serde(default = "defaults::s3_port")]
    pub s3_port: u16,
    /// The other ports `weed mini` opens: master, volume, filer and admin, HTTP and gRPC each,
    /// and the S3 gRPC port, taken consecutively from this one (nine ports).
    #[serde(default = "defaults::seaweedfs_base_port")]
    pub base_port: u16,
    /// The bucket created at start; the loader writes under `s3://{bucket}/{loader.prefix}`.
    #[serde(default = "defaults::bucket")]
    pub bucket: String,
}

/// Settings of one kind of service: a base config file and single keys over it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// A config file of the service (see `deploy/configs/`) that the generated one starts from.
    pub config: Option<PathBuf>,
    /// Keys of the service's config file, over `config`'s.
    #[serde(default)]
    pub settings: toml::Table,
    /// The service's HTTP port (agents, audit) or metrics port (mirror), where it has one.
    pub port: Option<u16>,
}

/// Every broker's settings. Its `/metrics` port is its broker port plus `metrics_port_offset`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Broker {
    pub config: Option<PathBuf>,
    #[serde(default)]
    pub settings: toml::Table,
    #[serde(default = "defaults::broker_metrics_port_offset")]
    pub metrics_port_offset: u16,
    /// Put a TCP proxy (`tributary proxy`) in front of every broker, on its port plus this:
    /// the broker advertises the proxy's address, so every client, the load balancer and the
    /// other brokers reach it through the proxy, whose path `tributary chaos` cuts. Unset:
    /// no proxies.
    pub proxy_port_offset: Option<u16>,
    /// Every broker also speaks the Apache Kafka protocol, for Kafka's own clients, on its
    /// port plus this (default 3000: broker 9101's Kafka listener is 12101). Set to 0 for none.
    #[serde(default = "defaults::broker_kafka_port_offset")]
    pub kafka_port_offset: u16,
}

impl Broker {
    /// The broker's config and settings, as any service has them.
    pub fn service(&self) -> Service {
        Service { config: self.config.clone(), settings: self.settings.clone(), port: None }
    }
}

impl Default for Broker {
    fn default() -> Broker {
        Broker {
            config: None,
            settings: toml::Table::new(),
            metrics_port_offset: defaults::broker_metrics_port_offset(),
            proxy_port_offset: None,
            kafka_port_offset: defaults::broker_kafka_port_offset(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveCluster {
    /// One broker per port, ids 0, 1, ….
    pub broker_ports: Vec<u16>,
    /// The HAProxy in front of this cluster's brokers.
    pub lb_port: u16,
    /// This cluster's frontend agent's HTTP port.
    pub agent_port: u16,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Analytics {
    #[serde(default = "defaults::analytics_name")]
    pub name: String,
    pub broker_ports: Vec<u16>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Simulator {
    /// Events per second each simulator sends to its live cluster's agent; 0 runs none.
    #[serde(default = "defaults::simulator_rate")]
    pub rate: u32,
    #[serde(default = "defaults::simulator_topics")]
    pub topics: Vec<String>,
    /// How long a simulator runs, with a unit, e.g. `"1h"`.
    #[serde(default = "defaults::simulator_duration", with = "service::duration::serde_text")]
    pub duration: Duration,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Loader {
    /// Key prefix inside the bucket.
    #[serde(default = "defaults::loader_prefix")]
    pub prefix: String,
    /// Pause between two load runs, with a unit, e.g. `"1m"`.
    #[serde(default = "defaults::loader_interval", with = "service::duration::serde_text")]
    pub interval: Duration,
    /// Its `/metrics` port.
    #[serde(default = "defaults::loader_metrics_port")]
    pub metrics_port: u16,
    /// `iceberg` (a table per topic, its SQL catalog in the loader's data directory) or
    /// `parquet` (the Hive layout).
    #[serde(default = "defaults::loader_format")]
    pub format: hdfs_loader::Format,
    pub config: Option<PathBuf>,
    #[serde(default)]
    pub settings: toml::Table,
}

mod defaults {
    use std::time::Duration;

    pub fn tls() -> bool {
        true
    }
    pub fn ready_timeout_ms() -> u64 {
        30_000
    }
    pub fn stop_timeout_ms() -> u64 {
        15_000
    }
    pub fn audit_window_ms() -> u64 {
        60_000
    }
    pub fn java() -> String {
        "java".into()
    }
    pub fn zookeeper_classpath() -> String {
        "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar".into()
    }
    pub fn weed() -> String {
        "weed".into()
    }
    pub fn haproxy() -> String {
        "haproxy".into()
    }
    pub fn prometheus() -> String {
        "prometheus".into()
    }
    pub fn prometheus_port() -> u16 {
        9090
    }
    pub fn scrape_interval() -> Duration {
        Duration::from_secs(5)
    }
    pub fn prometheus_retention() -> String {
        "15d".into()
    }
    pub fn prometheus_rules() -> std::path::PathBuf {
        "prometheus/alerts.yml".into()
    }
    pub fn zookeeper_port() -> u16 {
        2181
    }
    pub fn tick_ms() -> u64 {
        2000
    }
    pub fn chroot_prefix() -> String {
        "/tributary".into()
    }
    pub fn heap_mb() -> u32 {
        256
    }
    pub fn s3_port() -> u16 {
        8333
    }
    pub fn seaweedfs_base_port() -> u16 {
        18330
    }
    pub fn bucket() -> String {
        "tributary".into()
    }
    pub fn analytics_name() -> String {
        "analytics".into()
    }
    pub fn simulator_rate() -> u32 {
        100
    }
    pub fn simulator_topics() -> Vec<String> {
        vec!["page-view".into(), "click".into(), "search".into()]
    }
    pub fn simulator_duration() -> Duration {
        Duration::from_secs(24 * 3600)
    }
    pub fn loader_prefix() -> String {
        "warehouse".into()
    }
    pub fn loader_format() -> hdfs_loader::Format {
        hdfs_loader::Format::Iceberg
    }
    pub fn loader_interval() -> Duration {
        Duration::from_secs(60)
    }
    pub fn loader_metrics_port() -> u16 {
        8502
    }
    pub fn broker_metrics_port_offset() -> u16 {
        1000
    }
    pub fn broker_kafka_port_offset() -> u16 {
        3000
    }
}

impl Default for Binaries {
    fn default() -> Self {
        Binaries {
            dir: None,
            java: defaults::java(),
            zookeeper_classpath: defaults::zookeeper_classpath(),
            weed: defaults::weed(),
            haproxy: defaults::haproxy(),
            prometheus: defaults::prometheus(),
        }
    }
}

impl Default for ZooKeeper {
    fn default() -> Self {
        ZooKeeper {
            port: defaults::zookeeper_port(),
            tick_ms: defaults::tick_ms(),
            chroot_prefix: defaults::chroot_prefix(),
            heap_mb: defaults::heap_mb(),
        }
    }
}

impl Default for SeaweedFs {
    fn default() -> Self {
        SeaweedFs {
            s3_port: defaults::s3_port(),
            base_port: defaults::seaweedfs_base_port(),
            bucket: defaults::bucket(),
        }
    }
}

impl Default for Simulator {
    fn default() -> Self {
        Simulator {
            rate: defaults::simulator_rate(),
            topics: defaults::simulator_topics(),
            duration: defaults::simulator_duration(),
        }
    }
}

impl Default for Loader {
    fn default() -> Self {
        Loader {
            prefix: defaults::loader_prefix(),
            interval: defaults::loader_interval(),
            metrics_port: defaults::loader_metrics_port(),
            format: defaults::loader_format(),
            config: None,
            settings: toml::Table::new(),
        }
    }
}

/// Ports of `weed mini` besides S3, consecutive from `base_port`.
pub const SEAWEEDFS_EXTRA_PORTS: u16 = 9;

impl Topology {
    /// Reads, parses and checks a topology file.
    pub fn load(path: &Path) -> Result<Topology, TopologyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| TopologyError::Read { path: path.to_owned(), source })?;
        Topology::from_text(path, &text)
    }

    /// Parses and checks `text`, a topology file read from `path` (its relative paths are
    /// relative to `path`'s directory).
    pub fn from_text(path: &Path, text: &str) -> Result<Topology, TopologyError> {
        let mut topology = Topology::parse(path, text)?;
        let base = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        // Absolute, because processes run with the run directory as their working directory
        // and a pid's command line is matched against these paths.
        let base = std::path::absolute(base)
            .map_err(|source| TopologyError::Read { path: path.to_owned(), source })?;
        topology.resolve_paths(&base);
        topology.validate(path)?;
        Ok(topology)
    }

    fn parse(path: &Path, text: &str) -> Result<Topology, TopologyError> {
        let table: toml::Table = toml::from_str(text).map_err(|e: toml::de::Error| {
            let line = e.span().map_or(1, |span| text[..span.start].matches('\n').count() + 1);
            TopologyError::Syntax {
                path: path.to_owned(),
                line,
                message: e.message().replace('\n', " "),
            }
        })?;
        serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
            let mut key = e.path().to_string();
            let message = e.into_inner().to_string().trim().replace('\n', " ");
            // A missing key is reported at the table that lacks it: name the key itself.
            if let Some(field) =
                message.strip_prefix("missing field `").and_then(|rest| rest.split_once('`'))
            {
                key = if key == "." { field.0.to_owned() } else { format!("{key}.{}", field.0) };
            }
            TopologyError::Key { path: path.to_owned(), key, message }
        })
    }

    fn resolve_paths(&mut self, base: &Path) {
        let resolve = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = normalize(&base.join(&*p));
            }
        };
        resolve(&mut self.run_dir);
        resolve(&mut self.prometheus.rules);
        if let Some(dir) = &mut self.binaries.dir {
            resolve(dir);
        }
        for config in [
            &mut self.schema_registry.config,
            &mut self.broker.config,
            &mut self.agent.config,
            &mut self.mirror.config,
            &mut self.audit.config,
            &mut self.loader.config,
        ]
        .into_iter()
        .flatten()
        {
            resolve(config);
        }
        if let Some(toml::Value::String(dir)) =
            self.schema_registry.settings.get_mut("register_schemas")
        {
            let mut p = PathBuf::from(&*dir);
            resolve(&mut p);
            *dir = p.display().to_string();
        }
    }

    fn validate(&self, path: &Path) -> Result<(), TopologyError> {
        let err = |key: &str, message: String| TopologyError::Key {
            path: path.to_owned(),
            key: key.to_owned(),
            message,
        };
        if self.run_dir.as_os_str().is_empty() {
            return Err(err("run_dir", "must not be empty".into()));
        }
        for (key, value) in [
            ("ready_timeout_ms", self.ready_timeout_ms),
            ("stop_timeout_ms", self.stop_timeout_ms),
            ("audit_window_ms", self.audit_window_ms),
            ("zookeeper.tick_ms", self.zookeeper.tick_ms),
        ] {
            if value == 0 {
                return Err(err(key, "must be greater than 0".into()));
            }
        }
        if !self.zookeeper.chroot_prefix.starts_with('/')
            || self.zookeeper.chroot_prefix.ends_with('/')
        {
            return Err(err(
                "zookeeper.chroot_prefix",
                format!(
                    "{:?} must start with `/` and not end with one",
                    self.zookeeper.chroot_prefix
                ),
            ));
        }
        for (key, port, instead) in [("agent.port", self.agent.port, "live.NAME.agent_port")] {
            if port.is_some() {
                return Err(err(key, format!("ports are per cluster: set {instead}")));
            }
        }
        if self.live.is_empty() {
            return Err(err("live", "name at least one live cluster".into()));
        }
        let mut names = BTreeSet::new();
        for name in self.live.keys().chain([&self.analytics.name]) {
            let key = if *name == self.analytics.name {
                "analytics.name".to_owned()
            } else {
                format!("live.{name}")
            };
            if name.is_empty()
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(err(
                    &key,
                    format!("cluster name {name:?} may hold only A-Z a-z 0-9 - _"),
                ));
            }
            if !names.insert(name) {
                return Err(err(&key, format!("cluster name {name:?} is used twice")));
            }
        }
        for (name, live) in &self.live {
            if live.broker_ports.is_empty() {
                return Err(err(
                    &format!("live.{name}.broker_ports"),
                    "name at least one port".into(),
                ));
            }
        }
        if self.analytics.broker_ports.is_empty() {
            return Err(err("analytics.broker_ports", "name at least one port".into()));
        }
        if self.simulator.topics.is_empty() {
            return Err(err("simulator.topics", "name at least one topic".into()));
        }
        if self.seaweedfs.bucket.is_empty()
            || !self
                .seaweedfs
                .bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(err(
                "seaweedfs.bucket",
                format!("{:?} is not an S3 bucket name (a-z 0-9 -)", self.seaweedfs.bucket),
            ));
        }
        // Two processes on one port would make the second fail to start halfway through `up`.
        let mut ports: BTreeMap<u16, String> = BTreeMap::new();
        for (key, port) in self.ports() {
            if port == 0 {
                return Err(err(&key, "a fixed port is needed (0 is not one)".into()));
            }
            if let Some(other) = ports.insert(port, key.clone()) {
                return Err(err(&key, format!("port {port} is also `{other}`")));
            }
        }
        for (key, config) in [
            ("schema_registry", &self.schema_registry.config),
            ("broker", &self.broker.config),
            ("agent", &self.agent.config),
            ("mirror", &self.mirror.config),
            ("audit", &self.audit.config),
            ("loader", &self.loader.config),
        ] {
            if let Some(config) = config
                && !config.is_file()
            {
                return Err(err(
                    &format!("{key}.config"),
                    format!("{} is not a file", config.display()),
                ));
            }
        }
        Ok(())
    }

    /// Every port the topology uses, with the key that sets it.
    fn ports(&self) -> Vec<(String, u16)> {
        let mut ports = vec![
            ("zookeeper.port".to_owned(), self.zookeeper.port),
            ("seaweedfs.s3_port".to_owned(), self.seaweedfs.s3_port),
            ("schema_registry.port".to_owned(), self.schema_registry_port()),
            ("mirror.port".to_owned(), self.mirror_port()),
            ("audit.port".to_owned(), self.audit_port()),
            ("loader.metrics_port".to_owned(), self.loader_port()),
        ];
        for i in 0..SEAWEEDFS_EXTRA_PORTS {
            ports.push((
                "seaweedfs.base_port".to_owned(),
                self.seaweedfs.base_port.saturating_add(i),
            ));
        }
        for (name, live) in &self.live {
            for (i, port) in live.broker_ports.iter().enumerate() {
                self.broker_ports(&mut ports, &format!("live.{name}.broker_ports[{i}]"), *port);
            }
            ports.push((format!("live.{name}.lb_port"), live.lb_port));
            ports.push((format!("live.{name}.agent_port"), live.agent_port));
        }
        for (i, port) in self.analytics.broker_ports.iter().enumerate() {
            self.broker_ports(&mut ports, &format!("analytics.broker_ports[{i}]"), *port);
        }
        ports
    }

    /// A broker's port, its metrics port and its proxy's port.
    fn broker_ports(&self, ports: &mut Vec<(String, u16)>, key: &str, port: u16) {
        ports.push((key.to_owned(), port));
        ports.push((format!("{key} + broker.metrics_port_offset"), self.broker_metrics_port(port)));
        if let Some(proxy) = self.broker_proxy_port(port) {
            ports.push((format!("{key} + broker.proxy_port_offset"), proxy));
        }
        if let Some(kafka) = self.broker_kafka_port(port) {
            ports.push((format!("{key} + broker.kafka_port_offset"), kafka));
        }
    }

    pub fn schema_registry_port(&self) -> u16 {
        self.schema_registry.port.unwrap_or(8081)
    }

    pub fn mirror_port(&self) -> u16 {
        self.mirror.port.unwrap_or(8501)
    }

    pub fn audit_port(&self) -> u16 {
        self.audit.port.unwrap_or(8080)
    }

    pub fn loader_port(&self) -> u16 {
        self.loader.metrics_port
    }

    /// The `/metrics` port of the broker listening on `port`.
    pub fn broker_metrics_port(&self, port: u16) -> u16 {
        port.saturating_add(self.broker.metrics_port_offset)
    }

    /// The port of the proxy in front of the broker listening on `port`, with
    /// `broker.proxy_port_offset`.
    pub fn broker_proxy_port(&self, port: u16) -> Option<u16> {
        Some(port.saturating_add(self.broker.proxy_port_offset?))
    }

    /// The port of the Kafka listener of the broker listening on `port`, unless
    /// `broker.kafka_port_offset` is 0.
    pub fn broker_kafka_port(&self, port: u16) -> Option<u16> {
        match self.broker.kafka_port_offset {
            0 => None,
            offset => Some(port.saturating_add(offset)),
        }
    }

    /// Where clients reach the broker listening on `port`: its proxy's port, or its own.
    pub fn broker_advertised_port(&self, port: u16) -> u16 {
        self.broker_proxy_port(port).unwrap_or(port)
    }

    /// `127.0.0.1:{port}{chroot_prefix}/{cluster}`: where a cluster's brokers register.
    pub fn zookeeper_connect(&self, cluster: &str) -> String {
        format!("{HOST}:{}{}/{cluster}", self.zookeeper.port, self.zookeeper.chroot_prefix)
    }

    /// Directory of the component binaries.
    pub fn binaries_dir(&self) -> std::io::Result<PathBuf> {
        match &self.binaries.dir {
            Some(dir) => Ok(dir.clone()),
            None => {
                let exe = std::env::current_exe()?;
                Ok(exe.parent().map(Path::to_owned).unwrap_or_default())
            }
        }
    }
}

/// `a/b/../c` → `a/c`, without touching the filesystem: the paths shown and matched against
/// command lines read as an operator would write them.
fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in path.components() {
        match (part, out.components().next_back()) {
            (Component::CurDir, _) => {}
            (Component::ParentDir, Some(Component::Normal(_))) => {
                out.pop();
            }
            // `/..` is `/`.
            (Component::ParentDir, Some(Component::RootDir)) => {}
            (other, _) => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalised_lexically() {
        assert_eq!(
            normalize(Path::new("/a/deploy/../target/./run")),
            PathBuf::from("/a/target/run")
        );
        assert_eq!(normalize(Path::new("/../a")), PathBuf::from("/a"));
        assert_eq!(normalize(Path::new("../a")), PathBuf::from("../a"));
    }
}
