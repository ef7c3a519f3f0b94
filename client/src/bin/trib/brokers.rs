//! Where `trib` finds brokers: addresses given with `--brokers`, or the broker registry of a
//! ZooKeeper cluster given with `--zookeeper`. Every subcommand that takes
//! [`crate::cli::BrokerArgs`] works with either.

use std::sync::Arc;

use anyhow::{Context, bail};
use client::{BrokerPartitions, BrokerSource, Connection, RegistryBrokers, StaticBrokers};
use cluster::{Registry, ZooKeeper, ZooKeeperConfig};

#[derive(Clone)]
pub enum Brokers {
    /// Broker (or load balancer) addresses.
    Static(Vec<String>),
    /// The registries of a cluster in ZooKeeper.
    Registry(Registry),
}

impl Brokers {
    /// Opens a ZooKeeper session on `connect` (`host:port[,…][/chroot]`).
    pub async fn zookeeper(connect: &str) -> anyhow::Result<Brokers> {
        let session = ZooKeeper::connect(ZooKeeperConfig::new(connect))
            .await
            .with_context(|| format!("cannot reach ZooKeeper at {connect}"))?;
        Ok(Brokers::Registry(Registry::new(session)))
    }

    /// The cluster's registries, for subcommands that only make sense with ZooKeeper.
    pub fn registry(&self) -> anyhow::Result<&Registry> {
        match self {
            Brokers::Registry(registry) => Ok(registry),
            Brokers::Static(_) => {
                bail!("this needs --zookeeper: consumer groups live in ZooKeeper")
            }
        }
    }

    /// The discovery source a producer uses.
    pub fn source(&self) -> Arc<dyn BrokerSource> {
        match self {
            Brokers::Static(addrs) => Arc::new(StaticBrokers::new(addrs.clone())),
            Brokers::Registry(registry) => Arc::new(RegistryBrokers::new(registry.clone())),
        }
    }

    /// Every broker address: in the order given, or by broker id.
    pub async fn addrs(&self) -> anyhow::Result<Vec<String>> {
        match self {
            Brokers::Static(addrs) => Ok(addrs.clone()),
            Brokers::Registry(registry) => {
                let brokers =
                    registry.brokers().await.context("cannot read the broker registry")?;
                if brokers.is_empty() {
                    bail!("no broker is registered");
                }
                Ok(brokers.values().map(|b| b.addr()).collect())
            }
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
        let addrs = self.addrs().await?;
        let mut connections = Vec::with_capacity(addrs.len());
        for addr in &addrs {
            connections.push(Connection::connect(addr).await?);
        }
        Ok(connections)
    }
}
