//! The audit service (docs/design.md, "Audit record"; LinkedIn's pipeline audit). Every tier of the
//! pipeline counts, per topic and time window, the events it passed on and publishes cumulative
//! counts to `_audit`; this service balances the books. It reads `_audit` of the analytics
//! cluster (agent and loader counts), counts the events present in each live cluster itself
//! (tier `live`) and in the analytics cluster (tier `mirror`), and gives every window of every topic a verdict — complete, loss,
//! duplication or open — on a dashboard, a JSON API and Prometheus metrics.
//!
//! [`run`] takes already-built dependencies, so the same code runs in the all-in-one launcher
//! (embedded coordination) and as the `audit` binary (ZooKeeper).
//!
//! On start everything is read again from the earliest offsets — `_audit` and every
//! cluster's events — so the books are rebuilt exactly and a restart changes no verdict; until that
//! replay reaches the ends the sources had on start, every window is `open`.

mod api;
mod chart;
mod config;
mod dashboard;
mod html;
mod ledger;
mod metrics;
mod reader;
mod server;
mod state;

use std::sync::Arc;
use std::time::Duration;

use cluster::Coordinator;
use events::audit::Tier;
use schema_registry::RegistryClient;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::{Config, ConfigError, LiveCluster};
pub use ledger::{Clock, HostCount, Ledger, Rejected, Verdict, WindowReport};

use reader::Feed;
use state::{Shared, lock};

/// The host the analytics cluster's counts carry (tier `mirror`).
pub const ANALYTICS: &str = "analytics";

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(
        "live cluster name {0:?} is given twice, or is \"analytics\" (the analytics cluster's)"
    )]
    DuplicateLive(String),
    #[error("the HTTP server failed: {0}")]
    Http(#[source] std::io::Error),
    #[error("TLS: {0}")]
    Tls(#[from] service::tls::TlsError),
    #[error("cannot read the token file {path}: {source}")]
    TokenFile { path: std::path::PathBuf, source: std::io::Error },
}

/// Runs the audit service until `shutdown` is cancelled, then stops its readers and finishes
/// the HTTP requests in flight.
///
/// - `analytics`: the analytics cluster, whose `_audit` topic is read;
/// - `live`: each live cluster with the name its counts carry as host (tier `live`);
/// - `registry`: to decode `_audit` records;
/// - `listener`: where the dashboard, API and metrics are served.
///
/// The connection fields of `config` (`zookeeper`, `live`, `registry`, `http`) are not used here:
/// the caller built these dependencies.
pub async fn run(
    config: Config,
    analytics: Arc<dyn Coordinator>,
    live: Vec<(String, Arc<dyn Coordinator>)>,
    registry: RegistryClient,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), AuditError> {
    config.validate()?;
    let tls = match config.server_tls()? {
        Some(files) => Some(service::tls::ServerTls::load(files)?),
        None => None,
    };
    let token = match &config.token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|source| AuditError::TokenFile { path: path.clone(), source })?;
            let token = text.trim().to_owned();
            if token.is_empty() {
                let source = std::io::Error::other("it is empty");
                return Err(AuditError::TokenFile { path: path.clone(), source });
            }
            Some(token)
        }
        None => None,
    };
    for (i, (name, _)) in live.iter().enumerate() {
        if name == ANALYTICS || live[..i].iter().any(|(other, _)| other == name) {
            return Err(AuditError::DuplicateLive(name.clone()));
        }
    }
    let client_tls = config.tls.client()?;
    // `_audit` and the events of the analytics cluster, and each live cluster.
    let shared = Arc::new(Shared::new(config, 2 + live.len(), client_tls));
    let stop = shutdown.child_token();
    let tasks = TaskTracker::new();

    let audit = Feed::Audit { registry: Arc::new(registry) };
    let copied = Feed::Events { tier: Tier::Mirror, cluster: ANALYTICS.to_owned() };
    for feed in [audit, copied] {
        tasks.spawn(reader::follow_cluster(
            Arc::clone(&shared),
            feed,
            Arc::clone(&analytics),
            tasks.clone(),
            stop.clone(),
        ));
    }
    for (cluster, coordinator) in live {
        tracing::info!(%cluster, "counting live cluster");
        let feed = Feed::Events { tier: Tier::Live, cluster };
        tasks.spawn(reader::follow_cluster(
            Arc::clone(&shared),
            feed,
            coordinator,
            tasks.clone(),
            stop.clone(),
        ));
    }
    tasks.spawn(forget_old_windows(Arc::clone(&shared), stop.clone()));
    tasks.spawn(report_catch_up(Arc::clone(&shared), stop.clone()));

    let served = server::serve(listener, Arc::clone(&shared), tls, token, stop.clone()).await;
    // The server ends on shutdown, or on its own failure: either way stop the readers.
    stop.cancel();
    tasks.close();
    tasks.wait().await;
    served.map_err(AuditError::Http)
}

/// Forgets windows older than `history_ms`, and the rises of windows past their grace, once a
/// minute (and every `discovery_ms` if shorter).
async fn forget_old_windows(shared: Arc<Shared>, stop: CancellationToken) {
    let every = Duration::from_millis(shared.config.discovery_ms.min(60_000));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
        let clock = shared.clock();
        let mut ledger = lock(&shared.ledger);
        ledger.forget_before(clock.now_ms.saturating_sub(shared.config.history_ms));
        ledger.forget_rises_before(clock.now_ms.saturating_sub(clock.loader_grace_ms));
    }
}

/// Logs once when the sources have been read to the ends they had on start.
async fn report_catch_up(shared: Arc<Shared>, stop: CancellationToken) {
    let started = std::time::Instant::now();
    while !shared.catch_up.caught_up() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = stop.cancelled() => return,
        }
    }
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "caught up: verdicts are given"
    );
}
