//! Broker discovery: where a producer finds a topic's partitions and the broker leading each
//! (`docs/design.md`, "Replicated partitions": partitions `0..P-1` across the cluster, each led by
//! one of its replicas).
//!
//! [`BrokerSource`] is the seam. [`StaticBrokers`] asks a fixed list of addresses — entry
//! points into one cluster — with `METADATA`; a ZooKeeper-backed source reads the registry
//! instead. An address may also be a load balancer hiding the brokers, for a producer that
//! sends to partition −1 ([`crate::Partitioner::Any`]).

use std::time::Duration;

use futures::future::BoxFuture;
use thiserror::Error;

use crate::{ClientError, Connection};

/// A topic as its cluster has it: each partition with a live leader, and where to send a
/// produce to partition −1.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicLayout {
    /// Partitions whose leader is live, by partition number, with where their leader listens.
    pub partitions: Vec<PartitionLeader>,
    /// Addresses that take a produce to partition −1 (and that create an unknown topic on its
    /// first produce): the configured entry points, or every live broker.
    pub entry: Vec<EntryPoint>,
    /// Whether the cluster has the topic at all.
    pub known: bool,
}

/// One partition and the broker that leads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLeader {
    pub partition: i32,
    pub broker_id: i32,
    /// `host:port` to connect to.
    pub addr: String,
}

/// An address a produce to partition −1 can go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryPoint {
    pub broker_id: i32,
    pub addr: String,
}

impl TopicLayout {
    /// The layout a `METADATA` answer describes for `topic`, with `entry` as entry points.
    pub fn from_metadata(
        metadata: &protocol::MetadataResponse,
        topic: &str,
        entry: Vec<EntryPoint>,
    ) -> TopicLayout {
        let Some(found) = metadata.topic(topic).filter(|t| t.error.is_ok()) else {
            return TopicLayout { partitions: Vec::new(), entry, known: false };
        };
        let partitions = found
            .partitions
            .iter()
            .filter(|p| p.error.is_ok())
            .filter_map(|p| {
                let leader = metadata.broker(p.leader)?;
                Some(PartitionLeader {
                    partition: p.partition,
                    broker_id: p.leader,
                    addr: leader.addr(),
                })
            })
            .collect();
        TopicLayout { partitions, entry, known: true }
    }
}

/// Why no broker list could be had.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum DiscoveryError {
    #[error("no broker answered for topic {topic}: {reason}")]
    NoBrokers { topic: String, reason: String },
}

/// The current layout of a topic. Object safe, so a producer holds any source as
/// `Arc<dyn BrokerSource>`.
///
/// A topic the cluster does not have yet comes back `known: false` with its entry points; the
/// producer then sends to partition −1 of one, which creates the topic on first produce.
pub trait BrokerSource: Send + Sync + 'static {
    fn topic_layout<'a>(
        &'a self,
        topic: &'a str,
    ) -> BoxFuture<'a, Result<TopicLayout, DiscoveryError>>;
}

/// A fixed list of broker (or load balancer) addresses, each asked with `METADATA`.
/// Unreachable addresses are skipped; the call fails only when none answers.
#[derive(Debug, Clone)]
pub struct StaticBrokers {
    addrs: Vec<String>,
    connect_timeout_ms: u64,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

impl StaticBrokers {
    pub fn new(addrs: impl IntoIterator<Item = impl Into<String>>) -> StaticBrokers {
        let addrs = addrs.into_iter().map(Into::into).collect();
        StaticBrokers { addrs, connect_timeout_ms: 5_000, tls: None }
    }

    /// Asks the addresses over TLS.
    pub fn with_tls(mut self, tls: Option<std::sync::Arc<rustls::ClientConfig>>) -> StaticBrokers {
        self.tls = tls;
        self
    }

    /// Gives up on an address that does not accept or answer within this long.
    pub fn with_connect_timeout_ms(mut self, connect_timeout_ms: u64) -> StaticBrokers {
        self.connect_timeout_ms = connect_timeout_ms;
        self
    }

    pub fn addrs(&self) -> &[String] {
        &self.addrs
    }

    async fn ask(
        &self,
        addr: &str,
        topic: &str,
    ) -> Result<protocol::MetadataResponse, ClientError> {
        let config = crate::ConnectionConfig::with_tls(self.tls.clone());
        let conn = Connection::connect_with(addr, config).await?;
        conn.metadata(&[topic]).await
    }
}

impl BrokerSource for StaticBrokers {
    /// Asks every address; partitions come from the first answer that knows the topic (every
    /// broker of a cluster answers for all of it).
    fn topic_layout<'a>(
        &'a self,
        topic: &'a str,
    ) -> BoxFuture<'a, Result<TopicLayout, DiscoveryError>> {
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
            for (result, addr) in futures::future::join_all(asks).await.into_iter().zip(&self.addrs)
            {
                match result {
                    Ok(metadata) => found.push((addr.clone(), metadata)),
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
            let entry: Vec<EntryPoint> = found
                .iter()
                .map(|(addr, m)| EntryPoint { broker_id: m.broker_id, addr: addr.clone() })
                .collect();
            let layouts =
                found.iter().map(|(_, m)| TopicLayout::from_metadata(m, topic, entry.clone()));
            let mut known = layouts.filter(|l| l.known);
            Ok(known.next().unwrap_or(TopicLayout { partitions: Vec::new(), entry, known: false }))
        })
    }
}
