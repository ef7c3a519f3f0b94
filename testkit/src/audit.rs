//! What the audit tests share (feature `audit`): clusters of a real broker registered in a
//! real ZooKeeper or in an embedded backend, real `_audit` records and events produced into
//! them, and the service run in-process.

use std::sync::Arc;
use std::time::Duration;

use audit::{AuditError, Config};
use client::Connection;
use cluster::Coordinator;
use events::audit::{AUDIT_SUBJECT, AUDIT_TOPIC, AuditRecord, Tier};
use protocol::Acks;
use schema_registry::RegistryClient;
use serde_json::Value as Json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::broker::{TestBroker, message_set};
use crate::cluster::TestCluster;
use crate::events::page_view_payloads;

pub const WAIT: Duration = Duration::from_secs(30);
pub const WINDOW_MS: i64 = 1_000;

/// A window start an hour ago, aligned: closed, and well inside the history.
pub fn past_window(index: i64) -> i64 {
    let now = service::now_ms();
    let base = (now - 3_600_000).div_euclid(WINDOW_MS) * WINDOW_MS;
    base + index * WINDOW_MS
}

/// A window a day from now: open.
pub fn future_window() -> i64 {
    past_window(25 * 3_600)
}

/// Small windows, no grace, quick retries: what every test runs with.
pub fn test_config() -> Config {
    Config {
        audit_window_ms: WINDOW_MS,
        grace_ms: 0,
        fetch_wait_ms: 20,
        discovery_ms: 300,
        retry_backoff_max_ms: 500,
        catch_up_max_ms: 60_000,
        refresh_s: 5,
        ..Config::default()
    }
}

/// The brokers of a test cluster, stopped when dropped.
pub enum Brokers {
    /// Registered in ZooKeeper by their configuration.
    ZooKeeper(TestCluster),
    /// One broker registered in an embedded coordination session, as the all-in-one launcher
    /// runs it.
    Embedded(TestBroker),
}

/// One cluster: brokers registered in a chroot of their own.
pub struct Cluster {
    pub connect: String,
    pub coordinator: Arc<dyn Coordinator>,
    /// Where to produce to: the first broker.
    pub addr: String,
    pub brokers: Brokers,
    /// What the helpers connect with, to a cluster that speaks TLS.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl Cluster {
    /// A broker registered in its own chroot of the shared ZooKeeper.
    pub async fn start() -> Cluster {
        let brokers = TestCluster::start_with(1, |c| {
            c.zookeeper_session.zookeeper_session_timeout_ms = Some(2_000)
        })
        .await;
        Cluster {
            connect: brokers.connect.clone(),
            coordinator: brokers.session().await,
            addr: brokers.addr().to_owned(),
            brokers: Brokers::ZooKeeper(brokers),
            tls: None,
        }
    }

    /// Like [`Cluster::start`], its broker speaking mutual TLS only (certificates of `pki`).
    pub async fn start_tls(pki: &crate::tls::Pki) -> Cluster {
        let brokers = TestCluster::start_tls(1, pki, None).await;
        let me = pki.identity("producer");
        let tls = service::tls::client_from_settings(Some(pki.ca()), Some(&me.cert), Some(&me.key))
            .expect("client TLS");
        Cluster {
            connect: brokers.connect.clone(),
            coordinator: brokers.session().await,
            addr: brokers.addr().to_owned(),
            brokers: Brokers::ZooKeeper(brokers),
            tls,
        }
    }

    /// Starts another broker of this cluster; returns its address.
    pub async fn add_broker(&mut self, broker_id: i32) -> String {
        let Brokers::ZooKeeper(brokers) = &mut self.brokers else {
            panic!("an embedded test cluster has one broker");
        };
        brokers.add_broker(broker_id).await.addr.clone()
    }

    /// A broker registered in `chroot` of an embedded coordination backend.
    pub async fn embedded(embedded: &cluster::Embedded, chroot: &str) -> Cluster {
        let session = embedded.session(chroot).expect("embedded session");
        let broker = TestBroker::start_registered_in(session, |_| {}).await;
        Cluster {
            connect: format!("embedded:{chroot}"),
            coordinator: embedded.session(chroot).expect("embedded session"),
            addr: broker.addr.clone(),
            brokers: Brokers::Embedded(broker),
            tls: None,
        }
    }

    pub async fn connection(&self) -> Connection {
        let config = client::ConnectionConfig::with_tls(self.tls.clone());
        Connection::connect_with(&self.addr, config).await.expect("connect to the cluster's broker")
    }
}

pub fn record(tier: Tier, host: &str, topic: &str, window_start: i64, count: i64) -> AuditRecord {
    AuditRecord {
        tier,
        host: host.into(),
        topic: topic.into(),
        window_start,
        window_ms: WINDOW_MS,
        count,
    }
}

/// Publishes `records` to `_audit` as every tier does: encoded with the registered schema.
pub async fn produce_audit(registry: &RegistryClient, cluster: &Cluster, records: &[AuditRecord]) {
    let latest = registry.latest(AUDIT_SUBJECT).await.expect("_audit schema registered");
    let schema = registry.schema(latest.id).await.expect("_audit schema");
    let payloads: Vec<Vec<u8>> =
        records.iter().map(|r| r.encode(latest.id, &schema).expect("encodes")).collect();
    let conn = cluster.connection().await;
    conn.produce(AUDIT_TOPIC, 0, Acks::Written, message_set(&payloads))
        .await
        .expect("_audit records produced");
}

/// Produces page-view events into partition 0 of `topic` of `cluster`, one per entry of
/// `times_ms`.
pub async fn produce_events(
    registry: &RegistryClient,
    cluster: &Cluster,
    topic: &str,
    times_ms: &[i64],
) {
    produce_events_to(registry, cluster, topic, 0, times_ms).await;
}

/// Produces page-view events into `partition` of `topic`, one per entry of `times_ms`.
pub async fn produce_events_to(
    registry: &RegistryClient,
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    times_ms: &[i64],
) {
    let payloads = page_view_payloads(registry, times_ms).await;
    let conn = cluster.connection().await;
    conn.produce(topic, partition, Acks::Written, message_set(&payloads))
        .await
        .expect("events produced");
}

/// Produces raw payloads (not events) into `topic`.
pub async fn produce_raw(cluster: &Cluster, topic: &str, payloads: &[&[u8]]) {
    let conn = cluster.connection().await;
    conn.produce(topic, 0, Acks::Written, message_set(payloads)).await.expect("produced");
}

/// The audit service run in this process, as the launcher runs it.
pub struct Audit {
    pub url: String,
    stop: CancellationToken,
    task: JoinHandle<Result<(), AuditError>>,
    http: reqwest::Client,
}

impl Audit {
    pub async fn start(
        config: Config,
        analytics: &Cluster,
        live: &[(&str, &Cluster)],
        registry_url: &str,
    ) -> Audit {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let live =
            live.iter().map(|(name, c)| (name.to_string(), Arc::clone(&c.coordinator))).collect();
        let registry = RegistryClient::new(registry_url).expect("registry client");
        let stop = CancellationToken::new();
        let task = tokio::spawn(audit::run(
            config,
            Arc::clone(&analytics.coordinator),
            live,
            registry,
            listener,
            stop.clone(),
        ));
        Audit { url, stop, task, http: crate::http_client() }
    }

    /// Shuts down and waits until it has.
    pub async fn stop(self) {
        self.stop.cancel();
        let result = tokio::time::timeout(WAIT, self.task).await.expect("stops in time");
        result.expect("task").expect("clean shutdown");
    }

    pub async fn get(&self, path: &str) -> (u16, String) {
        let response = self.http.get(format!("{}{path}", self.url)).send().await.expect("GET");
        let status = response.status().as_u16();
        (status, response.text().await.expect("body"))
    }

    pub async fn json(&self, path: &str) -> Json {
        let (status, body) = self.get(path).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).expect("JSON")
    }

    /// The windows of `topic`, once the service has caught up and knows the topic.
    pub async fn windows(&self, topic: &str) -> Vec<Json> {
        self.wait_caught_up().await;
        let (status, body) = self.get(&format!("/api/windows?topic={topic}")).await;
        if status != 200 {
            return Vec::new();
        }
        serde_json::from_str::<Vec<Json>>(&body).expect("JSON")
    }

    pub async fn wait_caught_up(&self) {
        crate::eventually(WAIT, "the audit service to catch up", || async {
            self.json("/api/summary").await["caught_up"].as_bool().unwrap().then_some(())
        })
        .await;
    }

    /// Waits until `check` holds for the window of `topic` starting at `start`; returns it.
    pub async fn wait_window(
        &self,
        topic: &str,
        start: i64,
        what: &str,
        check: impl Fn(&Json) -> bool,
    ) -> Json {
        crate::eventually(WAIT, what, || async {
            self.windows(topic).await.into_iter().find(|w| w["window_start"] == start && check(w))
        })
        .await
    }
}
