//! One message: `u32 length | u32 crc | u8 magic | [u8 attributes] | payload`.
//!
//! `length` counts the bytes after itself; the CRC-32 (IEEE) covers every byte after the CRC
//! field. Magic 0 has 9 bytes of overhead, as in the paper; magic 1 adds an attributes byte
//! whose low three bits name the codec of a compressed inner MessageSet; a magic-2 message's
//! payload is one Kafka RecordBatch (`record_batch`), with no attributes byte of its own.

use bytes::BufMut;

/// Magic byte of a message whose payload follows directly.
pub const MAGIC_PLAIN: u8 = 0;
/// Magic byte of a message with an attributes byte before its payload.
pub const MAGIC_ATTRIBUTES: u8 = 1;
/// Magic byte of a message whose payload is a Kafka RecordBatch.
pub const MAGIC_BATCH: u8 = 2;
/// Magic byte of a gap: what the log cleaner leaves where it removed records of a compacted
/// topic (`docs/design.md`, "Compacted topics"). Only the broker writes gaps; no producer may.
pub const MAGIC_GAP: u8 = 3;
/// Bytes of a gap's header: length, CRC, magic, flags and the count of the records it
/// replaces. The rest of a gap is zeros (a hole in the segment file).
pub const GAP_HEADER_BYTES: usize = LENGTH_BYTES + CRC_BYTES + 1 + 1 + 4;
/// A gap's flag: it holds the tail of the message before it (a batch the cleaner shortened),
/// rather than a whole message of its own.
pub const GAP_TAIL: u8 = 1;

/// Bytes of the `length` field.
pub(crate) const LENGTH_BYTES: usize = 4;
/// Bytes of the `crc` field.
pub(crate) const CRC_BYTES: usize = 4;
/// Smallest `length` of any message: CRC and magic, empty payload.
pub(crate) const LENGTH_MIN: u32 = (CRC_BYTES + 1) as u32;
/// Bytes a plain (magic 0) message adds to its payload: length, CRC, magic.
pub const PLAIN_MESSAGE_OVERHEAD_BYTES: usize = LENGTH_BYTES + CRC_BYTES + 1;
/// Mask of the codec bits in the attributes byte.
const CODEC_MASK: u8 = 0b111;

/// Compression codec of a magic-1 wrapper message's inner MessageSet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Codec {
    None = 0,
    Gzip = 1,
    Snappy = 2,
    Lz4 = 3,
    Zstd = 4,
}

impl Codec {
    pub fn from_attributes(attributes: u8) -> Option<Codec> {
        match attributes & CODEC_MASK {
            0 => Some(Codec::None),
            1 => Some(Codec::Gzip),
            2 => Some(Codec::Snappy),
            3 => Some(Codec::Lz4),
            4 => Some(Codec::Zstd),
            _ => None,
        }
    }

    pub fn attributes(self) -> u8 {
        self as u8
    }
}

/// A message inside a buffer: header fields and a payload slice, nothing copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRef<'a> {
    pub magic: u8,
    pub attributes: u8,
    pub crc: u32,
    pub payload: &'a [u8],
}

impl MessageRef<'_> {
    /// The codec of the inner MessageSet, `Codec::None` for a plain message; for a magic-2
    /// message, the codec of its batch's records (`attributes` holds the low byte of the
    /// batch's attributes).
    pub fn codec(&self) -> Codec {
        if self.magic == MAGIC_GAP {
            return Codec::None;
        }
        Codec::from_attributes(self.attributes).unwrap_or(Codec::None)
    }

    pub fn is_compressed(&self) -> bool {
        self.codec() != Codec::None
    }

    /// Bytes this message occupies in a MessageSet, length field included.
    pub fn size_bytes(&self) -> usize {
        let header = LENGTH_BYTES + CRC_BYTES + 1;
        let attributes = usize::from(self.magic == MAGIC_ATTRIBUTES || self.magic == MAGIC_GAP);
        header + attributes + self.payload.len()
    }
}

/// Bytes `encode_message` writes for a payload of `payload_bytes`.
pub fn encoded_len(codec: Codec, payload_bytes: usize) -> usize {
    let attributes = usize::from(codec != Codec::None);
    LENGTH_BYTES + CRC_BYTES + 1 + attributes + payload_bytes
}

/// Appends a magic-2 message holding the RecordBatch `batch` (already checked by the caller).
pub fn encode_batch_message(buf: &mut impl BufMut, batch: &[u8]) {
    let length = LENGTH_BYTES + CRC_BYTES + 1 + batch.len() - LENGTH_BYTES;
    let length = u32::try_from(length).expect("message larger than 4 GiB");
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[MAGIC_BATCH]);
    crc.update(batch);
    buf.put_u32(length);
    buf.put_u32(crc.finalize());
    buf.put_u8(MAGIC_BATCH);
    buf.put_slice(batch);
}

/// The header of a gap of `size` bytes (header included) standing for `records` removed
/// records, `flags` [`GAP_TAIL`] or 0; the rest of the gap is `size - GAP_HEADER_BYTES` zeros,
/// which its CRC covers like any message's body.
///
/// # Panics
/// If `size` is below [`GAP_HEADER_BYTES`] or above 4 GiB.
pub fn gap_header(size: usize, records: u32, flags: u8) -> [u8; GAP_HEADER_BYTES] {
    assert!(size >= GAP_HEADER_BYTES, "a gap of {size} bytes is shorter than its header");
    let length = u32::try_from(size - LENGTH_BYTES).expect("gap larger than 4 GiB");
    let mut header = [0u8; GAP_HEADER_BYTES];
    header[..4].copy_from_slice(&length.to_be_bytes());
    header[8] = MAGIC_GAP;
    header[9] = flags;
    header[10..].copy_from_slice(&records.to_be_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&header[8..]);
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    let mut zeros = size - GAP_HEADER_BYTES;
    while zeros > 0 {
        let n = zeros.min(ZEROS.len());
        crc.update(&ZEROS[..n]);
        zeros -= n;
    }
    header[4..8].copy_from_slice(&crc.finalize().to_be_bytes());
    header
}

/// Writes a message's CRC field again after its bytes after the field changed (a magic-2
/// message whose batch got its base offset): `message` is the whole message, length first.
pub fn restamp_crc(message: &mut [u8]) {
    let crc = crc32fast::hash(&message[LENGTH_BYTES + CRC_BYTES..]);
    message[LENGTH_BYTES..LENGTH_BYTES + CRC_BYTES].copy_from_slice(&crc.to_be_bytes());
}

/// Appends one message to `buf`. A plain payload (`Codec::None`) is written with magic 0;
/// any other codec writes a magic-1 wrapper whose payload is the compressed inner set.
///
/// # Panics
/// If the message would not fit a `u32` length (more than 4 GiB), which no caller that
/// respects a broker's message size limit can reach.
pub fn encode_message(buf: &mut impl BufMut, codec: Codec, payload: &[u8]) {
    let (magic, attributes): (u8, &[u8]) = match codec {
        Codec::None => (MAGIC_PLAIN, &[]),
        codec => (MAGIC_ATTRIBUTES, &[codec.attributes()][..]),
    };
    let length = encoded_len(codec, payload.len()) - LENGTH_BYTES;
    let length = u32::try_from(length).expect("message larger than 4 GiB");
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[magic]);
    crc.update(attributes);
    crc.update(payload);
    buf.put_u32(length);
    buf.put_u32(crc.finalize());
    buf.put_u8(magic);
    buf.put_slice(attributes);
    buf.put_slice(payload);
}
