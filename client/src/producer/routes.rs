//! Which partitions a topic has, as the producer last heard from its [`BrokerSource`],
//! cached per topic and asked for again after `metadata_refresh_ms` (sooner for a topic no
//! broker had yet, which the first produce creates).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::discovery::{BrokerPartitions, BrokerSource};
use crate::partitioner::TopicPartition;
use crate::producer::ProducerError;

/// How soon a topic that no broker had is looked up again.
const UNKNOWN_TOPIC_REFRESH_MS: u64 = 1_000;

#[derive(Clone)]
pub(crate) struct Route {
    /// Every `(broker, partition)` of the topic, sorted, never empty.
    pub partitions: Vec<TopicPartition>,
    /// One entry per broker with partition −1, for [`crate::Partitioner::Any`].
    pub brokers: Vec<TopicPartition>,
    fetched_at: Instant,
    /// False when no broker had the topic and partition 0 of each stands in.
    known: bool,
}

impl Route {
    fn from_brokers(mut brokers: Vec<BrokerPartitions>) -> Route {
        brokers.sort_by(|a, b| (a.broker_id, &a.addr).cmp(&(b.broker_id, &b.addr)));
        let known = brokers.iter().any(|b| b.partitions > 0);
        let partitions = brokers
            .iter()
            .flat_map(|b| {
                let count = if known { b.partitions } else { 1 };
                (0..count as i32).map(|partition| TopicPartition {
                    addr: b.addr.clone(),
                    broker_id: b.broker_id,
                    partition,
                })
            })
            .collect();
        let brokers = brokers
            .iter()
            .map(|b| TopicPartition {
                addr: b.addr.clone(),
                broker_id: b.broker_id,
                partition: protocol::ANY_PARTITION,
            })
            .collect();
        Route { partitions, brokers, fetched_at: Instant::now(), known }
    }

    fn is_fresh(&self, refresh_ms: u64) -> bool {
        let refresh_ms = if self.known { refresh_ms } else { UNKNOWN_TOPIC_REFRESH_MS };
        self.fetched_at.elapsed() < Duration::from_millis(refresh_ms)
    }
}

pub(crate) struct Routes {
    source: Arc<dyn BrokerSource>,
    refresh_ms: u64,
    cache: Mutex<HashMap<String, Arc<Route>>>,
    /// One lookup at a time, so a burst of sends to a new topic asks the source once.
    refreshing: tokio::sync::Mutex<()>,
}

impl Routes {
    pub fn new(source: Arc<dyn BrokerSource>, refresh_ms: u64) -> Routes {
        Routes {
            source,
            refresh_ms,
            cache: Mutex::new(HashMap::new()),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    fn cached(&self, topic: &str) -> Option<Arc<Route>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).get(topic).cloned()
    }

    pub async fn get(&self, topic: &str) -> Result<Arc<Route>, ProducerError> {
        if let Some(route) = self.cached(topic).filter(|r| r.is_fresh(self.refresh_ms)) {
            return Ok(route);
        }
        let _refreshing = self.refreshing.lock().await;
        let stale = self.cached(topic);
        if let Some(route) = stale.as_ref().filter(|r| r.is_fresh(self.refresh_ms)) {
            return Ok(Arc::clone(route));
        }
        match self.source.topic_brokers(topic).await {
            Ok(brokers) if !brokers.is_empty() => {
                let route = Arc::new(Route::from_brokers(brokers));
                let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
                cache.insert(topic.to_owned(), Arc::clone(&route));
                Ok(route)
            }
            // Keep sending where we sent before rather than fail every message, and ask the
            // source again only after another refresh period.
            Ok(_) | Err(_) if stale.is_some() => {
                tracing::warn!(%topic, "broker lookup failed; using the previous broker list");
                let mut route = Route::clone(&stale.expect("checked"));
                route.fetched_at = Instant::now();
                let route = Arc::new(route);
                let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
                cache.insert(topic.to_owned(), Arc::clone(&route));
                Ok(route)
            }
            Ok(_) => Err(ProducerError::Discovery {
                topic: topic.to_owned(),
                source: crate::DiscoveryError::NoBrokers {
                    topic: topic.to_owned(),
                    reason: "the broker source returned no brokers".into(),
                },
            }),
            Err(source) => Err(ProducerError::Discovery { topic: topic.to_owned(), source }),
        }
    }
}
