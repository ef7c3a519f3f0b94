//! Any bytes as a Kafka RecordBatch (what a Kafka producer sends, and a magic-2 message's
//! payload): checking it never panics; a batch that checks reads its records without a panic,
//! each within the inflated records, and keeps its checks when its base offset is rewritten.

use protocol::record_batch::{RecordBatchRef, set_base_offset};

/// One input.
pub fn check(data: &[u8]) {
    let Ok(batch) = RecordBatchRef::parse(data) else { return };
    if let Ok(records) = batch.records(1 << 20) {
        for record in records.iter() {
            let Ok(record) = record else { break };
            assert!(record.span.0 < record.span.1 && record.span.1 <= records.bytes().len());
        }
    }
    let mut renumbered = data.to_vec();
    set_base_offset(&mut renumbered, 12_345);
    let again = RecordBatchRef::parse(&renumbered).expect("the base offset is outside the CRC");
    assert_eq!(again.base_offset(), 12_345);
}
