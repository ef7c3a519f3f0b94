//! The typed layout of `docs/design.md` ("ZooKeeper layout") over any [`Coordinator`]:
//!
//! | path | kind | value |
//! |---|---|---|
//! | `/brokers/ids/{broker_id}` | ephemeral | `{"host":…,"port":…}` |
//! | `/consumers/{group}/ids/{consumer_id}` | ephemeral | `{"topic": streams, …}` |
//! | `/consumers/{group}/owners/{topic}/{p}` | ephemeral | `{consumer_id}-{stream}` |
//! | `/consumers/{group}/offsets/{topic}/{p}` | persistent | next offset |
//! | `/kafka-groups/{group}/offsets/{topic}/{p}` | persistent | next record number (Kafka groups) |
//!
//! Topics, their partitions' states and the controller are in [`crate::replicated`]. A
//! partition is named by its number `0..P-1` across the cluster.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::CoordError;
use crate::coordinator::{Coordinator, NodeMode, Watch};

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RegistryError {
    #[error(transparent)]
    Coord(#[from] CoordError),
    #[error("broker id {id} is already registered by {holder}")]
    BrokerIdTaken { id: i32, holder: String },
    #[error("{what} {name:?} cannot be part of a registry path")]
    InvalidName { what: &'static str, name: String },
    #[error("unreadable value at {path}: {reason}")]
    Corrupt { path: String, reason: String },
    /// A versioned write lost to another writer: read again and decide again.
    #[error("{path} was changed by another writer")]
    Conflict { path: String },
    #[error("topic {topic} already exists")]
    TopicExists { topic: String },
    #[error("invalid replica assignment: {reason}")]
    InvalidAssignment { reason: String },
    /// An operation that needs a group with no live member, on one that has members.
    #[error("consumer group {group} has live members ({}): stop them first", members.join(", "))]
    GroupActive { group: String, members: Vec<String> },
    /// An operator's request (a reassignment, an election) while an earlier one is under way.
    #[error("{path} exists: an earlier request is still being carried out")]
    AdminInProgress { path: &'static str },
}

/// Where a broker listens: its own protocol on `port`, and Kafka's on `kafka_port` if it has
/// a Kafka listener (`docs/design.md`, "Cluster registry").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerInfo {
    pub host: String,
    pub port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka_port: Option<u16>,
}

impl BrokerInfo {
    /// A broker without a Kafka listener.
    pub fn new(host: impl Into<String>, port: u16) -> BrokerInfo {
        BrokerInfo { host: host.into(), port, kafka_port: None }
    }

    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// The broker that coordinates the Kafka consumer group `group`, among `ids`, the brokers with
/// a Kafka listener: the one the group id's 64-bit FNV-1a hash picks in id order. Every broker
/// and `trib` compute it alike (`docs/design.md`, "Kafka consumer groups on the listener").
pub fn kafka_coordinator(group: &str, ids: impl IntoIterator<Item = i32>) -> Option<i32> {
    let mut ids: Vec<i32> = ids.into_iter().collect();
    ids.sort_unstable();
    ids.dedup();
    let hash = group
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let pick = usize::try_from(hash % ids.len().max(1) as u64).ok()?;
    ids.get(pick).copied()
}

/// A consumer's streams per topic.
pub type Subscription = BTreeMap<String, u32>;

/// The outcome of claiming a partition for a consumer stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    Claimed,
    OwnedBy(String),
}

/// The registries of one cluster.
#[derive(Clone)]
pub struct Registry {
    coordinator: Arc<dyn Coordinator>,
}

pub(crate) fn segment<'a>(what: &'static str, name: &'a str) -> Result<&'a str, RegistryError> {
    let valid = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.chars().any(char::is_control);
    if valid { Ok(name) } else { Err(RegistryError::InvalidName { what, name: name.to_owned() }) }
}

pub(crate) fn corrupt(path: &str, reason: impl fmt::Display) -> RegistryError {
    RegistryError::Corrupt { path: path.to_owned(), reason: reason.to_string() }
}

impl Registry {
    pub fn new(coordinator: Arc<dyn Coordinator>) -> Registry {
        Registry { coordinator }
    }

    pub fn coordinator(&self) -> &Arc<dyn Coordinator> {
        &self.coordinator
    }

    // Brokers.

    /// Registers this broker; fails with [`RegistryError::BrokerIdTaken`] if the id is live.
    pub async fn register_broker(&self, id: i32, info: &BrokerInfo) -> Result<(), RegistryError> {
        let path = format!("/brokers/ids/{id}");
        let data = serde_json::to_vec(info).expect("broker info serializes");
        match self.coordinator.create(&path, &data, NodeMode::Ephemeral).await {
            Err(CoordError::NodeExists { .. }) => {
                let holder = match self.coordinator.get(&path).await? {
                    Some((data, _)) => String::from_utf8_lossy(&data).into_owned(),
                    None => "a broker that just left".into(),
                };
                Err(RegistryError::BrokerIdTaken { id, holder })
            }
            result => Ok(result?),
        }
    }

    pub async fn unregister_broker(&self, id: i32) -> Result<(), RegistryError> {
        ignore_missing(self.coordinator.delete(&format!("/brokers/ids/{id}"), None).await)
    }

    /// Live brokers by id.
    pub async fn brokers(&self) -> Result<BTreeMap<i32, BrokerInfo>, RegistryError> {
        Ok(self.brokers_and_watch().await?.0)
    }

    /// Live brokers, and a watch that fires when one comes or goes.
    pub async fn brokers_and_watch(
        &self,
    ) -> Result<(BTreeMap<i32, BrokerInfo>, Watch), RegistryError> {
        self.coordinator.ensure("/brokers/ids").await?;
        let (ids, watch) = self.coordinator.children_and_watch("/brokers/ids").await?;
        let mut brokers = BTreeMap::new();
        for id in ids {
            let path = format!("/brokers/ids/{id}");
            let Some((data, _)) = self.coordinator.get(&path).await? else { continue };
            let info: BrokerInfo = serde_json::from_slice(&data).map_err(|e| corrupt(&path, e))?;
            brokers.insert(id.parse().map_err(|e| corrupt(&path, e))?, info);
        }
        Ok((brokers, watch))
    }

    // Topics.

    /// Every topic of the cluster.
    pub async fn topics(&self) -> Result<Vec<String>, RegistryError> {
        self.coordinator.ensure("/brokers/topics").await?;
        Ok(self.coordinator.children("/brokers/topics").await?)
    }

    /// Every partition of `topic`, `0..P-1`; none for a topic nobody created.
    pub async fn partitions(&self, topic: &str) -> Result<Vec<i32>, RegistryError> {
        Ok(match self.topic_assignment(topic).await? {
            Some((assignment, _)) => assignment.partitions.keys().copied().collect(),
            None => Vec::new(),
        })
    }

    // Consumers.

    pub async fn register_consumer(
        &self,
        group: &str,
        consumer: &str,
        subscription: &Subscription,
    ) -> Result<(), RegistryError> {
        let path = format!(
            "/consumers/{}/ids/{}",
            segment("group", group)?,
            segment("consumer id", consumer)?
        );
        let data = serde_json::to_vec(subscription).expect("subscription serializes");
        match self.coordinator.create(&path, &data, NodeMode::Ephemeral).await {
            Err(CoordError::NodeExists { .. }) => {
                self.coordinator.set(&path, &data, None).await?;
                Ok(())
            }
            result => Ok(result?),
        }
    }

    pub async fn unregister_consumer(
        &self,
        group: &str,
        consumer: &str,
    ) -> Result<(), RegistryError> {
        let path = format!(
            "/consumers/{}/ids/{}",
            segment("group", group)?,
            segment("consumer id", consumer)?
        );
        ignore_missing(self.coordinator.delete(&path, None).await)
    }

    /// Every group that has registered a consumer or committed an offset.
    pub async fn groups(&self) -> Result<Vec<String>, RegistryError> {
        self.coordinator.ensure("/consumers").await?;
        Ok(self.coordinator.children("/consumers").await?)
    }

    pub async fn consumers(
        &self,
        group: &str,
    ) -> Result<BTreeMap<String, Subscription>, RegistryError> {
        Ok(self.consumers_and_watch(group).await?.0)
    }

    /// The group's live consumers and their subscriptions, and a watch that fires when one
    /// comes or goes.
    pub async fn consumers_and_watch(
        &self,
        group: &str,
    ) -> Result<(BTreeMap<String, Subscription>, Watch), RegistryError> {
        let dir = format!("/consumers/{}/ids", segment("group", group)?);
        self.coordinator.ensure(&dir).await?;
        let (ids, watch) = self.coordinator.children_and_watch(&dir).await?;
        let mut consumers = BTreeMap::new();
        for id in ids {
            let path = format!("{dir}/{id}");
            let Some((data, _)) = self.coordinator.get(&path).await? else { continue };
            let subscription: Subscription =
                serde_json::from_slice(&data).map_err(|e| corrupt(&path, e))?;
            consumers.insert(id, subscription);
        }
        Ok((consumers, watch))
    }

    // Ownership.

    fn owner_path(group: &str, topic: &str, partition: i32) -> Result<String, RegistryError> {
        Ok(format!(
            "/consumers/{}/owners/{}/{partition}",
            segment("group", group)?,
            segment("topic", topic)?
        ))
    }

    /// Claims `partition` for `owner` (`{consumer_id}-{stream}`) with an ephemeral node.
    pub async fn claim(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        owner: &str,
    ) -> Result<Claim, RegistryError> {
        let path = Registry::owner_path(group, topic, partition)?;
        match self.coordinator.create(&path, owner.as_bytes(), NodeMode::Ephemeral).await {
            Ok(()) => Ok(Claim::Claimed),
            Err(CoordError::NodeExists { .. }) => match self.coordinator.get(&path).await? {
                Some((data, _)) if data == owner.as_bytes() => Ok(Claim::Claimed),
                Some((data, _)) => Ok(Claim::OwnedBy(String::from_utf8_lossy(&data).into_owned())),
                // Released between the two calls: the caller's retry will get it.
                None => Ok(Claim::OwnedBy(String::new())),
            },
            Err(e) => Err(e.into()),
        }
    }

    /// Releases `partition` if `owner` holds it.
    pub async fn release(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        owner: &str,
    ) -> Result<(), RegistryError> {
        let path = Registry::owner_path(group, topic, partition)?;
        match self.coordinator.get(&path).await? {
            Some((data, version)) if data == owner.as_bytes() => {
                ignore_missing(self.coordinator.delete(&path, Some(version)).await)
            }
            _ => Ok(()),
        }
    }

    /// Owner of each claimed partition of `topic` in `group`.
    pub async fn owners(
        &self,
        group: &str,
        topic: &str,
    ) -> Result<BTreeMap<i32, String>, RegistryError> {
        let dir =
            format!("/consumers/{}/owners/{}", segment("group", group)?, segment("topic", topic)?);
        self.read_partition_values(&dir, |_, data| {
            Ok(String::from_utf8_lossy(data).trim().to_owned())
        })
        .await
    }

    // Offsets.

    fn offset_path(group: &str, topic: &str, partition: i32) -> Result<String, RegistryError> {
        Ok(format!(
            "/consumers/{}/offsets/{}/{partition}",
            segment("group", group)?,
            segment("topic", topic)?
        ))
    }

    /// Records `offset` as the next offset `group` consumes from `partition`.
    pub async fn commit_offset(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<(), RegistryError> {
        let path = Registry::offset_path(group, topic, partition)?;
        self.put(&path, offset.to_string().as_bytes()).await
    }

    /// Writes `data` at `path`, creating it (and its parents) if it is not there.
    async fn put(&self, path: &str, data: &[u8]) -> Result<(), RegistryError> {
        let (path, data) = (path.to_owned(), data.to_vec());
        match self.coordinator.set(&path, &data, None).await {
            Err(CoordError::NoNode { .. }) => {
                match self.coordinator.create(&path, &data, NodeMode::Persistent).await {
                    Err(CoordError::NodeExists { .. }) => {
                        self.coordinator.set(&path, &data, None).await?;
                        Ok(())
                    }
                    result => Ok(result?),
                }
            }
            result => result.map(drop).map_err(Into::into),
        }
    }

    // Offsets of Kafka consumer groups (`docs/design.md`, "Kafka consumer groups"): record
    // numbers, apart from native groups' byte offsets.

    /// Records `record` as the next record Kafka group `group` consumes from `partition`,
    /// with the commit's `metadata` string (empty for none). The node holds the record number,
    /// then a newline and the metadata if there is any.
    pub async fn commit_kafka_offset(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        record: i64,
        metadata: &str,
    ) -> Result<(), RegistryError> {
        let path = Registry::kafka_offset_path(group, topic)? + &format!("/{partition}");
        let value = match metadata {
            "" => record.to_string(),
            metadata => format!("{record}\n{metadata}"),
        };
        self.put(&path, value.as_bytes()).await
    }

    fn kafka_offset_path(group: &str, topic: &str) -> Result<String, RegistryError> {
        Ok(format!(
            "/kafka-groups/{}/offsets/{}",
            segment("group", group)?,
            segment("topic", topic)?
        ))
    }

    /// Every offset Kafka group `group` committed, by topic and partition.
    pub async fn kafka_offsets(
        &self,
        group: &str,
    ) -> Result<BTreeMap<String, BTreeMap<i32, i64>>, RegistryError> {
        let commits = self.kafka_commits(group).await?;
        Ok(commits
            .into_iter()
            .map(|(topic, ps)| (topic, ps.into_iter().map(|(p, c)| (p, c.record)).collect()))
            .collect())
    }

    /// Every commit of Kafka group `group`, with its metadata, by topic and partition.
    pub async fn kafka_commits(
        &self,
        group: &str,
    ) -> Result<BTreeMap<String, BTreeMap<i32, KafkaCommit>>, RegistryError> {
        let dir = format!("/kafka-groups/{}/offsets", segment("group", group)?);
        let topics = match self.coordinator.children(&dir).await {
            Ok(topics) => topics,
            Err(CoordError::NoNode { .. }) => return Ok(BTreeMap::new()),
            Err(e) => return Err(e.into()),
        };
        let mut offsets = BTreeMap::new();
        for topic in topics {
            let values =
                self.read_partition_values(&format!("{dir}/{topic}"), parse_kafka_commit).await?;
            offsets.insert(topic, values);
        }
        Ok(offsets)
    }

    /// Forgets Kafka group `group`'s commit for `topic`'s `partition` (none is not an error).
    pub async fn delete_kafka_offset(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> Result<(), RegistryError> {
        let dir = Registry::kafka_offset_path(group, topic)?;
        ignore_missing(self.coordinator.delete(&format!("{dir}/{partition}"), None).await)?;
        // The topic's node goes with its last partition; a commit meanwhile keeps it.
        match self.coordinator.delete(&dir, None).await {
            Ok(()) | Err(CoordError::NoNode { .. } | CoordError::NotEmpty { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes Kafka group `group` and everything it committed.
    pub async fn delete_kafka_group(&self, group: &str) -> Result<(), RegistryError> {
        self.delete_tree(format!("/kafka-groups/{}", segment("group", group)?)).await
    }

    /// The Kafka groups that committed offsets.
    pub async fn kafka_groups(&self) -> Result<Vec<String>, RegistryError> {
        match self.coordinator.children("/kafka-groups").await {
            Ok(groups) => Ok(groups),
            Err(CoordError::NoNode { .. }) => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn offset(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> Result<Option<i64>, RegistryError> {
        let path = Registry::offset_path(group, topic, partition)?;
        match self.coordinator.get(&path).await? {
            Some((data, _)) => Ok(Some(parse_offset(&path, &data)?)),
            None => Ok(None),
        }
    }

    /// Committed offsets of every partition of `topic` in `group`.
    pub async fn offsets(
        &self,
        group: &str,
        topic: &str,
    ) -> Result<BTreeMap<i32, i64>, RegistryError> {
        let dir =
            format!("/consumers/{}/offsets/{}", segment("group", group)?, segment("topic", topic)?);
        self.read_partition_values(&dir, parse_offset).await
    }

    /// Deletes `group` from the registry: its committed offsets and everything else under
    /// `/consumers/{group}`. Refused with [`RegistryError::GroupActive`] while it has live
    /// members (a member that joins meanwhile makes the delete fail on its node).
    pub async fn delete_group(&self, group: &str) -> Result<(), RegistryError> {
        let members: Vec<String> = self.consumers(group).await?.into_keys().collect();
        if !members.is_empty() {
            return Err(RegistryError::GroupActive { group: group.to_owned(), members });
        }
        self.delete_tree(format!("/consumers/{}", segment("group", group)?)).await
    }

    /// Deletes `path` and everything below it, children first.
    pub(crate) async fn delete_tree(&self, path: String) -> Result<(), RegistryError> {
        let mut stack = vec![(path, false)];
        while let Some((path, expanded)) = stack.pop() {
            if expanded {
                ignore_missing(self.coordinator.delete(&path, None).await)?;
                continue;
            }
            match self.coordinator.children(&path).await {
                Ok(children) => {
                    stack.push((path.clone(), true));
                    stack.extend(children.into_iter().map(|c| (format!("{path}/{c}"), false)));
                }
                Err(CoordError::NoNode { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Topics `group` has committed offsets or claimed partitions for.
    pub async fn group_topics(&self, group: &str) -> Result<Vec<String>, RegistryError> {
        let group = segment("group", group)?;
        let mut topics = Vec::new();
        for kind in ["offsets", "owners"] {
            let dir = format!("/consumers/{group}/{kind}");
            match self.coordinator.children(&dir).await {
                Ok(children) => topics.extend(children),
                Err(CoordError::NoNode { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        topics.sort();
        topics.dedup();
        Ok(topics)
    }

    async fn read_partition_values<T>(
        &self,
        dir: &str,
        parse: impl Fn(&str, &[u8]) -> Result<T, RegistryError>,
    ) -> Result<BTreeMap<i32, T>, RegistryError> {
        let children = match self.coordinator.children(dir).await {
            Ok(children) => children,
            Err(CoordError::NoNode { .. }) => return Ok(BTreeMap::new()),
            Err(e) => return Err(e.into()),
        };
        let mut values = BTreeMap::new();
        for child in children {
            let path = format!("{dir}/{child}");
            let Some((data, _)) = self.coordinator.get(&path).await? else { continue };
            let partition: i32 = child.parse().map_err(|e| corrupt(&path, e))?;
            values.insert(partition, parse(&path, &data)?);
        }
        Ok(values)
    }
}

/// A Kafka group's commit of a partition: the next record it reads, and the metadata string
/// the client sent with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaCommit {
    pub record: i64,
    pub metadata: String,
}

fn parse_kafka_commit(path: &str, data: &[u8]) -> Result<KafkaCommit, RegistryError> {
    let text = String::from_utf8_lossy(data);
    let (record, metadata) = text.split_once('\n').unwrap_or((&text, ""));
    let record = record.trim().parse().map_err(|e| corrupt(path, e))?;
    Ok(KafkaCommit { record, metadata: metadata.to_owned() })
}

fn parse_offset(path: &str, data: &[u8]) -> Result<i64, RegistryError> {
    String::from_utf8_lossy(data).trim().parse().map_err(|e| corrupt(path, e))
}

pub(crate) fn ignore_missing(result: Result<(), CoordError>) -> Result<(), RegistryError> {
    match result {
        Ok(()) | Err(CoordError::NoNode { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_slashes_never_become_paths() {
        assert!(segment("topic", "a/b").is_err());
        assert!(segment("topic", "..").is_err());
        assert!(segment("topic", "page-views").is_ok());
    }
}
