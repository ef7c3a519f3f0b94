//! From a topology to the ordered list of processes: each one's program, arguments,
//! environment, generated config file, readiness sign and address. `up` starts them in this
//! order, `down` stops them in the reverse order, `status` lists them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::pki::{OPERATOR, PkiPaths};
use super::ready::Ready;
use super::topology::{HOST, SEAWEEDFS_EXTRA_PORTS, Service, Topology, TopologyError};

/// One process of the deployment.
#[derive(Debug, Clone)]
pub struct Component {
    /// Unique within the deployment; names its pid file, log and config.
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Variables of `up`'s environment the process must not inherit.
    pub env_remove: Vec<String>,
    /// The config file `up` writes before starting it.
    pub config: Option<ConfigFile>,
    /// Directories `up` creates before starting it.
    pub dirs: Vec<PathBuf>,
    pub ready: Ready,
    /// What `status` shows as its address.
    pub address: String,
    /// Text of its command line that tells this process from another one that later got the
    /// same pid.
    pub marker: String,
    /// Whether `up` builds it from the component binaries directory (checked before start).
    pub ours: bool,
    /// Its `/metrics` URL, where it has one.
    pub metrics: Option<String>,
    /// The principal whose certificate it presents (`[security] tls`): its own name.
    pub identity: Option<String>,
    /// Other files `up` writes before starting it (a cluster's ACL file, a web config).
    pub files: Vec<ConfigFile>,
}

/// A generated config file.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    pub path: PathBuf,
    pub content: ConfigContent,
}

#[derive(Debug, Clone)]
pub enum ConfigContent {
    /// Written as is (ZooKeeper's `zoo.cfg`, HAProxy's config).
    Text(String),
    /// A service's TOML: its `config` file, then its `settings`, read into the service's own
    /// typed config (so a key it does not know is the topology's error, named), then the
    /// fields the topology decides (ports, addresses, directories) set on it, and the whole
    /// config serialized. `settings` may not set those fields, nor the `forced` keys (the
    /// certificate files of `[security] tls`), which are set over everything.
    Service {
        key: String,
        base: Option<PathBuf>,
        settings: toml::Table,
        forced: toml::Table,
        typed: TypedConfig,
    },
}

/// How one kind of service's config is built: the fields the topology sets, and the service's
/// own config type that the file is read into and written from.
#[derive(Clone)]
pub struct TypedConfig {
    /// The keys [`TypedConfig::build`] sets; `settings` may not name them.
    derived: &'static [&'static str],
    build: Arc<dyn Fn(toml::Table) -> Result<String, String> + Send + Sync>,
}

impl std::fmt::Debug for TypedConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedConfig").field("derived", &self.derived).finish_non_exhaustive()
    }
}

impl TypedConfig {
    /// The config of type `T` read from the user's keys, with `set` applied: `set` assigns
    /// exactly the fields named in `derived`.
    fn new<T: Serialize + DeserializeOwned + 'static>(
        derived: &'static [&'static str],
        set: impl Fn(&mut T) + Send + Sync + 'static,
    ) -> TypedConfig {
        let build = move |user: toml::Table| {
            let mut config: T = toml::Value::Table(user).try_into().map_err(|e| one_line(&e))?;
            set(&mut config);
            toml::to_string(&config).map_err(|e| one_line(&e))
        };
        TypedConfig { derived, build: Arc::new(build) }
    }
}

fn one_line(e: &impl std::fmt::Display) -> String {
    e.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
}

impl ConfigContent {
    /// The file's text.
    pub fn render(&self, topology_path: &Path) -> Result<String, TopologyError> {
        match self {
            ConfigContent::Text(text) => Ok(text.clone()),
            ConfigContent::Service { key, base, settings, forced, typed } => {
                let error = |at: String, message: String| TopologyError::Key {
                    path: topology_path.to_owned(),
                    key: at,
                    message,
                };
                let mut table = match base {
                    Some(path) => {
                        let text = std::fs::read_to_string(path).map_err(|e| {
                            error(
                                format!("{key}.config"),
                                format!("cannot read {}: {e}", path.display()),
                            )
                        })?;
                        toml::from_str::<toml::Table>(&text).map_err(|e| {
                            error(
                                format!("{key}.config"),
                                format!("{}: {}", path.display(), e.message()),
                            )
                        })?
                    }
                    None => toml::Table::new(),
                };
                for (name, value) in settings {
                    if typed.derived.contains(&name.as_str()) || forced.contains_key(name) {
                        return Err(error(
                            format!("{key}.settings.{name}"),
                            "is set by the topology itself; remove it".into(),
                        ));
                    }
                    table.insert(name.clone(), value.clone());
                }
                table.extend(forced.clone());
                let body = (typed.build)(table)
                    .map_err(|message| error(format!("{key}.settings"), message))?;
                Ok(format!(
                    "# Generated by `tributary up`; edit the topology file instead.\n{body}"
                ))
            }
        }
    }
}

/// The deployment's processes in start order.
pub fn plan(topology: &Topology, binaries: &Path) -> Vec<Component> {
    let mut components =
        vec![zookeeper(topology), seaweedfs(topology), schema_registry(topology, binaries)];
    let clusters = topology
        .live
        .iter()
        .map(|(name, live)| (name.as_str(), &live.broker_ports))
        .chain([(topology.analytics.name.as_str(), &topology.analytics.broker_ports)]);
    for (cluster, ports) in clusters {
        for (id, port) in ports.iter().enumerate() {
            if let Some(proxy_port) = topology.broker_proxy_port(*port) {
                components.push(proxy(binaries, cluster, id, proxy_port, *port));
            }
            components.push(broker(topology, binaries, cluster, id, *port));
        }
    }
    for (name, live) in &topology.live {
        components.push(load_balancer(topology, name, live.lb_port, &live.broker_ports));
    }
    for (name, live) in &topology.live {
        components.push(agent(topology, binaries, name, live.lb_port, live.agent_port));
    }
    components.push(mirror(topology, binaries));
    components.push(loader(topology, binaries));
    components.push(audit(topology, binaries));
    let prometheus = prometheus(topology, &components);
    components.push(prometheus);
    if topology.simulator.rate > 0 {
        for (name, live) in &topology.live {
            components.push(simulator(topology, binaries, name, live.agent_port));
        }
    }
    components
}

fn config_path(topology: &Topology, name: &str, extension: &str) -> PathBuf {
    topology.run_dir.join("config").join(format!("{name}.{extension}"))
}

fn data_dir(topology: &Topology, name: &str) -> PathBuf {
    topology.run_dir.join("data").join(name)
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

fn zookeeper(topology: &Topology) -> Component {
    let zk = &topology.zookeeper;
    let data = data_dir(topology, "zookeeper");
    let config = config_path(topology, "zookeeper", "cfg");
    let text = format!(
        "# Generated by `tributary up`; edit the topology file instead.\n\
         tickTime={}\ndataDir={}\nclientPort={}\nclientPortAddress={HOST}\n\
         admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat,mntr,conf\n",
        zk.tick_ms,
        data.display(),
        zk.port
    );
    Component {
        name: "zookeeper".into(),
        program: PathBuf::from(&topology.binaries.java),
        args: vec![
            format!("-Xmx{}m", zk.heap_mb),
            "-XX:+UseSerialGC".into(),
            "-cp".into(),
            topology.binaries.zookeeper_classpath.clone(),
            "org.apache.zookeeper.server.ZooKeeperServerMain".into(),
            display(&config),
        ],
        env: Vec::new(),
        env_remove: Vec::new(),
        config: Some(ConfigFile { path: config.clone(), content: ConfigContent::Text(text) }),
        dirs: vec![data],
        ready: Ready::ZooKeeper { port: zk.port },
        address: format!("{HOST}:{}", zk.port),
        marker: display(&config),
        ours: false,
        metrics: None,
        identity: None,
        files: Vec::new(),
    }
}

fn seaweedfs(topology: &Topology) -> Component {
    let s3 = &topology.seaweedfs;
    let dir = data_dir(topology, "seaweedfs");
    let data = dir.join("data");
    let logs = dir.join("logs");
    let names = [
        "master.port",
        "master.port.grpc",
        "volume.port",
        "volume.port.grpc",
        "filer.port",
        "filer.port.grpc",
        "admin.port",
        "admin.port.grpc",
        "s3.port.grpc",
    ];
    debug_assert_eq!(names.len(), usize::from(SEAWEEDFS_EXTRA_PORTS));
    let mut args = vec![
        format!("-logdir={}", logs.display()),
        "mini".into(),
        format!("-dir={}", data.display()),
        format!("-ip={HOST}"),
        format!("-ip.bind={HOST}"),
        format!("-s3.port={}", s3.s3_port),
    ];
    for (i, name) in (0..).zip(names) {
        args.push(format!("-{name}={}", s3.base_port + i));
    }
    args.extend([
        // Off: servers nobody here uses, whose default ports might be taken.
        "-s3.port.iceberg=0".into(),
        "-s3.port.lance=0".into(),
        "-webdav=false".into(),
        "-admin.ui=false".into(),
        "-master.telemetry=false".into(),
        format!("-s3.localSocket={}", dir.join("s3.sock").display()),
        format!("-filer.localSocket={}", dir.join("filer.sock").display()),
        format!("-bucket={}", s3.bucket),
    ]);
    Component {
        name: "seaweedfs".into(),
        program: PathBuf::from(&topology.binaries.weed),
        args,
        env: Vec::new(),
        // With credentials in its environment SeaweedFS enforces signatures with them; the
        // loader gets its own.
        env_remove: ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"]
            .map(String::from)
            .to_vec(),
        config: None,
        dirs: vec![data.clone(), logs],
        ready: Ready::S3 { port: s3.s3_port, bucket: s3.bucket.clone() },
        address: format!("http://{HOST}:{}", s3.s3_port),
        marker: format!("-dir={}", data.display()),
        ours: false,
        metrics: None,
        identity: None,
        files: Vec::new(),
    }
}

/// A service of this workspace started as `binary --config {run_dir}/config/{name}.toml`.
fn service(
    topology: &Topology,
    name: &str,
    program: PathBuf,
    key: &str,
    service: &Service,
    typed: TypedConfig,
) -> Component {
    let config = config_path(topology, name, "toml");
    Component {
        name: name.to_owned(),
        program,
        args: vec!["--config".into(), display(&config)],
        env: vec![("NO_COLOR".into(), "1".into())],
        env_remove: Vec::new(),
        config: Some(ConfigFile {
            path: config.clone(),
            content: ConfigContent::Service {
                key: key.to_owned(),
                base: service.config.clone(),
                settings: service.settings.clone(),
                forced: toml::Table::new(),
                typed,
            },
        }),
        dirs: Vec::new(),
        ready: Ready::LogLine { text: "listening on".into() },
        address: String::new(),
        marker: display(&config),
        ours: true,
        metrics: None,
        identity: None,
        files: Vec::new(),
    }
}

/// `http`, or `https` with `[security] tls`.
pub fn scheme(topology: &Topology) -> &'static str {
    if topology.security.tls { "https" } else { "http" }
}

fn path_value(path: &Path) -> toml::Value {
    toml::Value::String(display(path))
}

/// With `[security] tls`, a service of ours presents its own certificate on its listener
/// and to the servers it calls, requires client certificates from the CA, and trusts only
/// that CA (`client`: it calls other services); `extra` are further keys of its config.
fn secure(topology: &Topology, component: &mut Component, client: bool, extra: toml::Table) {
    if !topology.security.tls {
        return;
    }
    let pki = PkiPaths::new(&topology.run_dir);
    let name = component.name.clone();
    let mut keys = toml::Table::new();
    keys.insert("tls_cert".into(), path_value(&pki.cert(&name)));
    keys.insert("tls_key".into(), path_value(&pki.key(&name)));
    keys.insert("tls_client_ca".into(), path_value(&pki.ca()));
    if client {
        keys.insert("tls_ca".into(), path_value(&pki.ca()));
    }
    keys.extend(extra);
    force(component, keys);
    component.identity = Some(name);
}

/// Sets `keys` over everything in a service's generated config.
fn force(component: &mut Component, keys: toml::Table) {
    if let Some(ConfigFile { content: ConfigContent::Service { forced, .. }, .. }) =
        &mut component.config
    {
        forced.extend(keys);
    }
}

/// With `[security] zookeeper_acls`, a service's ZooKeeper sessions authenticate with the
/// deployment's digest credentials (see [`PkiPaths::zookeeper_digest`]).
fn zookeeper_auth(topology: &Topology, component: &mut Component) {
    if topology.security.zookeeper_acls {
        let file = PkiPaths::new(&topology.run_dir).zookeeper_digest();
        force(
            component,
            toml::Table::from_iter([("zookeeper_auth_file".into(), path_value(&file))]),
        );
    }
}

fn schema_registry(topology: &Topology, binaries: &Path) -> Component {
    let port = topology.schema_registry_port();
    let data_dir = data_dir(topology, "schema-registry");
    // The pipeline's schemas, unless the topology names its own directory in `settings`.
    let shipped = (!topology.schema_registry.settings.contains_key("register_schemas"))
        .then(events::schemas::source_dir);
    let typed =
        TypedConfig::new(&["host", "port", "data_dir"], move |c: &mut schema_registry::Config| {
            c.host = HOST.into();
            c.port = port;
            c.data_dir = data_dir.clone();
            if let Some(dir) = &shipped {
                c.register_schemas = Some(dir.clone());
            }
        });
    let mut component = service(
        topology,
        "schema-registry",
        binaries.join("schema-registry"),
        "schema_registry",
        &topology.schema_registry,
        typed,
    );
    component.address = registry_url(topology);
    component.metrics = Some(format!("{}/metrics", registry_url(topology)));
    // Every process reads schemas; only the operator registers or deletes them (the
    // pipeline's own schemas are registered by the registry itself at start).
    let writers = toml::Value::Array(vec![toml::Value::String(OPERATOR.into())]);
    secure(
        topology,
        &mut component,
        false,
        toml::Table::from_iter([("write_principals".into(), writers)]),
    );
    component
}

/// The schema registry's URL.
pub fn registry_url(topology: &Topology) -> String {
    format!("{}://{HOST}:{}", scheme(topology), topology.schema_registry_port())
}

fn broker(topology: &Topology, binaries: &Path, cluster: &str, id: usize, port: u16) -> Component {
    let name = format!("broker-{cluster}-{id}");
    let data_dir = data_dir(topology, &name);
    let zookeeper = topology.zookeeper_connect(cluster);
    let metrics = format!("{HOST}:{}", topology.broker_metrics_port(port));
    let metrics_url = format!("{}://{metrics}/metrics", scheme(topology));
    let broker_id = i32::try_from(id).unwrap_or(i32::MAX);
    let advertised = topology.broker_proxy_port(port);
    let kafka = topology.broker_kafka_port(port);
    // The analytics cluster keeps its topics' history in SeaweedFS (tiered storage); the
    // topology decides which clusters tier.
    let tiered = (cluster == topology.analytics.name).then(|| tiered_store_url(topology, cluster));
    let remote_store = tiered.clone();
    let derived = &[
        "broker_id",
        "host",
        "port",
        "advertised_host",
        "advertised_port",
        "kafka_port",
        "kafka_host",
        "data_dir",
        "zookeeper",
        "metrics",
        "remote_store",
        "remote_storage",
    ];
    let typed = TypedConfig::new(derived, move |c: &mut broker::BrokerConfig| {
        c.remote_storage = remote_store.is_some();
        c.remote_store = remote_store.clone();
        c.broker_id = broker_id;
        c.host = HOST.into();
        c.port = port;
        c.advertised_host = None;
        c.advertised_port = advertised;
        c.kafka_port = kafka;
        c.kafka_host = None;
        c.data_dir = data_dir.clone();
        c.zookeeper = Some(zookeeper.clone());
        c.metrics = Some(metrics.clone());
    });
    let mut component = service(
        topology,
        &name,
        binaries.join("broker"),
        "broker",
        &topology.broker.service(),
        typed,
    );
    // Serving alone is not enough: the rest of the pipeline finds brokers in ZooKeeper.
    component.ready = Ready::LogLine { text: "registered broker".into() };
    // After a crash, the broker's id stays registered until its old ZooKeeper session
    // expires (`zookeeper_session_timeout_ms`); the new broker waits that out itself.
    component.address = match advertised {
        Some(proxy) => {
            format!("{HOST}:{port} (as {HOST}:{proxy}) in {}", topology.zookeeper_connect(cluster))
        }
        None => format!("{HOST}:{port} in {}", topology.zookeeper_connect(cluster)),
    };
    if let Some(kafka) = kafka {
        component.address.push_str(&format!(", Kafka clients at {HOST}:{kafka}"));
    }
    if let Some(url) = &tiered {
        component.address.push_str(&format!(", history in {url}"));
        component.env.extend(seaweedfs_env(topology));
        component.env_remove.push("AWS_SESSION_TOKEN".into());
    }
    component.metrics = Some(metrics_url);
    if topology.security.tls {
        // One ACL file per cluster, written by each of its brokers' start (the same text).
        let acl = config_path(topology, &format!("acl-{cluster}"), "toml");
        let pki = PkiPaths::new(&topology.run_dir);
        let extra = toml::Table::from_iter([
            ("tls_ca".into(), path_value(&pki.ca())),
            ("acl_file".into(), path_value(&acl)),
        ]);
        component.files.push(ConfigFile {
            path: acl,
            content: ConfigContent::Text(acl_file(topology, cluster)),
        });
        secure(topology, &mut component, true, extra);
    }
    zookeeper_auth(topology, &mut component);
    component
}

/// The TCP proxy in front of a broker (`broker.proxy_port_offset`): `tributary proxy`, which
/// `tributary chaos` cuts with SIGUSR1 and heals with SIGUSR2.
fn proxy(binaries: &Path, cluster: &str, id: usize, port: u16, broker_port: u16) -> Component {
    let listen = format!("--listen={HOST}:{port}");
    Component {
        name: format!("proxy-{cluster}-{id}"),
        program: binaries.join("tributary"),
        args: vec!["proxy".into(), listen.clone(), format!("--upstream={HOST}:{broker_port}")],
        env: vec![("NO_COLOR".into(), "1".into())],
        env_remove: Vec::new(),
        config: None,
        dirs: Vec::new(),
        ready: Ready::Tcp { port },
        address: format!("{HOST}:{port} -> {HOST}:{broker_port}"),
        marker: listen,
        ours: true,
        metrics: None,
        identity: None,
        files: Vec::new(),
    }
}

/// What each process may do on `cluster`'s brokers: exactly its job. On a live cluster its
/// agent produces (event topics and `_audit`, created on first use), the mirror and the audit
/// read; on the analytics cluster the mirror produces, the loader reads and produces its
/// counts, the audit reads (`_audit`, and every topic, which it counts as the mirror tier).
/// Every broker of the cluster replicates; the operator may do everything.
fn acl_file(topology: &Topology, cluster: &str) -> String {
    let rules: Vec<(String, &[&str], &[&str])> = if topology.live.contains_key(cluster) {
        vec![
            (format!("agent-{cluster}"), &["*"], &["produce", "create", "describe"]),
            ("mirror".into(), &["*"], &["consume", "describe"]),
            ("audit".into(), &["*"], &["consume", "describe"]),
        ]
    } else {
        vec![
            ("mirror".into(), &["*"], &["produce", "create", "describe"]),
            ("loader".into(), &["*"], &["consume", "describe"]),
            ("loader".into(), &["_audit"], &["produce", "create"]),
            ("audit".into(), &["*"], &["consume", "describe"]),
        ]
    };
    let all: &[&str] = &["produce", "consume", "create", "describe", "replicate"];
    let rules = [(format!("broker-{cluster}-*"), &["*"][..], &["replicate", "describe"][..])]
        .into_iter()
        .chain(rules)
        .chain([(OPERATOR.to_owned(), &["*"][..], all)]);
    let mut text = format!(
        "# Generated by `tributary up`; edit the topology file instead.\n\
         # Who may do what on the brokers of {cluster} (principal: the certificate's CN).\n"
    );
    let list =
        |items: &[&str]| items.iter().map(|i| format!("{i:?}")).collect::<Vec<_>>().join(", ");
    for (principal, topics, operations) in rules {
        text.push_str(&format!(
            "\n[[allow]]\nprincipals = [{principal:?}]\ntopics = [{}]\noperations = [{}]\n",
            list(topics),
            list(operations)
        ));
    }
    text
}

fn load_balancer(topology: &Topology, cluster: &str, port: u16, brokers: &[u16]) -> Component {
    let name = format!("lb-{cluster}");
    let config = config_path(topology, &name, "cfg");
    let mut text = format!(
        "# Generated by `tributary up`; edit the topology file instead.\n\
         # TCP load balancing over the brokers of live cluster {cluster}: producers send\n\
         # partition -1, so any broker will do; a broker that stops answering is taken out\n\
         # after two failed checks and put back after two good ones.\n\
         global\n    maxconn 4096\n    # Brokers going down and up, into this process's log.\n\
         \x20   log stderr format raw local0 notice\n\n\
         defaults\n    log global\n    mode tcp\n    timeout connect 2s\n    timeout client 10m\n    timeout server 10m\n\
         \x20   option redispatch\n    retries 3\n\n\
         frontend {cluster}\n    bind {HOST}:{port}\n    default_backend {cluster}-brokers\n\n\
         backend {cluster}-brokers\n    balance roundrobin\n"
    );
    // With TLS the brokers' TLS passes through untouched; the health check is a TLS
    // handshake of HAProxy's own (with its certificate, as the brokers require one), so a
    // check is not a failed handshake in the brokers' logs every second.
    let pki = PkiPaths::new(&topology.run_dir);
    let check_tls = if topology.security.tls {
        format!(
            " check-ssl verify required ca-file {} crt {}",
            pki.ca().display(),
            pki.bundle(&name).display()
        )
    } else {
        String::new()
    };
    for (id, broker) in brokers.iter().enumerate() {
        // Through the broker's proxy, where it has one: as every other client reaches it.
        let broker = topology.broker_advertised_port(*broker);
        text.push_str(&format!(
            "    server broker-{id} {HOST}:{broker} check{check_tls} inter 1s fall 2 rise 2\n"
        ));
    }
    Component {
        name: name.clone(),
        program: PathBuf::from(&topology.binaries.haproxy),
        // -db: stay in the foreground, so the pid is HAProxy's own.
        args: vec!["-db".into(), "-f".into(), display(&config)],
        env: Vec::new(),
        env_remove: Vec::new(),
        config: Some(ConfigFile { path: config.clone(), content: ConfigContent::Text(text) }),
        dirs: Vec::new(),
        ready: Ready::Tcp { port },
        address: format!("{HOST}:{port}"),
        marker: display(&config),
        ours: false,
        metrics: None,
        identity: topology.security.tls.then_some(name),
        files: Vec::new(),
    }
}

fn agent(
    topology: &Topology,
    binaries: &Path,
    cluster: &str,
    lb_port: u16,
    port: u16,
) -> Component {
    let name = format!("agent-{cluster}");
    let (registry, spool_dir, host_name) =
        (registry_url(topology), data_dir(topology, &name), name.clone());
    let window_ms = window_ms(topology);
    let typed = TypedConfig::new(
        &["registry", "brokers", "http", "spool_dir", "host_name", "audit_window_ms"],
        move |c: &mut frontend_agent::Config| {
            c.registry = registry.clone();
            // Through the load balancer, partition -1: any live broker takes any batch.
            c.brokers = vec![format!("{HOST}:{lb_port}")];
            c.http = format!("{HOST}:{port}");
            c.spool_dir = spool_dir.clone();
            // Each agent's audit counts are its own: (tier, host, topic, window) names a count.
            c.host_name = Some(host_name.clone());
            c.audit_window_ms = window_ms;
        },
    );
    let mut component =
        service(topology, &name, binaries.join("frontend-agent"), "agent", &topology.agent, typed);
    component.args.insert(0, "serve".into());
    component.address = agent_url(topology, port);
    component.metrics = Some(format!("{}/metrics", agent_url(topology, port)));
    secure(topology, &mut component, true, toml::Table::new());
    zookeeper_auth(topology, &mut component);
    component
}

/// A frontend agent's base URL.
pub fn agent_url(topology: &Topology, port: u16) -> String {
    format!("{}://{HOST}:{port}", scheme(topology))
}

fn window_ms(topology: &Topology) -> i64 {
    i64::try_from(topology.audit_window_ms).unwrap_or(i64::MAX)
}

fn audit(topology: &Topology, binaries: &Path) -> Component {
    let live: Vec<String> = topology
        .live
        .keys()
        .map(|name| format!("{name}={}", topology.zookeeper_connect(name)))
        .collect();
    let zookeeper = topology.zookeeper_connect(&topology.analytics.name);
    let (registry, http, window_ms) =
        (registry_url(topology), format!("{HOST}:{}", topology.audit_port()), window_ms(topology));
    let typed = TypedConfig::new(
        &["zookeeper", "live", "registry", "http", "audit_window_ms"],
        move |c: &mut audit::Config| {
            c.zookeeper = Some(zookeeper.clone());
            c.live = live.clone();
            c.registry = Some(registry.clone());
            c.http = http.clone();
            c.audit_window_ms = window_ms;
        },
    );
    let mut component =
        service(topology, "audit", binaries.join("audit"), "audit", &topology.audit, typed);
    component.address = dashboard_url(topology);
    component.metrics = Some(format!("{}metrics", dashboard_url(topology)));
    // A browser has no client certificate: it brings the token (see `up`'s summary).
    let token = PkiPaths::new(&topology.run_dir).token();
    secure(
        topology,
        &mut component,
        true,
        toml::Table::from_iter([("token_file".into(), path_value(&token))]),
    );
    zookeeper_auth(topology, &mut component);
    component
}

/// Prometheus' URL.
pub fn prometheus_url(topology: &Topology) -> String {
    format!("{}://{HOST}:{}/", scheme(topology), topology.prometheus.port)
}

/// Debian's Prometheus, scraping the `/metrics` of every component before it (one job per
/// kind of service, each target labelled with its process name and cluster), with the
/// topology's alert rules.
fn prometheus(topology: &Topology, components: &[Component]) -> Component {
    let config = config_path(topology, "prometheus", "yml");
    let data = data_dir(topology, "prometheus");
    let interval = service::duration::format(topology.prometheus.scrape_interval);
    let mut jobs: Vec<(&str, Vec<String>)> = Vec::new();
    for component in components {
        let Some(url) = &component.metrics else { continue };
        let Some(target) = url
            .strip_prefix(&format!("{}://", scheme(topology)))
            .and_then(|u| u.strip_suffix("/metrics"))
        else {
            continue;
        };
        let (job, cluster) = job_of(topology, &component.name);
        let mut labels = format!("process: {:?}", component.name);
        if let Some(cluster) = cluster {
            labels.push_str(&format!(", cluster: {cluster:?}"));
        }
        let entry = format!("      - targets: [{target:?}]\n        labels: {{ {labels} }}\n");
        match jobs.iter_mut().find(|(name, _)| *name == job) {
            Some((_, entries)) => entries.push(entry),
            None => jobs.push((job, vec![entry])),
        }
    }
    let mut text = format!(
        "# Generated by `tributary up`; edit the topology file instead.\n\
         global:\n  scrape_interval: {interval}\n  evaluation_interval: {interval}\n\
         rule_files:\n  - {:?}\n\
         scrape_configs:\n",
        display(&topology.prometheus.rules)
    );
    let pki = PkiPaths::new(&topology.run_dir);
    let name = "prometheus";
    // With TLS, Prometheus scrapes with a certificate of its own and serves its UI and API
    // over HTTPS (without asking for client certificates: it is read from a browser).
    let scrape_tls = if topology.security.tls {
        format!(
            "    scheme: https\n    tls_config:\n      ca_file: {:?}\n      cert_file: {:?}\n      key_file: {:?}\n",
            display(&pki.ca()),
            display(&pki.cert(name)),
            display(&pki.key(name))
        )
    } else {
        String::new()
    };
    for (job, entries) in jobs {
        text.push_str(&format!("  - job_name: {job:?}\n{scrape_tls}    static_configs:\n"));
        for entry in entries {
            text.push_str(&entry);
        }
    }
    let listen = format!("{HOST}:{}", topology.prometheus.port);
    let mut args = vec![
        format!("--config.file={}", display(&config)),
        format!("--storage.tsdb.path={}", display(&data)),
        format!("--web.listen-address={listen}"),
        format!("--storage.tsdb.retention.time={}", topology.prometheus.retention),
    ];
    let mut files = Vec::new();
    if topology.security.tls {
        let web = config_path(topology, "prometheus-web", "yml");
        let text = format!(
            "# Generated by `tributary up`; edit the topology file instead.\n\
             tls_server_config:\n  cert_file: {:?}\n  key_file: {:?}\n",
            display(&pki.cert(name)),
            display(&pki.key(name))
        );
        args.push(format!("--web.config.file={}", display(&web)));
        files.push(ConfigFile { path: web, content: ConfigContent::Text(text) });
    }
    Component {
        name: name.into(),
        program: PathBuf::from(&topology.binaries.prometheus),
        args,
        env: Vec::new(),
        env_remove: Vec::new(),
        config: Some(ConfigFile { path: config.clone(), content: ConfigContent::Text(text) }),
        dirs: vec![data],
        ready: Ready::LogLine { text: "Server is ready to receive web requests.".into() },
        address: prometheus_url(topology),
        marker: display(&config),
        ours: false,
        metrics: None,
        identity: topology.security.tls.then(|| name.to_owned()),
        files,
    }
}

/// The Prometheus job of a component (its kind of service) and its cluster, if it has one.
fn job_of<'a>(topology: &'a Topology, name: &'a str) -> (&'a str, Option<&'a str>) {
    let clusters = topology.live.keys().chain([&topology.analytics.name]);
    for cluster in clusters {
        if let Some(id) =
            name.strip_prefix("broker-").and_then(|r| r.strip_prefix(cluster.as_str()))
            && id.starts_with('-')
        {
            return ("broker", Some(cluster));
        }
        if name.strip_prefix("agent-") == Some(cluster.as_str()) {
            return ("agent", Some(cluster));
        }
    }
    (name, None)
}

/// The audit dashboard's URL.
pub fn dashboard_url(topology: &Topology) -> String {
    format!("{}://{HOST}:{}/", scheme(topology), topology.audit_port())
}

fn mirror(topology: &Topology, binaries: &Path) -> Component {
    let sources: Vec<String> = topology
        .live
        .keys()
        .map(|name| format!("{name}={}", topology.zookeeper_connect(name)))
        .collect();
    let target = topology.zookeeper_connect(&topology.analytics.name);
    let metrics = format!("{HOST}:{}", topology.mirror_port());
    let typed =
        TypedConfig::new(&["source", "target", "metrics"], move |c: &mut mirror::Config| {
            c.source = sources.clone();
            c.target = Some(target.clone());
            c.metrics = Some(metrics.clone());
        });
    let mut component =
        service(topology, "mirror", binaries.join("mirror"), "mirror", &topology.mirror, typed);
    component.address = format!("{}://{HOST}:{}/metrics", scheme(topology), topology.mirror_port());
    component.metrics = Some(component.address.clone());
    secure(topology, &mut component, true, toml::Table::new());
    zookeeper_auth(topology, &mut component);
    component
}

fn simulator(topology: &Topology, binaries: &Path, cluster: &str, agent_port: u16) -> Component {
    let sim = &topology.simulator;
    let name = format!("simulator-{cluster}");
    let agent = format!("--agent={}", agent_url(topology, agent_port));
    let mut args = vec![
        "simulate".into(),
        agent.clone(),
        format!("--rate={}", sim.rate),
        format!("--duration={}", service::duration::format(sim.duration)),
        format!("--topics={}", sim.topics.join(",")),
    ];
    if topology.security.tls {
        // A frontend of the agent's: it presents a certificate of its own.
        let pki = PkiPaths::new(&topology.run_dir);
        args.push(format!("--tls-ca={}", display(&pki.ca())));
        args.push(format!("--tls-cert={}", display(&pki.cert(&name))));
        args.push(format!("--tls-key={}", display(&pki.key(&name))));
    }
    Component {
        name: name.clone(),
        program: binaries.join("frontend-agent"),
        args,
        env: vec![("NO_COLOR".into(), "1".into())],
        env_remove: Vec::new(),
        config: None,
        dirs: Vec::new(),
        // It has no port; an agent that refuses it, or a bad flag, ends it at once.
        ready: Ready::Running { ms: 1000 },
        address: format!("into {}", agent_url(topology, agent_port)),
        // Its command line names no file of the run directory, but its agent's address.
        marker: agent,
        ours: true,
        metrics: None,
        identity: topology.security.tls.then_some(name),
        files: Vec::new(),
    }
}

/// `s3://{bucket}/tiered/{cluster}`: where a tiered cluster's brokers keep their history.
pub fn tiered_store_url(topology: &Topology, cluster: &str) -> String {
    format!("s3://{}/tiered/{cluster}", topology.seaweedfs.bucket)
}

/// The S3 settings of the deployment's SeaweedFS. It runs without authentication: any key is
/// accepted, but one must be given.
fn seaweedfs_env(topology: &Topology) -> Vec<(String, String)> {
    let endpoint = format!("http://{HOST}:{}", topology.seaweedfs.s3_port);
    [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", "tributary"),
        ("AWS_SECRET_ACCESS_KEY", "tributary"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ALLOW_HTTP", "true"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .to_vec()
}

/// `s3://{bucket}/{prefix}`: where the loader writes.
pub fn store_url(topology: &Topology) -> String {
    format!("s3://{}/{}", topology.seaweedfs.bucket, topology.loader.prefix)
}

/// The loader's Iceberg catalog: a SQLite file in its data directory.
pub fn loader_catalog(topology: &Topology) -> String {
    format!("sqlite://{}", data_dir(topology, "loader").join("catalog.db").display())
}

/// Where the loader writes, as its readers (status, the chaos books) need to know it.
pub fn loader_output_config(topology: &Topology) -> hdfs_loader::Config {
    hdfs_loader::Config {
        store: Some(store_url(topology)),
        format: topology.loader.format,
        catalog: Some(loader_catalog(topology)),
        ..hdfs_loader::Config::default()
    }
}

fn loader(topology: &Topology, binaries: &Path) -> Component {
    let store = store_url(topology);
    let (format, catalog) = (topology.loader.format, loader_catalog(topology));
    let zookeeper = topology.zookeeper_connect(&topology.analytics.name);
    let (registry, interval, window_ms) =
        (registry_url(topology), topology.loader.interval, window_ms(topology));
    let metrics = format!("{HOST}:{}", topology.loader_port());
    let metrics_url = format!("{}://{metrics}/metrics", scheme(topology));
    let typed = TypedConfig::new(
        &[
            "store",
            "format",
            "catalog",
            "zookeeper",
            "registry",
            "interval",
            "metrics",
            "host_name",
            "audit_window_ms",
        ],
        move |c: &mut hdfs_loader::Config| {
            c.store = Some(store.clone());
            c.format = format;
            c.catalog = Some(catalog.clone());
            c.zookeeper = Some(zookeeper.clone());
            c.registry = Some(registry.clone());
            c.interval = interval;
            c.metrics = Some(metrics.clone());
            c.host_name = Some("loader".into());
            c.audit_window_ms = window_ms;
        },
    );
    let settings = Service {
        config: topology.loader.config.clone(),
        settings: topology.loader.settings.clone(),
        port: None,
    };
    let mut component =
        service(topology, "loader", binaries.join("hdfs-loader"), "loader", &settings, typed);
    component.args.insert(0, "serve".into());
    let endpoint = format!("http://{HOST}:{}", topology.seaweedfs.s3_port);
    component.env.extend(seaweedfs_env(topology));
    component.env_remove.push("AWS_SESSION_TOKEN".into());
    // It has no port of its own but the metrics one: ready once that listens.
    component.ready = Ready::LogLine { text: "metrics listening on".into() };
    component.address = format!("{} at {endpoint}", store_url(topology));
    component.metrics = Some(metrics_url);
    // Its S3 store (SeaweedFS, on loopback, without authentication) stays plain HTTP.
    secure(topology, &mut component, true, toml::Table::new());
    zookeeper_auth(topology, &mut component);
    component
}

#[cfg(test)]
mod tests {
    use super::*;
    use broker::acl::Acl;
    use broker::acl::Operation::{Consume, Create, Produce, Replicate};

    fn topology(extra: &str) -> (tempfile::TempDir, Topology) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("topology.toml");
        std::fs::write(
            &path,
            format!(
                "run_dir = \"run\"\n[live.live-a]\nbroker_ports = [1]\nlb_port = 2\n\
                 agent_port = 3\n[analytics]\nbroker_ports = [4]\n{extra}"
            ),
        )
        .unwrap();
        let topology = Topology::load(&path).unwrap();
        (dir, topology)
    }

    #[test]
    fn each_process_may_do_its_job_on_each_cluster_and_nothing_else() {
        let (_dir, topology) = topology("");
        let live = Acl::parse(&acl_file(&topology, "live-a")).unwrap();
        assert!(live.allows("agent-live-a", "page-view", Produce));
        assert!(live.allows("agent-live-a", "_audit", Create));
        assert!(!live.allows("agent-live-a", "page-view", Consume));
        assert!(!live.allows("agent-live-b", "page-view", Produce));
        assert!(
            live.allows("mirror", "click", Consume) && !live.allows("mirror", "click", Produce)
        );
        assert!(live.allows("audit", "search", Consume));
        assert!(!live.allows("loader", "search", Consume) && !live.allows("loader", "x", Produce));
        assert!(live.allows("broker-live-a-0", "click", Replicate));
        assert!(!live.allows("broker-analytics-0", "click", Replicate));
        assert!(live.allows(OPERATOR, "anything", Produce));
        let analytics = Acl::parse(&acl_file(&topology, "analytics")).unwrap();
        assert!(analytics.allows("mirror", "page-view", Produce));
        assert!(!analytics.allows("mirror", "_audit", Consume));
        assert!(!analytics.allows("mirror", "page-view", Consume));
        assert!(analytics.allows("loader", "page-view", Consume));
        assert!(analytics.allows("loader", "_audit", Produce));
        assert!(!analytics.allows("loader", "page-view", Produce));
        assert!(analytics.allows("audit", "_audit", Consume));
        assert!(analytics.allows("audit", "page-view", Consume), "counted as the mirror tier");
        assert!(!analytics.allows("audit", "page-view", Produce));
        assert!(!analytics.allows("agent-live-a", "page-view", Produce));
    }

    #[test]
    fn security_off_is_plaintext_with_no_certificates() {
        let (_dir, secured) = topology("");
        let (_other, open) = topology("[security]\ntls = false\n");
        let binaries = Path::new("/bin");
        for (topology, scheme) in [(&secured, "https"), (&open, "http")] {
            assert!(registry_url(topology).starts_with(&format!("{scheme}://")));
            for component in plan(topology, binaries) {
                let config = match &component.config {
                    Some(ConfigFile { content: c @ ConfigContent::Service { .. }, .. }) => {
                        c.render(Path::new("topology.toml")).unwrap()
                    }
                    _ => continue,
                };
                let has_tls = config.contains("tls_cert = ");
                assert_eq!(has_tls, topology.security.tls, "{}: {config}", component.name);
                // Every service with a ZooKeeper session authenticates it (the registry has none).
                let zookeeper = config.contains("zookeeper_auth_file = ");
                assert_eq!(zookeeper, component.name != "schema-registry", "{config}");
                assert_eq!(component.identity.is_some(), topology.security.tls);
            }
        }
        let (_dir, open_zookeeper) = topology("[security]\nzookeeper_acls = false\n");
        let broker =
            plan(&open_zookeeper, binaries).into_iter().find(|c| c.name.starts_with("broker-"));
        let config = broker.unwrap().config.unwrap().content.render(Path::new("t.toml")).unwrap();
        assert!(!config.contains("zookeeper_auth_file") && config.contains("tls_cert"), "{config}");
        // With TLS the settings may not set the certificate files themselves.
        let (_dir, bad) = topology("[mirror]\nsettings = { tls_ca = \"/x\" }\n");
        let mirror = plan(&bad, binaries).into_iter().find(|c| c.name == "mirror").unwrap();
        let error = mirror.config.unwrap().content.render(Path::new("t.toml")).unwrap_err();
        assert!(error.to_string().contains("mirror.settings.tls_ca"), "{error}");
    }
}
