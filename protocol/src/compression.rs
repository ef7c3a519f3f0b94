//! Compression of whole MessageSets into the payload of one magic-1 wrapper message, and back;
//! and of the records of a Kafka RecordBatch (magic 2), whose attributes use the same codec
//! numbers.
//!
//! The producer compresses a batch's inner MessageSet once and sends it as one message whose
//! attributes name the codec (`docs/design.md`, "Compression"); the broker stores it
//! untouched and the consumer inflates it here. Inflating is bounded: a wrapper that would
//! grow past a caller's limit is an error, not an allocation of whatever size it claims.
//! Snappy is read (Kafka clients send it, as a raw block or in the xerial framing of Kafka's
//! Java client) but not written.

use std::io::{Read, Write};
use std::sync::Arc;

use crate::Codec;
use thiserror::Error;

/// Why a set could not be compressed or a wrapper's payload could not be inflated.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum CompressionError {
    #[error("codec {codec:?} is not supported by this client")]
    Unsupported { codec: Codec },
    #[error("{codec:?} failed: {source}")]
    Codec { codec: Codec, source: Arc<std::io::Error> },
    #[error("{codec:?} payload inflates past the limit of {limit_bytes} bytes")]
    TooLarge { codec: Codec, limit_bytes: usize },
}

/// Codecs this client can both write and read.
pub const SUPPORTED_CODECS: [Codec; 3] = [Codec::Gzip, Codec::Lz4, Codec::Zstd];

/// zstd's default level: a good ratio at a speed close to gzip's fastest.
const ZSTD_LEVEL: i32 = 3;

/// Compresses an inner MessageSet with `codec` (which must not be `Codec::None`).
pub fn compress(codec: Codec, set: &[u8]) -> Result<Vec<u8>, CompressionError> {
    let failed =
        |source: std::io::Error| CompressionError::Codec { codec, source: Arc::new(source) };
    match codec {
        Codec::Gzip => {
            let out = Vec::with_capacity(set.len() / 2);
            let mut encoder = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
            encoder.write_all(set).map_err(failed)?;
            encoder.finish().map_err(failed)
        }
        Codec::Lz4 => {
            let mut encoder = lz4_flex::frame::FrameEncoder::new(Vec::with_capacity(set.len() / 2));
            encoder.write_all(set).map_err(failed)?;
            encoder.finish().map_err(|e| failed(std::io::Error::other(e)))
        }
        Codec::Zstd => zstd::bulk::compress(set, ZSTD_LEVEL).map_err(failed),
        Codec::None | Codec::Snappy => Err(CompressionError::Unsupported { codec }),
    }
}

/// Inflates a wrapper's payload into its inner MessageSet, reading at most `limit_bytes`.
pub fn decompress(
    codec: Codec,
    payload: &[u8],
    limit_bytes: usize,
) -> Result<Vec<u8>, CompressionError> {
    match codec {
        Codec::Gzip => read_bounded(codec, flate2::read::GzDecoder::new(payload), limit_bytes),
        Codec::Lz4 => read_bounded(codec, lz4_flex::frame::FrameDecoder::new(payload), limit_bytes),
        Codec::Zstd => {
            let decoder = zstd::stream::read::Decoder::new(payload)
                .map_err(|source| CompressionError::Codec { codec, source: Arc::new(source) })?;
            read_bounded(codec, decoder, limit_bytes)
        }
        Codec::Snappy => snappy_decompress(payload, limit_bytes),
        Codec::None => Err(CompressionError::Unsupported { codec }),
    }
}

/// The xerial snappy-java stream: this magic, a version and a compatible version (u32 each),
/// then blocks of `u32 length | raw snappy block`.
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_BYTES: usize = XERIAL_MAGIC.len() + 8;

/// A raw snappy block, or a xerial stream of them, at most `limit_bytes` inflated.
fn snappy_decompress(payload: &[u8], limit_bytes: usize) -> Result<Vec<u8>, CompressionError> {
    let codec = Codec::Snappy;
    let failed = |reason: String| CompressionError::Codec {
        codec,
        source: Arc::new(std::io::Error::new(std::io::ErrorKind::InvalidData, reason)),
    };
    let mut out = Vec::new();
    let block = |block: &[u8], out: &mut Vec<u8>| -> Result<(), CompressionError> {
        // The claimed length is checked before anything is allocated for it.
        let len = snap::raw::decompress_len(block).map_err(|e| failed(e.to_string()))?;
        if out.len() + len > limit_bytes {
            return Err(CompressionError::TooLarge { codec, limit_bytes });
        }
        let start = out.len();
        out.resize(start + len, 0);
        let written = snap::raw::Decoder::new()
            .decompress(block, &mut out[start..])
            .map_err(|e| failed(e.to_string()))?;
        out.truncate(start + written);
        Ok(())
    };
    match payload.strip_prefix(XERIAL_MAGIC) {
        None => block(payload, &mut out)?,
        Some(_) => {
            let mut rest = payload
                .get(XERIAL_HEADER_BYTES..)
                .ok_or_else(|| failed("a xerial header cut short".into()))?;
            while !rest.is_empty() {
                let (len, body) = rest
                    .split_first_chunk::<4>()
                    .ok_or_else(|| failed("a xerial block length cut short".into()))?;
                let len = u32::from_be_bytes(*len) as usize;
                let chunk =
                    body.get(..len).ok_or_else(|| failed("a xerial block cut short".into()))?;
                block(chunk, &mut out)?;
                rest = &body[len..];
            }
        }
    }
    Ok(out)
}

/// Reads a decoder to its end, failing once it yields more than `limit_bytes`.
fn read_bounded(
    codec: Codec,
    decoder: impl Read,
    limit_bytes: usize,
) -> Result<Vec<u8>, CompressionError> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit_bytes).unwrap_or(u64::MAX).saturating_add(1);
    decoder
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|source| CompressionError::Codec { codec, source: Arc::new(source) })?;
    if out.len() > limit_bytes {
        return Err(CompressionError::TooLarge { codec, limit_bytes });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_codec_round_trips() {
        let set: Vec<u8> = (0..10_000u32).flat_map(|i| (i % 251).to_be_bytes()).collect();
        for codec in SUPPORTED_CODECS {
            let packed = compress(codec, &set).unwrap();
            assert!(packed.len() < set.len(), "{codec:?} compresses repetitive data");
            assert_eq!(decompress(codec, &packed, set.len()).unwrap(), set, "{codec:?}");
        }
    }

    #[test]
    fn inflating_past_the_limit_is_an_error() {
        let set = vec![0u8; 1 << 20];
        for codec in SUPPORTED_CODECS {
            let packed = compress(codec, &set).unwrap();
            assert!(matches!(
                decompress(codec, &packed, 1000),
                Err(CompressionError::TooLarge { limit_bytes: 1000, .. })
            ));
        }
    }

    #[test]
    fn garbage_is_a_codec_error_not_a_panic() {
        for codec in SUPPORTED_CODECS {
            assert!(decompress(codec, b"definitely not compressed", 1 << 20).is_err(), "{codec:?}");
        }
        assert!(decompress(Codec::Snappy, b"definitely not compressed", 1 << 20).is_err());
        assert!(matches!(
            compress(Codec::Snappy, b"x"),
            Err(CompressionError::Unsupported { codec: Codec::Snappy })
        ));
    }

    #[test]
    fn snappy_is_read_raw_and_in_the_xerial_framing() {
        let set: Vec<u8> = (0..5_000u32).flat_map(|i| (i % 7).to_be_bytes()).collect();
        let raw = snap::raw::Encoder::new().compress_vec(&set).unwrap();
        assert_eq!(decompress(Codec::Snappy, &raw, set.len()).unwrap(), set);
        let mut framed = XERIAL_MAGIC.to_vec();
        framed.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        for half in set.chunks(set.len() / 2 + 1) {
            let block = snap::raw::Encoder::new().compress_vec(half).unwrap();
            framed.extend_from_slice(&(block.len() as u32).to_be_bytes());
            framed.extend_from_slice(&block);
        }
        assert_eq!(decompress(Codec::Snappy, &framed, set.len()).unwrap(), set);
        assert!(matches!(
            decompress(Codec::Snappy, &raw, 100),
            Err(CompressionError::TooLarge { limit_bytes: 100, .. })
        ));
        assert!(decompress(Codec::Snappy, &framed[..framed.len() - 3], 1 << 20).is_err());
    }
}
