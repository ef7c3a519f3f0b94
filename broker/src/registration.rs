//! A broker's entry in the ZooKeeper registries (paper §3.3): the ephemeral
//! `/brokers/ids/{id}` with where it listens. The ZooKeeper backend creates it again if the
//! session expires.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::{BrokerInfo, Coordinator, Registry, RegistryError, ZooKeeper, ZooKeeperConfig};

pub(crate) struct Registration {
    broker_id: i32,
    registry: Registry,
    /// Held so the session lives as long as the registration.
    _session: Arc<dyn Coordinator>,
}

impl Registration {
    /// Connects and registers the broker. A node of the same id left by this broker's previous
    /// process (killed, its session not yet expired) is waited out for up to two session
    /// timeouts, so a supervisor may restart a killed broker at once; a broker with the same id
    /// that is still alive after that makes this fail.
    pub(crate) async fn register(
        connect: &str,
        session_timeout_ms: u64,
        broker_id: i32,
        info: BrokerInfo,
    ) -> Result<Registration, RegistryError> {
        let mut config = ZooKeeperConfig::new(connect);
        config.session_timeout_ms = session_timeout_ms;
        let session = ZooKeeper::connect(config).await?;
        tracing::info!(zookeeper = %connect, "connected to ZooKeeper");
        let registry = Registry::new(session.clone());
        let deadline = Instant::now() + 2 * Duration::from_millis(session_timeout_ms);
        let mut backoff = service::Backoff::from_ms(100, 1_000);
        let mut waiting = false;
        loop {
            match registry.register_broker(broker_id, &info).await {
                Err(RegistryError::BrokerIdTaken { holder, .. }) if Instant::now() < deadline => {
                    if !std::mem::replace(&mut waiting, true) {
                        tracing::info!(
                        broker_id,
                        %holder,
                        "broker id still registered (a previous process whose session has not \
                         expired yet?); waiting"
                        );
                    }
                    tokio::time::sleep(backoff.next_delay().unwrap_or(Duration::from_secs(1)))
                        .await;
                }
                result => {
                    result?;
                    break;
                }
            }
        }
        tracing::info!(broker_id, addr = %info.addr(), "registered broker");
        Ok(Registration { broker_id, registry, _session: session })
    }

    /// Registers the broker in a session the caller opened (e.g. on the embedded backend).
    pub(crate) async fn register_in(
        session: Arc<dyn Coordinator>,
        broker_id: i32,
        info: BrokerInfo,
    ) -> Result<Registration, RegistryError> {
        let registry = Registry::new(session.clone());
        registry.register_broker(broker_id, &info).await?;
        tracing::info!(broker_id, addr = %info.addr(), "registered broker");
        Ok(Registration { broker_id, registry, _session: session })
    }

    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Removes this broker's node at once, rather than when the session closes.
    pub(crate) async fn unregister(&self) {
        match self.registry.unregister_broker(self.broker_id).await {
            Ok(()) => tracing::info!(broker_id = self.broker_id, "unregistered broker"),
            Err(e) => tracing::warn!(error = %e, "cannot unregister broker"),
        }
    }
}
