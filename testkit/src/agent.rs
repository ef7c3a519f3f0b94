//! The frontend agent in this process, for its tests (feature `agent`): a config for a test
//! agent and the agent started on it. Its events are [`crate::events::page_view_json`]s, read
//! back with [`crate::broker::read_all`] and [`crate::events::wait_for_ids`].

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use frontend_agent::{Agent, Brokers, Config};
use schema_registry::RegistryClient;

/// How long the agent's tests wait for what it ships.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// An agent config for tests: short intervals, host `test-host`.
pub fn config(registry: &str, spool_dir: &Path, brokers: &[&str]) -> Config {
    Config {
        registry: registry.to_owned(),
        brokers: brokers.iter().map(|b| (*b).to_owned()).collect(),
        spool_dir: spool_dir.to_owned(),
        host_name: Some("test-host".to_owned()),
        service: "test-service".to_owned(),
        audit_publish_ms: 200,
        spool_ack_sync_ms: 50,
        retry_backoff_max_ms: 500,
        drain_timeout_ms: 5_000,
        ..Config::default()
    }
}

/// Starts an agent on `config`, shipping to the brokers it names.
pub async fn start(config: Config) -> Agent {
    crate::broker::init_logging();
    let registry = Arc::new(RegistryClient::new(&config.registry).unwrap());
    let brokers = Brokers::Addrs(config.brokers.clone());
    Agent::start(config, brokers, registry).await.expect("agent starts")
}
