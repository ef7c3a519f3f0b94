//! The controller (`DESIGN.md`, "Replicated partitions"): the one broker that holds
//! `/controller` keeps every partition led by a live replica. When a leader's broker goes it
//! elects the first live member of the ISR in replica order (unclean — a live replica outside
//! the ISR — only for a topic that sets `unclean_leader_election = true`), bumping the leader
//! epoch; it drops dead brokers from ISRs; and it brings an offline partition back when a
//! replica that may lead returns.
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

use crate::coordinator::{SessionEvent, Watch, WatchEvent};
use crate::partitions::{Election, NO_LEADER, PartitionState, elect_leader};
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
        let mut changes = Vec::new();
        let mut offline = 0;
        for topic in self.registry.topics().await? {
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
        Ok(changes)
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
}
