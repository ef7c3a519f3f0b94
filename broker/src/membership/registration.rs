//! A broker's entry in the ZooKeeper registries (paper §3.3): the ephemeral
//! `/brokers/ids/{id}` with where it listens. The ZooKeeper backend creates it again if the
//! session expires.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::{BrokerInfo, CoordError, Coordinator, Registry, RegistryError, ZooKeeper};

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
    /// that is still alive after that makes this fail. Then, while other brokers are live, it
    /// waits (as long again at most) for the controller to move the leaderships its previous
    /// process held.
    pub(crate) async fn register(
        connect: &str,
        zookeeper: &cluster::ZooKeeperArgs,
        broker_id: i32,
        info: BrokerInfo,
    ) -> Result<Registration, RegistryError> {
        let session_timeout_ms = zookeeper.session_timeout_ms();
        let config = zookeeper.config(connect)?;
        let connect_timeout = Duration::from_millis(config.connect_timeout_ms);
        let session = ZooKeeper::connect(config).await?;
        tracing::info!(zookeeper = %connect, "connected to ZooKeeper");
        let registry = Registry::new(session.clone());
        let timeout = 2 * Duration::from_millis(session_timeout_ms);
        // A connection lost on the way (ZooKeeper paused by its collector, or a machine so
        // starved that 2/3 of the session passed unanswered) is ridden out as the session
        // rides it out, for as long as a first connection may take: a broker that gives up
        // on a pause of half a second at its start is a broker an operator must start again.
        let give_up = Instant::now() + connect_timeout;
        let mut backoff = service::Backoff::from_ms(100, 2_000);
        let (mut waited, mut lost) = (false, false);
        loop {
            let registered = async {
                if !waited {
                    wait_until_gone(&registry, broker_id, timeout).await?;
                    wait_for_leadership_moved(&registry, broker_id, timeout).await?;
                    waited = true;
                }
                registry.register_broker(broker_id, &info).await
            };
            let error = match registered.await {
                Ok(()) => break,
                Err(e) if Instant::now() >= give_up => return Err(e),
                Err(RegistryError::Coord(
                    e @ (CoordError::Unavailable(_) | CoordError::SessionExpired),
                )) => e.to_string(),
                // A create of an earlier try carried out in the session that then expired: the
                // node goes when ZooKeeper ends that session. (One of this session's own is
                // found by the create itself.)
                Err(e @ RegistryError::BrokerIdTaken { .. }) if lost => {
                    match registry.brokers().await.map(|b| b.get(&broker_id).cloned()) {
                        Ok(Some(held)) if held != info => return Err(e),
                        _ => "this broker's node from the expired session is still there".into(),
                    }
                }
                Err(e) => return Err(e),
            };
            lost = true;
            tracing::warn!(%error, "ZooKeeper connection lost while registering; retrying");
            backoff.sleep().await;
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

/// Waits (at most `timeout`) for the node of this broker id left by its previous process
/// (killed, its session not yet expired) to go.
async fn wait_until_gone(
    registry: &Registry,
    broker_id: i32,
    timeout: Duration,
) -> Result<(), RegistryError> {
    let deadline = Instant::now() + timeout;
    let mut logged = false;
    while registry.brokers().await?.contains_key(&broker_id) && Instant::now() < deadline {
        if !std::mem::replace(&mut logged, true) {
            tracing::info!(
                broker_id,
                "broker id still registered (a previous process whose session has not expired \
                 yet?); waiting"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Waits (at most `timeout`) until no partition names this broker as its leader or, under a
/// live leader, as an in-sync replica, while other brokers are live to change that: a
/// restarted broker must not take up a leadership or an ISR place it held before, since its
/// log may have lost what it had (a wiped or replaced disk). The controller moves each such
/// leadership to another in-sync replica (or marks the partition offline) and drops the broker
/// from the ISRs; it comes back by a new election, or by catching up. Alone in the cluster, it
/// waits for nothing: nobody else could lead.
async fn wait_for_leadership_moved(
    registry: &Registry,
    broker_id: i32,
    timeout: Duration,
) -> Result<(), RegistryError> {
    let deadline = Instant::now() + timeout;
    let mut logged = false;
    loop {
        // Partitions it leads, or is in the ISR of under a leader: the controller takes it out
        // of those ISRs too, so that it rejoins one only once it has caught up again.
        let mut led = Vec::new();
        for topic in registry.topics().await? {
            for (partition, (state, _)) in registry.partition_states(&topic).await? {
                let in_isr = state.leader >= 0 && state.isr.contains(&broker_id);
                if state.leader == broker_id || in_isr {
                    led.push(format!("{topic}-{partition}"));
                }
            }
        }
        let others = registry.brokers().await?.keys().any(|&id| id != broker_id);
        if led.is_empty() || !others {
            return Ok(());
        }
        if Instant::now() >= deadline {
            tracing::warn!(broker_id, partitions = ?led, "still named leader; registering anyway");
            return Ok(());
        }
        if !std::mem::replace(&mut logged, true) {
            tracing::info!(
                broker_id,
                partitions = led.len(),
                "waiting for the controller to move this broker's leaderships before rejoining"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
