//! One task per partition a producer writes to: it takes that partition's messages from a
//! bounded queue, forms batches (`batch_messages`, `batch_bytes`, `linger_ms`), and sends one
//! batch at a time to the partition's leader, retrying it after a connection failure or a
//! leader change (`NOT_LEADER`, `FENCED_LEADER_EPOCH`: the route is asked for again) with
//! capped exponential backoff. Because a partition has one batch in flight, a retry never
//! reorders its batches.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use protocol::{Acks, ErrorCode};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::ClientError;
use crate::partitioner::TopicPartition;
use crate::producer::batch::{Batch, Record};
use crate::producer::pool::ConnectionPool;
use crate::producer::routes::Routes;
use crate::producer::{ProducerConfig, ProducerError};

/// What a partition's queue carries.
pub(crate) enum Command {
    Record(Record),
    /// Send what is batched now and answer once everything queued before is answered.
    Flush(oneshot::Sender<()>),
}

pub(crate) struct PartitionSender {
    pub topic: String,
    /// The partition, and where its leader was when the sender started (an entry point for
    /// partition −1, which stays).
    pub target: TopicPartition,
    pub config: Arc<ProducerConfig>,
    pub pool: Arc<ConnectionPool>,
    pub routes: Arc<Routes>,
    pub queue: mpsc::Receiver<Command>,
}

impl PartitionSender {
    /// Runs until every sender of the queue is gone and the queue is drained.
    pub async fn run(mut self) {
        let linger = Duration::from_millis(self.config.linger_ms);
        let mut carried: Option<Record> = None;
        // Where the last batch went: after a failover the next batch starts at the new leader.
        let mut addr = self.target.addr.clone();
        loop {
            let mut batch = Batch::default();
            match carried.take() {
                Some(record) => batch.push(record),
                None => match self.queue.recv().await {
                    None => return,
                    Some(Command::Flush(done)) => {
                        let _ = done.send(());
                        continue;
                    }
                    Some(Command::Record(record)) => batch.push(record),
                },
            }
            let deadline = Instant::now() + linger;
            let mut flushes = Vec::new();
            while !batch.is_full(&self.config) {
                match tokio::time::timeout_at(deadline, self.queue.recv()).await {
                    Ok(Some(Command::Record(record))) => {
                        if batch.would_overflow(&record, &self.config) {
                            carried = Some(record);
                            break;
                        }
                        batch.push(record);
                    }
                    Ok(Some(Command::Flush(done))) => {
                        flushes.push(done);
                        break;
                    }
                    Ok(None) | Err(_) => break, // closing, or lingered long enough
                }
            }
            addr = self.send(batch, addr).await;
            for done in flushes {
                let _ = done.send(());
            }
        }
    }

    /// Sends `batch`, first to `addr`; returns where it went last (the leader it found).
    async fn send(&self, batch: Batch, mut addr: String) -> String {
        let (topic, partition) = (&self.topic, self.target.partition);
        let codec = self.config.compression;
        let set = match batch.encode(codec) {
            Ok(set) => set,
            Err(source) => {
                batch.fail(&ProducerError::Compression { topic: topic.clone(), partition, source });
                return addr;
            }
        };
        let mut backoff = service::Backoff::from_ms(
            self.config.retry_backoff_ms,
            self.config.retry_backoff_max_ms,
        );
        let mut attempts = 0;
        loop {
            attempts += 1;
            let error = match self.attempt(&addr, &set).await {
                Ok((partition, offset)) => {
                    batch.acknowledge(&addr, partition, offset, codec);
                    return addr;
                }
                Err(error) => error,
            };
            let moved = matches!(
                error.code(),
                Some(ErrorCode::NotLeader | ErrorCode::FencedLeaderEpoch | ErrorCode::UnknownTopic)
            );
            let retriable = moved
                || matches!(error, ClientError::Connect { .. } | ClientError::Closed { .. })
                || matches!(
                    error.code(),
                    Some(
                        ErrorCode::NotEnoughReplicas
                            | ErrorCode::RequestTimedOut
                            | ErrorCode::StorageFull
                    )
                );
            if !retriable || attempts > self.config.retries_max {
                let source = Arc::new(error);
                batch.fail(&ProducerError::Send {
                    topic: topic.clone(),
                    partition,
                    addr: addr.clone(),
                    attempts,
                    source,
                });
                return addr;
            }
            tracing::warn!(
                %topic, partition, %addr, attempts, messages = batch.len(),
                %error, "produce failed; retrying"
            );
            if !matches!(error, ClientError::Broker { .. }) {
                self.pool.forget(&addr);
            }
            backoff.sleep().await;
            if partition != protocol::ANY_PARTITION {
                if moved || !matches!(error, ClientError::Broker { .. }) {
                    self.routes.invalidate(topic);
                }
                addr = self.leader_addr().await.unwrap_or(addr);
            } else if moved {
                // The broker leads none of the topic's partitions: another entry point may.
                // Behind a load balancer (one address) a new connection does: the balancer
                // sends it to another broker, where the kept one would go back to this one.
                match self.other_entry(&addr).await {
                    Some(other) => addr = other,
                    None => self.pool.forget(&addr),
                }
            }
        }
    }

    /// An entry point other than `addr` for a produce to partition −1, if the route has one.
    async fn other_entry(&self, addr: &str) -> Option<String> {
        self.routes.invalidate(&self.topic);
        let route = self.routes.get(&self.topic).await.ok()?;
        let others: Vec<&TopicPartition> =
            route.brokers.iter().filter(|b| b.addr != addr).collect();
        (!others.is_empty()).then(|| others[rand::random_range(0..others.len())].addr.clone())
    }

    /// Where the partition is led now, as the routes say (asking the source when stale).
    async fn leader_addr(&self) -> Option<String> {
        let route = self.routes.get(&self.topic).await.ok()?;
        route.leader(self.target.partition).map(|p| p.addr.clone())
    }

    /// One produce: the acknowledged `(partition, offset)`, no offset with acks 0.
    async fn attempt(&self, addr: &str, set: &Bytes) -> Result<(i32, Option<i64>), ClientError> {
        let conn = self.pool.get(addr).await?;
        let acks = self.config.acks;
        let produce = conn.produce(&self.topic, self.target.partition, acks, set.clone());
        let timeout = Duration::from_millis(self.config.request_timeout_ms);
        match tokio::time::timeout(timeout, produce).await {
            Ok(Ok(Some(ack))) => Ok((ack.partition, Some(ack.offset))),
            Ok(Ok(None)) => {
                debug_assert_eq!(acks, Acks::None);
                Ok((self.target.partition, None))
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ClientError::Closed {
                addr: addr.to_owned(),
                reason: format!("no acknowledgement within {} ms", timeout.as_millis()),
            }),
        }
    }
}
