//! What a connection must hold before it takes more of the broker's memory or waits: a share
//! of `request_memory_bytes` to read a large request into, over all connections of both
//! listeners, and one of `max_parked_fetches` slots to wait in as a long-poll fetch.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::BrokerConfig;
use crate::metrics::Metrics;

pub struct Admission {
    /// Slots for long-poll fetches waiting for data (`max_parked_fetches`).
    parked: Arc<Semaphore>,
    parked_max: usize,
    /// Bytes of large requests being read, over all connections (`request_memory_bytes`).
    request_memory: Arc<Semaphore>,
    request_memory_bytes: usize,
    metrics: Arc<Metrics>,
}

/// A request's share of `request_memory_bytes`, given back when dropped.
pub struct RequestMemory {
    _permit: OwnedSemaphorePermit,
    bytes: i64,
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl Drop for RequestMemory {
    fn drop(&mut self) {
        self.gauge.dec_by(self.bytes);
    }
}

impl Admission {
    pub fn new(config: &BrokerConfig, metrics: Arc<Metrics>) -> Admission {
        let (parked_max, memory) =
            (config.max_parked_fetches as usize, config.request_memory_bytes as usize);
        Admission {
            parked: Arc::new(Semaphore::new(parked_max)),
            parked_max,
            request_memory: Arc::new(Semaphore::new(memory)),
            request_memory_bytes: memory,
            metrics,
        }
    }

    /// A slot for a long-poll fetch to wait in, if fewer than `max_parked_fetches` wait.
    pub fn try_park(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.parked).try_acquire_owned().ok()
    }

    /// Long-poll fetches waiting for data now.
    pub fn parked_fetches(&self) -> usize {
        self.parked_max - self.parked.available_permits()
    }

    /// Room for a request of `bytes` to be read into, out of `request_memory_bytes`: at once
    /// if there is room, else once requests being read now are taken.
    pub async fn request_memory(&self, bytes: usize) -> RequestMemory {
        let bytes = bytes.min(self.request_memory_bytes) as u32;
        let memory = Arc::clone(&self.request_memory);
        let permit = match Arc::clone(&memory).try_acquire_many_owned(bytes) {
            Ok(permit) => permit,
            Err(_) => {
                self.metrics.request_memory_waits.inc();
                memory.acquire_many_owned(bytes).await.expect("the request memory is never closed")
            }
        };
        let gauge = self.metrics.request_memory_in_use.clone();
        gauge.inc_by(bytes as i64);
        RequestMemory { _permit: permit, bytes: bytes as i64, gauge }
    }
}
