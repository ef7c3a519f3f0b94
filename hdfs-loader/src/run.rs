//! One run over every selected topic's partitions (`run`), and the same at an interval
//! (`serve`). Partitions are shared between loaders through owner nodes of the consumer-group
//! layout (`/consumers/{group}/owners/…`, claimed for this host for the length of a round);
//! the conditional commits fence loaders that share one anyway.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cluster::{Claim, Coordinator, Registry};
use futures::StreamExt;
use object_store::ObjectStore;
use schema_registry::RegistryClient;
use tokio_util::sync::CancellationToken;

use crate::audit::LoaderAudit;
use crate::load::{PartitionLoad, PartitionLoader, TopicContext};
use crate::metrics::Metrics;
use crate::table::compact::CompactOptions;
use crate::table::maintain::Maintained;
use crate::table::{TableError, Tables};
use crate::{Config, Format, LoadError, Output};

/// What one run did.
#[derive(Debug, Default, serde::Serialize)]
pub struct RunSummary {
    pub run_id: String,
    pub partitions: Vec<PartitionLoad>,
    /// Partitions another loader owned, as `topic/broker-partition`.
    pub skipped: Vec<String>,
    /// Failures, one line each (topic, partition, offset, reason); the run went on with the
    /// other partitions.
    pub errors: Vec<String>,
    pub rows: u64,
    pub audit_records_published: usize,
}

/// A partition's load: what it committed, and how it ended.
type LoadOutcome = (PartitionLoad, Result<(), LoadError>);

/// The loader: what a run needs, kept across the rounds of `serve`.
pub struct Loader {
    config: Config,
    host: String,
    cluster: Registry,
    store: Arc<dyn ObjectStore>,
    registry: Arc<RegistryClient>,
    audit: Option<LoaderAudit>,
    /// TLS to the brokers.
    tls: Option<Arc<rustls::ClientConfig>>,
    /// Topics whose committed counts the audit has loaded.
    audited_topics: Vec<String>,
    /// Per partition, the start of the last commit record a round saw: where the next round's
    /// listing of commit records begins.
    known_starts: std::sync::Mutex<HashMap<(String, i32), i64>>,
    metrics: Metrics,
    /// The Iceberg catalog, opened at the first run when the format is `iceberg`.
    tables: Option<Tables>,
}

impl Loader {
    pub fn new(
        config: Config,
        coordinator: Arc<dyn Coordinator>,
        store: Arc<dyn ObjectStore>,
        registry: Arc<RegistryClient>,
    ) -> Result<Loader, LoadError> {
        config.validate()?;
        let host = config.host();
        let cluster = Registry::new(coordinator);
        let tls = config.tls.client().map_err(crate::ConfigError::from)?;
        let audit = if config.audit {
            Some(LoaderAudit::new(
                &host,
                config.audit_window_ms,
                cluster.clone(),
                Arc::clone(&registry),
                tls.clone(),
            )?)
        } else {
            None
        };
        Ok(Loader {
            config,
            host,
            cluster,
            store,
            registry,
            audit,
            tls,
            audited_topics: Vec::new(),
            known_starts: std::sync::Mutex::new(HashMap::new()),
            metrics: Metrics::default(),
            tables: None,
        })
    }

    /// Loads every selected partition to the log end seen when its load starts.
    pub async fn run(&mut self, shutdown: &CancellationToken) -> Result<RunSummary, LoadError> {
        let run_id = format!("{:x}-{:08x}", service::now_ms(), rand::random::<u32>());
        let mut summary = RunSummary { run_id: run_id.clone(), ..RunSummary::default() };
        let filter = self.config.topic_filter()?;
        if self.config.format == Format::Iceberg
            && self.tables.is_none()
            && let Output::Iceberg(tables) =
                Output::open(&self.config, Arc::clone(&self.store)).await?
        {
            self.tables = Some(tables);
        }
        let mut topics = Vec::new();
        for topic in self.cluster.topics().await? {
            if !filter.selects(&topic) {
                continue;
            }
            let subject = format!("{topic}-value");
            let latest = match self.registry.latest(&subject).await {
                Ok(latest) => latest,
                Err(source) => {
                    summary.errors.push(
                        LoadError::Registry { topic: topic.clone(), source: Box::new(source) }
                            .to_string(),
                    );
                    continue;
                }
            };
            let reader = self.registry.schema(latest.id).await.map_err(|source| {
                LoadError::Registry { topic: topic.clone(), source: Box::new(source) }
            })?;
            let mut context = match TopicContext::new(&topic, latest.id, reader) {
                Ok(context) => context,
                Err(e) => {
                    summary.errors.push(e.to_string());
                    continue;
                }
            };
            if let Some(tables) = &self.tables {
                match tables.topic(&topic, &context.arrow).await {
                    Ok(table) => context.table = Some(table),
                    // The table cannot take the latest schema (a type it cannot widen to, a
                    // required field gone): load with the newest version it can take, so the
                    // topic goes on; what that version cannot read goes to the dead letters.
                    Err(TableError::SchemaChanged { difference, .. }) => {
                        match self.fitting_version(tables, &topic, &subject, latest.version).await {
                            Ok(Some(older)) => {
                                tracing::warn!(
                                    %topic,
                                    latest = latest.version,
                                    loading_with = older.reader_id,
                                    %difference,
                                    "the table cannot take the topic's latest schema; loading with the newest version it can take, and the messages that one cannot read go to the dead-letter table"
                                );
                                context = older;
                            }
                            Ok(None) => {
                                let e = LoadError::from(TableError::SchemaChanged {
                                    table: topic.clone(),
                                    difference,
                                });
                                summary.errors.push(e.to_string());
                                continue;
                            }
                            Err(e) => {
                                summary.errors.push(e.to_string());
                                continue;
                            }
                        }
                    }
                    Err(e) => {
                        summary.errors.push(e.to_string());
                        continue;
                    }
                }
            }
            topics.push(Arc::new(context));
        }
        // Counts of what this host committed before must be in place before any new commit.
        if let Some(audit) = &self.audit {
            for context in &topics {
                if !self.audited_topics.contains(&context.topic) {
                    match &self.tables {
                        Some(tables) => {
                            audit.count_own(&tables.commit_records(&context.topic).await?)
                        }
                        None => audit.load_topic(&*self.store, &context.topic).await?,
                    }
                    self.audited_topics.push(context.topic.clone());
                }
            }
        }
        let mut work = Vec::new();
        for context in &topics {
            for partition in self.cluster.partitions(&context.topic).await? {
                match self.cluster.leader(&context.topic, partition).await? {
                    Some((_, leader)) => work.push((Arc::clone(context), partition, leader.addr())),
                    None => summary
                        .errors
                        .push(format!("{}/{partition}: no live leader", context.topic)),
                }
            }
        }
        let this = &*self;
        let results: Vec<(String, i32, Option<LoadOutcome>)> =
            futures::stream::iter(work.into_iter().map(|(context, partition, addr)| {
                let run_id = run_id.clone();
                async move {
                    let result =
                        this.load_owned(&context, partition, addr, &run_id, shutdown).await;
                    (context.topic.clone(), partition, result)
                }
            }))
            .buffer_unordered(self.config.partitions_in_parallel)
            .collect()
            .await;
        for (topic, partition, result) in results {
            match result {
                Some((load, outcome)) => {
                    if let Some(audit) = &self.audit {
                        load.records.iter().for_each(|r| audit.count(r));
                    }
                    summary.rows += load.rows;
                    summary.partitions.push(load);
                    if let Err(e) = outcome {
                        tracing::error!(%topic, %partition, error = %e, "partition load failed");
                        summary.errors.push(e.to_string());
                    }
                }
                None => summary.skipped.push(format!("{topic}/{partition}")),
            }
        }
        summary.partitions.sort_by(|a, b| (&a.topic, &a.partition).cmp(&(&b.topic, &b.partition)));
        if let Some(audit) = &self.audit {
            match audit.publish().await {
                Ok(published) => summary.audit_records_published = published,
                Err(e) => {
                    tracing::warn!(error = %e, "audit counts not published; kept for the next round");
                    summary.errors.push(e.to_string());
                }
            }
        }
        Ok(summary)
    }

    /// Claims `partition` for this host, loads it, and releases it. `None`: another loader owns it.
    async fn load_owned(
        &self,
        context: &TopicContext,
        partition: i32,
        broker_addr: String,
        run_id: &str,
        shutdown: &CancellationToken,
    ) -> Option<LoadOutcome> {
        let group = &self.config.group;
        match self.cluster.claim(group, &context.topic, partition, &self.host).await {
            Ok(Claim::Claimed) => {}
            Ok(Claim::OwnedBy(owner)) => {
                tracing::debug!(topic = %context.topic, %partition, %owner, "owned by another loader");
                return None;
            }
            Err(e) => {
                let load = PartitionLoad {
                    topic: context.topic.clone(),
                    partition,
                    ..PartitionLoad::default()
                };
                return Some((load, Err(e.into())));
            }
        }
        let key = (context.topic.clone(), partition);
        let known_start = self.known_starts().get(&key).copied();
        let loader = PartitionLoader {
            config: &self.config,
            host: &self.host,
            run_id,
            store: Arc::clone(&self.store),
            registry: Arc::clone(&self.registry),
            topic: context,
            partition,
            broker_addr,
            tls: self.tls.clone(),
            shutdown: shutdown.clone(),
            known_start,
        };
        let result = loader.load().await;
        if let Some(start) = result.0.last_start {
            self.known_starts().insert(key, start);
        }
        if let Err(e) = self.cluster.release(group, &context.topic, partition, &self.host).await {
            tracing::warn!(topic = %context.topic, %partition, error = %e, "cannot release the partition; its owner node goes with the session");
        }
        Some(result)
    }

    /// Runs rounds every `interval` until `shutdown`; a failed round is logged and retried at
    /// the next one.
    pub async fn serve(&mut self, interval: Duration, shutdown: &CancellationToken) {
        self.metrics.set_interval(interval);
        let mut maintained = std::time::Instant::now();
        loop {
            let started = std::time::Instant::now();
            let round = self.run(shutdown).await;
            self.metrics.round(round.as_ref().ok(), started.elapsed());
            match round {
                Ok(summary) => {
                    for error in &summary.errors {
                        tracing::error!(%error, "round failed for a partition");
                    }
                    tracing::info!(
                        rows = summary.rows,
                        partitions = summary.partitions.len(),
                        "round done"
                    );
                }
                Err(e) => tracing::error!(error = %e, "round failed"),
            }
            let every = self.config.maintenance_interval;
            if let Some(tables) = &self.tables
                && !every.is_zero()
                && maintained.elapsed() >= every
                && !shutdown.is_cancelled()
            {
                maintained = std::time::Instant::now();
                match maintain_tables(tables, &self.config).await {
                    Ok(done) => done.iter().for_each(|m| tracing::info!(table = %m.table, compacted_hours = m.compacted.hours, files_removed = m.compacted.files_removed, files_added = m.compacted.files_added, expired = m.snapshots_expired, orphans = m.orphans_deleted, "maintained")),
                    Err(e) => tracing::error!(error = %e, "maintenance failed"),
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(interval) => {}
            }
        }
        self.close().await;
    }

    /// The newest version of `subject` before `latest` whose schema `topic`'s table can take,
    /// as the topic's context with its table; `None` if none can.
    async fn fitting_version(
        &self,
        tables: &Tables,
        topic: &str,
        subject: &str,
        latest: i32,
    ) -> Result<Option<TopicContext>, LoadError> {
        let registry_error =
            |source| LoadError::Registry { topic: topic.to_owned(), source: Box::new(source) };
        let versions = self.registry.versions(subject).await.map_err(registry_error)?;
        for version in versions.into_iter().rev().filter(|v| *v < latest) {
            let older = self.registry.version(subject, version).await.map_err(registry_error)?;
            let reader = self.registry.schema(older.id).await.map_err(registry_error)?;
            let mut context = TopicContext::new(topic, older.id, reader)?;
            match tables.topic(topic, &context.arrow).await {
                Ok(table) => {
                    context.table = Some(table);
                    return Ok(Some(context));
                }
                Err(TableError::SchemaChanged { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }

    fn known_starts(&self) -> std::sync::MutexGuard<'_, HashMap<(String, i32), i64>> {
        self.known_starts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The registry `/metrics` serves in `serve` mode.
    pub fn metrics_registry(&self) -> Arc<service::metrics::Registry> {
        self.metrics.registry()
    }

    pub async fn close(&self) {
        if let Some(audit) = &self.audit {
            audit.close().await;
        }
    }

    /// The audit count this loader holds for `topic` in the window starting at `window_start`.
    pub fn audit_count(&self, topic: &str, window_start: i64) -> Option<i64> {
        self.audit.as_ref().map(|a| a.count_of(topic, window_start))
    }
}

/// One run (the hourly job): loads every selected partition to its log end and returns.
pub async fn run_once(
    config: &Config,
    coordinator: Arc<dyn Coordinator>,
    store: Arc<dyn ObjectStore>,
    registry: Arc<RegistryClient>,
    shutdown: CancellationToken,
) -> Result<RunSummary, LoadError> {
    let mut loader = Loader::new(config.clone(), coordinator, store, registry)?;
    let summary = loader.run(&shutdown).await;
    loader.close().await;
    summary
}

/// Runs continuously, a round every `interval`, until `shutdown`, serving `/metrics` on
/// `metrics` if given; returns after the round in progress has committed what it staged.
pub async fn serve(
    config: &Config,
    coordinator: Arc<dyn Coordinator>,
    store: Arc<dyn ObjectStore>,
    registry: Arc<RegistryClient>,
    metrics: Option<tokio::net::TcpListener>,
    shutdown: CancellationToken,
) -> Result<(), LoadError> {
    let mut loader = Loader::new(config.clone(), coordinator, store, registry)?;
    let metrics_tls = config.tls.server().map_err(crate::ConfigError::from)?;
    let metrics = metrics.map(|listener| {
        tokio::spawn(service::metrics::serve(
            listener,
            loader.metrics_registry(),
            metrics_tls,
            shutdown.clone(),
        ))
    });
    loader.serve(config.interval, &shutdown).await;
    if let Some(task) = metrics {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "the metrics server failed"),
            Err(e) => tracing::error!(error = %e, "the metrics server task failed"),
        }
    }
    Ok(())
}

/// Maintains every table of `output` (Iceberg only): compacts the small files of closed hours
/// (see [`crate::table::compact`]), expires snapshots older than
/// `config.snapshot_max_age` and deletes unreferenced files older than
/// `config.staging_grace_ms` (see [`crate::table::maintain`]).
pub async fn maintain(output: &Output, config: &Config) -> Result<Vec<Maintained>, LoadError> {
    match output {
        Output::Iceberg(tables) => maintain_tables(tables, config).await,
        Output::Hive(_) => Err(crate::ConfigError::Invalid {
            field: "format",
            reason: "maintain works on Iceberg tables (the Hive layout cleans its staging in each run)",
        }
        .into()),
    }
}

async fn maintain_tables(tables: &Tables, config: &Config) -> Result<Vec<Maintained>, LoadError> {
    let now_ms = service::now_ms();
    let max_age_ms = i64::try_from(config.snapshot_max_age.as_millis()).unwrap_or(i64::MAX);
    let grace_ms = i64::try_from(config.staging_grace_ms).unwrap_or(i64::MAX);
    let compaction = CompactOptions::of(config, now_ms);
    let mut done = Vec::new();
    for table in tables.tables().await? {
        done.push(tables.maintain(&table, &compaction, max_age_ms, grace_ms).await?);
    }
    Ok(done)
}
