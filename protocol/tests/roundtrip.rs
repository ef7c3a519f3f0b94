//! Property tests: every request and response survives encode → decode unchanged, and no
//! byte string makes a decoder panic.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use protocol::*;

fn topic() -> impl Strategy<Value = String> {
    "[A-Za-z0-9._-]{1,40}"
}

fn message_set() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 1..8).prop_map(|payloads| {
        let mut buf = BytesMut::new();
        for p in &payloads {
            encode_message(&mut buf, Codec::None, p);
        }
        buf.freeze()
    })
}

fn acks() -> impl Strategy<Value = Acks> {
    prop_oneof![Just(Acks::None), Just(Acks::Written), Just(Acks::Flushed), Just(Acks::All)]
}

fn error_code() -> impl Strategy<Value = ErrorCode> {
    (-1i16..=17).prop_map(ErrorCode::from_i16)
}

fn fetch() -> impl Strategy<Value = FetchRequest> {
    (topic(), any::<i32>(), any::<i64>(), any::<i32>()).prop_map(
        |(topic, partition, offset, max_bytes)| FetchRequest {
            topic,
            partition,
            offset,
            max_bytes,
        },
    )
}

fn request() -> impl Strategy<Value = Request> {
    let produce = (topic(), any::<i32>(), acks(), message_set(), any::<bool>()).prop_map(
        |(topic, partition, acks, messages, idempotent)| {
            let request = ProduceRequest { topic, partition, acks, messages };
            match idempotent {
                true => Request::IdempotentProduce(request),
                false => Request::Produce(request),
            }
        },
    );
    let multi_fetch = prop::collection::vec(fetch(), 0..5)
        .prop_map(|fetches| Request::MultiFetch(MultiFetchRequest { fetches }));
    let multi_fetch_wait = (any::<i32>(), any::<i32>(), prop::collection::vec(fetch(), 0..5))
        .prop_map(|(max_wait_ms, min_bytes, fetches)| {
            Request::MultiFetchWait(MultiFetchWaitRequest { max_wait_ms, min_bytes, fetches })
        });
    let multi_produce = (
        acks(),
        prop::collection::vec((topic(), any::<i32>(), message_set()), 0..4),
    )
        .prop_map(|(acks, entries)| {
            let entries = entries
                .into_iter()
                .map(|(topic, partition, messages)| ProducePartition { topic, partition, messages })
                .collect();
            Request::MultiProduce(MultiProduceRequest { acks, entries })
        });
    let offsets = (topic(), any::<i32>(), any::<i64>(), any::<i32>()).prop_map(
        |(topic, partition, time, max_number)| {
            Request::Offsets(OffsetsRequest { topic, partition, time, max_number })
        },
    );
    let metadata = prop::collection::vec(topic(), 0..5)
        .prop_map(|topics| Request::Metadata(MetadataRequest { topics }));
    let create =
        (topic(), any::<i32>(), prop::collection::vec(("[a-z_]{1,20}", "[0-9]{0,10}"), 0..5))
            .prop_map(|(topic, partitions, configs)| {
                Request::CreateTopic(CreateTopicRequest { topic, partitions, configs })
            });
    let offset_for_epoch =
        (topic(), any::<i32>(), any::<i32>()).prop_map(|(topic, partition, epoch)| {
            Request::OffsetForLeaderEpoch(OffsetForLeaderEpochRequest { topic, partition, epoch })
        });
    let record_number =
        (topic(), any::<i32>(), any::<i64>()).prop_map(|(topic, partition, offset)| {
            Request::RecordNumber(RecordNumberRequest { topic, partition, offset })
        });
    let delete_records =
        (topic(), any::<i32>(), any::<i64>()).prop_map(|(topic, partition, offset)| {
            Request::DeleteRecords(DeleteRecordsRequest { topic, partition, offset })
        });
    let txn_marker =
        (topic(), any::<i32>(), any::<i64>(), any::<i16>(), any::<bool>(), any::<i32>()).prop_map(
            |(topic, partition, producer_id, producer_epoch, commit, coordinator_epoch)| {
                Request::WriteTxnMarker(WriteTxnMarkerRequest {
                    topic,
                    partition,
                    producer_id,
                    producer_epoch,
                    commit,
                    coordinator_epoch,
                })
            },
        );
    let read_committed = (topic(), any::<i32>(), any::<i64>(), any::<i64>()).prop_map(
        |(topic, partition, from, to)| {
            Request::ReadCommitted(ReadCommittedRequest { topic, partition, from, to })
        },
    );
    let replica_part = (topic(), any::<i32>(), any::<i32>(), any::<i64>(), any::<i32>()).prop_map(
        |(topic, partition, leader_epoch, offset, max_bytes)| ReplicaFetchPartition {
            topic,
            partition,
            leader_epoch,
            offset,
            max_bytes,
        },
    );
    let replica_fetch =
        (any::<i32>(), any::<i32>(), any::<i32>(), prop::collection::vec(replica_part, 0..5))
            .prop_map(|(replica_id, max_wait_ms, min_bytes, fetches)| {
                Request::ReplicaFetch(ReplicaFetchRequest {
                    replica_id,
                    max_wait_ms,
                    min_bytes,
                    fetches,
                })
            });
    prop_oneof![
        record_number,
        delete_records,
        txn_marker,
        read_committed,
        offset_for_epoch,
        replica_fetch,
        produce,
        fetch().prop_map(Request::Fetch),
        multi_fetch,
        multi_produce,
        offsets,
        metadata,
        create,
        multi_fetch_wait,
        Just(Request::InitProducerId)
    ]
}

fn response() -> impl Strategy<Value = Response> {
    let produce = (any::<i32>(), any::<i64>())
        .prop_map(|(partition, offset)| Response::Produce(ProduceResponse { partition, offset }));
    let fetch = message_set().prop_map(|messages| Response::Fetch(FetchResponse { messages }));
    let multi_fetch =
        prop::collection::vec((error_code(), message_set()), 0..4).prop_map(|parts| {
            let parts =
                parts.into_iter().map(|(error, messages)| FetchPart { error, messages }).collect();
            Response::MultiFetch(MultiFetchResponse { parts })
        });
    let multi_produce = prop::collection::vec((error_code(), any::<i32>(), any::<i64>()), 0..5)
        .prop_map(|parts| {
            let parts = parts
                .into_iter()
                .map(|(error, partition, offset)| ProducePart { error, partition, offset })
                .collect();
            Response::MultiProduce(MultiProduceResponse { parts })
        });
    let offsets = prop::collection::vec(any::<i64>(), 0..10)
        .prop_map(|offsets| Response::Offsets(OffsetsResponse { offsets }));
    let ids = || prop::collection::vec(any::<i32>(), 0..4);
    let partition = (any::<i32>(), error_code(), any::<i32>(), any::<i32>(), ids(), ids())
        .prop_map(|(partition, error, leader, leader_epoch, replicas, isr)| PartitionMetadata {
            partition,
            error,
            leader,
            leader_epoch,
            replicas,
            isr,
        });
    let topic_metadata = (topic(), error_code(), prop::collection::vec(partition, 0..4))
        .prop_map(|(name, error, partitions)| TopicMetadata { name, error, partitions });
    let broker = (any::<i32>(), "[a-z0-9.:-]{1,20}", any::<i32>())
        .prop_map(|(id, host, port)| BrokerMetadata { id, host, port });
    let metadata = (
        any::<i32>(),
        prop::collection::vec(broker, 0..4),
        prop::collection::vec(topic_metadata, 0..4),
    )
        .prop_map(|(broker_id, brokers, topics)| {
            Response::Metadata(MetadataResponse { broker_id, brokers, topics })
        });
    let offset_for_epoch = (any::<i32>(), any::<i64>()).prop_map(|(epoch, end_offset)| {
        Response::OffsetForLeaderEpoch(OffsetForLeaderEpochResponse { epoch, end_offset })
    });
    let record_number =
        any::<i64>().prop_map(|record| Response::RecordNumber(RecordNumberResponse { record }));
    let delete_records = any::<i64>()
        .prop_map(|log_start| Response::DeleteRecords(DeleteRecordsResponse { log_start }));
    let init_producer_id =
        (any::<i64>(), any::<i16>()).prop_map(|(producer_id, producer_epoch)| {
            Response::InitProducerId(InitProducerIdResponse { producer_id, producer_epoch })
        });
    let replica_fetch = prop::collection::vec(
        (error_code(), any::<i64>(), any::<i32>(), any::<i64>(), message_set()),
        0..4,
    )
    .prop_map(|parts| {
        let parts =
            parts
                .into_iter()
                .map(|(error, high_watermark, data_epoch, segment_base, messages)| {
                    ReplicaFetchPart { error, high_watermark, data_epoch, segment_base, messages }
                })
                .collect();
        Response::ReplicaFetch(ReplicaFetchResponse { parts })
    });
    prop_oneof![
        record_number,
        delete_records,
        Just(Response::WriteTxnMarker(WriteTxnMarkerResponse)),
        (any::<i64>(), prop::collection::vec((any::<i64>(), any::<i64>(), any::<i64>()), 0..4))
            .prop_map(|(last_stable, aborted)| {
                let aborted = aborted
                    .into_iter()
                    .map(|(producer_id, first_offset, marker_offset)| AbortedTransaction {
                        producer_id,
                        first_offset,
                        marker_offset,
                    })
                    .collect();
                Response::ReadCommitted(ReadCommittedResponse { last_stable, aborted })
            }),
        offset_for_epoch,
        replica_fetch,
        produce,
        fetch,
        multi_fetch,
        multi_produce,
        offsets,
        metadata,
        init_producer_id,
        Just(Response::CreateTopic(CreateTopicResponse))
    ]
}

/// Splits a response frame into `(error, body)`, checking its size field.
fn split_response(frame: &[u8]) -> (i16, Bytes) {
    let size = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(size, frame.len() - 4, "size counts the bytes after itself");
    let error = i16::from_be_bytes(frame[4..6].try_into().unwrap());
    (error, Bytes::copy_from_slice(&frame[6..]))
}

proptest! {
    #[test]
    fn requests_round_trip(request in request()) {
        let mut buf = BytesMut::new();
        request.encode(&mut buf).unwrap();
        let size = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
        prop_assert_eq!(size, buf.len() - 4);
        prop_assert_eq!(size, request.body_len());
        let decoded = Request::decode(buf.freeze().slice(4..)).unwrap();
        prop_assert_eq!(decoded, request);
    }

    #[test]
    fn responses_round_trip(response in response()) {
        let mut buf = BytesMut::new();
        response.encode(&mut buf);
        let (error, body) = split_response(&buf);
        prop_assert_eq!(error, 0);
        let decoded = Response::decode(response.api_key(), body).unwrap();
        prop_assert_eq!(decoded, response);
    }

    #[test]
    fn messages_round_trip(payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 1..20), base in 0i64..1 << 40) {
        let mut set = Vec::new();
        for p in &payloads {
            encode_message(&mut set, Codec::None, p);
        }
        prop_assert_eq!(validate_message_set(&set, u32::MAX), Ok(SetSummary { messages: payloads.len() }));
        let mut expected_offset = base;
        let mut iter = MessageSetIter::new(&set, base);
        for (p, item) in payloads.iter().zip(iter.by_ref()) {
            let (offset, message) = item.unwrap();
            prop_assert_eq!(offset, expected_offset);
            prop_assert_eq!(message.payload, &p[..]);
            expected_offset += 4 + 5 + p.len() as i64;
        }
        prop_assert_eq!(iter.next_offset(), base + set.len() as i64);
    }

    #[test]
    fn request_decoder_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = Request::decode(Bytes::from(bytes));
    }

    #[test]
    fn response_decoder_never_panics(key in 0u16..10, bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = Response::decode(ApiKey::from_u16(key).unwrap(), Bytes::from(bytes));
    }

    #[test]
    fn set_validator_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = validate_message_set(&bytes, 1 << 20);
        for item in MessageSetIter::new(&bytes, 0) {
            let _ = item;
        }
    }

    #[test]
    fn corrupted_requests_never_panic(request in request(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)) {
        let mut buf = BytesMut::new();
        request.encode(&mut buf).unwrap();
        let mut body = buf.split_off(4).to_vec();
        for (i, b) in flips {
            let i = i.index(body.len());
            body[i] ^= b;
        }
        if let Ok(Request::Produce(p)) = Request::decode(Bytes::from(body)) {
            let _ = validate_message_set(&p.messages, 1 << 20);
        }
    }
}

#[test]
fn unknown_request_type_is_a_typed_error() {
    assert_eq!(Request::decode(Bytes::from_static(&[0, 42])), Err(DecodeError::UnknownApiKey(42)));
}

#[test]
fn forged_counts_do_not_allocate() {
    // A multifetch claiming 65535 entries in a 4-byte body fails without reserving for them.
    let body = Bytes::from_static(&[0, 2, 0xff, 0xff]);
    assert!(matches!(Request::decode(body), Err(DecodeError::Truncated { .. })));
}

#[test]
fn multifetch_wait_has_the_designed_layout() {
    let request = Request::MultiFetchWait(MultiFetchWaitRequest {
        max_wait_ms: 500,
        min_bytes: 1,
        fetches: vec![FetchRequest { topic: "t".into(), partition: 2, offset: 9, max_bytes: 64 }],
    });
    let mut buf = BytesMut::new();
    request.encode(&mut buf).unwrap();
    #[rustfmt::skip]
    let expected: &[u8] = &[
        0, 0, 0, 31, // size
        0, 7, // type
        0, 0, 1, 244, // max_wait_ms
        0, 0, 0, 1, // min_bytes
        0, 1, // count
        0, 1, b't', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 64,
    ];
    assert_eq!(&buf[..], expected);
    // Answered like a multifetch.
    let parts = vec![FetchPart { error: ErrorCode::None, messages: Bytes::new() }];
    let mut buf = BytesMut::new();
    Response::MultiFetch(MultiFetchResponse { parts: parts.clone() }).encode(&mut buf);
    let decoded = Response::decode(ApiKey::MultiFetchWait, buf.freeze().slice(6..)).unwrap();
    assert_eq!(decoded, Response::MultiFetch(MultiFetchResponse { parts }));
}

#[test]
fn error_responses_have_empty_bodies() {
    let mut buf = BytesMut::new();
    Response::encode_error(&mut buf, ErrorCode::OffsetOutOfRange);
    assert_eq!(&buf[..], &[0, 0, 0, 2, 0, 1]);
}
