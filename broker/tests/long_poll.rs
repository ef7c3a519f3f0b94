//! Long-poll fetches (`MULTIFETCH_WAIT`): woken by the data they wait for, empty at
//! `max_wait_ms`, bounded, freed when the client hangs up, answered at shutdown. Margins are
//! generous: "well before max_wait" means under half of it, on a loaded machine.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use client::Connection;
use protocol::{Acks, ErrorCode, FetchPart, FetchRequest};
use testkit::broker::{TestBroker, message_set, messages_of};
use tokio::io::AsyncWriteExt;

fn part(topic: &str, partition: i32, offset: i64) -> FetchRequest {
    FetchRequest { topic: topic.into(), partition, offset, max_bytes: 1 << 20 }
}

fn payloads(parts: &[FetchPart]) -> Vec<String> {
    parts
        .iter()
        .flat_map(|p| {
            assert_eq!(p.error, ErrorCode::None);
            messages_of(&p.messages, 0)
        })
        .map(|(_, m)| String::from_utf8(m).unwrap())
        .collect()
}

async fn wait_parked(broker: &TestBroker, n: usize) {
    testkit::eventually(Duration::from_secs(10), "fetches parked", || async {
        (broker.broker.parked_fetches() == n).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_returns_as_soon_as_data_arrives() {
    let broker = TestBroker::start().await;
    let conn = broker.connect().await;
    conn.create_topic("t", 1, &[]).await.unwrap();
    let started = Instant::now();
    let poll =
        tokio::spawn(async move { conn.multi_fetch_wait(20_000, 1, vec![part("t", 0, 0)]).await });
    wait_parked(&broker, 1).await;
    broker.connect().await.produce("t", 0, Acks::Written, message_set(&[b"hello"])).await.unwrap();
    let parts = poll.await.unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert_eq!(payloads(&parts), ["hello"]);
    assert_eq!(broker.broker.parked_fetches(), 0);
}

#[tokio::test]
async fn long_poll_returns_empty_at_max_wait() {
    let broker = TestBroker::start().await;
    let conn = broker.connect().await;
    conn.create_topic("t", 1, &[]).await.unwrap();
    let started = Instant::now();
    let parts = conn.multi_fetch_wait(150, 1, vec![part("t", 0, 0)]).await.unwrap();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(140), "answered after {waited:?}");
    assert!(waited < Duration::from_secs(5), "answered after {waited:?}");
    assert_eq!(parts.len(), 1);
    assert!(parts[0].error.is_ok() && parts[0].messages.is_empty());
    // Data already visible is answered at once, like a MULTIFETCH.
    conn.produce("t", 0, Acks::Flushed, message_set(&[b"there"])).await.unwrap();
    let started = Instant::now();
    let parts = conn.multi_fetch_wait(20_000, 1, vec![part("t", 0, 0)]).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(payloads(&parts), ["there"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_waits_for_min_bytes_over_all_parts() {
    let broker = TestBroker::start().await;
    let conn = broker.connect().await;
    conn.create_topic("t", 2, &[]).await.unwrap();
    let poll = tokio::spawn(async move {
        conn.multi_fetch_wait(20_000, 60, vec![part("t", 0, 0), part("t", 1, 0)]).await
    });
    wait_parked(&broker, 1).await;
    // 30 bytes on partition 0: not enough.
    let producer = broker.connect().await;
    producer.produce("t", 0, Acks::Flushed, message_set(&[[b'a'; 21]])).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!poll.is_finished(), "woke with 30 of 60 bytes");
    // 30 more on partition 1: 60 over both parts.
    producer.produce("t", 1, Acks::Flushed, message_set(&[[b'b'; 21]])).await.unwrap();
    let parts = poll.await.unwrap().unwrap();
    assert_eq!(payloads(&parts).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_parked_fetches_on_many_partitions_all_wake() {
    const PARTITIONS: i32 = 16;
    let broker = TestBroker::start().await;
    broker.connect().await.create_topic("wide", PARTITIONS, &[]).await.unwrap();
    let mut polls = Vec::new();
    for p in 0..PARTITIONS {
        let conn = broker.connect().await;
        // Two long polls per partition: one alone, one beside the next partition.
        polls.push(tokio::spawn(async move {
            conn.multi_fetch_wait(20_000, 1, vec![part("wide", p, 0)]).await
        }));
        let conn = broker.connect().await;
        let next = (p + 1) % PARTITIONS;
        polls.push(tokio::spawn(async move {
            conn.multi_fetch_wait(20_000, 1, vec![part("wide", p, 0), part("wide", next, 0)]).await
        }));
    }
    wait_parked(&broker, 2 * PARTITIONS as usize).await;
    let started = Instant::now();
    let producer = broker.connect().await;
    for p in 0..PARTITIONS {
        producer.produce("wide", p, Acks::Written, message_set(&[format!("{p}")])).await.unwrap();
    }
    for poll in polls {
        let parts = poll.await.unwrap().unwrap();
        assert!(!payloads(&parts).is_empty());
    }
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert_eq!(broker.broker.parked_fetches(), 0);
}

/// A `MULTIFETCH_WAIT` frame for partition 0 of `topic` from offset 0.
fn raw_long_poll(topic: &str, max_wait_ms: i32) -> BytesMut {
    let mut buf = BytesMut::new();
    let request = protocol::Request::MultiFetchWait(protocol::MultiFetchWaitRequest {
        max_wait_ms,
        min_bytes: 1,
        fetches: vec![part(topic, 0, 0)],
    });
    request.encode(&mut buf).unwrap();
    buf
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_while_parked_frees_its_slot() {
    let broker = TestBroker::start_with(|c| c.max_parked_fetches = 1).await;
    broker.connect().await.create_topic("t", 1, &[]).await.unwrap();
    let mut raw = tokio::net::TcpStream::connect(&broker.addr).await.unwrap();
    raw.write_all(&raw_long_poll("t", 60_000)).await.unwrap();
    wait_parked(&broker, 1).await;
    drop(raw);
    wait_parked(&broker, 0).await;
    // The slot is free again: the next long poll waits instead of being answered at once.
    let conn = broker.connect().await;
    let poll =
        tokio::spawn(async move { conn.multi_fetch_wait(20_000, 1, vec![part("t", 0, 0)]).await });
    wait_parked(&broker, 1).await;
    broker.connect().await.produce("t", 0, Acks::Written, message_set(&[b"x"])).await.unwrap();
    assert_eq!(payloads(&poll.await.unwrap().unwrap()), ["x"]);
    assert_eq!(broker.broker.metrics().fetches_not_parked.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_polls_over_the_limit_are_answered_at_once() {
    let broker = TestBroker::start_with(|c| c.max_parked_fetches = 1).await;
    broker.connect().await.create_topic("t", 1, &[]).await.unwrap();
    let first = broker.connect().await;
    let parked =
        tokio::spawn(async move { first.multi_fetch_wait(20_000, 1, vec![part("t", 0, 0)]).await });
    wait_parked(&broker, 1).await;
    let started = Instant::now();
    let parts =
        broker.connect().await.multi_fetch_wait(20_000, 1, vec![part("t", 0, 0)]).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert!(parts[0].messages.is_empty());
    assert_eq!(broker.broker.metrics().fetches_not_parked.get(), 1);
    parked.abort();
}

#[tokio::test]
async fn bad_long_polls_get_error_codes_not_a_wait() {
    let broker = TestBroker::start().await;
    let conn = broker.connect().await;
    conn.create_topic("t", 1, &[]).await.unwrap();
    let code = |r: Result<Vec<FetchPart>, client::ClientError>| r.unwrap_err().code();
    assert_eq!(
        code(conn.multi_fetch_wait(-1, 1, vec![part("t", 0, 0)]).await),
        Some(ErrorCode::InvalidRequest)
    );
    assert_eq!(
        code(conn.multi_fetch_wait(100, -1, vec![part("t", 0, 0)]).await),
        Some(ErrorCode::InvalidFetchSize)
    );
    // A part that fails is answered at once, with its error, beside the others.
    let started = Instant::now();
    let parts = conn
        .multi_fetch_wait(
            20_000,
            1,
            vec![
                part("t", 0, 0),
                part("nope", 0, 0),
                part("t", 7, 0),
                part("t", 0, 99),
                FetchRequest { max_bytes: 0, ..part("t", 0, 0) },
            ],
        )
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    let errors: Vec<_> = parts.iter().map(|p| p.error).collect();
    assert_eq!(
        errors,
        [
            ErrorCode::None,
            ErrorCode::UnknownTopic,
            ErrorCode::WrongPartition,
            ErrorCode::OffsetOutOfRange,
            ErrorCode::InvalidFetchSize
        ]
    );
    // No parts and no wait: an empty answer at once.
    assert!(conn.multi_fetch_wait(0, 1, vec![]).await.unwrap().is_empty());
    conn.metadata(&[]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_stay_in_request_order_behind_a_parked_fetch() {
    let broker = TestBroker::start().await;
    let conn = broker.connect().await;
    conn.create_topic("t", 1, &[]).await.unwrap();
    let started = Instant::now();
    let poll = conn
        .enqueue(protocol::Request::MultiFetchWait(protocol::MultiFetchWaitRequest {
            max_wait_ms: 300,
            min_bytes: 1,
            fetches: vec![part("t", 0, 0)],
        }))
        .await
        .unwrap()
        .unwrap();
    // Queued behind the long poll on the same connection: answered after its 300 ms.
    conn.metadata(&[]).await.unwrap();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(290), "metadata answered after {waited:?}");
    let protocol::Response::MultiFetch(answer) = poll.wait().await.unwrap() else {
        panic!("not a multifetch answer")
    };
    assert!(answer.parts[0].messages.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_parked_fetches_promptly() {
    let broker = TestBroker::start().await;
    let conn: Connection = broker.connect().await;
    conn.create_topic("t", 1, &[]).await.unwrap();
    let poll =
        tokio::spawn(async move { conn.multi_fetch_wait(60_000, 1, vec![part("t", 0, 0)]).await });
    wait_parked(&broker, 1).await;
    let started = Instant::now();
    broker.stop().await;
    assert!(started.elapsed() < Duration::from_secs(4), "shutdown took {:?}", started.elapsed());
    let answered = tokio::time::timeout(Duration::from_secs(5), poll).await.unwrap().unwrap();
    assert!(answered.unwrap()[0].messages.is_empty());
}
