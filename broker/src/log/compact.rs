//! What a compacted topic takes (`docs/design.md`, "Compacted topics"): records with a key.
//! The cleaner that compacts them is `partition/clean.rs`.

use protocol::record_batch::RecordBatchRef;
use protocol::{MAGIC_BATCH, MessageSetIter};

use crate::log::index::INFLATED_BYTES_MAX;

/// Where `set` (whole, valid messages) has a record a compacted topic refuses: for each such
/// record, the index of its batch in the set and its own index in the batch (Kafka's
/// `batch_index`, KIP-467). A message in Tributary's own format (no key) counts as one such
/// record at index 0, a batch that does not inflate as its every record. Control batches,
/// which hold no data, are taken.
pub fn keyless(set: &[u8]) -> Vec<(usize, i32)> {
    let mut refused = Vec::new();
    for (i, message) in MessageSetIter::new(set, 0).enumerate() {
        let Ok((_, message)) = message else {
            refused.push((i, 0));
            break;
        };
        if message.magic != MAGIC_BATCH {
            refused.push((i, 0));
            continue;
        }
        let Ok(batch) = RecordBatchRef::parse(message.payload) else {
            refused.push((i, 0));
            continue;
        };
        if batch.is_control() {
            continue;
        }
        let Ok(records) = batch.records(INFLATED_BYTES_MAX) else {
            refused.extend((0..batch.record_count()).map(|r| (i, r)));
            continue;
        };
        for (r, record) in records.iter().enumerate() {
            match record {
                Ok(record) if record.key.is_some() => {}
                _ => refused.push((i, r as i32)),
            }
        }
    }
    refused
}

#[cfg(test)]
mod tests {
    use protocol::record_batch::RecordBatchBuilder;
    use protocol::{Codec, encode_batch_message, encode_message};

    use super::*;

    #[test]
    fn records_without_a_key_are_named_by_batch_and_index() {
        let mut set = Vec::new();
        let mut keyed = RecordBatchBuilder::new(0);
        keyed.push(0, 1, Some(b"k"), Some(b"v"), &[]);
        keyed.push(1, 1, Some(b"k"), None, &[]);
        encode_batch_message(&mut set, &keyed.finish());
        assert!(keyless(&set).is_empty());
        let mut mixed = RecordBatchBuilder::new(2);
        mixed.push(2, 1, Some(b"k"), Some(b"v"), &[]);
        mixed.push(3, 1, None, Some(b"v"), &[]);
        encode_batch_message(&mut set, &mixed.finish_compressed(Codec::Zstd).unwrap());
        encode_message(&mut set, Codec::None, b"plain");
        assert_eq!(keyless(&set), [(1, 1), (2, 0)]);
    }
}
