//! Requests an operator's tool leaves for the controller, as Kafka's tools leave them under
//! `/admin` (per cluster chroot):
//!
//! | path | kind | value |
//! |---|---|---|
//! | `/admin/delete_topics/{topic}` | persistent | empty: the topic is being deleted |
//! | `/admin/delete_topics/{topic}/{broker_id}` | persistent | empty: that broker removed its replicas |
//! | `/admin/reassign_partitions` | persistent | [`ReassignmentPlan`] (JSON) |
//! | `/admin/preferred_replica_election` | persistent | [`PreferredElection`] (JSON) |
//!
//! The tool writes a request and returns (or waits for it to go); the controller carries it
//! out and removes it when done. A topic being deleted is refused to producers and to
//! `CREATE_TOPIC` until its nodes are gone.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::coordinator::{NodeMode, Watch};
use crate::registry::{Registry, RegistryError, corrupt, ignore_missing, segment};
use crate::{CoordError, Version};

const DELETE_TOPICS: &str = "/admin/delete_topics";
const REASSIGN_PARTITIONS: &str = "/admin/reassign_partitions";
const PREFERRED_ELECTION: &str = "/admin/preferred_replica_election";

/// One partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

/// A partition's new replica list (the first is its preferred leader).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionMove {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<i32>,
}

/// `/admin/reassign_partitions`: Kafka's reassignment JSON (`{"version": 1, "partitions":
/// [{"topic": …, "partition": …, "replicas": […]}]}`), and the rate the new replicas copy at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReassignmentPlan {
    #[serde(default = "plan_version")]
    pub version: i32,
    pub partitions: Vec<PartitionMove>,
    /// Bytes per second each replica that is catching up copies at, at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_bytes_per_s: Option<u64>,
}

fn plan_version() -> i32 {
    1
}

impl ReassignmentPlan {
    /// Checks what the controller relies on: at least one move, each partition once, each
    /// with at least one replica and no broker twice.
    pub fn validate(&self) -> Result<(), String> {
        if self.partitions.is_empty() {
            return Err("the plan moves no partition".into());
        }
        let mut seen = BTreeSet::new();
        for m in &self.partitions {
            if !seen.insert((m.topic.as_str(), m.partition)) {
                return Err(format!("{}-{} is in the plan twice", m.topic, m.partition));
            }
            if m.replicas.is_empty() {
                return Err(format!("{}-{} has no replicas", m.topic, m.partition));
            }
            let distinct: BTreeSet<i32> = m.replicas.iter().copied().collect();
            if distinct.len() != m.replicas.len() {
                return Err(format!(
                    "{}-{} names a broker twice: {:?}",
                    m.topic, m.partition, m.replicas
                ));
            }
        }
        if self.throttle_bytes_per_s == Some(0) {
            return Err("throttle_bytes_per_s must be at least 1".into());
        }
        Ok(())
    }

    /// The replicas `topic`'s `partition` moves to, if the plan moves it.
    pub fn target(&self, topic: &str, partition: i32) -> Option<&[i32]> {
        self.partitions
            .iter()
            .find(|m| m.topic == topic && m.partition == partition)
            .map(|m| m.replicas.as_slice())
    }
}

/// `/admin/preferred_replica_election`: partitions whose first replica should lead again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreferredElection {
    pub partitions: Vec<TopicPartition>,
}

fn marker(topic: &str) -> Result<String, RegistryError> {
    Ok(format!("{DELETE_TOPICS}/{}", segment("topic", topic)?))
}

fn read<T: serde::de::DeserializeOwned>(
    path: &str,
    found: Option<(Vec<u8>, Version)>,
) -> Result<Option<(T, Version)>, RegistryError> {
    found
        .map(|(data, version)| {
            serde_json::from_slice(&data).map(|v| (v, version)).map_err(|e| corrupt(path, e))
        })
        .transpose()
}

/// How [`Registry::delete_topic`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deletion {
    /// Every replica is gone, and so is the topic.
    Done,
    /// Marked, but these brokers had not removed their replicas in time (a broker that is
    /// down finishes when it returns).
    Waiting(BTreeSet<i32>),
}

impl Registry {
    // Topic deletion.

    /// Marks `topic` for deletion; `false` if it already was.
    pub async fn mark_topic_deleted(&self, topic: &str) -> Result<bool, RegistryError> {
        let path = marker(topic)?;
        self.coordinator().ensure(DELETE_TOPICS).await?;
        match self.coordinator().create(&path, b"", NodeMode::Persistent).await {
            Ok(()) => Ok(true),
            Err(CoordError::NodeExists { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes `topic`: marks it, then waits at most `timeout` until every broker has removed
    /// its replicas and the controller has finished. What `trib topics delete --execute` and
    /// Kafka's DeleteTopics both do. `None` if the topic neither exists nor is being deleted.
    pub async fn delete_topic(
        &self,
        topic: &str,
        timeout: std::time::Duration,
    ) -> Result<Option<Deletion>, RegistryError> {
        let already = self.topics_being_deleted().await?.contains(topic);
        let replicas: BTreeSet<i32> = match self.topic_assignment(topic).await? {
            Some((assignment, _)) => assignment.partitions.values().flatten().copied().collect(),
            None if already => BTreeSet::new(),
            None => return Ok(None),
        };
        self.mark_topic_deleted(topic).await?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let marked = self.topics_being_deleted().await?.contains(topic);
            if !marked && self.topic_assignment(topic).await?.is_none() {
                return Ok(Some(Deletion::Done));
            }
            if tokio::time::Instant::now() >= deadline {
                let (acks, _) = self.deletion_acks_and_watch(topic).await?;
                return Ok(Some(Deletion::Waiting(replicas.difference(&acks).copied().collect())));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Topics marked for deletion, and a watch that fires when one is marked or done.
    pub async fn topics_being_deleted_and_watch(
        &self,
    ) -> Result<(BTreeSet<String>, Watch), RegistryError> {
        self.coordinator().ensure(DELETE_TOPICS).await?;
        let (topics, watch) = self.coordinator().children_and_watch(DELETE_TOPICS).await?;
        Ok((topics.into_iter().collect(), watch))
    }

    pub async fn topics_being_deleted(&self) -> Result<BTreeSet<String>, RegistryError> {
        Ok(self.topics_being_deleted_and_watch().await?.0)
    }

    /// Records that `broker_id` holds nothing of `topic` any more.
    pub async fn acknowledge_deletion(
        &self,
        topic: &str,
        broker_id: i32,
    ) -> Result<(), RegistryError> {
        let path = format!("{}/{broker_id}", marker(topic)?);
        match self.coordinator().create(&path, b"", NodeMode::Persistent).await {
            // Done already, or the whole deletion is (its marker went with it).
            Ok(()) | Err(CoordError::NodeExists { .. } | CoordError::NoNode { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The brokers that have removed their replicas of `topic`, and a watch that fires when
    /// another does.
    pub async fn deletion_acks_and_watch(
        &self,
        topic: &str,
    ) -> Result<(BTreeSet<i32>, Watch), RegistryError> {
        let path = marker(topic)?;
        let (children, watch) = match self.coordinator().children_and_watch(&path).await {
            Ok(found) => found,
            Err(CoordError::NoNode { .. }) => {
                let (_, watch) = self.coordinator().get_and_watch(&path).await?;
                (Vec::new(), watch)
            }
            Err(e) => return Err(e.into()),
        };
        let acks = children
            .iter()
            .map(|c| c.parse().map_err(|e| corrupt(&format!("{path}/{c}"), e)))
            .collect::<Result<_, _>>()?;
        Ok((acks, watch))
    }

    /// Ends a deletion: the topic's assignment and partition states, every group's offsets
    /// and owners of it, and last its marker.
    pub async fn finish_topic_deletion(&self, topic: &str) -> Result<(), RegistryError> {
        let topic_path = format!("/brokers/topics/{}", segment("topic", topic)?);
        self.delete_tree(topic_path).await?;
        for group in self.groups().await? {
            let group = segment("group", &group)?;
            for kind in ["offsets", "owners"] {
                self.delete_tree(format!("/consumers/{group}/{kind}/{topic}")).await?;
            }
        }
        for group in self.kafka_groups().await? {
            let group = segment("group", &group)?;
            self.delete_tree(format!("/kafka-groups/{group}/offsets/{topic}")).await?;
        }
        self.delete_tree(marker(topic)?).await
    }

    // Reassignment.

    /// Starts `plan`; [`RegistryError::AdminInProgress`] while another reassignment runs.
    pub async fn start_reassignment(&self, plan: &ReassignmentPlan) -> Result<(), RegistryError> {
        plan.validate().map_err(|reason| RegistryError::InvalidAssignment { reason })?;
        self.create_request(REASSIGN_PARTITIONS, &serde_json::to_vec(plan).expect("serializes"))
            .await
    }

    /// The reassignment under way and its version, and a watch that fires when it changes.
    pub async fn reassignment_and_watch(
        &self,
    ) -> Result<(Option<(ReassignmentPlan, Version)>, Watch), RegistryError> {
        let (found, watch) = self.coordinator().get_and_watch(REASSIGN_PARTITIONS).await?;
        Ok((read(REASSIGN_PARTITIONS, found)?, watch))
    }

    pub async fn reassignment(&self) -> Result<Option<(ReassignmentPlan, Version)>, RegistryError> {
        Ok(self.reassignment_and_watch().await?.0)
    }

    /// Leaves the moves still to do in the plan at `expected`, or removes it when none is.
    pub async fn update_reassignment(
        &self,
        plan: &ReassignmentPlan,
        expected: Version,
    ) -> Result<(), RegistryError> {
        self.update_request(REASSIGN_PARTITIONS, plan.partitions.is_empty(), plan, expected).await
    }

    // Preferred leader election.

    /// Asks the controller to move leadership back to the preferred replicas of `election`;
    /// [`RegistryError::AdminInProgress`] while an earlier request is being carried out.
    pub async fn request_preferred_election(
        &self,
        election: &PreferredElection,
    ) -> Result<(), RegistryError> {
        self.create_request(PREFERRED_ELECTION, &serde_json::to_vec(election).expect("serializes"))
            .await
    }

    pub async fn preferred_election_and_watch(
        &self,
    ) -> Result<(Option<(PreferredElection, Version)>, Watch), RegistryError> {
        let (found, watch) = self.coordinator().get_and_watch(PREFERRED_ELECTION).await?;
        Ok((read(PREFERRED_ELECTION, found)?, watch))
    }

    pub async fn preferred_election(
        &self,
    ) -> Result<Option<(PreferredElection, Version)>, RegistryError> {
        Ok(self.preferred_election_and_watch().await?.0)
    }

    /// Leaves the partitions still to elect in the request at `expected`, or removes it.
    pub async fn update_preferred_election(
        &self,
        election: &PreferredElection,
        expected: Version,
    ) -> Result<(), RegistryError> {
        let done = election.partitions.is_empty();
        self.update_request(PREFERRED_ELECTION, done, election, expected).await
    }

    async fn create_request(&self, path: &'static str, data: &[u8]) -> Result<(), RegistryError> {
        self.coordinator().ensure("/admin").await?;
        match self.coordinator().create(path, data, NodeMode::Persistent).await {
            Err(CoordError::NodeExists { .. }) => Err(RegistryError::AdminInProgress { path }),
            result => Ok(result?),
        }
    }

    async fn update_request<T: Serialize>(
        &self,
        path: &'static str,
        done: bool,
        value: &T,
        expected: Version,
    ) -> Result<(), RegistryError> {
        let conflict = |e| match e {
            CoordError::BadVersion { .. } => RegistryError::Conflict { path: path.into() },
            e => e.into(),
        };
        if done {
            return ignore_missing(self.coordinator().delete(path, Some(expected)).await).map_err(
                |e| match e {
                    RegistryError::Coord(e) => conflict(e),
                    e => e,
                },
            );
        }
        let data = serde_json::to_vec(value).expect("serializes");
        match self.coordinator().set(path, &data, Some(expected)).await {
            Ok(_) | Err(CoordError::NoNode { .. }) => Ok(()),
            Err(e) => Err(conflict(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafkas_reassignment_json_reads_and_is_checked() {
        let plan: ReassignmentPlan = serde_json::from_str(
            r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[3,1,2]}]}"#,
        )
        .unwrap();
        assert_eq!(plan.target("t", 0), Some(&[3, 1, 2][..]));
        assert!(plan.validate().is_ok());
        let twice = ReassignmentPlan {
            partitions: vec![plan.partitions[0].clone(), plan.partitions[0].clone()],
            ..plan.clone()
        };
        assert!(twice.validate().unwrap_err().contains("twice"));
        let mut dup = plan.clone();
        dup.partitions[0].replicas = vec![1, 1];
        assert!(dup.validate().is_err());
        assert!(serde_json::from_str::<ReassignmentPlan>(r#"{"partitions":[],"x":1}"#).is_err());
    }
}
