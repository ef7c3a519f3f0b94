//! The mirror: embedded consumers on every live cluster copy its topics into the analytics
//! cluster (the paper's §5 deployment: "we deploy a set of embedded consumers in the
//! analytics datacenter that pull data from the Kafka instances in the live datacenters").
//!
//! Each source cluster is consumed as one consumer group; its topics are followed in its
//! topic registry and copied under the same names, byte for byte (a compressed wrapper stays
//! the same wrapper). A source offset is committed only after the target acknowledged every
//! message before it, so a mirror that dies loses nothing; and each copy carries its source
//! position to the target, which appends what it has already only once (`copy`), so a mirror
//! that dies duplicates nothing either: exactly once. The audit service counts what the
//! analytics cluster holds as the mirror tier; `/metrics` shows lag, rates and record age per
//! source partition.
//!
//! [`Mirror::start`] takes already-built dependencies — a coordination session per cluster
//! and a bound metrics listener — so the same code runs in the all-in-one launcher (embedded
//! coordination) and as the `mirror` binary (ZooKeeper).

mod config;
mod copy;
mod headers;
mod metrics;
mod source;
mod target;

use std::sync::Arc;

use cluster::Coordinator;
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
    #[error("source names must be unique, of 1-64 characters of A-Z a-z 0-9 . _ -; {0:?} is not")]
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
    target: target::Target,
    totals: Totals,
}

impl Mirror {
    /// Starts copying every source (named, each with its coordination session) into
    /// `target`, serving `/metrics` on `metrics` if given. A source's name is part of its
    /// partitions' writers in the target: it must stay the same across restarts.
    pub async fn start(
        config: Config,
        sources: Vec<(String, Arc<dyn Coordinator>)>,
        target: Arc<dyn Coordinator>,
        metrics: Option<TcpListener>,
    ) -> Result<Mirror, MirrorError> {
        let filter = config.validate()?;
        if sources.is_empty() {
            return Err(MirrorError::NoSources);
        }
        let mut names = std::collections::BTreeSet::new();
        for (name, _) in &sources {
            if !valid_source_name(name) || !names.insert(name.clone()) {
                return Err(MirrorError::SourceName(name.clone()));
            }
        }
        let tls = config.tls.client().map_err(ConfigError::from)?;
        let metrics_tls = config.tls.server().map_err(ConfigError::from)?;
        let target =
            target::Target::new(target, config.partitions, config.buffer_bytes, tls.clone())?;
        let metrics_state = Arc::new(metrics::Metrics::default());
        let totals = metrics_state.totals.clone();
        let shared = Arc::new(copy::Shared {
            target: target.clone(),
            metrics: Arc::clone(&metrics_state),
            inflight_messages: config.inflight_messages,
            window_bytes: copy::WindowBytes::new(config.buffer_bytes),
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
        Ok(Mirror { stop, tasks, metrics_task, target, totals })
    }

    /// What the mirror has copied so far; the handle stays valid after shutdown.
    pub fn totals(&self) -> Totals {
        self.totals.clone()
    }

    /// Stops reading, waits (up to `drain_timeout_ms`) for the target to acknowledge what is
    /// in flight, commits it, leaves the groups.
    pub async fn shutdown(mut self) -> Result<(), MirrorError> {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
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
    metrics: Option<TcpListener>,
    shutdown: CancellationToken,
) -> Result<Totals, MirrorError> {
    let mirror = tokio::select! {
        started = Mirror::start(config, sources, target, metrics) => started?,
        // Stopped while it still waits for its target: nothing was copied.
        () = shutdown.cancelled() => return Ok(Totals::default()),
    };
    let totals = mirror.totals();
    shutdown.cancelled().await;
    mirror.shutdown().await?;
    Ok(totals)
}

/// Whether `name` may name a source: 1-64 characters of `A-Z a-z 0-9 . _ -`, which its
/// partitions' writers in the target are named after.
pub(crate) fn valid_source_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}
