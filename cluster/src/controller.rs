//! The controller (`docs/design.md`, "Controller"): the one broker that holds
//! `/controller` keeps every partition led by a live replica. When a leader's broker goes it
//! elects the first live member of the ISR in replica order (unclean — a live replica outside
//! the ISR — only for a topic that sets `unclean_leader_election = true`), bumping the leader
//! epoch; it drops dead brokers from ISRs; and it brings an offline partition back when a
//! replica that may lead returns.
//!
//! It also carries out what an operator's tool asked for under `/admin` ([`crate::admin`]):
//! it ends a topic's deletion once every replica has removed its logs, moves partitions to
//! new replica lists (new replicas join first and catch up; the old ones leave only once
//! every new one is in the ISR), and moves leadership back to preferred replicas.
//!
//! Every state write names the version it read, and before each pass the controller checks
//! that `/controller_epoch` is still its own: a controller that lost its session, or whose
//! successor has written a state, is fenced and stops ([`ControllerError::Fenced`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use thiserror::Error;
use tokio_util::sync::CancellationToken;

use crate::admin::{PreferredElection, ReassignmentPlan};
use crate::coordinator::{SessionEvent, Watch, WatchEvent};
use crate::partitions::{Election, NO_LEADER, PartitionState, TopicAssignment, elect_leader};
use crate::{Registry, RegistryError};

/// The topic setting that allows an unclean leader election.
pub const UNCLEAN_LEADER_ELECTION: &str = "unclean_leader_election";

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ControllerError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// Another controller was elected after this one.
    #[error("controller epoch {epoch} is fenced: the cluster is at {current}")]
    Fenced { epoch: i32, current: i32 },
}

/// One partition's state change made by the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub topic: String,
    pub partition: i32,
    pub before: PartitionState,
    pub after: PartitionState,
    /// The new leader was not in the ISR: what only the ISR had is lost.
    pub unclean: bool,
}

/// What the controller does to a partition in `state`, with `live` brokers: the new state,
/// and whether its leader was elected uncleanly; `None` when nothing needs to change.
pub fn decide(
    replicas: &[i32],
    state: &PartitionState,
    live: &BTreeSet<i32>,
    unclean_allowed: bool,
    controller_epoch: i32,
) -> Option<(PartitionState, bool)> {
    let live_isr: Vec<i32> = state.isr.iter().copied().filter(|r| live.contains(r)).collect();
    if state.leader != NO_LEADER && live.contains(&state.leader) {
        if live_isr.len() == state.isr.len() {
            return None;
        }
        let after = PartitionState { isr: live_isr, controller_epoch, ..state.clone() };
        return Some((after, false));
    }
    let (leader, isr, unclean) = match elect_leader(replicas, &state.isr, live, unclean_allowed) {
        Election::Clean(leader) => (leader, live_isr, false),
        Election::Unclean(leader) => (leader, vec![leader], true),
        // Offline: keep the ISR, so that its last member may lead cleanly when it returns.
        Election::Offline if state.leader == NO_LEADER => return None,
        Election::Offline => (NO_LEADER, state.isr.clone(), false),
    };
    let after = PartitionState {
        leader,
        leader_epoch: state.leader_epoch.saturating_add(1),
        isr,
        controller_epoch,
    };
    Some((after, unclean))
}

/// The next step of moving a partition from replicas `current` to `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReassignStep {
    /// The partition has its target replicas: nothing more to do.
    Done,
    /// Add the new replicas: write this replica list (the targets first, then the old ones).
    Expand(Vec<i32>),
    /// A new replica is not in the ISR yet (or no target replica could lead): wait.
    Wait,
    /// Every target replica is in sync: write `state` if there is one (a leader among the
    /// targets, an ISR of targets only), then the replica list `target`.
    Complete(Option<PartitionState>),
}

/// What the controller does next to move a partition in `state` from `current` to `target`.
pub fn reassign_step(
    current: &[i32],
    target: &[i32],
    state: &PartitionState,
    live: &BTreeSet<i32>,
    controller_epoch: i32,
) -> ReassignStep {
    if current == target {
        return ReassignStep::Done;
    }
    if !target.iter().all(|r| current.contains(r)) {
        let mut union = target.to_vec();
        union.extend(current.iter().filter(|r| !target.contains(r)));
        return ReassignStep::Expand(union);
    }
    if !target.iter().all(|r| state.isr.contains(r)) {
        return ReassignStep::Wait;
    }
    let isr: Vec<i32> = state.isr.iter().copied().filter(|r| target.contains(r)).collect();
    if target.contains(&state.leader) && live.contains(&state.leader) {
        if isr == state.isr {
            return ReassignStep::Complete(None);
        }
        return ReassignStep::Complete(Some(PartitionState {
            isr,
            controller_epoch,
            ..state.clone()
        }));
    }
    let Some(&leader) = target.iter().find(|r| isr.contains(r) && live.contains(r)) else {
        return ReassignStep::Wait;
    };
    ReassignStep::Complete(Some(PartitionState {
        leader,
        leader_epoch: state.leader_epoch.saturating_add(1),
        isr,
        controller_epoch,
    }))
}

/// The state that makes a partition's preferred replica (its first) its leader again, if it
/// is live, in sync and not leading already.
pub fn prefer_leader(
    replicas: &[i32],
    state: &PartitionState,
    live: &BTreeSet<i32>,
    controller_epoch: i32,
) -> Option<PartitionState> {
    let &preferred = replicas.first()?;
    if state.leader == preferred || !live.contains(&preferred) || !state.isr.contains(&preferred) {
        return None;
    }
    Some(PartitionState {
        leader: preferred,
        leader_epoch: state.leader_epoch.saturating_add(1),
        controller_epoch,
        ..state.clone()
    })
}

/// The elected controller of a cluster.
pub struct Controller {
    registry: Registry,
    broker_id: i32,
    epoch: i32,
    /// The session's events since before the election: an expiry at any time after it ends
    /// this controller.
    session: tokio::sync::broadcast::Receiver<SessionEvent>,
    /// Partitions without a leader after the last pass.
    offline: Arc<AtomicUsize>,
}

impl Controller {
    /// Stands for election as `broker_id`: the controller when elected, `None` when another
    /// broker holds `/controller`.
    pub async fn elect(
        registry: Registry,
        broker_id: i32,
    ) -> Result<Option<Controller>, RegistryError> {
        let session = registry.coordinator().session_events();
        let Some(epoch) = registry.elect_controller(broker_id).await? else { return Ok(None) };
        tracing::info!(broker_id, controller_epoch = epoch, "elected controller");
        let offline = Arc::default();
        Ok(Some(Controller { registry, broker_id, epoch, session, offline }))
    }

    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    pub fn broker_id(&self) -> i32 {
        self.broker_id
    }

    /// Partitions of the cluster without a leader (no replica that may lead is live), as of
    /// the last pass; it follows every pass for as long as this controller runs.
    pub fn offline_partitions(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.offline)
    }

    async fn check_not_fenced(&self) -> Result<(), ControllerError> {
        let current = self.registry.controller_epoch().await?;
        if current != self.epoch {
            return Err(ControllerError::Fenced { epoch: self.epoch, current });
        }
        Ok(())
    }

    /// One pass over every partition of every topic; returns the changes it wrote. A state
    /// that another writer changed meanwhile is left for the next pass.
    pub async fn reconcile(&self) -> Result<Vec<Change>, ControllerError> {
        self.check_not_fenced().await?;
        let live: BTreeSet<i32> = self.registry.brokers().await?.into_keys().collect();
        let deleting = self.registry.topics_being_deleted().await?;
        let mut changes = Vec::new();
        let mut offline = 0;
        for topic in self.registry.topics().await? {
            if deleting.contains(&topic) {
                continue;
            }
            let Some((assignment, _)) = self.registry.topic_assignment(&topic).await? else {
                continue;
            };
            let unclean_allowed = assignment
                .config
                .get(UNCLEAN_LEADER_ELECTION)
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
            let states = self.registry.partition_states(&topic).await?;
            for (&partition, replicas) in &assignment.partitions {
                let Some((state, version)) = states.get(&partition) else { continue };
                if state.controller_epoch > self.epoch {
                    let current = state.controller_epoch;
                    return Err(ControllerError::Fenced { epoch: self.epoch, current });
                }
                let Some((after, unclean)) =
                    decide(replicas, state, &live, unclean_allowed, self.epoch)
                else {
                    offline += usize::from(state.leader == NO_LEADER);
                    continue;
                };
                match self.registry.set_partition_state(&topic, partition, &after, *version).await {
                    Ok(_) => offline += usize::from(after.leader == NO_LEADER),
                    Err(RegistryError::Conflict { .. }) => {
                        offline += usize::from(state.leader == NO_LEADER);
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
                log_change(&topic, partition, state, &after, unclean, self.epoch);
                changes.push(Change {
                    topic: topic.clone(),
                    partition,
                    before: state.clone(),
                    after,
                    unclean,
                });
            }
        }
        self.offline.store(offline, Ordering::Relaxed);
        self.finish_deletions(&deleting).await?;
        self.reassign(&live, &deleting, &mut changes).await?;
        self.elect_preferred(&live, &mut changes).await?;
        Ok(changes)
    }

    /// Ends the deletion of every marked topic whose replicas have all removed their logs.
    async fn finish_deletions(&self, deleting: &BTreeSet<String>) -> Result<(), ControllerError> {
        for topic in deleting {
            let replicas: BTreeSet<i32> = match self.registry.topic_assignment(topic).await? {
                Some((assignment, _)) => {
                    assignment.partitions.values().flatten().copied().collect()
                }
                None => BTreeSet::new(),
            };
            let (acks, _) = self.registry.deletion_acks_and_watch(topic).await?;
            let waiting: Vec<i32> = replicas.difference(&acks).copied().collect();
            if !waiting.is_empty() {
                tracing::debug!(%topic, ?waiting, "deletion waits for replicas to remove their logs");
                continue;
            }
            self.registry.finish_topic_deletion(topic).await?;
            tracing::info!(%topic, controller_epoch = self.epoch, "topic deleted");
        }
        Ok(())
    }

    /// One step of every move of the reassignment under way; the moves not done stay.
    async fn reassign(
        &self,
        live: &BTreeSet<i32>,
        deleting: &BTreeSet<String>,
        changes: &mut Vec<Change>,
    ) -> Result<(), ControllerError> {
        let Some((plan, version)) = self.registry.reassignment().await? else { return Ok(()) };
        let mut remaining = Vec::new();
        for m in &plan.partitions {
            if deleting.contains(&m.topic) {
                continue;
            }
            let Some((assignment, assignment_version)) =
                self.registry.topic_assignment(&m.topic).await?
            else {
                tracing::warn!(topic = %m.topic, "reassignment of a topic that does not exist: dropped");
                continue;
            };
            let Some(current) = assignment.replicas(m.partition) else {
                tracing::warn!(topic = %m.topic, partition = m.partition, "reassignment of a partition that does not exist: dropped");
                continue;
            };
            let Some((state, state_version)) =
                self.registry.partition_state(&m.topic, m.partition).await?
            else {
                remaining.push(m.clone());
                continue;
            };
            let step = reassign_step(current, &m.replicas, &state, live, self.epoch);
            let with = |replicas: Vec<i32>| {
                let mut changed = assignment.clone();
                changed.partitions.insert(m.partition, replicas);
                changed
            };
            let finished = match step {
                ReassignStep::Done => true,
                ReassignStep::Wait => false,
                ReassignStep::Expand(union) => {
                    tracing::info!(topic = %m.topic, partition = m.partition, replicas = ?union, "reassignment: new replicas join");
                    self.write_assignment(&m.topic, &with(union), assignment_version).await?;
                    false
                }
                ReassignStep::Complete(after) => {
                    let state_written = match &after {
                        Some(after) => {
                            self.write_state(
                                &m.topic,
                                m.partition,
                                &state,
                                after,
                                state_version,
                                changes,
                            )
                            .await?
                        }
                        None => true,
                    };
                    state_written
                        && self
                            .write_assignment(
                                &m.topic,
                                &with(m.replicas.clone()),
                                assignment_version,
                            )
                            .await?
                }
            };
            if finished {
                tracing::info!(topic = %m.topic, partition = m.partition, replicas = ?m.replicas, "reassignment of the partition done");
                continue;
            }
            remaining.push(m.clone());
        }
        if remaining != plan.partitions {
            let left = ReassignmentPlan { partitions: remaining, ..plan };
            match self.registry.update_reassignment(&left, version).await {
                Ok(()) | Err(RegistryError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Moves leadership to the preferred replica of every partition asked for where it may
    /// lead; the request is removed once each is answered.
    async fn elect_preferred(
        &self,
        live: &BTreeSet<i32>,
        changes: &mut Vec<Change>,
    ) -> Result<(), ControllerError> {
        let Some((election, version)) = self.registry.preferred_election().await? else {
            return Ok(());
        };
        let mut retry = Vec::new();
        for tp in &election.partitions {
            let Some((assignment, _)) = self.registry.topic_assignment(&tp.topic).await? else {
                continue;
            };
            let Some(replicas) = assignment.replicas(tp.partition) else { continue };
            let Some((state, state_version)) =
                self.registry.partition_state(&tp.topic, tp.partition).await?
            else {
                continue;
            };
            let Some(after) = prefer_leader(replicas, &state, live, self.epoch) else { continue };
            if !self
                .write_state(&tp.topic, tp.partition, &state, &after, state_version, changes)
                .await?
            {
                retry.push(tp.clone());
            }
        }
        let left = PreferredElection { partitions: retry };
        match self.registry.update_preferred_election(&left, version).await {
            Ok(()) | Err(RegistryError::Conflict { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes a partition's state; `false` when another writer changed it first.
    async fn write_state(
        &self,
        topic: &str,
        partition: i32,
        before: &PartitionState,
        after: &PartitionState,
        expected: crate::Version,
        changes: &mut Vec<Change>,
    ) -> Result<bool, ControllerError> {
        match self.registry.set_partition_state(topic, partition, after, expected).await {
            Ok(_) => {}
            Err(RegistryError::Conflict { .. }) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        log_change(topic, partition, before, after, false, self.epoch);
        changes.push(Change {
            topic: topic.to_owned(),
            partition,
            before: before.clone(),
            after: after.clone(),
            unclean: false,
        });
        Ok(true)
    }

    /// Writes a topic's assignment; `false` when another writer changed it first.
    async fn write_assignment(
        &self,
        topic: &str,
        assignment: &TopicAssignment,
        expected: crate::Version,
    ) -> Result<bool, ControllerError> {
        match self.registry.set_topic_assignment(topic, assignment, expected).await {
            Ok(_) => Ok(true),
            Err(RegistryError::Conflict { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Reconciles after every change of the brokers, topics or partition states, until
    /// `stop` (`Ok`) or until this controller is fenced or loses its session (`Err`: stand
    /// for election again).
    pub async fn run(mut self, stop: CancellationToken) -> Result<(), ControllerError> {
        let mut backoff = service::Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            let watches = match self.reconcile_and_watch().await {
                Ok(watches) => {
                    backoff.reset();
                    watches
                }
                Err(ControllerError::Registry(e)) => {
                    tracing::warn!(error = %e, "controller pass failed; retrying");
                    if !backoff.wait(&stop).await {
                        return Ok(());
                    }
                    continue;
                }
                Err(fenced) => return Err(fenced),
            };
            let any = futures::future::select_all(watches);
            tokio::select! {
                () = stop.cancelled() => {
                    self.registry.resign_controller(self.broker_id).await.ok();
                    return Ok(());
                }
                (event, _, _) = any => {
                    if event == WatchEvent::SessionLost {
                        return Err(self.fenced().await);
                    }
                }
                event = self.session.recv() => {
                    if let Ok(SessionEvent::Expired) = event {
                        return Err(self.fenced().await);
                    }
                }
            }
        }
    }

    async fn fenced(&self) -> ControllerError {
        let current = self.registry.controller_epoch().await.unwrap_or(self.epoch);
        ControllerError::Fenced { epoch: self.epoch, current }
    }

    /// A pass, then watches on everything the next pass reads.
    async fn reconcile_and_watch(&self) -> Result<Vec<Watch>, ControllerError> {
        let mut watches = Vec::new();
        let (_, brokers) = self.registry.brokers_and_watch().await?;
        watches.push(brokers);
        let (topics, topics_watch) = self.registry.topics_and_watch().await?;
        watches.push(topics_watch);
        let (_, controller) = self.registry.controller_and_watch().await?;
        watches.push(controller);
        let (deleting, watch) = self.registry.topics_being_deleted_and_watch().await?;
        watches.push(watch);
        for topic in &deleting {
            watches.push(self.registry.deletion_acks_and_watch(topic).await?.1);
        }
        watches.push(self.registry.reassignment_and_watch().await?.1);
        watches.push(self.registry.preferred_election_and_watch().await?.1);
        for topic in &topics {
            let (assignment, watch) = self.registry.topic_assignment_and_watch(topic).await?;
            watches.push(watch);
            let Some((assignment, _)) = assignment else { continue };
            for &partition in assignment.partitions.keys() {
                let (_, watch) = self.registry.partition_state_and_watch(topic, partition).await?;
                watches.push(watch);
            }
        }
        self.reconcile().await?;
        if self.registry.controller().await? != Some(self.broker_id) {
            return Err(self.fenced().await);
        }
        Ok(watches)
    }
}

fn log_change(
    topic: &str,
    partition: i32,
    before: &PartitionState,
    after: &PartitionState,
    unclean: bool,
    controller_epoch: i32,
) {
    if after.leader == NO_LEADER {
        tracing::error!(
            %topic, partition, leader_epoch = after.leader_epoch, isr = ?after.isr, controller_epoch,
            "partition offline: no replica that may lead is live"
        );
    } else if unclean {
        tracing::error!(
            %topic, partition, leader = after.leader, leader_epoch = after.leader_epoch, controller_epoch,
            "unclean leader election: what only the old ISR had is lost"
        );
    } else if before.leader != after.leader {
        tracing::info!(
            %topic, partition, from = before.leader, leader = after.leader,
            leader_epoch = after.leader_epoch, isr = ?after.isr, controller_epoch, "elected leader"
        );
    } else {
        tracing::info!(
            %topic, partition, leader = after.leader, isr = ?after.isr, controller_epoch,
            "removed dead brokers from the ISR"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[i32]) -> BTreeSet<i32> {
        ids.iter().copied().collect()
    }

    fn state(leader: i32, leader_epoch: i32, isr: &[i32]) -> PartitionState {
        PartitionState { leader, leader_epoch, isr: isr.to_vec(), controller_epoch: 1 }
    }

    #[test]
    fn a_live_leader_with_a_live_isr_is_left_alone() {
        assert_eq!(decide(&[1, 2, 3], &state(1, 4, &[1, 2, 3]), &set(&[1, 2, 3]), false, 2), None);
    }

    #[test]
    fn dead_brokers_leave_the_isr_of_a_live_leader_in_the_same_epoch() {
        let (after, unclean) =
            decide(&[1, 2, 3], &state(1, 4, &[1, 2, 3]), &set(&[1, 2]), false, 2).unwrap();
        assert_eq!(after, PartitionState { controller_epoch: 2, ..state(1, 4, &[1, 2]) });
        assert!(!unclean);
    }

    #[test]
    fn a_dead_leader_is_replaced_by_the_next_live_isr_member_in_a_new_epoch() {
        let (after, unclean) =
            decide(&[1, 2, 3], &state(1, 4, &[1, 3]), &set(&[2, 3]), false, 2).unwrap();
        assert_eq!(after, PartitionState { controller_epoch: 2, ..state(3, 5, &[3]) });
        assert!(!unclean, "2 is live but was not in the ISR");
    }

    #[test]
    fn with_no_live_isr_member_the_partition_goes_offline_keeping_its_isr() {
        let (after, _) = decide(&[1, 2], &state(1, 4, &[1]), &set(&[2]), false, 2).unwrap();
        assert_eq!(after, PartitionState { controller_epoch: 2, ..state(NO_LEADER, 5, &[1]) });
        assert_eq!(decide(&[1, 2], &after, &set(&[2]), false, 2), None, "offline stays offline");
        let (back, unclean) = decide(&[1, 2], &after, &set(&[1, 2]), false, 3).unwrap();
        assert_eq!(back, PartitionState { controller_epoch: 3, ..state(1, 6, &[1]) });
        assert!(!unclean, "its last ISR member returned");
    }

    #[test]
    fn an_unclean_election_only_where_the_topic_allows_it() {
        let (after, unclean) = decide(&[1, 2], &state(1, 4, &[1]), &set(&[2]), true, 2).unwrap();
        assert_eq!(after, PartitionState { controller_epoch: 2, ..state(2, 5, &[2]) });
        assert!(unclean);
    }

    #[test]
    fn a_reassignment_adds_first_and_removes_only_once_the_targets_are_in_sync() {
        let live = set(&[1, 2, 3, 4]);
        let at = state(1, 4, &[1, 2, 3]);
        assert_eq!(
            reassign_step(&[1, 2, 3], &[4, 2, 3], &at, &live, 2),
            ReassignStep::Expand(vec![4, 2, 3, 1])
        );
        assert_eq!(reassign_step(&[4, 2, 3, 1], &[4, 2, 3], &at, &live, 2), ReassignStep::Wait);
        // 4 caught up: 1 leaves, and since it led, 4 (the first target in sync) leads.
        let synced = state(1, 4, &[1, 2, 3, 4]);
        assert_eq!(
            reassign_step(&[4, 2, 3, 1], &[4, 2, 3], &synced, &live, 2),
            ReassignStep::Complete(Some(PartitionState {
                controller_epoch: 2,
                ..state(4, 5, &[2, 3, 4])
            }))
        );
        assert_eq!(reassign_step(&[4, 2, 3], &[4, 2, 3], &synced, &live, 2), ReassignStep::Done);
    }

    #[test]
    fn a_leader_among_the_targets_keeps_its_epoch_and_a_reorder_is_one_write() {
        let live = set(&[1, 2, 3]);
        let at = state(2, 7, &[1, 2, 3]);
        assert_eq!(
            reassign_step(&[1, 2, 3], &[2, 3], &at, &live, 3),
            ReassignStep::Complete(Some(PartitionState {
                controller_epoch: 3,
                ..state(2, 7, &[2, 3])
            }))
        );
        assert_eq!(
            reassign_step(&[1, 2, 3], &[3, 2, 1], &at, &live, 3),
            ReassignStep::Complete(None)
        );
    }

    #[test]
    fn the_preferred_replica_leads_again_only_when_live_and_in_sync() {
        let at = state(2, 3, &[1, 2]);
        assert_eq!(
            prefer_leader(&[1, 2], &at, &set(&[1, 2]), 4),
            Some(PartitionState { controller_epoch: 4, ..state(1, 4, &[1, 2]) })
        );
        assert_eq!(prefer_leader(&[1, 2], &at, &set(&[2]), 4), None, "1 is not live");
        assert_eq!(
            prefer_leader(&[1, 2], &state(2, 3, &[2]), &set(&[1, 2]), 4),
            None,
            "not in sync"
        );
        assert_eq!(prefer_leader(&[2, 1], &at, &set(&[1, 2]), 4), None, "it leads already");
    }
}
