//! One mirror copying N 200-byte messages between two real brokers (each registered in a
//! real ZooKeeper), in messages/s, beside the plain consumer throughput of the same source
//! broker measured in the same run.
//!
//! `cargo bench -p mirror --bench throughput -- [--messages N] [--partitions P]`

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use client::{SimpleConsumer, SimpleConsumerConfig};
use cluster::{Coordinator, Registry, ZooKeeper, ZooKeeperConfig};
use mirror::{Config, Mirror};
use protocol::{Acks, Codec, ProduceRequest, Request};
use testkit::broker::TestBroker;
use testkit::zookeeper::ZooKeeperServer;

const MESSAGE_BYTES: usize = 200;
/// Messages per produce request when filling the source.
const PRODUCE_BATCH_MESSAGES: usize = 1_000;
/// Produce requests in flight while filling the source.
const PRODUCE_PIPELINE: usize = 16;

struct Args {
    messages: usize,
    partitions: i32,
}

fn parse_args() -> Args {
    let mut args = Args { messages: 1_000_000, partitions: 8 };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().and_then(|v| v.parse().ok()).expect("a number after the flag");
        match arg.as_str() {
            "--messages" => args.messages = value(),
            "--partitions" => args.partitions = value() as i32,
            _ => {} // cargo bench passes `--bench`
        }
    }
    args
}

async fn session(connect: &str) -> Arc<dyn Coordinator> {
    ZooKeeper::connect(ZooKeeperConfig::new(connect)).await.expect("zookeeper")
}

async fn broker(connect: &str) -> TestBroker {
    let connect = connect.to_owned();
    TestBroker::start_with(move |c| {
        c.zookeeper = Some(connect);
        c.flush_ms = 10;
    })
    .await
}

/// A 200-byte event envelope: prefix, `header.time`, server, service, id, body.
fn event(time_ms: i64, i: usize) -> Vec<u8> {
    let mut payload = vec![0, 0, 0, 0, 1];
    let mut zigzag = ((time_ms << 1) ^ (time_ms >> 63)) as u64;
    while zigzag >= 0x80 {
        payload.push((zigzag & 0x7f) as u8 | 0x80);
        zigzag >>= 7;
    }
    payload.push(zigzag as u8);
    payload.extend_from_slice(b"\x08host\x06web");
    payload.extend_from_slice(&[7; 16]);
    let body = format!("event-{i}-");
    payload.extend_from_slice(body.as_bytes());
    payload.resize(MESSAGE_BYTES, b'x');
    payload
}

async fn fill(source: &TestBroker, args: &Args) {
    let conn = source.connect().await;
    let time_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    let mut in_flight = Vec::new();
    let mut sent = 0;
    while sent < args.messages {
        let n = PRODUCE_BATCH_MESSAGES.min(args.messages - sent);
        let mut set = BytesMut::new();
        for i in sent..sent + n {
            protocol::encode_message(&mut set, Codec::None, &event(time_ms, i));
        }
        let partition = (sent / PRODUCE_BATCH_MESSAGES) as i32 % args.partitions;
        let request = Request::Produce(ProduceRequest {
            topic: "bench".into(),
            partition,
            acks: Acks::Written,
            messages: set.freeze(),
        });
        in_flight.push(conn.enqueue(request).await.expect("produce").expect("a response"));
        if in_flight.len() >= PRODUCE_PIPELINE {
            for pending in in_flight.drain(..) {
                pending.wait().await.expect("produce");
            }
        }
        sent += n;
    }
    for pending in in_flight {
        pending.wait().await.expect("produce");
    }
    // Wait until all of it is flushed, hence visible to consumers.
    let consumer = SimpleConsumer::connect(&source.addr, SimpleConsumerConfig::default())
        .await
        .expect("connect");
    let total_bytes = (args.messages * (MESSAGE_BYTES + 9)) as i64;
    loop {
        let mut visible = 0;
        for partition in 0..args.partitions {
            visible += consumer.latest_offset("bench", partition).await.expect("offsets");
        }
        if visible >= total_bytes {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Reads every partition to its end, one task per partition, counting messages.
async fn consume(source: &TestBroker, args: &Args) -> usize {
    let mut tasks = Vec::new();
    for partition in 0..args.partitions {
        let addr = source.addr.clone();
        tasks.push(tokio::spawn(async move {
            let consumer = SimpleConsumer::connect(&addr, SimpleConsumerConfig::default()).await?;
            let end = consumer.latest_offset("bench", partition).await?;
            let (mut offset, mut count) = (0, 0usize);
            while offset < end {
                let fetched = consumer.fetch("bench", partition, offset).await?;
                let mut messages = fetched.iter();
                for message in messages.by_ref() {
                    std::hint::black_box(message?.payload);
                    count += 1;
                }
                offset = messages.next_offset();
            }
            Ok::<usize, client::ConsumerError>(count)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("consumer task").expect("consume");
    }
    total
}

#[tokio::main]
async fn main() {
    let args = parse_args();
    let zookeeper = ZooKeeperServer::shared();
    let (live_connect, analytics_connect) =
        (zookeeper.connect_string(), zookeeper.connect_string());
    let source = broker(&live_connect).await;
    let target = broker(&analytics_connect).await;
    source.connect().await.create_topic("bench", args.partitions, &[]).await.expect("topic");
    println!(
        "{} messages of {MESSAGE_BYTES} bytes over {} partitions",
        args.messages, args.partitions
    );

    let started = Instant::now();
    fill(&source, &args).await;
    let registry_live = Registry::new(session(&live_connect).await);
    while registry_live.partitions("bench").await.map_or(0, |p| p.len()) < args.partitions as usize
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("filled the source in {:.2} s", started.elapsed().as_secs_f64());

    let started = Instant::now();
    let consumed = consume(&source, &args).await;
    let consume_s = started.elapsed().as_secs_f64();
    assert_eq!(consumed, args.messages, "the consumer read every message");
    let consumer_rate = consumed as f64 / consume_s;
    println!("plain consumer: {consumed} messages in {consume_s:.2} s = {consumer_rate:.0} msg/s");

    let config = Config { partitions: args.partitions as u32, ..Config::default() };
    let sources = vec![("live".to_owned(), session(&live_connect).await)];
    let started = Instant::now();
    let mirror = Mirror::start(config, sources, session(&analytics_connect).await, None)
        .await
        .expect("mirror starts");
    let totals = mirror.totals();
    while totals.messages() < args.messages as u64 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mirror_s = started.elapsed().as_secs_f64();
    let mirror_rate = args.messages as f64 / mirror_s;
    println!(
        "mirror: {} messages acknowledged by the target in {mirror_s:.2} s = {mirror_rate:.0} msg/s ({:.1} MB/s), {:.2}x the plain consumer",
        args.messages,
        totals.bytes() as f64 / mirror_s / 1e6,
        mirror_rate / consumer_rate
    );
    mirror.shutdown().await.expect("mirror shuts down");
    drop(target);
}
