//! Any bytes as a partition's leader-epoch checkpoint: opening never panics; what opens has
//! epochs ascending with start offsets non-decreasing, and survives a rewrite and a reopen.

use broker::log::{LEADER_EPOCH_CHECKPOINT, LeaderEpochCache};

/// One input.
pub fn check(data: &[u8]) {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join(LEADER_EPOCH_CHECKPOINT), data).expect("write");
    let Ok(mut cache) = LeaderEpochCache::open(dir.path()) else { return };
    let entries = cache.entries().to_vec();
    assert!(entries.windows(2).all(|w| w[0].epoch < w[1].epoch));
    assert!(entries.windows(2).all(|w| w[0].start_offset <= w[1].start_offset));
    if let Some(last) = cache.latest() {
        let _ = cache.end_offset_for(last.epoch, last.start_offset.saturating_add(1));
        if last.epoch < i32::MAX && cache.assign(last.epoch + 1, last.start_offset).is_ok() {
            let reopened = LeaderEpochCache::open(dir.path()).expect("a file it wrote opens");
            assert_eq!(reopened.entries(), cache.entries());
        }
    }
}
