//! A group consumer whose caller commits explicitly ([`CommitPolicy::Marked`]) and reads
//! messages whole as stored (`framed`), and a producer that sends framed messages byte for
//! byte: what a mirror between clusters is built from.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use client::{
    CommitPolicy, GroupConsumer, GroupConsumerConfig, Producer, ProducerConfig, ProducerError,
    StaticBrokers,
};
use cluster::{BrokerInfo, Coordinator, Embedded, Registry};
use protocol::{Acks, Codec};
use testkit::broker::{TestBroker, message_set};
use testkit::eventually;

const GROUP: &str = "copiers";

/// One broker with one partition of `topic`, registered in an embedded tree.
async fn cluster(topic: &str) -> (TestBroker, Arc<dyn Coordinator>) {
    let broker = TestBroker::start_with(|c| c.flush_messages = 1).await;
    broker.connect().await.create_topic(topic, 1, &[]).await.unwrap();
    let session: Arc<dyn Coordinator> = Embedded::new().session("/live").unwrap();
    let registry = Registry::new(Arc::clone(&session));
    let port = broker.addr.rsplit(':').next().unwrap().parse().unwrap();
    registry.register_broker(0, &BrokerInfo::new("127.0.0.1", port)).await.unwrap();
    registry.create_topic_led_by(topic, 1, 0).await.unwrap();
    (broker, session)
}

fn marked_config(id: &str) -> GroupConsumerConfig {
    let mut config = GroupConsumerConfig::new(GROUP);
    config.consumer_id = Some(id.into());
    config.commit = CommitPolicy::Marked;
    config.auto_commit_ms = 50;
    config.fetch_wait_ms = 10;
    config
}

fn wrapper(codec: Codec, payloads: &[&str]) -> bytes::Bytes {
    let inner = message_set(payloads);
    let mut set = BytesMut::new();
    protocol::encode_message(&mut set, codec, &client::compress(codec, &inner).unwrap());
    set.freeze()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marked_policy_commits_only_marked_offsets_also_on_close() {
    let (broker, session) = cluster("events").await;
    let conn = broker.connect().await;
    conn.produce("events", 0, Acks::Flushed, message_set(&["a", "b", "c"])).await.unwrap();
    let registry = Registry::new(Arc::clone(&session));
    let partition = 0;

    let consumer = GroupConsumer::connect(registry.clone(), marked_config("c1")).unwrap();
    let topics = BTreeMap::from([("events".to_owned(), 1)]);
    let mut stream = consumer.create_message_streams(&topics).await.unwrap().remove("events");
    let stream = &mut stream.as_mut().unwrap()[0];
    let mut taken = Vec::new();
    for _ in 0..3 {
        taken.push(stream.next_message().await.unwrap().unwrap());
    }
    consumer.commit_offsets().await.unwrap();
    // Taking is not enough: nothing was marked, so nothing (not even the reset position of a
    // new group, 0) moved past where the group started.
    let committed = registry.offset(GROUP, "events", partition).await.unwrap();
    assert!(committed.is_none_or(|o| o == 0), "taken but unmarked: {committed:?}");

    consumer.mark_done("events", partition, taken[1].next_offset).await;
    consumer.mark_done("events", partition, taken[0].next_offset).await; // never moves back
    consumer.commit_offsets().await.unwrap();
    let committed = registry.offset(GROUP, "events", partition).await.unwrap();
    assert_eq!(committed, Some(taken[1].next_offset));

    consumer.mark_done("events", partition, taken[2].next_offset).await;
    consumer.mark_done("other", partition, 1_000).await; // not owned: ignored
    consumer.close().await.unwrap();
    let committed = registry.offset(GROUP, "events", partition).await.unwrap();
    assert_eq!(committed, Some(taken[2].next_offset), "close commits the last mark");

    // A new member resumes after the marked messages only.
    conn.produce("events", 0, Acks::Flushed, message_set(&["d"])).await.unwrap();
    let consumer = GroupConsumer::connect(registry, marked_config("c2")).unwrap();
    let mut streams = consumer.create_message_streams(&topics).await.unwrap();
    let next = streams.get_mut("events").unwrap()[0].next_message().await.unwrap().unwrap();
    assert_eq!(next.payload, "d");
    consumer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framed_messages_are_read_whole_and_produced_byte_for_byte() {
    let (broker, session) = cluster("events").await;
    let conn = broker.connect().await;
    let plain = message_set(&["plain"]);
    let gzip = wrapper(Codec::Gzip, &["x", "y", "z"]);
    let mut set = BytesMut::new();
    set.extend_from_slice(&plain);
    set.extend_from_slice(&gzip);
    conn.produce("events", 0, Acks::Flushed, set.freeze()).await.unwrap();

    let mut config = marked_config("framed");
    config.framed = true;
    let consumer = GroupConsumer::connect(Registry::new(session), config).unwrap();
    let topics = BTreeMap::from([("events".to_owned(), 1)]);
    let mut streams = consumer.create_message_streams(&topics).await.unwrap();
    let stream = &mut streams.get_mut("events").unwrap()[0];
    let first = stream.next_message().await.unwrap().unwrap();
    let second = stream.next_message().await.unwrap().unwrap();
    assert_eq!(first.payload, plain, "a plain message comes framed");
    assert_eq!((first.offset, first.next_offset), (0, plain.len() as i64));
    assert_eq!(second.payload, gzip, "a wrapper comes as one message, not inflated");
    assert_eq!(second.next_offset, (plain.len() + gzip.len()) as i64);
    consumer.close().await.unwrap();

    let target = TestBroker::start_with(|c| c.flush_messages = 1).await;
    target.connect().await.create_topic("copy", 1, &[]).await.unwrap();
    let brokers = Arc::new(StaticBrokers::new(vec![target.addr.clone()]));
    // As the mirror produces: framed messages forwarded as they are.
    let config = ProducerConfig { idempotence: false, ..ProducerConfig::default() };
    let producer = Producer::new(config, brokers).unwrap();
    producer.enqueue_framed("copy", None, first.payload.clone()).await.unwrap().await.unwrap();
    let mut two = BytesMut::new(); // several framed messages travel as one set
    two.extend_from_slice(&second.payload);
    two.extend_from_slice(&first.payload);
    producer.enqueue_framed("copy", None, two.freeze()).await.unwrap().await.unwrap();
    let mut expected = BytesMut::new();
    expected.extend_from_slice(&plain);
    expected.extend_from_slice(&gzip);
    expected.extend_from_slice(&plain);
    let target_conn = target.connect().await;
    let copied = eventually(Duration::from_secs(30), "both copies visible", || async {
        let set = target_conn.fetch("copy", 0, 0, 1 << 20).await.unwrap();
        (set.len() >= expected.len()).then_some(set)
    })
    .await;
    assert_eq!(copied, expected.freeze(), "the target stores the very same bytes");

    let truncated = gzip.slice(..gzip.len() - 1);
    for bad in [truncated, bytes::Bytes::new()] {
        let refused = producer.enqueue_framed("copy", None, bad).await;
        assert!(matches!(refused, Err(ProducerError::InvalidMessage { .. })));
    }
    let config = ProducerConfig { compression: Codec::Gzip, ..ProducerConfig::default() };
    let brokers = Arc::new(StaticBrokers::new(vec![target.addr.clone()]));
    let compressing = Producer::new(config, brokers).unwrap();
    let refused = compressing.enqueue_framed("copy", None, plain.clone()).await;
    assert!(matches!(refused, Err(ProducerError::InvalidConfig { .. })));
    producer.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebalance_waits_for_marks_so_that_nothing_marked_meanwhile_comes_again() {
    let (broker, session) = cluster("events").await;
    let conn = broker.connect().await;
    conn.produce("events", 0, Acks::Flushed, message_set(&["a", "b", "c"])).await.unwrap();
    let registry = Registry::new(Arc::clone(&session));
    let partition = 0;
    let topics = BTreeMap::from([("events".to_owned(), 1)]);

    let first = Arc::new(GroupConsumer::connect(registry.clone(), marked_config("first")).unwrap());
    let mut first_stream =
        first.create_message_streams(&topics).await.unwrap().remove("events").unwrap().remove(0);
    let mut taken = Vec::new();
    for _ in 0..3 {
        taken.push(first_stream.next_message().await.unwrap().unwrap());
    }
    // The caller finishes them (as a mirror does once the target acknowledged them) only after
    // the rebalance that the second member's arrival starts has begun.
    let end = taken[2].next_offset;
    let marker = {
        let first = Arc::clone(&first);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            first.mark_done("events", partition, end).await;
        })
    };
    let second = GroupConsumer::connect(registry.clone(), marked_config("second")).unwrap();
    let mut second_stream =
        second.create_message_streams(&topics).await.unwrap().remove("events").unwrap().remove(0);
    marker.await.unwrap();
    eventually(Duration::from_secs(30), "the marks committed", || async {
        (registry.offset(GROUP, "events", partition).await.unwrap() == Some(end)).then_some(())
    })
    .await;

    conn.produce("events", 0, Acks::Flushed, message_set(&["d"])).await.unwrap();
    // Whichever member owns the partition now resumes after the marked messages.
    let next = tokio::select! {
        next = first_stream.next_message() => next,
        next = second_stream.next_message() => next,
    };
    assert_eq!(
        next.unwrap().unwrap().payload,
        "d",
        "a message marked during the rebalance came again"
    );
}
