//! Bad input gets a typed error response or a closed connection; never a panic, a partial
//! append, an allocation sized by an unchecked length, or a file outside the data directory.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use protocol::{Acks, ErrorCode, ProducePartition, Request};
use testkit::broker::{TestBroker, message_set, messages_of};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What the broker did with raw bytes: answered `(error, body)`, and whether it then closed.
#[derive(Debug, PartialEq)]
struct Answer {
    error: Option<i16>,
    closed: bool,
}

async fn send_raw(addr: &str, bytes: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut buf = Vec::new();
    // Read until the broker closes or goes quiet.
    let _ = tokio::time::timeout(Duration::from_millis(500), async {
        let mut chunk = [0u8; 4096];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return true,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    let closed = matches!(
        tokio::time::timeout(Duration::from_millis(200), stream.read(&mut [0u8; 1])).await,
        Ok(Ok(0)) | Ok(Err(_))
    );
    let error = (buf.len() >= 6).then(|| i16::from_be_bytes([buf[4], buf[5]]));
    Answer { error, closed }
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

fn produce(topic: &str, messages: Bytes) -> Request {
    Request::Produce(protocol::ProduceRequest {
        topic: topic.into(),
        partition: 0,
        acks: Acks::Written,
        messages,
    })
}

async fn visible_len(broker: &TestBroker, topic: &str) -> usize {
    let conn = broker.connect().await;
    match conn.fetch(topic, 0, 0, 1 << 20).await {
        Ok(set) => set.len(),
        Err(e) if e.code() == Some(ErrorCode::UnknownTopic) => 0,
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test]
async fn crc_mismatch_is_rejected_and_nothing_is_appended() {
    let broker = TestBroker::start_with(|c| c.flush_messages = 1).await;
    let conn = broker.connect().await;
    conn.produce("crc", 0, Acks::Flushed, message_set(&[b"good"])).await.unwrap();
    let mut set = message_set(&[&b"first"[..], b"second"]).to_vec();
    let last = set.len() - 1;
    set[last] ^= 1; // the second message's payload
    let err = conn.produce("crc", 0, Acks::Written, set.into()).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidMessage));
    // The connection stays usable and the log holds only the good message.
    conn.produce("crc", 0, Acks::Flushed, message_set(&[b"after"])).await.unwrap();
    let set = conn.fetch("crc", 0, 0, 1 << 20).await.unwrap();
    let payloads: Vec<_> = messages_of(&set, 0).into_iter().map(|(_, p)| p).collect();
    assert_eq!(payloads, [b"good".to_vec(), b"after".to_vec()]);
}

#[tokio::test]
async fn truncated_and_empty_sets_are_rejected() {
    let broker = TestBroker::start().await;
    let conn = broker.connect().await;
    let whole = message_set(&[&b"abcdef"[..], b"ghijkl"]);
    for cut in [1, 7, whole.len() - 1] {
        let err = conn.produce("cut", 0, Acks::Written, whole.slice(..cut)).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::InvalidMessage), "cut at {cut}");
    }
    let err = conn.produce("cut", 0, Acks::Written, Bytes::new()).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidMessage));
    assert_eq!(visible_len(&broker, "cut").await, 0);
    assert!(!broker.data_dir().join("cut-0").exists(), "garbage does not create topics");
}

#[tokio::test]
async fn a_message_over_max_message_bytes_is_rejected() {
    let broker = TestBroker::start_with(|c| c.max_message_bytes = 1000).await;
    let conn = broker.connect().await;
    let err =
        conn.produce("big", 0, Acks::Written, message_set(&[vec![0u8; 996]])).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::MessageTooLarge));
    conn.produce("big", 0, Acks::Written, message_set(&[vec![0u8; 995]])).await.unwrap();
}

#[tokio::test]
async fn oversized_frames_get_an_error_and_a_closed_connection() {
    let broker = TestBroker::start_with(|c| {
        c.max_request_bytes = 1 << 20;
        c.max_message_bytes = 1 << 10;
    })
    .await;
    // The size field alone is enough: nothing is allocated for the claimed 4 GiB.
    let answer = send_raw(&broker.addr, &u32::MAX.to_be_bytes()).await;
    assert_eq!(answer, Answer { error: Some(ErrorCode::InvalidRequest.as_i16()), closed: true });
    let answer = send_raw(&broker.addr, &((1u32 << 20) + 1).to_be_bytes()).await;
    assert_eq!(answer, Answer { error: Some(ErrorCode::InvalidRequest.as_i16()), closed: true });
}

/// A client that sent more than the bad frame's size field still gets the error: the broker
/// reads on and drops the rest before it closes. Closed with that input unread, the socket sent
/// a reset, which could overtake the answer ("connection reset" in a run of the basic request
/// sequence, issue 41).
#[tokio::test]
async fn a_bad_frames_error_reaches_a_client_that_sent_more_after_it() {
    let broker = TestBroker::start_with(|c| c.max_request_bytes = 1 << 20).await;
    for _ in 0..20 {
        let mut stream = TcpStream::connect(&broker.addr).await.unwrap();
        let mut bytes = ((1u32 << 20) + 1).to_be_bytes().to_vec();
        bytes.extend(vec![7u8; 256 << 10]);
        stream.write_all(&bytes).await.expect("the broker takes what follows the bad frame");
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.expect("the answer, then the end: no reset");
        assert!(answer.len() >= 6, "{answer:?}");
        assert_eq!(i16::from_be_bytes([answer[4], answer[5]]), ErrorCode::InvalidRequest.as_i16());
    }
}

#[tokio::test]
async fn zero_and_tiny_frame_sizes_close_the_connection() {
    let broker = TestBroker::start().await;
    for size in [0u32, 1] {
        let mut bytes = size.to_be_bytes().to_vec();
        bytes.push(0);
        let answer = send_raw(&broker.addr, &bytes).await;
        assert!(answer.closed, "size {size}");
    }
}

#[tokio::test]
async fn a_set_size_beyond_the_frame_is_an_invalid_request() {
    let broker = TestBroker::start().await;
    let mut body = BytesMut::new();
    body.put_u16(0); // PRODUCE
    body.put_u16(1);
    body.put_slice(b"t");
    body.put_i32(0);
    body.put_u8(1);
    body.put_u32(1_000_000); // claims a megabyte; three bytes follow
    body.put_slice(b"abc");
    let answer = send_raw(&broker.addr, &frame(&body)).await;
    assert_eq!(answer, Answer { error: Some(ErrorCode::InvalidRequest.as_i16()), closed: true });
}

#[tokio::test]
async fn fetch_sizes_and_offsets_are_checked() {
    let broker = TestBroker::start_with(|c| c.flush_messages = 1).await;
    let conn = broker.connect().await;
    conn.produce("f", 0, Acks::Flushed, message_set(&[b"x"])).await.unwrap();
    for max_bytes in [0, -1, i32::MIN] {
        let err = conn.fetch("f", 0, 0, max_bytes).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::InvalidFetchSize), "max_bytes {max_bytes}");
    }
    for offset in [-1, 11, i64::MAX, i64::MIN] {
        let err = conn.fetch("f", 0, offset, 100).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::OffsetOutOfRange), "offset {offset}");
    }
    assert!(conn.fetch("f", 0, 10, 100).await.unwrap().is_empty(), "the end itself is fine");
    for partition in [1, -1, i32::MAX] {
        let err = conn.fetch("f", partition, 0, 100).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::WrongPartition));
    }
    let err = conn.fetch("nope", 0, 0, 100).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::UnknownTopic));
    let err = conn.offsets("f", 0, -3, 1).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidRequest));
    let err = conn.offsets("f", 0, 1000, 0).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidRequest));
}

#[tokio::test]
async fn topic_names_never_reach_outside_the_data_directory() {
    // The data directory inside a folder of this test's own, so that a file created beside
    // it would show (the system temp dir has other tests' files coming and going).
    let outer = tempfile::tempdir().unwrap();
    let data_dir = outer.path().join("data");
    let broker = TestBroker::start_with(|c| c.data_dir = data_dir.clone()).await;
    let conn = broker.connect().await;
    for topic in ["../escape", "..", ".", "a/b", "/etc", "", "sp ace", "ü", &"x".repeat(250)] {
        let err = conn.produce(topic, 0, Acks::Written, message_set(&[b"x"])).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::InvalidTopicName), "{topic:?}");
        let err = conn.create_topic(topic, 1, &[]).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::InvalidTopicName), "{topic:?}");
        let err = conn.fetch(topic, 0, 0, 100).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::InvalidTopicName), "{topic:?}");
    }
    let beside: Vec<_> =
        std::fs::read_dir(outer.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(beside, ["data"], "nothing created beside the data directory");
    let inside: Vec<_> =
        std::fs::read_dir(&data_dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(inside.iter().all(|n| n == ".topics" || n == ".lock"), "{inside:?}");
}

#[tokio::test]
async fn unknown_request_types_get_an_error_and_a_closed_connection() {
    let broker = TestBroker::start().await;
    let answer = send_raw(&broker.addr, &frame(&[0, 99, 1, 2, 3])).await;
    assert_eq!(answer, Answer { error: Some(ErrorCode::InvalidRequest.as_i16()), closed: true });
}

#[tokio::test]
async fn random_bytes_never_take_the_broker_down() {
    let broker = TestBroker::start_with(|c| {
        c.max_request_bytes = 1 << 16;
        c.max_message_bytes = 1 << 12;
    })
    .await;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..200 {
        let len = (next() % 300) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if round % 2 == 0 && bytes.len() >= 6 {
            // Half the rounds: a plausible header with a real type, then garbage.
            let size = (bytes.len() - 4) as u32;
            bytes[..4].copy_from_slice(&size.to_be_bytes());
            bytes[4..6].copy_from_slice(&((next() % 7) as u16).to_be_bytes());
        }
        let mut stream = TcpStream::connect(&broker.addr).await.unwrap();
        stream.write_all(&bytes).await.unwrap();
        stream.shutdown().await.unwrap();
        let _ =
            tokio::time::timeout(Duration::from_millis(100), stream.read_to_end(&mut Vec::new()))
                .await;
    }
    let conn = broker.connect().await;
    conn.produce("alive", 0, Acks::Written, message_set(&[b"still here"])).await.unwrap();
    assert!(conn.metadata(&[]).await.unwrap().topics.iter().any(|t| t.name == "alive"));
}

#[tokio::test]
async fn multiproduce_rejects_only_the_bad_set() {
    let broker = TestBroker::start_with(|c| c.flush_messages = 1).await;
    let conn = broker.connect().await;
    conn.create_topic("m", 2, &[]).await.unwrap();
    let mut bad = message_set(&[b"bad"]).to_vec();
    bad[8] ^= 0xff;
    let entries = vec![
        ProducePartition { topic: "m".into(), partition: 0, messages: message_set(&[b"ok0"]) },
        ProducePartition { topic: "m".into(), partition: 1, messages: bad.into() },
        ProducePartition { topic: "m".into(), partition: 7, messages: message_set(&[b"nowhere"]) },
    ];
    let response = conn.multi_produce(Acks::Flushed, entries).await.unwrap().unwrap();
    let errors: Vec<ErrorCode> = response.parts.iter().map(|p| p.error).collect();
    assert_eq!(errors, [ErrorCode::None, ErrorCode::InvalidMessage, ErrorCode::WrongPartition]);
    assert_eq!(conn.fetch("m", 0, 0, 100).await.unwrap().len(), 12);
    assert!(conn.fetch("m", 1, 0, 100).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_broker_refuses_to_share_a_data_directory() {
    let broker = TestBroker::start().await;
    let mut config = testkit::broker::test_config(broker.data_dir());
    config.port = 0;
    let listeners = broker::Listeners::bind(&config).await.unwrap();
    let err =
        broker::Broker::open(config, &listeners, None).await.err().expect("second broker refused");
    assert!(err.to_string().contains("another broker"), "{err}");
}

#[tokio::test]
async fn produce_to_an_unknown_topic_fails_when_auto_create_is_off() {
    let broker = TestBroker::start_with(|c| c.auto_create_topics = false).await;
    let conn = broker.connect().await;
    let err = conn.produce("new", 0, Acks::Written, message_set(&[b"x"])).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::UnknownTopic));
    conn.create_topic("new", 1, &[]).await.unwrap();
    conn.produce("new", 0, Acks::Written, message_set(&[b"x"])).await.unwrap();
}

#[tokio::test]
async fn bad_topic_configs_are_rejected() {
    let broker = TestBroker::start().await;
    let conn = broker.connect().await;
    for configs in [
        &[("colour", "blue")][..],
        &[("retention_ms", "soon")],
        &[("flush_ms", "0")],
        &[("partitions", "0")],
    ] {
        let err = conn.create_topic("c", 1, configs).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::InvalidConfig), "{configs:?}");
    }
    conn.create_topic("c", 3, &[]).await.unwrap();
    let err = conn.create_topic("c", 2, &[]).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidConfig), "partitions never shrink");
}

#[test]
fn the_encoder_refuses_what_the_wire_cannot_carry() {
    let request = produce(&"t".repeat(70_000), Bytes::new());
    assert!(request.encode(&mut BytesMut::new()).is_err());
}

#[tokio::test]
async fn pipelined_produces_are_answered_each_even_when_one_is_bad() {
    let broker = TestBroker::start_with(|c| c.flush_messages = 1).await;
    let conn = broker.connect().await;
    conn.create_topic("run", 1, &[]).await.unwrap();
    // Queued back to back without waiting, so the broker sees them in one read.
    let mut pending = Vec::new();
    for i in 0..200u32 {
        let mut set = message_set(&[format!("m{i:03}")]).to_vec();
        if i == 57 {
            let last = set.len() - 1;
            set[last] ^= 1;
        }
        let request = Request::Produce(protocol::ProduceRequest {
            topic: "run".into(),
            partition: 0,
            acks: Acks::Written,
            messages: set.into(),
        });
        pending.push(conn.enqueue(request).await.unwrap().unwrap());
    }
    let mut offsets = Vec::new();
    for (i, answer) in pending.into_iter().enumerate() {
        match answer.wait().await {
            Ok(protocol::Response::Produce(p)) => offsets.push(p.offset),
            Err(e) if i == 57 => assert_eq!(e.code(), Some(ErrorCode::InvalidMessage)),
            other => panic!("request {i}: {other:?}"),
        }
    }
    // 199 messages of 13 bytes each, at consecutive offsets, the bad one left out.
    assert_eq!(offsets.len(), 199);
    assert!(offsets.iter().enumerate().all(|(i, &o)| o == 13 * i as i64), "{offsets:?}");
    let set = testkit::eventually(Duration::from_secs(5), "all visible", || async {
        let set = conn.fetch("run", 0, 0, 1 << 20).await.unwrap();
        (set.len() == 199 * 13).then_some(set)
    })
    .await;
    let payloads: Vec<Vec<u8>> = messages_of(&set, 0).into_iter().map(|(_, p)| p).collect();
    assert_eq!(payloads[56], b"m056");
    assert_eq!(payloads[57], b"m058");
    let metrics = broker.broker.metrics();
    let appends = metrics.appends.get();
    assert!(appends < 100, "pipelined produces share writes: {appends} appends for 199 sets");
}

#[tokio::test]
async fn a_bad_frame_after_pipelined_produces_is_answered_after_them() {
    let broker = TestBroker::start().await;
    let mut bytes = Vec::new();
    for i in 0..3 {
        let mut frame = BytesMut::new();
        produce("order", message_set(&[format!("m{i}")])).encode(&mut frame).unwrap();
        bytes.extend_from_slice(&frame);
    }
    bytes.extend_from_slice(&frame(&[0, 99]));
    let mut stream = TcpStream::connect(&broker.addr).await.unwrap();
    stream.write_all(&bytes).await.unwrap();
    let mut answers = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answers))
        .await
        .unwrap()
        .unwrap();
    // Four answers in request order: three produce acknowledgements, then the error; then EOF.
    let mut errors = Vec::new();
    let mut rest = &answers[..];
    while rest.len() >= 6 {
        let size = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        errors.push(i16::from_be_bytes([rest[4], rest[5]]));
        rest = &rest[4 + size..];
    }
    assert_eq!(errors, [0, 0, 0, ErrorCode::InvalidRequest.as_i16()]);
}
