//! The simple consumer against a real broker: reading back and resuming, partial tails,
//! messages larger than the fetch size, multifetch, and OFFSETS.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use client::{ConsumerError, OffsetTime, PartitionOffset, SimpleConsumer, SimpleConsumerConfig};
use protocol::Acks;
use testkit::broker::{TestBroker, message_set};

async fn consumer(broker: &TestBroker, config: SimpleConsumerConfig) -> SimpleConsumer {
    SimpleConsumer::connect(&broker.addr, config).await.unwrap()
}

/// Produces `payloads` as one set, flushed (so visible) before this returns.
async fn produce(broker: &TestBroker, topic: &str, partition: i32, payloads: &[&[u8]]) {
    let conn = broker.connect().await;
    conn.produce(topic, partition, Acks::Flushed, message_set(payloads)).await.unwrap();
}

#[tokio::test]
async fn reads_back_in_order_and_resumes_from_next_offset() {
    let broker = TestBroker::start().await;
    produce(&broker, "t", 0, &[b"a", b"bb", b"ccc"]).await;
    let consumer = consumer(&broker, SimpleConsumerConfig::default()).await;
    let fetched = consumer.fetch("t", 0, 0).await.unwrap();
    let got: Vec<_> = fetched.iter().map(Result::unwrap).collect();
    let summary: Vec<_> =
        got.iter().map(|m| (m.offset, m.next_offset, m.payload.clone())).collect();
    assert_eq!(summary, [(0, 10, "a".into()), (10, 21, "bb".into()), (21, 33, "ccc".into())]);
    let resumed = consumer.fetch("t", 0, got[1].next_offset).await.unwrap();
    let payloads: Vec<_> = resumed.iter().map(|m| m.unwrap().payload).collect();
    assert_eq!(payloads, ["ccc"]);
    assert!(consumer.fetch("t", 0, 33).await.unwrap().is_empty(), "the end of the log");
}

#[tokio::test]
async fn partial_tail_of_a_fetch_is_dropped_and_read_by_the_next_fetch() {
    let broker = TestBroker::start().await;
    produce(&broker, "t", 0, &[&[1u8; 100], &[2u8; 100]]).await;
    let config = SimpleConsumerConfig { fetch_bytes: 150, ..SimpleConsumerConfig::default() };
    let consumer = consumer(&broker, config).await;
    let first = consumer.fetch("t", 0, 0).await.unwrap();
    assert_eq!(first.bytes().len(), 150, "the broker sent a cut-off second message");
    let mut messages = first.iter();
    assert_eq!(messages.by_ref().map(|m| m.unwrap().payload[0]).collect::<Vec<_>>(), [1]);
    assert_eq!(messages.next_offset(), 109);
    let second = consumer.fetch("t", 0, 109).await.unwrap();
    assert_eq!(second.iter().map(|m| m.unwrap().payload[0]).collect::<Vec<_>>(), [2]);
}

#[tokio::test]
async fn a_message_larger_than_fetch_bytes_grows_the_fetch_up_to_its_cap() {
    let broker = TestBroker::start().await;
    let big = vec![9u8; 200_000];
    produce(&broker, "big", 0, &[&big, b"small"]).await;
    let config = SimpleConsumerConfig {
        fetch_bytes: 64 << 10,
        fetch_bytes_max: 1 << 20,
        ..SimpleConsumerConfig::default()
    };
    let fetched = consumer(&broker, config).await.fetch("big", 0, 0).await.unwrap();
    let got: Vec<_> = fetched.iter().map(Result::unwrap).collect();
    assert_eq!(got[0].payload.len(), 200_000, "the large message arrives whole");

    let capped = SimpleConsumerConfig {
        fetch_bytes: 64 << 10,
        fetch_bytes_max: 100 << 10,
        ..SimpleConsumerConfig::default()
    };
    let error = consumer(&broker, capped).await.fetch("big", 0, 0).await.unwrap_err();
    assert!(
        matches!(
            error,
            ConsumerError::MessageTooLarge {
                offset: 0,
                message_bytes: 200_009,
                fetch_bytes_max: 102_400,
                ..
            }
        ),
        "{error}"
    );
}

#[tokio::test]
async fn multi_fetch_reads_several_partitions_and_reports_each_failure() {
    let broker = TestBroker::start().await;
    broker.connect().await.create_topic("multi", 2, &[]).await.unwrap();
    produce(&broker, "multi", 0, &[b"zero"]).await;
    produce(&broker, "multi", 1, &[b"one"]).await;
    let consumer = consumer(&broker, SimpleConsumerConfig::default()).await;
    let at = |partition, offset| PartitionOffset { topic: "multi".into(), partition, offset };
    let results = consumer.multi_fetch(&[at(0, 0), at(1, 0), at(1, 999_999)]).await.unwrap();
    let payloads = |r: &Result<client::FetchedMessages, ConsumerError>| -> Vec<_> {
        r.as_ref().unwrap().iter().map(|m| m.unwrap().payload).collect()
    };
    assert_eq!(payloads(&results[0]), ["zero"]);
    assert_eq!(payloads(&results[1]), ["one"]);
    assert!(matches!(
        results[2],
        Err(ConsumerError::OffsetOutOfRange { partition: 1, offset: 999_999, .. })
    ));
}

#[tokio::test]
async fn offsets_earliest_latest_and_before_a_time() {
    let broker = TestBroker::start().await;
    produce(&broker, "o", 0, &[b"12345"]).await;
    let consumer = consumer(&broker, SimpleConsumerConfig::default()).await;
    assert_eq!(consumer.earliest_offset("o", 0).await.unwrap(), 0);
    assert_eq!(consumer.latest_offset("o", 0).await.unwrap(), 14);
    let later = SystemTime::now() + Duration::from_secs(60);
    let ms = later.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    assert_eq!(consumer.offsets("o", 0, OffsetTime::Before(ms), 10).await.unwrap(), [0]);
    assert_eq!(
        consumer.offsets("o", 0, OffsetTime::Before(0), 10).await.unwrap(),
        Vec::<i64>::new()
    );
    let error = consumer.latest_offset("o", 7).await.unwrap_err();
    assert!(matches!(error, ConsumerError::Request { partition: 7, .. }), "{error}");
}

#[tokio::test]
async fn bad_config_is_rejected() {
    let broker = TestBroker::start().await;
    let config = SimpleConsumerConfig {
        fetch_bytes: 1 << 20,
        fetch_bytes_max: 1 << 10,
        ..SimpleConsumerConfig::default()
    };
    let error = SimpleConsumer::connect(&broker.addr, config).await.unwrap_err();
    assert!(matches!(error, ConsumerError::InvalidConfig { .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_polls_return_new_messages_at_once_and_nothing_after_max_wait() {
    let broker = TestBroker::start().await;
    broker.connect().await.create_topic("t", 2, &[]).await.unwrap();
    let consumer = consumer(&broker, SimpleConsumerConfig::default()).await;
    // Nothing comes: empty after max_wait_ms.
    let started = std::time::Instant::now();
    assert!(consumer.fetch_wait("t", 0, 0, 150).await.unwrap().is_empty());
    assert!(started.elapsed() >= Duration::from_millis(140));
    // A message comes: returned as soon as it is visible, long before max_wait_ms.
    let waiting = {
        let consumer = consumer.clone();
        tokio::spawn(async move { consumer.fetch_wait("t", 1, 0, 60_000).await })
    };
    testkit::eventually(Duration::from_secs(10), "parked", || async {
        (broker.broker.parked_fetches() == 1).then_some(())
    })
    .await;
    let started = std::time::Instant::now();
    produce(&broker, "t", 1, &[b"news"]).await;
    let fetched = waiting.await.unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    assert_eq!(fetched.iter().map(|m| m.unwrap().payload).collect::<Vec<_>>(), ["news"]);
    // Over several partitions, each answer on its own.
    let starts = [
        PartitionOffset { topic: "t".into(), partition: 0, offset: 0 },
        PartitionOffset { topic: "t".into(), partition: 1, offset: 0 },
        PartitionOffset { topic: "t".into(), partition: 1, offset: 99_999 },
    ];
    let answers = consumer.multi_fetch_wait(&starts, 60_000, 1).await.unwrap();
    assert!(answers[0].as_ref().unwrap().is_empty());
    assert_eq!(answers[1].as_ref().unwrap().iter().count(), 1);
    assert!(matches!(answers[2], Err(ConsumerError::OffsetOutOfRange { .. })));
    assert!(
        consumer.multi_fetch_wait(&starts, u32::MAX, 1).await.is_err(),
        "max_wait_ms over 2^31"
    );
}
