//! One cluster of the demo: brokers served in this process on loopback ports, each registered
//! in its own session of the embedded coordination backend under the cluster's chroot — what a
//! set of broker processes registered in ZooKeeper looks like to everyone else.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use broker::{Broker, BrokerConfig, Listeners, VisibleAfter};
use cluster::{Coordinator, Embedded};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::error::DemoError;

/// A running cluster.
pub struct Cluster {
    pub name: String,
    /// The chroot its brokers and consumers share, e.g. `/tributary/live-a`.
    pub chroot: String,
    /// Broker addresses, `host:port`, in broker id order.
    pub addrs: Vec<String>,
    /// Their Kafka listeners, for Kafka's own clients, in the same order.
    pub kafka_addrs: Vec<String>,
    pub data_dirs: Vec<PathBuf>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<Result<(), broker::BrokerError>>>,
}

/// How the demo's brokers are set up.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    pub name: String,
    pub brokers: u32,
    /// Partitions of each topic on each broker.
    pub partitions: u32,
    pub flush_ms: u64,
    pub segment_bytes: u64,
    pub visible_after: VisibleAfter,
}

impl ClusterSpec {
    /// `brokers` brokers with `partitions` partitions per topic per broker (spread over the
    /// brokers by the cluster), each partition on two brokers where there are two, data
    /// visible within 50 ms.
    pub fn new(name: &str, brokers: u32, partitions: u32) -> ClusterSpec {
        ClusterSpec {
            name: name.into(),
            brokers,
            partitions,
            flush_ms: 50,
            segment_bytes: BrokerConfig::default().segment_bytes,
            visible_after: VisibleAfter::Flush,
        }
    }
}

/// The principal of a demo broker.
pub fn broker_name(cluster: &str, id: u32) -> String {
    format!("broker-{cluster}-{id}")
}

impl Cluster {
    /// Opens and serves `spec.brokers` brokers with data under `{data_dir}/{name}/broker-{id}`.
    pub async fn start(
        embedded: &Embedded,
        spec: &ClusterSpec,
        data_dir: &Path,
    ) -> Result<Cluster, DemoError> {
        Cluster::start_with(embedded, spec, data_dir, None).await
    }

    /// [`Cluster::start`], each broker `broker-{cluster}-{id}` of `tls` serving (and
    /// replicating over) mutual TLS if given.
    pub async fn start_with(
        embedded: &Embedded,
        spec: &ClusterSpec,
        data_dir: &Path,
        tls: Option<&super::tls::DemoTls>,
    ) -> Result<Cluster, DemoError> {
        let chroot = format!("/tributary/{}", spec.name);
        let stop = CancellationToken::new();
        let mut cluster = Cluster {
            name: spec.name.clone(),
            chroot: chroot.clone(),
            addrs: Vec::new(),
            kafka_addrs: Vec::new(),
            data_dirs: Vec::new(),
            stop: stop.clone(),
            tasks: Vec::new(),
        };
        for id in 0..spec.brokers {
            let dir = data_dir.join(&spec.name).join(format!("broker-{id}"));
            let mut config = BrokerConfig {
                broker_id: id as i32,
                host: "127.0.0.1".into(),
                port: 0,
                data_dir: dir.clone(),
                num_partitions: spec.partitions * spec.brokers,
                default_replication_factor: spec.brokers.min(2),
                flush_ms: spec.flush_ms,
                segment_bytes: spec.segment_bytes,
                visible_after: spec.visible_after,
                ..BrokerConfig::default()
            };
            if let Some(tls) = tls {
                config.tls = tls.service(&broker_name(&spec.name, id));
            }
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| {
                DemoError::Bind { what: format!("broker {}/{id}", spec.name), source: e }
            })?;
            let addr = listener.local_addr().map_err(|e| DemoError::Bind {
                what: format!("broker {}/{id}", spec.name),
                source: e,
            })?;
            let kafka = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| {
                DemoError::Bind { what: format!("Kafka listener {}/{id}", spec.name), source: e }
            })?;
            let kafka_addr = kafka.local_addr().map_err(|e| DemoError::Bind {
                what: format!("Kafka listener {}/{id}", spec.name),
                source: e,
            })?;
            let listeners = Listeners { native: listener, kafka: Some(kafka) };
            let session = Some(session(embedded, &chroot)?);
            let broker = Broker::open(config, &listeners, session)
                .await
                .map_err(|e| DemoError::Broker { cluster: spec.name.clone(), id, source: e })?;
            let served = broker.serve(listeners, stop.clone());
            cluster.tasks.push(tokio::spawn(served));
            cluster.addrs.push(addr.to_string());
            cluster.kafka_addrs.push(kafka_addr.to_string());
            cluster.data_dirs.push(dir);
        }
        // Every broker registered before anything creates a topic: replicas go to all of them.
        let registry = cluster::Registry::new(session(embedded, &chroot)?);
        for _ in 0..500 {
            if registry.brokers().await.is_ok_and(|b| b.len() == spec.brokers as usize) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        Ok(cluster)
    }

    /// Stops every broker; each flushes its partitions first.
    pub async fn stop(self) {
        self.stop.cancel();
        for task in self.tasks {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!(cluster = %self.name, error = %e, "broker failed"),
                Err(e) => tracing::error!(cluster = %self.name, error = %e, "broker task failed"),
            }
        }
    }
}

/// A new session of the embedded backend in `chroot`: one per component, as each process of a
/// real deployment has its own ZooKeeper session.
pub fn session(embedded: &Embedded, chroot: &str) -> Result<Arc<dyn Coordinator>, DemoError> {
    let session = embedded
        .session(chroot)
        .map_err(|e| DemoError::Coordination { chroot: chroot.to_owned(), source: e })?;
    Ok(session)
}
