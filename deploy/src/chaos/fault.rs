//! The faults `tributary chaos` injects, one at a time, into the processes of a running
//! deployment: `kill -9` and a restart as `up` would do it, a SIGSTOP longer than the
//! process's ZooKeeper session followed by SIGCONT, and a cut and restored network path to a
//! broker (its proxy told to drop every connection and refuse new ones, then to heal).

use std::str::FromStr;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rand::RngExt;
use rand::rngs::StdRng;
use serde::Serialize;

use crate::multiprocess::{Deployment, State};

/// A kind of fault (`--faults kill,pause,cut`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultKind {
    /// `kill -9` of a live broker, analytics broker, agent, the mirror, the loader, the audit
    /// service, the schema registry or ZooKeeper, then a restart.
    Kill,
    /// SIGSTOP of a broker or of a ZooKeeper client service for longer than its session
    /// timeout, then SIGCONT.
    Pause,
    /// Every connection through a broker's proxy dropped and new ones refused, then healed.
    Cut,
}

impl FaultKind {
    pub const ALL: [FaultKind; 3] = [FaultKind::Kill, FaultKind::Pause, FaultKind::Cut];

    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Pause => "pause",
            FaultKind::Cut => "cut",
        }
    }
}

impl FromStr for FaultKind {
    type Err = String;

    fn from_str(s: &str) -> Result<FaultKind, String> {
        FaultKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown fault {s:?}: expected kill, pause or cut"))
    }
}

/// One fault as it happened.
#[derive(Debug, Clone, Serialize)]
pub struct Fault {
    /// Since the run began.
    pub at_ms: u64,
    pub kind: FaultKind,
    /// The process (for a cut, the broker whose path was cut).
    pub target: String,
    /// What sort of process: `live broker`, `analytics broker`, `agent`, `mirror`, `loader`,
    /// `audit`, `schema registry`, `zookeeper`.
    pub role: &'static str,
    /// How long the process was down, stopped or cut off.
    pub held_ms: u64,
    /// For a kill: how long the restart took until the process was ready again.
    pub restart_ms: Option<u64>,
    /// A restart that failed (the next fault is not injected until it is running again).
    pub error: Option<String>,
}

/// The process's role, if chaos may kill it.
pub fn role(deployment: &Deployment, name: &str) -> Option<&'static str> {
    let topology = deployment.topology();
    if let Some(rest) = name.strip_prefix("broker-") {
        let cluster = rest.rsplit_once('-').map(|(cluster, _)| cluster)?;
        return Some(if cluster == topology.analytics.name {
            "analytics broker"
        } else {
            "live broker"
        });
    }
    if name.starts_with("agent-") {
        return Some("agent");
    }
    match name {
        "mirror" => Some("mirror"),
        "loader" => Some("loader"),
        "audit" => Some("audit"),
        "schema-registry" => Some("schema registry"),
        "zookeeper" => Some("zookeeper"),
        _ => None,
    }
}

/// The processes a fault of `kind` may hit: every killable process for a kill; brokers and
/// the services that hold a ZooKeeper session (mirror, loader, audit) for a pause; brokers
/// with a proxy in front for a cut.
pub fn targets(deployment: &Deployment, kind: FaultKind) -> Vec<(String, &'static str)> {
    deployment
        .components()
        .iter()
        .filter_map(|c| Some((c.name.clone(), role(deployment, &c.name)?)))
        .filter(|(name, role)| match kind {
            FaultKind::Kill => true,
            FaultKind::Pause => {
                role.ends_with("broker") || ["mirror", "loader", "audit"].contains(role)
            }
            FaultKind::Cut => {
                role.ends_with("broker") && deployment.component(&proxy_name(name)).is_ok()
            }
        })
        .collect()
}

/// The proxy in front of a broker (`proxy-{cluster}-{id}` for `broker-{cluster}-{id}`).
pub fn proxy_name(broker: &str) -> String {
    format!("proxy-{}", broker.trim_start_matches("broker-"))
}

/// Injects one fault of `kind` into `target` and undoes it; blocks until the process is back.
pub fn inject(
    deployment: &Deployment,
    kind: FaultKind,
    (target, role): (String, &'static str),
    rng: &mut StdRng,
    begun: Instant,
) -> Fault {
    let at_ms = begun.elapsed().as_millis() as u64;
    let mut fault = Fault { at_ms, kind, target, role, held_ms: 0, restart_ms: None, error: None };
    let held = Instant::now();
    let outcome = match kind {
        FaultKind::Kill => kill_and_restart(deployment, &mut fault, rng),
        FaultKind::Pause => pause(deployment, &fault.target, rng),
        FaultKind::Cut => cut(deployment, &fault.target, rng),
    };
    if fault.held_ms == 0 {
        fault.held_ms = held.elapsed().as_millis() as u64;
    }
    fault.error = outcome.err();
    fault
}

fn pid_of(deployment: &Deployment, name: &str) -> Result<i32, String> {
    match deployment.state(name).map_err(|e| e.to_string())? {
        State::Alive { pid, .. } => Ok(pid),
        _ => Err(format!("{name} is not running")),
    }
}

fn signal(pid: i32, signal: Signal) -> Result<(), String> {
    kill(Pid::from_raw(pid), signal).map_err(|e| format!("{signal} to pid {pid}: {e}"))
}

fn kill_and_restart(
    deployment: &Deployment,
    fault: &mut Fault,
    rng: &mut StdRng,
) -> Result<(), String> {
    let pid = pid_of(deployment, &fault.target)?;
    let down = Instant::now();
    signal(pid, Signal::SIGKILL)?;
    // Gone from the process table (or a zombie of ours, reaped here) before it is restarted.
    let deadline = Instant::now() + Duration::from_secs(10);
    while matches!(deployment.state(&fault.target), Ok(State::Alive { .. })) {
        reap_children();
        if Instant::now() > deadline {
            return Err(format!("pid {pid} still runs 10 s after SIGKILL"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    reap_children();
    std::thread::sleep(Duration::from_millis(rng.random_range(500..3_000)));
    fault.held_ms = down.elapsed().as_millis() as u64;
    let restarted = Instant::now();
    deployment.restart(&fault.target).map_err(|e| one_line(&e.to_string()))?;
    fault.restart_ms = Some(restarted.elapsed().as_millis() as u64);
    Ok(())
}

fn pause(deployment: &Deployment, target: &str, rng: &mut StdRng) -> Result<(), String> {
    let pid = pid_of(deployment, target)?;
    let pause =
        session_timeout(deployment, target) + Duration::from_millis(rng.random_range(500..2_500));
    signal(pid, Signal::SIGSTOP)?;
    std::thread::sleep(pause);
    signal(pid, Signal::SIGCONT)
}

fn cut(deployment: &Deployment, broker: &str, rng: &mut StdRng) -> Result<(), String> {
    let proxy = pid_of(deployment, &proxy_name(broker))?;
    signal(proxy, Signal::SIGUSR1)?;
    std::thread::sleep(Duration::from_millis(rng.random_range(2_000..8_000)));
    signal(proxy, Signal::SIGUSR2)
}

/// The ZooKeeper session timeout the process asks for (its config's
/// `zookeeper_session_timeout_ms`), as ZooKeeper grants it: within 2 and 20 ticks.
fn session_timeout(deployment: &Deployment, name: &str) -> Duration {
    let tick = deployment.topology().zookeeper.tick_ms;
    let asked = deployment
        .component(name)
        .ok()
        .and_then(|c| c.config.as_ref())
        .and_then(|config| config.content.render(std::path::Path::new("")).ok())
        .and_then(|text| text.parse::<toml::Table>().ok())
        .and_then(|table| table.get("zookeeper_session_timeout_ms")?.as_integer())
        .and_then(|ms| u64::try_from(ms).ok())
        .unwrap_or(6_000);
    Duration::from_millis(asked.clamp(2 * tick, 20 * tick))
}

/// Collects the exit status of every child of this process that has ended (processes
/// restarted here are its children), so none lingers as a zombie.
pub fn reap_children() {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

fn one_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_owned()
}
