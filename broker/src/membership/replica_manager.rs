//! A broker in a cluster (`docs/design.md`, "Replicated partitions"): it learns its roles from the
//! registry — no controller-to-broker requests. It watches the topics, their assignments and
//! their partitions' states, and for every partition it has a replica of, it keeps a log,
//! leads it when the state names it, and follows the leader otherwise. It also stands for
//! controller, and writes the ISR changes of the partitions it leads to their states.
//!
//! A replica the registry no longer gives this broker (its partition moved away by a
//! reassignment) is removed, files and all; so is every replica of a topic being deleted,
//! after which the broker acknowledges the deletion for the controller to finish it.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use cluster::{PartitionState, Registry, TopicAssignment};
use protocol::ErrorCode;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::controller::isr_store;
use super::view::{TopicView, View, read_view};
use crate::config::{TopicOverrides, split_cluster_keys};
use crate::replication::{Following, Leadership, Replicas};

/// A follower task and what it follows.
struct Followed {
    leader: i32,
    epoch: i32,
    following: Following,
    /// The reassignment throttle the follower copies at (0: none).
    throttle: Arc<AtomicU64>,
}

pub(crate) struct ReplicaManager {
    registry: Registry,
    broker_id: i32,
    replicas: Arc<Replicas>,
    view: RwLock<Arc<View>>,
    /// Bumped after every view is applied; waiters (a topic just created) watch it.
    generation: watch::Sender<u64>,
    followers: Mutex<HashMap<(String, i32), Followed>>,
}

impl ReplicaManager {
    pub(crate) fn new(registry: Registry, replicas: Arc<Replicas>) -> ReplicaManager {
        ReplicaManager {
            registry,
            broker_id: replicas.config().broker_id,
            replicas,
            view: RwLock::new(Arc::new(View::default())),
            generation: watch::Sender::new(0),
            followers: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn view(&self) -> Arc<View> {
        Arc::clone(&self.view.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Waits (at most `timeout`) until the first view of the cluster has been read and
    /// applied; whether it has.
    pub(crate) async fn wait_first_view(&self, timeout: Duration) -> bool {
        let mut generation = self.generation.subscribe();
        let first = generation.wait_for(|&g| g > 0);
        matches!(tokio::time::timeout(timeout, first).await, Ok(Ok(_)))
    }

    /// Waits (at most `timeout`) until an applied view has `topic` with a state for each of
    /// its partitions: this broker then has its replicas of it and leads what it leads.
    pub(crate) async fn wait_for_topic(&self, topic: &str, timeout: Duration) {
        let mut generation = self.generation.subscribe();
        let ready = |view: &View| {
            view.topics.get(topic).is_some_and(|t| t.states.len() == t.assignment.partitions.len())
        };
        let wait = async {
            loop {
                generation.borrow_and_update();
                if ready(&self.view()) {
                    return;
                }
                if generation.changed().await.is_err() {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(timeout, wait).await;
    }

    /// Reads the cluster and applies it after every change, until `stop`.
    pub(crate) async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut backoff = service::Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
        let mut session = self.registry.coordinator().session_events();
        loop {
            let watches = match read_view(&self.registry).await {
                Ok((view, watches)) => {
                    backoff.reset();
                    let view = Arc::new(view);
                    // Applied before it is shown: whoever sees a partition in the view (a
                    // topic's creator waiting for it, METADATA) finds its roles taken up.
                    self.apply(&view).await;
                    *self.view.write().unwrap_or_else(|p| p.into_inner()) = Arc::clone(&view);
                    self.generation.send_modify(|g| *g += 1);
                    watches
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the cluster; retrying");
                    if !backoff.wait(&stop).await {
                        return;
                    }
                    continue;
                }
            };
            tokio::select! {
                () = stop.cancelled() => break,
                _ = futures::future::select_all(watches) => {}
                _ = session.recv() => {}
            }
        }
        let followers: Vec<Followed> = self
            .followers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, f)| f)
            .collect();
        for followed in followers {
            let _ = followed.following.stop().await;
        }
    }

    /// Makes this broker's logs and roles match `view`.
    async fn apply(&self, view: &View) {
        self.remove_unassigned(view).await;
        for (topic, tv) in &view.topics {
            let hosted: BTreeSet<u32> = tv
                .assignment
                .partitions
                .iter()
                .filter(|(_, replicas)| replicas.contains(&self.broker_id))
                .map(|(&p, _)| p as u32)
                .collect();
            if hosted.is_empty() {
                continue;
            }
            if let Err(code) = self.host(topic, &tv.assignment, &hosted).await {
                tracing::error!(%topic, error = %code, "cannot keep this broker's replicas of the topic");
                continue;
            }
            for &p in &hosted {
                let Some((state, _)) = tv.states.get(&(p as i32)) else { continue };
                self.apply_partition(view, topic, tv, p as i32, state).await;
            }
            self.move_log_starts(topic, tv).await;
        }
    }

    /// Moves this broker's replicas' log starts where DeleteRecords put them (as far as each
    /// log reaches; the retention sweep goes on as it grows), on every replica alike, so that
    /// whichever leads next reads from the same start.
    async fn move_log_starts(&self, topic: &str, tv: &TopicView) {
        let Some(local) = self.replicas.logs().topic(topic) else { return };
        for (&p, &record) in &tv.log_starts {
            let Some(partition) = u32::try_from(p).ok().and_then(|p| local.partitions.get(&p))
            else {
                continue;
            };
            if partition.start_record() >= record {
                continue;
            }
            partition.want_start(record);
            let moving = Arc::clone(partition);
            match tokio::task::spawn_blocking(move || moving.advance_start()).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::error!(%topic, partition = p, error = %e, "cannot move the log start")
                }
                Err(e) => {
                    tracing::error!(%topic, partition = p, error = %e, "moving the log start panicked")
                }
            }
        }
    }

    /// Removes the replicas here that the registry does not give this broker (every one of
    /// a topic being deleted), and acknowledges each deletion once nothing of it is left. A
    /// topic the registry does not know at all is left alone: nothing says it was deleted.
    async fn remove_unassigned(&self, view: &View) {
        for local in self.replicas.logs().topics() {
            let name = local.name.as_str();
            let whole = view.deleting.contains(name);
            let gone: BTreeSet<u32> = match view.topics.get(name) {
                _ if whole => local.partitions.keys().copied().collect(),
                Some(tv) => local
                    .partitions
                    .keys()
                    .copied()
                    .filter(|&p| {
                        !tv.assignment
                            .replicas(p as i32)
                            .is_some_and(|replicas| replicas.contains(&self.broker_id))
                    })
                    .collect(),
                None => continue,
            };
            if gone.is_empty() && !whole {
                continue;
            }
            for &p in &gone {
                self.stop_following(&(name.to_owned(), p as i32)).await;
            }
            let _ = self.replicas.remove(name, gone, whole).await;
        }
        // Said again on every pass while the deletion lasts (an acknowledgement is idempotent):
        // a topic deleted, created again and deleted again is acknowledged each time.
        for topic in &view.deleting {
            if self.replicas.logs().topic(topic).is_some() {
                continue;
            }
            if let Err(e) = self.registry.acknowledge_deletion(topic, self.broker_id).await {
                tracing::warn!(%topic, error = %e, "cannot acknowledge the deletion");
            }
        }
    }

    async fn apply_partition(
        &self,
        view: &View,
        topic: &str,
        tv: &TopicView,
        p: i32,
        state: &PartitionState,
    ) {
        let key = (topic.to_owned(), p);
        if state.leader == self.broker_id {
            self.stop_following(&key).await;
            let replicas = tv.assignment.replicas(p).unwrap_or_default();
            // The view reads the reassignment before the assignments: with no move of this
            // partition in it, `replicas` is the list the last move (if any) left.
            let leaving: Vec<i32> =
                match view.reassignment.as_ref().and_then(|r| r.target(topic, p)) {
                    Some(target) => {
                        replicas.iter().copied().filter(|r| !target.contains(r)).collect()
                    }
                    None => Vec::new(),
                };
            if self.replicas.leading_epoch(topic, p) == Some(state.leader_epoch) {
                self.replicas.adopt_isr(topic, p, &state.isr, |r| view.brokers.contains_key(&r));
            } else {
                let leadership = Leadership {
                    epoch: state.leader_epoch,
                    replicas: replicas.to_vec(),
                    isr: state.isr.clone(),
                    min_insync_replicas: tv.min_insync_replicas(),
                };
                let store =
                    isr_store(self.registry.clone(), topic, p, self.broker_id, state.leader_epoch);
                if let Err(code) = self.replicas.lead_with(topic, p, leadership, Some(store)).await
                {
                    tracing::error!(%topic, partition = p, error = %code, "cannot lead");
                    return;
                }
            }
            self.replicas.set_replicas(topic, p, replicas, &leaving);
            return;
        }
        self.replicas.resign(topic, p);
        let Some(leader) = view.brokers.get(&state.leader) else {
            self.stop_following(&key).await;
            return;
        };
        // A replica catching up in a reassignment copies at its throttle.
        let throttle = match &view.reassignment {
            Some(plan)
                if plan.target(topic, p).is_some() && !state.isr.contains(&self.broker_id) =>
            {
                plan.throttle_bytes_per_s.unwrap_or(0)
            }
            _ => 0,
        };
        {
            let followers = self.followers.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(f) = followers.get(&key)
                && f.leader == state.leader
                && f.epoch == state.leader_epoch
                && !f.following.is_finished()
            {
                f.throttle.store(throttle, Ordering::Relaxed);
                return;
            }
        }
        self.stop_following(&key).await;
        let throttle = Arc::new(AtomicU64::new(throttle));
        match self.replicas.follow_throttled(
            topic,
            p,
            leader.addr(),
            state.leader_epoch,
            Arc::clone(&throttle),
        ) {
            Ok(following) => {
                let followed = Followed {
                    leader: state.leader,
                    epoch: state.leader_epoch,
                    following,
                    throttle,
                };
                self.followers.lock().unwrap_or_else(|p| p.into_inner()).insert(key, followed);
            }
            Err(code) => tracing::error!(%topic, partition = p, error = %code, "cannot follow"),
        }
    }

    /// This broker's replicas `hosted` of a topic of its cluster, with the topic's log
    /// settings.
    async fn host(
        &self,
        name: &str,
        assignment: &TopicAssignment,
        hosted: &BTreeSet<u32>,
    ) -> Result<(), ErrorCode> {
        let configs: Vec<(String, String)> =
            assignment.config.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let (_, log_keys) = split_cluster_keys(&configs);
        let count = assignment.partitions.len() as i32;
        let default_partitions = self.replicas.config().num_partitions;
        let overrides =
            TopicOverrides::parse(count, &log_keys, default_partitions).map_err(|e| {
                tracing::error!(topic = %name, error = %e, "the topic's settings are invalid");
                ErrorCode::InvalidConfig
            })?;
        self.replicas.host(name, overrides, hosted).await
    }

    async fn stop_following(&self, key: &(String, i32)) {
        let followed = self.followers.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
        if let Some(followed) = followed
            && let Err(e) = followed.following.stop().await
        {
            tracing::info!(topic = %key.0, partition = key.1, reason = %e, "follower had stopped");
        }
    }
}
