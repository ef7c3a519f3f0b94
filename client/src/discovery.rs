//! Broker discovery: where a producer finds the brokers of a topic and how many partitions
//! each holds (paper §3.2: a producer spreads a topic over every broker's partitions).
//!
//! [`BrokerSource`] is the seam. [`StaticBrokers`] asks a fixed list of addresses with
//! `METADATA`; a ZooKeeper-backed source reads the broker and topic registries instead. An
//! address may also be a load balancer hiding the brokers, for a producer that sends to
//! partition −1 ([`crate::Partitioner::Any`]).

use std::time::Duration;

use futures::future::BoxFuture;
use thiserror::Error;

use crate::{ClientError, Connection};

/// One broker and the number of partitions of a topic it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerPartitions {
    pub broker_id: i32,
    /// `host:port` to connect to.
    pub addr: String,
    /// Partitions of the topic on this broker; 0 when the broker does not have it yet.
    pub partitions: u32,
}

/// Why no broker list could be had.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum DiscoveryError {
    #[error("no broker answered for topic {topic}: {reason}")]
    NoBrokers { topic: String, reason: String },
}

/// The current brokers of a topic. Object safe, so a producer holds any source as
/// `Arc<dyn BrokerSource>`.
///
/// A topic no broker has yet comes back as every broker with `partitions: 0`; the producer
/// then sends to partition 0 of some broker, which creates the topic on first produce.
pub trait BrokerSource: Send + Sync + 'static {
    fn topic_brokers<'a>(
        &'a self,
        topic: &'a str,
    ) -> BoxFuture<'a, Result<Vec<BrokerPartitions>, DiscoveryError>>;
}

/// A fixed list of broker (or load balancer) addresses, each asked with `METADATA`.
/// Unreachable addresses are skipped; the call fails only when none answers.
#[derive(Debug, Clone)]
pub struct StaticBrokers {
    addrs: Vec<String>,
    connect_timeout_ms: u64,
}

impl StaticBrokers {
    pub fn new(addrs: impl IntoIterator<Item = impl Into<String>>) -> StaticBrokers {
        let addrs = addrs.into_iter().map(Into::into).collect();
        StaticBrokers { addrs, connect_timeout_ms: 5_000 }
    }

    /// Gives up on an address that does not accept or answer within this long.
    pub fn with_connect_timeout_ms(mut self, connect_timeout_ms: u64) -> StaticBrokers {
        self.connect_timeout_ms = connect_timeout_ms;
        self
    }

    pub fn addrs(&self) -> &[String] {
        &self.addrs
    }

    async fn ask(&self, addr: &str, topic: &str) -> Result<BrokerPartitions, ClientError> {
        let conn = Connection::connect(addr).await?;
        let metadata = conn.metadata(&[topic]).await?;
        let partitions = metadata
            .topics
            .iter()
            .find(|(name, _)| name == topic)
            .map_or(0, |(_, n)| u32::try_from(*n).unwrap_or(0));
        Ok(BrokerPartitions { broker_id: metadata.broker_id, addr: addr.to_owned(), partitions })
    }
}

impl BrokerSource for StaticBrokers {
    fn topic_brokers<'a>(
        &'a self,
        topic: &'a str,
    ) -> BoxFuture<'a, Result<Vec<BrokerPartitions>, DiscoveryError>> {
        Box::pin(async move {
            let timeout = Duration::from_millis(self.connect_timeout_ms);
            let asks = self.addrs.iter().map(|addr| async move {
                match tokio::time::timeout(timeout, self.ask(addr, topic)).await {
                    Ok(result) => result.map_err(|e| e.to_string()),
                    Err(_) => Err(format!("{addr}: no answer within {} ms", timeout.as_millis())),
                }
            });
            let mut found = Vec::new();
            let mut failures = Vec::new();
            for result in futures::future::join_all(asks).await {
                match result {
                    Ok(broker) => found.push(broker),
                    Err(e) => {
                        tracing::warn!(%topic, error = %e, "broker did not answer METADATA");
                        failures.push(e);
                    }
                }
            }
            if found.is_empty() {
                let reason = if failures.is_empty() {
                    "no broker addresses configured".to_owned()
                } else {
                    failures.join("; ")
                };
                return Err(DiscoveryError::NoBrokers { topic: topic.to_owned(), reason });
            }
            Ok(found)
        })
    }
}
