//! What the mirror reads of a message it copies: only the `header.time` of each event, for
//! the audit and the record age. A framed message is one event, a compressed wrapper of
//! several (inflated here to count them), or a Kafka RecordBatch (magic 2, from a broker's
//! Kafka listener), whose records are the events; the bytes sent on are never touched.

use client::CompressionError;
use events::envelope::header_time;
use protocol::record_batch::{InvalidBatch, RecordBatchRef};
use protocol::{MAGIC_BATCH, MessageSetIter};

/// Bytes one wrapper or batch may inflate to when counting its events.
const INFLATED_BYTES_MAX: usize = 64 << 20;

/// Why the events of a copied message could not be counted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CountError {
    #[error("a wrapper does not inflate: {0}")]
    Wrapper(#[from] CompressionError),
    #[error("a Kafka batch does not read: {0}")]
    Batch(#[from] InvalidBatch),
}

/// The events of framed messages back to back: the `header.time` of each (ms since the
/// epoch), `None` for a payload that is not an event envelope. A compressed wrapper is
/// inflated, and a Kafka batch read record by record, to reach the events inside.
pub(crate) fn for_each_event(
    framed: &[u8],
    mut event: impl FnMut(Option<i64>),
) -> Result<(), CountError> {
    // The group consumer checked every message before handing it out.
    for (_, message) in MessageSetIter::new(framed, 0).map_while(Result::ok) {
        if message.magic == MAGIC_BATCH {
            let records = RecordBatchRef::parse(message.payload)?.records(INFLATED_BYTES_MAX)?;
            for record in records.iter() {
                event(record?.value.and_then(header_time));
            }
            continue;
        }
        if !message.is_compressed() {
            event(header_time(message.payload));
            continue;
        }
        let inner = client::decompress(message.codec(), message.payload, INFLATED_BYTES_MAX)?;
        for (_, message) in MessageSetIter::new(&inner, 0).map_while(Result::ok) {
            event(header_time(message.payload));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use protocol::Codec;

    use super::*;

    fn envelope(time: i64) -> Vec<u8> {
        let mut payload = vec![0, 0, 0, 0, 7];
        let mut zigzag = ((time << 1) ^ (time >> 63)) as u64;
        loop {
            let byte = (zigzag & 0x7f) as u8;
            zigzag >>= 7;
            if zigzag == 0 {
                payload.push(byte);
                break;
            }
            payload.push(byte | 0x80);
        }
        payload.extend_from_slice(b"\x06web\x06svc");
        payload
    }

    fn times(framed: &[u8]) -> Vec<Option<i64>> {
        let mut seen = Vec::new();
        for_each_event(framed, |t| seen.push(t)).unwrap();
        seen
    }

    #[test]
    fn reads_the_time_of_a_plain_event_and_of_each_event_in_a_wrapper() {
        let mut plain = BytesMut::new();
        protocol::encode_message(&mut plain, Codec::None, &envelope(1_700_000_000_123));
        assert_eq!(times(&plain), [Some(1_700_000_000_123)]);

        let mut inner = BytesMut::new();
        for t in [1, -5, 1 << 40] {
            protocol::encode_message(&mut inner, Codec::None, &envelope(t));
        }
        protocol::encode_message(&mut inner, Codec::None, b"not an event");
        for codec in client::SUPPORTED_CODECS {
            let mut wrapper = plain.clone();
            protocol::encode_message(
                &mut wrapper,
                codec,
                &client::compress(codec, &inner).unwrap(),
            );
            let expected = [Some(1_700_000_000_123), Some(1), Some(-5), Some(1 << 40), None];
            assert_eq!(times(&wrapper), expected, "a plain message, then a wrapper: {codec:?}");
        }
    }

    #[test]
    fn reads_the_time_of_each_record_of_a_kafka_batch() {
        let mut batch = protocol::record_batch::RecordBatchBuilder::new(0);
        batch.push(0, 5, Some(b"k"), Some(&envelope(42)), &[(b"h", Some(b"v"))]);
        batch.push(1, 5, None, Some(b"not an event"), &[]);
        batch.push(2, 5, None, None, &[]);
        let mut framed = BytesMut::new();
        protocol::encode_batch_message(&mut framed, &batch.finish());
        protocol::encode_message(&mut framed, Codec::None, &envelope(7));
        assert_eq!(times(&framed), [Some(42), None, None, Some(7)]);
    }
}
