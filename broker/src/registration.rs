//! A broker's entry in the ZooKeeper registries (paper §3.3): the ephemeral
//! `/brokers/ids/{id}` with where it listens. The ZooKeeper backend creates it again if the
//! session expires.

use std::sync::Arc;

use cluster::{BrokerInfo, Coordinator, Registry, RegistryError, ZooKeeper, ZooKeeperConfig};

pub(crate) struct Registration {
    broker_id: i32,
    registry: Registry,
    /// Held so the session lives as long as the registration.
    _session: Arc<dyn Coordinator>,
}

impl Registration {
    /// Connects and registers the broker; a live broker with the same id makes this fail.
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
        Registration::register_in(session, broker_id, info).await
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
