//! How many records a message holds, as Kafka numbers them
//! (`docs/design.md`, "Record numbers"): a plain message is one, a magic-1 wrapper one per
//! inner message, a magic-2 message its batch's last offset delta + 1, a gap the records it
//! replaced. A wrapper's inner
//! messages are counted by their length fields as the wrapper inflates, without holding the
//! inflated set.

use std::io::{self, Read};

use thiserror::Error;

use crate::compression::{self, CompressionError};
use crate::message::{
    LENGTH_BYTES, LENGTH_MIN, MAGIC_ATTRIBUTES, MAGIC_BATCH, MAGIC_GAP, MAGIC_PLAIN,
};
use crate::record_batch::RecordBatchRef;
use crate::{Codec, MessageRef};

/// Why a message's records cannot be counted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RecordCountError {
    #[error("the wrapper does not inflate: {0}")]
    Inflate(String),
    #[error("the wrapper inflates past {limit_bytes} bytes")]
    TooLarge { limit_bytes: usize },
    #[error("the wrapper's inner messages are not whole: {0}")]
    Inner(&'static str),
    #[error("{0}")]
    Batch(String),
    #[error("unknown magic byte {0}")]
    Magic(u8),
}

/// Records in `message`, inflating a wrapper to at most `inflated_bytes_max` bytes.
pub fn records_in(
    message: &MessageRef,
    inflated_bytes_max: usize,
) -> Result<u64, RecordCountError> {
    match message.magic {
        MAGIC_PLAIN => Ok(1),
        MAGIC_ATTRIBUTES => match message.codec() {
            Codec::None => Ok(1),
            codec => count_inner(codec, message.payload, inflated_bytes_max),
        },
        MAGIC_BATCH => RecordBatchRef::parse(message.payload)
            .map(|batch| batch.offset_count())
            .map_err(|e| RecordCountError::Batch(e.to_string())),
        // The records the cleaner removed where the gap is: they keep their numbers.
        MAGIC_GAP => Ok(crate::wire::u32_at(message.payload, 0).map_or(0, u64::from)),
        magic => Err(RecordCountError::Magic(magic)),
    }
}

fn count_inner(codec: Codec, payload: &[u8], limit_bytes: usize) -> Result<u64, RecordCountError> {
    let inflate = |e: io::Error| RecordCountError::Inflate(e.to_string());
    match codec {
        Codec::Gzip => count_stream(flate2::read::GzDecoder::new(payload), limit_bytes),
        Codec::Lz4 => count_stream(lz4_flex::frame::FrameDecoder::new(payload), limit_bytes),
        Codec::Zstd => {
            count_stream(zstd::stream::read::Decoder::new(payload).map_err(inflate)?, limit_bytes)
        }
        Codec::Snappy => {
            let set =
                compression::decompress(codec, payload, limit_bytes).map_err(|e| match e {
                    CompressionError::TooLarge { limit_bytes, .. } => {
                        RecordCountError::TooLarge { limit_bytes }
                    }
                    e => RecordCountError::Inflate(e.to_string()),
                })?;
            count_stream(&set[..], limit_bytes)
        }
        Codec::None => Ok(1),
    }
}

/// Counts the messages of an inner MessageSet read from `input`, by their length fields.
fn count_stream(input: impl Read, limit_bytes: usize) -> Result<u64, RecordCountError> {
    let cap = u64::try_from(limit_bytes).unwrap_or(u64::MAX).saturating_add(1);
    let mut input = input.take(cap);
    let mut count = 0u64;
    loop {
        let mut length = [0u8; LENGTH_BYTES];
        let read = read_full(&mut input, &mut length)?;
        if read == 0 {
            break;
        }
        if read < LENGTH_BYTES {
            return Err(past_limit(&input, limit_bytes)
                .unwrap_or(RecordCountError::Inner("a length field cut short")));
        }
        let length = u32::from_be_bytes(length);
        if length < LENGTH_MIN {
            return Err(RecordCountError::Inner("a length below the minimum"));
        }
        let skipped = io::copy(&mut (&mut input).take(u64::from(length)), &mut io::sink())
            .map_err(|e| RecordCountError::Inflate(e.to_string()))?;
        if skipped < u64::from(length) {
            return Err(past_limit(&input, limit_bytes)
                .unwrap_or(RecordCountError::Inner("a message cut short")));
        }
        count += 1;
    }
    match past_limit(&input, limit_bytes) {
        Some(e) => Err(e),
        None => Ok(count),
    }
}

/// `TooLarge` once the input has given more than `limit_bytes`.
fn past_limit<R>(input: &io::Take<R>, limit_bytes: usize) -> Option<RecordCountError> {
    (input.limit() == 0).then_some(RecordCountError::TooLarge { limit_bytes })
}

/// Reads until `buf` is full or the input ends; the bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> Result<usize, RecordCountError> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(RecordCountError::Inflate(e.to_string())),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record_batch::RecordBatchBuilder;
    use crate::{MessageSetIter, encode_batch_message, encode_message};

    fn only(set: &[u8]) -> MessageRef<'_> {
        MessageSetIter::new(set, 0).next().unwrap().unwrap().1
    }

    #[test]
    fn every_kind_of_message_counts_its_records() {
        let mut plain = Vec::new();
        encode_message(&mut plain, Codec::None, b"one");
        assert_eq!(records_in(&only(&plain), 1 << 20), Ok(1));

        let mut inner = Vec::new();
        for i in 0..37u32 {
            encode_message(&mut inner, Codec::None, &i.to_be_bytes());
        }
        for codec in compression::SUPPORTED_CODECS {
            let mut wrapper = Vec::new();
            encode_message(&mut wrapper, codec, &compression::compress(codec, &inner).unwrap());
            assert_eq!(records_in(&only(&wrapper), 1 << 20), Ok(37), "{codec:?}");
            assert_eq!(
                records_in(&only(&wrapper), 100),
                Err(RecordCountError::TooLarge { limit_bytes: 100 }),
                "{codec:?}"
            );
        }
        let mut snappy = Vec::new();
        encode_message(
            &mut snappy,
            Codec::Snappy,
            &snap::raw::Encoder::new().compress_vec(&inner).unwrap(),
        );
        assert_eq!(records_in(&only(&snappy), 1 << 20), Ok(37));

        let mut builder = RecordBatchBuilder::new(0);
        builder.push(0, 1, None, Some(b"a"), &[]);
        builder.push(4, 2, None, Some(b"b"), &[]);
        let mut batch = Vec::new();
        encode_batch_message(&mut batch, &builder.finish());
        assert_eq!(records_in(&only(&batch), 1 << 20), Ok(5), "last offset delta + 1");
    }

    #[test]
    fn a_wrapper_of_torn_inner_messages_is_refused() {
        let mut inner = Vec::new();
        encode_message(&mut inner, Codec::None, b"whole");
        encode_message(&mut inner, Codec::None, b"torn");
        inner.truncate(inner.len() - 2);
        let mut wrapper = Vec::new();
        encode_message(
            &mut wrapper,
            Codec::Lz4,
            &compression::compress(Codec::Lz4, &inner).unwrap(),
        );
        assert!(matches!(records_in(&only(&wrapper), 1 << 20), Err(RecordCountError::Inner(_))));
        let mut garbage = Vec::new();
        encode_message(&mut garbage, Codec::Gzip, b"not gzip");
        assert!(matches!(records_in(&only(&garbage), 1 << 20), Err(RecordCountError::Inflate(_))));
    }
}
