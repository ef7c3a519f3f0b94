//! This broker's part in electing and being the controller, and the ISR writes of the
//! partitions it leads (`docs/design.md`, "Replicated partitions").

use std::sync::Arc;
use std::time::Duration;

use cluster::{Controller, ControllerError, PartitionState, Registry, RegistryError};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::replication::IsrStore;

pub(super) fn isr_store(
    registry: Registry,
    topic: &str,
    partition: i32,
    me: i32,
    epoch: i32,
) -> IsrStore {
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
pub(super) async fn stand_for_controller(
    registry: Registry,
    broker_id: i32,
    metrics: Arc<Metrics>,
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
