//! `tributary up/status/down` through the real binary: the whole two-datacenter pipeline as
//! separate processes (real ZooKeeper, SeaweedFS, HAProxy), secured as `up` secures it by
//! default (mutual TLS, ACLs, the dashboard's token) and read here as the operator, a process
//! holding another service's certificate refused, Kafka's own client (confluent-kafka) reading
//! the agents' events from the analytics cluster and producing Avro events with keys and
//! headers into a live topic (checked by the audit from the live tier on and loaded with
//! `_key` and `_headers`), a live broker and the mirror killed with `kill -9` mid-run, and
//! the books checked at the end; plus the failure modes of the command
//! itself (a bad topology file, a component that never becomes ready).
//!
//! The component binaries must be built beside `tributary` (`cargo test --workspace` builds
//! them all; alone: `cargo build -p broker -p schema-registry -p frontend-agent -p mirror
//! -p hdfs-loader -p audit -p deploy`).

use std::collections::{BTreeMap, HashSet};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use tempfile::TempDir;
use testkit::process::{free_port, free_port_block};

const TRIBUTARY: &str = env!("CARGO_BIN_EXE_tributary");
const TOPICS: [&str; 3] = ["page-view", "click", "search"];
const WINDOW_MS: u64 = 10_000;
const GRACE_MS: u64 = 8_000;
/// The live topic confluent-kafka produces into, and how many clicks.
const KAFKA_TOPIC: &str = "kafka-clicks";
const KAFKA_CLICKS: u64 = 500;

/// Runs `tributary ARGS` to completion.
fn tributary(args: &[&str]) -> Output {
    Command::new(TRIBUTARY).args(args).output().expect("run tributary")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Brokers of the test topology: two per cluster.
const BROKERS: u16 = 9;

/// A topology under a temporary directory; `down` (and, failing that, SIGKILL of every pid
/// file's process) when dropped, so a failing test leaves nothing running.
struct Deployment {
    dir: TempDir,
    topology: PathBuf,
    ports: BTreeMap<&'static str, u16>,
}

impl Deployment {
    fn new(extra: &str) -> Deployment {
        Deployment::build(extra, false)
    }

    /// With a `tributary proxy` in front of every broker (`broker.proxy_port_offset`).
    fn with_proxies(extra: &str) -> Deployment {
        Deployment::build(extra, true)
    }

    fn build(extra: &str, proxies: bool) -> Deployment {
        let dir = tempfile::tempdir().expect("temp dir");
        let names = [
            "zookeeper",
            "s3",
            "registry",
            "live-a-lb",
            "live-a-agent",
            "live-b-lb",
            "live-b-agent",
            "mirror",
            "loader",
            "audit",
            "prometheus",
        ];
        let mut ports: BTreeMap<&'static str, u16> =
            names.into_iter().zip((0..names.len()).map(|_| free_port())).collect();
        // The nine brokers on consecutive ports, their metrics ports nine above them, their
        // Kafka listeners nine above those and their proxies' nine above those.
        let brokers = free_port_block(if proxies { 4 * BROKERS } else { 3 * BROKERS });
        let broker_names = [
            "live-a-0",
            "live-a-1",
            "live-a-2",
            "live-b-0",
            "live-b-1",
            "live-b-2",
            "analytics-0",
            "analytics-1",
            "analytics-2",
        ];
        for (name, port) in broker_names.into_iter().zip(brokers..) {
            ports.insert(name, port);
        }
        let p = |name: &str| ports[name];
        let topology = dir.path().join("topology.toml");
        let text = format!(
            r#"run_dir = "run"
ready_timeout_ms = 60000
stop_timeout_ms = 15000
audit_window_ms = {WINDOW_MS}

[binaries]
dir = "{binaries}"

[zookeeper]
port = {zookeeper}
tick_ms = 500

[seaweedfs]
s3_port = {s3}
base_port = {seaweed_base}

# Every example config is the base of its service's generated config, so each is loaded by
# the real service here.
[schema_registry]
port = {registry}
config = "{configs}/schema-registry.toml"
settings = {{ register_schemas = "{schemas}" }}

[broker]
config = "{configs}/broker.toml"
settings = {{ num_partitions = 3, flush_ms = 100, zookeeper_session_timeout_ms = 3000, default_replication_factor = 3, min_insync_replicas = 2 }}
metrics_port_offset = {BROKERS}
kafka_port_offset = {kafka_offset}{proxy_offset}

[live.live-a]
broker_ports = [{la0}, {la1}, {la2}]
lb_port = {la_lb}
agent_port = {la_agent}

[live.live-b]
broker_ports = [{lb0}, {lb1}, {lb2}]
lb_port = {lb_lb}
agent_port = {lb_agent}

[analytics]
broker_ports = [{an0}, {an1}, {an2}]

[agent]
config = "{configs}/frontend-agent.toml"
settings = {{ audit_publish_ms = 1000 }}

[mirror]
port = {mirror}
config = "{configs}/mirror.toml"
settings = {{ commit_ms = 500 }}

[loader]
interval = "2s"
metrics_port = {loader}
config = "{configs}/hdfs-loader.toml"

[audit]
port = {audit}
config = "{configs}/audit.toml"
settings = {{ grace_ms = {GRACE_MS}, held_ms = 5000 }}

[prometheus]
port = {prometheus}
scrape_interval = "1s"
rules = "{rules}"
{extra}"#,
            binaries = Path::new(TRIBUTARY).parent().expect("bin dir").display(),
            kafka_offset = 2 * BROKERS,
            proxy_offset = if proxies {
                format!("\nproxy_port_offset = {}", 3 * BROKERS)
            } else {
                String::new()
            },
            configs = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs").display(),
            schemas = events::schemas::source_dir().display(),
            zookeeper = p("zookeeper"),
            s3 = p("s3"),
            seaweed_base = free_port_block(9),
            registry = p("registry"),
            la0 = p("live-a-0"),
            la1 = p("live-a-1"),
            la2 = p("live-a-2"),
            la_lb = p("live-a-lb"),
            la_agent = p("live-a-agent"),
            lb0 = p("live-b-0"),
            lb1 = p("live-b-1"),
            lb2 = p("live-b-2"),
            lb_lb = p("live-b-lb"),
            lb_agent = p("live-b-agent"),
            an0 = p("analytics-0"),
            an1 = p("analytics-1"),
            an2 = p("analytics-2"),
            mirror = p("mirror"),
            loader = p("loader"),
            audit = p("audit"),
            prometheus = p("prometheus"),
            rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("prometheus/alerts.yml").display(),
        );
        std::fs::write(&topology, text).expect("write topology");
        Deployment { dir, topology, ports }
    }

    fn run_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    fn config(&self) -> &str {
        self.topology.to_str().expect("utf-8 path")
    }

    fn run(&self, command: &str, names: &[&str]) -> Output {
        let mut args = vec![command, "--config", self.config()];
        args.extend_from_slice(names);
        tributary(&args)
    }

    /// Runs a command that must succeed; its stdout.
    fn ok(&self, command: &str, names: &[&str]) -> String {
        let output = self.run(command, names);
        assert!(
            output.status.success(),
            "tributary {command} failed ({}):\n{}\n{}",
            output.status,
            text(&output.stdout),
            text(&output.stderr)
        );
        text(&output.stdout)
    }

    fn pid(&self, name: &str) -> i32 {
        let path = self.run_dir().join("pids").join(format!("{name}.pid"));
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .trim()
            .parse()
            .expect("pid")
    }

    /// `status` as name → (pid, state).
    fn status(&self) -> BTreeMap<String, (String, String)> {
        self.ok("status", &[])
            .lines()
            .map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                (fields[0].to_owned(), (fields[1].to_owned(), fields[2].to_owned()))
            })
            .collect()
    }

    /// Pids of running processes whose command line mentions this deployment's directory.
    fn leftovers(&self) -> Vec<(i32, String)> {
        let marker = self.dir.path().to_string_lossy().into_owned();
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            });
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            // Every process runs in the run directory, whether or not its command line says so.
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default();
            if !zombie && (cmdline.contains(&marker) || cwd.starts_with(self.dir.path())) {
                found.push((pid, cmdline));
            }
        }
        found
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        let _ = self.run("down", &[]);
        for (pid, _) in self.leftovers() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// One agent's brokers are out of its reach for a minute: every broker of its live cluster is
/// stopped (SIGSTOP; the agent sends to the partitions' leaders directly, its load balancer
/// only tells it where they are), so neither its batches nor its audit counts get through
/// while it goes on accepting its simulator's events. Within the minute the audit dashboard
/// names it as holding events back, and Prometheus fires the audit's alert and the agent's
/// own; then the brokers go on, and the agent ships its backlog.
fn agent_blocked_for_a_minute(
    deployment: &Deployment,
    runtime: &tokio::runtime::Runtime,
    http: &reqwest::Client,
    prometheus: &str,
) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let (audit, agent) = (deployment.ports["audit"], deployment.ports["live-a-agent"]);
    // The Held back panel of the dashboard, if it has one.
    let held_panel = || {
        let page = get(runtime, http, &format!("https://127.0.0.1:{audit}/"))?;
        Some(page.split(r#"<div class="panel" id="held">"#).nth(1).unwrap_or_default().to_owned())
    };
    let named = |panel: &str| panel.contains(r#"data-host="agent-live-a""#);
    // Before: nothing holds agent-live-a's events (the mirror restarted above carries the
    // agents' counts again).
    eventually(Duration::from_secs(60), "the dashboard clear of agent-live-a", |seen| {
        let panel = held_panel()?;
        *seen = panel.chars().take(600).collect();
        (!named(&panel)).then_some(())
    });
    let brokers: Vec<Pid> =
        (0..3).map(|b| Pid::from_raw(deployment.pid(&format!("broker-live-a-{b}")))).collect();
    for &broker in &brokers {
        kill(broker, Signal::SIGSTOP).expect("SIGSTOP a live broker");
    }
    let blocked = Instant::now();
    let shown = eventually(Duration::from_secs(60), "the dashboard to name agent-live-a", |seen| {
        let panel = held_panel()?;
        *seen = panel.chars().take(600).collect();
        named(&panel).then(|| blocked.elapsed())
    });
    let mut firing = BTreeMap::new();
    eventually(Duration::from_secs(70), "AgentUnheard and AgentBacklogStuck to fire", |seen| {
        let alerts = get(runtime, http, &format!("{prometheus}/api/v1/alerts"))?;
        let alerts: serde_json::Value = serde_json::from_str(&alerts).ok()?;
        for alert in alerts["data"]["alerts"].as_array()? {
            let (name, state) = (&alert["labels"]["alertname"], &alert["state"]);
            let ours = alert["labels"]["host"] == "agent-live-a"
                || alert["labels"]["process"] == "agent-live-a";
            if ours && state == "firing" {
                firing.entry(name.as_str()?.to_owned()).or_insert_with(|| blocked.elapsed());
            }
        }
        *seen = format!("{firing:?}");
        (firing.contains_key("AgentUnheard") && firing.contains_key("AgentBacklogStuck"))
            .then_some(())
    });
    let (accepted, acknowledged, _) = agent_counts(runtime, http, agent).expect("agent metrics");
    assert!(accepted > acknowledged, "the agent took events while blocked");
    eprintln!(
        "agent-live-a blocked: on the dashboard after {shown:?}, alerts firing after {firing:?}; {} events waiting",
        accepted - acknowledged
    );
    std::thread::sleep(Duration::from_secs(60).saturating_sub(blocked.elapsed()));
    for &broker in &brokers {
        kill(broker, Signal::SIGCONT).expect("SIGCONT a live broker");
    }
    eventually(Duration::from_secs(60), "agent-live-a to ship its backlog", |seen| {
        let (accepted_now, acknowledged_now, _) = agent_counts(runtime, http, agent)?;
        *seen = format!("accepted {accepted_now}, acknowledged {acknowledged_now}");
        (acknowledged_now >= accepted).then_some(())
    });
}

fn kill_9(pid: i32) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL)
        .expect("kill -9");
}

#[test]
fn bad_topology_is_one_line_naming_the_key_with_exit_code_2() {
    let dir = tempfile::tempdir().expect("temp dir");
    let minimal = "run_dir = \"run\"\n[live.a]\nbroker_ports = [1]\nlb_port = 2\nagent_port = 3\n[analytics]\nbroker_ports = [4]\n";
    let cases = [
        (format!("{minimal}colour = 1\n"), "colour"),
        (minimal.replace("lb_port = 2", "lb_port = \"two\""), "live.a.lb_port"),
        (minimal.replace("lb_port = 2", "lb_port = 1"), "live.a.lb_port"),
        (minimal.replace("broker_ports = [4]", "broker_ports = []"), "analytics.broker_ports"),
        (
            format!("{minimal}[zookeeper]\nchroot_prefix = \"tributary\"\n"),
            "zookeeper.chroot_prefix",
        ),
        (format!("{minimal}[loader]\ninterval = \"soon\"\n"), "loader.interval"),
        (format!("{minimal}[loader]\ninterval = \"90\"\n"), "loader.interval"),
        (format!("{minimal}[broker]\nport = 5\n"), "broker.port"),
        (minimal.replace("run_dir = \"run\"\n", ""), "run_dir"),
        (format!("{minimal}[broker]\nsettings = {{ port = 5 }}\n"), "broker.settings.port"),
        (format!("{minimal}[audit]\nconfig = \"not-toml.txt\"\n"), "audit.config"),
        (format!("{minimal}[mirror]\nconfig = \"missing.toml\"\n"), "mirror.config"),
    ];
    std::fs::write(dir.path().join("not-toml.txt"), "x = [\n").expect("write");
    for (i, (body, key)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad-{i}.toml"));
        std::fs::write(&path, body).expect("write");
        for command in ["up", "status", "down"] {
            let output = tributary(&[command, "--config", path.to_str().expect("utf-8")]);
            let stderr = text(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{command} with {body}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
            assert!(stderr.contains(&format!("`{key}`")), "{stderr} should name {key}");
        }
    }
    let missing =
        tributary(&["status", "--config", dir.path().join("none.toml").to_str().expect("utf-8")]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(text(&missing.stderr).contains("none.toml"), "{}", text(&missing.stderr));
    // Nothing was started, so nothing was created.
    assert!(!dir.path().join("run").exists());
}

#[test]
fn up_that_fails_stops_what_it_started_and_says_why() {
    let deployment = Deployment::new("");
    // Something else holds the registry's port: ZooKeeper and SeaweedFS start, the registry
    // cannot listen, and `up` must leave nothing running.
    let _squatter = TcpListener::bind(("127.0.0.1", deployment.ports["registry"])).expect("bind");
    let output = deployment.run("up", &[]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("tributary: schema-registry did not become ready"), "{stderr}");
    assert!(stderr.contains("cannot listen"), "the log tail says why: {stderr}");
    let stdout = text(&output.stdout);
    assert!(stdout.contains("zookeeper") && stdout.contains("seaweedfs"), "{stdout}");
    assert!(deployment.leftovers().is_empty(), "left running: {:?}", deployment.leftovers());
    for (name, (pid, state)) in deployment.status() {
        assert_eq!((pid.as_str(), state.as_str()), ("-", "stopped"), "{name}");
    }
    // Unknown names for down are a usage error.
    let output = deployment.run("down", &["no-such-process"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("no-such-process"));
}

/// Polls `check` every 500 ms until it returns `Some`, failing after `timeout` with what
/// `check` last wrote into its argument.
fn eventually<T>(
    timeout: Duration,
    what: &str,
    mut check: impl FnMut(&mut String) -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    let mut seen = String::new();
    loop {
        if let Some(value) = check(&mut seen) {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}; last seen: {seen}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// GET `url` as text; `None` if the service does not answer.
fn get(runtime: &tokio::runtime::Runtime, http: &reqwest::Client, url: &str) -> Option<String> {
    runtime.block_on(async {
        let response = http.get(url).send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.text().await.ok()
    })
}

/// A counter of a Prometheus text page.
fn metric(page: &str, name: &str) -> Option<u64> {
    page.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// One agent's `(accepted, acknowledged, dropped)`.
fn agent_counts(
    runtime: &tokio::runtime::Runtime,
    http: &reqwest::Client,
    port: u16,
) -> Option<(u64, u64, u64)> {
    let page = get(runtime, http, &format!("https://127.0.0.1:{port}/metrics"))?;
    Some((
        metric(&page, "tributary_agent_accepted_total")?,
        metric(&page, "tributary_agent_acknowledged_total")?,
        metric(&page, "tributary_agent_dropped_total")?,
    ))
}

/// The audit's windows of `topic`.
fn windows(
    runtime: &tokio::runtime::Runtime,
    http: &reqwest::Client,
    port: u16,
    topic: &str,
) -> Option<Vec<serde_json::Value>> {
    let body = get(runtime, http, &format!("https://127.0.0.1:{port}/api/windows?topic={topic}"))?;
    let value: serde_json::Value = serde_json::from_str(&body).ok()?;
    match value {
        serde_json::Value::Array(windows) => Some(windows),
        serde_json::Value::Object(mut object) => match object.remove("windows") {
            Some(serde_json::Value::Array(windows)) => Some(windows),
            _ => None,
        },
        _ => None,
    }
}

/// The loader's committed output in the deployment's SeaweedFS, read as the deployment wrote
/// it (an Iceberg table per topic by default).
fn loader_output(
    runtime: &tokio::runtime::Runtime,
    deployment: &Deployment,
) -> hdfs_loader::Output {
    let topology = deploy::multiprocess::topology::Topology::load(&deployment.topology)
        .expect("the test topology");
    let store = deploy::chaos::books::store(&topology).expect("the loader's store");
    let config = deploy::multiprocess::plan::loader_output_config(&topology);
    runtime.block_on(hdfs_loader::Output::open(&config, store)).expect("the loader's output")
}

/// Every committed row of the pipeline's topics: (rows, distinct `header.id`s).
fn parquet_ids(
    runtime: &tokio::runtime::Runtime,
    output: &hdfs_loader::Output,
) -> (u64, HashSet<Vec<u8>>) {
    runtime.block_on(async {
        let mut rows = 0u64;
        let mut ids = HashSet::new();
        for topic in TOPICS {
            let read = hdfs_loader::readback::read_topic(output, topic).await.expect("read back");
            rows += read.positions.len() as u64;
            ids.extend(read.event_ids);
        }
        (rows, ids)
    })
}

#[test]
fn pipeline_survives_a_broker_and_the_mirror_killed_and_the_books_balance() {
    let begun = Instant::now();
    let deployment = Deployment::new("\n[simulator]\nrate = 100\nduration = \"10m\"\n");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let p = |name: &str| deployment.ports[name];

    let up = deployment.ok("up", &[]);
    let output = loader_output(&runtime, &deployment);
    let pki = deployment.run_dir().join("pki");
    let token = std::fs::read_to_string(pki.join("dashboard.token")).expect("the token");
    let dashboard = format!("https://127.0.0.1:{}/", p("audit"));
    assert!(up.contains(&format!("dashboard       {dashboard}?token={}", token.trim())), "{up}");
    assert!(up.contains(&format!("--tls-cert {}", pki.join("operator.crt").display())), "{up}");
    // Every broker has a Kafka listener too, and `up` says where.
    let kafka = format!("Kafka clients at 127.0.0.1:{}", p("live-a-0") + 2 * BROKERS);
    assert!(up.contains(&kafka), "{up}");
    // Everything below is read as the operator, over mutual TLS.
    let as_who = |who: Option<&str>| {
        service::tls::install_crypto_provider();
        let (cert, key) =
            who.map(|w| (pki.join(format!("{w}.crt")), pki.join(format!("{w}.key")))).unzip();
        let tls = service::tls::client_from_settings(
            Some(&pki.join("ca.crt")),
            cert.as_deref(),
            key.as_deref(),
        )
        .expect("the deployment's certificates")
        .expect("TLS");
        reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .tls_backend_preconfigured((*tls).clone())
            .build()
            .expect("an HTTPS client")
    };
    let http = as_who(Some("operator"));
    assert!(
        up.contains(&format!("s3://tributary/warehouse at http://127.0.0.1:{}", p("s3"))),
        "{up}"
    );
    let status = deployment.status();
    assert!(status.values().all(|(_, state)| state == "alive"), "{status:?}");
    assert!(
        status.contains_key("simulator-live-b") && status.contains_key("lb-live-a"),
        "{status:?}"
    );

    // Traffic flows through both live datacenters.
    eventually(Duration::from_secs(60), "both agents acknowledging events", |_| {
        let a = agent_counts(&runtime, &http, p("live-a-agent"))?;
        let b = agent_counts(&runtime, &http, p("live-b-agent"))?;
        (a.1 > 0 && b.1 > 0).then_some(())
    });

    // Kafka's own client, over mutual TLS as the operator: confluent-kafka decodes the agents'
    // page views from the analytics cluster with its AvroDeserializer against our registry, and
    // produces clicks with its AvroSerializer, keys and headers, into a live topic of their own.
    let kafka_at =
        |names: [&str; 3]| names.map(|n| format!("127.0.0.1:{}", p(n) + 2 * BROKERS)).join(",");
    let interop = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/interop.py"))
        .arg(kafka_at(["live-a-0", "live-a-1", "live-a-2"]))
        .arg(kafka_at(["analytics-0", "analytics-1", "analytics-2"]))
        .arg(format!("https://127.0.0.1:{}", p("registry")))
        .arg(&pki)
        .arg(KAFKA_TOPIC)
        .arg(KAFKA_CLICKS.to_string())
        .output()
        .expect("python3 (scripts/test.sh installs confluent-kafka[avro])");
    let (out, err) = (text(&interop.stdout), text(&interop.stderr));
    assert!(interop.status.success(), "interop.py: {out}\n{err}");
    let interop: serde_json::Value =
        serde_json::from_str(out.lines().last().unwrap_or_default()).expect("a JSON report");
    assert_eq!(interop["decoded"], 20, "{interop}");
    assert_eq!(interop["produced"], KAFKA_CLICKS, "{interop}\n{err}");

    // Every service's /metrics, as `up` lists them, is read by a real OpenMetrics parser.
    let pages: Vec<&str> = up
        .lines()
        .skip_while(|line| !line.starts_with("metrics"))
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(1))
        .collect();
    assert_eq!(
        pages.len(),
        9 + 1 + 2 + 1 + 1 + 1,
        "brokers, registry, agents, mirror, loader, audit: {up}"
    );
    for url in pages {
        assert!(url.starts_with("https://"), "{url}");
        let page = get(&runtime, &http, url).unwrap_or_else(|| panic!("{url} as the operator"));
        let samples = testkit::metrics::parse(&page);
        assert!(!samples.is_empty(), "{url} has samples");
    }

    // What each process may do is its job only. A client without a certificate is refused
    // at the handshake; the agent's certificate may not register a schema; the loader's may
    // not produce into a live cluster; the dashboard wants a certificate or the token.
    let registry = format!("https://127.0.0.1:{}", p("registry"));
    let anonymous = as_who(None);
    let refused =
        runtime.block_on(async { anonymous.get(format!("{registry}/subjects")).send().await });
    assert!(refused.is_err(), "a client without a certificate: {refused:?}");
    let schema = serde_json::json!({ "schema": "\"string\"" });
    let agent = as_who(Some("agent-live-a"));
    let register = runtime.block_on(async {
        agent.post(format!("{registry}/subjects/intruder/versions")).json(&schema).send().await
    });
    assert_eq!(register.expect("the registry answers").status(), 403);
    let trib = Path::new(TRIBUTARY).with_file_name("trib");
    let mut produce = Command::new(&trib)
        .arg("--tls-ca")
        .arg(pki.join("ca.crt"))
        .arg("--tls-cert")
        .arg(pki.join("loader.crt"))
        .arg("--tls-key")
        .arg(pki.join("loader.key"))
        .args(["produce", "--topic", "page-view", "--zookeeper"])
        .arg(format!("127.0.0.1:{}/tributary/live-a", p("zookeeper")))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run trib");
    {
        use std::io::Write;
        produce.stdin.take().expect("stdin").write_all(b"forged\n").expect("write");
    }
    let produced = produce.wait_with_output().expect("trib ends");
    assert_eq!(produced.status.code(), Some(1));
    assert_eq!(
        text(&produced.stderr).trim(),
        "trib: authorization failed: principal loader may not produce to topic page-view"
    );
    // The mirror's group in a live cluster's ZooKeeper is read by anyone and changed only with
    // the deployment's digest credentials.
    let live_a = format!("127.0.0.1:{}/tributary/live-a", p("zookeeper"));
    runtime.block_on(async {
        let anonymous = cluster::ZooKeeper::connect(cluster::ZooKeeperConfig::new(&live_a))
            .await
            .expect("a ZooKeeper session");
        let registry = cluster::Registry::new(anonymous);
        let deadline = Instant::now() + Duration::from_secs(30);
        let (group, partition) = loop {
            let groups = registry.groups().await.expect("groups are readable");
            if let Some(group) = groups.first() {
                let offsets = registry.offsets(group, "page-view").await.expect("readable");
                if let Some(&partition) = offsets.keys().next() {
                    break (group.clone(), partition);
                }
            }
            assert!(Instant::now() < deadline, "the mirror commits no offsets");
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let forged = registry.commit_offset(&group, "page-view", partition, 0).await;
        assert!(
            matches!(
                forged,
                Err(cluster::RegistryError::Coord(cluster::CoordError::NotAuthorized { .. }))
            ),
            "{forged:?}"
        );
    });
    let summary = format!("{dashboard}api/summary");
    let status = |client: &reqwest::Client, bearer: Option<&str>| {
        let mut request = client.get(&summary);
        if let Some(token) = bearer {
            request = request.bearer_auth(token);
        }
        let answer = runtime.block_on(async { request.send().await });
        answer.expect("the dashboard answers").status().as_u16()
    };
    assert_eq!(status(&anonymous, None), 401);
    assert_eq!(status(&anonymous, Some(token.trim())), 200);
    assert_eq!(status(&http, None), 200);

    // Prometheus scrapes every one of those pages, and has the alert rules.
    let prometheus = format!("https://127.0.0.1:{}", p("prometheus"));
    assert!(up.contains(&format!("prometheus      {prometheus}/")), "{up}");
    eventually(Duration::from_secs(60), "Prometheus scraping every target", |seen| {
        let targets = get(&runtime, &http, &format!("{prometheus}/api/v1/targets"))?;
        let targets: serde_json::Value = serde_json::from_str(&targets).ok()?;
        let active = targets["data"]["activeTargets"].as_array()?;
        let up = active.iter().filter(|t| t["health"] == "up").count();
        *seen = format!("{up} of {} targets up", active.len());
        (active.len() == 15 && up == 15).then_some(())
    });
    let rules = get(&runtime, &http, &format!("{prometheus}/api/v1/rules")).expect("rules");
    let rules: serde_json::Value = serde_json::from_str(&rules).expect("rules JSON");
    let names: Vec<&str> = rules["data"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(names.contains(&"RemoteSegmentDamaged") && names.len() == 12, "{names:?}");

    // A live broker dies and its disk with it: its data directory is wiped before `up` starts
    // it again. Its partitions' other replicas lead meanwhile (the agent finds them through
    // HAProxy and sends its batches there), and it comes back as a follower copying them.
    let victim = deployment.pid("broker-live-a-0");
    kill_9(victim);
    eventually(Duration::from_secs(5), "status to show the broker dead", |_| {
        (deployment.status()["broker-live-a-0"].1 == "dead").then_some(())
    });
    // Prometheus notices: BrokerDown is pending (its `for` is a minute) within a few scrapes.
    eventually(Duration::from_secs(30), "the BrokerDown alert", |seen| {
        let alerts = get(&runtime, &http, &format!("{prometheus}/api/v1/alerts"))?;
        let alerts: serde_json::Value = serde_json::from_str(&alerts).ok()?;
        let found = alerts["data"]["alerts"].as_array()?.iter().find(|a| {
            a["labels"]["alertname"] == "BrokerDown" && a["labels"]["process"] == "broker-live-a-0"
        })?;
        *seen = found.to_string();
        ["pending", "firing"].contains(&found["state"].as_str()?).then_some(())
    });
    let data = deployment.run_dir().join("data/broker-live-a-0");
    assert!(data.is_dir(), "{data:?}");
    std::fs::remove_dir_all(&data).expect("wipe the broker's data directory");
    std::thread::sleep(Duration::from_secs(3));
    let again = deployment.ok("up", &[]);
    assert!(again.contains(&format!("pid {victim} is gone; starting it again")), "{again}");
    assert!(again.contains("broker-live-a-1        already running"), "{again}");
    assert!(data.exists(), "the broker starts on an empty data directory");
    let restarted = deployment.pid("broker-live-a-0");
    assert_ne!(restarted, victim);
    assert_eq!(deployment.status()["broker-live-a-0"], (restarted.to_string(), "alive".into()));

    // The mirror dies mid-copy and comes back: it resumes from its committed offsets.
    std::thread::sleep(Duration::from_secs(3));
    let mirror = deployment.pid("mirror");
    kill_9(mirror);
    std::thread::sleep(Duration::from_secs(2));
    let again = deployment.ok("up", &[]);
    assert!(again.contains(&format!("pid {mirror} is gone; starting it again")), "{again}");
    std::thread::sleep(Duration::from_secs(4));

    agent_blocked_for_a_minute(&deployment, &runtime, &http, &prometheus);

    // Stop the traffic, only it.
    let stopped = deployment.ok("down", &["simulator-live-a", "simulator-live-b"]);
    assert_eq!(stopped.lines().count(), 2, "{stopped}");
    let status = deployment.status();
    for (name, (_, state)) in &status {
        let expected = if name.starts_with("simulator-") { "stopped" } else { "alive" };
        assert_eq!(state, expected, "{name}: {status:?}");
    }

    // The agents' spools drain: every accepted event acknowledged by a live broker.
    let acknowledged = eventually(Duration::from_secs(60), "the agents' spools to drain", |seen| {
        let mut total = 0;
        for agent in ["live-a-agent", "live-b-agent"] {
            let (accepted, acknowledged, dropped) = agent_counts(&runtime, &http, p(agent))?;
            *seen = format!("{agent}: accepted {accepted}, acknowledged {acknowledged}");
            assert_eq!(dropped, 0, "{agent} dropped events");
            if acknowledged < accepted {
                return None;
            }
            total += acknowledged;
        }
        Some(total)
    });
    assert!(acknowledged > 1000, "only {acknowledged} events");

    // Every window closes and every tier balances against the agents': complete, or (after
    // a retried batch or the mirror's replay) duplication — never loss.
    let mut duplicated_windows = 0;
    eventually(Duration::from_secs(90), "every window closed, without loss", |seen| {
        duplicated_windows = 0;
        let mut agent_total = 0;
        for topic in TOPICS {
            let windows = windows(&runtime, &http, p("audit"), topic)?;
            *seen = format!("{topic}: {windows:?}");
            for window in windows {
                let verdict = window["verdict"].as_str().unwrap_or_default();
                match verdict {
                    "complete" => {}
                    "duplication" => duplicated_windows += 1,
                    _ => return None,
                }
                let tiers = &window["tiers"];
                let agent = tiers["agent"].as_u64().unwrap_or(0);
                // Every event the agents accepted was acknowledged in the end.
                if tiers["accepted"].as_u64() != Some(agent) {
                    return None;
                }
                for tier in ["live", "mirror", "loader"] {
                    let count = tiers[tier].as_u64().unwrap_or(0);
                    if count < agent || (verdict == "complete" && count != agent) {
                        return None;
                    }
                }
                agent_total += agent;
            }
        }
        if agent_total != acknowledged {
            *seen = format!(
                "agent tier counts {agent_total} events, the agents acknowledged {acknowledged}"
            );
            return None;
        }
        Some(())
    });

    // The Parquet files in SeaweedFS hold every acknowledged event, each id at least once;
    // any extra row is a duplicate the audit reported.
    let (rows, ids) =
        eventually(Duration::from_secs(30), "the loader to commit every event", |seen| {
            let (rows, ids) = parquet_ids(&runtime, &output);
            *seen = format!("{rows} rows, {} distinct ids, {acknowledged} acknowledged", ids.len());
            (ids.len() as u64 == acknowledged).then_some((rows, ids))
        });
    assert_eq!(ids.len() as u64, acknowledged);
    if rows > ids.len() as u64 {
        assert!(
            duplicated_windows > 0,
            "{} duplicate rows, no window reports duplication",
            rows - ids.len() as u64
        );
    }

    // The clicks confluent-kafka produced straight into live-a are checked from the live tier
    // on (no agent counted them): complete; and loaded with their keys and headers.
    eventually(Duration::from_secs(90), "the Kafka-produced topic complete from live on", |seen| {
        let windows = windows(&runtime, &http, p("audit"), KAFKA_TOPIC)?;
        *seen = format!("{windows:?}");
        let mut live = 0;
        for window in &windows {
            let tiers = &window["tiers"];
            let complete = window["verdict"] == "complete"
                && window["reference_tier"] == "live"
                && tiers.get("agent").is_none()
                && tiers["mirror"] == tiers["live"]
                && tiers["loader"] == tiers["live"];
            if !complete {
                return None;
            }
            live += tiers["live"].as_u64()?;
        }
        (live == KAFKA_CLICKS).then_some(())
    });
    let mut keyed = parquet_keys_and_headers(&runtime, &output, KAFKA_TOPIC);
    keyed.sort();
    keyed.dedup();
    let mut expected: Vec<KeyedRow> = (0..KAFKA_CLICKS)
        .map(|i| {
            let headers = vec![
                ("n".into(), i.to_string().into_bytes()),
                ("source".into(), b"confluent-kafka".to_vec()),
            ];
            (format!("member-{i}"), headers)
        })
        .collect();
    expected.sort();
    assert_eq!(keyed, expected);

    // `down` leaves nothing behind.
    let down = deployment.ok("down", &[]);
    assert!(
        down.lines().next().is_some_and(|l| l.starts_with("prometheus ")),
        "reverse order: {down}"
    );
    assert!(down.lines().last().is_some_and(|l| l.starts_with("zookeeper ")), "{down}");
    assert!(deployment.leftovers().is_empty(), "left running: {:?}", deployment.leftovers());
    assert!(deployment.status().values().all(|(pid, state)| pid == "-" && state == "stopped"));
    assert!(std::fs::read_dir(deployment.run_dir().join("pids")).expect("pids").next().is_none());
    eprintln!(
        "multi-process end-to-end: {acknowledged} events, {rows} rows, {:?}",
        begun.elapsed()
    );
}

/// A row's `_key` as text and its `_headers`, sorted by name.
type KeyedRow = (String, Vec<(String, Vec<u8>)>);

/// Every row's `_key` (as text) and `_headers` (sorted by name) under
/// `s3://tributary/warehouse/{topic}/`.
fn parquet_keys_and_headers(
    runtime: &tokio::runtime::Runtime,
    output: &hdfs_loader::Output,
    topic: &str,
) -> Vec<KeyedRow> {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use object_store::ObjectStoreExt;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let store = output.store();
    runtime.block_on(async {
        let mut rows = Vec::new();
        let files = hdfs_loader::readback::files(output, topic).await.expect("committed files");
        for file in &files {
            let bytes = store.get(file).await.expect("get").bytes().await.expect("read");
            let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
                .expect("parquet")
                .build()
                .expect("reader");
            for batch in reader {
                let batch = batch.expect("batch");
                let keys = batch.column_by_name("_key").expect("_key column");
                let keys = keys.as_binary::<i32>();
                let headers = batch.column_by_name("_headers").expect("_headers column");
                let headers = headers.as_map();
                for i in 0..batch.num_rows() {
                    let key = String::from_utf8_lossy(keys.value(i)).into_owned();
                    let entries = headers.value(i);
                    let names = entries.column(0).as_string::<i32>();
                    let values = entries.column(1).as_binary::<i32>();
                    let mut pairs: Vec<(String, Vec<u8>)> = (0..entries.len())
                        .map(|j| (names.value(j).to_owned(), values.value(j).to_vec()))
                        .collect();
                    pairs.sort();
                    rows.push((key, pairs));
                }
            }
        }
        rows
    })
}

#[test]
fn config_defaults_to_deploy_local_toml_from_the_repository_root() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repository root");
    let output = Command::new(TRIBUTARY).arg("status").current_dir(root).output().expect("run");
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let names: Vec<&str> =
        stdout.lines().filter_map(|line| line.split_whitespace().next()).collect();
    let mut expected: Vec<String> =
        ["zookeeper", "seaweedfs", "schema-registry"].map(String::from).to_vec();
    for cluster in ["live-a", "live-b", "analytics"] {
        expected.extend([0, 1, 2].map(|id| format!("broker-{cluster}-{id}")));
    }
    expected.extend(
        [
            "lb-live-a",
            "lb-live-b",
            "agent-live-a",
            "agent-live-b",
            "mirror",
            "loader",
            "audit",
            "prometheus",
            "simulator-live-a",
            "simulator-live-b",
        ]
        .map(String::from),
    );
    assert_eq!(names, expected, "{stdout}");
    assert!(stdout.contains("127.0.0.1:9101 in 127.0.0.1:2181/tributary/live-a"), "{stdout}");
    assert!(stdout.contains("https://127.0.0.1:8080/"), "secured by default: {stdout}");
}

#[test]
fn a_missing_program_is_named_before_anything_starts() {
    let deployment = Deployment::new("");
    let empty = deployment.dir.path().join("no-binaries");
    std::fs::create_dir(&empty).expect("mkdir");
    let topology = std::fs::read_to_string(&deployment.topology).expect("read");
    let bin_dir = Path::new(TRIBUTARY).parent().expect("bin dir").display().to_string();
    std::fs::write(&deployment.topology, topology.replace(&bin_dir, &empty.display().to_string()))
        .expect("write");
    let output = deployment.run("up", &[]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("schema-registry: program")
            && stderr.contains("cargo build -p schema-registry"),
        "{stderr}"
    );
    assert!(text(&output.stdout).is_empty(), "nothing started: {}", text(&output.stdout));
    assert!(!deployment.run_dir().join("pids").exists());
}

/// `--zookeeper-auth-file` on every binary that opens a ZooKeeper session is applied: the
/// credentials file is read before the session opens, so a missing one is named.
#[test]
fn every_service_reads_its_zookeeper_credentials_file() {
    let bin = |name: &str| Path::new(TRIBUTARY).with_file_name(name);
    let digest = "/nonexistent/zookeeper.digest";
    let zk = "127.0.0.1:1/tributary/x";
    let runs: [(&str, Vec<&str>); 5] = [
        ("broker", vec!["--zookeeper", zk, "--data-dir", "/tmp/tributary-zk-auth", "--port", "0"]),
        ("frontend-agent", vec!["serve", "--zookeeper", zk, "--registry", "http://127.0.0.1:1"]),
        ("mirror", vec!["--source", "a=127.0.0.1:1/a", "--target", zk]),
        (
            "hdfs-loader",
            vec![
                "run",
                "--zookeeper",
                zk,
                "--store",
                "file:///tmp/tributary-zk-auth-store",
                "--registry",
                "http://127.0.0.1:1",
            ],
        ),
        (
            "audit",
            vec!["--zookeeper", zk, "--registry", "http://127.0.0.1:1", "--http", "127.0.0.1:0"],
        ),
    ];
    for (name, args) in runs {
        let out = Command::new(bin(name))
            .args(&args)
            .args(["--zookeeper-auth-file", digest])
            .output()
            .expect("run the service");
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{name}: {stderr}");
        assert!(stderr.contains(&format!("cannot read {digest}")), "{name}: {stderr}");
    }
}

/// `tributary chaos` for two minutes against the whole deployment with a proxy in front of
/// every broker: kills and restarts of every kind of process, pauses past the ZooKeeper
/// session, cut network paths, while the simulators and the chaos run's own witness traffic
/// flow; then the drain, and a report in which nothing an agent acknowledged is missing from
/// Parquet and no audit window is in loss. (The 30-minute run is a README command.)
#[test]
fn chaos_for_two_minutes_loses_nothing_an_agent_acknowledged() {
    let deployment = Deployment::with_proxies("\n[simulator]\nrate = 50\nduration = \"1h\"\n");
    let chaos = |args: &[&str]| {
        let mut all = vec!["chaos", "--config", deployment.config()];
        all.extend_from_slice(args);
        tributary(&all)
    };
    // Nothing to inject faults into before `up`, and a fault it does not know: usage errors.
    let refused = chaos(&["--duration", "1m"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert_eq!(
        text(&refused.stderr).trim(),
        "tributary: zookeeper is not running: start the deployment with `tributary up` first"
    );
    let unknown = chaos(&["--duration", "1m", "--faults", "kill,flood"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown.stderr));
    assert!(text(&unknown.stderr).contains("unknown fault \"flood\""), "{}", text(&unknown.stderr));

    deployment.ok("up", &[]);
    let status = deployment.ok("status", &[]);
    let proxy = deployment.ports["live-a-0"] + 3 * BROKERS;
    assert!(status.contains(&format!("(as 127.0.0.1:{proxy})")), "{status}");
    assert!(status.contains("proxy-analytics-2"), "{status}");

    let report = deployment.dir.path().join("chaos.json");
    let begun = Instant::now();
    let run = chaos(&[
        "--duration",
        "2m",
        "--seed",
        "20",
        "--rate",
        "100",
        "--drain-timeout",
        "5m",
        "--report-json",
        report.to_str().expect("utf-8"),
    ]);
    let stdout = text(&run.stdout);
    assert!(
        run.status.success(),
        "chaos failed ({}):\n{stdout}\n{}\n{}",
        run.status,
        text(&run.stderr),
        warnings(&deployment.run_dir().join("logs"))
    );
    assert!(stdout.contains("verdict: PASS"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("the JSON report")).expect("JSON");
    let kinds = report["faults_by_kind"].as_object().expect("faults by kind");
    for kind in ["kill", "pause", "cut"] {
        assert!(kinds.keys().any(|k| k.starts_with(kind)), "no {kind} fault: {kinds:?}");
    }
    assert!(report["faults_total"].as_u64() >= Some(10), "{stdout}");
    assert_eq!(
        report["faults"].as_array().map(Vec::len),
        report["faults_total"].as_u64().map(|n| n as usize)
    );
    assert_eq!(report["acknowledged_missing"], 0, "{stdout}");
    assert_eq!(report["windows"]["loss"], 0, "{stdout}");
    assert_eq!(report["windows"]["open"], 0, "{stdout}");
    let acknowledged = report["witness"]["acknowledged"].as_u64().expect("acknowledged");
    assert!(acknowledged > 5_000, "{stdout}");
    assert!(
        report["parquet_distinct_ids"].as_u64() > Some(acknowledged),
        "simulators' too: {stdout}"
    );
    // Duplicates are counted, not only flagged: rows beyond the distinct ids, and per tier.
    let (rows, distinct) =
        (report["parquet_rows"].as_u64(), report["parquet_distinct_ids"].as_u64());
    assert_eq!(report["parquet_duplicate_rows"].as_u64(), rows.zip(distinct).map(|(r, d)| r - d));
    assert!(report["duplicated_events"].is_object(), "{stdout}");
    assert!(stdout.contains("duplicate rows in Parquet"), "{stdout}");
    // A cut went through a proxy: its log says so.
    let cuts = std::fs::read_dir(deployment.run_dir().join("logs"))
        .expect("logs")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("proxy-"))
        .filter(|e| std::fs::read_to_string(e.path()).is_ok_and(|log| log.contains("SIGUSR1: cut")))
        .count();
    assert!(cuts > 0, "no proxy was cut");
    // Every process runs again but the simulators, which chaos stopped with the traffic.
    for (name, (_, state)) in deployment.status() {
        let expected = if name.starts_with("simulator-") { "stopped" } else { "alive" };
        assert_eq!(state, expected, "{name}");
    }
    eprintln!("chaos, 2 minutes, in {:?}:\n{stdout}", begun.elapsed());

    // `--faults` limits the kinds: after `up` starts the simulators again, cuts only.
    deployment.ok("up", &[]);
    let only = deployment.dir.path().join("cuts.json");
    let run = chaos(&[
        "--duration",
        "5s",
        "--faults",
        "cut",
        "--rate",
        "50",
        "--drain-timeout",
        "3m",
        "--report-json",
        only.to_str().expect("utf-8"),
    ]);
    assert!(run.status.success(), "{}\n{}", text(&run.stdout), text(&run.stderr));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&only).expect("the JSON report")).expect("JSON");
    let kinds = report["faults_by_kind"].as_object().expect("faults by kind");
    assert!(!kinds.is_empty() && kinds.keys().all(|k| k.starts_with("cut ")), "{kinds:?}");
}

/// The warnings and errors of every log in `logs` (the last 20 lines of each that has any):
/// what a failed chaos run leaves to be read, since its directory goes with the test.
fn warnings(logs: &Path) -> String {
    let mut found = String::new();
    let Ok(entries) = std::fs::read_dir(logs) else { return found };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
    paths.sort();
    for path in paths {
        let Ok(log) = std::fs::read_to_string(&path) else { continue };
        let lines: Vec<&str> =
            log.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();
        if lines.is_empty() {
            continue;
        }
        found.push_str(&format!("--- {} ({} warnings):\n", path.display(), lines.len()));
        for line in &lines[lines.len().saturating_sub(20)..] {
            found.push_str(line);
            found.push('\n');
        }
    }
    found
}
