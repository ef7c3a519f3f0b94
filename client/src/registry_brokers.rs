//! Broker discovery from the ZooKeeper registries (`docs/design.md`, "Cluster registry"): the
//! live brokers from `/brokers/ids` and each partition's leader from its state. Answers are
//! cached per topic and dropped when a watch on the brokers, the topic or a partition's state
//! fires, so a producer follows leaders as they change without asking the registry on every
//! batch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cluster::Registry;
use futures::future::BoxFuture;

use crate::{BrokerSource, DiscoveryError, EntryPoint, PartitionLeader, TopicLayout};

/// A [`BrokerSource`] over the registries of one cluster, on either coordination backend.
#[derive(Clone)]
pub struct RegistryBrokers {
    registry: Registry,
    cache: Arc<Mutex<HashMap<String, TopicLayout>>>,
}

impl RegistryBrokers {
    pub fn new(registry: Registry) -> RegistryBrokers {
        RegistryBrokers { registry, cache: Arc::default() }
    }

    async fn read(&self, topic: &str) -> Result<TopicLayout, DiscoveryError> {
        let failed = |e: cluster::RegistryError| DiscoveryError::NoBrokers {
            topic: topic.to_owned(),
            reason: e.to_string(),
        };
        let (brokers, brokers_changed) = self.registry.brokers_and_watch().await.map_err(failed)?;
        if brokers.is_empty() {
            let reason = "no broker is registered".to_owned();
            return Err(DiscoveryError::NoBrokers { topic: topic.to_owned(), reason });
        }
        let mut watches = vec![brokers_changed];
        let (assignment, topic_changed) =
            self.registry.topic_assignment_and_watch(topic).await.map_err(failed)?;
        watches.push(topic_changed);
        let entry: Vec<EntryPoint> = brokers
            .iter()
            .map(|(&broker_id, info)| EntryPoint { broker_id, addr: info.addr() })
            .collect();
        let mut layout = TopicLayout { partitions: Vec::new(), entry, known: assignment.is_some() };
        if let Some((assignment, _)) = assignment {
            for &partition in assignment.partitions.keys() {
                let (state, changed) = self
                    .registry
                    .partition_state_and_watch(topic, partition)
                    .await
                    .map_err(failed)?;
                watches.push(changed);
                let Some((state, _)) = state else { continue };
                if let Some(info) = brokers.get(&state.leader) {
                    layout.partitions.push(PartitionLeader {
                        partition,
                        broker_id: state.leader,
                        addr: info.addr(),
                    });
                }
            }
        }
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(topic.to_owned(), layout.clone());
        let (cache, topic) = (Arc::clone(&self.cache), topic.to_owned());
        tokio::spawn(async move {
            futures::future::select_all(watches).await;
            cache.lock().unwrap_or_else(|p| p.into_inner()).remove(&topic);
        });
        Ok(layout)
    }
}

impl BrokerSource for RegistryBrokers {
    fn topic_layout<'a>(
        &'a self,
        topic: &'a str,
    ) -> BoxFuture<'a, Result<TopicLayout, DiscoveryError>> {
        Box::pin(async move {
            let cached = self.cache.lock().unwrap_or_else(|p| p.into_inner()).get(topic).cloned();
            match cached {
                Some(found) => Ok(found),
                None => self.read(topic).await,
            }
        })
    }
}
