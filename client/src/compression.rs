//! Compression of whole MessageSets into the payload of one magic-1 wrapper message, and back.
//!
//! The producer compresses a batch's inner MessageSet once and sends it as one message whose
//! attributes name the codec (`DESIGN.md`, "On disk and on the wire"); the broker stores it
//! untouched and the consumer inflates it here. Inflating is bounded: a wrapper that would
//! grow past a caller's limit is an error, not an allocation of whatever size it claims.

use std::io::{Read, Write};
use std::sync::Arc;

use protocol::Codec;
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
        Codec::None | Codec::Snappy => Err(CompressionError::Unsupported { codec }),
    }
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
        assert!(matches!(
            compress(Codec::Snappy, b"x"),
            Err(CompressionError::Unsupported { codec: Codec::Snappy })
        ));
    }
}
