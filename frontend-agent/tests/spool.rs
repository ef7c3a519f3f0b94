//! The spool on its own: a crash loses no accepted event and replays only what no broker
//! acknowledged; a torn tail is cut off on open.

use std::io::Write;
use std::sync::Arc;

use frontend_agent::SpoolFull;
use frontend_agent::metrics::Metrics;
use frontend_agent::spool::{NewEvent, Spool, SpoolOptions};

fn options(dir: &std::path::Path) -> SpoolOptions {
    SpoolOptions {
        dir: dir.to_owned(),
        max_bytes: 1 << 20,
        segment_bytes: 2_000,
        full: SpoolFull::Block,
        host: "h".into(),
        window_ms: 1_000,
    }
}

fn events(n: usize) -> Vec<NewEvent> {
    (0..n)
        .map(|i| NewEvent { topic: Arc::from("t"), time_ms: 1_500, payload: vec![i as u8; 40] })
        .collect()
}

fn read_all(spool: &Spool) -> Vec<u64> {
    let mut reader = spool.reader();
    let mut seqs = Vec::new();
    loop {
        let mut batch = reader.read_batch(7, 1 << 20).unwrap();
        if batch.is_empty() {
            return seqs;
        }
        spool.retain_undone(&mut batch);
        seqs.extend(batch.iter().map(|r| r.seq));
    }
}

#[tokio::test]
async fn a_crash_replays_only_the_events_no_checkpoint_lists_as_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(options(dir.path()), Arc::new(Metrics::default())).unwrap();
    for _ in 0..10 {
        spool.append(events(10)).await.unwrap();
    }
    assert_eq!(read_all(&spool), (0..100).collect::<Vec<_>>(), "across several segments");
    let acked: Vec<_> = (0..60).filter(|&s| s != 30).map(|s| (s, Arc::from("t"), 1_500)).collect();
    spool.acknowledge(&acked);
    spool.checkpoint().unwrap();
    // Acknowledged after the last checkpoint: lost in the crash, so shipped again.
    spool.acknowledge(&(60..70).map(|s| (s, Arc::from("t"), 1_500)).collect::<Vec<_>>());
    let segment_files = std::fs::read_dir(dir.path().join("segments")).unwrap().count();
    assert_eq!(segment_files, 3, "the wholly acknowledged first of four segments is deleted");
    drop(spool); // no close: as after kill -9

    let spool = Spool::open(options(dir.path()), Arc::new(Metrics::default())).unwrap();
    let mut expected = vec![30];
    expected.extend(60..100);
    assert_eq!(read_all(&spool), expected);
    assert_eq!(spool.unacknowledged(), 41);
    assert_eq!(spool.audit_count("t", 1_000), 59, "audit counts resume from the checkpoint");
    assert_eq!(spool.accepted_count("t", 1_000), 100);
    assert_eq!(spool.append(events(1)).await.unwrap(), 100, "seqs continue");
    spool.close().unwrap();
}

/// The `accepted` tier counts an event once, when it is durable, across crashes: what the
/// last checkpoint counted, plus what the segments hold beyond it.
#[tokio::test]
async fn accepted_counts_survive_a_crash_without_a_checkpoint_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = Arc::new(Metrics::default());
    let spool = Spool::open(options(dir.path()), Arc::clone(&metrics)).unwrap();
    spool.append(events(10)).await.unwrap();
    spool.checkpoint().unwrap();
    let before = service::now_ms() / 1_000;
    spool.append(events(20)).await.unwrap();
    assert_eq!(spool.accepted_count("t", 1_000), 30);
    assert_eq!(spool.audit_count("t", 1_000), 0, "none acknowledged");
    // What the agent tells Prometheus: 30 wait, the oldest since the first append.
    assert_eq!(metrics.unacknowledged.get(), 30);
    let oldest = metrics.oldest_unacknowledged_timestamp.get();
    assert!(oldest > 0 && oldest <= before, "{oldest} {before}");
    spool.acknowledge(&(0..30).map(|s| (s, Arc::from("t"), 1_500)).collect::<Vec<_>>());
    assert_eq!(metrics.unacknowledged.get(), 0);
    assert_eq!(metrics.oldest_unacknowledged_timestamp.get(), 0, "none waits");
    spool.append(events(5)).await.unwrap();
    drop(spool); // no close, no checkpoint since the first 10: as after kill -9

    let spool = Spool::open(options(dir.path()), Arc::new(Metrics::default())).unwrap();
    assert_eq!(
        spool.accepted_count("t", 1_000),
        35,
        "10 checkpointed, 25 counted from the segments"
    );
    assert_eq!(spool.audit_count("t", 1_000), 0, "the acknowledgements were not checkpointed");
    let published = spool.take_audit_changes();
    let tiers: Vec<_> = published.iter().map(|r| (r.tier.as_str(), r.count)).collect();
    assert_eq!(tiers, [("accepted", 35)]);
    spool.close().unwrap();

    let spool = Spool::open(options(dir.path()), Arc::new(Metrics::default())).unwrap();
    assert_eq!(spool.accepted_count("t", 1_000), 35, "closed: counted once, not again");
    spool.close().unwrap();
}

#[tokio::test]
async fn a_torn_record_at_the_tail_is_cut_off_and_the_rest_kept() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(options(dir.path()), Arc::new(Metrics::default())).unwrap();
    spool.append(events(5)).await.unwrap();
    drop(spool);
    let segments = dir.path().join("segments");
    let mut files: Vec<_> =
        std::fs::read_dir(&segments).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let last_with_data =
        files.iter().rev().find(|f| std::fs::metadata(f).unwrap().len() > 0).unwrap();
    let mut file = std::fs::OpenOptions::new().append(true).open(last_with_data).unwrap();
    file.write_all(&[0, 0, 0, 90, 1, 2, 3]).unwrap(); // a record header cut short

    let spool = Spool::open(options(dir.path()), Arc::new(Metrics::default())).unwrap();
    assert_eq!(read_all(&spool), (0..5).collect::<Vec<_>>());
    assert_eq!(spool.append(events(2)).await.unwrap(), 5);
    assert_eq!(read_all(&spool), (0..7).collect::<Vec<_>>());
    spool.close().unwrap();
}

#[tokio::test]
async fn a_full_spool_refuses_under_block_and_drops_the_oldest_under_drop_oldest() {
    let dir = tempfile::tempdir().unwrap();
    let small = SpoolOptions { max_bytes: 8_000, segment_bytes: 1_000, ..options(dir.path()) };
    let spool = Spool::open(small.clone(), Arc::new(Metrics::default())).unwrap();
    let mut accepted = 0;
    while spool.append(events(10)).await.is_ok() {
        accepted += 10;
    }
    assert!(accepted > 50, "{accepted}");
    assert_eq!(read_all(&spool).len(), accepted, "nothing accepted was dropped");
    spool.close().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let metrics = Arc::new(Metrics::default());
    let dropping =
        SpoolOptions { full: SpoolFull::DropOldest, dir: dir.path().to_owned(), ..small };
    let spool = Spool::open(dropping, Arc::clone(&metrics)).unwrap();
    for _ in 0..50 {
        spool.append(events(10)).await.unwrap();
    }
    let dropped = metrics.dropped.get();
    let kept = read_all(&spool);
    assert!(dropped > 0);
    assert_eq!(kept.len() as u64 + dropped, 500, "every event is kept or counted as dropped");
    assert_eq!(kept.last(), Some(&499), "the newest are kept");
    assert_eq!(spool.unacknowledged(), kept.len() as u64);
    spool.close().unwrap();
}
