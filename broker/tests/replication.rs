//! Followers, seen over real TCP between two brokers started in the test: a follower copies
//! its leader's bytes verbatim (the same segment files, the same epochs), and after a leader
//! change it cuts its log by the leader-epoch rule (KIP-101, KIP-279), never keeping what the
//! new leader does not have. Leadership is set by hand here, as a controller will set it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use broker::log::{LEADER_EPOCH_CHECKPOINT, Partition};
use broker::{FollowerError, Following, Leadership};
use protocol::{
    Acks, ErrorCode, OffsetForLeaderEpochRequest, ReplicaFetchPartition, ReplicaFetchRequest,
    Request, Response,
};
use testkit::broker::{TestBroker, message_set, messages_of};
use testkit::eventually;

const TOPIC: &str = "r";
const WAIT: Duration = Duration::from_secs(10);

fn partition(broker: &TestBroker) -> Arc<Partition> {
    Arc::clone(&broker.broker.logs().topic(TOPIC).expect("topic").partitions[&0])
}

/// A broker with the topic's one partition, which it leads in epoch 0.
async fn broker_with_topic(segment_bytes: u64) -> TestBroker {
    broker_with(|c| c.segment_bytes = segment_bytes).await
}

async fn broker_with(configure: impl FnOnce(&mut broker::BrokerConfig)) -> TestBroker {
    let broker = TestBroker::start_with(|c| {
        c.flush_ms = 5;
        configure(c);
    })
    .await;
    broker.connect().await.create_topic(TOPIC, 1, &[]).await.expect("create topic");
    broker
}

/// Produces `sets` sets of three 100-byte messages, each starting with `tag`.
async fn produce(broker: &TestBroker, tag: u8, sets: u8) {
    let conn = broker.connect().await;
    for i in 0..sets {
        let payload = |k: u8| {
            let mut p = [tag; 100];
            (p[1], p[2]) = (i, k);
            p
        };
        let set = message_set(&[payload(0), payload(1), payload(2)]);
        conn.produce(TOPIC, 0, Acks::Written, set).await.expect("produce").expect("ack");
    }
}

async fn caught_up(leader: &TestBroker, follower: &TestBroker) {
    let (leader, follower) = (partition(leader), partition(follower));
    eventually(WAIT, "the follower reaches the leader's end", || async {
        (follower.end() == leader.end()).then_some(())
    })
    .await;
}

/// Every file of both partition directories, by name: they must be the same files.
fn assert_same_files(a: &Path, b: &Path) {
    let listing = |dir: &Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|name| !name.ends_with(".tmp"))
            .collect();
        names.sort();
        names
    };
    let names = listing(a);
    assert_eq!(names, listing(b), "the same segment files");
    assert!(names.iter().any(|n| n == LEADER_EPOCH_CHECKPOINT), "{names:?}");
    for name in names {
        let (x, y) = (std::fs::read(a.join(&name)).unwrap(), std::fs::read(b.join(&name)).unwrap());
        assert!(x == y, "{name} differs: {} vs {} bytes", x.len(), y.len());
    }
}

async fn follow(follower: &TestBroker, leader: &TestBroker, epoch: i32) -> Following {
    follower.broker.replicas().follow(TOPIC, 0, leader.addr.clone(), epoch).expect("follow")
}

fn start_epoch(broker: &TestBroker, epoch: i32) {
    partition(broker).start_leader_epoch(epoch).expect("leader epoch");
}

/// Every message of the partition, read back through the broker as a consumer reads it.
async fn messages(broker: &TestBroker) -> Vec<(i64, Vec<u8>)> {
    messages_from(broker, 0).await
}

/// Every message of the partition from `offset` on.
async fn messages_from(broker: &TestBroker, mut offset: i64) -> Vec<(i64, Vec<u8>)> {
    let p = partition(broker);
    eventually(WAIT, "all flushed", || async { (p.visible_end() == p.end()).then_some(()) }).await;
    let conn = broker.connect().await;
    let mut all = Vec::new();
    // A fetch stops at the end of a segment.
    while offset < p.end() as i64 {
        let set = conn.fetch(TOPIC, 0, offset, 64 << 20).await.unwrap();
        let got = messages_of(&set, offset);
        offset = got.last().map(|(o, m)| o + 9 + m.len() as i64).expect("a message");
        all.extend(got);
    }
    all
}

#[tokio::test]
async fn a_follower_copies_the_leaders_segment_files_byte_for_byte() {
    // The leader rolls every few sets; the follower, by its own settings, never would.
    let leader = broker_with_topic(2_000).await;
    let follower = broker_with_topic(1 << 30).await;
    produce(&leader, 1, 30).await;
    let following = follow(&follower, &leader, 0).await;
    caught_up(&leader, &follower).await;
    produce(&leader, 2, 30).await;
    caught_up(&leader, &follower).await;
    assert!(partition(&leader).segment_bases().len() > 5, "the leader rolled");
    assert_eq!(partition(&follower).segment_bases(), partition(&leader).segment_bases());
    following.stop().await.expect("stopped cleanly");
    assert_same_files(partition(&leader).dir(), partition(&follower).dir());
    assert_eq!(messages(&follower).await, messages(&leader).await);
}

#[tokio::test]
async fn a_follower_of_a_new_leader_cuts_what_the_old_leader_alone_had() {
    let a = broker_with_topic(4_000).await;
    let b = broker_with_topic(4_000).await;
    produce(&a, 1, 10).await;
    let following = follow(&b, &a, 0).await;
    caught_up(&a, &b).await;
    following.stop().await.unwrap();
    let replicated = partition(&a).end();
    // Acknowledged by `a` alone (acks 1), then `a` goes and `b` leads in epoch 1.
    produce(&a, 2, 2).await;
    start_epoch(&b, 1);
    produce(&b, 3, 3).await;
    // `a` comes back as a follower of `b`: what only it had is gone, `b`'s log is its log.
    let following = follow(&a, &b, 1).await;
    caught_up(&b, &a).await;
    following.stop().await.unwrap();
    assert_same_files(partition(&a).dir(), partition(&b).dir());
    let got = messages(&a).await;
    assert!(got.iter().all(|(_, payload)| payload[0] != 2), "the unreplicated sets are cut");
    assert_eq!(got.iter().filter(|(offset, _)| *offset >= replicated as i64).count(), 9);
    assert_eq!(partition(&a).end_offset_for(0), Some((0, replicated)));
}

#[tokio::test]
async fn two_leader_changes_in_quick_succession_leave_no_divergent_replica() {
    // KIP-279: `b` led in epoch 1 and wrote something nobody copied; `a` led again in epoch 2
    // without ever hearing of epoch 1. `b` must cut its epoch-1 write and take `a`'s log.
    let a = broker_with_topic(4_000).await;
    let b = broker_with_topic(4_000).await;
    produce(&a, 1, 5).await;
    let following = follow(&b, &a, 0).await;
    caught_up(&a, &b).await;
    following.stop().await.unwrap();
    produce(&a, 2, 1).await; // epoch 0, on `a` only
    start_epoch(&b, 1);
    produce(&b, 3, 1).await; // epoch 1, on `b` only
    start_epoch(&a, 2);
    produce(&a, 4, 2).await; // epoch 2
    let following = follow(&b, &a, 2).await;
    caught_up(&a, &b).await;
    following.stop().await.unwrap();
    assert_same_files(partition(&a).dir(), partition(&b).dir());
    let got = messages(&b).await;
    assert!(got.iter().all(|(_, payload)| payload[0] != 3), "b's epoch-1 write is cut");
    assert_eq!(got, messages(&a).await);
    assert_eq!(partition(&b).leader_epoch(), Some(2));
}

#[tokio::test]
async fn a_follower_whose_log_the_leaders_retention_passed_starts_again_at_the_leaders_start() {
    // Segments of about three sets; the leader keeps about two segments.
    let leader = broker_with(|c| {
        c.segment_bytes = 1_000;
        c.retention_bytes = Some(2_000);
    })
    .await;
    let follower = broker_with_topic(1 << 20).await;
    produce(&leader, 1, 4).await;
    let following = follow(&follower, &leader, 0).await;
    caught_up(&leader, &follower).await;
    following.stop().await.unwrap();
    // While the follower is away the leader writes on, and retention deletes what the
    // follower has.
    produce(&leader, 2, 12).await;
    let p = partition(&leader);
    eventually(WAIT, "flushed", || async { (p.flushed_end() == p.end()).then_some(()) }).await;
    p.enforce_retention(std::time::SystemTime::now()).unwrap();
    assert!(p.start_offset() > partition(&follower).end(), "retention passed the follower");

    let following = follow(&follower, &leader, 0).await;
    caught_up(&leader, &follower).await;
    following.stop().await.unwrap();
    let copy = partition(&follower);
    assert_eq!(copy.start_offset(), p.start_offset());
    assert_eq!(copy.segment_bases(), p.segment_bases());
    assert_eq!(
        messages_from(&follower, copy.start_offset() as i64).await,
        messages_from(&leader, p.start_offset() as i64).await
    );
}

#[tokio::test]
async fn a_follower_of_an_older_epoch_is_refused_and_one_of_a_newer_epoch_waits_for_it() {
    let leader = broker_with_topic(1 << 20).await;
    let follower = broker_with_topic(1 << 20).await;
    start_epoch(&leader, 3);
    let following = follow(&follower, &leader, 2).await;
    eventually(WAIT, "the follower gives up", || async { following.is_finished().then_some(()) })
        .await;
    match following.stop().await {
        Err(FollowerError::Refused { error, .. }) => {
            assert_eq!(error, ErrorCode::FencedLeaderEpoch)
        }
        other => panic!("epoch 2: {other:?}"),
    }
    // Epoch 4: the follower heard of an election its leader has not taken up yet. It asks
    // again until the leader leads that epoch, then copies.
    let following = follow(&follower, &leader, 4).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!following.is_finished(), "a follower of a newer epoch keeps asking");
    start_epoch(&leader, 4);
    produce(&leader, 1, 3).await;
    caught_up(&leader, &follower).await;
    following.stop().await.unwrap();
    assert_eq!(messages(&follower).await, messages(&leader).await);
}

#[tokio::test]
async fn replica_requests_with_bad_fields_get_typed_errors() {
    let leader = broker_with_topic(1 << 20).await;
    produce(&leader, 1, 2).await;
    let conn = leader.connect().await;
    let fetch = |leader_epoch, offset, max_bytes| ReplicaFetchPartition {
        topic: TOPIC.into(),
        partition: 0,
        leader_epoch,
        offset,
        max_bytes,
    };
    let request = |max_wait_ms, min_bytes, fetches| {
        Request::ReplicaFetch(ReplicaFetchRequest {
            replica_id: 9,
            max_wait_ms,
            min_bytes,
            fetches,
        })
    };
    let err = conn.send(request(-1, 0, vec![fetch(0, 0, 100)])).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidRequest));
    let err = conn.send(request(0, -1, vec![fetch(0, 0, 100)])).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidFetchSize));
    let parts = vec![
        fetch(0, 0, 0),
        fetch(0, 1 << 40, 100),
        fetch(0, 0, 1 << 20),
        ReplicaFetchPartition { topic: "nope".into(), ..fetch(0, 0, 100) },
    ];
    let Some(Response::ReplicaFetch(answer)) = conn.send(request(0, 0, parts)).await.unwrap()
    else {
        panic!("a replica fetch answer");
    };
    let errors: Vec<ErrorCode> = answer.parts.iter().map(|p| p.error).collect();
    assert_eq!(
        errors,
        [
            ErrorCode::InvalidFetchSize,
            ErrorCode::OffsetOutOfRange,
            ErrorCode::None,
            ErrorCode::UnknownTopic
        ]
    );
    let good = &answer.parts[2];
    assert_eq!((good.data_epoch, good.segment_base), (0, 0));
    assert_eq!(good.messages.len() as u64, partition(&leader).end(), "up to the written end");
    let ask = |topic: &str, epoch| {
        Request::OffsetForLeaderEpoch(OffsetForLeaderEpochRequest {
            topic: topic.into(),
            partition: 0,
            epoch,
        })
    };
    let Some(Response::OffsetForLeaderEpoch(end)) = conn.send(ask(TOPIC, 7)).await.unwrap() else {
        panic!("an offset-for-epoch answer");
    };
    assert_eq!((end.epoch, end.end_offset), (0, partition(&leader).end() as i64));
    let err = conn.send(ask("nope", 0)).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::UnknownTopic));
}

/// Leader `a` (id 1) in epoch 1 with follower `b` (id 2), both in the ISR.
async fn replicated_pair(
    min_insync_replicas: usize,
    configure: impl Fn(&mut broker::BrokerConfig) + Copy,
) -> (TestBroker, TestBroker) {
    let a = broker_with(|c| {
        c.broker_id = 1;
        configure(c);
    })
    .await;
    let b = broker_with(|c| {
        c.broker_id = 2;
        configure(c);
    })
    .await;
    let leadership =
        Leadership { epoch: 1, replicas: vec![1, 2], isr: vec![1, 2], min_insync_replicas };
    a.broker.replicas().lead(TOPIC, 0, leadership).await.expect("lead");
    (a, b)
}

async fn produce_all(broker: &TestBroker, tag: u8) -> Result<i64, ErrorCode> {
    let conn = broker.connect().await;
    let set = message_set(&[[tag; 50]]);
    match conn.produce(TOPIC, 0, Acks::All, set).await {
        Ok(ack) => Ok(ack.expect("an answer").offset),
        Err(e) => Err(e.code().expect("a broker error")),
    }
}

#[tokio::test]
async fn acks_all_waits_for_the_isr_and_consumers_see_only_the_high_watermark() {
    let (a, b) = replicated_pair(2, |c| c.replica_lag_ms = 300).await;
    let following = follow(&b, &a, 1).await;
    let offset = produce_all(&a, 1).await.expect("acks all with both in sync");
    assert!(partition(&b).end() > offset as u64, "the follower had it before the answer");
    assert_eq!(a.broker.replicas().isr(TOPIC, 0), Some(vec![1, 2]));
    following.stop().await.unwrap();

    // Appended on the leader alone: consumers do not see it while `b` is in the ISR.
    let before = partition(&a).end();
    eventually(WAIT, "the replicated data visible", || async {
        (partition(&a).visible_end() == before).then_some(())
    })
    .await;
    a.connect().await.produce(TOPIC, 0, Acks::Written, message_set(&[[2u8; 50]])).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(partition(&a).visible_end(), before, "capped at the high watermark");
    // `b` lags past replica_lag_ms: it leaves the ISR, and the leader alone moves the HW.
    eventually(WAIT, "the ISR shrinks", || async {
        (a.broker.replicas().isr(TOPIC, 0) == Some(vec![1])).then_some(())
    })
    .await;
    eventually(WAIT, "visible up to the end", || async {
        (partition(&a).visible_end() == partition(&a).end()).then_some(())
    })
    .await;
    assert_eq!(produce_all(&a, 3).await, Err(ErrorCode::NotEnoughReplicas));

    // `b` catches up and rejoins.
    let following = follow(&b, &a, 1).await;
    eventually(WAIT, "the ISR expands", || async {
        (a.broker.replicas().isr(TOPIC, 0) == Some(vec![1, 2])).then_some(())
    })
    .await;
    produce_all(&a, 4).await.expect("acks all again");
    let metrics = a.broker.metrics();
    assert_eq!((metrics.isr_shrinks.get(), metrics.isr_expands.get()), (1, 1));
    assert_eq!(metrics.under_replicated.get(), 0);
    caught_up(&a, &b).await;
    following.stop().await.unwrap();
    assert_same_files(partition(&a).dir(), partition(&b).dir());
}

#[tokio::test]
async fn acks_all_times_out_when_an_in_sync_follower_does_not_fetch() {
    let (a, _b) = replicated_pair(1, |c| {
        c.replica_lag_ms = 60_000;
        c.ack_timeout_ms = 300;
    })
    .await;
    assert_eq!(produce_all(&a, 1).await, Err(ErrorCode::RequestTimedOut));
    assert_eq!(a.broker.metrics().under_replicated.get(), 0, "both in sync, if silent");
    a.broker.replicas().resign(TOPIC, 0);
    assert_eq!(a.broker.replicas().isr(TOPIC, 0), None);
}

/// A produce waiting for the in-sync replicas does not hold up the produces pipelined behind
/// it on its connection: those are appended meanwhile, and every answer comes back in request
/// order, other requests' included.
#[tokio::test]
async fn a_produce_waiting_for_replicas_does_not_hold_up_the_pipeline() {
    let (a, _b) = replicated_pair(1, |c| {
        c.replica_lag_ms = 60_000;
        c.ack_timeout_ms = 500;
    })
    .await;
    let conn = a.connect().await;
    let produce = |acks, tag: u8| {
        Request::Produce(protocol::ProduceRequest {
            topic: TOPIC.into(),
            partition: 0,
            acks,
            messages: message_set(&[[tag; 50]]),
        })
    };
    let started = std::time::Instant::now();
    let waiting = conn.enqueue(produce(Acks::All, 1)).await.unwrap().unwrap();
    let written = conn.enqueue(produce(Acks::Written, 2)).await.unwrap().unwrap();
    let metadata = Request::Metadata(protocol::MetadataRequest { topics: vec![] });
    let metadata = conn.enqueue(metadata).await.unwrap().unwrap();
    let p = partition(&a);
    eventually(WAIT, "the second produce appended", || async {
        (p.end() >= 2 * (9 + 50)).then_some(())
    })
    .await;
    assert!(started.elapsed() < Duration::from_millis(500), "while the first still waits");
    let err = waiting.wait().await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::RequestTimedOut), "no follower fetched: {err}");
    match written.wait().await.unwrap() {
        Response::Produce(ack) => assert_eq!(ack.offset, 9 + 50),
        other => panic!("a produce answer, not {other:?}"),
    }
    assert!(matches!(metadata.wait().await.unwrap(), Response::Metadata(_)));
}

/// A follower notes its leader's idempotent batches as it copies them: once it leads, a batch
/// sent again is acknowledged where the old leader appended it, however much was written after
/// it (here more than the 8 MiB a broker reads back for what precedes its start).
#[tokio::test]
async fn a_new_leader_knows_the_idempotent_batches_it_copied_as_a_follower() {
    let a = broker_with_topic(1 << 20).await;
    let b = broker_with_topic(1 << 20).await;
    let following = follow(&b, &a, 0).await;
    let conn = a.connect().await;
    let producer = conn.init_producer_id().await.unwrap().producer_id;
    let mut builder =
        protocol::record_batch::RecordBatchBuilder::new(0).with_producer(producer, 0, 0);
    builder.push(0, 1_000, None, Some(b"once"), &[]);
    let mut batch = bytes::BytesMut::new();
    protocol::encode_batch_message(&mut batch, &builder.finish());
    let batch = batch.freeze();
    let ack = conn.produce_idempotent(TOPIC, 0, Acks::Written, batch.clone()).await.unwrap();
    let first_at = ack.expect("answered").offset;
    let filler = message_set(&[vec![7u8; 100_000]]);
    for _ in 0..100 {
        conn.produce(TOPIC, 0, Acks::Written, filler.clone()).await.unwrap();
    }
    caught_up(&a, &b).await;
    following.stop().await.unwrap();

    start_epoch(&b, 1);
    let again = b.connect().await.produce_idempotent(TOPIC, 0, Acks::Written, batch).await;
    assert_eq!(again.unwrap().expect("answered").offset, first_at, "a duplicate, not appended");
    let once = messages(&b).await.iter().filter(|(_, payload)| payload.len() < 100).count();
    assert_eq!(once, 1, "the batch is in the log once");
}
