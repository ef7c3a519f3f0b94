//! `tributary demo`: the whole two-datacenter pipeline of the paper's §5 in one process, on
//! embedded defaults — the in-process coordination backend instead of ZooKeeper, a local
//! directory instead of HDFS/S3. Every component is the same library code its own binary runs,
//! and they talk only through the broker protocol, the coordination tree, the registry's HTTP
//! API and the object store, exactly as separate processes do.
//!
//! Two live clusters (two brokers each) take events from simulated frontend agents; the mirror
//! copies every topic into the analytics cluster (two brokers); the loader writes it to Parquet
//! every minute; the audit service reconciles the counts of every tier and serves its
//! dashboard. On Ctrl-C or after `--duration` the demo drains — agents stop, their spools
//! empty, the mirror catches up, the loader runs once more, the last windows close — and then
//! prints (and with `--summary-json` writes) what happened.

pub mod cluster;
mod data_dir;
mod error;
pub mod registry;
mod summary;
pub mod tls;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::{Cluster, ClusterSpec, session};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use error::DemoError;
pub use summary::{Summary, WindowVerdicts, iceberg_query};

/// The event topics the simulators produce.
pub const TOPICS: [&str; 3] = ["page-view", "click", "search"];
/// Names of the live clusters (datacenters).
const LIVE: [&str; 2] = ["live-a", "live-b"];
const ANALYTICS: &str = "analytics";
const BROKERS_PER_CLUSTER: u32 = 2;
/// Longest any one drain step may take before the demo gives up on it and says so.
const DRAIN_STEP_MAX: Duration = Duration::from_secs(120);

/// What `tributary demo` is asked to do.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Run this long, then drain; until Ctrl-C if unset.
    pub duration: Option<Duration>,
    pub data_dir: PathBuf,
    pub summary_json: Option<PathBuf>,
    /// Events per second each simulated frontend produces.
    pub rate: u64,
    /// Audit window (demo default 10 s, so that windows close while you watch).
    pub window_ms: i64,
    /// How long after a window closes the audit waits for late counts of the streaming tiers.
    pub grace_ms: i64,
    pub loader_interval: Duration,
    /// Where the dashboard listens; port 0 picks a free one.
    pub dashboard: String,
    pub status_interval: Duration,
    /// Mutual TLS between the services (`--tls`); plaintext otherwise.
    pub tls: bool,
}

impl Default for DemoOptions {
    fn default() -> DemoOptions {
        DemoOptions {
            duration: None,
            data_dir: PathBuf::from("/tmp/tributary-demo"),
            summary_json: None,
            rate: 500,
            window_ms: 10_000,
            grace_ms: 5_000,
            loader_interval: Duration::from_secs(60),
            dashboard: "127.0.0.1:8080".into(),
            status_interval: Duration::from_secs(5),
            tls: false,
        }
    }
}

/// Runs the demo until `options.duration` passes or `interrupt` is cancelled, drains, and
/// returns the summary (also printed, and written to `--summary-json`).
pub async fn run(options: DemoOptions, interrupt: CancellationToken) -> Result<Summary, DemoError> {
    let started = Instant::now();
    let mut pipeline = Pipeline::start(&options).await?;
    pipeline.announce(&options);
    let simulators = Simulators::start(&pipeline.agents, options.rate);
    let watch = pipeline.watch(started)?;
    pipeline.serve(&options, &watch, &interrupt).await?;
    let simulated = simulators.stop().await;
    pipeline.drain(&options, &watch, simulated).await?;
    let summary = pipeline.summary(&watch, started).await?;
    pipeline.stop().await?;
    print!("{summary}");
    if let Some(path) = &options.summary_json {
        let json = serde_json::to_string_pretty(&summary).expect("the summary serializes");
        std::fs::write(path, json + "\n")
            .map_err(|source| DemoError::SummaryFile { path: path.clone(), source })?;
    }
    Ok(summary)
}

/// Every component of the demo, running.
struct Pipeline {
    embedded: ::cluster::Embedded,
    data_dir: PathBuf,
    registry: registry::Registry,
    registry_client: Arc<schema_registry::RegistryClient>,
    live: Vec<Cluster>,
    analytics: Cluster,
    agents: Vec<frontend_agent::Agent>,
    agent_urls: Vec<String>,
    stop_http: CancellationToken,
    http_tasks: Vec<JoinHandle<std::io::Result<()>>>,
    mirror: mirror::Mirror,
    mirror_metrics_url: String,
    warehouse: PathBuf,
    /// The loader's Iceberg tables.
    output: hdfs_loader::Output,
    loader: hdfs_loader::Loader,
    dashboard_url: String,
    stop_audit: CancellationToken,
    audit_task: JoinHandle<Result<(), audit::AuditError>>,
    tls: Option<tls::DemoTls>,
}

/// Every service of the demo that has a certificate with `--tls`.
fn service_names() -> Vec<String> {
    let mut names: Vec<String> = LIVE
        .iter()
        .chain([&ANALYTICS])
        .flat_map(|c| (0..BROKERS_PER_CLUSTER).map(|id| cluster::broker_name(c, id)))
        .collect();
    names.extend(LIVE.iter().map(|c| format!("agent-{c}")));
    names.extend(["schema-registry", "mirror", "loader", "audit"].map(String::from));
    names
}

impl Pipeline {
    /// Starts, in pipeline order, the registry, the clusters, the agents, the mirror, the
    /// loader and the audit service.
    async fn start(options: &DemoOptions) -> Result<Pipeline, DemoError> {
        let data_dir = data_dir::prepare(&options.data_dir)?;
        let tls = match options.tls {
            true => Some(tls::DemoTls::prepare(&data_dir, &service_names())?),
            false => None,
        };
        let embedded = ::cluster::Embedded::new();
        let registry =
            registry::Registry::start_with(&data_dir.join("registry"), tls.as_ref()).await?;
        let registry_client = Arc::new(registry.client()?);
        let spec = |name: &str| ClusterSpec::new(name, BROKERS_PER_CLUSTER, 2);
        let mut live = Vec::new();
        for name in LIVE {
            live.push(Cluster::start_with(&embedded, &spec(name), &data_dir, tls.as_ref()).await?);
        }
        let analytics =
            Cluster::start_with(&embedded, &spec(ANALYTICS), &data_dir, tls.as_ref()).await?;
        let stop_http = CancellationToken::new();
        let (agents, agent_urls, http_tasks) = start_agents(
            options,
            &embedded,
            &live,
            (&registry, &registry_client),
            &data_dir,
            &stop_http,
            tls.as_ref(),
        )
        .await?;
        let (mirror, mirror_metrics_url) =
            start_mirror(&embedded, &live, &analytics, tls.as_ref()).await?;
        let warehouse = data_dir.join("warehouse");
        std::fs::create_dir_all(&warehouse)
            .map_err(|source| DemoError::DataDir { path: warehouse.clone(), source })?;
        let warehouse_url = format!("file://{}", warehouse.display());
        let store = hdfs_loader::store_from_url(&warehouse_url)?;
        let mut loader_config = hdfs_loader::Config {
            store: Some(warehouse_url),
            format: hdfs_loader::Format::Iceberg,
            host_name: Some("loader-1".into()),
            audit_window_ms: options.window_ms,
            ..hdfs_loader::Config::default()
        };
        if let Some(tls) = &tls {
            loader_config.tls = tls.service("loader");
        }
        let output = hdfs_loader::Output::open(&loader_config, Arc::clone(&store)).await?;
        let loader = hdfs_loader::Loader::new(
            loader_config,
            session(&embedded, &analytics.chroot)?,
            store,
            Arc::clone(&registry_client),
        )?;
        let stop_audit = CancellationToken::new();
        let (dashboard_url, audit_task) = start_audit(
            options,
            &embedded,
            (&live, &analytics),
            &registry,
            &stop_audit,
            tls.as_ref(),
        )
        .await?;
        Ok(Pipeline {
            embedded,
            data_dir,
            registry,
            registry_client,
            live,
            analytics,
            agents,
            agent_urls,
            stop_http,
            http_tasks,
            mirror,
            mirror_metrics_url,
            warehouse,
            output,
            loader,
            dashboard_url,
            stop_audit,
            audit_task,
            tls,
        })
    }

    /// Says where everything is.
    fn announce(&self, options: &DemoOptions) {
        println!("Tributary demo: the paper's two-datacenter pipeline in one process");
        match &self.tls {
            Some(tls) => {
                println!(
                    "  mutual TLS between every service (no ACLs), all on 127.0.0.1; \
                     certificates signed by {}",
                    tls.ca().display()
                );
                println!(
                    "  the dashboard wants a client certificate or its token: open {}?token={}",
                    self.dashboard_url,
                    tls.token().unwrap_or_default()
                );
            }
            // Security is each binary's (TLS, principals, ACLs): the demo is for one machine.
            None => println!(
                "  plaintext, no authentication (--tls for mutual TLS): brokers, registry, \
                 agents and mirror listen on 127.0.0.1 only; the dashboard on {}",
                self.dashboard_url
            ),
        }
        for cluster in self.live.iter().chain([&self.analytics]) {
            println!("  {:<9} brokers {}", cluster.name, cluster.addrs.join(", "));
            println!("  {:<9} Kafka   {}", "", cluster.kafka_addrs.join(","));
        }
        println!("  registry  {}", self.registry.url);
        for (cluster, url) in self.live.iter().zip(&self.agent_urls) {
            println!("  agent     {url}/v1/events/{{topic}}  → {}", cluster.name);
        }
        println!("  mirror    {}", self.mirror_metrics_url);
        println!(
            "  Iceberg   {} (SQL catalog {})",
            self.warehouse.display(),
            self.warehouse.join("catalog.db").display()
        );
        println!("  dashboard {}", self.dashboard_url);
        println!("  data      {}", self.data_dir.display());
        match options.duration {
            Some(d) => {
                println!("running for {} s, then draining (Ctrl-C drains sooner)", d.as_secs())
            }
            None => println!("running until Ctrl-C, then draining"),
        }
    }

    /// What the status line reads.
    fn watch(&self, started: Instant) -> Result<Watch, DemoError> {
        service::tls::install_crypto_provider();
        Ok(Watch {
            agents: self.agents.clone(),
            mirror: self.mirror.totals(),
            output: self.output.clone(),
            analytics: ::cluster::Registry::new(session(&self.embedded, &self.analytics.chroot)?),
            dashboard_url: self.dashboard_url.clone(),
            http: match &self.tls {
                Some(tls) => reqwest::Client::builder()
                    .tls_backend_preconfigured((*tls.operator()).clone())
                    .build()
                    .map_err(|e| DemoError::Tls(e.to_string()))?,
                None => reqwest::Client::new(),
            },
            tls: self.tls.as_ref().map(|t| t.operator()),
            started,
        })
    }

    /// Until `--duration` passes or `interrupt`: a status line every `status_interval`, a
    /// loader run every `loader_interval`.
    async fn serve(
        &mut self,
        options: &DemoOptions,
        watch: &Watch,
        interrupt: &CancellationToken,
    ) -> Result<(), DemoError> {
        let deadline = options.duration.map(|d| tokio::time::Instant::now() + d);
        let mut next_load = tokio::time::Instant::now() + options.loader_interval;
        let mut status = tokio::time::interval(options.status_interval);
        status.tick().await;
        let mut last = watch.sample().await;
        loop {
            let until_deadline = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = interrupt.cancelled() => { println!("interrupted: draining"); return Ok(()) }
                _ = until_deadline => { println!("--duration reached: draining"); return Ok(()) }
                _ = status.tick() => {
                    let now = watch.sample().await;
                    println!("{}", now.line(&last));
                    last = now;
                }
                _ = tokio::time::sleep_until(next_load) => {
                    let summary = self.loader.run(interrupt).await?;
                    tracing::info!(rows = summary.rows, "loader run");
                    next_load = tokio::time::Instant::now() + options.loader_interval;
                }
            }
        }
    }

    /// The drain, once the frontends stopped: the agents ship what they spooled, the mirror
    /// catches up, the loader runs once more, and the last windows close.
    async fn drain(
        &mut self,
        options: &DemoOptions,
        watch: &Watch,
        simulated: u64,
    ) -> Result<(), DemoError> {
        println!("frontends stopped after {simulated} events; draining the agents' spools");
        let agents = &self.agents;
        wait_until("the agents' spools to be acknowledged", || async {
            agents.iter().all(|a| a.unacknowledged() == 0)
        })
        .await;
        // The agents publish their last counts within a second; the mirror then copies them.
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        println!("waiting for the mirror to catch up");
        let live_registries: Vec<::cluster::Registry> = self
            .live
            .iter()
            .map(|c| Ok(::cluster::Registry::new(session(&self.embedded, &c.chroot)?)))
            .collect::<Result<_, DemoError>>()?;
        let group = mirror::Config::default().group;
        let tls = self.tls.as_ref().map(|t| t.operator());
        wait_until("the mirror to catch up", || async {
            for registry in &live_registries {
                let mut ends = client::group::lag::LogEnds::with_tls(tls.clone());
                match client::group::lag::total_lag_with(&mut ends, registry, &group).await {
                    Ok(Some(0)) => {}
                    // Behind, or a broker is down (its lag unknown).
                    Ok(_) => return false,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot read the mirror's lag");
                        return false;
                    }
                }
            }
            true
        })
        .await;
        println!("running the loader once more");
        let final_load = self.loader.run(&CancellationToken::new()).await?;
        for error in &final_load.errors {
            tracing::error!(%error, "loader");
        }
        let last_window_end = service::now_ms().div_euclid(options.window_ms) * options.window_ms;
        let decided_at = last_window_end + options.window_ms + options.grace_ms;
        println!(
            "waiting {} s for the last audit window to close",
            (decided_at - service::now_ms()).max(0) / 1000
        );
        wait_until("the audit to decide every window", || async {
            service::now_ms() > decided_at + 1_000
                && watch.audit().await.is_some_and(|a| a.caught_up && a.windows.open == 0)
        })
        .await;
        Ok(())
    }

    /// What every tier did, read back from the agents, the mirror, the Parquet files and the
    /// audit. The loaded ids are counted in bounded memory, spilled to the data directory: a
    /// long demo at a high rate loads millions.
    async fn summary(&self, watch: &Watch, started: Instant) -> Result<Summary, DemoError> {
        let audit_summary = watch.audit().await.unwrap_or_default();
        let mut loaded_rows = 0;
        let mut ids = hdfs_loader::readback::DistinctIds::new_in(&self.data_dir)
            .map_err(|source| DemoError::DataDir { path: self.data_dir.clone(), source })?;
        for topic in TOPICS {
            loaded_rows +=
                hdfs_loader::readback::count_topic(&self.output, topic, &mut ids).await?;
        }
        let distinct_ids_loaded = tokio::task::block_in_place(|| ids.count())
            .map_err(|source| DemoError::DataDir { path: self.data_dir.clone(), source })?;
        Ok(Summary {
            accepted: self.agents.iter().map(|a| a.accepted()).sum(),
            acknowledged: self.agents.iter().map(|a| a.acknowledged()).sum(),
            mirrored: self.mirror.totals().messages(),
            mirrored_events: self.mirror.totals().events(),
            loaded_rows,
            distinct_ids_loaded,
            windows: audit_summary.windows,
            warehouse: self.warehouse.clone(),
            dashboard_url: self.dashboard_url.clone(),
            duration_s: started.elapsed().as_secs_f64(),
        })
    }

    /// Stops everything in pipeline order.
    async fn stop(self) -> Result<(), DemoError> {
        self.loader.close().await;
        self.stop_http.cancel();
        for task in self.http_tasks {
            let _ = task.await;
        }
        for agent in &self.agents {
            agent.shutdown().await?;
        }
        self.mirror.shutdown().await?;
        self.stop_audit.cancel();
        match self.audit_task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(DemoError::Audit(e.to_string())),
            Err(e) => return Err(DemoError::Audit(e.to_string())),
        }
        for cluster in self.live.into_iter().chain([self.analytics]) {
            cluster.stop().await;
        }
        self.registry.stop().await;
        drop(self.registry_client);
        Ok(())
    }
}

type AgentHandles = (Vec<frontend_agent::Agent>, Vec<String>, Vec<JoinHandle<std::io::Result<()>>>);

/// Frontend agents: one per live datacenter, each with its HTTP input.
async fn start_agents(
    options: &DemoOptions,
    embedded: &::cluster::Embedded,
    live: &[Cluster],
    (registry, registry_client): (&registry::Registry, &Arc<schema_registry::RegistryClient>),
    data_dir: &std::path::Path,
    stop_http: &CancellationToken,
    tls: Option<&tls::DemoTls>,
) -> Result<AgentHandles, DemoError> {
    let (mut agents, mut urls, mut tasks) = (Vec::new(), Vec::new(), Vec::new());
    for cluster in live {
        let mut config = frontend_agent::Config {
            registry: registry.url.clone(),
            // The agent validates that its config names the brokers; the session passed below
            // is what it actually uses to find them.
            brokers: cluster.addrs.clone(),
            spool_dir: data_dir.join("agents").join(&cluster.name),
            host_name: Some(format!("frontend-{}", cluster.name)),
            service: "demo".into(),
            audit_window_ms: options.window_ms,
            audit_publish_ms: 1_000,
            ..frontend_agent::Config::default()
        };
        if let Some(tls) = tls {
            config.tls = tls.service(&format!("agent-{}", cluster.name));
        }
        let brokers = frontend_agent::Brokers::Cluster(session(embedded, &cluster.chroot)?);
        let agent =
            frontend_agent::Agent::start(config, brokers, Arc::clone(registry_client)).await?;
        let listener = bind("127.0.0.1:0", "agent HTTP input").await?;
        urls.push(format!("{}://{}", scheme(tls), local_addr(&listener, "agent HTTP input")?));
        let http = frontend_agent::serve_http(listener, agent.clone(), stop_http.clone());
        tasks.push(tokio::spawn(http));
        agents.push(agent);
    }
    Ok((agents, urls, tasks))
}

/// The mirror in the analytics datacenter, and its metrics URL.
async fn start_mirror(
    embedded: &::cluster::Embedded,
    live: &[Cluster],
    analytics: &Cluster,
    tls: Option<&tls::DemoTls>,
) -> Result<(mirror::Mirror, String), DemoError> {
    let mut config = mirror::Config::default();
    if let Some(tls) = tls {
        config.tls = tls.service("mirror");
    }
    let sources = live
        .iter()
        .map(|c| Ok((c.name.clone(), session(embedded, &c.chroot)?)))
        .collect::<Result<Vec<_>, DemoError>>()?;
    let metrics = bind("127.0.0.1:0", "mirror metrics").await?;
    let url = format!("{}://{}/metrics", scheme(tls), local_addr(&metrics, "mirror metrics")?);
    let target = session(embedded, &analytics.chroot)?;
    let mirror = mirror::Mirror::start(config, sources, target, Some(metrics)).await?;
    Ok((mirror, url))
}

/// The audit service and its dashboard; the dashboard's URL.
async fn start_audit(
    options: &DemoOptions,
    embedded: &::cluster::Embedded,
    (live, analytics): (&[Cluster], &Cluster),
    registry: &registry::Registry,
    stop: &CancellationToken,
    tls: Option<&tls::DemoTls>,
) -> Result<(String, JoinHandle<Result<(), audit::AuditError>>), DemoError> {
    let mut config = audit::Config {
        audit_window_ms: options.window_ms,
        grace_ms: options.grace_ms,
        // The loader runs every `loader_interval`: until then its shortfall is not loss.
        loader_grace_ms: Some(
            options.grace_ms + options.loader_interval.as_millis() as i64 + options.window_ms,
        ),
        refresh_s: 5,
        ..audit::Config::default()
    };
    if let Some(tls) = tls {
        config.tls = tls.service("audit");
        config.token_file = Some(tls.token_file());
    }
    let dashboard = match bind(&options.dashboard, "dashboard").await {
        Ok(listener) => listener,
        // The usual port is taken (another demo?): any free one will do.
        Err(_) => bind("127.0.0.1:0", "dashboard").await?,
    };
    let url = format!("{}://{}/", scheme(tls), local_addr(&dashboard, "dashboard")?);
    let live = live
        .iter()
        .map(|c| Ok((c.name.clone(), session(embedded, &c.chroot)?)))
        .collect::<Result<Vec<_>, DemoError>>()?;
    let analytics = session(embedded, &analytics.chroot)?;
    let task = tokio::spawn(audit::run(
        config,
        analytics,
        live,
        registry.client()?,
        dashboard,
        stop.clone(),
    ));
    Ok((url, task))
}

/// Simulated frontends, one per agent, until stopped.
struct Simulators {
    stop: CancellationToken,
    tasks: Vec<JoinHandle<Result<frontend_agent::SimReport, frontend_agent::simulate::SimError>>>,
}

impl Simulators {
    fn start(agents: &[frontend_agent::Agent], rate: u64) -> Simulators {
        let stop = CancellationToken::new();
        let tasks = agents
            .iter()
            .map(|agent| {
                let target = frontend_agent::Target::Agent(agent.clone());
                let stop = stop.clone();
                tokio::spawn(async move {
                    let topics: Vec<String> = TOPICS.iter().map(|t| (*t).to_owned()).collect();
                    // Until stopped: the drain cancels it.
                    let forever = Duration::from_secs(365 * 24 * 3600);
                    frontend_agent::simulate(target, rate, forever, &topics, stop).await
                })
            })
            .collect();
        Simulators { stop, tasks }
    }

    /// Stops them; the events they sent in all.
    async fn stop(self) -> u64 {
        self.stop.cancel();
        let mut simulated = 0;
        for task in self.tasks {
            match task.await {
                Ok(Ok(report)) => simulated += report.accepted_total(),
                Ok(Err(e)) => tracing::error!(error = %e, "simulator failed"),
                Err(e) => tracing::error!(error = %e, "simulator task failed"),
            }
        }
        simulated
    }
}

fn scheme(tls: Option<&tls::DemoTls>) -> &'static str {
    if tls.is_some() { "https" } else { "http" }
}

async fn bind(addr: &str, what: &str) -> Result<tokio::net::TcpListener, DemoError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| DemoError::Bind { what: what.into(), source })
}

fn local_addr(
    listener: &tokio::net::TcpListener,
    what: &str,
) -> Result<std::net::SocketAddr, DemoError> {
    listener.local_addr().map_err(|source| DemoError::Bind { what: what.into(), source })
}

/// Polls `done` every 200 ms for up to [`DRAIN_STEP_MAX`]; says so if it gave up.
async fn wait_until<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + DRAIN_STEP_MAX;
    while !done().await {
        if Instant::now() > deadline {
            println!("gave up waiting for {what} after {} s", DRAIN_STEP_MAX.as_secs());
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What the status line is made of.
struct Watch {
    agents: Vec<frontend_agent::Agent>,
    mirror: mirror::Totals,
    output: hdfs_loader::Output,
    analytics: ::cluster::Registry,
    dashboard_url: String,
    http: reqwest::Client,
    /// The operator's TLS, with `--tls`: the loader status's log ends.
    tls: Option<Arc<rustls::ClientConfig>>,
    started: Instant,
}

/// The audit's `/api/summary`, the part the demo reads.
#[derive(Debug, Default, serde::Deserialize)]
struct AuditSummary {
    caught_up: bool,
    #[serde(default)]
    windows: WindowVerdicts,
}

struct Sample {
    at: Instant,
    elapsed_s: u64,
    acknowledged: u64,
    mirrored_events: u64,
    /// Rows committed to Parquet, and bytes of the analytics logs not yet loaded.
    loader: Option<(u64, i64)>,
    audit: Option<AuditSummary>,
}

impl Watch {
    async fn audit(&self) -> Option<AuditSummary> {
        let url = format!("{}api/summary", self.dashboard_url);
        let response = self.http.get(url).timeout(Duration::from_secs(5)).send().await.ok()?;
        response.json().await.ok()
    }

    async fn sample(&self) -> Sample {
        Sample {
            at: Instant::now(),
            elapsed_s: self.started.elapsed().as_secs(),
            acknowledged: self.agents.iter().map(|a| a.acknowledged()).sum(),
            mirrored_events: self.mirror.events(),
            loader: self.loader().await,
            audit: self.audit().await,
        }
    }

    /// What the loader has committed, from its commit records, and how far behind it is.
    async fn loader(&self) -> Option<(u64, i64)> {
        let status =
            hdfs_loader::status(&self.output, Some(&self.analytics), self.tls.clone()).await;
        let status = status.map_err(|e| tracing::warn!(error = %e, "loader status")).ok()?;
        let rows = status.topics.iter().map(|t| t.rows).sum();
        let lag = status.topics.iter().flat_map(|t| &t.partitions).filter_map(|p| p.lag).sum();
        Some((rows, lag))
    }
}

impl Sample {
    /// One status line: events/s per tier since `last`, and the audit's verdicts so far.
    fn line(&self, last: &Sample) -> String {
        let seconds = self.at.duration_since(last.at).as_secs_f64().max(0.001);
        let rate = |now: u64, then: u64| now.saturating_sub(then) as f64 / seconds;
        let audit = match &self.audit {
            Some(a) if a.caught_up => {
                let w = &a.windows;
                let decided = w.complete + w.loss + w.duplication;
                format!(
                    "audit {}/{} windows complete, {} loss, {} duplication, {} open",
                    w.complete, decided, w.loss, w.duplication, w.open
                )
            }
            Some(_) => "audit catching up".into(),
            None => "audit not answering".into(),
        };
        let loader = match self.loader {
            Some((rows, lag_bytes)) => {
                format!("loader {rows} rows, {:.1} MB behind", lag_bytes as f64 / 1e6)
            }
            None => "loader status unavailable".into(),
        };
        format!(
            "[{:>4} s] agents {:>6.0} ev/s (acked {}) · mirror {:>6.0} ev/s · {loader} · {audit}",
            self.elapsed_s,
            rate(self.acknowledged, last.acknowledged),
            self.acknowledged,
            rate(self.mirrored_events, last.mirrored_events),
        )
    }
}
