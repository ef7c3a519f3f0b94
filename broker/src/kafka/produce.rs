//! Produce over the Kafka listener: each partition's records — one or more RecordBatches, as
//! sent (any codec) — are checked (length, magic 2, CRC-32C) and appended as magic-2 messages,
//! one per batch, through the broker's own produce path: the same leadership, `acks` (0, 1, all)
//! and ISR checks. The leader numbers each batch (its base offset becomes its first record's
//! number), and the answer's base offset is that number.
//!
//! The appends of a request happen when it is read, so that a connection's produces are
//! appended in the order sent; only the wait for their `acks` goes on beside later requests.

use std::future::Future;
use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ApiKey, ProduceResponse, TopicName};
use protocol::record_batch::RecordBatchRef;
use protocol::{Acks, ErrorCode};

use super::client::{Answer, Client};
use crate::acl::Operation;
use crate::log::compact;
use crate::log::producers::BatchProducer;
use crate::node::AppendedRun;
use protocol::kafka::request::Malformed;
use protocol::kafka::request::{Header, ProduceRequest};
use protocol::kafka::response::{code, encode, kafka_error, str_bytes};

/// An answer still waiting for its `acks`.
pub type Pending = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// A partition's part of the answer: settled now, or once its appended run is acknowledged.
enum Outcome {
    Settled {
        error: i16,
        base_offset: i64,
    },
    Appended {
        run: AppendedRun,
        first_record: u64,
    },
    /// A compacted topic's records without a key (KIP-467): the index of each in its batch.
    Keyless {
        records: Vec<i32>,
    },
}

/// Appends the request's batches now; the answer follows their `acks`. A produce with acks 0
/// gets no answer.
pub async fn start(
    client: &Client,
    header: Header,
    request: ProduceRequest,
) -> Result<Pending, Malformed> {
    let acks = match request.acks {
        0 => Some(Acks::None),
        1 => Some(Acks::Written),
        -1 => Some(Acks::All),
        _ => None,
    };
    let mut topics: Vec<(String, Vec<(i32, Outcome)>)> = Vec::with_capacity(request.topics.len());
    for (topic, partitions) in request.topics {
        let allowed = client.node.authorizer().check(&client.principal, &topic, Operation::Produce);
        let mut outcomes = Vec::with_capacity(partitions.len());
        for (partition, records) in partitions {
            let settled = |error| Outcome::Settled { error, base_offset: -1 };
            let outcome = match (acks, records) {
                _ if !allowed => settled(code::TOPIC_AUTHORIZATION_FAILED),
                (None, _) => settled(code::INVALID_REQUIRED_ACKS),
                (_, None) => settled(code::INVALID_RECORD),
                _ if partition < 0 => settled(code::UNKNOWN_TOPIC_OR_PARTITION),
                (Some(acks), Some(records)) => {
                    let transactional = request.transactional_id.is_some();
                    append(client, &topic, partition, acks, &records, transactional).await
                }
            };
            outcomes.push((partition, outcome));
        }
        topics.push((topic, outcomes));
    }
    Ok(Box::pin(async move {
        let mut responses = Vec::with_capacity(topics.len());
        for (topic, outcomes) in topics {
            let mut partitions = Vec::with_capacity(outcomes.len());
            for (partition, outcome) in outcomes {
                let mut record_errors = Vec::new();
                let mut error_message = None;
                let (error, base_offset, append_time) = match outcome {
                    Outcome::Settled { error, base_offset } => (error, base_offset, None),
                    Outcome::Keyless { records } => {
                        let reason = "Compacted topic cannot accept message without key";
                        record_errors = records
                            .into_iter()
                            .map(|index| {
                                BatchIndexAndErrorMessage::default()
                                    .with_batch_index(index)
                                    .with_batch_index_error_message(Some(str_bytes(reason)))
                            })
                            .collect();
                        error_message = Some(str_bytes(&format!(
                            "{reason} in topic partition {topic}-{partition}."
                        )));
                        (code::INVALID_RECORD, -1, None)
                    }
                    Outcome::Appended { run, first_record } => {
                        let append_time = run.append_time();
                        let result = run.acknowledged().await.pop().expect("one set");
                        match result {
                            Ok(_) => (code::NONE, first_record as i64, append_time),
                            Err(e) => (kafka_error(e), -1, None),
                        }
                    }
                };
                partitions.push(
                    PartitionProduceResponse::default()
                        .with_index(partition)
                        .with_error_code(error)
                        .with_base_offset(base_offset)
                        // The time the records carry when the topic stamps them (−1: theirs).
                        .with_log_append_time_ms(append_time.unwrap_or(-1))
                        .with_record_errors(record_errors)
                        .with_error_message(error_message),
                );
            }
            responses.push(
                TopicProduceResponse::default()
                    .with_name(TopicName(str_bytes(&topic)))
                    .with_partition_responses(partitions),
            );
        }
        if acks == Some(Acks::None) {
            return Ok(None);
        }
        let body = ProduceResponse::default().with_responses(responses);
        Ok(Some(encode(ApiKey::Produce, &header, &body)?.into()))
    }))
}

/// Checks one partition's records and appends them.
async fn append(
    client: &Client,
    topic: &str,
    partition: i32,
    acks: Acks,
    records: &Bytes,
    transactional: bool,
) -> Outcome {
    let settled = |error| Outcome::Settled { error, base_offset: -1 };
    let batches = match split_batches(records, transactional) {
        Ok(batches) => batches,
        Err(error) => return settled(error),
    };
    let mut set = BytesMut::with_capacity(records.len() + batches.len() * 9);
    for (batch, _) in &batches {
        protocol::encode_batch_message(&mut set, batch);
    }
    let set = set.freeze();
    // An idempotent producer's batches of one partition: one batch per request, as every
    // client sends them; its sequences are checked before the append.
    let producer = match batches.as_slice() {
        [(_, producer)] => *producer,
        _ => None,
    };
    let node = &client.node;
    let run = match producer {
        // A batch sent again is acknowledged where it was appended.
        Some(producer) => {
            match node.append_idempotent(topic, partition, acks, &set, producer).await {
                Ok(run) => run,
                Err(error) => return settled(kafka_error(error)),
            }
        }
        None => node.append_run(topic, partition, acks, std::slice::from_ref(&set)).await,
    };
    match run.first_record() {
        Some(first_record) => Outcome::Appended { run, first_record },
        None => match run.acknowledged().await.pop().expect("one set").err() {
            // A compacted topic refused a record without a key: which ones (KIP-467), found
            // again only now that the set is refused.
            Some(ErrorCode::InvalidRecord) => Outcome::Keyless {
                records: compact::keyless(&set).into_iter().map(|(_, r)| r).collect(),
            },
            error => settled(error.map_or(code::UNKNOWN_SERVER_ERROR, kafka_error)),
        },
    }
}

/// The RecordBatches of a partition's records, each checked whole, with the idempotent
/// producer that wrote it; a Kafka error code for records that are not whole, valid batches,
/// for a control batch (only a transaction coordinator writes markers), and for transactional
/// batches that are not a transactional producer's (one with a `transactional_id`) or one
/// that sends a batch outside its transaction.
fn split_batches(
    records: &Bytes,
    transactional: bool,
) -> Result<Vec<(Bytes, Option<BatchProducer>)>, i16> {
    let mut batches = Vec::new();
    let mut rest = records.clone();
    while !rest.is_empty() {
        let length = protocol::i32_at(&rest, 8).ok_or(code::CORRUPT_MESSAGE)?;
        let size = usize::try_from(length).ok().and_then(|l| l.checked_add(12));
        let size = size.filter(|&size| size <= rest.len()).ok_or(code::CORRUPT_MESSAGE)?;
        let batch = rest.split_to(size);
        let parsed = RecordBatchRef::parse(&batch).map_err(|_| code::CORRUPT_MESSAGE)?;
        if parsed.is_control()
            || parsed.is_transactional() != transactional
            || (transactional && parsed.producer_id() < 0)
        {
            return Err(code::INVALID_RECORD);
        }
        let producer = BatchProducer::of(&parsed);
        batches.push((batch, producer));
    }
    if batches.is_empty() {
        return Err(code::INVALID_RECORD);
    }
    Ok(batches)
}

#[cfg(test)]
mod tests {
    use protocol::record_batch::RecordBatchBuilder;

    use super::*;

    #[test]
    fn records_split_into_whole_checked_batches() {
        let batch = |base| {
            let mut builder = RecordBatchBuilder::new(base);
            builder.push(base, 1, None, Some(b"v"), &[]);
            builder.finish()
        };
        let mut two = batch(0);
        two.extend_from_slice(&batch(1));
        let split = split_batches(&Bytes::from(two.clone()), false).unwrap();
        assert_eq!(split.len(), 2);
        assert_eq!(
            split_batches(&Bytes::from(two[..two.len() - 1].to_vec()), false),
            Err(code::CORRUPT_MESSAGE)
        );
        assert_eq!(split_batches(&Bytes::new(), false), Err(code::INVALID_RECORD));
        let mut damaged = two.clone();
        damaged[65] ^= 1; // a byte of the first batch's records
        assert_eq!(split_batches(&Bytes::from(damaged), false), Err(code::CORRUPT_MESSAGE));
        assert_eq!(
            split_batches(&Bytes::from(two.clone()), true),
            Err(code::INVALID_RECORD),
            "a transactional producer's batches are transactional"
        );
        let mut builder = RecordBatchBuilder::new(0).with_producer(7, 0, 0).transactional();
        builder.push(0, 1, None, Some(b"v"), &[]);
        let transactional = Bytes::from(builder.finish());
        assert_eq!(split_batches(&transactional, true).unwrap().len(), 1);
        assert_eq!(split_batches(&transactional, false), Err(code::INVALID_RECORD));
        let marker = protocol::record_batch::transaction_marker(7, 0, true, 0, 1);
        assert_eq!(split_batches(&Bytes::from(marker), true), Err(code::INVALID_RECORD));
    }
}
