//! The producer against real brokers: batching, partitioning, compression, retries across a
//! restart, and its memory bound.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use client::{
    BlockingProducer, BufferFull, FramedMessages, Partitioner, Producer, ProducerConfig,
    ProducerError, SimpleConsumer, SimpleConsumerConfig, StaticBrokers,
};
use protocol::{Acks, Codec, MessageSetIter};
use testkit::broker::TestBroker;
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(10);

fn producer(broker: &TestBroker, config: ProducerConfig) -> Producer {
    Producer::new(config, Arc::new(StaticBrokers::new([broker.addr.clone()]))).unwrap()
}

/// Every payload of a partition, once the broker has flushed `expected` of them.
async fn read_all(
    broker: &TestBroker,
    topic: &str,
    partition: i32,
    expected: usize,
) -> Vec<String> {
    let consumer =
        SimpleConsumer::connect(&broker.addr, SimpleConsumerConfig::default()).await.unwrap();
    eventually(WAIT, "every message visible", || async {
        let mut payloads = Vec::new();
        let mut offset = 0;
        loop {
            let fetched = consumer.fetch(topic, partition, offset).await.unwrap();
            if fetched.is_empty() {
                break;
            }
            for message in &fetched {
                let message = message.unwrap();
                payloads.push(String::from_utf8(message.payload.to_vec()).unwrap());
                offset = message.next_offset;
            }
        }
        (payloads.len() >= expected).then_some(payloads)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sends_become_few_produce_requests() {
    let broker = TestBroker::start().await;
    broker.connect().await.create_topic("batched", 1, &[]).await.unwrap();
    // Plain message sets, in which each message has an offset of its own.
    let config = ProducerConfig {
        batch_messages: 100,
        linger_ms: 50,
        idempotence: false,
        ..ProducerConfig::default()
    };
    let producer = producer(&broker, config);
    let before = broker.broker.metrics().produce_requests();
    let mut pending = Vec::new();
    for i in 0..1000 {
        pending.push(producer.enqueue("batched", None, format!("m{i}").as_bytes()).await.unwrap());
    }
    let mut offsets = Vec::new();
    for p in pending {
        offsets.push(p.await.unwrap().offset.unwrap());
    }
    let requests = broker.broker.metrics().produce_requests() - before;
    assert!((10..=20).contains(&requests), "1000 messages in {requests} requests");
    assert!(offsets.windows(2).all(|w| w[0] < w[1]), "each message has its own, increasing offset");
    let expected: Vec<String> = (0..1000).map(|i| format!("m{i}")).collect();
    assert_eq!(read_all(&broker, "batched", 0, 1000).await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framed_messages_travel_as_one_record_and_count_as_messages_in_a_batch() {
    let broker = TestBroker::start().await;
    broker.connect().await.create_topic("framed", 1, &[]).await.unwrap();
    let config = ProducerConfig {
        compression: Codec::Lz4,
        batch_messages: 250,
        linger_ms: 50,
        idempotence: false, // as wrapper messages
        ..ProducerConfig::default()
    };
    let producer = producer(&broker, config);
    let before = broker.broker.metrics().produce_requests();
    let mut pending = Vec::new();
    for chunk in 0..10 {
        let mut messages = FramedMessages::with_capacity(1024);
        for i in 0..100 {
            messages.push(format!("m{}", chunk * 100 + i).as_bytes());
        }
        assert_eq!(messages.len(), 100);
        pending.push(producer.enqueue_messages("framed", None, messages).await.unwrap());
    }
    for p in pending {
        p.await.unwrap();
    }
    // 1000 messages in batches of at most 250 messages: chunks of 100 make batches of 200.
    let requests = broker.broker.metrics().produce_requests() - before;
    assert_eq!(requests, 5, "1000 messages in {requests} requests");
    let expected: Vec<String> = (0..1000).map(|i| format!("m{i}")).collect();
    assert_eq!(read_all(&broker, "framed", 0, 1000).await, expected);
    let raw = broker.connect().await.fetch("framed", 0, 0, 1 << 20).await.unwrap();
    assert!(MessageSetIter::new(&raw, 0).all(|m| m.unwrap().1.codec() == Codec::Lz4));

    let empty = producer.enqueue_messages("framed", None, FramedMessages::default()).await;
    assert!(matches!(empty, Err(ProducerError::InvalidMessage { .. })));
    let mut too_large = FramedMessages::default();
    too_large.push(&vec![0; producer.config().message_bytes_max]);
    let refused = producer.enqueue_messages("framed", None, too_large).await;
    assert!(matches!(refused, Err(ProducerError::MessageTooLarge { .. })));
}

#[tokio::test]
async fn a_lone_message_is_sent_after_linger_ms() {
    let broker = TestBroker::start().await;
    let config = ProducerConfig { linger_ms: 20, ..ProducerConfig::default() };
    let producer = producer(&broker, config);
    let started = std::time::Instant::now();
    let delivery = producer.send("lone", None, b"hello").await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(20));
    assert_eq!((delivery.partition, delivery.offset), (0, Some(0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_key_always_lands_on_the_same_partition() {
    let broker = TestBroker::start().await;
    broker.connect().await.create_topic("keyed", 8, &[]).await.unwrap();
    let config = ProducerConfig { partitioner: Partitioner::ByKey, ..ProducerConfig::default() };
    let producer = producer(&broker, config);
    let mut partition_of_key: HashMap<String, i32> = HashMap::new();
    let mut pending = Vec::new();
    for round in 0..5 {
        for user in 0..40 {
            let key = format!("user-{user}");
            let payload = format!("{key}:{round}");
            pending.push((
                key.clone(),
                producer.enqueue("keyed", Some(key.as_bytes()), payload.as_bytes()).await.unwrap(),
            ));
        }
    }
    for (key, p) in pending {
        let partition = p.await.unwrap().partition;
        assert_eq!(*partition_of_key.entry(key.clone()).or_insert(partition), partition, "{key}");
    }
    let used: std::collections::HashSet<_> = partition_of_key.values().collect();
    assert!(used.len() >= 6, "40 keys spread over 8 partitions, used {}", used.len());
    // What a consumer reads agrees: each key's messages are all in its partition, in order.
    for partition in 0..8 {
        let expected = partition_of_key.values().filter(|p| **p == partition).count() * 5;
        for payload in read_all(&broker, "keyed", partition, expected).await {
            let (key, _) = payload.split_once(':').unwrap();
            assert_eq!(partition_of_key[key], partition);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_codec_round_trips_through_a_broker_as_wrapper_messages() {
    let broker = TestBroker::start().await;
    for codec in [Codec::Gzip, Codec::Lz4, Codec::Zstd] {
        let topic = format!("compressed-{codec:?}").to_lowercase();
        let config = ProducerConfig {
            compression: codec,
            batch_messages: 1000,
            linger_ms: 100,
            acks: Acks::Flushed,
            ..ProducerConfig::default()
        };
        let producer = producer(&broker, config);
        let mut pending = Vec::new();
        for i in 0..200 {
            let payload = format!("{codec:?} message number {i} with some repetitive text");
            pending.push(producer.enqueue(&topic, None, payload.as_bytes()).await.unwrap());
        }
        let mut wrapper_offsets = std::collections::BTreeSet::new();
        for p in pending {
            wrapper_offsets.insert(p.await.unwrap().offset.unwrap());
        }
        producer.close().await;
        let payloads = read_all(&broker, &topic, 0, 200).await;
        let expected: Vec<String> = (0..200)
            .map(|i| format!("{codec:?} message number {i} with some repetitive text"))
            .collect();
        assert_eq!(payloads, expected, "{codec:?}");
        // On the broker the batch is one compressed wrapper, far smaller than the messages.
        let raw = broker.connect().await.fetch(&topic, 0, 0, 1 << 20).await.unwrap();
        let stored: Vec<_> = MessageSetIter::new(&raw, 0).map(|m| m.unwrap()).collect();
        assert!(stored.iter().all(|(_, m)| m.codec() == codec), "{codec:?}");
        let offsets: std::collections::BTreeSet<i64> = stored.iter().map(|(o, _)| *o).collect();
        assert_eq!(offsets, wrapper_offsets, "deliveries carry their wrapper's offset");
        assert!(raw.len() < 200 * 50 / 3, "{codec:?}: {} bytes stored", raw.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_with_acks_1_survive_a_broker_restart_without_loss_or_reordering() {
    let broker = TestBroker::start().await;
    broker.connect().await.create_topic("restart", 1, &[]).await.unwrap();
    let config = ProducerConfig {
        acks: Acks::Written,
        linger_ms: 1,
        batch_messages: 20,
        retry_backoff_ms: 20,
        retry_backoff_max_ms: 200,
        retries_max: 20,
        ..ProducerConfig::default()
    };
    let producer = producer(&broker, config);
    const TOTAL: usize = 3000;
    let sending = tokio::spawn({
        let producer = producer.clone();
        async move {
            let mut pending = Vec::new();
            for i in 0..TOTAL {
                pending.push(producer.enqueue("restart", None, format!("{i}").as_bytes()).await?);
                if i % 50 == 0 {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
            let mut delivered = 0;
            for p in pending {
                p.await?;
                delivered += 1;
            }
            Ok::<_, ProducerError>(delivered)
        }
    });
    // Restart while messages are still being sent.
    eventually(WAIT, "some messages appended", || async {
        (broker.broker.metrics().messages_in("restart") > 100).then_some(())
    })
    .await;
    let appended_before = broker.broker.metrics().messages_in("restart") as usize;
    let broker = broker.restart_on_same_addr(|_| {}).await;
    assert_eq!(sending.await.unwrap().unwrap(), TOTAL, "every send acknowledged");
    assert!(appended_before < TOTAL, "the restart came mid-stream");
    assert!(broker.broker.metrics().messages_in("restart") > 0, "sends resumed after it");
    // Nothing lost; a retried batch may repeat, but first appearances keep the send order.
    let payloads = read_all(&broker, "restart", 0, TOTAL).await;
    let mut seen = std::collections::HashSet::new();
    let first_appearances: Vec<usize> =
        payloads.iter().map(|p| p.parse().unwrap()).filter(|i| seen.insert(*i)).collect();
    assert_eq!(first_appearances, (0..TOTAL).collect::<Vec<_>>());
}

/// A producer whose batches stay buffered (long linger, huge batches) so its buffer fills.
fn hoarding_config(buffer_full: BufferFull) -> ProducerConfig {
    ProducerConfig {
        buffer_bytes: 1000,
        message_bytes_max: 200,
        buffer_full,
        linger_ms: 60_000,
        batch_messages: 1_000_000,
        batch_bytes: 1 << 30,
        ..ProducerConfig::default()
    }
}

#[tokio::test]
async fn full_buffer_returns_a_typed_error_when_configured_to() {
    let broker = TestBroker::start().await;
    let producer = producer(&broker, hoarding_config(BufferFull::Error));
    let payload = [7u8; 91]; // 100 bytes encoded: ten fill the buffer
    let mut pending = Vec::new();
    for _ in 0..10 {
        pending.push(producer.enqueue("full", None, &payload).await.unwrap());
    }
    let error = producer.enqueue("full", None, &payload).await.unwrap_err();
    assert!(
        matches!(&error, ProducerError::BufferFull { topic, .. } if topic == "full"),
        "{error}"
    );
    producer.flush().await;
    for p in pending {
        p.await.unwrap();
    }
    let again = producer.enqueue("full", None, &payload).await.expect("room after the flush");
    producer.flush().await;
    again.await.unwrap();
    let too_big = producer.enqueue("full", None, &[0u8; 300]).await.unwrap_err();
    assert!(matches!(too_big, ProducerError::MessageTooLarge { bytes: 309, limit_bytes: 200, .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_buffer_blocks_until_acknowledgements_free_room() {
    let broker = TestBroker::start().await;
    let producer = producer(&broker, hoarding_config(BufferFull::Block));
    let payload = [7u8; 91];
    for _ in 0..10 {
        drop(producer.enqueue("block", None, &payload).await.unwrap());
    }
    let blocked = tokio::spawn({
        let producer = producer.clone();
        async move { producer.enqueue("block", None, &payload).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!blocked.is_finished(), "the eleventh message waits for room");
    producer.flush().await; // sends the ten; their acknowledgements free the buffer
    let accepted = tokio::time::timeout(WAIT, blocked).await.unwrap().unwrap().unwrap();
    producer.flush().await;
    let delivery = accepted.await.unwrap();
    assert_eq!(delivery.offset, Some(10 * 100));
}

#[tokio::test]
async fn close_sends_everything_still_batched() {
    let broker = TestBroker::start().await;
    let config =
        ProducerConfig { linger_ms: 60_000, acks: Acks::Flushed, ..ProducerConfig::default() };
    let producer = producer(&broker, config);
    let mut pending = Vec::new();
    for i in 0..5 {
        pending.push(producer.enqueue("closing", None, format!("{i}").as_bytes()).await.unwrap());
    }
    producer.close().await;
    for p in pending {
        p.await.unwrap();
    }
    assert_eq!(read_all(&broker, "closing", 0, 5).await, ["0", "1", "2", "3", "4"]);
    assert!(matches!(producer.send("closing", None, b"late").await, Err(ProducerError::Closed)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_partition_lets_each_broker_choose_and_spreads_over_brokers() {
    let a = TestBroker::start_with(|c| c.num_partitions = 4).await;
    let b = TestBroker::start_with(|c| {
        c.num_partitions = 4;
        c.broker_id = 1;
    })
    .await;
    let source = Arc::new(StaticBrokers::new([a.addr.clone(), b.addr.clone()]));
    let config =
        ProducerConfig { partitioner: Partitioner::Any, linger_ms: 0, ..ProducerConfig::default() };
    let producer = Producer::new(config, source).unwrap();
    let mut seen = std::collections::HashSet::new();
    for i in 0..200 {
        let delivery = producer.send("anywhere", None, format!("{i}").as_bytes()).await.unwrap();
        seen.insert((delivery.addr, delivery.partition));
    }
    let brokers: std::collections::HashSet<_> = seen.iter().map(|(addr, _)| addr.clone()).collect();
    assert_eq!(brokers.len(), 2, "both brokers took messages");
    assert!(seen.len() > 4, "brokers picked several partitions: {seen:?}");
}

#[test]
fn blocking_producer_sends_from_synchronous_code() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let broker = runtime.block_on(TestBroker::start());
    let source = Arc::new(StaticBrokers::new([broker.addr.clone()]));
    let producer = BlockingProducer::new(ProducerConfig::default(), source).unwrap();
    let first = producer.send("sync", Some(b"k"), b"one").unwrap();
    let pending: Vec<_> = (0..10)
        .map(|i| producer.enqueue("sync", None, format!("{i}").as_bytes()).unwrap())
        .collect();
    let last = pending.into_iter().map(|p| producer.wait(p).unwrap()).last().unwrap();
    assert_eq!(first.offset, Some(0));
    assert!(last.offset > first.offset);
    producer.close();
    drop(broker);
}

/// Accepts connections on a loopback port and relays each to the next of `upstreams` in
/// turn, as a TCP load balancer in round-robin mode does.
async fn round_robin(upstreams: Vec<String>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        for upstream in upstreams.iter().cycle() {
            let Ok((mut client, _)) = listener.accept().await else { return };
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    addr
}

/// Behind a load balancer, partition −1 sent to a broker that leads none of the topic's
/// partitions (after failovers moved them all away) is answered "not leader": the producer
/// connects again, the balancer sends it to another broker, and the batch is acknowledged —
/// it used to retry on the kept connection, to the same broker, until it gave up (found by
/// `tributary chaos`: an agent stuck for minutes).
#[tokio::test]
async fn partition_any_behind_a_load_balancer_finds_a_broker_that_leads() {
    // Both brokers hold the partition; one leads it.
    let cluster =
        testkit::cluster::TestCluster::start_with(2, |c| c.default_replication_factor = 2).await;
    let conn = client::Connection::connect(cluster.addr()).await.unwrap();
    conn.create_topic("behind-lb", 1, &[]).await.unwrap();
    let leader = cluster.leader_of("behind-lb", 0).await;
    let idle = cluster.brokers.iter().map(|b| b.addr.clone()).find(|a| *a != leader).unwrap();
    // The first connections land on the broker that leads nothing.
    let balancer = round_robin(vec![idle.clone(), idle.clone(), idle, leader]).await;
    let config = ProducerConfig {
        partitioner: Partitioner::Any,
        retries_max: 6,
        retry_backoff_ms: 10,
        ..ProducerConfig::default()
    };
    let producer = Producer::new(config, Arc::new(StaticBrokers::new([balancer]))).unwrap();
    let pending = producer.enqueue("behind-lb", None, b"through the balancer").await.unwrap();
    let ack = tokio::time::timeout(WAIT, pending).await.expect("acknowledged in time");
    assert_eq!(ack.expect("acknowledged").partition, 0);
}

/// A producer is idempotent by default: it sends each batch as one magic-2 message of its
/// producer id, the batches' sequence numbers following one another, compressed as a whole
/// with a codec; its messages read back once each, in order, and each is acknowledged at its
/// batch's offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_producer_numbers_its_batches_in_sequence() {
    let broker = TestBroker::start().await;
    for (topic, compression) in [("idempotent", Codec::None), ("idempotent-lz4", Codec::Lz4)] {
        broker.connect().await.create_topic(topic, 1, &[]).await.unwrap();
        let config = ProducerConfig {
            batch_messages: 100,
            linger_ms: 20,
            compression,
            ..ProducerConfig::default()
        };
        let producer = producer(&broker, config);
        let mut pending = Vec::new();
        for i in 0..1000 {
            pending.push(producer.enqueue(topic, None, format!("m{i}").as_bytes()).await.unwrap());
        }
        let mut offsets = Vec::new();
        for p in pending {
            offsets.push(p.await.unwrap().offset.unwrap());
        }
        producer.close().await;
        let expected: Vec<String> = (0..1000).map(|i| format!("m{i}")).collect();
        assert_eq!(read_all(&broker, topic, 0, 1000).await, expected, "{topic}");

        let set = broker.connect().await.fetch(topic, 0, 0, 1 << 20).await.unwrap();
        let mut batches = Vec::new();
        for message in MessageSetIter::new(&set, 0) {
            let (offset, message) = message.unwrap();
            assert_eq!(message.magic, protocol::MAGIC_BATCH, "{topic}: one batch per message");
            let batch = protocol::record_batch::RecordBatchRef::parse(message.payload).unwrap();
            assert_eq!(batch.codec(), Some(compression));
            batches.push((
                offset,
                batch.producer_id(),
                batch.base_sequence(),
                batch.record_count(),
            ));
        }
        let mut next_sequence = 0;
        for &(_, id, sequence, count) in &batches {
            assert!(id >= 0 && id == batches[0].1, "{topic}: one producer id");
            assert_eq!(sequence, next_sequence, "{topic}: batches in sequence");
            next_sequence += count;
        }
        assert_eq!(next_sequence, 1000);
        let batch_offsets: Vec<i64> = batches.iter().map(|b| b.0).collect();
        assert!(offsets.iter().all(|o| batch_offsets.contains(o)), "acknowledged at its batch");
    }
}

/// Connections cut again and again under an idempotent producer — each cut loses the answers
/// in flight, and the producer sends those batches again on a new connection: every message
/// is acknowledged and stored once, in order. (Without idempotence, a run stored 22,050
/// messages for 20,000.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_cut_under_an_idempotent_producer_store_each_message_once() {
    const MESSAGES: usize = 20_000;
    let port = testkit::process::free_port();
    let upstream = format!("127.0.0.1:{port}");
    let proxy = testkit::proxy::start(upstream.parse().unwrap()).await;
    // The broker names the proxy as its address, so that the producer goes through it.
    let broker = TestBroker::start_at(tempfile::tempdir().unwrap(), &upstream, |c| {
        c.advertised_port = Some(proxy.addr().port());
    })
    .await;
    broker.connect().await.create_topic("cut", 1, &[]).await.unwrap();
    let config = ProducerConfig {
        idempotence: true,
        batch_messages: 50,
        linger_ms: 1,
        retries_max: 10_000,
        retry_backoff_ms: 5,
        retry_backoff_max_ms: 50,
        ..ProducerConfig::default()
    };
    let producer =
        Producer::new(config, Arc::new(StaticBrokers::new([proxy.addr().to_string()]))).unwrap();
    let cutting = tokio_util::sync::CancellationToken::new();
    let cutter = tokio::spawn({
        let cutting = cutting.clone();
        async move {
            let mut cuts = 0;
            while !cutting.is_cancelled() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                proxy.cut();
                tokio::time::sleep(Duration::from_millis(2)).await;
                proxy.heal();
                cuts += 1;
            }
            cuts
        }
    });
    let mut pending = Vec::with_capacity(MESSAGES);
    for i in 0..MESSAGES {
        pending.push(producer.enqueue("cut", None, format!("c{i}").as_bytes()).await.unwrap());
    }
    for p in pending {
        p.await.expect("acknowledged through the cuts");
    }
    cutting.cancel();
    let cuts = cutter.await.unwrap();
    producer.close().await;
    let expected: Vec<String> = (0..MESSAGES).map(|i| format!("c{i}")).collect();
    let stored = read_all(&broker, "cut", 0, MESSAGES).await;
    let duplicates = broker.broker.metrics().duplicate_batches.get();
    eprintln!("{cuts} cuts; {duplicates} batches sent again were acknowledged, not appended");
    assert_eq!(stored.len(), MESSAGES, "each message stored once");
    assert_eq!(stored, expected);
}

/// A leader that lost an idempotent producer's last batch (cut from its log, as a batch
/// acknowledged with acks 1 by a leader that alone had it is lost with it) refuses the next
/// one as out of order; the producer sends that one again under a new producer id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_producer_starts_afresh_when_the_leader_lost_its_last_batch() {
    let broker = TestBroker::start().await;
    broker.connect().await.create_topic("lost", 1, &[]).await.unwrap();
    let producer = producer(&broker, ProducerConfig { idempotence: true, ..Default::default() });
    producer.send("lost", None, b"a").await.unwrap();
    let log = Arc::clone(&broker.broker.logs().topic("lost").unwrap().partitions[&0]);
    let kept = log.end();
    producer.send("lost", None, b"b").await.unwrap();
    log.truncate_to(kept).unwrap();
    producer.send("lost", None, b"c").await.expect("sent again as a new producer's");
    producer.close().await;
    assert_eq!(read_all(&broker, "lost", 0, 2).await, ["a", "c"]);
}
