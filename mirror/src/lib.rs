//! The mirror: embedded consumers on every live cluster copy its topics into the analytics
//! cluster (the paper's §5 deployment: "we deploy a set of embedded consumers in the
//! analytics datacenter that pull data from the Kafka instances in the live datacenters").
//!
//! Each source cluster is consumed as one consumer group; its topics are followed in its
//! topic registry and copied under the same names, byte for byte (a compressed wrapper stays
//! the same wrapper). A source offset is committed only after the target acknowledged every
//! message before it, so a mirror that dies loses nothing: at least once, never skipping.
//! The mirror tier of the audit counts what the target acknowledged; `/metrics` shows lag,
//! rates and record age per source partition.
//!
//! [`Mirror::start`] takes already-built dependencies — a coordination session per cluster,
//! a bound metrics listener, a registry client — so the same code runs in the all-in-one
//! launcher (embedded coordination) and as the `mirror` binary (ZooKeeper).

mod audit;
mod config;
mod copy;
mod headers;
mod metrics;
mod source;
mod target;

use std::sync::Arc;

use cluster::Coordinator;
use events::audit::{AuditCounts, Tier};
use schema_registry::RegistryClient;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use config::{Config, ConfigError, Connections, TopicFilter};
pub use metrics::Totals;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MirrorError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("source names must be unique and non-empty; {0:?} is not")]
    SourceName(String),
    #[error("no source cluster given")]
    NoSources,
    #[error("cannot set up the producer into the target: {0}")]
    Producer(client::ProducerError),
    #[error("metrics server failed: {0}")]
    Metrics(std::io::Error),
}

/// A running mirror. [`Mirror::shutdown`] stops it cleanly.
pub struct Mirror {
    stop: CancellationToken,
    tasks: JoinSet<()>,
    metrics_task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    audit_stop: CancellationToken,
    audit_task: tokio::task::JoinHandle<()>,
    target: target::Target,
    totals: Totals,
}

impl Mirror {
    /// Starts copying every source (named, each with its coordination session) into
    /// `target`, publishing audit counts through `registry`'s `_audit` schema and serving
    /// `/metrics` on `metrics` if given.
    pub async fn start(
        config: Config,
        sources: Vec<(String, Arc<dyn Coordinator>)>,
        target: Arc<dyn Coordinator>,
        registry: RegistryClient,
        metrics: Option<TcpListener>,
    ) -> Result<Mirror, MirrorError> {
        let filter = config.validate()?;
        if sources.is_empty() {
            return Err(MirrorError::NoSources);
        }
        let mut names = std::collections::BTreeSet::new();
        for (name, _) in &sources {
            if name.is_empty() || !names.insert(name.clone()) {
                return Err(MirrorError::SourceName(name.clone()));
            }
        }
        let counts = AuditCounts::new(Tier::Mirror, config.host(), config.audit_window_ms)
            .map_err(|_| ConfigError::OutOfRange {
                field: "audit_window_ms",
                value: config.audit_window_ms,
                min: 1,
                max: i64::MAX,
            })?;
        let tls = config.tls.client().map_err(ConfigError::from)?;
        let metrics_tls = config.tls.server().map_err(ConfigError::from)?;
        let target_session = Arc::clone(&target);
        let target =
            target::Target::new(target, config.partitions, config.buffer_bytes, tls.clone())?;
        let audit = Arc::new(audit::Audit::new(
            counts,
            Arc::new(registry),
            target.producer.clone(),
            tls.clone(),
        ));
        // Cumulative counts go on from what this host published before it stopped. Until they
        // are read nothing is copied (a count from zero would be published over them), and a
        // target that cannot answer for now — a leader of `_audit` just killed, a broker cut
        // off — is waited for, not a reason to exit: a mirror restarted into a fault would
        // otherwise exit again at every restart.
        let mut backoff = service::Backoff::from_ms(100, 5_000);
        loop {
            match audit.restore(&cluster::Registry::new(Arc::clone(&target_session))).await {
                Ok(records) => {
                    tracing::info!(records, "took back this host's audit counts");
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read this host's audit counts back yet; retrying");
                    backoff.sleep().await;
                }
            }
        }
        let metrics_state = Arc::new(metrics::Metrics::default());
        let totals = metrics_state.totals.clone();
        let shared = Arc::new(copy::Shared {
            target: target.clone(),
            audit: Arc::clone(&audit),
            metrics: Arc::clone(&metrics_state),
            inflight_messages: config.inflight_messages,
            window_bytes: copy::WindowBytes::new(config.buffer_bytes),
            window_ms: config.audit_window_ms,
        });
        let stop = CancellationToken::new();
        let mut tasks = JoinSet::new();
        for (name, coordinator) in sources {
            let source = source::Source {
                name: name.into(),
                coordinator,
                config: config.clone(),
                filter: filter.clone(),
                shared: Arc::clone(&shared),
                tls: tls.clone(),
            };
            tasks.spawn(source.run(stop.clone()));
        }
        let registry = metrics_state.registry();
        let metrics_task = metrics.map(|listener| {
            tokio::spawn(service::metrics::serve(listener, registry, metrics_tls, stop.clone()))
        });
        let audit_stop = CancellationToken::new();
        let audit_task = tokio::spawn({
            let interval = std::time::Duration::from_millis(config.audit_publish_ms);
            let stop = audit_stop.clone();
            async move { audit.run(interval, stop).await }
        });
        Ok(Mirror { stop, tasks, metrics_task, audit_stop, audit_task, target, totals })
    }

    /// What the mirror has copied so far; the handle stays valid after shutdown.
    pub fn totals(&self) -> Totals {
        self.totals.clone()
    }

    /// Stops reading, waits (up to `drain_timeout_ms`) for the target to acknowledge what is
    /// in flight, commits it, leaves the groups, publishes the last audit counts.
    pub async fn shutdown(mut self) -> Result<(), MirrorError> {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
        self.audit_stop.cancel();
        let _ = self.audit_task.await;
        self.target.producer.close().await;
        match self.metrics_task.take() {
            Some(task) => match task.await {
                Ok(result) => result.map_err(MirrorError::Metrics),
                Err(e) => Err(MirrorError::Metrics(std::io::Error::other(e))),
            },
            None => Ok(()),
        }
    }
}

/// Runs a mirror until `shutdown` is cancelled, then shuts it down cleanly.
pub async fn run(
    config: Config,
    sources: Vec<(String, Arc<dyn Coordinator>)>,
    target: Arc<dyn Coordinator>,
    registry: RegistryClient,
    metrics: Option<TcpListener>,
    shutdown: CancellationToken,
) -> Result<Totals, MirrorError> {
    let mirror = tokio::select! {
        started = Mirror::start(config, sources, target, registry, metrics) => started?,
        // Stopped while it still waits for its target: nothing was copied.
        () = shutdown.cancelled() => return Ok(Totals::default()),
    };
    let totals = mirror.totals();
    shutdown.cancelled().await;
    mirror.shutdown().await?;
    Ok(totals)
}
