//! The frontend agent, the pipeline's first tier (paper §5, "Deployment": a producer on each
//! frontend host ships its activity events to the live datacenter's brokers in batches).
//!
//! Frontend services hand events to the agent over HTTP ([`serve_http`]), by file
//! (`--tail FILE=TOPIC`) or in-process ([`Agent::send_batch`]). Each event is validated against
//! its topic's latest schema and encoded in the envelope (docs/design.md, "Event envelope"),
//! appended to a durable spool ([`spool`]) before it is acknowledged to the caller, shipped by
//! the batching producer to the live brokers, and removed once a broker acknowledged it. The
//! agent publishes the audit's `agent` row: cumulative counts of acknowledged events per topic
//! and window.

mod agent;
mod audit;
pub mod config;
pub mod encode;
mod encode_text;
pub mod event;
mod http;
pub mod metrics;
mod send_error;
mod ship;
pub mod simulate;
pub mod spool;
mod tail;

use std::sync::Arc;

pub use agent::{Agent, AgentError, Brokers};
pub use config::{Config, ConfigError, SpoolFull};
pub use http::serve_http;
pub use send_error::SendError;
pub use simulate::{SimReport, Target, simulate};

/// Starts an agent, serves HTTP on `listener` until `shutdown`, then shuts the agent down
/// (draining the spool within `drain_timeout_ms`).
pub async fn run(
    config: Config,
    brokers: Brokers,
    registry: Arc<schema_registry::RegistryClient>,
    listener: tokio::net::TcpListener,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), RunError> {
    let agent = Agent::start(config, brokers, registry).await?;
    let served = serve_http(listener, agent.clone(), shutdown).await;
    agent.shutdown().await?;
    served.map_err(RunError::Http)
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error("the HTTP server failed: {0}")]
    Http(std::io::Error),
}
