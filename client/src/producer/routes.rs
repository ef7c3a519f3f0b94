//! Which partitions a topic has and who leads each, as the producer last heard from its
//! [`BrokerSource`], cached per topic and asked for again after `metadata_refresh_ms` (sooner
//! for a topic no broker had yet, which the first produce creates, and at once after a
//! sender found a leader gone).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::discovery::{BrokerSource, TopicLayout};
use crate::partitioner::TopicPartition;
use crate::producer::ProducerError;

/// How soon a topic that no broker had is looked up again.
const UNKNOWN_TOPIC_REFRESH_MS: u64 = 1_000;

#[derive(Clone)]
pub(crate) struct Route {
    /// Every partition of the topic with a live leader, by number, never empty (partition −1
    /// of each entry point while the topic is not known).
    pub partitions: Vec<TopicPartition>,
    /// One entry per entry point with partition −1, for [`crate::Partitioner::Any`].
    pub brokers: Vec<TopicPartition>,
    fetched_at: Instant,
    /// False when the cluster did not have the topic.
    known: bool,
    /// A sender found a leader gone: ask again, but keep this route should that fail.
    expired: bool,
}

impl Route {
    fn from_layout(layout: TopicLayout) -> Route {
        let mut entry: Vec<TopicPartition> = layout
            .entry
            .iter()
            .map(|e| TopicPartition {
                addr: e.addr.clone(),
                broker_id: e.broker_id,
                partition: protocol::ANY_PARTITION,
            })
            .collect();
        entry.sort();
        let mut partitions: Vec<TopicPartition> = layout
            .partitions
            .iter()
            .map(|p| TopicPartition {
                addr: p.addr.clone(),
                broker_id: p.broker_id,
                partition: p.partition,
            })
            .collect();
        partitions.sort_by_key(|p| p.partition);
        let known = layout.known && !partitions.is_empty();
        if !known {
            partitions = entry.clone();
        }
        Route { partitions, brokers: entry, fetched_at: Instant::now(), known, expired: false }
    }

    /// Where `partition` is led now, if its leader is live.
    pub fn leader(&self, partition: i32) -> Option<&TopicPartition> {
        if !self.known {
            return None;
        }
        self.partitions.iter().find(|p| p.partition == partition)
    }

    fn is_fresh(&self, refresh_ms: u64) -> bool {
        if self.expired {
            return false;
        }
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

    /// Forgets `topic`'s route: the next [`Routes::get`] asks the source again.
    pub fn invalidate(&self, topic: &str) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(route) = cache.get_mut(topic) {
            let mut expired = Route::clone(route);
            expired.expired = true;
            *route = Arc::new(expired);
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
        match self.source.topic_layout(topic).await {
            Ok(layout) if !layout.entry.is_empty() || !layout.partitions.is_empty() => {
                let route = Arc::new(Route::from_layout(layout));
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
                route.expired = false;
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
