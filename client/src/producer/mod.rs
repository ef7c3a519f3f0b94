//! The batching producer (paper §3.2, "Producer"): messages are grouped per partition into
//! MessageSets — optionally compressed into one wrapper message — and sent by one task per
//! partition, so a publisher pays one request per batch rather than per message.
//!
//! ```text
//! send ─▶ route (BrokerSource, Partitioner) ─▶ buffer permit ─▶ partition queue ─▶ PartitionSender ─▶ broker
//! ```
//!
//! Memory is bounded twice: by `buffer_bytes` of accepted, unacknowledged messages, and by
//! `queue_messages_max` per partition queue. When either is full, `send` waits or fails with
//! [`ProducerError::BufferFull`], as [`ProducerConfig::buffer_full`] says.

mod batch;
mod blocking;
mod config;
mod delivery;
mod error;
mod partition_sender;
mod pool;
mod routes;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use protocol::{Codec, MessageSetIter};
use tokio::sync::{Semaphore, TryAcquireError, mpsc, oneshot};
use tokio::task::JoinHandle;

pub use blocking::BlockingProducer;
pub use config::{BufferFull, ProducerConfig};
pub use delivery::{Delivery, Pending};
pub use error::ProducerError;

use crate::connection::Copied;
use crate::discovery::BrokerSource;
use crate::partitioner::{Partitioner, TopicPartition};
use batch::{Identity, Record};
use partition_sender::{Command, PartitionSender};
use pool::ConnectionPool;
use routes::Routes;

/// Payloads framed as plain messages back to back, for [`Producer::enqueue_messages`].
#[derive(Debug, Default)]
pub struct FramedMessages {
    set: BytesMut,
    count: usize,
    largest_bytes: usize,
}

impl FramedMessages {
    /// Room for about `bytes` of payloads.
    pub fn with_capacity(bytes: usize) -> FramedMessages {
        FramedMessages { set: BytesMut::with_capacity(bytes), ..FramedMessages::default() }
    }

    /// Frames `payload` as a plain message after the others.
    pub fn push(&mut self, payload: &[u8]) {
        let start = self.set.len();
        protocol::encode_message(&mut self.set, Codec::None, payload);
        self.largest_bytes = self.largest_bytes.max(self.set.len() - start);
        self.count += 1;
    }

    /// Messages framed.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes framed, overhead included.
    pub fn bytes(&self) -> usize {
        self.set.len()
    }
}

/// A handle to a producer; clones share it. Needs a tokio runtime (see [`BlockingProducer`]
/// for synchronous code).
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

struct Inner {
    config: Arc<ProducerConfig>,
    routes: Arc<Routes>,
    pool: Arc<ConnectionPool>,
    buffer: Arc<Semaphore>,
    senders: Mutex<Senders>,
}

#[derive(Default)]
struct Senders {
    queues: HashMap<(String, SenderKey), mpsc::Sender<Command>>,
    tasks: Vec<JoinHandle<()>>,
    closed: bool,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

impl Producer {
    pub fn new(
        config: ProducerConfig,
        source: Arc<dyn BrokerSource>,
    ) -> Result<Producer, ProducerError> {
        config.validate()?;
        let inner = Inner {
            routes: Arc::new(Routes::new(source, config.metadata_refresh_ms)),
            pool: Arc::new(ConnectionPool::new(config.connect_timeout_ms, config.tls.clone())),
            buffer: Arc::new(Semaphore::new(config.buffer_bytes)),
            senders: Mutex::new(Senders::default()),
            config: Arc::new(config),
        };
        Ok(Producer { inner: Arc::new(inner) })
    }

    pub fn config(&self) -> &ProducerConfig {
        &self.inner.config
    }

    /// Sends one message and waits until its batch is acknowledged (per `acks`).
    pub async fn send(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        payload: &[u8],
    ) -> Result<Delivery, ProducerError> {
        self.enqueue(topic, key, payload).await?.await
    }

    /// Accepts one message into its partition's batch and returns without waiting for the
    /// acknowledgement, which the returned [`Pending`] yields. Waits (or fails) only while the
    /// buffer is full. Messages sent to one partition are delivered in the order accepted.
    pub async fn enqueue(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        payload: &[u8],
    ) -> Result<Pending, ProducerError> {
        let mut message =
            BytesMut::with_capacity(protocol::PLAIN_MESSAGE_OVERHEAD_BYTES + payload.len());
        protocol::encode_message(&mut message, Codec::None, payload);
        let bytes = message.len();
        self.enqueue_message(topic, Place::Route(key), message.freeze(), 1, bytes).await
    }

    /// Like [`Producer::enqueue`] for many messages at once: they go to one partition, in one
    /// batch (or compressed wrapper) unless they are more than a batch, and the one
    /// [`Pending`] answers for all of them. What a caller shipping thousands of messages a
    /// second saves is a buffer permit, a queue slot and a reply per message.
    pub async fn enqueue_messages(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        messages: FramedMessages,
    ) -> Result<Pending, ProducerError> {
        if messages.count == 0 {
            let reason = "no messages".to_owned();
            return Err(ProducerError::InvalidMessage { topic: topic.to_owned(), reason });
        }
        let FramedMessages { set, count, largest_bytes } = messages;
        self.enqueue_message(topic, Place::Route(key), set.freeze(), count, largest_bytes).await
    }

    /// Like [`Producer::enqueue_messages`] to `partition`, as one idempotent batch with the
    /// identity the caller gives it (`producer_id`, `epoch`, `base_sequence` — numbered by the
    /// caller, without gaps per partition), sent alone and retried as it is. A caller that
    /// keeps the identity durably before the send can send the same batch again after its own
    /// crash: a leader that has it answers where it is (or, for a batch older than the last
    /// five it keeps, [`ErrorCode::DuplicateSequence`] — acknowledged here with no offset)
    /// instead of appending it twice. A batch the leader refuses as out of order fails with
    /// that code ([`ProducerError::code`]); what to do then is the caller's.
    ///
    /// [`ErrorCode::DuplicateSequence`]: protocol::ErrorCode::DuplicateSequence
    pub async fn enqueue_sequenced(
        &self,
        topic: &str,
        partition: i32,
        sequenced: Sequenced,
        messages: FramedMessages,
    ) -> Result<Pending, ProducerError> {
        let invalid =
            |reason: String| ProducerError::InvalidMessage { topic: topic.to_owned(), reason };
        if messages.count == 0 {
            return Err(invalid("no messages".to_owned()));
        }
        if partition < 0 || sequenced.producer_id < 0 || sequenced.base_sequence < 0 {
            return Err(invalid(format!(
                "a sequenced batch to partition {partition} as {sequenced:?}"
            )));
        }
        if self.inner.config.acks == protocol::Acks::None {
            let reason = "a sequenced batch needs acks of at least 1".to_owned();
            return Err(ProducerError::InvalidConfig { reason });
        }
        let FramedMessages { set, count, largest_bytes } = messages;
        let place = Place::Sequenced(partition, sequenced);
        self.enqueue_message(topic, place, set.freeze(), count, largest_bytes).await
    }

    /// A new producer id and epoch, from a broker that has `topic`, for
    /// [`Producer::enqueue_sequenced`].
    pub async fn init_producer_id(&self, topic: &str) -> Result<(i64, i16), ProducerError> {
        // A leader of the topic when there is one (an entry point may be a load balancer
        // that sends the connection to a broker just cut off), else an entry point.
        let route = self.inner.routes.get(topic).await?;
        let leaders: Vec<&TopicPartition> =
            route.partitions.iter().filter(|p| p.partition != protocol::ANY_PARTITION).collect();
        let target = match leaders.is_empty() {
            false => leaders[rand::random_range(0..leaders.len())],
            true if !route.brokers.is_empty() => {
                &route.brokers[rand::random_range(0..route.brokers.len())]
            }
            true => &route.partitions[0],
        };
        let send_error = |source: crate::ClientError| ProducerError::Send {
            topic: topic.to_owned(),
            partition: protocol::ANY_PARTITION,
            addr: target.addr.clone(),
            attempts: 1,
            source: Arc::new(source),
        };
        let asked = async {
            let conn = self.inner.pool.get(&target.addr).await?;
            let timeout = std::time::Duration::from_millis(self.inner.config.request_timeout_ms);
            match tokio::time::timeout(timeout, conn.init_producer_id()).await {
                Ok(id) => id,
                Err(_) => Err(crate::ClientError::Closed {
                    addr: target.addr.clone(),
                    reason: format!("no producer id within {} ms", timeout.as_millis()),
                }),
            }
        };
        match asked.await {
            Ok(id) => Ok((id.producer_id, id.producer_epoch)),
            Err(e) => {
                // A connection that failed is not asked again: the next ask connects anew.
                if !matches!(e, crate::ClientError::Broker { .. }) {
                    self.inner.pool.forget(&target.addr);
                    self.inner.routes.invalidate(topic);
                }
                Err(send_error(e))
            }
        }
    }

    /// The partitions of `topic` that have a live leader now, as last looked up (created
    /// with the broker's defaults by the lookup if the cluster does so); empty while the
    /// cluster does not know the topic.
    pub async fn live_partitions(&self, topic: &str) -> Result<Vec<i32>, ProducerError> {
        let route = self.inner.routes.get(topic).await?;
        Ok(route
            .partitions
            .iter()
            .map(|p| p.partition)
            .filter(|&p| p != protocol::ANY_PARTITION)
            .collect())
    }

    /// Like [`Producer::enqueue`] for messages already framed (length, CRC, magic,
    /// [attributes], payload) — compressed wrappers included — one or several back to back
    /// (a MessageSet), which travel together and byte for byte. For copying messages between
    /// clusters; needs `compression` `None`, since a wrapper must not be wrapped again.
    pub async fn enqueue_framed(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        framed: Bytes,
    ) -> Result<Pending, ProducerError> {
        let (count, largest_bytes) = self.framed_counts(topic, &framed)?;
        self.enqueue_message(topic, Place::Route(key), framed, count, largest_bytes).await
    }

    /// Like [`Producer::enqueue_framed`] to `partition`, as a copier's produce
    /// (`COPY_PRODUCE`): `framed` are a source partition's bytes up to `copied.to`, and the
    /// leader appends them with `copied.to` as the position of `copied.writer` — unless it has
    /// that position already (an answer lost, a failover, the caller's own crash and restart
    /// from an older point): then it answers [`ErrorCode::DuplicateSequence`], acknowledged
    /// here with no offset, and appends nothing twice. `copied.from` is where the caller's
    /// previous copy ended (0: wherever the writer is); a leader whose writer is short of it
    /// refuses the copy as out of order ([`ProducerError::code`]): a copy before it is
    /// missing. The copy travels alone and is retried as it is.
    ///
    /// [`ErrorCode::DuplicateSequence`]: protocol::ErrorCode::DuplicateSequence
    pub async fn enqueue_copy(
        &self,
        topic: &str,
        partition: i32,
        copied: Copied,
        framed: Bytes,
    ) -> Result<Pending, ProducerError> {
        let (count, largest_bytes) = self.framed_counts(topic, &framed)?;
        let spans = usize::try_from(copied.to - copied.from).is_ok_and(|n| n >= framed.len());
        if partition < 0 || copied.from < 0 || !spans {
            let reason = format!(
                "a copy to partition {partition} of {}..{} in {} bytes",
                copied.from,
                copied.to,
                framed.len()
            );
            return Err(ProducerError::InvalidMessage { topic: topic.to_owned(), reason });
        }
        if self.inner.config.acks == protocol::Acks::None {
            let reason = "a copy needs acks of at least 1".to_owned();
            return Err(ProducerError::InvalidConfig { reason });
        }
        let place = Place::Copied(partition, copied);
        self.enqueue_message(topic, place, framed, count, largest_bytes).await
    }

    /// The messages in `framed` and the largest one's bytes, if it is whole valid messages
    /// and the producer sends them as they are.
    fn framed_counts(&self, topic: &str, framed: &Bytes) -> Result<(usize, usize), ProducerError> {
        if self.inner.config.compression != Codec::None {
            let reason = "framed messages need compression None".to_owned();
            return Err(ProducerError::InvalidConfig { reason });
        }
        let mut messages = MessageSetIter::new(framed, 0);
        let mut count = 0;
        let mut largest_bytes = 0;
        let mut valid = true;
        let mut start = 0;
        while let Some(message) = messages.next() {
            if message.is_err() {
                valid = false;
                break;
            }
            count += 1;
            let end = messages.valid_bytes();
            largest_bytes = largest_bytes.max(end - start);
            start = end;
        }
        if !valid || framed.is_empty() || messages.valid_bytes() != framed.len() {
            let reason = format!("not whole valid framed messages ({} bytes)", framed.len());
            return Err(ProducerError::InvalidMessage { topic: topic.to_owned(), reason });
        }
        Ok((count, largest_bytes))
    }

    /// Accepts encoded messages (`messages` of them, the largest `largest_bytes`) into their
    /// partition's batch, as one record.
    async fn enqueue_message(
        &self,
        topic: &str,
        place: Place<'_>,
        message: Bytes,
        messages: usize,
        largest_bytes: usize,
    ) -> Result<Pending, ProducerError> {
        let inner = &self.inner;
        let config = &inner.config;
        protocol::validate_topic_name(topic)
            .map_err(|_| ProducerError::InvalidTopic { topic: topic.to_owned() })?;
        if largest_bytes > config.message_bytes_max {
            let limit_bytes = config.message_bytes_max;
            return Err(ProducerError::MessageTooLarge {
                topic: topic.to_owned(),
                bytes: largest_bytes,
                limit_bytes,
            });
        }
        let bytes = message.len();
        if bytes > config.buffer_bytes {
            let reason = format!("{bytes} bytes, over buffer_bytes {}", config.buffer_bytes);
            return Err(ProducerError::InvalidMessage { topic: topic.to_owned(), reason });
        }
        if inner.lock_senders().closed {
            return Err(ProducerError::Closed);
        }
        let (target, identity) = match place {
            Place::Route(key) => (self.route(topic, key).await?, None),
            Place::Sequenced(partition, _) | Place::Copied(partition, _) => {
                let route = self.inner.routes.get(topic).await?;
                let target = route.leader(partition).cloned().unwrap_or_else(|| {
                    // No live leader known: the sender finds one when it sends.
                    let entry = route.brokers.first().unwrap_or(&route.partitions[0]);
                    TopicPartition {
                        addr: entry.addr.clone(),
                        broker_id: entry.broker_id,
                        partition,
                    }
                });
                let identity = match place {
                    Place::Sequenced(_, s) => {
                        Identity::Sequenced((s.producer_id, s.epoch, s.base_sequence))
                    }
                    Place::Copied(_, copied) => Identity::Copied(copied),
                    Place::Route(_) => unreachable!("routed above"),
                };
                (target, Some(identity))
            }
        };
        // `validate` keeps `buffer_bytes` within a u32.
        let permits = u32::try_from(bytes).expect("buffer_bytes fits u32");
        let permit = match config.buffer_full {
            BufferFull::Block => Arc::clone(&inner.buffer)
                .acquire_many_owned(permits)
                .await
                .map_err(|_| ProducerError::Closed)?,
            BufferFull::Error => match Arc::clone(&inner.buffer).try_acquire_many_owned(permits) {
                Ok(permit) => permit,
                Err(TryAcquireError::NoPermits) => {
                    let limit = format!("buffer_bytes {}", config.buffer_bytes);
                    return Err(ProducerError::BufferFull { topic: topic.to_owned(), limit });
                }
                Err(TryAcquireError::Closed) => return Err(ProducerError::Closed),
            },
        };
        let (reply, pending) = oneshot::channel();
        let record = Record { message, messages, reply, identity, _permit: permit };
        let queue = self.queue_for(topic, target)?;
        let command = Command::Record(record);
        match config.buffer_full {
            BufferFull::Block => queue.send(command).await.map_err(|_| ProducerError::Closed)?,
            BufferFull::Error => queue.try_send(command).map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => ProducerError::BufferFull {
                    topic: topic.to_owned(),
                    limit: format!("queue_messages_max {}", config.queue_messages_max),
                },
                mpsc::error::TrySendError::Closed(_) => ProducerError::Closed,
            })?,
        }
        Ok(Pending { reply: pending })
    }

    /// The partition a message goes to.
    async fn route(
        &self,
        topic: &str,
        key: Option<&[u8]>,
    ) -> Result<TopicPartition, ProducerError> {
        let route = self.inner.routes.get(topic).await?;
        let partitioner = &self.inner.config.partitioner;
        if let Partitioner::Any = partitioner {
            let broker = rand::random_range(0..route.brokers.len());
            return Ok(route.brokers[broker].clone());
        }
        let index = partitioner.pick(topic, key, &route.partitions);
        route.partitions.get(index).cloned().ok_or_else(|| ProducerError::PartitionOutOfRange {
            topic: topic.to_owned(),
            index,
            partitions: route.partitions.len(),
        })
    }

    /// The queue of `target`'s sender, starting the sender on first use.
    fn queue_for(
        &self,
        topic: &str,
        target: TopicPartition,
    ) -> Result<mpsc::Sender<Command>, ProducerError> {
        let inner = &self.inner;
        let mut senders = inner.lock_senders();
        if senders.closed {
            return Err(ProducerError::Closed);
        }
        let key = (topic.to_owned(), SenderKey::of(&target));
        if let Some(queue) = senders.queues.get(&key) {
            return Ok(queue.clone());
        }
        let (queue, receiver) = mpsc::channel(inner.config.queue_messages_max);
        let sender = PartitionSender {
            topic: topic.to_owned(),
            target,
            config: Arc::clone(&inner.config),
            pool: Arc::clone(&inner.pool),
            routes: Arc::clone(&inner.routes),
            queue: receiver,
            producer: None,
        };
        senders.tasks.push(tokio::spawn(sender.run()));
        senders.queues.insert(key, queue.clone());
        Ok(queue)
    }

    /// Sends every batch now and returns once every message accepted before the call is
    /// acknowledged or has failed (its [`Pending`] says which).
    pub async fn flush(&self) {
        let queues: Vec<_> = self.inner.lock_senders().queues.values().cloned().collect();
        let mut waits = Vec::with_capacity(queues.len());
        for queue in queues {
            let (done, wait) = oneshot::channel();
            if queue.send(Command::Flush(done)).await.is_ok() {
                waits.push(wait);
            }
        }
        for wait in waits {
            let _ = wait.await; // a sender that stopped has nothing left to flush
        }
    }

    /// Flushes, refuses further sends, and waits for every partition sender to finish.
    pub async fn close(&self) {
        self.flush().await;
        let tasks = {
            let mut senders = self.inner.lock_senders();
            senders.closed = true;
            senders.queues.clear();
            std::mem::take(&mut senders.tasks)
        };
        for task in tasks {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "partition sender panicked");
            }
        }
    }
}

/// Where an enqueue goes: to the partition the partitioner picks for a key, or as a sequenced
/// batch to the partition given.
enum Place<'a> {
    Route(Option<&'a [u8]>),
    Sequenced(i32, Sequenced),
    Copied(i32, Copied),
}

/// The identity of a batch sent with [`Producer::enqueue_sequenced`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sequenced {
    pub producer_id: i64,
    pub epoch: i16,
    /// The sequence number of the batch's first message on its partition.
    pub base_sequence: i32,
}

/// Which sender a message goes to: one per partition of a topic, wherever its leader is
/// (so that a leader change never reorders a partition's batches), and one per entry point
/// for partition −1.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum SenderKey {
    Partition(i32),
    Entry(String),
}

impl SenderKey {
    fn of(target: &TopicPartition) -> SenderKey {
        if target.partition == protocol::ANY_PARTITION {
            SenderKey::Entry(target.addr.clone())
        } else {
            SenderKey::Partition(target.partition)
        }
    }
}

impl Inner {
    fn lock_senders(&self) -> std::sync::MutexGuard<'_, Senders> {
        self.senders.lock().unwrap_or_else(|p| p.into_inner())
    }
}
