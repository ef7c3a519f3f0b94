//! A broker put together from its layers (`docs/design.md`, "Broker layers"): its logs and
//! replicas ([`Replicas`]), its part in a cluster ([`Membership`]), what every API calls
//! ([`Node`]), and the two protocols it serves on its listeners — its own (`native`) and,
//! when configured, Kafka's (`kafka`). [`Broker::open`] builds every part in order, below
//! first, so that nothing is set up in two phases: by the time it returns, the logs are
//! recovered, the broker is registered in its cluster and its roles are being taken up.

use std::sync::Arc;
use std::time::Duration;

use cluster::{BrokerInfo, Coordinator};
use service::tls::ServerTls;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::acl::{Acl, Authorizer};
use crate::config::{BrokerConfig, ConfigError};
use crate::kafka;
use crate::log::{CreateError, LogError, LogManager, tasks};
use crate::membership::Membership;
use crate::metrics::Metrics;
use crate::native::Connection;
use crate::net::admission::Admission;
use crate::net::listener::{self, Accepted, Listening};
use crate::node::Node;
use crate::replication::scrub::{self, RepairSources, Scrubber};
use crate::replication::{Leaders, ProducerHistory, Replicas};
use crate::tier::{self, RemoteTier, TierOpenError};

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BrokerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("opening the logs: {0}")]
    Open(#[from] CreateError),
    #[error("flushing the logs: {0}")]
    Flush(#[from] LogError),
    #[error("a blocking task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error("cannot read the listening address: {0}")]
    Listen(std::io::Error),
    #[error("ZooKeeper registration: {0}")]
    Registration(#[from] cluster::RegistryError),
    #[error("TLS: {0}")]
    Tls(#[from] service::tls::TlsError),
    #[error("ACL file: {0}")]
    Acl(#[from] crate::acl::AclError),
    #[error("remote store: {0}")]
    Tier(#[from] TierOpenError),
}

/// How long connections get to finish the request in hand after shutdown begins.
const DRAIN_MS: u64 = 5_000;

/// The sockets a broker serves: its own protocol's, and Kafka's when it speaks it.
pub struct Listeners {
    pub native: TcpListener,
    pub kafka: Option<TcpListener>,
}

impl Listeners {
    /// Binds `host:port`, and `kafka_host:kafka_port` when `kafka_port` is set.
    pub async fn bind(config: &BrokerConfig) -> std::io::Result<Listeners> {
        let native = listener::bind(&config.listen_addr()).await?;
        let kafka = match config.kafka_listen_addr() {
            Some(addr) => Some(listener::bind(&addr).await?),
            None => None,
        };
        Ok(Listeners { native, kafka })
    }
}

pub struct Broker {
    replicas: Arc<Replicas>,
    membership: Option<Arc<Membership>>,
    node: Arc<Node>,
    metrics: Arc<Metrics>,
    admission: Arc<Admission>,
    /// What the Kafka APIs keep, if the broker has a Kafka listener.
    kafka: Option<Arc<kafka::State>>,
    /// The listeners' TLS, if they speak TLS.
    tls: Option<Arc<ServerTls>>,
    /// Where clients and other brokers reach this broker.
    advertised: BrokerInfo,
    /// The scrubber and the group coordinator's ticks.
    tasks: TaskTracker,
    /// Where tiered topics' sealed segments go, if the broker has a remote store.
    tier: Option<Arc<RemoteTier>>,
}

impl Broker {
    /// Validates `config`, recovers every partition under `data_dir`, and joins the cluster:
    /// in `session` (the embedded coordination backend, say) when given, else in the
    /// ZooKeeper of its configuration, if any — registered at the ports of `listeners`.
    pub async fn open(
        config: BrokerConfig,
        listeners: &Listeners,
        session: Option<Arc<dyn Coordinator>>,
    ) -> Result<Arc<Broker>, BrokerError> {
        config.validate()?;
        let tls = match config.tls.server_files()? {
            Some(files) => Some(ServerTls::load(files)?),
            None => None,
        };
        let replica_tls = match config.replica_tls() {
            Some(files) => Some(service::tls::client_config(&files)?),
            None => None,
        };
        let authorizer = match &config.acl_file {
            Some(path) => Authorizer::new(Some(Acl::load(path)?)),
            None => Authorizer::new(None),
        };
        let advertised = advertised(&config, listeners)?;
        let for_tier = config.clone();
        let tier = tokio::task::spawn_blocking(move || RemoteTier::open(&for_tier)).await??;
        let tier = tier.map(Arc::new);
        let clustered = session.is_some() || config.zookeeper.is_some();
        let for_open = config.clone();
        let logs =
            Arc::new(tokio::task::spawn_blocking(move || LogManager::open(&for_open)).await??);
        let leaders = Arc::new(Leaders::default());
        let counted = Arc::downgrade(&leaders);
        let metrics = Arc::new(Metrics::new(
            Arc::clone(&logs),
            Box::new(move || counted.upgrade().map(|l| l.replica_counts()).unwrap_or_default()),
        ));
        let (m, c, l) = (Arc::clone(&metrics), config.clone(), Arc::clone(&logs));
        let replicas = tokio::task::spawn_blocking(move || {
            Replicas::new(c, l, leaders, m, clustered, replica_tls)
        })
        .await??;
        let replicas = Arc::new(replicas);
        if let Some(tier) = &tier {
            replicas.learn_producers_from(Arc::clone(tier) as Arc<dyn ProducerHistory>);
            // A deleted topic's objects in the store go before its deletion is acknowledged,
            // so that a topic created again under its name never meets them.
            let tier = Arc::clone(tier);
            replicas.on_topic_deleted(Box::new(move |topic, partitions| {
                let tier = Arc::clone(&tier);
                Box::pin(async move {
                    for index in partitions {
                        match tier.delete_partition(&topic, index).await {
                            Ok(0) => {}
                            Ok(objects) => {
                                tracing::info!(%topic, partition = index, objects, "deleted the topic's objects in the store")
                            }
                            Err(e) => {
                                tracing::error!(%topic, partition = index, error = %e, "cannot delete the topic's objects in the store ({{topic}}/{{partition}}/): they stay there")
                            }
                        }
                    }
                })
            }));
        }
        let membership =
            match Membership::join(session, advertised.clone(), &replicas, &metrics).await {
                Ok(joined) => joined.map(Arc::new),
                Err(e) => {
                    replicas.close().await?;
                    return Err(e.into());
                }
            };
        let node = Arc::new(Node::new(
            Arc::clone(&replicas),
            membership.clone(),
            Arc::clone(&metrics),
            authorizer,
            advertised.clone(),
            tier.clone(),
        ));
        let broker = Broker {
            admission: Arc::new(Admission::new(&config, Arc::clone(&metrics))),
            kafka: listeners.kafka.as_ref().map(|_| Arc::default()),
            replicas,
            membership,
            node,
            metrics,
            tls,
            advertised,
            tasks: TaskTracker::new(),
            tier,
        };
        broker.start_tasks();
        tracing::info!(
            broker_id = config.broker_id,
            data_dir = %config.data_dir.display(),
            topics = broker.logs().topics().len(),
            "logs open"
        );
        Ok(Arc::new(broker))
    }

    /// The background work above the replicas: retention, the scrubber, Kafka's group ticks.
    fn start_tasks(&self) {
        let config = self.config();
        let stop = self.replicas.stopping();
        let logs = Arc::clone(self.replicas.logs());
        self.tasks.spawn(tasks::retention(
            Arc::clone(&logs),
            config.retention_check_interval(),
            stop.clone(),
        ));
        let cleaner_interval = Duration::from_millis(config.cleaner_interval_ms);
        let metrics = Arc::clone(&self.metrics);
        let cleaned = move |pass: &crate::log::Cleaned| {
            metrics.cleaner_bytes.inc_by(pass.bytes_read);
            metrics.cleaner_segments.inc_by(pass.segments as u64);
            metrics.cleaner_records_removed.inc_by(pass.records);
        };
        self.tasks.spawn(tasks::cleaner(
            logs,
            cleaner_interval,
            config.cleaner_bytes_per_s,
            cleaned,
            stop.clone(),
        ));
        let sources: RepairSources = match &self.membership {
            Some(membership) => {
                let membership = Arc::clone(membership);
                Arc::new(move |partition| membership.repair_sources(partition))
            }
            None => Arc::new(|_| Vec::new()),
        };
        if let Some(interval) = config.scrub_interval() {
            let scrubber = Scrubber {
                logs: Arc::clone(self.replicas.logs()),
                sources: Arc::clone(&sources),
                tls: self.replicas.tls().cloned(),
                max_message_bytes: config.max_message_bytes,
                metrics: Arc::clone(&self.metrics),
            };
            self.tasks.spawn(scrub::run(
                scrubber,
                interval,
                config.scrub_bytes_per_s,
                stop.clone(),
            ));
        }
        if let Some(state) = &self.kafka {
            self.tasks.spawn(kafka::tick_until(Arc::clone(&state.groups), stop.clone()));
            self.tasks.spawn(kafka::sweep_until(
                Arc::clone(&self.node),
                Arc::clone(&state.transactions),
                Arc::clone(&state.groups),
                stop.clone(),
            ));
        }
        if let Some(remote) = &self.tier {
            self.tasks.spawn(tier::upload::run(
                Arc::clone(remote),
                Arc::clone(&self.replicas),
                Duration::from_millis(config.remote_task_interval_ms),
                config.remote_upload_bytes_per_s,
                stop.clone(),
            ));
            if let Some(interval) = config.scrub_interval() {
                self.tasks.spawn(tier::upload::scrub(
                    Arc::clone(remote),
                    Arc::clone(&self.replicas),
                    interval,
                    config.scrub_bytes_per_s,
                    tier::upload::Repairs {
                        sources,
                        tls: self.replicas.tls().cloned(),
                        metrics: Arc::clone(&self.metrics),
                    },
                    stop.clone(),
                ));
            }
        }
    }

    /// Serves `listeners` (those given to [`Broker::open`]) until `shutdown`; then closes
    /// every connection, leaves the cluster and flushes every partition before returning.
    pub async fn serve(
        self: Arc<Self>,
        listeners: Listeners,
        shutdown: CancellationToken,
    ) -> Result<(), BrokerError> {
        let config = self.config();
        let shared = Listening {
            limit: Arc::new(Semaphore::new(config.max_connections as usize)),
            tls: self.tls.clone(),
            metrics: Arc::clone(&self.metrics),
            connections: TaskTracker::new(),
        };
        let stop = CancellationToken::new();
        if let Some(tls) = &self.tls {
            service::tls::reload_on_sighup(Arc::clone(tls), shutdown.clone());
        }
        let broker_id = config.broker_id;
        let tls = self.tls.is_some();
        if let (Some(listener), Some(state)) = (listeners.kafka, &self.kafka) {
            tracing::info!(port = self.advertised.kafka_port, broker_id, tls, "Kafka listener");
            let (node, admission, state) =
                (Arc::clone(&self.node), Arc::clone(&self.admission), Arc::clone(state));
            let connection_stop = stop.clone();
            let serve = move |accepted: Accepted| {
                let client = kafka::Client {
                    node: Arc::clone(&node),
                    admission: Arc::clone(&admission),
                    state: Arc::clone(&state),
                    principal: Arc::from(accepted.principal),
                    host: Arc::from(accepted.peer.ip().to_string()),
                };
                let (stop, peer) = (connection_stop.clone(), accepted.peer);
                async move {
                    if let Err(e) = client.run(accepted.stream, stop).await {
                        tracing::debug!(%peer, error = %e, "Kafka connection ended");
                    }
                }
            };
            let accepting =
                listener::accept(listener, "kafka", shared.clone(), stop.clone(), serve);
            shared.connections.spawn(accepting);
        }
        let addr = listeners.native.local_addr().map_err(BrokerError::Listen)?;
        tracing::info!(%addr, broker_id, tls, "broker listening");
        let (node, admission, connection_stop) =
            (Arc::clone(&self.node), Arc::clone(&self.admission), stop.clone());
        let serve = move |accepted: Accepted| {
            let (node, admission) = (Arc::clone(&node), Arc::clone(&admission));
            let connection = Connection::new(
                accepted.stream,
                accepted.principal,
                node,
                admission,
                connection_stop.clone(),
            );
            let peer = accepted.peer;
            async move {
                if let Err(e) = connection.run().await {
                    tracing::debug!(%peer, error = %e, "connection ended");
                }
            }
        };
        let accepting =
            listener::accept(listeners.native, "native", shared.clone(), shutdown, serve);
        accepting.await;
        tracing::info!("shutting down: closing connections");
        stop.cancel();
        shared.connections.close();
        let drained = shared.connections.wait();
        if tokio::time::timeout(Duration::from_millis(DRAIN_MS), drained).await.is_err() {
            tracing::warn!("connections still busy after {DRAIN_MS} ms; closing the logs anyway");
        }
        self.close().await
    }

    /// Leaves the cluster, stops the background tasks and flushes every partition.
    pub async fn close(&self) -> Result<(), BrokerError> {
        if let Some(membership) = &self.membership {
            membership.leave().await;
        }
        self.replicas.close().await?;
        self.tasks.close();
        self.tasks.wait().await;
        tracing::info!("every partition flushed");
        Ok(())
    }

    pub fn config(&self) -> &BrokerConfig {
        self.replicas.config()
    }

    /// This broker's replicas: its logs and their roles.
    pub fn replicas(&self) -> &Arc<Replicas> {
        &self.replicas
    }

    /// What every API calls: produce, fetch, offsets, topics, metadata.
    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }

    pub fn logs(&self) -> &LogManager {
        self.replicas.logs()
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The listeners' TLS, if they speak TLS.
    pub fn tls(&self) -> Option<&Arc<ServerTls>> {
        self.tls.as_ref()
    }

    /// The port of its Kafka listener, if it has one.
    pub fn kafka_port(&self) -> Option<u16> {
        self.advertised.kafka_port
    }

    /// Long-poll fetches waiting for data now.
    pub fn parked_fetches(&self) -> usize {
        self.admission.parked_fetches()
    }
}

/// Where clients and other brokers reach a broker listening on `listeners`: its advertised
/// host and port, each unset one the listening one.
fn advertised(config: &BrokerConfig, listeners: &Listeners) -> Result<BrokerInfo, BrokerError> {
    let port = listeners.native.local_addr().map_err(BrokerError::Listen)?.port();
    let kafka_port = match &listeners.kafka {
        Some(kafka) => Some(
            config
                .kafka_advertised_port
                .map_or_else(|| kafka.local_addr().map(|a| a.port()), Ok)
                .map_err(BrokerError::Listen)?,
        ),
        None => None,
    };
    Ok(BrokerInfo {
        host: config.advertised_host.clone().unwrap_or_else(|| config.host.clone()),
        port: config.advertised_port.unwrap_or(port),
        kafka_port,
    })
}

/// Opens the logs in `config.data_dir` and serves `listeners` until `shutdown` is cancelled.
pub async fn run(
    listeners: Listeners,
    config: BrokerConfig,
    shutdown: CancellationToken,
) -> Result<(), BrokerError> {
    let broker = Broker::open(config, &listeners, None).await?;
    broker.serve(listeners, shutdown).await
}
