//! One task per partition a producer writes to: it takes that partition's messages from a
//! bounded queue, forms batches (`batch_messages`, `batch_bytes`, `linger_ms`), and sends one
//! batch at a time to the partition's leader, retrying it after a connection failure or a
//! leader change (`NOT_LEADER`, `FENCED_LEADER_EPOCH`: the route is asked for again) with
//! capped exponential backoff. Because a partition has one batch in flight, a retry never
//! reorders its batches.
//!
//! With `idempotence` (the default; and acks ≥ 1, to a real partition) each sender is an idempotent
//! producer of its own: it asks the leader for a producer id once, numbers its messages, and
//! sends each batch as one magic-2 message carrying its first sequence number, the same bytes
//! on every retry. A leader that has the batch already — appended before an answer was lost,
//! or before a failover — answers where it is instead of appending it again. A batch that
//! fails for good leaves a gap the leader would refuse, so the sender then asks for a new id.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use protocol::{Acks, Codec, ErrorCode};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::ClientError;
use crate::compression::CompressionError;
use crate::partitioner::TopicPartition;
use crate::producer::batch::{Batch, Identity, Record};
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
    /// As an idempotent producer: its id, epoch and next sequence number, once asked for.
    pub producer: Option<(i64, i16, i32)>,
}

/// A batch as it goes on the wire.
struct Encoded {
    set: Bytes,
    /// The producer id, epoch and first sequence it carries as an idempotent batch.
    producer: Option<(i64, i16, i32)>,
    /// Whether that identity is the caller's ([`crate::Producer::enqueue_sequenced`]), not
    /// this sender's own (a copy's is always the caller's).
    callers: bool,
    /// What a copier says of the set ([`crate::Producer::enqueue_copy`]).
    copied: Option<crate::Copied>,
}

impl Encoded {
    /// Whether the set is one message (a wrapper or a batch), which every message it holds
    /// is acknowledged at.
    fn one_message(&self, codec: Codec) -> bool {
        self.producer.is_some() || self.copied.is_some() || codec != Codec::None
    }
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
    async fn send(&mut self, batch: Batch, mut addr: String) -> String {
        let (topic, partition) = (self.topic.clone(), self.target.partition);
        let codec = self.config.compression;
        let mut backoff = service::Backoff::from_ms(
            self.config.retry_backoff_ms,
            self.config.retry_backoff_max_ms,
        );
        let mut encoded: Option<Encoded> = None;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let sent = match &encoded {
                Some(encoded) => self.attempt(&addr, encoded).await,
                None => match self.encode(&batch, &addr).await {
                    Ok(Ok(first)) => self.attempt(&addr, encoded.insert(first)).await,
                    Ok(Err(source)) => {
                        let error = ProducerError::Compression { topic, partition, source };
                        batch.fail(&error);
                        return addr;
                    }
                    Err(error) => Err(error),
                },
            };
            // Acknowledged; or older than the batches the leader keeps the places of, and in
            // the log already (`DuplicateSequence`: no offset).
            let acknowledged = match &sent {
                Ok((partition, offset)) => Some((*partition, *offset)),
                Err(e) if e.code() == Some(ErrorCode::DuplicateSequence) => Some((partition, None)),
                Err(_) => None,
            };
            if let Some((partition, offset)) = acknowledged {
                let encoded = encoded.expect("encoded before it was answered");
                if let (Some((id, epoch, base)), Some(next), false) =
                    (encoded.producer, &mut self.producer, encoded.callers)
                {
                    let sent = i32::try_from(batch.len()).unwrap_or(i32::MAX);
                    *next = (id, epoch, base.wrapping_add(sent) & i32::MAX);
                }
                let one_message = encoded.one_message(codec) || offset.is_none();
                batch.acknowledge(&addr, partition, offset, one_message);
                return addr;
            }
            let error = match sent {
                Err(error) => error,
                Ok(_) => return addr, // acknowledged above
            };
            let callers = encoded.as_ref().is_some_and(|e| e.callers);
            let moved = matches!(
                error.code(),
                Some(ErrorCode::NotLeader | ErrorCode::FencedLeaderEpoch | ErrorCode::UnknownTopic)
            );
            // The leader lacks this producer's batches before this one (acknowledged with acks
            // 1 by a leader that alone had them, and lost with it): it lacks this one too, which
            // goes again as the first batch of a new producer id.
            // A caller's identity is the caller's to change.
            let out_of_order = error.code() == Some(ErrorCode::OutOfOrderSequence) && !callers;
            if out_of_order {
                encoded = None;
                self.producer = None;
            }
            let retriable = out_of_order
                || moved
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
                if encoded.is_some_and(|e| e.producer.is_some() && !e.callers) {
                    // Its sequences may be in the log or not: the next batch starts afresh.
                    self.producer = None;
                }
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
                    self.routes.invalidate(&topic);
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

    /// The batch as it goes on the wire: as an idempotent producer's batch when this sender
    /// is one (asking `addr` for a producer id the first time), else as a plain set. `Err`:
    /// the producer id could not be had; `Ok(Err)`: the batch does not compress.
    async fn encode(
        &mut self,
        batch: &Batch,
        addr: &str,
    ) -> Result<Result<Encoded, CompressionError>, ClientError> {
        let codec = self.config.compression;
        if let Some(Identity::Copied(copied)) = batch.identity() {
            let copied = Some(copied.clone());
            // Framed messages, sent as they are (`enqueue_copy` needs compression None).
            return Ok(batch.encode(Codec::None).map(|set| Encoded {
                set,
                producer: None,
                callers: true,
                copied,
            }));
        }
        if let Some(&Identity::Sequenced(producer)) = batch.identity() {
            return match batch.encode_idempotent(codec, producer) {
                Ok(Some(set)) => {
                    let producer = Some(producer);
                    Ok(Ok(Encoded { set, producer, callers: true, copied: None }))
                }
                // `FramedMessages` are plain: not reached.
                Ok(None) => Err(ClientError::Broker {
                    api: protocol::ApiKey::IdempotentProduce,
                    code: ErrorCode::InvalidMessage,
                }),
                Err(e) => Ok(Err(e)),
            };
        }
        // Acks 0 retries nothing and hears of no duplicate; partition −1 has no sequences.
        let idempotent = self.config.idempotence
            && self.config.acks != Acks::None
            && self.target.partition != protocol::ANY_PARTITION;
        if idempotent {
            let producer = match self.producer {
                Some(producer) => producer,
                None => {
                    let conn = self.pool.get(addr).await?;
                    let timeout = Duration::from_millis(self.config.request_timeout_ms);
                    let asked = tokio::time::timeout(timeout, conn.init_producer_id()).await;
                    let id = asked.map_err(|_| ClientError::Closed {
                        addr: addr.to_owned(),
                        reason: format!("no producer id within {} ms", timeout.as_millis()),
                    })??;
                    *self.producer.insert((id.producer_id, id.producer_epoch, 0))
                }
            };
            match batch.encode_idempotent(codec, producer) {
                Ok(Some(set)) => {
                    let producer = Some(producer);
                    return Ok(Ok(Encoded { set, producer, callers: false, copied: None }));
                }
                Ok(None) => {} // not plain messages: sent as they are
                Err(e) => return Ok(Err(e)),
            }
        }
        Ok(batch.encode(codec).map(|set| Encoded {
            set,
            producer: None,
            callers: false,
            copied: None,
        }))
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
    async fn attempt(
        &self,
        addr: &str,
        encoded: &Encoded,
    ) -> Result<(i32, Option<i64>), ClientError> {
        let conn = self.pool.get(addr).await?;
        let (acks, partition, set) = (self.config.acks, self.target.partition, encoded.set.clone());
        let produce = async {
            match (&encoded.producer, &encoded.copied) {
                (_, Some(copied)) => {
                    conn.produce_copy(&self.topic, partition, acks, copied, set).await
                }
                (Some(_), None) => conn.produce_idempotent(&self.topic, partition, acks, set).await,
                (None, None) => conn.produce(&self.topic, partition, acks, set).await,
            }
        };
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
