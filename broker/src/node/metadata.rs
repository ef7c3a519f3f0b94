//! `METADATA`: the live brokers and every partition's leader, epoch, replicas and ISR, as the
//! cluster's view has them — or, for a broker alone, itself leading all it has.

use protocol::{BrokerMetadata, ErrorCode, MetadataResponse, PartitionMetadata, TopicMetadata};

use super::Node;
use crate::log::Topic;
use crate::membership::{TopicView, View};

impl Node {
    /// `METADATA` for `topics` (all when empty).
    pub fn metadata(&self, topics: &[String]) -> MetadataResponse {
        let Some(membership) = &self.membership else { return self.metadata_alone(topics) };
        let view = membership.view();
        let brokers = view
            .brokers
            .iter()
            .map(|(&id, b)| BrokerMetadata { id, host: b.host.clone(), port: i32::from(b.port) })
            .collect();
        let describe = |name: &str| match view.topics.get(name) {
            Some(tv) => describe(&view, name, tv),
            None => unknown_topic(name),
        };
        let topics = if topics.is_empty() {
            view.topics.keys().map(|t| describe(t)).collect()
        } else {
            topics.iter().map(|t| describe(t)).collect()
        };
        MetadataResponse { broker_id: self.config().broker_id, brokers, topics }
    }

    /// A broker alone answers for itself: it leads every partition it has, alone in its ISR.
    fn metadata_alone(&self, topics: &[String]) -> MetadataResponse {
        let me = self.config().broker_id;
        let info = &self.advertised;
        let brokers =
            vec![BrokerMetadata { id: me, host: info.host.clone(), port: info.port.into() }];
        let local = |t: &Topic| TopicMetadata {
            name: t.name.clone(),
            error: ErrorCode::None,
            partitions: t
                .partitions
                .iter()
                .map(|(&p, partition)| PartitionMetadata {
                    partition: p as i32,
                    error: ErrorCode::None,
                    leader: me,
                    leader_epoch: partition.leader_epoch().unwrap_or(0),
                    replicas: vec![me],
                    isr: vec![me],
                })
                .collect(),
        };
        let logs = self.replicas.logs();
        let topics = if topics.is_empty() {
            logs.topics().iter().map(|t| local(t)).collect()
        } else {
            topics
                .iter()
                .map(|name| match logs.topic(name) {
                    Some(t) => local(&t),
                    None => unknown_topic(name),
                })
                .collect()
        };
        MetadataResponse { broker_id: me, brokers, topics }
    }

    /// Every broker of the cluster that serves Kafka's protocol, and where: `(id, host,
    /// kafka_port)`; this broker alone, if it is alone.
    pub fn kafka_endpoints(&self) -> Vec<(i32, String, u16)> {
        match &self.membership {
            Some(membership) => membership
                .view()
                .brokers
                .iter()
                .filter_map(|(&id, b)| b.kafka_port.map(|port| (id, b.host.clone(), port)))
                .collect(),
            None => {
                let info = &self.advertised;
                let me = self.config().broker_id;
                info.kafka_port.map(|port| (me, info.host.clone(), port)).into_iter().collect()
            }
        }
    }
}

/// A topic of the cluster as METADATA describes it: a partition whose leader is not live is
/// answered with [`ErrorCode::NotLeader`].
fn describe(view: &View, name: &str, tv: &TopicView) -> TopicMetadata {
    let partitions = tv
        .assignment
        .partitions
        .iter()
        .map(|(&p, replicas)| {
            let state = tv.states.get(&p).map(|(s, _)| s);
            let leader = state.map_or(cluster::NO_LEADER, |s| s.leader);
            let live = view.brokers.contains_key(&leader);
            PartitionMetadata {
                partition: p,
                error: if live { ErrorCode::None } else { ErrorCode::NotLeader },
                leader,
                leader_epoch: state.map_or(0, |s| s.leader_epoch),
                replicas: replicas.clone(),
                isr: state.map(|s| s.isr.clone()).unwrap_or_default(),
            }
        })
        .collect();
    TopicMetadata { name: name.to_owned(), error: ErrorCode::None, partitions }
}

fn unknown_topic(name: &str) -> TopicMetadata {
    TopicMetadata { name: name.to_owned(), error: ErrorCode::UnknownTopic, partitions: Vec::new() }
}
