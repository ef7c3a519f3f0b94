//! Test fixtures shared by every Tributary crate: each starts a real service on a
//! loopback port chosen by the OS and stops it when dropped.
//!
//! - [`broker`], [`cluster`], [`broker_processes`]: brokers in this process (one, or a
//!   cluster registered in ZooKeeper) or as processes; MessageSets to produce, and what a
//!   broker holds read back.
//! - [`zookeeper`], [`s3`], [`registry`]: the services around them (the registry also in this
//!   process, with its REST API called as clients call it).
//! - [`events`]: page views and bare envelopes, ids to find them by, waiting for those ids.
//! - [`http`]: JSON over HTTP to any service, [`metrics`]: its `/metrics` page as a scraper
//!   reads it; [`process`]: a service as its own process; [`slow_clients`], [`proxy`],
//!   [`disk`], [`tls`]: slow clients, cut connections, a full disk, certificates.
//! - One module per service for that service's tests: [`mirror`]; and, behind a feature of
//!   the same name since they need the service's own crate, `agent` (frontend-agent), `audit`
//!   and `loader` (hdfs-loader). A service's crate asks for its own in its dev-dependencies.

#[cfg(feature = "agent")]
pub mod agent;
#[cfg(feature = "audit")]
pub mod audit;
pub mod broker;
pub mod broker_processes;
pub mod cluster;
pub mod disk;
pub mod events;
pub mod http;
#[cfg(feature = "loader")]
pub mod loader;
pub mod metrics;
pub mod mirror;
pub mod process;
pub mod proxy;
pub mod registry;
pub mod s3;
pub mod slow_clients;
pub mod tls;
pub mod zookeeper;

use std::future::Future;
use std::time::{Duration, Instant};

/// An HTTP client for tests (5 s timeout), with the process's TLS provider installed.
pub fn http_client() -> reqwest::Client {
    http_client_with_timeout(Duration::from_secs(5))
}

/// An HTTP client whose requests may take up to `timeout`: for a request whose duration is
/// not what its test is about (a very large body, measured for memory).
pub fn http_client_with_timeout(timeout: Duration) -> reqwest::Client {
    service::tls::install_crypto_provider();
    reqwest::Client::builder().timeout(timeout).build().expect("an HTTP client")
}

/// Polls `check` every 10 ms until it returns `Some`, failing the test after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
