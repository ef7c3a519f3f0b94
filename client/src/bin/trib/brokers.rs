//! Where `trib` finds brokers. One variant today — addresses given with `--brokers`; another
//! source (a coordination service) becomes another variant here, and every subcommand that
//! takes [`crate::cli::BrokerArgs`] gets it.

use std::sync::Arc;

use anyhow::{Context, bail};
use client::{BrokerPartitions, BrokerSource, Connection, StaticBrokers};

#[derive(Debug, Clone)]
pub enum Brokers {
    /// Broker (or load balancer) addresses.
    Static(Vec<String>),
}

impl Brokers {
    /// The discovery source a producer uses.
    pub fn source(&self) -> Arc<dyn BrokerSource> {
        match self {
            Brokers::Static(addrs) => Arc::new(StaticBrokers::new(addrs.clone())),
        }
    }

    /// Every broker address, in the order given.
    pub fn addrs(&self) -> &[String] {
        match self {
            Brokers::Static(addrs) => addrs,
        }
    }

    /// Each broker with its partitions of `topic` (0 for a broker without it).
    pub async fn topic_brokers(&self, topic: &str) -> anyhow::Result<Vec<BrokerPartitions>> {
        Ok(self.source().topic_brokers(topic).await?)
    }

    /// A connection to the broker that holds `partition` of `topic`: the first one given
    /// with that many partitions, or else the first one that answers.
    pub async fn connect_for(&self, topic: &str, partition: i32) -> anyhow::Result<Connection> {
        let brokers = self.topic_brokers(topic).await?;
        let holder = brokers.iter().find(|b| i64::from(b.partitions) > i64::from(partition));
        let Some(broker) = holder.or(brokers.first()) else {
            bail!("no broker answered");
        };
        Connection::connect(&broker.addr)
            .await
            .with_context(|| format!("cannot reach the broker of {topic}-{partition}"))
    }

    /// Connections to every broker given; an unreachable one is an error.
    pub async fn connect_all(&self) -> anyhow::Result<Vec<Connection>> {
        let mut connections = Vec::with_capacity(self.addrs().len());
        for addr in self.addrs() {
            connections.push(Connection::connect(addr).await?);
        }
        Ok(connections)
    }
}
