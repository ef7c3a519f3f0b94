//! The replicated-partition paths of `docs/design.md` ("Cluster registry") on [`Registry`]:
//!
//! | path | kind | value |
//! |---|---|---|
//! | `/brokers/topics/{topic}` | persistent | [`TopicAssignment`] |
//! | `/brokers/topics/{topic}/partitions/{p}/state` | persistent, versioned writes | [`PartitionState`] |
//! | `/brokers/topics/{topic}/log_starts` | persistent, versioned writes | `{"p": record}`: where DeleteRecords moved each log's start |
//! | `/controller` | ephemeral | `{"broker_id": id}` |
//! | `/controller_epoch` | persistent | n, bumped by each new controller |
//!
//! Every write that can race another names the version it read, and a writer that loses gets
//! [`RegistryError::Conflict`] and must read again.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::coordinator::{NodeMode, Watch};
use crate::partitions::{PartitionState, TopicAssignment};
use crate::registry::{Registry, RegistryError, corrupt, segment};
use crate::{CoordError, Version};

const CONTROLLER: &str = "/controller";
const CONTROLLER_EPOCH: &str = "/controller_epoch";

#[derive(Serialize, Deserialize)]
struct ControllerNode {
    broker_id: i32,
}

fn topic_path(topic: &str) -> Result<String, RegistryError> {
    Ok(format!("/brokers/topics/{}", segment("topic", topic)?))
}

fn state_path(topic: &str, partition: i32) -> Result<String, RegistryError> {
    Ok(format!("{}/partitions/{partition}/state", topic_path(topic)?))
}

fn log_starts_path(topic: &str) -> Result<String, RegistryError> {
    Ok(format!("{}/log_starts", topic_path(topic)?))
}

fn conflict(path: String) -> impl FnOnce(CoordError) -> RegistryError {
    move |e| match e {
        CoordError::BadVersion { .. }
        | CoordError::NodeExists { .. }
        | CoordError::NoNode { .. } => RegistryError::Conflict { path },
        e => e.into(),
    }
}

fn read_json<T: serde::de::DeserializeOwned>(
    path: &str,
    found: Option<(Vec<u8>, Version)>,
) -> Result<Option<(T, Version)>, RegistryError> {
    match found {
        Some((data, version)) => {
            Ok(Some((serde_json::from_slice(&data).map_err(|e| corrupt(path, e))?, version)))
        }
        None => Ok(None),
    }
}

fn read_assignment(
    path: &str,
    found: Option<(Vec<u8>, Version)>,
) -> Result<Option<(TopicAssignment, Version)>, RegistryError> {
    let found: Option<(TopicAssignment, Version)> = read_json(path, found)?;
    if let Some((assignment, _)) = &found {
        assignment.validate().map_err(|e| corrupt(path, e))?;
    }
    Ok(found)
}

impl Registry {
    // Log starts (DeleteRecords).

    /// Where DeleteRecords moved each partition's log start of `topic` (the record number of
    /// its first record kept; partitions never moved are absent), and a watch that fires when
    /// one moves.
    pub async fn log_starts_and_watch(
        &self,
        topic: &str,
    ) -> Result<(BTreeMap<i32, u64>, Watch), RegistryError> {
        let path = log_starts_path(topic)?;
        let (found, watch) = self.coordinator().get_and_watch(&path).await?;
        let starts = read_json(&path, found)?.map(|(starts, _)| starts).unwrap_or_default();
        Ok((starts, watch))
    }

    /// Moves `partition`'s log start to record `record` (never back: a lower one leaves the
    /// start where it is), for every replica to apply; returns the start now recorded.
    pub async fn advance_log_start(
        &self,
        topic: &str,
        partition: i32,
        record: u64,
    ) -> Result<u64, RegistryError> {
        let path = log_starts_path(topic)?;
        loop {
            let found = self.coordinator().get(&path).await?;
            let (mut starts, version): (BTreeMap<i32, u64>, Option<Version>) =
                match read_json(&path, found)? {
                    Some((starts, version)) => (starts, Some(version)),
                    None => (BTreeMap::new(), None),
                };
            let start = starts.entry(partition).or_insert(0);
            if *start >= record {
                return Ok(*start);
            }
            *start = record;
            let data = serde_json::to_vec(&starts).expect("log starts serialize");
            let written = match version {
                Some(version) => {
                    self.coordinator().set(&path, &data, Some(version)).await.map(drop)
                }
                // Not under a topic that is gone: a create would make its path again.
                None if self.topic_assignment(topic).await?.is_none() => {
                    return Err(CoordError::NoNode { path: topic_path(topic)? }.into());
                }
                None => self.coordinator().create(&path, &data, NodeMode::Persistent).await,
            };
            match written.map_err(conflict(path.clone())) {
                Ok(_) => return Ok(record),
                // Another writer moved a start meanwhile: read again.
                Err(RegistryError::Conflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    // Topic assignments.

    /// Creates `topic` with its replica assignment; [`RegistryError::TopicExists`] if another
    /// writer created it first (the caller reads the winner's assignment).
    pub async fn create_topic(
        &self,
        topic: &str,
        assignment: &TopicAssignment,
    ) -> Result<(), RegistryError> {
        assignment.validate().map_err(|reason| RegistryError::InvalidAssignment { reason })?;
        let path = topic_path(topic)?;
        let data = serde_json::to_vec(assignment).expect("an assignment serializes");
        match self.coordinator().create(&path, &data, NodeMode::Persistent).await {
            Err(CoordError::NodeExists { .. }) => {
                Err(RegistryError::TopicExists { topic: topic.to_owned() })
            }
            result => Ok(result?),
        }
    }

    /// Creates `topic` with `partitions` partitions whose one replica, `broker`, leads each in
    /// epoch 0: how a broker that runs alone (and so leads its partitions in epoch 0) is
    /// described to a registry it does not know, by a tool or a test.
    pub async fn create_topic_led_by(
        &self,
        topic: &str,
        partitions: u32,
        broker: i32,
    ) -> Result<(), RegistryError> {
        let assignment = TopicAssignment {
            partitions: (0..partitions as i32).map(|p| (p, vec![broker])).collect(),
            config: BTreeMap::new(),
        };
        self.create_topic(topic, &assignment).await?;
        for p in 0..partitions as i32 {
            let state = PartitionState {
                leader: broker,
                leader_epoch: 0,
                isr: vec![broker],
                controller_epoch: 0,
            };
            self.create_partition_state(topic, p, &state).await?;
        }
        Ok(())
    }

    /// The replica assignment of `topic` and its version; `None` for a topic nobody created.
    pub async fn topic_assignment(
        &self,
        topic: &str,
    ) -> Result<Option<(TopicAssignment, Version)>, RegistryError> {
        let path = topic_path(topic)?;
        read_assignment(&path, self.coordinator().get(&path).await?)
    }

    /// Like [`Registry::topic_assignment`], and a watch that fires when the topic is created,
    /// changed or deleted.
    pub async fn topic_assignment_and_watch(
        &self,
        topic: &str,
    ) -> Result<(Option<(TopicAssignment, Version)>, Watch), RegistryError> {
        let path = topic_path(topic)?;
        let (found, watch) = self.coordinator().get_and_watch(&path).await?;
        Ok((read_assignment(&path, found)?, watch))
    }

    /// Replaces the assignment of `topic` (more partitions, new settings) if it is still at
    /// `expected`; returns the new version.
    pub async fn set_topic_assignment(
        &self,
        topic: &str,
        assignment: &TopicAssignment,
        expected: Version,
    ) -> Result<Version, RegistryError> {
        assignment.validate().map_err(|reason| RegistryError::InvalidAssignment { reason })?;
        let path = topic_path(topic)?;
        let data = serde_json::to_vec(assignment).expect("an assignment serializes");
        self.coordinator().set(&path, &data, Some(expected)).await.map_err(conflict(path))
    }

    /// Every topic, and a watch that fires when one is created or deleted.
    pub async fn topics_and_watch(&self) -> Result<(Vec<String>, Watch), RegistryError> {
        self.coordinator().ensure("/brokers/topics").await?;
        Ok(self.coordinator().children_and_watch("/brokers/topics").await?)
    }

    // Partition states.

    /// The state of one partition and its version; `None` before the partition's first state
    /// is written.
    pub async fn partition_state(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Option<(PartitionState, Version)>, RegistryError> {
        let path = state_path(topic, partition)?;
        read_json(&path, self.coordinator().get(&path).await?)
    }

    /// Like [`Registry::partition_state`], and a watch that fires when the state is written.
    pub async fn partition_state_and_watch(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<(Option<(PartitionState, Version)>, Watch), RegistryError> {
        let path = state_path(topic, partition)?;
        let (found, watch) = self.coordinator().get_and_watch(&path).await?;
        Ok((read_json(&path, found)?, watch))
    }

    /// The states of every partition of `topic` that has one.
    pub async fn partition_states(
        &self,
        topic: &str,
    ) -> Result<BTreeMap<i32, (PartitionState, Version)>, RegistryError> {
        let dir = format!("{}/partitions", topic_path(topic)?);
        let children = match self.coordinator().children(&dir).await {
            Ok(children) => children,
            Err(CoordError::NoNode { .. }) => return Ok(BTreeMap::new()),
            Err(e) => return Err(e.into()),
        };
        let mut states = BTreeMap::new();
        for child in children {
            let partition: i32 =
                child.parse().map_err(|e| corrupt(&format!("{dir}/{child}"), e))?;
            if let Some(state) = self.partition_state(topic, partition).await? {
                states.insert(partition, state);
            }
        }
        Ok(states)
    }

    /// The leader of every partition of `topic` that has a state ([`crate::NO_LEADER`] while
    /// it is offline).
    pub async fn partition_leaders(
        &self,
        topic: &str,
    ) -> Result<BTreeMap<i32, i32>, RegistryError> {
        let states = self.partition_states(topic).await?;
        Ok(states.into_iter().map(|(p, (state, _))| (p, state.leader)).collect())
    }

    /// Where the leader of `topic`'s `partition` listens, if the partition has a live leader.
    pub async fn leader(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Option<(i32, crate::BrokerInfo)>, RegistryError> {
        let Some((state, _)) = self.partition_state(topic, partition).await? else {
            return Ok(None);
        };
        if state.leader == crate::NO_LEADER {
            return Ok(None);
        }
        let path = format!("/brokers/ids/{}", state.leader);
        let Some((data, _)) = self.coordinator().get(&path).await? else { return Ok(None) };
        let info = serde_json::from_slice(&data).map_err(|e| corrupt(&path, e))?;
        Ok(Some((state.leader, info)))
    }

    /// Writes the first state of a partition; [`RegistryError::Conflict`] if it has one.
    pub async fn create_partition_state(
        &self,
        topic: &str,
        partition: i32,
        state: &PartitionState,
    ) -> Result<Version, RegistryError> {
        let path = state_path(topic, partition)?;
        let data = serde_json::to_vec(state).expect("a partition state serializes");
        self.coordinator()
            .create(&path, &data, NodeMode::Persistent)
            .await
            .map_err(conflict(path))?;
        Ok(0)
    }

    /// Replaces the state of a partition if it is still at `expected`; returns the new
    /// version, or [`RegistryError::Conflict`] when another writer got there first.
    pub async fn set_partition_state(
        &self,
        topic: &str,
        partition: i32,
        state: &PartitionState,
        expected: Version,
    ) -> Result<Version, RegistryError> {
        let path = state_path(topic, partition)?;
        let data = serde_json::to_vec(state).expect("a partition state serializes");
        self.coordinator().set(&path, &data, Some(expected)).await.map_err(conflict(path))
    }

    // Controller.

    /// Tries to make `broker_id` the controller. `Some(epoch)` when it now is, with the
    /// controller epoch it was elected in, bumped past every earlier controller's; `None` when
    /// another broker holds `/controller`. A broker whose own node is there (created again by
    /// the backend after its session expired) is elected again, in a new epoch.
    pub async fn elect_controller(&self, broker_id: i32) -> Result<Option<i32>, RegistryError> {
        let data = serde_json::to_vec(&ControllerNode { broker_id }).expect("serializes");
        match self.coordinator().create(CONTROLLER, &data, NodeMode::Ephemeral).await {
            Ok(()) => {}
            Err(CoordError::NodeExists { .. }) => {
                if self.controller().await? != Some(broker_id) {
                    return Ok(None);
                }
            }
            Err(e) => return Err(e.into()),
        }
        Ok(Some(self.bump_controller_epoch().await?))
    }

    /// Gives up the controller role if `broker_id` holds it.
    pub async fn resign_controller(&self, broker_id: i32) -> Result<(), RegistryError> {
        let Some((data, version)) = self.coordinator().get(CONTROLLER).await? else {
            return Ok(());
        };
        let holder: ControllerNode =
            serde_json::from_slice(&data).map_err(|e| corrupt(CONTROLLER, e))?;
        if holder.broker_id != broker_id {
            return Ok(());
        }
        match self.coordinator().delete(CONTROLLER, Some(version)).await {
            Ok(()) | Err(CoordError::NoNode { .. } | CoordError::BadVersion { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The controller's broker id, if there is one.
    pub async fn controller(&self) -> Result<Option<i32>, RegistryError> {
        Ok(self.controller_and_watch().await?.0)
    }

    /// The controller's broker id, and a watch that fires when it changes or goes.
    pub async fn controller_and_watch(&self) -> Result<(Option<i32>, Watch), RegistryError> {
        let (found, watch) = self.coordinator().get_and_watch(CONTROLLER).await?;
        let holder: Option<(ControllerNode, Version)> = read_json(CONTROLLER, found)?;
        Ok((holder.map(|(node, _)| node.broker_id), watch))
    }

    /// The epoch of the latest controller; 0 before the first.
    pub async fn controller_epoch(&self) -> Result<i32, RegistryError> {
        match self.coordinator().get(CONTROLLER_EPOCH).await? {
            Some((data, _)) => parse_epoch(&data),
            None => Ok(0),
        }
    }

    async fn bump_controller_epoch(&self) -> Result<i32, RegistryError> {
        loop {
            let written = match self.coordinator().get(CONTROLLER_EPOCH).await? {
                Some((data, version)) => {
                    let epoch = parse_epoch(&data)? + 1;
                    let text = epoch.to_string();
                    self.coordinator()
                        .set(CONTROLLER_EPOCH, text.as_bytes(), Some(version))
                        .await
                        .map(|_| epoch)
                }
                None => self
                    .coordinator()
                    .create(CONTROLLER_EPOCH, b"1", NodeMode::Persistent)
                    .await
                    .map(|()| 1),
            };
            match written {
                Ok(epoch) => return Ok(epoch),
                // Another broker bumped it between our read and write: read again.
                Err(CoordError::BadVersion { .. } | CoordError::NodeExists { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

fn parse_epoch(data: &[u8]) -> Result<i32, RegistryError> {
    String::from_utf8_lossy(data).trim().parse().map_err(|e| corrupt(CONTROLLER_EPOCH, e))
}
