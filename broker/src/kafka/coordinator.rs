//! The group coordinator's state (`docs/design.md`, "Kafka protocol listener"): the groups
//! this broker coordinates, their members and generations, and the offsets of a broker
//! without a registry. Membership lives in memory: a member that joins starts a rebalance
//! (the members already in the group learn of it from their heartbeats and join again); the
//! rebalance completes once every member has joined or the longest rebalance timeout has
//! passed (those that did not join are dropped); the leader's SyncGroup hands every member
//! its assignment (the assignors run in the clients). A member whose heartbeats stop for its
//! session timeout is dropped and the group rebalances.
//!
//! A static member (KIP-345: a `group.instance.id`) keeps its place across restarts: one that
//! joins again without a member id within its session timeout takes over its old member's
//! id slot and assignment without a rebalance, and one that misses a rebalance stays in the
//! group (with the metadata it last joined with) until its session expires. A request that
//! names an instance id held by another member id is refused `FENCED_INSTANCE_ID`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use protocol::kafka::response::code;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::node::Node;

/// The broker that coordinates `key`, a group or a transactional id (spread over the brokers
/// with a Kafka listener alike): `(id, host, kafka port)`.
pub(super) fn coordinator_of(node: &Node, key: &str) -> Option<(i32, String, u16)> {
    let brokers = node.kafka_endpoints();
    let id = cluster::kafka_coordinator(key, brokers.iter().map(|(id, _, _)| *id))?;
    brokers.into_iter().find(|(b, _, _)| *b == id)
}

/// Whether `node` coordinates `key`, a group or a transactional id.
pub(super) fn coordinates(node: &Node, key: &str) -> bool {
    coordinator_of(node, key).is_some_and(|(id, _, _)| id == node.config().broker_id)
}

/// How often the coordinator drops expired members and completes overdue rebalances.
const TICK_MS: u64 = 200;

/// Session timeouts a member may ask for, as Kafka's defaults bound them.
pub(super) const SESSION_TIMEOUT_MS: std::ops::RangeInclusive<i32> = 1_000..=1_800_000;
/// Groups kept at most: a join that would make more is refused.
pub(super) const GROUPS_MAX: usize = 10_000;
/// Members of one group at most.
pub(super) const MEMBERS_MAX: usize = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Empty,
    /// Waiting for the members to join.
    Joining,
    /// Joined: waiting for the leader's assignments.
    Syncing,
    Stable,
}

impl Phase {
    /// The state's name as Kafka's tools show it.
    pub(super) fn kafka_name(self) -> &'static str {
        match self {
            Phase::Empty => "Empty",
            Phase::Joining => "PreparingRebalance",
            Phase::Syncing => "CompletingRebalance",
            Phase::Stable => "Stable",
        }
    }
}

/// A JoinGroup's answer.
#[derive(Debug, Clone)]
pub(super) struct Joined {
    pub(super) error: i16,
    pub(super) generation: i32,
    pub(super) protocol: String,
    pub(super) leader: String,
    pub(super) member_id: String,
    /// The members, their instance ids and metadata, for the leader only.
    pub(super) members: Vec<(String, Option<String>, Bytes)>,
}

#[derive(Debug)]
pub(super) struct Member {
    /// Its `group.instance.id`, for a static member.
    pub(super) instance_id: Option<String>,
    pub(super) client_id: String,
    pub(super) client_host: String,
    pub(super) session_timeout: Duration,
    pub(super) rebalance_timeout: Duration,
    pub(super) protocols: Vec<(String, Bytes)>,
    pub(super) assignment: Bytes,
    pub(super) last_seen: Instant,
    /// Its JoinGroup, waiting for the rebalance to complete.
    pub(super) joining: Option<oneshot::Sender<Joined>>,
    /// Its SyncGroup, waiting for the leader's.
    pub(super) syncing: Option<oneshot::Sender<(i16, Bytes)>>,
}

#[derive(Debug)]
pub(super) struct Group {
    pub(super) phase: Phase,
    pub(super) generation: i32,
    pub(super) protocol_type: Option<String>,
    pub(super) protocol: String,
    pub(super) leader: String,
    pub(super) members: BTreeMap<String, Member>,
    /// The static members: instance id → the member id that holds it now.
    pub(super) instances: BTreeMap<String, String>,
    /// When a rebalance completes even if members have not joined.
    pub(super) rebalance_deadline: Option<Instant>,
    pub(super) next_member: u64,
}

impl Group {
    pub(super) fn new() -> Group {
        Group {
            phase: Phase::Empty,
            generation: 0,
            protocol_type: None,
            protocol: String::new(),
            leader: String::new(),
            members: BTreeMap::new(),
            instances: BTreeMap::new(),
            rebalance_deadline: None,
            next_member: 0,
        }
    }

    /// Starts a rebalance: the members join again within the longest rebalance timeout. A
    /// SyncGroup still waiting learns of it.
    pub(super) fn rebalance(&mut self, now: Instant) {
        let timeout = self.members.values().map(|m| m.rebalance_timeout).max();
        self.phase = if self.members.is_empty() { Phase::Empty } else { Phase::Joining };
        self.rebalance_deadline = timeout.map(|t| now + t);
        for member in self.members.values_mut() {
            if let Some(waiting) = member.syncing.take() {
                let _ = waiting.send((code::REBALANCE_IN_PROGRESS, Bytes::new()));
            }
        }
    }

    /// Completes the rebalance once every member has joined, or at its deadline with those
    /// that have: a new generation, a protocol every member takes, a leader.
    pub(super) fn try_complete(&mut self, now: Instant) {
        if self.phase != Phase::Joining {
            return;
        }
        let all_joined = self.members.values().all(|m| m.joining.is_some());
        let overdue = self.rebalance_deadline.is_some_and(|d| now >= d);
        if !all_joined && !overdue {
            return;
        }
        // A static member that missed the rebalance keeps its place until its session ends.
        self.members.retain(|_, m| m.joining.is_some() || m.instance_id.is_some());
        self.forget_instances();
        if self.members.is_empty() {
            self.phase = Phase::Empty;
            self.generation += 1;
            return;
        }
        self.generation += 1;
        if !self.members.contains_key(&self.leader) {
            self.leader = self.members.keys().next().expect("not empty").clone();
        }
        // The leader's most preferred protocol that every member takes.
        let leader = &self.members[&self.leader];
        let common = leader.protocols.iter().map(|(name, _)| name).find(|name| {
            self.members.values().all(|m| m.protocols.iter().any(|(n, _)| n == *name))
        });
        let Some(protocol) = common.cloned() else {
            for (id, member) in &mut self.members {
                if let Some(waiting) = member.joining.take() {
                    let _ = waiting.send(Joined::error(code::INCONSISTENT_GROUP_PROTOCOL, id));
                }
            }
            self.members.clear();
            self.phase = Phase::Empty;
            return;
        };
        self.protocol = protocol;
        self.phase = Phase::Syncing;
        self.rebalance_deadline = None;
        let metadata = self.metadata();
        for (id, member) in &mut self.members {
            member.last_seen = now;
            if let Some(waiting) = member.joining.take() {
                let members = if *id == self.leader { metadata.clone() } else { Vec::new() };
                let _ = waiting.send(Joined {
                    error: code::NONE,
                    generation: self.generation,
                    protocol: self.protocol.clone(),
                    leader: self.leader.clone(),
                    member_id: id.clone(),
                    members,
                });
            }
        }
    }

    /// Every member, its instance id and its metadata for the group's protocol: what the
    /// leader assigns from.
    pub(super) fn metadata(&self) -> Vec<(String, Option<String>, Bytes)> {
        self.members
            .iter()
            .map(|(id, m)| (id.clone(), m.instance_id.clone(), m.metadata(&self.protocol)))
            .collect()
    }

    /// Drops members whose session expired (those waiting in a join are not expected to
    /// heartbeat), and rebalances if any went.
    pub(super) fn expire(&mut self, now: Instant) {
        let before = self.members.len();
        self.members.retain(|_, m| {
            m.joining.is_some() || now.duration_since(m.last_seen) < m.session_timeout
        });
        if self.members.len() != before {
            self.forget_instances();
            self.rebalance(now);
        }
        self.try_complete(now);
    }

    /// Forgets the instance ids of members that are gone.
    fn forget_instances(&mut self) {
        let members = &self.members;
        self.instances.retain(|_, member| members.contains_key(member));
    }

    /// Whether `member_id` (with `instance_id`, if static) may act in the group: `Err` with
    /// `FENCED_INSTANCE_ID` if another member id holds the instance, `UNKNOWN_MEMBER_ID` if
    /// the group does not know it.
    pub(super) fn check_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), i16> {
        if let Some(instance) = instance_id {
            match self.instances.get(instance) {
                Some(holder) if holder != member_id => return Err(code::FENCED_INSTANCE_ID),
                Some(_) => {}
                None => return Err(code::UNKNOWN_MEMBER_ID),
            }
        }
        match self.members.contains_key(member_id) {
            true => Ok(()),
            false => Err(code::UNKNOWN_MEMBER_ID),
        }
    }

    /// Takes `member_id` out of the group; a JoinGroup or SyncGroup of its still waiting is
    /// answered `error`. Does not rebalance.
    pub(super) fn remove(&mut self, member_id: &str, error: i16) -> Option<Member> {
        let mut gone = self.members.remove(member_id)?;
        if let Some(instance) = &gone.instance_id
            && self.instances.get(instance).is_some_and(|m| m == member_id)
        {
            self.instances.remove(instance);
        }
        if let Some(waiting) = gone.joining.take() {
            let _ = waiting.send(Joined::error(error, member_id));
        }
        if let Some(waiting) = gone.syncing.take() {
            let _ = waiting.send((error, Bytes::new()));
        }
        Some(gone)
    }

    /// A static member that comes back without its member id: `new_id` takes the place of the
    /// member that held `instance`, with its assignment (and the leadership, if it had it).
    /// The old member's waiting requests are fenced. `None` if no member holds the instance.
    pub(super) fn replace_static(&mut self, instance: &str, new_id: &str) -> Option<&mut Member> {
        let old_id = self.instances.get(instance)?.clone();
        let member = self.remove(&old_id, code::FENCED_INSTANCE_ID)?;
        if self.leader == old_id {
            self.leader = new_id.to_owned();
        }
        self.instances.insert(instance.to_owned(), new_id.to_owned());
        Some(self.members.entry(new_id.to_owned()).or_insert(member))
    }
}

impl Member {
    /// The metadata it joined with for `protocol`.
    pub(super) fn metadata(&self, protocol: &str) -> Bytes {
        let chosen = self.protocols.iter().find(|(n, _)| n == protocol);
        chosen.map(|(_, meta)| meta.clone()).unwrap_or_default()
    }
}

impl Joined {
    pub(super) fn error(error: i16, member_id: &str) -> Joined {
        Joined {
            error,
            generation: -1,
            protocol: String::new(),
            leader: String::new(),
            member_id: member_id.to_owned(),
            members: Vec::new(),
        }
    }
}

/// A group's committed offsets (with their metadata), by topic and partition.
pub(super) type GroupOffsets = BTreeMap<String, BTreeMap<i32, cluster::KafkaCommit>>;

/// The groups this broker coordinates, and the offsets of a broker without a registry.
#[derive(Debug, Default)]
pub struct Coordinator {
    pub(super) groups: Mutex<HashMap<String, Group>>,
    pub(super) offsets: Mutex<HashMap<String, GroupOffsets>>,
}

impl Coordinator {
    pub(super) fn groups(&self) -> std::sync::MutexGuard<'_, HashMap<String, Group>> {
        self.groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops expired members and completes overdue rebalances: run every so often.
    pub fn tick(&self) {
        let now = Instant::now();
        let mut groups = self.groups();
        for group in groups.values_mut() {
            group.expire(now);
        }
        // A group without members has nothing to keep: its offsets are in the registry.
        groups.retain(|_, g| !g.members.is_empty());
    }
}

/// Ticks `coordinator` every [`TICK_MS`] until `stop`.
pub async fn tick_until(coordinator: std::sync::Arc<Coordinator>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_millis(TICK_MS));
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => coordinator.tick(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(protocols: &[&str], joining: Option<oneshot::Sender<Joined>>) -> Member {
        Member {
            instance_id: None,
            client_id: "test".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(30),
            protocols: protocols
                .iter()
                .map(|p| (p.to_string(), Bytes::from(p.to_string())))
                .collect(),
            assignment: Bytes::new(),
            last_seen: Instant::now(),
            joining,
            syncing: None,
        }
    }

    #[test]
    fn a_rebalance_completes_when_every_member_joined_with_a_protocol_all_take() {
        let now = Instant::now();
        let mut group = Group::new();
        let (a, mut a_joined) = oneshot::channel();
        group.members.insert("a".into(), member(&["range", "roundrobin"], Some(a)));
        group.members.insert("b".into(), member(&["roundrobin"], None));
        group.rebalance(now);
        group.try_complete(now);
        assert_eq!(group.phase, Phase::Joining, "b has not joined yet");
        let (b, mut b_joined) = oneshot::channel();
        group.members.get_mut("b").unwrap().joining = Some(b);
        group.try_complete(now);
        assert_eq!(group.phase, Phase::Syncing);
        let (a, b) = (a_joined.try_recv().unwrap(), b_joined.try_recv().unwrap());
        assert_eq!((a.error, a.generation, a.protocol.as_str()), (code::NONE, 1, "roundrobin"));
        assert_eq!(a.leader, "a");
        assert_eq!(a.members.len(), 2, "the leader gets every member's metadata");
        assert!(b.members.is_empty());
    }

    #[test]
    fn members_that_do_not_join_or_heartbeat_are_dropped() {
        let now = Instant::now();
        let mut group = Group::new();
        let (a, _a_joined) = oneshot::channel();
        group.members.insert("a".into(), member(&["range"], Some(a)));
        group.members.insert("b".into(), member(&["range"], None));
        group.rebalance(now);
        group.try_complete(now + Duration::from_secs(31));
        assert_eq!(group.members.keys().collect::<Vec<_>>(), ["a"], "b missed the rebalance");
        group.phase = Phase::Stable;
        group.expire(now + Duration::from_secs(31 + 11));
        assert!(group.members.is_empty(), "a's session expired");
        assert_eq!(group.phase, Phase::Empty);
    }

    /// A stable group of `a` (dynamic, the leader) and static `b` (instance `host-b`), with
    /// their assignments.
    fn stable_with_static_member(now: Instant) -> Group {
        let mut group = Group::new();
        let (a, _a_joined) = oneshot::channel();
        let (b, _b_joined) = oneshot::channel();
        group.members.insert("a".into(), member(&["range"], Some(a)));
        let mut static_b = member(&["range"], Some(b));
        static_b.instance_id = Some("host-b".into());
        group.members.insert("b-1".into(), static_b);
        group.instances.insert("host-b".into(), "b-1".into());
        group.rebalance(now);
        group.try_complete(now);
        group.members.get_mut("b-1").unwrap().assignment = Bytes::from_static(b"b's partitions");
        group.phase = Phase::Stable;
        group
    }

    #[test]
    fn a_static_member_that_comes_back_takes_its_place_without_a_rebalance() {
        let now = Instant::now();
        let mut group = stable_with_static_member(now);
        assert_eq!(group.generation, 1);
        let (b, mut b_waiting) = oneshot::channel();
        group.members.get_mut("b-1").unwrap().syncing = Some(b);
        let member = group.replace_static("host-b", "b-2").expect("host-b is known");
        assert_eq!(member.assignment, Bytes::from_static(b"b's partitions"));
        assert_eq!(b_waiting.try_recv().unwrap().0, code::FENCED_INSTANCE_ID, "the old one");
        assert_eq!(group.members.keys().collect::<Vec<_>>(), ["a", "b-2"]);
        assert_eq!((group.phase, group.generation), (Phase::Stable, 1));
        assert_eq!(group.check_member("b-2", Some("host-b")), Ok(()));
        assert_eq!(group.check_member("b-1", Some("host-b")), Err(code::FENCED_INSTANCE_ID));
        assert_eq!(group.check_member("b-1", None), Err(code::UNKNOWN_MEMBER_ID));
        assert!(group.replace_static("host-c", "c-1").is_none());
    }

    #[test]
    fn a_static_member_that_misses_a_rebalance_stays_until_its_session_ends() {
        let now = Instant::now();
        let mut group = stable_with_static_member(now);
        // `a` joins again; `b-1` (restarting) does not, and the rebalance times out.
        let (a, _a_joined) = oneshot::channel();
        group.members.get_mut("a").unwrap().joining = Some(a);
        group.rebalance(now);
        group.try_complete(now + Duration::from_secs(31));
        assert_eq!(group.members.keys().collect::<Vec<_>>(), ["a", "b-1"]);
        assert_eq!((group.phase, group.generation), (Phase::Syncing, 2));
        group.phase = Phase::Stable;
        group.members.get_mut("a").unwrap().last_seen = now + Duration::from_secs(40);
        group.expire(now + Duration::from_secs(41));
        assert_eq!(group.members.keys().collect::<Vec<_>>(), ["a"], "b-1's session ended");
        assert!(group.instances.is_empty());
        assert_eq!(group.phase, Phase::Joining);
    }
}
