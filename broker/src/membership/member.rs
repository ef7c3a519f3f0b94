//! This broker as a member of its cluster: registered in the registry, its replicas' roles
//! kept to what the registry says ([`ReplicaManager`]), standing for controller, and the
//! cluster's view for whoever asks (metadata, topic creation, the scrubber's repair sources).

use std::sync::Arc;
use std::time::Duration;

use cluster::{BrokerInfo, Coordinator, Registry, RegistryError};
use protocol::ErrorCode;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::controller::stand_for_controller;
use super::registration::Registration;
use super::replica_manager::ReplicaManager;
use super::topics;
use super::view::View;
use crate::config::BrokerConfig;
use crate::log::Partition;
use crate::metrics::Metrics;
use crate::replication::Replicas;
use crate::replication::scrub::RepairSource;

/// How long a topic's creator waits for this broker to take up its roles in it.
const TOPIC_READY_WAIT: Duration = Duration::from_secs(5);

/// How long joining waits for the first view of the cluster before the broker serves.
const FIRST_VIEW_WAIT: Duration = Duration::from_secs(30);

pub struct Membership {
    broker_id: i32,
    registration: Registration,
    manager: Arc<ReplicaManager>,
    config: BrokerConfig,
    /// The replica manager's and the controller candidacy's tasks.
    tasks: TaskTracker,
    stop: CancellationToken,
}

impl Membership {
    /// Registers this broker, reachable at `info`, in `session` if given, else in the
    /// ZooKeeper of its configuration, and takes its part in the cluster: its replicas' roles
    /// and its candidacy for controller. `None` for a broker with no cluster to join.
    pub async fn join(
        session: Option<Arc<dyn Coordinator>>,
        info: BrokerInfo,
        replicas: &Arc<Replicas>,
        metrics: &Arc<Metrics>,
    ) -> Result<Option<Membership>, RegistryError> {
        let config = replicas.config();
        let broker_id = config.broker_id;
        let registration = match (session, &config.zookeeper) {
            (Some(session), _) => Registration::register_in(session, broker_id, info).await?,
            (None, Some(connect)) => {
                Registration::register(connect, &config.zookeeper_session, broker_id, info).await?
            }
            (None, None) => return Ok(None),
        };
        let registry = registration.registry().clone();
        let manager = Arc::new(ReplicaManager::new(registry.clone(), Arc::clone(replicas)));
        let (tasks, stop) = (TaskTracker::new(), replicas.stopping().child_token());
        tasks.spawn(Arc::clone(&manager).run(stop.clone()));
        tasks.spawn(stand_for_controller(registry, broker_id, Arc::clone(metrics), stop.clone()));
        // Registered, the broker is found by clients at once; what it answers (METADATA, a
        // produce, a fetch) comes from its view of the cluster, so it serves only once it has
        // one. A broker restarted into a cluster answered METADATA with no topics at all.
        if !manager.wait_first_view(FIRST_VIEW_WAIT).await {
            tracing::warn!(
                broker_id,
                "no view of the cluster after {FIRST_VIEW_WAIT:?}; serving what it has"
            );
        }
        Ok(Some(Membership {
            broker_id,
            registration,
            manager,
            config: config.clone(),
            tasks,
            stop,
        }))
    }

    /// The cluster as this broker last read it.
    pub fn view(&self) -> Arc<View> {
        self.manager.view()
    }

    pub fn registry(&self) -> &Registry {
        self.registration.registry()
    }

    /// Removes this broker's registration at once, stops its part in the cluster (its
    /// followers stop) and waits for that.
    pub async fn leave(&self) {
        self.registration.unregister().await;
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// `CREATE_TOPIC` in the cluster (see [`topics`]); returns once this broker has taken up
    /// its roles in the topic, or after a few seconds.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: &[(String, String)],
    ) -> Result<(), ErrorCode> {
        if self.view().deleting.contains(name) {
            tracing::debug!(topic = %name, "refused: the topic is being deleted");
            return Err(ErrorCode::InvalidRequest);
        }
        topics::create(self.registry(), &self.config, name, partitions, configs).await?;
        self.manager.wait_for_topic(name, TOPIC_READY_WAIT).await;
        Ok(())
    }

    /// A topic created as a first produce or a Kafka client's Metadata creates one: with the
    /// brokers' defaults, unless it exists already — another broker may have created it a
    /// moment ago, and its settings stand (a creation would merge the defaults into them).
    pub async fn ensure_topic(&self, name: &str) -> Result<(), ErrorCode> {
        match self.registry().topic_assignment(name).await {
            Ok(Some(_)) => {
                self.manager.wait_for_topic(name, TOPIC_READY_WAIT).await;
                Ok(())
            }
            Ok(None) => self.create_topic(name, 0, &[]).await,
            Err(e) => Err(topics::internal(e)),
        }
    }

    /// Changes a topic's settings in the registry (see [`topics::alter`]).
    pub async fn alter_topic(
        &self,
        name: &str,
        changes: &[(String, Option<String>)],
        replace: bool,
        validate_only: bool,
    ) -> Result<(), (ErrorCode, String)> {
        if self.view().deleting.contains(name) {
            return Err((ErrorCode::UnknownTopic, format!("topic {name} is being deleted")));
        }
        topics::alter(self.registry(), &self.config, name, changes, replace, validate_only).await
    }

    /// Deletes a topic from the cluster, waiting at most `timeout` for its replicas to go.
    pub async fn delete_topic(&self, name: &str, timeout: Duration) -> Result<(), ErrorCode> {
        match self.registry().delete_topic(name, timeout).await {
            Ok(Some(cluster::Deletion::Done)) => Ok(()),
            Ok(Some(cluster::Deletion::Waiting(brokers))) => {
                tracing::info!(topic = %name, ?brokers, "deletion still waiting for brokers");
                Err(ErrorCode::RequestTimedOut)
            }
            Ok(None) => Err(ErrorCode::UnknownTopic),
            Err(e) => Err(topics::internal(e)),
        }
    }

    /// The other replicas a damaged range of `partition` may be copied from, in the order to
    /// try them — the leader, then the in-sync followers — each with its address and the
    /// epochs to ask in (the leader's, then this log's, newest first: an in-sync replica's
    /// log is in one of them).
    pub fn repair_sources(&self, partition: &Partition) -> Vec<RepairSource> {
        let view = self.view();
        let state = view
            .topics
            .get(partition.topic())
            .and_then(|t| t.states.get(&(partition.index() as i32)));
        let Some((state, _)) = state else { return Vec::new() };
        let mut epochs = vec![state.leader_epoch];
        epochs.extend(
            partition.epochs_newest_first().into_iter().filter(|&e| e != state.leader_epoch),
        );
        let mut ids = vec![state.leader];
        ids.extend(state.isr.iter().copied().filter(|&r| r != state.leader));
        ids.into_iter()
            .filter(|&r| r != self.broker_id)
            .filter_map(|replica| {
                let addr = view.brokers.get(&replica)?.addr();
                Some(RepairSource { replica, addr, epochs: epochs.clone() })
            })
            .collect()
    }
}
