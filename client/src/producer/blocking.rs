//! The producer for synchronous code: a [`Producer`] on a runtime of its own. Its methods
//! block the calling thread, so they must not be called from inside an async task.

use std::sync::Arc;

use crate::discovery::BrokerSource;
use crate::producer::{Delivery, Pending, Producer, ProducerConfig, ProducerError};

pub struct BlockingProducer {
    runtime: tokio::runtime::Runtime,
    producer: Producer,
}

impl BlockingProducer {
    pub fn new(
        config: ProducerConfig,
        source: Arc<dyn BrokerSource>,
    ) -> Result<BlockingProducer, ProducerError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tributary-producer")
            .enable_all()
            .build()
            .map_err(|source| ProducerError::Runtime { source: Arc::new(source) })?;
        let producer = Producer::new(config, source)?;
        Ok(BlockingProducer { runtime, producer })
    }

    /// Sends one message and blocks until its batch is acknowledged.
    pub fn send(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        payload: &[u8],
    ) -> Result<Delivery, ProducerError> {
        self.runtime.block_on(self.producer.send(topic, key, payload))
    }

    /// Accepts one message (blocking only while the buffer is full); [`Self::wait`] on the
    /// result later. Many messages in flight at once form full batches.
    pub fn enqueue(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        payload: &[u8],
    ) -> Result<Pending, ProducerError> {
        self.runtime.block_on(self.producer.enqueue(topic, key, payload))
    }

    /// Blocks until an enqueued message is acknowledged.
    pub fn wait(&self, pending: Pending) -> Result<Delivery, ProducerError> {
        self.runtime.block_on(pending)
    }

    pub fn flush(&self) {
        self.runtime.block_on(self.producer.flush());
    }

    /// Flushes and stops; messages not yet sent when a `BlockingProducer` is dropped without
    /// `close` are lost.
    pub fn close(self) {
        self.runtime.block_on(self.producer.close());
    }
}
