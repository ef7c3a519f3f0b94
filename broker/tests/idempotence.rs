//! Idempotent producers on the native protocol (`docs/design.md`, "Idempotent produce"):
//! INIT_PRODUCER_ID hands out a producer id, and an IDEMPOTENT_PRODUCE whose batch the leader
//! has already — sent again after a lost answer, or after the broker restarted — is answered
//! with the offset it was appended at and not appended again. A gap in a producer's
//! sequences, an older epoch, a set that is not one idempotent batch and partition −1 are
//! refused.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use client::{ClientError, Connection};
use protocol::record_batch::RecordBatchBuilder;
use protocol::{Acks, ErrorCode, ProduceResponse};
use testkit::broker::{TestBroker, message_set, read_all};
use testkit::eventually;

const TOPIC: &str = "idempotent";

/// One magic-2 message: a batch of `producer` (id, epoch) whose first record has sequence
/// number `sequence`, a record per value.
fn batch(producer: (i64, i16), sequence: i32, values: &[&str]) -> Bytes {
    let mut builder = RecordBatchBuilder::new(0).with_producer(producer.0, producer.1, sequence);
    for (i, value) in values.iter().enumerate() {
        builder.push(i as i64, 1_000, None, Some(value.as_bytes()), &[]);
    }
    let mut set = BytesMut::new();
    protocol::encode_batch_message(&mut set, &builder.finish());
    set.freeze()
}

async fn produce(conn: &Connection, partition: i32, set: Bytes) -> Result<i64, ClientError> {
    let answer = conn.produce_idempotent(TOPIC, partition, Acks::Written, set).await?;
    let ProduceResponse { offset, .. } = answer.expect("acks 1 is answered");
    Ok(offset)
}

fn refused(result: Result<i64, ClientError>) -> Option<ErrorCode> {
    result.err().and_then(|e| e.code())
}

#[tokio::test]
async fn a_batch_sent_again_is_acknowledged_where_it_was_appended_even_after_a_restart() {
    let broker = TestBroker::start().await;
    let conn = broker.connect().await;
    let id = conn.init_producer_id().await.unwrap();
    assert!(id.producer_id >= 0);
    assert_ne!(conn.init_producer_id().await.unwrap().producer_id, id.producer_id);
    let producer = (id.producer_id, id.producer_epoch);

    let first = batch(producer, 0, &["a", "b", "c"]);
    let first_at = produce(&conn, 0, first.clone()).await.unwrap();
    assert_eq!(produce(&conn, 0, first).await.unwrap(), first_at, "sent again: where it is");
    assert_eq!(broker.broker.metrics().duplicate_batches.get(), 1);
    let second = batch(producer, 3, &["d"]);
    let second_at = produce(&conn, 0, second.clone()).await.unwrap();
    assert!(second_at > first_at);
    let gap = produce(&conn, 0, batch(producer, 9, &["gap"])).await;
    assert_eq!(refused(gap), Some(ErrorCode::OutOfOrderSequence));
    let plain = produce(&conn, 0, message_set(&["plain"])).await;
    assert_eq!(refused(plain), Some(ErrorCode::InvalidRequest), "not one idempotent batch");
    let any = produce(&conn, -1, batch(producer, 4, &["any"])).await;
    assert_eq!(refused(any), Some(ErrorCode::InvalidRequest), "partition −1 has no sequences");
    // The refusals are counted under the request that was refused.
    let mut metrics = String::new();
    prometheus_client::encoding::text::encode(&mut metrics, &broker.broker.metrics().registry())
        .unwrap();
    for (error, count) in [("out_of_order_sequence", 1), ("invalid_request", 2)] {
        let line = format!(
            r#"tributary_broker_request_errors_total{{request="idempotent_produce",error="{error}"}} {count}"#
        );
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    assert!(!metrics.contains(r#"request_errors_total{request="produce""#), "{metrics}");
    drop(conn);

    // The restarted broker learns its producers' last batches from the log.
    let broker = broker.restart(|_| {}).await;
    let conn = broker.connect().await;
    assert_eq!(produce(&conn, 0, second).await.unwrap(), second_at, "a duplicate still");
    // A newer epoch of the producer starts its sequences afresh; the older is refused.
    produce(&conn, 0, batch((producer.0, producer.1 + 1), 0, &["e"])).await.unwrap();
    let old = produce(&conn, 0, batch(producer, 4, &["old"])).await;
    assert_eq!(refused(old), Some(ErrorCode::InvalidProducerEpoch));

    let read = eventually(Duration::from_secs(10), "the last batch visible", || async {
        let read = read_all(&broker.addr, TOPIC).await;
        (read.len() >= 5).then_some(read)
    })
    .await;
    assert_eq!(read, ["a", "b", "c", "d", "e"].map(|v| Bytes::from(v.as_bytes())));
}

/// Idempotent produces a client pipelines back to back are taken as a run: each is checked in
/// order — a duplicate answered where it is, a gap refused — and the batches that follow one
/// another are appended together, each answered at its own offset.
#[tokio::test]
async fn pipelined_idempotent_produces_are_checked_in_order_and_appended_together() {
    let broker = TestBroker::start().await;
    let conn = broker.connect().await;
    let id = conn.init_producer_id().await.unwrap();
    let producer = (id.producer_id, id.producer_epoch);
    let pipelined = |sets: Vec<Bytes>| {
        let conn = conn.clone();
        async move {
            let mut pending = Vec::new();
            for set in sets {
                let request = protocol::Request::IdempotentProduce(protocol::ProduceRequest {
                    topic: TOPIC.to_owned(),
                    partition: 0,
                    acks: Acks::Written,
                    messages: set,
                });
                pending.push(conn.enqueue(request).await.unwrap().expect("answered"));
            }
            let mut answers = Vec::new();
            for p in pending {
                answers.push(match p.wait().await {
                    Ok(protocol::Response::Produce(p)) => Ok(p.offset),
                    Ok(other) => panic!("{other:?}"),
                    Err(e) => Err(e.code().expect("a broker's error")),
                });
            }
            answers
        }
    };
    conn.create_topic(TOPIC, 1, &[]).await.unwrap();
    let first: Vec<Bytes> = (0..4).map(|i| batch(producer, i * 2, &["x", "y"])).collect();
    let offsets: Vec<i64> =
        pipelined(first.clone()).await.into_iter().map(Result::unwrap).collect();
    let mut at = 0;
    for (offset, set) in offsets.iter().zip(&first) {
        assert_eq!(*offset, at, "one after another: {offsets:?}");
        at += set.len() as i64;
    }
    // A batch sent again, the next, one with a gap before it, and the one after the next.
    let answers = pipelined(vec![
        first[1].clone(),
        batch(producer, 8, &["n"]),
        batch(producer, 20, &["gap"]),
        batch(producer, 9, &["m"]),
    ])
    .await;
    assert_eq!(answers[0], Ok(offsets[1]), "a duplicate is answered where it is");
    assert_eq!(answers[1], Ok(at));
    assert_eq!(answers[2], Err(ErrorCode::OutOfOrderSequence));
    assert!(answers[3].is_ok_and(|o| o > at), "{answers:?}");
    assert_eq!(broker.broker.metrics().duplicate_batches.get(), 1);
    let read = eventually(Duration::from_secs(10), "every batch visible", || async {
        let read = read_all(&broker.addr, TOPIC).await;
        (read.len() >= 10).then_some(read)
    })
    .await;
    let values: Vec<&[u8]> = read.iter().map(|v| &v[..]).collect();
    assert_eq!(values, [&b"x"[..], b"y", b"x", b"y", b"x", b"y", b"x", b"y", b"n", b"m"]);
}
