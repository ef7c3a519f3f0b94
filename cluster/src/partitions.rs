//! Replicated partitions (`docs/design.md`, "Replicated partitions" and "Controller"): what a
//! topic's partitions are across a cluster, and the two decisions a controller makes about
//! them — where the replicas of a new partition go, and which replica leads when a leader is
//! gone. Pure functions of their inputs, so the controller's choices can be tested without a
//! cluster.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// `/brokers/topics/{topic}`: the ordered replica list of every partition (the first replica
/// is the preferred leader) and the topic's settings. In JSON the partition numbers are
/// object keys: `{"partitions": {"0": [1, 2, 3]}, "config": {"retention_ms": "3600000"}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicAssignment {
    pub partitions: BTreeMap<i32, Vec<i32>>,
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

impl TopicAssignment {
    /// Checks what a reader relies on: partitions numbered `0..P-1` with `P ≥ 1`, each with at
    /// least one replica and no broker twice.
    pub fn validate(&self) -> Result<(), String> {
        if self.partitions.is_empty() {
            return Err("a topic needs at least one partition".into());
        }
        for (expected, (&p, replicas)) in self.partitions.iter().enumerate() {
            if i64::from(p) != expected as i64 {
                return Err(format!("partitions must be numbered 0..{}", self.partitions.len()));
            }
            if replicas.is_empty() {
                return Err(format!("partition {p} has no replicas"));
            }
            let distinct: BTreeSet<i32> = replicas.iter().copied().collect();
            if distinct.len() != replicas.len() {
                return Err(format!("partition {p} names a broker twice: {replicas:?}"));
            }
        }
        Ok(())
    }

    /// Replicas of `partition`, if the topic has it.
    pub fn replicas(&self, partition: i32) -> Option<&[i32]> {
        self.partitions.get(&partition).map(Vec::as_slice)
    }

    /// The replication factor: the length of partition 0's replica list.
    pub fn replication_factor(&self) -> usize {
        self.partitions.values().next().map_or(0, Vec::len)
    }
}

/// Leader of a partition that has none: every replica that could lead is gone.
pub const NO_LEADER: i32 = -1;

/// `/brokers/topics/{topic}/partitions/{p}/state`, written with the expected version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    /// The leading broker, or [`NO_LEADER`] while the partition is offline.
    pub leader: i32,
    /// Bumped at every leader change.
    pub leader_epoch: i32,
    /// In-sync replicas, leader included.
    pub isr: Vec<i32>,
    /// The epoch of the controller (or leader) that wrote this state.
    pub controller_epoch: i32,
}

impl PartitionState {
    /// The first state of a new partition: its first live replica leads in epoch 0, and every
    /// live replica is in sync (none has data yet).
    pub fn initial(
        replicas: &[i32],
        live: &BTreeSet<i32>,
        controller_epoch: i32,
    ) -> PartitionState {
        let isr: Vec<i32> = replicas.iter().copied().filter(|r| live.contains(r)).collect();
        PartitionState {
            leader: isr.first().copied().unwrap_or(NO_LEADER),
            leader_epoch: 0,
            isr,
            controller_epoch,
        }
    }

    pub fn is_online(&self) -> bool {
        self.leader != NO_LEADER
    }
}

/// Why replicas cannot be assigned.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum AssignError {
    #[error("replication factor {factor} needs at least that many live brokers; {live} are live")]
    TooFewBrokers { factor: usize, live: usize },
    #[error("replication factor must be at least 1")]
    NoReplicas,
}

/// Replica lists for partitions `first..first+count` over `brokers`, spread as Kafka spreads
/// them: the first replicas go round the brokers from `start`, and the followers of each lap
/// are shifted by one more, so that no two brokers share every partition (a broker's failure
/// spreads its followers' new leadership over the others). `start` and `shift` are the
/// caller's random choice, any value; the same inputs always give the same lists.
pub fn assign_replicas(
    brokers: &BTreeSet<i32>,
    first: i32,
    count: u32,
    replication_factor: usize,
    start: usize,
    shift: usize,
) -> Result<BTreeMap<i32, Vec<i32>>, AssignError> {
    if replication_factor == 0 {
        return Err(AssignError::NoReplicas);
    }
    let brokers: Vec<i32> = brokers.iter().copied().collect();
    let n = brokers.len();
    if replication_factor > n {
        return Err(AssignError::TooFewBrokers { factor: replication_factor, live: n });
    }
    let mut assignment = BTreeMap::new();
    for i in 0..count as usize {
        let lap_shift = shift + i / n;
        let leader = (start + i) % n;
        let mut replicas = Vec::with_capacity(replication_factor);
        replicas.push(brokers[leader]);
        for j in 0..replication_factor - 1 {
            // n ≥ 2 here: a second replica needs a second broker.
            let gap = 1 + (lap_shift + j) % (n - 1);
            replicas.push(brokers[(leader + gap) % n]);
        }
        assignment.insert(first + i as i32, replicas);
    }
    Ok(assignment)
}

/// Who leads a partition whose leader must change, and whether the choice is unclean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Election {
    /// A live member of the ISR, first in replica order: no acknowledged data is lost.
    Clean(i32),
    /// No ISR member is live; a live replica outside it leads because the topic allows an
    /// unclean election, and what only the ISR had is lost.
    Unclean(i32),
    /// No replica may lead: the partition stays offline.
    Offline,
}

/// The leader a controller picks: the first replica, in replica order, that is live and in
/// the ISR; failing that, with `unclean` allowed, the first live replica.
pub fn elect_leader(
    replicas: &[i32],
    isr: &[i32],
    live: &BTreeSet<i32>,
    unclean: bool,
) -> Election {
    let live_replicas = || replicas.iter().copied().filter(|r| live.contains(r));
    if let Some(leader) = live_replicas().find(|r| isr.contains(r)) {
        return Election::Clean(leader);
    }
    match live_replicas().next() {
        Some(leader) if unclean => Election::Unclean(leader),
        _ => Election::Offline,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[i32]) -> BTreeSet<i32> {
        ids.iter().copied().collect()
    }

    #[test]
    fn assignment_reads_and_writes_the_design_json() {
        let assignment = TopicAssignment {
            partitions: [(0, vec![1, 2, 3]), (1, vec![2, 3, 1])].into_iter().collect(),
            config: [("min_insync_replicas".to_owned(), "2".to_owned())].into_iter().collect(),
        };
        let json = serde_json::to_value(&assignment).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "partitions": {"0": [1, 2, 3], "1": [2, 3, 1]},
                "config": {"min_insync_replicas": "2"}
            })
        );
        let back: TopicAssignment =
            serde_json::from_str(r#"{"partitions": {"0": [1], "1": [2]}}"#).unwrap();
        assert!(back.config.is_empty());
        assert_eq!(back.replicas(1), Some(&[2][..]));
        assert_eq!(back.replication_factor(), 1);
    }

    #[test]
    fn validation_names_what_is_wrong() {
        let of = |partitions: &[(i32, &[i32])]| TopicAssignment {
            partitions: partitions.iter().map(|(p, r)| (*p, r.to_vec())).collect(),
            config: BTreeMap::new(),
        };
        assert!(of(&[(0, &[1]), (1, &[2])]).validate().is_ok());
        assert!(of(&[]).validate().unwrap_err().contains("at least one"));
        assert!(of(&[(0, &[1]), (2, &[2])]).validate().unwrap_err().contains("0..2"));
        assert!(of(&[(0, &[])]).validate().unwrap_err().contains("no replicas"));
        assert!(of(&[(0, &[1, 1])]).validate().unwrap_err().contains("twice"));
    }

    #[test]
    fn replicas_spread_over_brokers_with_staggered_followers() {
        let brokers = set(&[1, 2, 3]);
        let a = assign_replicas(&brokers, 0, 6, 3, 0, 0).unwrap();
        let lists: Vec<&Vec<i32>> = a.values().collect();
        assert_eq!(lists[0], &[1, 2, 3]);
        assert_eq!(lists[1], &[2, 3, 1]);
        assert_eq!(lists[2], &[3, 1, 2]);
        // The second lap shifts the followers by one more.
        assert_eq!(lists[3], &[1, 3, 2]);
        for replicas in a.values() {
            assert_eq!(set(replicas).len(), 3, "no broker twice: {replicas:?}");
        }
        let leaders: Vec<i32> = a.values().map(|r| r[0]).collect();
        assert_eq!(leaders, [1, 2, 3, 1, 2, 3], "each broker leads as many");
        assert_eq!(a.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn followers_of_one_broker_spread_over_the_others() {
        let brokers = set(&[0, 1, 2, 3, 4]);
        let a = assign_replicas(&brokers, 0, 20, 2, 3, 1).unwrap();
        let followers_of_0: BTreeSet<i32> =
            a.values().filter(|r| r[0] == 0).map(|r| r[1]).collect();
        assert!(followers_of_0.len() > 1, "broker 0's followers: {followers_of_0:?}");
        assert_eq!(a, assign_replicas(&brokers, 0, 20, 2, 3, 1).unwrap(), "deterministic");
    }

    #[test]
    fn added_partitions_continue_the_numbering() {
        let a = assign_replicas(&set(&[7, 8]), 4, 2, 1, 0, 0).unwrap();
        assert_eq!(a.keys().copied().collect::<Vec<_>>(), [4, 5]);
    }

    #[test]
    fn too_few_brokers_is_a_typed_error() {
        assert_eq!(
            assign_replicas(&set(&[1, 2]), 0, 1, 3, 0, 0),
            Err(AssignError::TooFewBrokers { factor: 3, live: 2 })
        );
        assert_eq!(assign_replicas(&set(&[1]), 0, 1, 0, 0, 0), Err(AssignError::NoReplicas));
        assert_eq!(assign_replicas(&set(&[1]), 0, 3, 1, 5, 9).unwrap().len(), 3);
    }

    #[test]
    fn the_first_live_isr_member_in_replica_order_leads() {
        let replicas = [3, 1, 2];
        assert_eq!(elect_leader(&replicas, &[1, 2], &set(&[1, 2, 3]), false), Election::Clean(1));
        assert_eq!(elect_leader(&replicas, &[2, 1, 3], &set(&[2, 3]), false), Election::Clean(3));
        assert_eq!(elect_leader(&replicas, &[1], &set(&[2, 3]), false), Election::Offline);
        assert_eq!(elect_leader(&replicas, &[1], &set(&[2, 3]), true), Election::Unclean(3));
        assert_eq!(elect_leader(&replicas, &[1], &set(&[]), true), Election::Offline);
    }

    #[test]
    fn a_new_partition_starts_led_by_its_first_live_replica() {
        let state = PartitionState::initial(&[2, 1, 3], &set(&[1, 3]), 4);
        assert_eq!(
            state,
            PartitionState { leader: 1, leader_epoch: 0, isr: vec![1, 3], controller_epoch: 4 }
        );
        assert!(state.is_online());
        assert!(!PartitionState::initial(&[2], &set(&[1]), 0).is_online());
    }
}
