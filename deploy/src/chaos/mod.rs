//! `tributary chaos`: faults injected at random, one after another, into the processes of a
//! running `tributary up` deployment while traffic flows; then the traffic stopped, the
//! pipeline drained and the books checked from outside — every event an agent acknowledged
//! must be in Parquet, and the audit may report no window in loss.
//!
//! Traffic is the topology's simulators plus the run's own witness traffic (see [`witness`]),
//! whose event ids are known, so that "acknowledged and not in Parquet" is a set difference
//! rather than a difference of counters that restarts reset.

pub mod books;
pub mod fault;
pub mod witness;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;

use crate::multiprocess::pki::{OPERATOR, PkiPaths};
use crate::multiprocess::{DeployError, Deployment, State, plan};
use books::{Audit, Behind, Lag};
use fault::{Fault, FaultKind};
use witness::{Witness, WitnessCounts};

/// What to run.
#[derive(Debug, Clone)]
pub struct ChaosOptions {
    /// How long faults are injected.
    pub duration: Duration,
    /// Seeds the choice of faults, targets and timings (the run's traffic is random anyway).
    pub seed: u64,
    /// The kinds of fault to choose from; empty: every kind the topology has targets for.
    pub faults: Vec<FaultKind>,
    /// Witness events per second, over all agents.
    pub rate: u64,
    /// How long to wait, after the faults, for every acknowledged event to reach Parquet and
    /// every window to be decided.
    pub drain_timeout: Duration,
    /// Also write the report as JSON here.
    pub report_json: Option<PathBuf>,
}

/// Why a run could not be made or finished.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChaosError {
    #[error(transparent)]
    Deploy(#[from] DeployError),
    #[error("{name} is not running: start the deployment with `tributary up` first")]
    NotRunning { name: String },
    #[error("no process of this topology can take a {kind} fault{hint}")]
    NoTarget { kind: &'static str, hint: &'static str },
    #[error("cannot make the operator's HTTPS client: {0}")]
    Client(String),
    #[error("cannot open the loader's store: {0}")]
    Store(#[from] object_store::Error),
    #[error("cannot read the Parquet files: {0}")]
    Parquet(#[from] hdfs_loader::LoadError),
    #[error("cannot write the report to {path}: {source}")]
    Report { path: PathBuf, source: std::io::Error },
}

/// What a run did and found.
#[derive(Debug, Clone, Serialize)]
pub struct ChaosReport {
    pub seed: u64,
    pub duration_s: u64,
    /// Faults per kind and role, e.g. `kill live broker`.
    pub faults_by_kind: BTreeMap<String, u64>,
    pub faults_total: u64,
    /// Restarts that failed (the process was restarted by a later attempt or at the end).
    pub failed_restarts: u64,
    pub witness: WitnessCounts,
    /// Events the agents counted, summed over the audit's windows (simulators' and witness').
    pub agent_events: i64,
    pub parquet_rows: u64,
    pub parquet_distinct_ids: u64,
    /// Rows in Parquet whose event id another row has too.
    pub parquet_duplicate_rows: u64,
    /// Per tier, the events the audit counted beyond its reference tier (what the agents
    /// accepted), summed over the windows: duplicates, by where they arose.
    pub duplicated_events: BTreeMap<String, i64>,
    /// Witness events acknowledged by an agent and not in Parquet: must be 0.
    pub acknowledged_missing: u64,
    /// Audit windows by verdict.
    pub windows: BTreeMap<String, u64>,
    /// Per downstream tier, the window it was furthest behind the agents in.
    pub longest_behind: BTreeMap<&'static str, Behind>,
    /// How long the drain took after the faults stopped.
    pub drain_s: u64,
    /// Whether every acknowledged event was found and every window decided in time.
    pub drained: bool,
    pub faults: Vec<Fault>,
}

impl ChaosReport {
    /// Nothing acknowledged is missing and no window is in loss.
    pub fn passed(&self) -> bool {
        self.drained
            && self.acknowledged_missing == 0
            && self.windows.get("loss").copied().unwrap_or(0) == 0
    }
}

/// The first 8 bytes of every witness event id of a run: new with every run, so a run on a
/// deployment that holds an earlier run's events (same seed or not) never sends their ids
/// again. Drawn from the seed's generator too, which keeps the seed's fault schedule as it
/// was when the id came from it alone.
fn witness_run_id(rng: &mut StdRng) -> [u8; 8] {
    let seeded: [u8; 8] = rng.random();
    let fresh: [u8; 8] = rand::random();
    std::array::from_fn(|i| seeded[i] ^ fresh[i])
}

/// Runs the chaos: faults for `options.duration`, then the drain and the report.
pub fn run(
    deployment: &Deployment,
    options: &ChaosOptions,
    out: &mut dyn std::io::Write,
) -> Result<ChaosReport, ChaosError> {
    for status in deployment.status()? {
        if !matches!(status.state, State::Alive { .. }) {
            return Err(ChaosError::NotRunning { name: status.name });
        }
    }
    let mut plans: Vec<(FaultKind, Vec<(String, &'static str)>)> = Vec::new();
    let chosen = !options.faults.is_empty();
    let kinds = if chosen { options.faults.as_slice() } else { &FaultKind::ALL[..] };
    for &kind in kinds {
        let targets = fault::targets(deployment, kind);
        if targets.is_empty() && !chosen {
            continue;
        }
        if targets.is_empty() {
            let hint = if kind == FaultKind::Cut {
                " (set broker.proxies = true in the topology to put a proxy in front of every \
                 broker)"
            } else {
                ""
            };
            return Err(ChaosError::NoTarget { kind: kind.as_str(), hint });
        }
        plans.push((kind, targets));
    }
    let topology = deployment.topology();
    let http = operator_client(deployment)?;
    let store = books::store(topology)?;
    let runtime = tokio::runtime::Runtime::new()
        .map_err(|e| DeployError::Io { path: PathBuf::from("tokio runtime"), source: e })?;
    let output = runtime
        .block_on(hdfs_loader::Output::open(&plan::loader_output_config(topology), store))?;
    let mut rng = StdRng::seed_from_u64(options.seed);
    let agents: Vec<String> =
        topology.live.values().map(|live| plan::agent_url(topology, live.agent_port)).collect();
    let run_id = witness_run_id(&mut rng);
    let witness = Witness::start(agents, options.rate, run_id, http.clone(), runtime.handle());
    let audit = Audit::new(topology, http);
    let lag = std::sync::Arc::new(std::sync::Mutex::new(Lag::default()));
    let watching = tokio_util::sync::CancellationToken::new();
    runtime.spawn(watch(audit.clone(), lag.clone(), watching.clone()));

    let begun = Instant::now();
    let mut faults: Vec<Fault> = Vec::new();
    line(
        out,
        format_args!(
            "chaos: seed {}, {} of faults",
            options.seed,
            service::duration::format(options.duration)
        ),
    )?;
    while begun.elapsed() < options.duration {
        let (kind, targets) = &plans[rng.random_range(0..plans.len())];
        let target = targets[rng.random_range(0..targets.len())].clone();
        let fault = fault::inject(deployment, *kind, target, &mut rng, begun);
        line(out, format_args!("{}", fault_line(&fault)))?;
        faults.push(fault);
        // Anything a failed restart left down is started again before the next fault.
        restart_left_down(deployment, &[], out)?;
        fault::reap_children();
        std::thread::sleep(Duration::from_millis(rng.random_range(1_000..4_000)));
    }

    line(out, format_args!("faults done; stopping traffic and draining"))?;
    let (counts, acknowledged) = runtime.block_on(witness.stop());
    let simulators: Vec<String> = deployment
        .components()
        .iter()
        .filter(|c| c.name.starts_with("simulator-"))
        .map(|c| c.name.clone())
        .collect();
    if !simulators.is_empty() {
        deployment.down(&simulators, &mut std::io::sink())?;
    }
    restart_left_down(deployment, &simulators, out)?;
    let topics = frontend_agent::simulate::TOPICS;
    let drain_begun = Instant::now();
    let (mut rows, mut ids) = (0, Default::default());
    let mut windows = BTreeMap::new();
    let mut drained = false;
    while drain_begun.elapsed() < options.drain_timeout {
        fault::reap_children();
        // A process that dies while the pipeline drains (a restart into a fault's aftermath)
        // is started again too: the drain waits for the pipeline, not for a dead process.
        restart_left_down(deployment, &simulators, out)?;
        (rows, ids) = runtime.block_on(books::parquet_ids(&output, &topics))?;
        let missing = acknowledged.iter().filter(|id| !ids.contains(*id)).count();
        let (caught_up, seen) =
            runtime.block_on(async { (audit.caught_up().await, audit.windows().await) });
        if let Some(seen) = seen {
            windows = seen;
        }
        let open = windows.values().filter(|w| w.verdict == "open").count();
        if missing == 0 && caught_up && open == 0 && !windows.is_empty() {
            drained = true;
            break;
        }
        line(
            out,
            format_args!(
                "  draining: {missing} acknowledged events not in Parquet yet, {open} windows open"
            ),
        )?;
        std::thread::sleep(Duration::from_secs(5));
    }
    watching.cancel();
    let now = service::now_ms();
    let longest_behind = lag.lock().unwrap_or_else(std::sync::PoisonError::into_inner).longest(now);
    let mut faults_by_kind = BTreeMap::new();
    for fault in &faults {
        *faults_by_kind.entry(format!("{} {}", fault.kind.as_str(), fault.role)).or_default() += 1;
    }
    let duplicated_events = runtime.block_on(audit.duplicated()).unwrap_or_default();
    let mut verdicts: BTreeMap<String, u64> =
        ["complete", "duplication", "loss", "open"].map(|v| (v.to_owned(), 0)).into();
    for window in windows.values() {
        *verdicts.entry(window.verdict.clone()).or_default() += 1;
    }
    let report = ChaosReport {
        seed: options.seed,
        duration_s: options.duration.as_secs(),
        faults_total: faults.len() as u64,
        failed_restarts: faults.iter().filter(|f| f.error.is_some()).count() as u64,
        faults_by_kind,
        acknowledged_missing: acknowledged.iter().filter(|id| !ids.contains(*id)).count() as u64,
        witness: counts,
        agent_events: windows.values().map(|w| w.tiers.get("agent").copied().unwrap_or(0)).sum(),
        parquet_rows: rows,
        parquet_distinct_ids: ids.len() as u64,
        parquet_duplicate_rows: rows.saturating_sub(ids.len() as u64),
        duplicated_events,
        windows: verdicts,
        longest_behind,
        drain_s: drain_begun.elapsed().as_secs(),
        drained,
        faults,
    };
    if let Some(path) = &options.report_json {
        let json = serde_json::to_vec_pretty(&report).expect("the report serializes");
        std::fs::write(path, json)
            .map_err(|source| ChaosError::Report { path: path.clone(), source })?;
    }
    Ok(report)
}

/// Samples the audit's windows every two seconds into `lag` until `stop`.
async fn watch(
    audit: Audit,
    lag: std::sync::Arc<std::sync::Mutex<Lag>>,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        let caught_up = audit.caught_up().await;
        if let Some(windows) = audit.windows().await {
            lag.lock().unwrap_or_else(std::sync::PoisonError::into_inner).observe(
                &windows,
                caught_up,
                service::now_ms(),
            );
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }
}

/// Starts every process the faults left down, but `keep_down`: a restart that failed is tried
/// again here.
fn restart_left_down(
    deployment: &Deployment,
    keep_down: &[String],
    out: &mut dyn std::io::Write,
) -> Result<(), ChaosError> {
    let statuses = deployment.status()?;
    for name in left_down(statuses.iter().map(|s| (s.name.as_str(), s.state)), keep_down) {
        match deployment.restart(name) {
            Ok(pid) => line(out, format_args!("  restarted {name} (pid {pid})"))?,
            Err(e) => line(out, format_args!("  {name} did not restart: {e}"))?,
        }
    }
    Ok(())
}

/// The processes not running, but `keep_down`. Every process ran when the chaos began, so one
/// that does not now was left down by a fault: killed and not yet restarted (`Dead`), or
/// restarted and exited before it was ready, which takes its pid file away (`Stopped`).
fn left_down<'a>(
    statuses: impl Iterator<Item = (&'a str, State)>,
    keep_down: &[String],
) -> Vec<&'a str> {
    statuses
        .filter(|(name, state)| {
            !matches!(state, State::Alive { .. }) && !keep_down.iter().any(|k| k == name)
        })
        .map(|(name, _)| name)
        .collect()
}

/// A client presenting the operator's certificate when the deployment speaks TLS.
fn operator_client(deployment: &Deployment) -> Result<reqwest::Client, ChaosError> {
    let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(10));
    if deployment.topology().security.tls {
        let pki = PkiPaths::new(&deployment.topology().run_dir);
        let tls = service::tls::client_from_settings(
            Some(&pki.ca()),
            Some(&pki.cert(OPERATOR)),
            Some(&pki.key(OPERATOR)),
        )
        .map_err(|e| ChaosError::Client(e.to_string()))?
        .ok_or_else(|| ChaosError::Client("no CA".into()))?;
        builder = builder.tls_backend_preconfigured((*tls).clone());
    }
    builder.build().map_err(|e| ChaosError::Client(e.to_string()))
}

fn fault_line(fault: &Fault) -> String {
    let mut text = format!(
        "{:>7.1}s  {:<5} {:<24} held {:>5} ms",
        fault.at_ms as f64 / 1000.0,
        fault.kind.as_str(),
        fault.target,
        fault.held_ms
    );
    if let Some(ms) = fault.restart_ms {
        text.push_str(&format!(", ready again in {ms} ms"));
    }
    if let Some(error) = &fault.error {
        text.push_str(&format!(", FAILED: {error}"));
    }
    text
}

fn line(out: &mut dyn std::io::Write, text: fmt::Arguments<'_>) -> Result<(), ChaosError> {
    writeln!(out, "{text}").map_err(|e| ChaosError::Deploy(DeployError::Output(e)))
}

impl fmt::Display for ChaosReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "chaos report (seed {}, {} s of faults)", self.seed, self.duration_s)?;
        writeln!(f, "  faults injected               {:>10}", self.faults_total)?;
        for (kind, n) in &self.faults_by_kind {
            writeln!(f, "    {kind:<27} {n:>10}")?;
        }
        writeln!(f, "  restarts that failed          {:>10}", self.failed_restarts)?;
        let w = &self.witness;
        writeln!(f, "  witness events sent           {:>10}", w.sent)?;
        writeln!(f, "    acknowledged by an agent    {:>10}", w.acknowledged)?;
        writeln!(f, "    refused (error status)      {:>10}", w.refused)?;
        writeln!(f, "    unanswered                  {:>10}", w.unanswered)?;
        writeln!(f, "  events counted by the agents  {:>10}", self.agent_events)?;
        writeln!(f, "  rows in Parquet               {:>10}", self.parquet_rows)?;
        writeln!(f, "  distinct event ids in Parquet {:>10}", self.parquet_distinct_ids)?;
        writeln!(f, "  duplicate rows in Parquet     {:>10}", self.parquet_duplicate_rows)?;
        writeln!(f, "  events duplicated, by tier (audit)")?;
        if self.duplicated_events.values().all(|&n| n == 0) {
            writeln!(f, "    in no tier                  {:>10}", 0)?;
        }
        for (tier, n) in self.duplicated_events.iter().filter(|(_, n)| **n > 0) {
            writeln!(f, "    {tier:<27} {n:>10}")?;
        }
        writeln!(f, "  acknowledged, not in Parquet  {:>10}", self.acknowledged_missing)?;
        for (verdict, n) in &self.windows {
            writeln!(f, "  audit windows {verdict:<15} {n:>10}")?;
        }
        for (tier, behind) in &self.longest_behind {
            writeln!(
                f,
                "  longest behind: {tier:<7} {:>6.1} s (topic {}, window {}){}",
                behind.ms as f64 / 1000.0,
                behind.topic,
                behind.window_start,
                if behind.still_behind { ", still behind" } else { "" }
            )?;
        }
        writeln!(
            f,
            "  drained in {} s{}",
            self.drain_s,
            if self.drained { "" } else { " — NOT drained before the timeout" }
        )?;
        write!(f, "  verdict: {}", if self.passed() { "PASS" } else { "FAIL" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two runs with the same seed on one deployment: the second's witness ids must not be
    /// the first's (its events would be taken for duplicates in Parquet), and the seed's
    /// generator goes on as it did, so the same faults follow.
    #[test]
    fn witness_ids_are_new_with_every_run_and_the_schedule_stays_the_seeds() {
        let (mut first, mut second) = (StdRng::seed_from_u64(1), StdRng::seed_from_u64(1));
        assert_ne!(witness_run_id(&mut first), witness_run_id(&mut second));
        assert_eq!(first.random::<u64>(), second.random::<u64>());
        // Where the seed's generator stood after the id when it was drawn from it alone.
        let mut drawn_alone = StdRng::seed_from_u64(1);
        let _: [u8; 8] = drawn_alone.random();
        let mut now = StdRng::seed_from_u64(1);
        witness_run_id(&mut now);
        assert_eq!(drawn_alone.random::<u64>(), now.random::<u64>());
    }

    #[test]
    fn a_process_whose_restart_failed_is_left_down_and_started_again() {
        let alive = State::Alive { pid: 1, since: std::time::SystemTime::UNIX_EPOCH };
        let statuses = [
            ("broker-live-a-0", alive),
            ("broker-live-a-1", State::Dead { pid: 7 }),
            // Its restart exited before it was ready: the pid file went with it.
            ("broker-live-a-2", State::Stopped),
            ("simulator-live-a", State::Stopped),
        ];
        let keep_down = ["simulator-live-a".to_owned()];
        assert_eq!(
            left_down(statuses.into_iter(), &keep_down),
            ["broker-live-a-1", "broker-live-a-2"]
        );
    }
}
