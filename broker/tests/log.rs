//! The log's behaviour, seen over a real TCP connection to a broker started in the test.

use std::time::{Duration, SystemTime};

use protocol::{Acks, ErrorCode, FetchRequest, OFFSETS_EARLIEST, OFFSETS_LATEST};
use testkit::broker::{TestBroker, message_set, messages_of};
use testkit::eventually;

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn offsets_are_byte_positions() {
    let broker = TestBroker::start().await;
    let conn = broker.connect().await;
    let mut offsets = Vec::new();
    for size in [10, 20, 30] {
        let set = message_set(&[vec![size as u8; size]]);
        let ack = conn.produce("bytes", 0, Acks::Written, set).await.unwrap().unwrap();
        offsets.push(ack.offset);
    }
    assert_eq!(offsets, [0, 19, 48]);
    let fetched = eventually(5 * SECOND, "flushed data", || async {
        let set = conn.fetch("bytes", 0, 0, 1 << 20).await.unwrap();
        (set.len() == 87).then_some(set)
    })
    .await;
    let got = messages_of(&fetched, 0);
    let sizes: Vec<(i64, usize)> = got.iter().map(|(o, p)| (*o, p.len())).collect();
    assert_eq!(sizes, [(0, 10), (19, 20), (48, 30)]);
    assert_eq!(conn.offsets("bytes", 0, OFFSETS_LATEST, 1).await.unwrap(), [87]);
    // Fetching from the middle offset starts at that message.
    let tail = conn.fetch("bytes", 0, 19, 1 << 20).await.unwrap();
    assert_eq!(messages_of(&tail, 19).len(), 2);
}

#[tokio::test]
async fn fetch_ends_in_a_partial_message_that_the_reader_drops() {
    let broker = TestBroker::start_with(|c| c.flush_messages = 1).await;
    let conn = broker.connect().await;
    conn.produce("t", 0, Acks::Flushed, message_set(&[[1u8; 100], [2u8; 100]])).await.unwrap();
    let set = conn.fetch("t", 0, 0, 150).await.unwrap();
    assert_eq!(set.len(), 150, "max_bytes bounds the answer, cutting the second message");
    let mut iter = protocol::MessageSetIter::new(&set, 0);
    assert_eq!(iter.by_ref().count(), 1);
    assert_eq!(iter.next_offset(), 109);
    assert_eq!(iter.remainder().len(), 41);
}

#[tokio::test]
async fn only_flushed_data_is_visible() {
    let broker = TestBroker::start_with(|c| {
        c.flush_messages = 3;
        c.flush_ms = 3_600_000;
    })
    .await;
    let conn = broker.connect().await;
    for p in [b"one", b"two"] {
        conn.produce("f", 0, Acks::Written, message_set(&[p])).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(conn.fetch("f", 0, 0, 1 << 20).await.unwrap().is_empty());
    assert_eq!(conn.offsets("f", 0, OFFSETS_LATEST, 1).await.unwrap(), [0]);
    // The third message crosses flush_messages: all three become visible together.
    conn.produce("f", 0, Acks::Written, message_set(&[b"three"])).await.unwrap();
    let set = eventually(5 * SECOND, "flush after 3 messages", || async {
        let set = conn.fetch("f", 0, 0, 1 << 20).await.unwrap();
        (!set.is_empty()).then_some(set)
    })
    .await;
    assert_eq!(messages_of(&set, 0).len(), 3);
}

#[tokio::test]
async fn flush_ms_bounds_how_long_data_stays_invisible() {
    let broker = TestBroker::start_with(|c| {
        c.flush_messages = 1_000_000;
        c.flush_ms = 200;
    })
    .await;
    let conn = broker.connect().await;
    let produced = std::time::Instant::now();
    conn.produce("f", 0, Acks::Written, message_set(&[b"x"])).await.unwrap();
    assert!(conn.fetch("f", 0, 0, 1 << 20).await.unwrap().is_empty(), "not yet flushed");
    eventually(5 * SECOND, "flush after flush_ms", || async {
        (!conn.fetch("f", 0, 0, 1 << 20).await.unwrap().is_empty()).then_some(())
    })
    .await;
    // The flush starts early by the time fsyncs take, so that the data is on disk flush_ms
    // after it was appended; never more than half of flush_ms early.
    assert!(produced.elapsed() >= std::time::Duration::from_millis(100), "flushed far too soon");
}

#[tokio::test]
async fn acks_zero_one_and_two() {
    let broker = TestBroker::start_with(|c| {
        c.flush_messages = 1_000_000;
        c.flush_ms = 3_600_000;
    })
    .await;
    let conn = broker.connect().await;
    // acks 0: no response; the next request's response is the next thing on the wire.
    assert!(conn.produce("a", 0, Acks::None, message_set(&[b"zero"])).await.unwrap().is_none());
    let meta = conn.metadata(&["a"]).await.unwrap();
    assert_eq!(meta.topics.len(), 1);
    assert_eq!((meta.topics[0].name.as_str(), meta.topics[0].partitions.len()), ("a", 1));
    // acks 1: answered after the append, before any flush.
    let one = conn.produce("a", 0, Acks::Written, message_set(&[b"one"])).await.unwrap().unwrap();
    assert_eq!((one.partition, one.offset), (0, 13));
    assert!(conn.fetch("a", 0, 0, 1 << 20).await.unwrap().is_empty(), "flush_ms is an hour");
    // acks 2: answered once flushed, so everything before it is visible at once.
    let two = conn.produce("a", 0, Acks::Flushed, message_set(&[b"two"])).await.unwrap().unwrap();
    assert_eq!(two.offset, 25);
    let set = conn.fetch("a", 0, 0, 1 << 20).await.unwrap();
    let payloads: Vec<Vec<u8>> = messages_of(&set, 0).into_iter().map(|(_, p)| p).collect();
    assert_eq!(payloads, [b"zero".to_vec(), b"one".to_vec(), b"two".to_vec()]);
}

fn segment_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".log"))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn segments_roll_at_segment_bytes_and_are_named_by_base_offset() {
    let broker = TestBroker::start_with(|c| {
        c.segment_bytes = 100;
        c.flush_messages = 1;
    })
    .await;
    let conn = broker.connect().await;
    // Each set is 3 messages of 21 payload bytes: 90 bytes; two sets do not fit in 100.
    for round in 0..3u8 {
        let set = message_set(&[[round; 21], [round; 21], [round; 21]]);
        let ack = conn.produce("roll", 0, Acks::Flushed, set).await.unwrap().unwrap();
        assert_eq!(ack.offset, 90 * i64::from(round));
    }
    let dir = broker.data_dir().join("roll-0");
    assert_eq!(
        segment_files(&dir),
        ["00000000000000000000.log", "00000000000000000090.log", "00000000000000000180.log"]
    );
    // A fetch stays within one segment; the reader continues at the next offset.
    let mut offset = 0;
    let mut seen = Vec::new();
    while offset < 270 {
        let set = conn.fetch("roll", 0, offset, 1 << 20).await.unwrap();
        assert_eq!(set.len(), 90);
        let messages = messages_of(&set, offset);
        offset = messages.last().map(|(o, p)| o + 9 + p.len() as i64).unwrap();
        seen.extend(messages.into_iter().map(|(_, p)| p[0]));
    }
    assert_eq!(seen, [0, 0, 0, 1, 1, 1, 2, 2, 2]);
    assert!(conn.fetch("roll", 0, 270, 1 << 20).await.unwrap().is_empty());
}

#[tokio::test]
async fn retention_deletes_whole_expired_segments_from_the_head() {
    let broker = TestBroker::start_with(|c| {
        c.segment_bytes = 50;
        c.flush_messages = 1;
        c.retention_ms = 3_600_000;
        c.retention_check_ms = 20;
    })
    .await;
    let conn = broker.connect().await;
    for i in 0..4u8 {
        conn.produce("old", 0, Acks::Flushed, message_set(&[[i; 30]])).await.unwrap();
    }
    let dir = broker.data_dir().join("old-0");
    let files = segment_files(&dir);
    assert_eq!(files.len(), 4);
    // Age the first two segments past retention_ms.
    let two_hours_ago = SystemTime::now() - Duration::from_secs(7200);
    for name in &files[..2] {
        let f = std::fs::File::options().write(true).open(dir.join(name)).unwrap();
        f.set_modified(two_hours_ago).unwrap();
    }
    eventually(5 * SECOND, "retention", || async {
        (segment_files(&dir).len() == 2).then_some(())
    })
    .await;
    assert_eq!(segment_files(&dir), files[2..]);
    assert_eq!(conn.offsets("old", 0, OFFSETS_EARLIEST, 1).await.unwrap(), [78]);
    let err = conn.fetch("old", 0, 0, 1 << 20).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::OffsetOutOfRange));
    let set = conn.fetch("old", 0, 78, 1 << 20).await.unwrap();
    assert_eq!(messages_of(&set, 78)[0].1, [2u8; 30]);
}

#[tokio::test]
async fn retention_by_size_keeps_the_newest_segments() {
    let broker = TestBroker::start_with(|c| {
        c.segment_bytes = 50;
        c.flush_messages = 1;
        c.retention_bytes = Some(100);
        c.retention_check_ms = 20;
    })
    .await;
    let conn = broker.connect().await;
    for i in 0..5u8 {
        conn.produce("big", 0, Acks::Flushed, message_set(&[[i; 30]])).await.unwrap();
    }
    let dir = broker.data_dir().join("big-0");
    // Five 39-byte segments (195 bytes): the three oldest go, leaving 78 bytes <= 100.
    eventually(5 * SECOND, "size retention", || async {
        (segment_files(&dir).len() == 2).then_some(())
    })
    .await;
    assert_eq!(conn.offsets("big", 0, OFFSETS_EARLIEST, 1).await.unwrap(), [117]);
}

#[tokio::test]
async fn recovers_a_torn_tail() {
    let broker = TestBroker::start_with(|c| c.flush_messages = 1).await;
    let conn = broker.connect().await;
    for size in [10, 20, 30] {
        conn.produce("torn", 0, Acks::Flushed, message_set(&[vec![7u8; size]])).await.unwrap();
    }
    drop(conn);
    let data = broker.stop().await;
    // A crash mid-write leaves the last message cut short.
    let segment = data.path().join("torn-0/00000000000000000000.log");
    let f = std::fs::File::options().write(true).open(&segment).unwrap();
    f.set_len(80).unwrap();
    let broker = TestBroker::start_in(data, |c| c.flush_messages = 1).await;
    let conn = broker.connect().await;
    assert_eq!(conn.offsets("torn", 0, OFFSETS_LATEST, 1).await.unwrap(), [48]);
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), 48);
    let ack =
        conn.produce("torn", 0, Acks::Flushed, message_set(&[b"after"])).await.unwrap().unwrap();
    assert_eq!(ack.offset, 48);
    let set = conn.fetch("torn", 0, 0, 1 << 20).await.unwrap();
    let got: Vec<(i64, usize)> = messages_of(&set, 0).iter().map(|(o, p)| (*o, p.len())).collect();
    assert_eq!(got, [(0, 10), (19, 20), (48, 5)]);
}

#[tokio::test]
async fn recovers_a_corrupted_tail() {
    let broker = TestBroker::start_with(|c| c.flush_messages = 1).await;
    let conn = broker.connect().await;
    for size in [10, 20, 30] {
        conn.produce("rot", 0, Acks::Flushed, message_set(&[vec![7u8; size]])).await.unwrap();
    }
    drop(conn);
    let data = broker.stop().await;
    // Flip one payload bit of the second message: it and everything after it are cut.
    let segment = data.path().join("rot-0/00000000000000000000.log");
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[30] ^= 0x10;
    std::fs::write(&segment, &bytes).unwrap();
    let broker = TestBroker::start_in(data, |_| {}).await;
    let conn = broker.connect().await;
    assert_eq!(conn.offsets("rot", 0, OFFSETS_LATEST, 1).await.unwrap(), [19]);
    let set = conn.fetch("rot", 0, 0, 1 << 20).await.unwrap();
    assert_eq!(messages_of(&set, 0).len(), 1);
}

#[tokio::test]
async fn fetch_data_is_sent_with_sendfile() {
    let broker = TestBroker::start_with(|c| c.flush_messages = 1).await;
    let conn = broker.connect().await;
    let payloads: Vec<Vec<u8>> = (0..50).map(|i| vec![i as u8; 1000]).collect();
    conn.produce("sf", 0, Acks::Flushed, message_set(&payloads)).await.unwrap();
    let metrics = broker.broker.metrics();
    let before = metrics.sendfile_bytes.get();
    let set = conn.fetch("sf", 0, 0, 1 << 20).await.unwrap();
    let parts = conn
        .multi_fetch(vec![
            FetchRequest { topic: "sf".into(), partition: 0, offset: 0, max_bytes: 5000 },
            FetchRequest { topic: "sf".into(), partition: 0, offset: 1009, max_bytes: 3000 },
        ])
        .await
        .unwrap();
    let after = metrics.sendfile_bytes.get();
    assert_eq!(set.len(), 50 * 1009);
    assert_eq!(parts.iter().map(|p| p.messages.len()).sum::<usize>(), 8000);
    assert_eq!(after - before, (50 * 1009 + 8000) as u64, "every fetched byte went by sendfile");
    assert!(metrics.sendfile_calls.get() >= 3);
}

#[tokio::test]
async fn offsets_by_time_name_segment_bases_newest_first() {
    let broker = TestBroker::start_with(|c| {
        c.segment_bytes = 50;
        c.flush_messages = 1;
    })
    .await;
    let conn = broker.connect().await;
    for i in 0..3u8 {
        conn.produce("tm", 0, Acks::Flushed, message_set(&[[i; 30]])).await.unwrap();
    }
    let now_ms =
        SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as i64;
    assert_eq!(conn.offsets("tm", 0, now_ms + 60_000, 10).await.unwrap(), [78, 39, 0]);
    assert_eq!(conn.offsets("tm", 0, now_ms + 60_000, 2).await.unwrap(), [78, 39]);
    assert_eq!(conn.offsets("tm", 0, 0, 10).await.unwrap(), Vec::<i64>::new());
    assert_eq!(conn.offsets("tm", 0, OFFSETS_EARLIEST, 1).await.unwrap(), [0]);
    assert_eq!(conn.offsets("tm", 0, OFFSETS_LATEST, 1).await.unwrap(), [117]);
}
