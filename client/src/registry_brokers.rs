//! Broker discovery from the ZooKeeper registries (paper §3.2): the live brokers from
//! `/brokers/ids` and each topic's partition counts from `/brokers/topics/{topic}`. Answers
//! are cached per topic and dropped when a watch on either registry fires, so a producer
//! follows brokers that come and go without asking the registry on every batch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cluster::Registry;
use futures::future::BoxFuture;

use crate::{BrokerPartitions, BrokerSource, DiscoveryError};

/// A [`BrokerSource`] over the registries of one cluster, on either coordination backend.
#[derive(Clone)]
pub struct RegistryBrokers {
    registry: Registry,
    cache: Arc<Mutex<HashMap<String, Vec<BrokerPartitions>>>>,
}

impl RegistryBrokers {
    pub fn new(registry: Registry) -> RegistryBrokers {
        RegistryBrokers { registry, cache: Arc::default() }
    }

    async fn read(&self, topic: &str) -> Result<Vec<BrokerPartitions>, DiscoveryError> {
        let failed = |e: cluster::RegistryError| DiscoveryError::NoBrokers {
            topic: topic.to_owned(),
            reason: e.to_string(),
        };
        let (brokers, brokers_changed) = self.registry.brokers_and_watch().await.map_err(failed)?;
        let (partitions, topic_changed) =
            self.registry.topic_brokers_and_watch(topic).await.map_err(failed)?;
        if brokers.is_empty() {
            let reason = "no broker is registered".to_owned();
            return Err(DiscoveryError::NoBrokers { topic: topic.to_owned(), reason });
        }
        let found: Vec<BrokerPartitions> = brokers
            .into_iter()
            .map(|(broker_id, info)| BrokerPartitions {
                broker_id,
                addr: info.addr(),
                partitions: partitions.get(&broker_id).copied().unwrap_or(0),
            })
            .collect();
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(topic.to_owned(), found.clone());
        let (cache, topic) = (Arc::clone(&self.cache), topic.to_owned());
        tokio::spawn(async move {
            futures::future::select(brokers_changed, topic_changed).await;
            cache.lock().unwrap_or_else(|p| p.into_inner()).remove(&topic);
        });
        Ok(found)
    }
}

impl BrokerSource for RegistryBrokers {
    fn topic_brokers<'a>(
        &'a self,
        topic: &'a str,
    ) -> BoxFuture<'a, Result<Vec<BrokerPartitions>, DiscoveryError>> {
        Box::pin(async move {
            let cached = self.cache.lock().unwrap_or_else(|p| p.into_inner()).get(topic).cloned();
            match cached {
                Some(found) => Ok(found),
                None => self.read(topic).await,
            }
        })
    }
}
