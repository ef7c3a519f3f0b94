//! A batch: the messages bound for one partition, accumulated until `batch_messages`,
//! `batch_bytes` or `linger_ms` says send, then encoded as one MessageSet — or, with
//! compression, as one magic-1 wrapper message whose payload is that set compressed; or, for
//! an idempotent producer, as one magic-2 message whose RecordBatch carries the producer's
//! id, epoch and sequence numbers (compressed as a whole with a codec).

use bytes::{Bytes, BytesMut};
use protocol::record_batch::RecordBatchBuilder;
use protocol::{Codec, MessageSetIter};
use tokio::sync::OwnedSemaphorePermit;

use crate::compression::{self, CompressionError};
use crate::producer::ProducerConfig;
use crate::producer::ProducerError;
use crate::producer::delivery::{Delivery, DeliverySender};

/// What one enqueue accepted: a message already encoded, or several framed back to back
/// that travel together.
pub(crate) struct Record {
    pub message: Bytes,
    /// Messages in `message` (a MessageSet of more than one for a framed enqueue).
    pub messages: usize,
    pub reply: DeliverySender,
    /// The identity the caller gave it: it travels as a batch of its own.
    pub identity: Option<Identity>,
    /// Its share of the producer's buffer, given back when the record is answered.
    pub _permit: OwnedSemaphorePermit,
}

/// The identity a caller gives a record, which then travels alone.
#[derive(Debug, Clone)]
pub(crate) enum Identity {
    /// The producer id, epoch and first sequence of an idempotent batch
    /// ([`crate::Producer::enqueue_sequenced`]).
    Sequenced((i64, i16, i32)),
    /// A copier's messages ([`crate::Producer::enqueue_copy`]).
    Copied(crate::Copied),
}

#[derive(Default)]
pub(crate) struct Batch {
    records: Vec<Record>,
    bytes: usize,
    messages: usize,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Messages in the batch.
    pub fn len(&self) -> usize {
        self.messages
    }

    /// Whether `record` must wait for the next batch (a lone record always fits).
    pub fn would_overflow(&self, record: &Record, config: &ProducerConfig) -> bool {
        !self.is_empty()
            && (record.identity.is_some()
                || self.messages + record.messages > config.batch_messages
                || self.bytes + record.message.len() > config.batch_bytes)
    }

    pub fn is_full(&self, config: &ProducerConfig) -> bool {
        self.identity().is_some()
            || self.messages >= config.batch_messages
            || self.bytes >= config.batch_bytes
    }

    /// The identity its caller gave the batch: such a record travels alone.
    pub fn identity(&self) -> Option<&Identity> {
        self.records.first().and_then(|r| r.identity.as_ref())
    }

    pub fn push(&mut self, record: Record) {
        self.bytes += record.message.len();
        self.messages += record.messages;
        self.records.push(record);
    }

    /// The MessageSet to send: the messages back to back, or one wrapper around them.
    pub fn encode(&self, codec: Codec) -> Result<Bytes, CompressionError> {
        let mut set = BytesMut::with_capacity(self.bytes);
        self.records.iter().for_each(|r| set.extend_from_slice(&r.message));
        if codec == Codec::None {
            return Ok(set.freeze());
        }
        let compressed = compression::compress(codec, &set)?;
        let mut wrapper = BytesMut::with_capacity(compressed.len() + 10);
        protocol::encode_message(&mut wrapper, codec, &compressed);
        Ok(wrapper.freeze())
    }

    /// The batch as one magic-2 message of an idempotent producer: each message's payload
    /// becomes a record's value, stamped with the time now. `None` if a message is not a
    /// plain one (a wrapper or a batch already), which only a plain produce carries.
    pub fn encode_idempotent(
        &self,
        codec: Codec,
        (id, epoch, base_sequence): (i64, i16, i32),
    ) -> Result<Option<Bytes>, CompressionError> {
        let now = service::now_ms();
        let mut batch = RecordBatchBuilder::new(0).with_producer(id, epoch, base_sequence);
        let mut count = 0i64;
        for record in &self.records {
            for message in MessageSetIter::new(&record.message, 0) {
                let Ok((_, message)) = message else { return Ok(None) };
                let plain = message.magic == protocol::MAGIC_PLAIN
                    || (message.magic == protocol::MAGIC_ATTRIBUTES
                        && message.codec() == Codec::None);
                if !plain {
                    return Ok(None);
                }
                batch.push(count, now, None, Some(message.payload), &[]);
                count += 1;
            }
        }
        let batch = batch.finish_compressed(codec)?;
        let mut set = BytesMut::with_capacity(batch.len() + protocol::PLAIN_MESSAGE_OVERHEAD_BYTES);
        protocol::encode_batch_message(&mut set, &batch);
        Ok(Some(set.freeze()))
    }

    /// Answers every message. `first_offset` is the acknowledged offset of the set's first
    /// message (`None` with acks 0); a plain message's own offset follows from its position,
    /// unless the set was sent as one message (`one_message`: a wrapper, or a batch).
    pub fn acknowledge(
        self,
        addr: &str,
        partition: i32,
        first_offset: Option<i64>,
        one_message: bool,
    ) {
        let mut position = 0i64;
        for record in self.records {
            let offset = match one_message {
                false => first_offset.map(|o| o + position),
                true => first_offset,
            };
            position += record.message.len() as i64;
            let delivery = Delivery { addr: addr.to_owned(), partition, offset };
            let _ = record.reply.send(Ok(delivery)); // the caller may have stopped waiting
        }
    }

    pub fn fail(self, error: &ProducerError) {
        for record in self.records {
            let _ = record.reply.send(Err(error.clone()));
        }
    }
}
