//! Any bytes as a loader's commit record (`_commits/{topic}/{partition}/{start:020}.json`):
//! parsing never panics, and a record it accepts is of the topic, does not end before it
//! begins, names files under the topic's prefix only whose rows add up to its own, is
//! accepted again under its own key, and comes back unchanged once written and read again.

use hdfs_loader::commit::CommitRecord;

const PATH: &str = "_commits/page-view/0/00000000000000000000.json";

/// One input.
pub fn check(data: &[u8]) {
    let Ok(record) = CommitRecord::parse(PATH, "page-view", None, data) else { return };
    assert!(record.end >= record.start);
    assert!(record.files.iter().all(|f| f.path.starts_with("page-view/")));
    assert_eq!(record.files.iter().map(|f| f.rows).sum::<u64>(), record.rows);
    let keyed = CommitRecord::parse(PATH, "page-view", Some(record.start), data);
    assert_eq!(keyed.expect("accepted under its own key"), record);
    assert!(CommitRecord::parse(PATH, "click", None, data).is_err(), "another topic's");
    let written = serde_json::to_vec_pretty(&record).expect("a record serializes");
    let again = CommitRecord::parse(PATH, "page-view", Some(record.start), &written);
    assert_eq!(again.expect("what was written reads back"), record);
}
