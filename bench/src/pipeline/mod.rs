//! `tributary-bench pipeline`: the whole pipeline as `tributary up` runs it — ZooKeeper,
//! SeaweedFS, the schema registry, two live clusters and the analytics cluster of three
//! brokers each, HAProxy, two frontend agents, the mirror, the loader, the audit service and
//! Prometheus, each its own process — driven by `frontend-agent simulate` at stepped offered
//! rates. For each step it reports the events per second each tier carried, each tier's
//! backlog when the offered load stopped and how long the pipeline took to drain it,
//! freshness (agent accept → visible in analytics, → committed in Parquet) at p50/p99, the
//! CPU-seconds per million events of every process (`/proc`; equally, CPU-µs per event) and
//! its peak resident memory. The sustained rate is the highest step at which every tier kept
//! up: the agents accepted what was offered, no tier's backlog grew past a few seconds of
//! traffic (the loader's: its interval), and everything drained. After the last step it asks
//! the audit service for every window's verdict.
//!
//! `cargo build --release --workspace && target/release/tributary-bench pipeline --out bench/results/DATE-pipeline`

mod deployment;
mod freshness;
mod probe;
mod report;
mod results;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use deployment::{Deployment, Settings};
use probe::{Counts, Probe, ProcSample, TOPICS};
use results::{ProcessUse, Run, Step, Verdicts};

/// The unmeasured traffic before the first step.
const WARM_UP: Duration = Duration::from_secs(5);
const WARM_UP_RATE: u64 = 1000;

#[derive(Debug, Clone, clap::Args)]
pub struct PipelineArgs {
    /// Offered rates, events per second over both live clusters, one step each, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "25000,50000,100000,150000,200000,300000,400000,500000",
        value_parser = clap::value_parser!(u64).range(2..=10_000_000)
    )]
    rates: Vec<u64>,
    /// How long each step offers its rate.
    #[arg(long, default_value = "60s", value_parser = service::duration::parse_positive)]
    step: Duration,
    /// How long after a step the pipeline may take to drain before the step counts as not
    /// kept up.
    #[arg(long, default_value = "120s", value_parser = service::duration::parse_positive)]
    drain_max: Duration,
    /// Go on stepping after a step is not kept up (by default the run stops there).
    #[arg(long)]
    all_steps: bool,
    /// The loader's interval between rounds.
    #[arg(long, default_value = "10s", value_parser = service::duration::parse_positive)]
    loader_interval: Duration,
    /// The audit window of every tier.
    #[arg(long, default_value = "10s", value_parser = service::duration::parse_positive)]
    audit_window: Duration,
    /// Replicas of every partition (acks all is answered at min(2, this)).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=3))]
    replication_factor: u32,
    /// The topology's first port; it uses this one to 1100 above it.
    #[arg(long, default_value_t = 27000, value_parser = clap::value_parser!(u16).range(1024..=60000))]
    base_port: u16,
    /// The release binaries (`tributary`, every service, `frontend-agent`); by default those
    /// beside this one.
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Where the deployment keeps its data; a temporary directory by default.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Where report.md, results.json, throughput.svg and the topology go.
    #[arg(long, default_value = "bench-results/pipeline")]
    out: PathBuf,
    /// Run nothing: write report.md and throughput.svg again from a run's results.json.
    #[arg(long, value_name = "RESULTS_JSON")]
    render: Option<PathBuf>,
}

pub async fn run(args: PipelineArgs) -> anyhow::Result<()> {
    service::tls::install_crypto_provider();
    if let Some(results) = &args.render {
        let text = std::fs::read_to_string(results)
            .with_context(|| format!("cannot read {}", results.display()))?;
        let run: Run = serde_json::from_str(&text).context("not a pipeline results.json")?;
        return report::write(&run, &args.out, None);
    }
    let bin_dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()?.parent().context("no binary directory")?.to_owned(),
    };
    let temp;
    let work = match &args.work_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            dir.clone()
        }
        None => {
            temp = tempfile_dir()?;
            temp.path().to_owned()
        }
    };
    let settings = Settings {
        base_port: args.base_port,
        replication_factor: args.replication_factor,
        loader_interval: args.loader_interval,
        audit_window: args.audit_window,
        bin_dir,
    };
    eprintln!("starting the deployment under {} …", work.display());
    let deployment = Deployment::up(&work, &settings)?;
    let probe = Probe::new(&deployment).await?;
    let stop = CancellationToken::new();
    let analytics = (0..3).map(|i| format!("127.0.0.1:{}", deployment.ports.broker(2, i)));
    let samples =
        freshness::spawn(analytics.collect(), deployment::ANALYTICS_PARTITIONS, stop.clone());

    // A few seconds of traffic first, unmeasured: every topic is created in the live
    // clusters and by the mirror in analytics, and every connection is open.
    eprintln!("warming up …");
    let mut commits_from = BTreeMap::new();
    let warm = PipelineArgs { step: WARM_UP, all_steps: true, ..args.clone() };
    step(&deployment, &probe, &samples, &mut commits_from, WARM_UP_RATE, &warm).await?;

    let mut steps = Vec::new();
    for &rate in &args.rates {
        let step = step(&deployment, &probe, &samples, &mut commits_from, rate, &args).await?;
        eprintln!("{}", report::step_line(&step));
        let kept_up = step.kept_up();
        steps.push(step);
        if !kept_up && !args.all_steps {
            break;
        }
    }
    let verdicts = verdicts(&probe, &deployment, &args).await;
    stop.cancel();
    let run = Run {
        date: report::now_utc(),
        machine: report::machine(),
        step_seconds: args.step.as_secs_f64(),
        loader_interval_seconds: args.loader_interval.as_secs_f64(),
        replication_factor: args.replication_factor,
        steps,
        verdicts,
    };
    report::write(&run, &args.out, Some(deployment.topology()))?;
    drop(deployment);
    Ok(())
}

fn tempfile_dir() -> anyhow::Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new().prefix("tributary-pipeline-").tempdir()?)
}

/// Resource use of every process, sampled while a step runs.
#[derive(Default)]
struct Usage {
    start: BTreeMap<String, f64>,
    last: BTreeMap<String, ProcSample>,
    peak: BTreeMap<String, u64>,
}

impl Usage {
    fn sample(&mut self, pids: &[(String, i32)]) {
        for (name, pid) in pids {
            if let Some(sample) = probe::proc_sample(*pid) {
                self.start.entry(name.clone()).or_insert(sample.cpu_seconds);
                let peak = self.peak.entry(name.clone()).or_default();
                *peak = (*peak).max(sample.rss_bytes);
                self.last.insert(name.clone(), sample);
            }
        }
    }

    fn result(&self) -> BTreeMap<String, ProcessUse> {
        self.last
            .iter()
            .map(|(name, last)| {
                let cpu_seconds = last.cpu_seconds - self.start.get(name).copied().unwrap_or(0.0);
                (name.clone(), ProcessUse { cpu_seconds, rss_peak_bytes: self.peak[name] })
            })
            .collect()
    }
}

fn process_pids(deployment: &Deployment, simulators: &[(String, i32)]) -> Vec<(String, i32)> {
    let mut pids = deployment.pids();
    pids.extend(simulators.iter().cloned());
    pids
}

async fn step(
    deployment: &Deployment,
    probe: &Probe,
    samples: &freshness::Samples,
    commits_from: &mut BTreeMap<i32, i64>,
    rate: u64,
    args: &PipelineArgs,
) -> anyhow::Result<Step> {
    eprintln!("step: {rate} events/s for {:?}", args.step);
    let before = counts(probe).await?;
    samples.take();
    let mut usage = Usage::default();
    usage.sample(&deployment.pids());
    let mut children: Vec<Child> = deployment.simulators(rate, args.step)?;
    let names: Vec<(String, i32)> = deployment::LIVE
        .iter()
        .zip(&children)
        .map(|(cluster, child)| (format!("simulator-{cluster}"), child.id() as i32))
        .collect();
    usage.sample(&names);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while !children.iter_mut().all(|c| matches!(c.try_wait(), Ok(Some(_)))) {
        tick.tick().await;
        usage.sample(&process_pids(deployment, &names));
    }
    // The simulators offer rate × step events; their start and exit add a moment.
    let seconds = args.step.as_secs_f64();
    let offered_end = counts(probe).await?;

    let drain_started = Instant::now();
    let mut drained = offered_end;
    let drain_seconds = loop {
        if drained.drained() {
            break Some(drain_started.elapsed().as_secs_f64());
        }
        if drain_started.elapsed() > args.drain_max {
            break None;
        }
        tick.tick().await;
        usage.sample(&deployment.pids());
        drained = counts(probe).await?;
    };
    usage.sample(&deployment.pids());

    let tier = |f: fn(&Counts) -> u64| f(&offered_end) - f(&before);
    let tiers = [tier(|c| c.accepted), tier(|c| c.live), tier(|c| c.mirrored), tier(|c| c.loaded)];
    let backlog = offered_end.backlog();
    let seen = samples.take();
    let mut visible: Vec<i64> = seen.iter().map(|s| s.read_ms - s.time_ms).collect();
    let mut parquet = Vec::with_capacity(seen.len());
    let mut by_partition: BTreeMap<i32, Vec<freshness::Seen>> = BTreeMap::new();
    for s in &seen {
        by_partition.entry(s.partition).or_default().push(*s);
    }
    for (partition, mut seen) in by_partition {
        let from = commits_from.get(&partition).copied().unwrap_or(0);
        let commits = probe.commits_from(freshness::TOPIC, partition, from).await?;
        if let Some(last) = commits.last() {
            commits_from.insert(partition, last.end);
        }
        seen.sort_by_key(|s| s.offset);
        let mut records = commits.iter().peekable();
        for s in &seen {
            while records.peek().is_some_and(|r| r.end <= s.offset) {
                records.next();
            }
            match records.peek() {
                Some(r) if r.start <= s.offset => parquet.push(r.committed_at_ms - s.time_ms),
                _ => {}
            }
        }
    }
    let quantiles = [0.5, 0.99, 1.0];
    let mut step = Step {
        offered: rate,
        seconds,
        tiers,
        backlog,
        drain_seconds,
        visible_ms: freshness::percentiles(&mut visible, &quantiles),
        visible_samples: seen.len(),
        parquet_ms: freshness::percentiles(&mut parquet, &quantiles),
        processes: usage.result(),
        shortfalls: Vec::new(),
    };
    step.shortfalls = shortfalls(&step, args);
    Ok(step)
}

/// Every tier's count; retried a few times while a service is slow to answer.
async fn counts(probe: &Probe) -> anyhow::Result<Counts> {
    let mut attempt = 0;
    loop {
        match probe.counts().await {
            Ok(counts) => return Ok(counts),
            Err(e) if attempt >= 10 => return Err(e.context("cannot read the tiers' counts")),
            Err(_) => attempt += 1,
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Why a step was not kept up: the agents accepted less than 97 % of the offer, a tier's
/// backlog at the end of the offer exceeded 5 s of it (the loader's: its interval + 10 s), or
/// the pipeline did not drain within --drain-max.
fn shortfalls(step: &Step, args: &PipelineArgs) -> Vec<String> {
    let rate = step.offered as f64;
    let mut out = Vec::new();
    if (step.tiers[0] as f64) < 0.97 * rate * step.seconds {
        out.push(format!("agents accepted {:.0}/s of {}/s", step.rate(0), step.offered));
    }
    let allowed = [5.0, 5.0, args.loader_interval.as_secs_f64() + 10.0];
    for ((tier, backlog), seconds) in
        ["agent", "mirror", "loader"].iter().zip(step.backlog).zip(allowed)
    {
        if backlog as f64 > rate * seconds {
            out.push(format!("{tier} {:.1} s behind", backlog as f64 / rate));
        }
    }
    if step.drain_seconds.is_none() {
        out.push(format!("not drained within {:?}", args.drain_max));
    }
    out
}

/// The audit's verdicts over every window, once none is open any more (or after a while).
async fn verdicts(probe: &Probe, deployment: &Deployment, args: &PipelineArgs) -> Verdicts {
    let deadline =
        Instant::now() + 2 * (args.audit_window + args.loader_interval) + Duration::from_secs(60);
    loop {
        let mut verdicts = Verdicts::default();
        for topic in TOPICS {
            let Ok(windows) = probe.windows(deployment.ports.audit(), topic).await else {
                continue;
            };
            for window in windows.as_array().into_iter().flatten() {
                match window["verdict"].as_str() {
                    Some("complete") => verdicts.complete += 1,
                    Some("duplication") => verdicts.duplication += 1,
                    Some("loss") => verdicts.loss += 1,
                    _ => verdicts.open += 1,
                }
            }
        }
        if verdicts.open == 0 || Instant::now() > deadline {
            return verdicts;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
