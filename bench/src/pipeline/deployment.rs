//! The deployment under test: a topology file written for the run, started and stopped with
//! the real `tributary up`/`down`, and its simulators (`frontend-agent simulate --agent`).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

/// The live clusters of the topology, each with its agent.
pub const LIVE: [&str; 2] = ["live-a", "live-b"];
/// Partitions of every topic in the live clusters.
pub const PARTITIONS: i32 = 6;
/// Partitions the mirror gives each topic it creates in analytics (its `partitions`).
pub const ANALYTICS_PARTITIONS: i32 = 8;

/// Where each process listens, all on 127.0.0.1, from one base port.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    base: u16,
}

impl Ports {
    pub fn zookeeper(self) -> u16 {
        self.base
    }
    pub fn s3(self) -> u16 {
        self.base + 1
    }
    pub fn registry(self) -> u16 {
        self.base + 2
    }
    /// Broker `i` (0..3) of live cluster `c` (0, 1), or of analytics (`c` = 2).
    pub fn broker(self, c: u16, i: u16) -> u16 {
        self.base + 11 + 10 * c + i
    }
    pub fn lb(self, c: u16) -> u16 {
        self.base + 14 + 10 * c
    }
    pub fn agent(self, c: u16) -> u16 {
        self.base + 15 + 10 * c
    }
    pub fn mirror(self) -> u16 {
        self.base + 41
    }
    pub fn loader(self) -> u16 {
        self.base + 42
    }
    pub fn audit(self) -> u16 {
        self.base + 43
    }
    pub fn prometheus(self) -> u16 {
        self.base + 44
    }
    /// SeaweedFS's nine ports of its own.
    fn seaweed_base(self) -> u16 {
        self.base + 50
    }
    /// Every port the topology uses: each broker also serves `/metrics` 1000 above its port.
    fn all(self) -> Vec<u16> {
        let mut ports = vec![self.zookeeper(), self.s3(), self.registry()];
        for c in 0..3 {
            for i in 0..3 {
                ports.extend([self.broker(c, i), self.broker(c, i) + 1000]);
            }
        }
        for c in 0..2 {
            ports.extend([self.lb(c), self.agent(c)]);
        }
        ports.extend([self.mirror(), self.loader(), self.audit(), self.prometheus()]);
        ports.extend((0..9).map(|i| self.seaweed_base() + i));
        ports
    }
}

/// How the topology is set up.
#[derive(Debug, Clone)]
pub struct Settings {
    pub base_port: u16,
    pub replication_factor: u32,
    pub loader_interval: Duration,
    pub audit_window: Duration,
    /// `[binaries] dir`: the release binaries.
    pub bin_dir: PathBuf,
}

/// A running `tributary up` deployment; `tributary down` when dropped.
pub struct Deployment {
    tributary: PathBuf,
    topology: PathBuf,
    pub run_dir: PathBuf,
    pub ports: Ports,
    pub bin_dir: PathBuf,
}

impl Deployment {
    /// Writes the topology under `work` and starts it.
    pub fn up(work: &Path, settings: &Settings) -> anyhow::Result<Deployment> {
        // What the flags name first, then what the machine has: a wrong --bin-dir is said so
        // whatever ports are free.
        let tributary = settings.bin_dir.join("tributary");
        if !tributary.is_file() {
            bail!("{} is missing: cargo build --release --workspace first", tributary.display());
        }
        let ports = Ports { base: settings.base_port };
        let taken: Vec<u16> = ports
            .all()
            .into_iter()
            .filter(|&p| TcpListener::bind(("127.0.0.1", p)).is_err())
            .collect();
        if !taken.is_empty() {
            bail!("ports {taken:?} are in use; pick another --base-port");
        }
        let run_dir = work.join("run");
        let topology = work.join("topology.toml");
        std::fs::write(&topology, topology_text(&run_dir, ports, settings))
            .with_context(|| format!("cannot write {}", topology.display()))?;
        let deployment =
            Deployment { tributary, topology, run_dir, ports, bin_dir: settings.bin_dir.clone() };
        let out = Command::new(&deployment.tributary)
            .args(["up", "--config"])
            .arg(&deployment.topology)
            .output()
            .context("cannot run tributary up")?;
        if !out.status.success() {
            bail!(
                "tributary up failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(deployment)
    }

    pub fn topology(&self) -> &Path {
        &self.topology
    }

    /// Every process of the deployment, by the name `tributary status` shows, and its pid.
    pub fn pids(&self) -> Vec<(String, i32)> {
        let Ok(entries) = std::fs::read_dir(self.run_dir.join("pids")) else { return Vec::new() };
        let mut pids: Vec<(String, i32)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().strip_suffix(".pid")?.to_owned();
                let pid = std::fs::read_to_string(e.path()).ok()?.trim().parse().ok()?;
                Some((name, pid))
            })
            .collect();
        pids.sort();
        pids
    }

    /// Starts one simulator per live cluster, `rate` events/s between them, for `duration`.
    pub fn simulators(&self, rate: u64, duration: Duration) -> anyhow::Result<Vec<Child>> {
        let simulator = self.bin_dir.join("frontend-agent");
        let logs = self.run_dir.join("logs");
        let mut children = Vec::new();
        for (c, cluster) in LIVE.iter().enumerate() {
            let share = rate / LIVE.len() as u64 + u64::from(c == 0) * (rate % LIVE.len() as u64);
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(logs.join(format!("bench-simulator-{cluster}.log")))
                .context("cannot open the simulator's log")?;
            let child = Command::new(&simulator)
                .arg("simulate")
                .arg("--agent")
                .arg(format!("http://127.0.0.1:{}", self.ports.agent(c as u16)))
                .arg("--rate")
                .arg(share.to_string())
                .arg("--duration")
                .arg(format!("{}ms", duration.as_millis()))
                .stdout(log.try_clone()?)
                .stderr(log)
                .stdin(Stdio::null())
                .spawn()
                .with_context(|| format!("cannot start {}", simulator.display()))?;
            children.push(child);
        }
        Ok(children)
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        let down =
            Command::new(&self.tributary).args(["down", "--config"]).arg(&self.topology).output();
        if let Err(e) = down {
            eprintln!("tributary down: {e}");
        }
    }
}

/// The topology: `deploy/local.toml`'s shape (three brokers per cluster, every partition on
/// `replication_factor` of them, acks all answered at two), plaintext, no simulators of its
/// own (the bench runs them, step by step).
fn topology_text(run_dir: &Path, ports: Ports, s: &Settings) -> String {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace");
    let brokers = |c: u16| {
        let ports: Vec<String> = (0..3).map(|i| ports.broker(c, i).to_string()).collect();
        ports.join(", ")
    };
    let min_insync = s.replication_factor.min(2);
    format!(
        r#"# Written by tributary-bench pipeline.
run_dir = "{run_dir}"
ready_timeout_ms = 60000
audit_window_ms = {window}

[binaries]
dir = "{bin_dir}"

[zookeeper]
port = {zookeeper}

[seaweedfs]
s3_port = {s3}
base_port = {seaweed}

[schema_registry]
port = {registry}
settings = {{ register_schemas = "{schemas}" }}

[broker]
settings = {{ num_partitions = {PARTITIONS}, flush_ms = 200, default_replication_factor = {rf}, min_insync_replicas = {min_insync} }}
# The native pipeline is measured: no Kafka listeners (their ports would fall outside the block).
kafka_port_offset = 0

[live.live-a]
broker_ports = [{la}]
lb_port = {la_lb}
agent_port = {la_agent}

[live.live-b]
broker_ports = [{lb}]
lb_port = {lb_lb}
agent_port = {lb_agent}

[analytics]
name = "analytics"
broker_ports = [{an}]

[simulator]
rate = 0

[mirror]
port = {mirror}
settings = {{ partitions = {ANALYTICS_PARTITIONS} }}

[loader]
interval = "{interval}ms"
metrics_port = {loader}

[audit]
port = {audit}
settings = {{ grace_ms = {grace} }}

[prometheus]
port = {prometheus}
rules = "{rules}"

[security]
tls = false
zookeeper_acls = false
"#,
        run_dir = run_dir.display(),
        window = s.audit_window.as_millis(),
        bin_dir = s.bin_dir.display(),
        zookeeper = ports.zookeeper(),
        s3 = ports.s3(),
        seaweed = ports.seaweed_base(),
        registry = ports.registry(),
        schemas = repo.join("events/schemas").display(),
        rf = s.replication_factor,
        la = brokers(0),
        la_lb = ports.lb(0),
        la_agent = ports.agent(0),
        lb = brokers(1),
        lb_lb = ports.lb(1),
        lb_agent = ports.agent(1),
        an = brokers(2),
        mirror = ports.mirror(),
        interval = s.loader_interval.as_millis(),
        loader = ports.loader(),
        audit = ports.audit(),
        // A window's verdict waits for the loader's next round and the mirror's commit.
        grace = (s.loader_interval + s.audit_window).as_millis(),
        prometheus = ports.prometheus(),
        rules = repo.join("deploy/prometheus/alerts.yml").display(),
    )
}
