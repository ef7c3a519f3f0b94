//! MessageSets: messages back to back, each addressed by the logical byte offset of its length
//! field. A set read from a log or a fetch response may end in a partial message; the iterator
//! stops cleanly there. A set a producer sends must be whole: [`validate_message_set`] checks
//! every message before the broker appends any of it.

use thiserror::Error;

use crate::message::{
    CRC_BYTES, LENGTH_BYTES, LENGTH_MIN, MAGIC_ATTRIBUTES, MAGIC_BATCH, MAGIC_GAP, MAGIC_PLAIN,
};
use crate::record_batch::{InvalidBatch, RecordBatchRef};
use crate::{Codec, MessageRef};

/// Why a message in a set is not valid. `offset` is the message's logical offset.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum InvalidMessage {
    #[error("message at offset {offset}: length {length} is below the minimum of {LENGTH_MIN}")]
    LengthTooSmall { offset: i64, length: u32 },
    #[error(
        "message at offset {offset}: CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
    )]
    CrcMismatch { offset: i64, stored: u32, computed: u32 },
    #[error("message at offset {offset}: unknown magic byte {magic}")]
    UnknownMagic { offset: i64, magic: u8 },
    #[error("message at offset {offset}: magic 1 without an attributes byte")]
    MissingAttributes { offset: i64 },
    #[error("message at offset {offset}: unknown codec in attributes {attributes:#04x}")]
    UnknownCodec { offset: i64, attributes: u8 },
    #[error("message at offset {offset}: {length} bytes exceeds the limit of {limit}")]
    TooLarge { offset: i64, length: u32, limit: u32 },
    #[error("message set ends in a partial message at offset {offset} ({bytes} bytes)")]
    Truncated { offset: i64, bytes: usize },
    #[error("message at offset {offset}: {source}")]
    InvalidBatch { offset: i64, source: InvalidBatch },
    #[error("message at offset {offset}: a gap shorter than its header")]
    ShortGap { offset: i64 },
    #[error("message at offset {offset}: a gap (magic 3), which only the broker's cleaner writes")]
    Gap { offset: i64 },
    #[error("empty message set")]
    Empty,
}

/// Iterates `(offset, message)` over a MessageSet whose first byte sits at `base_offset`.
///
/// Ends (`None`) at the end of the buffer or at a partial message; yields one `Err` and then
/// ends at a message that is complete but invalid, since nothing after it can be trusted.
#[derive(Debug, Clone)]
pub struct MessageSetIter<'a> {
    set: &'a [u8],
    position: usize,
    base_offset: i64,
    failed: bool,
}

impl<'a> MessageSetIter<'a> {
    pub fn new(set: &'a [u8], base_offset: i64) -> MessageSetIter<'a> {
        MessageSetIter { set, position: 0, base_offset, failed: false }
    }

    /// Bytes taken by the whole, valid messages yielded so far.
    pub fn valid_bytes(&self) -> usize {
        self.position
    }

    /// Offset of the next message: where a consumer resumes.
    pub fn next_offset(&self) -> i64 {
        self.base_offset + self.position as i64
    }

    /// The bytes not yet yielded: a partial tail once iteration has ended cleanly.
    pub fn remainder(&self) -> &'a [u8] {
        &self.set[self.position..]
    }

    /// The length field of the message at the current position, if four bytes are there.
    pub fn next_length(&self) -> Option<u32> {
        crate::wire::u32_at(self.remainder(), 0)
    }
}

impl<'a> Iterator for MessageSetIter<'a> {
    type Item = Result<(i64, MessageRef<'a>), InvalidMessage>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let offset = self.next_offset();
        let length = self.next_length()?;
        if length < LENGTH_MIN {
            self.failed = true;
            return Some(Err(InvalidMessage::LengthTooSmall { offset, length }));
        }
        let rest = &self.remainder()[LENGTH_BYTES..];
        let body = rest.get(..length as usize)?;
        match parse_body(offset, body) {
            Ok(message) => {
                self.position += LENGTH_BYTES + body.len();
                Some(Ok((offset, message)))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Parses the bytes after a message's length field.
fn parse_body(offset: i64, body: &[u8]) -> Result<MessageRef<'_>, InvalidMessage> {
    let Some((crc_field, checked)) = body.split_first_chunk::<CRC_BYTES>() else {
        return Err(InvalidMessage::LengthTooSmall { offset, length: body.len() as u32 });
    };
    let stored = u32::from_be_bytes(*crc_field);
    let computed = crc32fast::hash(checked);
    if stored != computed {
        return Err(InvalidMessage::CrcMismatch { offset, stored, computed });
    }
    let (magic, rest) = (checked[0], &checked[1..]);
    match magic {
        MAGIC_PLAIN => Ok(MessageRef { magic, attributes: 0, crc: stored, payload: rest }),
        MAGIC_ATTRIBUTES => {
            let (&attributes, payload) =
                rest.split_first().ok_or(InvalidMessage::MissingAttributes { offset })?;
            if Codec::from_attributes(attributes).is_none() {
                return Err(InvalidMessage::UnknownCodec { offset, attributes });
            }
            Ok(MessageRef { magic, attributes, crc: stored, payload })
        }
        MAGIC_BATCH => {
            let batch = RecordBatchRef::parse(rest)
                .map_err(|source| InvalidMessage::InvalidBatch { offset, source })?;
            let attributes = batch.attributes() as u8;
            Ok(MessageRef { magic, attributes, crc: stored, payload: rest })
        }
        MAGIC_GAP => match rest.split_first() {
            Some((&flags, payload)) if payload.len() >= 4 => {
                Ok(MessageRef { magic, attributes: flags, crc: stored, payload })
            }
            _ => Err(InvalidMessage::ShortGap { offset }),
        },
        magic => Err(InvalidMessage::UnknownMagic { offset, magic }),
    }
}

/// What a valid set holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetSummary {
    /// Messages at the top level (a compressed wrapper counts once).
    pub messages: usize,
}

/// Checks that `set` is one or more whole, valid messages, each with a `length` of at most
/// `length_max` bytes, and nothing else: what a producer may send (no gap). `set` is numbered
/// from offset 0.
pub fn validate_message_set(set: &[u8], length_max: u32) -> Result<SetSummary, InvalidMessage> {
    if set.is_empty() {
        return Err(InvalidMessage::Empty);
    }
    let mut messages = MessageSetIter::new(set, 0);
    let mut count = 0;
    loop {
        if let Some(length) = messages.next_length()
            && length > length_max
        {
            let offset = messages.next_offset();
            return Err(InvalidMessage::TooLarge { offset, length, limit: length_max });
        }
        match messages.next() {
            Some(Ok((offset, message))) if message.magic == MAGIC_GAP => {
                return Err(InvalidMessage::Gap { offset });
            }
            Some(Ok(_)) => count += 1,
            Some(Err(e)) => return Err(e),
            None => break,
        }
    }
    let tail = messages.remainder();
    if !tail.is_empty() {
        let offset = messages.next_offset();
        return Err(InvalidMessage::Truncated { offset, bytes: tail.len() });
    }
    Ok(SetSummary { messages: count })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode_message;

    fn set_of(payloads: &[&[u8]]) -> Vec<u8> {
        let mut buf = Vec::new();
        for p in payloads {
            encode_message(&mut buf, Codec::None, p);
        }
        buf
    }

    #[test]
    fn offsets_are_byte_positions() {
        let set = set_of(&[&[1; 10], &[2; 20], &[3; 30]]);
        let offsets: Vec<i64> = MessageSetIter::new(&set, 0).map(|m| m.expect("valid").0).collect();
        assert_eq!(offsets, [0, 19, 48]);
        assert_eq!(set.len(), 87);
    }

    #[test]
    fn stops_cleanly_at_a_partial_tail() {
        let set = set_of(&[b"hello", b"world"]);
        for cut in 0..set.len() {
            let mut iter = MessageSetIter::new(&set[..cut], 100);
            let items: Vec<_> = iter.by_ref().collect();
            assert!(items.iter().all(Result::is_ok), "whole messages are valid");
            let n = items.len();
            let whole = if cut >= 28 {
                2
            } else if cut >= 14 {
                1
            } else {
                0
            };
            assert_eq!(n, whole, "cut at {cut}");
            assert_eq!(iter.next_offset(), 100 + 14 * whole as i64);
        }
    }

    #[test]
    fn validation_rejects_corruption_anywhere() {
        let set = set_of(&[b"hello", b"world"]);
        assert_eq!(validate_message_set(&set, 1024), Ok(SetSummary { messages: 2 }));
        for i in 0..set.len() {
            let mut bad = set.clone();
            bad[i] ^= 0x40;
            assert!(validate_message_set(&bad, 1024).is_err(), "flip at {i}");
        }
        assert!(matches!(
            validate_message_set(&set[..20], 1024),
            Err(InvalidMessage::Truncated { offset: 14, bytes: 6 })
        ));
        assert_eq!(validate_message_set(&[], 1024), Err(InvalidMessage::Empty));
    }

    #[test]
    fn validation_enforces_the_message_size_limit() {
        let set = set_of(&[&[0; 100]]);
        assert!(validate_message_set(&set, 105).is_ok());
        assert!(matches!(
            validate_message_set(&set, 104),
            Err(InvalidMessage::TooLarge { offset: 0, length: 105, limit: 104 })
        ));
    }

    #[test]
    fn length_below_minimum_is_invalid_not_partial() {
        let bad = [0, 0, 0, 4, 0, 0, 0, 0];
        assert!(matches!(
            MessageSetIter::new(&bad, 0).next(),
            Some(Err(InvalidMessage::LengthTooSmall { offset: 0, length: 4 }))
        ));
    }

    #[test]
    fn a_gap_is_a_message_of_zeros_producers_may_not_send() {
        let mut set = set_of(&[b"before"]);
        set.extend_from_slice(&crate::gap_header(100, 7, crate::GAP_TAIL));
        set.resize(set.len() + 100 - crate::GAP_HEADER_BYTES, 0);
        let messages: Vec<_> = MessageSetIter::new(&set, 0).map(Result::unwrap).collect();
        assert_eq!(messages.len(), 2);
        let (offset, gap) = messages[1];
        assert_eq!((offset, gap.magic, gap.attributes, gap.size_bytes()), (15, 3, 1, 100));
        assert_eq!(crate::records_in(&gap, 0), Ok(7));
        assert_eq!(validate_message_set(&set, 1024), Err(InvalidMessage::Gap { offset: 15 }));
        let mut rotten = set.clone();
        rotten[15 + 50] = 1; // a gap's zeros are checked like any body
        assert!(matches!(
            MessageSetIter::new(&rotten, 0).nth(1),
            Some(Err(InvalidMessage::CrcMismatch { offset: 15, .. }))
        ));
    }

    #[test]
    fn wrapper_messages_carry_their_codec() {
        let mut set = Vec::new();
        encode_message(&mut set, Codec::Zstd, b"inner");
        let (_, m) = MessageSetIter::new(&set, 0).next().expect("one").expect("valid");
        assert_eq!((m.magic, m.codec(), m.payload), (1, Codec::Zstd, &b"inner"[..]));
        assert_eq!(m.size_bytes(), set.len());
        let mut bad = set.clone();
        bad[9] = 7; // codec 7 does not exist; fix the CRC so only the codec is wrong
        let crc = crc32fast::hash(&bad[8..]);
        bad[4..8].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            validate_message_set(&bad, 1024),
            Err(InvalidMessage::UnknownCodec { offset: 0, attributes: 7 })
        ));
    }
}
