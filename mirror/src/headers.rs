//! What the mirror reads of a message it copies: only the `header.time` of each event, for
//! the audit and the record age. A framed message is either one event or a compressed
//! wrapper of several, inflated here to count them; the bytes sent on are never touched.

use client::CompressionError;
use events::envelope::header_time;
use protocol::MessageSetIter;

/// Bytes one wrapper may inflate to when counting its events.
const INFLATED_BYTES_MAX: usize = 64 << 20;

/// The events of framed messages back to back: the `header.time` of each (ms since the
/// epoch), `None` for a payload that is not an event envelope. A compressed wrapper is
/// inflated to reach the events inside.
pub(crate) fn for_each_event(
    framed: &[u8],
    mut event: impl FnMut(Option<i64>),
) -> Result<(), CompressionError> {
    // The group consumer checked every message before handing it out.
    for (_, message) in MessageSetIter::new(framed, 0).map_while(Result::ok) {
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
}
