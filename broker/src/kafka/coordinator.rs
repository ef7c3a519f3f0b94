//! The group coordinator's state (`docs/design.md`, "Kafka protocol listener"): the groups
//! this broker coordinates, their members and generations, and the offsets of a broker
//! without a registry. Membership lives in memory: a member that joins starts a rebalance
//! (the members already in the group learn of it from their heartbeats and join again); the
//! rebalance completes once every member has joined or the longest rebalance timeout has
//! passed (those that did not join are dropped); the leader's SyncGroup hands every member
//! its assignment (the assignors run in the clients). A member whose heartbeats stop for its
//! session timeout is dropped and the group rebalances.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use protocol::kafka::response::code;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

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

/// A JoinGroup's answer.
#[derive(Debug, Clone)]
pub(super) struct Joined {
    pub(super) error: i16,
    pub(super) generation: i32,
    pub(super) protocol: String,
    pub(super) leader: String,
    pub(super) member_id: String,
    /// The members and their metadata, for the leader only.
    pub(super) members: Vec<(String, Bytes)>,
}

#[derive(Debug)]
pub(super) struct Member {
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
        self.members.retain(|_, m| m.joining.is_some());
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
        let metadata: Vec<(String, Bytes)> = self
            .members
            .iter()
            .map(|(id, m)| {
                let chosen = m.protocols.iter().find(|(n, _)| *n == self.protocol);
                (id.clone(), chosen.map(|(_, meta)| meta.clone()).unwrap_or_default())
            })
            .collect();
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

    /// Drops members whose session expired (those waiting in a join are not expected to
    /// heartbeat), and rebalances if any went.
    pub(super) fn expire(&mut self, now: Instant) {
        let before = self.members.len();
        self.members.retain(|_, m| {
            m.joining.is_some() || now.duration_since(m.last_seen) < m.session_timeout
        });
        if self.members.len() != before {
            self.rebalance(now);
        }
        self.try_complete(now);
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

/// A group's committed offsets, by topic and partition.
pub(super) type GroupOffsets = BTreeMap<String, BTreeMap<i32, i64>>;

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
}
