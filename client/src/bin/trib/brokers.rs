//! Where `trib` finds brokers: addresses given with `--brokers` (entry points into one
//! cluster), or the broker registry of a ZooKeeper cluster given with `--zookeeper`. Every
//! subcommand that takes [`crate::cli::BrokerArgs`] works with either.

use std::sync::Arc;

use anyhow::{Context as _, bail};
use client::{BrokerSource, Connection, RegistryBrokers, StaticBrokers};
use cluster::Registry;
use protocol::MetadataResponse;

use crate::cli::BrokerArgs;
use crate::context::Context;

#[derive(Clone)]
pub struct Brokers {
    found: Found,
    /// What connections to them are made with.
    context: Context,
}

#[derive(Clone)]
enum Found {
    /// Broker (or load balancer) addresses.
    Static(Vec<String>),
    /// The registries of a cluster in ZooKeeper.
    Registry(Registry),
}

impl Brokers {
    /// The brokers `args` name: for `--zookeeper` (`host:port[,…][/chroot]`) this opens a
    /// session, with the context's credentials.
    pub async fn find(args: &BrokerArgs, context: &Context) -> anyhow::Result<Brokers> {
        let found = match &args.zookeeper {
            Some(connect) => {
                Found::Registry(Registry::new(context.zookeeper().connect(connect).await?))
            }
            None => Found::Static(args.brokers.clone()),
        };
        Ok(Brokers { found, context: context.clone() })
    }

    /// The cluster's registries, for subcommands that only make sense with ZooKeeper.
    pub fn registry(&self) -> anyhow::Result<&Registry> {
        match &self.found {
            Found::Registry(registry) => Ok(registry),
            Found::Static(_) => {
                bail!(crate::Refused(
                    "this needs --zookeeper: it reads the cluster's registry".into()
                ))
            }
        }
    }

    /// The discovery source a producer uses.
    pub fn source(&self) -> Arc<dyn BrokerSource> {
        match &self.found {
            Found::Static(addrs) => {
                Arc::new(StaticBrokers::new(addrs.clone()).with_tls(self.context.tls()))
            }
            Found::Registry(registry) => Arc::new(RegistryBrokers::new(registry.clone())),
        }
    }

    /// Every broker address: in the order given, or by broker id.
    pub async fn addrs(&self) -> anyhow::Result<Vec<String>> {
        match &self.found {
            Found::Static(addrs) => Ok(addrs.clone()),
            Found::Registry(registry) => {
                let brokers =
                    registry.brokers().await.context("cannot read the broker registry")?;
                if brokers.is_empty() {
                    bail!("no broker is registered");
                }
                Ok(brokers.values().map(|b| b.addr()).collect())
            }
        }
    }

    /// `METADATA` for `topics` (all when empty) from the first broker that answers: every
    /// broker of a cluster answers for all of it.
    pub async fn metadata(&self, topics: &[&str]) -> anyhow::Result<MetadataResponse> {
        let mut failures = Vec::new();
        for addr in self.addrs().await? {
            match self.context.connect(&addr).await {
                Ok(conn) => match conn.metadata(topics).await {
                    Ok(metadata) => return Ok(metadata),
                    Err(e) => failures.push(e.to_string()),
                },
                Err(e) => failures.push(e.to_string()),
            }
        }
        bail!("no broker answered: {}", failures.join("; "))
    }

    /// A connection to the leader of `partition` of `topic`, or to the first broker that
    /// answers for a topic the cluster does not have (which says so).
    pub async fn connect_for(&self, topic: &str, partition: i32) -> anyhow::Result<Connection> {
        let metadata = self.metadata(&[topic]).await?;
        let leader = metadata
            .topic(topic)
            .and_then(|t| t.partitions.iter().find(|p| p.partition == partition))
            .and_then(|p| metadata.broker(p.leader));
        let addr = match leader {
            Some(leader) => leader.addr(),
            None => self.addrs().await?.into_iter().next().context("no broker address")?,
        };
        self.context
            .connect(&addr)
            .await
            .with_context(|| format!("cannot reach the leader of {topic}-{partition} at {addr}"))
    }
}
