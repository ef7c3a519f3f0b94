//! How far a consumer group is behind on a cluster: the sum over every partition of every
//! topic of log end − committed offset, read from the registry and the brokers as
//! `trib groups describe` does. The demo's drain waits for the mirror's group to reach 0.

use std::collections::BTreeMap;

use client::{SimpleConsumer, SimpleConsumerConfig};
use cluster::Registry;

#[derive(Debug, thiserror::Error)]
pub enum LagError {
    #[error(transparent)]
    Registry(#[from] cluster::RegistryError),
    #[error(transparent)]
    Consumer(#[from] client::ConsumerError),
    #[error("broker {0} of partition {1} is not registered")]
    BrokerDown(i32, String),
}

/// Bytes `group` has yet to consume on the cluster of `registry`. A partition the group never
/// committed counts from its first offset.
pub async fn group_lag(registry: &Registry, group: &str) -> Result<i64, LagError> {
    let brokers = registry.brokers().await?;
    let mut consumers: BTreeMap<i32, SimpleConsumer> = BTreeMap::new();
    let mut lag = 0;
    for topic in registry.topics().await? {
        for partition in registry.partitions(&topic).await? {
            let info = brokers
                .get(&partition.broker)
                .ok_or_else(|| LagError::BrokerDown(partition.broker, partition.to_string()))?;
            let consumer = match consumers.entry(partition.broker) {
                std::collections::btree_map::Entry::Occupied(entry) => entry.into_mut(),
                std::collections::btree_map::Entry::Vacant(entry) => entry.insert(
                    SimpleConsumer::connect(&info.addr(), SimpleConsumerConfig::default()).await?,
                ),
            };
            let p = partition.partition as i32;
            let end = consumer.latest_offset(&topic, p).await?;
            let committed = match registry.offset(group, &topic, partition).await? {
                Some(offset) => offset,
                None => consumer.earliest_offset(&topic, p).await?,
            };
            lag += (end - committed).max(0);
        }
    }
    Ok(lag)
}
