//! A preferred leader election as an operator asks for it — `trib partitions elect-preferred`
//! and Kafka's ElectLeaders alike: the partitions not led by their preferred replica (the
//! first of their list) go into `/admin/preferred_replica_election`, the controller moves
//! what it can, and each partition's outcome is read back.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::admin::{PreferredElection, TopicPartition};
use crate::registry::{Registry, RegistryError};
use crate::{NO_LEADER, PartitionState};

/// How a partition's election ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Its preferred replica leads it now.
    Elected,
    /// Its preferred replica led it already.
    NotNeeded,
    /// Its preferred replica is not a live broker.
    NotLive,
    /// Its preferred replica is live but not in the ISR, so it may not lead.
    NotInSync,
    /// The controller had not carried the request out within the timeout.
    Pending,
    /// The cluster has no such partition (or its topic is being deleted).
    NoPartition,
}

/// A partition's election: its leader before and after, and its preferred replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elected {
    pub partition: TopicPartition,
    pub before: i32,
    pub leader: i32,
    pub preferred: i32,
    pub outcome: Outcome,
}

/// Every partition's replicas and state (none before its first), and the live brokers.
struct Placement {
    live: BTreeSet<i32>,
    partitions: BTreeMap<TopicPartition, (Vec<i32>, Option<PartitionState>)>,
}

impl Registry {
    async fn placement(&self) -> Result<Placement, RegistryError> {
        let live = self.brokers().await?.into_keys().collect();
        let deleting = self.topics_being_deleted().await?;
        let mut partitions = BTreeMap::new();
        for topic in self.topics().await? {
            if deleting.contains(&topic) {
                continue;
            }
            let Some((assignment, _)) = self.topic_assignment(&topic).await? else { continue };
            let states = self.partition_states(&topic).await?;
            for (p, replicas) in assignment.partitions {
                let state = states.get(&p).map(|(s, _)| s.clone());
                partitions.insert(
                    TopicPartition { topic: topic.clone(), partition: p },
                    (replicas, state),
                );
            }
        }
        Ok(Placement { live, partitions })
    }

    /// Moves the leadership of `which` partitions (`None`: every one) to their preferred
    /// replicas and reports each, waiting at most `timeout` for the controller (and first for
    /// an earlier request of the same kind to be done).
    pub async fn elect_preferred(
        &self,
        which: Option<&[TopicPartition]>,
        timeout: Duration,
    ) -> Result<Vec<Elected>, RegistryError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let before = self.placement().await?;
        let wanted: Vec<TopicPartition> = match which {
            Some(which) => which.to_vec(),
            None => before.partitions.keys().cloned().collect(),
        };
        let leader_of = |p: &Placement, tp: &TopicPartition| {
            p.partitions.get(tp).and_then(|(_, s)| s.as_ref()).map_or(NO_LEADER, |s| s.leader)
        };
        let asked: Vec<TopicPartition> = wanted
            .iter()
            .filter(|tp| {
                before.partitions.get(*tp).is_some_and(|(replicas, state)| {
                    state.as_ref().is_some_and(|s| replicas.first() != Some(&s.leader))
                })
            })
            .cloned()
            .collect();
        let mut carried_out = true;
        if !asked.is_empty() {
            let election = PreferredElection { partitions: asked.clone() };
            loop {
                match self.request_preferred_election(&election).await {
                    Ok(()) => break,
                    Err(RegistryError::AdminInProgress { .. })
                        if tokio::time::Instant::now() < deadline =>
                    {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
            while self.preferred_election().await?.is_some() {
                if tokio::time::Instant::now() >= deadline {
                    carried_out = false;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let after = self.placement().await?;
        let mut results = Vec::with_capacity(wanted.len());
        for tp in wanted {
            let Some((replicas, _)) = after.partitions.get(&tp) else {
                let outcome = Outcome::NoPartition;
                results.push(Elected {
                    partition: tp,
                    before: NO_LEADER,
                    leader: NO_LEADER,
                    preferred: NO_LEADER,
                    outcome,
                });
                continue;
            };
            let preferred = replicas.first().copied().unwrap_or(NO_LEADER);
            let (was, leader) = (leader_of(&before, &tp), leader_of(&after, &tp));
            let outcome = if !asked.contains(&tp) && was == preferred {
                Outcome::NotNeeded
            } else if leader == preferred {
                Outcome::Elected
            } else if !carried_out {
                Outcome::Pending
            } else if !after.live.contains(&preferred) {
                Outcome::NotLive
            } else {
                Outcome::NotInSync
            };
            results.push(Elected { partition: tp, before: was, leader, preferred, outcome });
        }
        Ok(results)
    }
}
