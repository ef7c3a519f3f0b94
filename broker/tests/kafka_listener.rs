//! The `broker` binary's Kafka listener spoken to frame by frame: an idempotent producer's
//! retried batch is acknowledged with its first offset and not appended twice, a gap in its
//! sequence is refused; malformed and oversized frames close the connection (never a panic:
//! the broker goes on serving), and a version it does not serve gets UNSUPPORTED_VERSION
//! from ApiVersions and a closed connection otherwise, as from a Kafka broker.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use client::{SimpleConsumer, SimpleConsumerConfig};
use protocol::record_batch::RecordBatchBuilder;
use testkit::eventually;
use testkit::process::{Process, free_port};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BINARY: &str = env!("CARGO_BIN_EXE_broker");
const WAIT: Duration = Duration::from_secs(20);

struct Broker {
    process: Process,
    dir: tempfile::TempDir,
    ports: (u16, u16),
    native: String,
    kafka: String,
}

fn start() -> Broker {
    start_with(&[])
}

/// A broker with `more` flags after the usual ones.
fn start_with(more: &[&str]) -> Broker {
    start_in(tempfile::tempdir().unwrap(), (free_port(), free_port()), more)
}

impl Broker {
    /// Killed (-9) and started again on its directory and ports.
    fn restart(self) -> Broker {
        let Broker { process, dir, ports, .. } = self;
        drop(process);
        start_in(dir, ports, &[])
    }
}

fn start_in(dir: tempfile::TempDir, (port, kafka_port): (u16, u16), more: &[&str]) -> Broker {
    let mut args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--kafka-port",
        &kafka_port.to_string(),
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
        "--flush-ms",
        "5",
        "--max-request-bytes",
        "1000000",
        "--max-message-bytes",
        "100000",
    ]
    .map(String::from)
    .to_vec();
    args.extend(more.iter().map(|a| a.to_string()));
    let process = Process::spawn(BINARY.as_ref(), &args, port, &dir.path().join("broker.log"));
    Broker {
        process,
        dir,
        ports: (port, kafka_port),
        native: format!("127.0.0.1:{port}"),
        kafka: format!("127.0.0.1:{kafka_port}"),
    }
}

async fn connect(addr: &str) -> TcpStream {
    eventually(WAIT, "the Kafka listener to accept", || async {
        TcpStream::connect(addr).await.ok()
    })
    .await
}

fn str16(buf: &mut BytesMut, s: &str) {
    buf.put_i16(s.len() as i16);
    buf.put_slice(s.as_bytes());
}

/// A request frame: size, header v1 (key, version, correlation id, client id), body.
fn frame(key: i16, version: i16, correlation_id: i32, body: &[u8]) -> Bytes {
    let mut f = BytesMut::new();
    f.put_u32(0);
    f.put_i16(key);
    f.put_i16(version);
    f.put_i32(correlation_id);
    str16(&mut f, "test");
    f.put_slice(body);
    let size = (f.len() - 4) as u32;
    f[..4].copy_from_slice(&size.to_be_bytes());
    f.freeze()
}

/// Sends `frame` and reads the answer's body after its correlation id; `None` when the broker
/// closed the connection instead.
async fn call(stream: &mut TcpStream, frame: &[u8]) -> Option<Bytes> {
    stream.write_all(frame).await.ok()?;
    let size = stream.read_u32().await.ok()? as usize;
    let mut body = vec![0u8; size];
    stream.read_exact(&mut body).await.ok()?;
    let mut body = Bytes::from(body);
    body.advance(4); // correlation id
    Some(body)
}

fn init_producer_id() -> Bytes {
    let mut body = BytesMut::new();
    body.put_i16(-1); // transactional id: null
    body.put_i32(60_000);
    frame(22, 0, 1, &body)
}

/// Produce v3 of one batch of `count` records with sequences from `sequence`.
fn produce(producer: (i64, i16), sequence: i32, count: i64) -> Bytes {
    produce_to("idempotent", producer, sequence, count)
}

/// Produce v3 to partition 0 of `topic`.
fn produce_to(topic: &str, producer: (i64, i16), sequence: i32, count: i64) -> Bytes {
    let mut batch = RecordBatchBuilder::new(0).with_producer(producer.0, producer.1, sequence);
    for i in 0..count {
        batch.push(
            i,
            1_000 + i,
            None,
            Some(format!("seq-{}", i32::try_from(i).unwrap() + sequence).as_bytes()),
            &[],
        );
    }
    let batch = batch.finish();
    let mut body = BytesMut::new();
    body.put_i16(-1); // transactional id
    body.put_i16(-1); // acks all
    body.put_i32(30_000);
    body.put_i32(1);
    str16(&mut body, topic);
    body.put_i32(1);
    body.put_i32(0);
    body.put_i32(batch.len() as i32);
    body.put_slice(&batch);
    frame(0, 3, 2, &body)
}

/// `(error, base_offset)` of a produce v3 answer to one partition.
fn produced(mut answer: Bytes) -> (i16, i64) {
    assert_eq!(answer.get_i32(), 1, "one topic");
    let name = answer.get_i16() as usize;
    answer.advance(name);
    assert_eq!(answer.get_i32(), 1, "one partition");
    let _partition = answer.get_i32();
    (answer.get_i16(), answer.get_i64())
}

/// The topic `idempotent` (created by a metadata request, as a client's makes it) and a
/// producer id for it, on `stream`.
async fn idempotent_producer(stream: &mut TcpStream) -> (i64, i16) {
    let mut metadata = BytesMut::new();
    metadata.put_i32(1);
    str16(&mut metadata, "idempotent");
    call(stream, &frame(3, 4, 9, &[&metadata[..], &[1]].concat())).await.unwrap();
    let mut answer = call(stream, &init_producer_id()).await.unwrap();
    let (_throttle, error) = (answer.get_i32(), answer.get_i16());
    let producer = (answer.get_i64(), answer.get_i16());
    assert_eq!((error, producer.1), (0, 0));
    producer
}

/// Sends `request` (a produce) until it is appended (the topic's partition may still be
/// opening); the whole answer.
async fn produce_until_appended(broker: &Broker, request: &Bytes) -> Bytes {
    eventually(WAIT, "the batch to be appended", || async {
        let answer = call(&mut connect(&broker.kafka).await, request).await?;
        (produced(answer.clone()).0 == 0).then_some(answer)
    })
    .await
}

/// The values of `idempotent`'s records as the native protocol reads them, once `count` are.
async fn idempotent_values(broker: &Broker, count: usize) -> Vec<String> {
    let consumer =
        SimpleConsumer::connect(&broker.native, SimpleConsumerConfig::default()).await.unwrap();
    eventually(WAIT, "the records visible", || async {
        let fetched = consumer.fetch("idempotent", 0, 0).await.ok()?;
        let values: Vec<String> = fetched
            .iter()
            .map(|m| String::from_utf8(m.unwrap().payload.to_vec()).unwrap())
            .collect();
        (values.len() >= count).then_some(values)
    })
    .await
}

#[tokio::test]
async fn a_retried_idempotent_batch_is_acknowledged_and_not_appended_twice() {
    let broker = start();
    let mut stream = connect(&broker.kafka).await;
    let producer = idempotent_producer(&mut stream).await;
    let first = produce(producer, 0, 3);
    assert_eq!(produced(produce_until_appended(&broker, &first).await), (0, 0));
    // The same batch again (a retry after a lost acknowledgement): its first offset, once.
    assert_eq!(produced(call(&mut stream, &first).await.unwrap()), (0, 0));
    assert_eq!(produced(call(&mut stream, &produce(producer, 3, 3)).await.unwrap()), (0, 3));
    // A gap in the sequence.
    let gap = produced(call(&mut stream, &produce(producer, 10, 1)).await.unwrap());
    assert_eq!(gap.0, 45, "OUT_OF_ORDER_SEQUENCE_NUMBER");

    let values = idempotent_values(&broker, 6).await;
    assert_eq!(values, ["seq-0", "seq-1", "seq-2", "seq-3", "seq-4", "seq-5"]);
}

/// A batch retried after its broker restarted (the acknowledgement lost with the process) is
/// still a duplicate: the restarted broker learns its producers' sequences from the log.
#[tokio::test]
async fn a_batch_retried_across_a_restart_is_acknowledged_and_not_appended_twice() {
    let broker = start();
    let mut stream = connect(&broker.kafka).await;
    let producer = idempotent_producer(&mut stream).await;
    produce_until_appended(&broker, &produce(producer, 0, 3)).await;
    let second = produce(producer, 3, 3);
    assert_eq!(produced(call(&mut stream, &second).await.unwrap()), (0, 3));
    drop(stream);

    let broker = broker.restart();
    let again = produced(produce_until_appended(&broker, &second).await);
    assert_eq!(again, (0, 3), "the batch's first offset, as before the restart");
    let mut stream = connect(&broker.kafka).await;
    assert_eq!(produced(call(&mut stream, &produce(producer, 6, 1)).await.unwrap()), (0, 6));
    let expected: Vec<String> = (0..7).map(|i| format!("seq-{i}")).collect();
    assert_eq!(idempotent_values(&broker, 7).await, expected);
}

/// `--message-timestamp-type LogAppendTime`, the broker's default for its topics: the produce
/// answer gives the time the leader stamped, and the stored batch carries it; the batch sent
/// again is answered with the same time.
#[tokio::test]
async fn the_broker_default_timestamp_type_stamps_batches_at_append() {
    let broker = start_with(&["--message-timestamp-type", "LogAppendTime"]);
    let mut stream = connect(&broker.kafka).await;
    let producer = idempotent_producer(&mut stream).await;
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    // After the error code and base offset: log_append_time_ms.
    let append_time = |mut answer: Bytes| {
        answer.advance(4 + 2 + "idempotent".len() + 4 + 4 + 2 + 8);
        answer.get_i64()
    };
    let stamped = append_time(produce_until_appended(&broker, &produce(producer, 0, 3)).await);
    assert!(stamped >= before.as_millis() as i64, "{stamped} is before the produce");
    tokio::time::sleep(Duration::from_millis(5)).await;
    let again = call(&mut stream, &produce(producer, 0, 3)).await.unwrap();
    assert_eq!(append_time(again), stamped, "a duplicate answers the original's time");
    let segment = broker.dir.path().join("data/idempotent-0/00000000000000000000.log");
    let stored = std::fs::read(segment).unwrap();
    let (_, message) = protocol::MessageSetIter::new(&stored, 0).next().unwrap().unwrap();
    let batch = protocol::record_batch::RecordBatchRef::parse(message.payload).unwrap();
    assert!(batch.is_log_append_time());
    assert_eq!(batch.max_timestamp(), stamped);
}

/// A client pipelines requests, as librdkafka does, and its bytes arrive in pieces: the frame
/// half read when an earlier answer is written must go on from where it was.
#[tokio::test]
async fn pipelined_frames_arriving_in_pieces_are_all_answered() {
    const FRAMES: usize = 300;
    let broker = start();
    let stream = connect(&broker.kafka).await;
    let mut metadata = BytesMut::new();
    metadata.put_i32(1);
    str16(&mut metadata, "pipelined");
    let (mut input, mut output) = stream.into_split();
    let first = frame(3, 4, 9, &[&metadata[..], &[1]].concat());
    output.write_all(&first).await.unwrap();
    let size = input.read_u32().await.unwrap() as usize;
    input.read_exact(&mut vec![0u8; size]).await.unwrap();

    let frames: Vec<u8> =
        (0..FRAMES).flat_map(|_| produce_to("pipelined", (-1, -1), -1, 5)).collect();
    let writer = tokio::spawn(async move {
        for (i, piece) in frames.chunks(13).enumerate() {
            output.write_all(piece).await.unwrap();
            if i % 40 == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        output
    });
    let mut offsets = Vec::new();
    for _ in 0..FRAMES {
        let answer = tokio::time::timeout(WAIT, async {
            let size = input.read_u32().await.ok()? as usize;
            let mut body = vec![0u8; size];
            input.read_exact(&mut body).await.ok()?;
            Some(Bytes::from(body))
        })
        .await
        .expect("an answer in time")
        .expect("the connection to stay open");
        let mut answer = answer.slice(4..);
        let (error, base_offset) = produced(answer.split_to(answer.len()));
        assert_eq!(error, 0);
        offsets.push(base_offset);
    }
    writer.await.unwrap();
    let expected: Vec<i64> = (0..FRAMES as i64).map(|i| i * 5).collect();
    assert_eq!(offsets, expected);
}

#[tokio::test]
async fn bad_frames_close_the_connection_and_unsupported_versions_are_refused() {
    let broker = start();
    // ApiVersions of a version not served: error 35 in a v0 answer listing what is.
    let mut stream = connect(&broker.kafka).await;
    let mut answer = call(&mut stream, &frame(18, 9, 5, &[])).await.unwrap();
    assert_eq!(answer.get_i16(), 35);
    let apis = answer.get_i32();
    assert!(apis >= 10, "{apis} APIs listed");
    // Another API at a version not served: the connection closes.
    assert_eq!(call(&mut stream, &frame(3, 99, 6, &[])).await, None);

    // A metadata request whose topic count claims 2^31 - 1 topics in a few bytes.
    let mut stream = connect(&broker.kafka).await;
    let mut forged = BytesMut::new();
    forged.put_i32(i32::MAX);
    str16(&mut forged, "t");
    assert_eq!(call(&mut stream, &frame(3, 1, 7, &forged)).await, None);

    // A frame larger than max_request_bytes, and one too short for a header.
    let mut stream = connect(&broker.kafka).await;
    assert_eq!(call(&mut stream, &(2_000_000u32).to_be_bytes()).await, None);
    let mut stream = connect(&broker.kafka).await;
    assert_eq!(call(&mut stream, &[0, 0, 0, 3, 0, 18, 0]).await, None);

    // The broker goes on: a good ApiVersions is answered.
    let mut stream = connect(&broker.kafka).await;
    let mut answer = call(&mut stream, &frame(18, 0, 8, &[])).await.unwrap();
    assert_eq!(answer.get_i16(), 0);
}

/// `--kafka-host` binds the Kafka listener to that address alone, apart from `--host`.
#[tokio::test]
async fn kafka_host_binds_the_kafka_listener_there() {
    let dir = tempfile::tempdir().unwrap();
    let (port, kafka_port) = (free_port(), free_port());
    let args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--kafka-port",
        &kafka_port.to_string(),
        "--kafka-host",
        "127.0.0.2",
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    let _process = Process::spawn(BINARY.as_ref(), &args, port, &dir.path().join("broker.log"));
    let mut stream = connect(&format!("127.0.0.2:{kafka_port}")).await;
    let answer = call(&mut stream, &frame(18, 0, 1, &[])).await.expect("ApiVersions answered");
    assert_eq!(&answer[..2], &[0, 0], "no error");
    let elsewhere = TcpStream::connect(format!("127.0.0.1:{kafka_port}")).await;
    assert!(elsewhere.is_err(), "not bound on 127.0.0.1");
}
