//! Any bytes as a segment file, as recovery after a crash reads it: the scan never panics,
//! and the valid prefix it finds is within the file and scans again to itself, whole.

use broker::log::scan_valid_prefix;

/// One input.
pub fn check(data: &[u8]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("00000000000000000000.log");
    std::fs::write(&path, data).expect("write");
    let file = std::fs::File::open(&path).expect("open");
    let scan = scan_valid_prefix(&file, data.len() as u64).expect("a readable file scans");
    assert!(scan.valid_bytes <= data.len() as u64);
    let valid = scan.valid_bytes as usize;
    std::fs::write(&path, &data[..valid]).expect("truncate");
    let file = std::fs::File::open(&path).expect("open");
    let again = scan_valid_prefix(&file, valid as u64).expect("scan");
    assert_eq!((again.valid_bytes, again.messages), (scan.valid_bytes, scan.messages));
    assert!(again.stopped_because.is_none(), "{:?}", again.stopped_because);
}
