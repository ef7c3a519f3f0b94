//! Any bytes as the schema registry's log file: the recovery scan never panics, and the
//! frames it keeps lie inside the valid prefix it reports.

use schema_registry::store::scan_frames;

/// One input.
pub fn check(data: &[u8]) {
    let scan = scan_frames(data);
    assert!(scan.valid_bytes <= data.len());
    assert_eq!(scan.tail_problem.is_none(), scan.valid_bytes == data.len());
    for (offset, body) in &scan.frames {
        assert!(offset + body.len() <= scan.valid_bytes);
    }
}
