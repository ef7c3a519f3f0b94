//! A partition this broker leads with followers (`docs/design.md`, "Replicated partitions"): it
//! keeps the in-sync replicas (ISR) and the high watermark (HW), the smallest log end over the
//! ISR, which caps what consumers see and what an `acks` 3 produce waits for.
//!
//! - Each follower's fetch offset is its log end. A follower that has not reached the leader's
//!   log end for `replica_lag_ms` leaves the ISR; one outside it rejoins once its log end
//!   reaches the HW.
//! - The HW never moves back while this broker leads.
//! - `acks` 3 is refused with `NOT_ENOUGH_REPLICAS` while the ISR is smaller than
//!   `min_insync_replicas`, and answered once the HW is past the appended data, or with
//!   `REQUEST_TIMED_OUT` after `ack_timeout_ms`.
//!
//! In a cluster the ISR is also the partition's state in the registry: a shrink is written
//! there before it takes effect (so the high watermark never passes what a replica the
//! controller may elect lacks), an expansion after.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use protocol::ErrorCode;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::log::Partition;
use crate::metrics::Metrics;

/// Writes a leader's ISR to its partition's state, if the state still names this leader in
/// its epoch; `true` once written. What the membership layer hands a leader in a cluster.
pub type IsrStore = Arc<dyn Fn(Vec<i32>) -> BoxFuture<'static, bool> + Send + Sync>;

/// Who leads a partition and with whom: what a controller (or a test) hands a leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    pub epoch: i32,
    /// Every replica, this broker included.
    pub replicas: Vec<i32>,
    /// The in-sync replicas the leadership starts with, this broker included.
    pub isr: Vec<i32>,
    pub min_insync_replicas: usize,
}

pub(crate) struct Leader {
    partition: Arc<Partition>,
    broker_id: i32,
    epoch: i32,
    min_insync: usize,
    replica_lag: Duration,
    state: Mutex<State>,
    /// The HW, for producers that wait for it.
    high_watermark: watch::Sender<u64>,
    /// The log end when the leadership began. Every write acknowledged to `acks` all before
    /// then is in this log (it was in the ISR), at or below this end; until the HW reaches
    /// it, the HW is the one this broker had as a follower and may not show all of them.
    epoch_start: u64,
    /// Cancelled when the leadership ends; stops its lag checks.
    pub(crate) ended: CancellationToken,
    metrics: Arc<Metrics>,
    /// Where ISR changes are recorded, in a cluster.
    store: Option<IsrStore>,
    /// Wakes the lag task to record an expansion.
    expanded: tokio::sync::Notify,
}

struct State {
    /// Every replica, this broker included: a reassignment changes them.
    replicas: Vec<i32>,
    isr: BTreeSet<i32>,
    /// The ISR the registry holds, as last written or seen; the lag task writes `isr` when
    /// the two differ.
    recorded: BTreeSet<i32>,
    /// Replicas a reassignment under way takes away: they may stay in the ISR until it
    /// completes, but one that left it does not rejoin. The controller completes a move by
    /// writing the ISR without them and then the replica list; a leader that saw the first
    /// write and not yet the second would otherwise take a caught-up leaving replica back,
    /// and the registry would show an ISR that is not a subset of the replicas.
    leaving: BTreeSet<i32>,
    followers: BTreeMap<i32, Progress>,
}

#[derive(Debug, Clone, Copy)]
struct Progress {
    /// The follower's log end, as its last fetch said.
    end: u64,
    /// When the follower last had the leader's whole log.
    caught_up_at: Instant,
}

impl Leader {
    /// Leadership of `partition` in `leadership.epoch`, whose epoch the caller has started
    /// in the log. The HW starts where the partition's was (a follower learns it from its
    /// leader) or, for a leader alone in its ISR, at its log end.
    pub(crate) fn new(
        partition: Arc<Partition>,
        broker_id: i32,
        leadership: Leadership,
        replica_lag: Duration,
        metrics: Arc<Metrics>,
        store: Option<IsrStore>,
    ) -> Leader {
        let end = partition.end();
        let recorded: BTreeSet<i32> = leadership.isr.iter().copied().collect();
        let mut isr = recorded.clone();
        isr.insert(broker_id);
        let start = partition.high_watermark().unwrap_or_else(|| partition.visible_end()).min(end);
        let hw = if isr.len() == 1 { end } else { start };
        let now = Instant::now();
        let followers = leadership
            .replicas
            .iter()
            .filter(|&&r| r != broker_id)
            .map(|&r| (r, Progress { end: hw, caught_up_at: now }))
            .collect();
        partition.set_high_watermark(Some(hw));
        if isr.len() < leadership.replicas.len() {
            metrics.under_replicated.inc();
        }
        tracing::info!(
            partition = ?partition, epoch = leadership.epoch, isr = ?isr, high_watermark = hw,
            "leading"
        );
        Leader {
            partition,
            broker_id,
            epoch: leadership.epoch,
            min_insync: leadership.min_insync_replicas,
            replica_lag,
            state: Mutex::new(State {
                replicas: leadership.replicas,
                isr,
                recorded,
                leaving: BTreeSet::new(),
                followers,
            }),
            high_watermark: watch::Sender::new(hw),
            epoch_start: end,
            ended: CancellationToken::new(),
            metrics,
            store,
            expanded: tokio::sync::Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn epoch(&self) -> i32 {
        self.epoch
    }

    /// Replicas assigned to the partition, this leader included.
    pub(crate) fn replica_count(&self) -> usize {
        self.state().replicas.len()
    }

    pub(crate) fn high_watermark(&self) -> u64 {
        *self.high_watermark.borrow()
    }

    pub(crate) fn isr(&self) -> Vec<i32> {
        self.state().isr.iter().copied().collect()
    }

    /// A follower fetched from `offset`, its log end: it may rejoin the ISR (unless it is
    /// leaving), and the HW may move. Fetches from brokers that are not replicas are not
    /// counted.
    pub(crate) fn record_fetch(&self, replica_id: i32, offset: u64) {
        if replica_id == self.broker_id || self.ended.is_cancelled() {
            return;
        }
        let leader_end = self.partition.end();
        let mut state = self.state();
        if !state.replicas.contains(&replica_id) {
            return;
        }
        let hw = self.high_watermark();
        let Some(progress) = state.followers.get_mut(&replica_id) else { return };
        progress.end = offset;
        if offset >= leader_end {
            progress.caught_up_at = Instant::now();
        }
        if !state.isr.contains(&replica_id) && offset >= hw && !state.leaving.contains(&replica_id)
        {
            let was_under = self.under_replicated(&state);
            state.isr.insert(replica_id);
            self.metrics.isr_expands.inc();
            if was_under && !self.under_replicated(&state) {
                self.metrics.under_replicated.dec();
            }
            self.expanded.notify_one();
            tracing::info!(
                partition = ?self.partition, epoch = self.epoch, replica = replica_id,
                isr = ?state.isr, "ISR expanded"
            );
        }
        self.advance_high_watermark(&state);
    }

    /// The followers in the ISR that have not had the leader's whole log for
    /// `replica_lag_ms`.
    fn lagging(&self, now: Instant) -> Vec<i32> {
        let state = self.state();
        if self.ended.is_cancelled() {
            return Vec::new();
        }
        state
            .isr
            .iter()
            .copied()
            .filter(|r| *r != self.broker_id)
            .filter(|r| {
                state.followers.get(r).is_some_and(|p| {
                    now.saturating_duration_since(p.caught_up_at) > self.replica_lag
                })
            })
            .collect()
    }

    /// Removes the lagging followers from the ISR: first in the registry, in a cluster.
    pub(crate) async fn shrink_lagging(&self, now: Instant) {
        let lagging = self.lagging(now);
        if lagging.is_empty() {
            return;
        }
        if let Some(store) = &self.store {
            let proposed: Vec<i32> =
                self.isr().into_iter().filter(|r| !lagging.contains(r)).collect();
            if !store(proposed).await {
                return;
            }
        }
        let mut state = self.state();
        if self.ended.is_cancelled() {
            return;
        }
        let was_under = self.under_replicated(&state);
        for r in &lagging {
            // Gone already if the controller's change of the same ISR came in first.
            if state.isr.remove(r) {
                self.metrics.isr_shrinks.inc();
            }
        }
        if !was_under {
            self.metrics.under_replicated.inc();
        }
        tracing::warn!(
            partition = ?self.partition, epoch = self.epoch, left = ?lagging, isr = ?state.isr,
            "ISR shrank"
        );
        self.advance_high_watermark(&state);
    }

    /// Takes in the controller's ISR changes: a member the registry's ISR no longer lists
    /// leaves the in-memory ISR too (and the high watermark may move) if the registry had it
    /// before — the controller dropped it, perhaps a broker that died and came back with less
    /// than it had — or if its broker is gone (`is_live` says no). A member the registry never
    /// had, because this leader's own write of its expansion is still under way, stays.
    pub(crate) fn adopt_isr(&self, recorded: &[i32], is_live: impl Fn(i32) -> bool) {
        let mut state = self.state();
        if self.ended.is_cancelled() {
            return;
        }
        let before = std::mem::replace(&mut state.recorded, recorded.iter().copied().collect());
        let gone: Vec<i32> = state
            .isr
            .iter()
            .copied()
            .filter(|&r| r != self.broker_id && !recorded.contains(&r))
            .filter(|&r| before.contains(&r) || !is_live(r))
            .collect();
        if gone.is_empty() {
            if state.recorded != state.isr {
                // An expansion of this leader's that the registry does not have yet: write it.
                self.expanded.notify_one();
            }
            return;
        }
        let was_under = self.under_replicated(&state);
        for r in &gone {
            state.isr.remove(r);
            self.metrics.isr_shrinks.inc();
        }
        if !was_under {
            self.metrics.under_replicated.inc();
        }
        tracing::warn!(
            partition = ?self.partition, epoch = self.epoch, left = ?gone, isr = ?state.isr,
            "ISR shrank by the controller"
        );
        self.advance_high_watermark(&state);
    }

    fn under_replicated(&self, state: &State) -> bool {
        state.isr.len() < state.replicas.len()
    }

    /// Takes in a new replica list (a reassignment's) and the replicas the reassignment
    /// under way takes away, `leaving`: a new replica is followed from the start of its
    /// catching up, and one that left the list leaves the ISR (the controller has taken it
    /// out of the registry's ISR before).
    pub(crate) fn set_replicas(&self, replicas: &[i32], leaving: &[i32]) {
        let mut state = self.state();
        if self.ended.is_cancelled() {
            return;
        }
        state.leaving = leaving.iter().copied().collect();
        if state.replicas == replicas {
            return;
        }
        let was_under = self.under_replicated(&state);
        state.replicas = replicas.to_vec();
        let now = Instant::now();
        for &r in replicas.iter().filter(|&&r| r != self.broker_id) {
            state.followers.entry(r).or_insert(Progress { end: 0, caught_up_at: now });
        }
        state.followers.retain(|r, _| replicas.contains(r));
        let gone: Vec<i32> = state.isr.iter().copied().filter(|r| !replicas.contains(r)).collect();
        for r in &gone {
            state.isr.remove(r);
            self.metrics.isr_shrinks.inc();
        }
        match (was_under, self.under_replicated(&state)) {
            (false, true) => drop(self.metrics.under_replicated.inc()),
            (true, false) => drop(self.metrics.under_replicated.dec()),
            _ => {}
        }
        tracing::info!(
            partition = ?self.partition, epoch = self.epoch, replicas = ?replicas, isr = ?state.isr,
            "replicas changed"
        );
        if !gone.is_empty() {
            self.expanded.notify_one();
        }
        self.advance_high_watermark(&state);
    }

    /// Ends the leadership: producers waiting for followers are told this broker leads no
    /// more, and the partition no longer counts as under-replicated here.
    pub(crate) fn end(&self) {
        let state = self.state();
        if !self.ended.is_cancelled() && self.under_replicated(&state) {
            self.metrics.under_replicated.dec();
        }
        self.ended.cancel();
    }

    /// The HW after an append, a follower's fetch or an ISR change: the smallest log end
    /// over the ISR, never lower than before.
    fn advance_high_watermark(&self, state: &State) {
        let mut hw = self.partition.end();
        for r in state.isr.iter().filter(|r| **r != self.broker_id) {
            if let Some(progress) = state.followers.get(r) {
                hw = hw.min(progress.end);
            }
        }
        let advanced = self.high_watermark.send_if_modified(|current| {
            let advanced = hw > *current;
            *current = (*current).max(hw);
            advanced
        });
        if advanced {
            self.partition.set_high_watermark(Some(hw));
        }
    }

    /// Whether an `acks` 3 produce may be appended: the ISR is large enough.
    pub(crate) fn check_all(&self) -> Result<(), ErrorCode> {
        let isr = self.state().isr.len();
        if isr < self.min_insync {
            tracing::debug!(partition = ?self.partition, isr, min = self.min_insync, "not enough replicas");
            return Err(ErrorCode::NotEnoughReplicas);
        }
        Ok(())
    }

    /// After an append: a leader alone in its ISR has its HW at its log end at once.
    pub(crate) fn appended(&self) {
        let state = self.state();
        self.advance_high_watermark(&state);
    }

    /// Waits, at most `max_wait`, until the HW reaches the log end this leader had when its
    /// leadership began: once its followers have fetched in its epoch. A read that found
    /// nothing past the HW (or asked past it) waits for this before it is answered, so that a
    /// client reading its own acknowledged writes right after a leader change is not told the
    /// log ends short of them. Returns whether it waited; at once for a settled leader.
    pub(crate) async fn settle(&self, max_wait: Duration) -> bool {
        let mut hw = self.high_watermark.subscribe();
        if *hw.borrow_and_update() >= self.epoch_start {
            return false;
        }
        tokio::select! {
            _ = hw.wait_for(|&hw| hw >= self.epoch_start) => {}
            () = self.ended.cancelled() => {}
            // A follower that does not fetch leaves the ISR within `replica_lag`, and the HW
            // moves without it.
            () = tokio::time::sleep(max_wait) => {}
        }
        true
    }

    /// Waits until every in-sync replica has the log up to `end`.
    pub(crate) async fn wait_replicated(
        &self,
        end: u64,
        timeout: Duration,
    ) -> Result<(), ErrorCode> {
        let mut hw = self.high_watermark.subscribe();
        tokio::select! {
            reached = hw.wait_for(|&hw| hw >= end) => reached.map(drop).map_err(|_| ErrorCode::NotLeader),
            () = self.ended.cancelled() => Err(ErrorCode::NotLeader),
            () = tokio::time::sleep(timeout) => Err(ErrorCode::RequestTimedOut),
        }
    }
}

/// Shrinks the ISR of `leader` as its followers lag, and records its expansions, until the
/// leadership ends.
pub(crate) async fn watch_lag(leader: Arc<Leader>, stop: CancellationToken) {
    let period = (leader.replica_lag / 4).max(Duration::from_millis(10));
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = leader.ended.cancelled() => return,
            () = tokio::time::sleep(period) => leader.shrink_lagging(Instant::now()).await,
            () = leader.expanded.notified() => {}
        }
        if let Some(store) = &leader.store {
            let (isr, recorded) = {
                let state = leader.state();
                (state.isr.clone(), state.recorded.clone())
            };
            if isr != recorded && store(isr.iter().copied().collect()).await {
                leader.state().recorded = isr;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use crate::log::LogManager;

    /// Broker 1 leading partition 0 of `t` with replicas 1, 2, 3, all in the ISR.
    fn leader_of_three(dir: &std::path::Path) -> Leader {
        let config = BrokerConfig { data_dir: dir.to_path_buf(), ..BrokerConfig::default() };
        let partition =
            Arc::new(Partition::open(dir.join("t-0"), "t", 0, config.log()).expect("a partition"));
        let logs = Arc::new(LogManager::open(&config).expect("the logs"));
        let metrics = Arc::new(Metrics::new(logs, Box::new(Vec::new)));
        let leadership = Leadership {
            epoch: 1,
            replicas: vec![1, 2, 3],
            isr: vec![1, 2, 3],
            min_insync_replicas: 1,
        };
        Leader::new(partition, 1, leadership, Duration::from_secs(10), metrics, None)
    }

    #[test]
    fn a_replica_a_reassignment_takes_away_does_not_rejoin_the_isr() {
        let dir = tempfile::tempdir().unwrap();
        let leader = leader_of_three(dir.path());
        // The move to 1, 2 is under way; the controller has written the ISR without 3 and
        // not yet the replica list. 3, caught up, fetches again.
        leader.set_replicas(&[1, 2, 3], &[3]);
        leader.adopt_isr(&[1, 2], |_| true);
        assert_eq!(leader.isr(), vec![1, 2]);
        leader.record_fetch(3, leader.partition.end());
        assert_eq!(leader.isr(), vec![1, 2], "a leaving replica rejoined");
        leader.set_replicas(&[1, 2], &[]);
        assert_eq!(leader.isr(), vec![1, 2]);

        // Without a move, a replica the controller dropped rejoins once caught up.
        let other = tempfile::tempdir().unwrap();
        let leader = leader_of_three(other.path());
        leader.adopt_isr(&[1, 2], |_| true);
        leader.record_fetch(3, leader.partition.end());
        assert_eq!(leader.isr(), vec![1, 2, 3]);
    }
}
