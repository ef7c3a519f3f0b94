//! A broker in a cluster (`DESIGN.md`, "Replicated partitions"): it learns its roles from the
//! registry — no controller-to-broker requests. It watches the topics, their assignments and
//! their partitions' states, and for every partition it has a replica of, it keeps a log,
//! leads it when the state names it, and follows the leader otherwise. It also stands for
//! controller, and writes the ISR changes of the partitions it leads to their states.
//!
//! A replica the registry no longer gives this broker (its partition moved away by a
//! reassignment) is removed, files and all; so is every replica of a topic being deleted,
//! after which the broker acknowledges the deletion for the controller to finish it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use cluster::{
    BrokerInfo, Controller, ControllerError, PartitionState, ReassignmentPlan, Registry,
    RegistryError, TopicAssignment, Version, Watch,
};
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::broker::{Broker, Following};
use crate::leader::Leadership;

/// Topic settings that belong to the cluster rather than to a log.
pub(crate) const REPLICATION_FACTOR: &str = "replication_factor";
pub(crate) const MIN_INSYNC_REPLICAS: &str = "min_insync_replicas";
pub(crate) const CLUSTER_KEYS: [&str; 3] =
    [REPLICATION_FACTOR, MIN_INSYNC_REPLICAS, cluster::UNCLEAN_LEADER_ELECTION];

/// The cluster as this broker last read it.
#[derive(Debug, Default)]
pub(crate) struct View {
    pub brokers: BTreeMap<i32, BrokerInfo>,
    /// Every topic but those being deleted.
    pub topics: BTreeMap<String, TopicView>,
    /// Topics being deleted: refused to producers and to `CREATE_TOPIC`.
    pub deleting: BTreeSet<String>,
    pub reassignment: Option<ReassignmentPlan>,
}

#[derive(Debug)]
pub(crate) struct TopicView {
    pub assignment: TopicAssignment,
    pub states: BTreeMap<i32, (PartitionState, Version)>,
}

impl TopicView {
    pub(crate) fn min_insync_replicas(&self) -> usize {
        self.assignment
            .config
            .get(MIN_INSYNC_REPLICAS)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(1)
    }
}

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
    view: RwLock<Arc<View>>,
    /// Bumped after every view is applied; waiters (a topic just created) watch it.
    generation: watch::Sender<u64>,
    followers: Mutex<HashMap<(String, i32), Followed>>,
}

impl ReplicaManager {
    pub(crate) fn new(registry: Registry, broker_id: i32) -> ReplicaManager {
        ReplicaManager {
            registry,
            broker_id,
            view: RwLock::new(Arc::new(View::default())),
            generation: watch::Sender::new(0),
            followers: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    pub(crate) fn view(&self) -> Arc<View> {
        Arc::clone(&self.view.read().unwrap_or_else(|p| p.into_inner()))
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
    pub(crate) async fn run(self: Arc<Self>, broker: Weak<Broker>, stop: CancellationToken) {
        let mut backoff = service::Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
        let mut session = self.registry.coordinator().session_events();
        loop {
            let watches = match read_view(&self.registry).await {
                Ok((view, watches)) => {
                    backoff.reset();
                    let view = Arc::new(view);
                    let Some(broker) = broker.upgrade() else { return };
                    // Applied before it is shown: whoever sees a partition in the view (a
                    // topic's creator waiting for it, METADATA) finds its roles taken up.
                    self.apply(&broker, &view).await;
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
    async fn apply(&self, broker: &Arc<Broker>, view: &View) {
        self.remove_unassigned(broker, view).await;
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
            if let Err(code) = broker.host(topic, &tv.assignment, &hosted).await {
                tracing::error!(%topic, error = %code, "cannot keep this broker's replicas of the topic");
                continue;
            }
            for &p in &hosted {
                let Some((state, _)) = tv.states.get(&(p as i32)) else { continue };
                self.apply_partition(broker, view, topic, tv, p as i32, state).await;
            }
        }
    }

    /// Removes the replicas here that the registry does not give this broker (every one of
    /// a topic being deleted), and acknowledges each deletion once nothing of it is left. A
    /// topic the registry does not know at all is left alone: nothing says it was deleted.
    async fn remove_unassigned(&self, broker: &Arc<Broker>, view: &View) {
        for local in broker.logs().topics() {
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
            let _ = broker.remove_replicas(name, gone, whole).await;
        }
        // Said again on every pass while the deletion lasts (an acknowledgement is idempotent):
        // a topic deleted, created again and deleted again is acknowledged each time.
        for topic in &view.deleting {
            if broker.logs().topic(topic).is_some() {
                continue;
            }
            if let Err(e) = self.registry.acknowledge_deletion(topic, self.broker_id).await {
                tracing::warn!(%topic, error = %e, "cannot acknowledge the deletion");
            }
        }
    }

    async fn apply_partition(
        &self,
        broker: &Arc<Broker>,
        view: &View,
        topic: &str,
        tv: &TopicView,
        p: i32,
        state: &PartitionState,
    ) {
        let key = (topic.to_owned(), p);
        if state.leader == self.broker_id {
            self.stop_following(&key).await;
            if broker.leading_epoch(topic, p) == Some(state.leader_epoch) {
                broker.adopt_isr(topic, p, &state.isr, |r| view.brokers.contains_key(&r));
                broker.set_replicas(topic, p, tv.assignment.replicas(p).unwrap_or_default());
                return;
            }
            let leadership = Leadership {
                epoch: state.leader_epoch,
                replicas: tv.assignment.replicas(p).unwrap_or_default().to_vec(),
                isr: state.isr.clone(),
                min_insync_replicas: tv.min_insync_replicas(),
            };
            let store =
                isr_store(self.registry.clone(), topic, p, self.broker_id, state.leader_epoch);
            if let Err(code) = broker.lead_with(topic, p, leadership, Some(store)).await {
                tracing::error!(%topic, partition = p, error = %code, "cannot lead");
            }
            return;
        }
        broker.resign(topic, p);
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
        match broker.follow_throttled(
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

    async fn stop_following(&self, key: &(String, i32)) {
        let followed = self.followers.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
        if let Some(followed) = followed
            && let Err(e) = followed.following.stop().await
        {
            tracing::info!(topic = %key.0, partition = key.1, reason = %e, "follower had stopped");
        }
    }
}

/// The whole cluster, and a watch on everything read.
async fn read_view(registry: &Registry) -> Result<(View, Vec<Watch>), RegistryError> {
    let mut watches = Vec::new();
    let (brokers, watch) = registry.brokers_and_watch().await?;
    watches.push(watch);
    let (topics, watch) = registry.topics_and_watch().await?;
    watches.push(watch);
    let (deleting, watch) = registry.topics_being_deleted_and_watch().await?;
    watches.push(watch);
    let (reassignment, watch) = registry.reassignment_and_watch().await?;
    watches.push(watch);
    let reassignment = reassignment.map(|(plan, _)| plan);
    let mut view = View { brokers, topics: BTreeMap::new(), deleting, reassignment };
    for topic in topics {
        if view.deleting.contains(&topic) {
            continue;
        }
        let (assignment, watch) = registry.topic_assignment_and_watch(&topic).await?;
        watches.push(watch);
        let Some((assignment, _)) = assignment else { continue };
        let mut states = BTreeMap::new();
        for &p in assignment.partitions.keys() {
            let (state, watch) = registry.partition_state_and_watch(&topic, p).await?;
            watches.push(watch);
            if let Some(state) = state {
                states.insert(p, state);
            }
        }
        view.topics.insert(topic, TopicView { assignment, states });
    }
    Ok((view, watches))
}

/// Writes a leader's ISR to its partition's state, if the state still names this leader in
/// its epoch. `true` once written.
pub(crate) type IsrStore = Arc<dyn Fn(Vec<i32>) -> BoxFuture<'static, bool> + Send + Sync>;

fn isr_store(registry: Registry, topic: &str, partition: i32, me: i32, epoch: i32) -> IsrStore {
    let topic = topic.to_owned();
    Arc::new(move |isr: Vec<i32>| {
        let (registry, topic) = (registry.clone(), topic.clone());
        Box::pin(async move {
            loop {
                let found = match registry.partition_state(&topic, partition).await {
                    Ok(found) => found,
                    Err(e) => {
                        tracing::warn!(%topic, partition, error = %e, "cannot read the ISR");
                        return false;
                    }
                };
                let Some((state, version)) = found else { return false };
                if state.leader != me || state.leader_epoch != epoch {
                    return false;
                }
                if state.isr == isr {
                    return true;
                }
                let after = PartitionState { isr: isr.clone(), ..state };
                match registry.set_partition_state(&topic, partition, &after, version).await {
                    Ok(_) => {
                        tracing::info!(%topic, partition, leader_epoch = epoch, isr = ?isr, "ISR written");
                        return true;
                    }
                    Err(RegistryError::Conflict { .. }) => continue,
                    Err(e) => {
                        tracing::warn!(%topic, partition, error = %e, "cannot write the ISR");
                        return false;
                    }
                }
            }
        })
    })
}

/// Stands for controller while the broker runs: acts as controller while elected, and
/// stands again when the controller goes.
pub(crate) async fn stand_for_controller(
    registry: Registry,
    broker_id: i32,
    metrics: Arc<crate::metrics::Metrics>,
    stop: CancellationToken,
) {
    let mut backoff = service::Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        match Controller::elect(registry.clone(), broker_id).await {
            Ok(Some(controller)) => {
                backoff.reset();
                metrics.set_controller(Some(controller.offline_partitions()));
                let ran = controller.run(stop.clone()).await;
                metrics.set_controller(None);
                match ran {
                    Ok(()) => return,
                    Err(ControllerError::Fenced { epoch, current }) => {
                        tracing::warn!(epoch, current, "no longer the controller");
                    }
                    Err(e) => tracing::warn!(error = %e, "controller failed"),
                }
            }
            Ok(None) => match registry.controller_and_watch().await {
                Ok((Some(_), watch)) => {
                    backoff.reset();
                    tokio::select! {
                        () = stop.cancelled() => return,
                        _ = watch => {}
                    }
                    continue;
                }
                Ok((None, _)) => continue,
                Err(e) => tracing::warn!(error = %e, "cannot watch the controller"),
            },
            Err(e) => tracing::warn!(error = %e, "cannot stand for controller"),
        }
        if !backoff.wait(&stop).await {
            return;
        }
    }
}
