//! Test fixtures shared by every Tributary crate: each starts a real service on a
//! loopback port chosen by the OS and stops it when dropped.

pub mod broker;
pub mod broker_processes;
pub mod cluster;
pub mod disk;
pub mod events;
pub mod metrics;
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
    service::tls::install_crypto_provider();
    reqwest::Client::builder().timeout(Duration::from_secs(5)).build().expect("an HTTP client")
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
