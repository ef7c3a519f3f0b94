//! The cluster as this broker last read it from the registry: live brokers, topics with their
//! assignments and partition states, deletions and the reassignment in progress.

use std::collections::{BTreeMap, BTreeSet};

use cluster::{
    BrokerInfo, PartitionState, ReassignmentPlan, Registry, RegistryError, TopicAssignment,
    Version, Watch,
};

use crate::config::MIN_INSYNC_REPLICAS;

/// The cluster as this broker last read it.
#[derive(Debug, Default)]
pub struct View {
    pub brokers: BTreeMap<i32, BrokerInfo>,
    /// Every topic but those being deleted.
    pub topics: BTreeMap<String, TopicView>,
    /// Topics being deleted: refused to producers and to `CREATE_TOPIC`.
    pub deleting: BTreeSet<String>,
    pub reassignment: Option<ReassignmentPlan>,
}

#[derive(Debug)]
pub struct TopicView {
    pub assignment: TopicAssignment,
    pub states: BTreeMap<i32, (PartitionState, Version)>,
    /// Where DeleteRecords moved partitions' log starts (record numbers).
    pub log_starts: BTreeMap<i32, u64>,
}

impl TopicView {
    pub fn min_insync_replicas(&self) -> usize {
        self.assignment
            .config
            .get(MIN_INSYNC_REPLICAS)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(1)
    }
}

/// The whole cluster, and a watch on everything read.
pub(super) async fn read_view(registry: &Registry) -> Result<(View, Vec<Watch>), RegistryError> {
    let mut watches = Vec::new();
    let (brokers, watch) = registry.brokers_and_watch().await?;
    watches.push(watch);
    let (topics, watch) = registry.topics_and_watch().await?;
    watches.push(watch);
    let (deleting, watch) = registry.topics_being_deleted_and_watch().await?;
    watches.push(watch);
    let (reassignment, watch) = registry.reassignment_and_watch().await?;
    watches.push(watch);
    let reassignment = reassignment.map(|(plan, _)| plan);
    let mut view = View { brokers, topics: BTreeMap::new(), deleting, reassignment };
    for topic in topics {
        if view.deleting.contains(&topic) {
            continue;
        }
        let (assignment, watch) = registry.topic_assignment_and_watch(&topic).await?;
        watches.push(watch);
        let Some((assignment, _)) = assignment else { continue };
        let mut states = BTreeMap::new();
        for &p in assignment.partitions.keys() {
            let (state, watch) = registry.partition_state_and_watch(&topic, p).await?;
            watches.push(watch);
            if let Some(state) = state {
                states.insert(p, state);
            }
        }
        let (log_starts, watch) = registry.log_starts_and_watch(&topic).await?;
        watches.push(watch);
        view.topics.insert(topic, TopicView { assignment, states, log_starts });
    }
    Ok((view, watches))
}
