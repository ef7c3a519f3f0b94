//! Kafka's RecordBatch (message format v2), which Tributary stores as the payload of a magic-2
//! message (`docs/design.md`, "Magic 2: Kafka RecordBatch"): a view that checks a batch and
//! reads its header and records, and a builder that writes one.
//!
//! ```text
//! i64 baseOffset | i32 batchLength | i32 partitionLeaderEpoch | i8 magic (2) | u32 crc (CRC-32C
//! of every byte after it) | i16 attributes | i32 lastOffsetDelta | i64 baseTimestamp |
//! i64 maxTimestamp | i64 producerId | i16 producerEpoch | i32 baseSequence | i32 records |
//! records (compressed as a whole when the attributes name a codec)
//! ```
//!
//! A record is `varint length | i8 attributes | varlong timestampDelta | varint offsetDelta |
//! varint keyLength | key | varint valueLength | value | varint headers | headers`, a header
//! `varint keyLength | key | varint valueLength | value`; varints are zig-zag, a length of −1
//! is null. Every length is checked against the bytes present before it is used.

use bytes::Bytes;
use thiserror::Error;

use crate::Codec;
use crate::compression::{self, CompressionError};

/// Bytes before the records.
pub const RECORD_BATCH_HEADER_BYTES: usize = 61;
/// The magic byte of a RecordBatch, inside it.
pub const RECORD_BATCH_MAGIC: u8 = 2;

const BATCH_LENGTH_AT: usize = 8;
const LEADER_EPOCH_AT: usize = 12;
const MAGIC_AT: usize = 16;
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;
const LAST_OFFSET_DELTA_AT: usize = 23;
const BASE_TIMESTAMP_AT: usize = 27;
const MAX_TIMESTAMP_AT: usize = 35;
const PRODUCER_ID_AT: usize = 43;
const PRODUCER_EPOCH_AT: usize = 51;
const BASE_SEQUENCE_AT: usize = 53;
const RECORDS_COUNT_AT: usize = 57;

const CODEC_MASK: i16 = 0b111;
const TIMESTAMP_TYPE_BIT: i16 = 1 << 3;
const TRANSACTIONAL_BIT: i16 = 1 << 4;
const CONTROL_BIT: i16 = 1 << 5;

/// Why bytes are not a RecordBatch, or its records cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum InvalidBatch {
    #[error(
        "a record batch of {len} bytes is shorter than its {RECORD_BATCH_HEADER_BYTES}-byte header"
    )]
    TooShort { len: usize },
    #[error("record batch length {claimed} does not match its {actual} bytes")]
    Length { claimed: i64, actual: usize },
    #[error("record batch magic {0} (only 2 is a RecordBatch)")]
    Magic(u8),
    #[error("record batch CRC-32C mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Crc { stored: u32, computed: u32 },
    #[error("record batch attributes {0:#06x} name no known codec")]
    Codec(i16),
    #[error("record batch counts {count} records and a last offset delta of {last_offset_delta}")]
    Counts { count: i32, last_offset_delta: i32 },
    #[error("record batch records: {0}")]
    Records(&'static str),
    #[error("record batch records: {0}")]
    Decompress(String),
}

impl From<CompressionError> for InvalidBatch {
    fn from(e: CompressionError) -> InvalidBatch {
        InvalidBatch::Decompress(e.to_string())
    }
}

/// A checked RecordBatch inside a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordBatchRef<'a> {
    bytes: &'a [u8],
    /// The batch's first [`RECORD_BATCH_HEADER_BYTES`], which [`RecordBatchRef::parse`]
    /// checked are there: every header field is read from it, in bounds by its type.
    header: &'a [u8; RECORD_BATCH_HEADER_BYTES],
}

type Header = [u8; RECORD_BATCH_HEADER_BYTES];

/// The header's `N` bytes at `AT`; a field past the header does not compile.
fn field<const AT: usize, const N: usize>(header: &Header) -> [u8; N] {
    const { assert!(AT + N <= RECORD_BATCH_HEADER_BYTES) };
    std::array::from_fn(|i| header[AT + i])
}

impl<'a> RecordBatchRef<'a> {
    /// Checks `bytes` is exactly one RecordBatch: its length, magic, CRC-32C, codec, and record
    /// count against its last offset delta. The records themselves are read by
    /// [`RecordBatchRef::records`].
    pub fn parse(bytes: &'a [u8]) -> Result<RecordBatchRef<'a>, InvalidBatch> {
        let Some(header) = bytes.first_chunk::<RECORD_BATCH_HEADER_BYTES>() else {
            return Err(InvalidBatch::TooShort { len: bytes.len() });
        };
        let claimed = i64::from(i32::from_be_bytes(field::<BATCH_LENGTH_AT, 4>(header)));
        if claimed != (bytes.len() - LEADER_EPOCH_AT) as i64 {
            return Err(InvalidBatch::Length { claimed, actual: bytes.len() });
        }
        if bytes[MAGIC_AT] != RECORD_BATCH_MAGIC {
            return Err(InvalidBatch::Magic(bytes[MAGIC_AT]));
        }
        let stored = u32::from_be_bytes(field::<CRC_AT, 4>(header));
        let computed = crc32c::crc32c(&bytes[ATTRIBUTES_AT..]);
        if stored != computed {
            return Err(InvalidBatch::Crc { stored, computed });
        }
        let batch = RecordBatchRef { bytes, header };
        if batch.codec().is_none() {
            return Err(InvalidBatch::Codec(batch.attributes()));
        }
        let (count, last_offset_delta) = (batch.record_count(), batch.last_offset_delta());
        if count < 0 || last_offset_delta < 0 || i64::from(count) > i64::from(last_offset_delta) + 1
        {
            return Err(InvalidBatch::Counts { count, last_offset_delta });
        }
        Ok(batch)
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn base_offset(&self) -> i64 {
        i64::from_be_bytes(field::<0, 8>(self.header))
    }

    pub fn partition_leader_epoch(&self) -> i32 {
        i32::from_be_bytes(field::<LEADER_EPOCH_AT, 4>(self.header))
    }

    pub fn attributes(&self) -> i16 {
        i16::from_be_bytes(field::<ATTRIBUTES_AT, 2>(self.header))
    }

    /// The codec of the records; `None` for a value no codec has.
    pub fn codec(&self) -> Option<Codec> {
        Codec::from_attributes((self.attributes() & CODEC_MASK) as u8)
    }

    /// Whether timestamps are the broker's append time (else the producer's create time).
    pub fn is_log_append_time(&self) -> bool {
        self.attributes() & TIMESTAMP_TYPE_BIT != 0
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes() & TRANSACTIONAL_BIT != 0
    }

    /// A control batch (a transaction marker) holds no application records.
    pub fn is_control(&self) -> bool {
        self.attributes() & CONTROL_BIT != 0
    }

    pub fn last_offset_delta(&self) -> i32 {
        i32::from_be_bytes(field::<LAST_OFFSET_DELTA_AT, 4>(self.header))
    }

    /// Offsets the batch takes: its last offset delta + 1.
    pub fn offset_count(&self) -> u64 {
        self.last_offset_delta() as u64 + 1
    }

    pub fn base_timestamp(&self) -> i64 {
        i64::from_be_bytes(field::<BASE_TIMESTAMP_AT, 8>(self.header))
    }

    pub fn max_timestamp(&self) -> i64 {
        i64::from_be_bytes(field::<MAX_TIMESTAMP_AT, 8>(self.header))
    }

    pub fn producer_id(&self) -> i64 {
        i64::from_be_bytes(field::<PRODUCER_ID_AT, 8>(self.header))
    }

    pub fn producer_epoch(&self) -> i16 {
        i16::from_be_bytes(field::<PRODUCER_EPOCH_AT, 2>(self.header))
    }

    pub fn base_sequence(&self) -> i32 {
        i32::from_be_bytes(field::<BASE_SEQUENCE_AT, 4>(self.header))
    }

    pub fn record_count(&self) -> i32 {
        i32::from_be_bytes(field::<RECORDS_COUNT_AT, 4>(self.header))
    }

    /// The records, inflated (at most `inflated_bytes_max`) when compressed.
    pub fn records(&self, inflated_bytes_max: usize) -> Result<Records, InvalidBatch> {
        let stored = &self.bytes[RECORD_BATCH_HEADER_BYTES..];
        let bytes = match self.codec() {
            Some(Codec::None) => Bytes::copy_from_slice(stored),
            Some(codec) => compression::decompress(codec, stored, inflated_bytes_max)?.into(),
            None => return Err(InvalidBatch::Codec(self.attributes())),
        };
        Ok(Records {
            bytes,
            count: self.record_count().max(0) as usize,
            base_offset: self.base_offset(),
            base_timestamp: self.base_timestamp(),
            append_time: self.is_log_append_time().then(|| self.max_timestamp()),
        })
    }
}

/// The batch without the records `keep` refuses: its header as it was (base offset, last
/// offset delta, timestamps, producer, attributes) but for its record count, length and
/// CRC-32C; the records kept byte for byte (their offset and timestamp deltas stay valid), and
/// compressed again with the batch's codec. What the log cleaner writes for a batch of a
/// compacted topic. `None` when `keep` takes every record. A batch left without records stays
/// a batch (as Kafka's cleaner leaves one): its offsets still count.
pub fn retain_records(
    batch: &RecordBatchRef,
    inflated_bytes_max: usize,
    mut keep: impl FnMut(&Record) -> bool,
) -> Result<Option<Vec<u8>>, InvalidBatch> {
    let records = batch.records(inflated_bytes_max)?;
    let mut kept = Vec::with_capacity(records.bytes().len());
    let (mut count, mut dropped) = (0i32, false);
    for record in records.iter() {
        let record = record?;
        if keep(&record) {
            kept.extend_from_slice(&records.bytes()[record.span.0..record.span.1]);
            count += 1;
        } else {
            dropped = true;
        }
    }
    if !dropped {
        return Ok(None);
    }
    // A codec Tributary only reads (snappy) leaves the records uncompressed.
    let mut attributes = batch.attributes();
    let packed = match batch.codec() {
        Some(Codec::None) | None => kept,
        Some(codec) => match compression::compress(codec, &kept) {
            Ok(packed) => packed,
            Err(CompressionError::Unsupported { .. }) => {
                attributes &= !CODEC_MASK;
                kept
            }
            Err(e) => return Err(e.into()),
        },
    };
    let mut out = Vec::with_capacity(RECORD_BATCH_HEADER_BYTES + packed.len());
    out.extend_from_slice(batch.header);
    out[ATTRIBUTES_AT..LAST_OFFSET_DELTA_AT].copy_from_slice(&attributes.to_be_bytes());
    let batch_length = (RECORD_BATCH_HEADER_BYTES - LEADER_EPOCH_AT + packed.len()) as i32;
    out[BATCH_LENGTH_AT..LEADER_EPOCH_AT].copy_from_slice(&batch_length.to_be_bytes());
    out[RECORDS_COUNT_AT..RECORD_BATCH_HEADER_BYTES].copy_from_slice(&count.to_be_bytes());
    out.extend_from_slice(&packed);
    let crc = crc32c::crc32c(&out[ATTRIBUTES_AT..]);
    out[CRC_AT..ATTRIBUTES_AT].copy_from_slice(&crc.to_be_bytes());
    Ok(Some(out))
}

/// Sets the base offset of the RecordBatch `batch` (which its CRC does not cover).
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    batch[..8].copy_from_slice(&base_offset.to_be_bytes());
}

/// Marks a checked batch's timestamps as the broker's append time `time_ms` (Kafka's
/// LogAppendTime: the timestamp-type attribute set and the max timestamp, which consumers
/// read as every record's timestamp), and writes its CRC-32C again. The records are as sent.
///
/// # Panics
/// If `batch` is shorter than a batch header: it must be one [`RecordBatchRef::parse`] took.
pub fn set_log_append_time(batch: &mut [u8], time_ms: i64) {
    let attributes = i16::from_be_bytes([batch[ATTRIBUTES_AT], batch[ATTRIBUTES_AT + 1]]);
    let attributes = attributes | TIMESTAMP_TYPE_BIT;
    batch[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
    batch[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&time_ms.to_be_bytes());
    let crc = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
    batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
}

/// The append time of a batch [`set_log_append_time`] stamped (its max timestamp), read from
/// its header without checking the batch; `None` for a CreateTime batch or fewer bytes than a
/// header.
pub fn log_append_time_of(batch: &[u8]) -> Option<i64> {
    let attributes =
        i16::from_be_bytes(batch.get(ATTRIBUTES_AT..ATTRIBUTES_AT + 2)?.try_into().ok()?);
    let max_timestamp =
        i64::from_be_bytes(batch.get(MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8)?.try_into().ok()?);
    (attributes & TIMESTAMP_TYPE_BIT != 0).then_some(max_timestamp)
}

/// The records of a batch, inflated; [`Records::iter`] reads them.
#[derive(Debug, Clone)]
pub struct Records {
    bytes: Bytes,
    count: usize,
    base_offset: i64,
    base_timestamp: i64,
    /// A LogAppendTime batch's max timestamp: every record's timestamp.
    append_time: Option<i64>,
}

impl Records {
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Records in the batch, as its header counts them.
    pub fn count(&self) -> usize {
        self.count
    }

    pub fn iter(&self) -> RecordIter<'_> {
        self.iter_at(0, self.count)
    }

    /// Reads from `position` in the inflated records (a record's `span.1`), with `left` records
    /// still to read: for a caller that reads a few at a time.
    pub fn iter_at(&self, position: usize, left: usize) -> RecordIter<'_> {
        let rest = self.bytes.get(position..).unwrap_or_default();
        RecordIter { rest, position, left, failed: false, records: self }
    }
}

/// One record of a batch, borrowed from its inflated records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// The batch's base offset + this record's offset delta.
    pub offset: i64,
    /// The batch's base timestamp + this record's timestamp delta; in a LogAppendTime batch,
    /// the batch's max timestamp (the broker's append time), as Kafka's consumers read it.
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
    /// Where the record's length field starts in the inflated records, and its end: for a
    /// caller that keeps a record's bytes whole.
    pub span: (usize, usize),
}

/// Iterates the records of a batch; after an `Err` it ends.
#[derive(Debug)]
pub struct RecordIter<'a> {
    records: &'a Records,
    rest: &'a [u8],
    position: usize,
    left: usize,
    failed: bool,
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<Record<'a>, InvalidBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.left == 0 {
            if !self.rest.is_empty() {
                self.failed = true;
                return Some(Err(InvalidBatch::Records("bytes after the last record")));
            }
            return None;
        }
        self.left -= 1;
        match self.read() {
            Ok(record) => Some(Ok(record)),
            Err(e) => {
                self.failed = true;
                Some(Err(InvalidBatch::Records(e)))
            }
        }
    }
}

impl<'a> RecordIter<'a> {
    fn read(&mut self) -> Result<Record<'a>, &'static str> {
        let start = self.position;
        let mut input = self.rest;
        let length = varint(&mut input)?;
        let length = usize::try_from(length).map_err(|_| "a negative record length")?;
        let body = input.get(..length).ok_or("a record longer than the batch")?;
        let rest = &input[length..];
        let mut body_input = body;
        let b = &mut body_input;
        let _attributes = take(b, 1)?;
        let timestamp_delta = varlong(b)?;
        let offset_delta = varint(b)?;
        let key = nullable_bytes(b)?;
        let value = nullable_bytes(b)?;
        let header_count = varint(b)?;
        let header_count = usize::try_from(header_count).map_err(|_| "a negative header count")?;
        // Each header takes two bytes at least: the count cannot claim more than that.
        if header_count > b.len() / 2 {
            return Err("more headers than the record's bytes");
        }
        let mut headers = Vec::with_capacity(header_count);
        for _ in 0..header_count {
            let key = nullable_bytes(b)?.ok_or("a header with a null key")?;
            let value = nullable_bytes(b)?;
            headers.push((key, value));
        }
        if !b.is_empty() {
            return Err("bytes after a record's headers");
        }
        let end = start + (self.rest.len() - rest.len());
        self.rest = rest;
        self.position = end;
        Ok(Record {
            offset: self.records.base_offset.wrapping_add(i64::from(offset_delta)),
            timestamp: match self.records.append_time {
                Some(appended) => appended,
                None => self.records.base_timestamp.wrapping_add(timestamp_delta),
            },
            key,
            value,
            headers,
            span: (start, end),
        })
    }
}

fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], &'static str> {
    if input.len() < n {
        return Err("a record cut short");
    }
    let (taken, rest) = input.split_at(n);
    *input = rest;
    Ok(taken)
}

/// A zig-zag varlong of at most 10 bytes.
fn varlong(input: &mut &[u8]) -> Result<i64, &'static str> {
    let mut z: u64 = 0;
    for shift in (0..70).step_by(7) {
        let (&byte, rest) = input.split_first().ok_or("a varint cut short")?;
        *input = rest;
        z |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok((z >> 1) as i64 ^ -((z & 1) as i64));
        }
    }
    Err("a varint longer than 10 bytes")
}

/// A zig-zag varint: a varlong within an i32.
fn varint(input: &mut &[u8]) -> Result<i32, &'static str> {
    i32::try_from(varlong(input)?).map_err(|_| "a varint out of range")
}

fn nullable_bytes<'a>(input: &mut &'a [u8]) -> Result<Option<&'a [u8]>, &'static str> {
    match varint(input)? {
        -1 => Ok(None),
        n => {
            let n = usize::try_from(n).map_err(|_| "a negative length")?;
            take(input, n).map(Some)
        }
    }
}

fn write_varlong(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn write_nullable_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => write_varlong(out, -1),
        Some(bytes) => {
            write_varlong(out, bytes.len() as i64);
            out.extend_from_slice(bytes);
        }
    }
}

/// Writes a RecordBatch of uncompressed records with offsets `base_offset..` and timestamps
/// relative to the first record's: what a Kafka fetch answers for messages stored in
/// Tributary's own format, and what tests produce.
#[derive(Debug, Clone)]
pub struct RecordBatchBuilder {
    base_offset: i64,
    base_timestamp: Option<i64>,
    max_timestamp: i64,
    last_offset_delta: i32,
    count: i32,
    records: Vec<u8>,
    producer: (i64, i16, i32),
    /// Attribute bits beside the codec's: transactional, control.
    flags: i16,
}

impl RecordBatchBuilder {
    pub fn new(base_offset: i64) -> RecordBatchBuilder {
        RecordBatchBuilder {
            base_offset,
            base_timestamp: None,
            max_timestamp: -1,
            last_offset_delta: 0,
            count: 0,
            records: Vec::new(),
            producer: (-1, -1, -1),
            flags: 0,
        }
    }

    /// Marks the batch as part of its producer's transaction.
    pub fn transactional(mut self) -> Self {
        self.flags |= TRANSACTIONAL_BIT;
        self
    }

    /// The idempotent producer's id, epoch and base sequence (−1 each without one).
    pub fn with_producer(mut self, id: i64, epoch: i16, base_sequence: i32) -> Self {
        self.producer = (id, epoch, base_sequence);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Appends a record at `offset` (at or after the base offset and the records before it).
    pub fn push(
        &mut self,
        offset: i64,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) {
        let base_timestamp = *self.base_timestamp.get_or_insert(timestamp);
        let offset_delta = i32::try_from(offset - self.base_offset).expect("offsets of one batch");
        let mut body = Vec::with_capacity(16 + value.map_or(0, <[u8]>::len));
        body.push(0);
        write_varlong(&mut body, timestamp.wrapping_sub(base_timestamp));
        write_varlong(&mut body, i64::from(offset_delta));
        write_nullable_bytes(&mut body, key);
        write_nullable_bytes(&mut body, value);
        write_varlong(&mut body, headers.len() as i64);
        for (key, value) in headers {
            write_nullable_bytes(&mut body, Some(key));
            write_nullable_bytes(&mut body, *value);
        }
        write_varlong(&mut self.records, body.len() as i64);
        self.records.extend_from_slice(&body);
        self.last_offset_delta = offset_delta;
        self.max_timestamp = self.max_timestamp.max(timestamp);
        self.count += 1;
    }

    /// The batch's bytes, CRC-32C and lengths filled in.
    pub fn finish(self) -> Vec<u8> {
        self.write(0, &self.records)
    }

    /// The batch with its records compressed by `codec` as one block (as Kafka's producers
    /// write them); `Codec::None` is [`RecordBatchBuilder::finish`].
    pub fn finish_compressed(self, codec: Codec) -> Result<Vec<u8>, CompressionError> {
        if codec == Codec::None {
            return Ok(self.finish());
        }
        let packed = compression::compress(codec, &self.records)?;
        Ok(self.write(i16::from(codec.attributes()), &packed))
    }

    fn write(&self, attributes: i16, records: &[u8]) -> Vec<u8> {
        let attributes = attributes | self.flags;
        let mut out = Vec::with_capacity(RECORD_BATCH_HEADER_BYTES + records.len());
        out.extend_from_slice(&self.base_offset.to_be_bytes());
        let batch_length = (RECORD_BATCH_HEADER_BYTES - LEADER_EPOCH_AT + records.len()) as i32;
        out.extend_from_slice(&batch_length.to_be_bytes());
        out.extend_from_slice(&(-1i32).to_be_bytes());
        out.push(RECORD_BATCH_MAGIC);
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&attributes.to_be_bytes());
        out.extend_from_slice(&self.last_offset_delta.to_be_bytes());
        let base_timestamp = self.base_timestamp.unwrap_or(-1);
        out.extend_from_slice(&base_timestamp.to_be_bytes());
        out.extend_from_slice(&self.max_timestamp.to_be_bytes());
        out.extend_from_slice(&self.producer.0.to_be_bytes());
        out.extend_from_slice(&self.producer.1.to_be_bytes());
        out.extend_from_slice(&self.producer.2.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
        out.extend_from_slice(records);
        let crc = crc32c::crc32c(&out[ATTRIBUTES_AT..]);
        out[CRC_AT..ATTRIBUTES_AT].copy_from_slice(&crc.to_be_bytes());
        out
    }
}

/// The control record type of a transaction marker that aborts.
const MARKER_ABORT: i16 = 0;
/// The control record type of a transaction marker that commits.
const MARKER_COMMIT: i16 = 1;

/// A transaction marker (Kafka's end-transaction control batch): a control, transactional
/// batch of one record whose key is `i16 version 0, i16 type` (0 abort, 1 commit) and whose
/// value is `i16 version 0, i32 coordinator epoch`, from `producer_id` in `epoch` at
/// `timestamp` (ms since the epoch). Its base offset is 0 until a leader numbers it.
pub fn transaction_marker(
    producer_id: i64,
    epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
    timestamp: i64,
) -> Vec<u8> {
    let kind = if commit { MARKER_COMMIT } else { MARKER_ABORT };
    let mut key = [0u8; 4];
    key[2..].copy_from_slice(&kind.to_be_bytes());
    let mut value = [0u8; 6];
    value[2..].copy_from_slice(&coordinator_epoch.to_be_bytes());
    let mut builder = RecordBatchBuilder::new(0).with_producer(producer_id, epoch, -1);
    builder.flags = TRANSACTIONAL_BIT | CONTROL_BIT;
    builder.push(0, timestamp, Some(&key), Some(&value), &[]);
    builder.finish()
}

/// Whether a control batch is a transaction marker that commits (`Some(true)`) or aborts
/// (`Some(false)`); `None` for any other batch, or a control record of another type.
pub fn marker_kind(batch: &RecordBatchRef) -> Option<bool> {
    if !batch.is_control() {
        return None;
    }
    let records = batch.records(1 << 16).ok()?;
    let record = records.iter().next()?.ok()?;
    let key = record.key?;
    match i16::from_be_bytes(key.get(2..4)?.try_into().ok()?) {
        MARKER_ABORT => Some(false),
        MARKER_COMMIT => Some(true),
        _ => None,
    }
}

/// The control record type of a copier's position ([`copy_position_marker`]): outside
/// Kafka's (0 to 6 so far), whose consumers skip a control batch of a type they do not know.
const COPY_POSITION: i16 = 0x5452;

/// A copier's position (a `COPY_PRODUCE`'s record of how far `writer` has copied its source
/// partition): a control batch of one record, no producer id, whose key is `i16 version 0,
/// i16 type 0x5452` and whose value is `i16 version 0, i64 position, writer` (UTF-8, the rest
/// of the value). Readers skip it as they skip every control batch.
pub fn copy_position_marker(writer: &str, position: i64, timestamp: i64) -> Vec<u8> {
    let mut key = [0u8; 4];
    key[2..].copy_from_slice(&COPY_POSITION.to_be_bytes());
    let mut value = Vec::with_capacity(10 + writer.len());
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&position.to_be_bytes());
    value.extend_from_slice(writer.as_bytes());
    let mut builder = RecordBatchBuilder::new(0);
    builder.flags = CONTROL_BIT;
    builder.push(0, timestamp, Some(&key), Some(&value), &[]);
    builder.finish()
}

/// The writer and position a [`copy_position_marker`] holds; `None` for any other batch.
pub fn copy_position(batch: &RecordBatchRef) -> Option<(String, i64)> {
    if !batch.is_control() || batch.producer_id() >= 0 {
        return None;
    }
    let records = batch.records(1 << 16).ok()?;
    let record = records.iter().next()?.ok()?;
    let key = record.key?;
    if i16::from_be_bytes(key.get(2..4)?.try_into().ok()?) != COPY_POSITION {
        return None;
    }
    let value = record.value?;
    let position = i64::from_be_bytes(value.get(2..10)?.try_into().ok()?);
    let writer = std::str::from_utf8(value.get(10..)?).ok()?;
    Some((writer.to_owned(), position))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_reads_back_as_what_it_marks() {
        for commit in [true, false] {
            let bytes = transaction_marker(42, 3, commit, 7, 1_000);
            let batch = RecordBatchRef::parse(&bytes).unwrap();
            assert!(batch.is_control() && batch.is_transactional());
            assert_eq!((batch.producer_id(), batch.producer_epoch()), (42, 3));
            assert_eq!(marker_kind(&batch), Some(commit));
        }
        let plain = batch();
        assert_eq!(marker_kind(&RecordBatchRef::parse(&plain).unwrap()), None);
    }

    #[test]
    fn a_copy_position_reads_back_and_is_no_transaction_marker() {
        let bytes = copy_position_marker("live-a/page-view/3", 1 << 40, 1_000);
        let copied = RecordBatchRef::parse(&bytes).unwrap();
        assert!(copied.is_control() && !copied.is_transactional());
        assert_eq!(copy_position(&copied), Some(("live-a/page-view/3".to_owned(), 1 << 40)));
        assert_eq!(marker_kind(&copied), None);
        let marker = transaction_marker(42, 3, true, 7, 1_000);
        assert_eq!(copy_position(&RecordBatchRef::parse(&marker).unwrap()), None);
        assert_eq!(copy_position(&RecordBatchRef::parse(&batch()).unwrap()), None);
    }

    fn batch() -> Vec<u8> {
        let mut builder = RecordBatchBuilder::new(100);
        builder.push(100, 1_000, Some(b"k1"), Some(b"v1"), &[(b"h", Some(b"x")), (b"n", None)]);
        builder.push(101, 1_005, None, Some(b""), &[]);
        builder.push(103, 990, Some(b"k3"), None, &[]);
        builder.finish()
    }

    #[test]
    fn retaining_records_keeps_their_offsets_and_the_batchs_header() {
        for codec in [Codec::None, Codec::Zstd, Codec::Lz4] {
            let mut builder = RecordBatchBuilder::new(100).with_producer(7, 1, 40);
            builder.push(100, 1_000, Some(b"k1"), Some(b"v1"), &[]);
            builder.push(101, 1_005, Some(b"k2"), Some(b"v2"), &[(b"h", Some(b"x"))]);
            builder.push(103, 990, Some(b"k1"), None, &[]);
            let bytes = builder.finish_compressed(codec).unwrap();
            let parsed = RecordBatchRef::parse(&bytes).unwrap();
            assert_eq!(retain_records(&parsed, 1 << 20, |_| true), Ok(None), "{codec:?}");
            let kept = retain_records(&parsed, 1 << 20, |r| r.key == Some(b"k2")).unwrap().unwrap();
            let cleaned = RecordBatchRef::parse(&kept).unwrap();
            assert_eq!((cleaned.base_offset(), cleaned.offset_count()), (100, 4), "{codec:?}");
            assert_eq!((cleaned.record_count(), cleaned.producer_id()), (1, 7));
            assert_eq!((cleaned.base_timestamp(), cleaned.max_timestamp()), (1_000, 1_005));
            let records = cleaned.records(1 << 20).unwrap();
            let read: Vec<Record> = records.iter().map(Result::unwrap).collect();
            assert_eq!(
                (read[0].offset, read[0].timestamp, read[0].value),
                (101, 1_005, Some(&b"v2"[..]))
            );
            let none = retain_records(&parsed, 1 << 20, |_| false).unwrap().unwrap();
            let empty = RecordBatchRef::parse(&none).unwrap();
            assert_eq!((empty.record_count(), empty.offset_count()), (0, 4));
        }
    }

    #[test]
    fn a_snappy_batch_is_retained_uncompressed() {
        let mut builder = RecordBatchBuilder::new(0);
        builder.push(0, 1, Some(b"a"), Some(b"1"), &[]);
        builder.push(1, 2, Some(b"b"), Some(b"2"), &[]);
        let records = builder.clone().finish();
        let raw = &records[RECORD_BATCH_HEADER_BYTES..];
        let packed = snap::raw::Encoder::new().compress_vec(raw).unwrap();
        let mut bytes = records[..RECORD_BATCH_HEADER_BYTES].to_vec();
        bytes.extend_from_slice(&packed);
        let length = (bytes.len() - LEADER_EPOCH_AT) as i32;
        bytes[BATCH_LENGTH_AT..LEADER_EPOCH_AT].copy_from_slice(&length.to_be_bytes());
        bytes[ATTRIBUTES_AT + 1] |= Codec::Snappy as u8;
        let crc = crc32c::crc32c(&bytes[ATTRIBUTES_AT..]);
        bytes[CRC_AT..ATTRIBUTES_AT].copy_from_slice(&crc.to_be_bytes());
        let parsed = RecordBatchRef::parse(&bytes).unwrap();
        assert_eq!(parsed.codec(), Some(Codec::Snappy));
        let kept = retain_records(&parsed, 1 << 20, |r| r.key == Some(b"b")).unwrap().unwrap();
        let cleaned = RecordBatchRef::parse(&kept).unwrap();
        assert_eq!((cleaned.codec(), cleaned.record_count()), (Some(Codec::None), 1));
        let records = cleaned.records(1 << 20).unwrap();
        let read: Vec<Record> = records.iter().map(Result::unwrap).collect();
        assert_eq!((read[0].offset, read[0].value), (1, Some(&b"2"[..])));
    }

    #[test]
    fn a_built_batch_reads_back_record_by_record() {
        let bytes = batch();
        let parsed = RecordBatchRef::parse(&bytes).unwrap();
        assert_eq!(parsed.base_offset(), 100);
        assert_eq!((parsed.last_offset_delta(), parsed.record_count()), (3, 3));
        assert_eq!(parsed.offset_count(), 4);
        assert_eq!((parsed.base_timestamp(), parsed.max_timestamp()), (1_000, 1_005));
        assert_eq!(parsed.codec(), Some(Codec::None));
        let records = parsed.records(1 << 20).unwrap();
        let read: Vec<Record> = records.iter().map(Result::unwrap).collect();
        assert_eq!(read.len(), 3);
        assert_eq!(read[0].offset, 100);
        assert_eq!(read[0].key, Some(&b"k1"[..]));
        assert_eq!(read[0].value, Some(&b"v1"[..]));
        assert_eq!(read[0].headers, vec![(&b"h"[..], Some(&b"x"[..])), (&b"n"[..], None)]);
        assert_eq!((read[1].offset, read[1].timestamp, read[1].key), (101, 1_005, None));
        assert_eq!((read[2].offset, read[2].timestamp, read[2].value), (103, 990, None));
        assert_eq!(read[2].span.1, records.bytes().len());
    }

    #[test]
    fn the_base_offset_is_outside_the_crc() {
        let mut bytes = batch();
        set_base_offset(&mut bytes, 7);
        let parsed = RecordBatchRef::parse(&bytes).unwrap();
        assert_eq!(parsed.base_offset(), 7);
        assert_eq!(parsed.records(1 << 20).unwrap().iter().next().unwrap().unwrap().offset, 7);
    }

    #[test]
    fn a_log_append_time_batch_reads_the_append_time_for_every_record() {
        let mut bytes = batch();
        set_log_append_time(&mut bytes, 5_000);
        let parsed = RecordBatchRef::parse(&bytes).expect("the CRC-32C written again");
        assert!(parsed.is_log_append_time());
        assert_eq!((parsed.base_timestamp(), parsed.max_timestamp()), (1_000, 5_000));
        let records = parsed.records(1 << 20).unwrap();
        let times: Vec<i64> = records.iter().map(|r| r.unwrap().timestamp).collect();
        assert_eq!(times, [5_000; 3]);
        let plain = batch();
        assert!(!RecordBatchRef::parse(&plain).unwrap().is_log_append_time());
    }

    #[test]
    fn damage_and_lies_are_refused() {
        let bytes = batch();
        for cut in [0, 10, 60, bytes.len() - 1] {
            assert!(RecordBatchRef::parse(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(matches!(RecordBatchRef::parse(&flipped), Err(InvalidBatch::Crc { .. })));
        let mut magic = bytes.clone();
        magic[MAGIC_AT] = 1;
        assert_eq!(RecordBatchRef::parse(&magic), Err(InvalidBatch::Magic(1)));
        // A record count past the last offset delta, its CRC made right again.
        let mut counts = bytes.clone();
        counts[RECORDS_COUNT_AT..RECORDS_COUNT_AT + 4].copy_from_slice(&9i32.to_be_bytes());
        let crc = crc32c::crc32c(&counts[ATTRIBUTES_AT..]);
        counts[CRC_AT..ATTRIBUTES_AT].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(RecordBatchRef::parse(&counts), Err(InvalidBatch::Counts { .. })));
        // A count below the records present leaves bytes over.
        let mut fewer = bytes.clone();
        fewer[RECORDS_COUNT_AT..RECORDS_COUNT_AT + 4].copy_from_slice(&2i32.to_be_bytes());
        let crc = crc32c::crc32c(&fewer[ATTRIBUTES_AT..]);
        fewer[CRC_AT..ATTRIBUTES_AT].copy_from_slice(&crc.to_be_bytes());
        let records = RecordBatchRef::parse(&fewer).unwrap().records(1 << 20).unwrap();
        assert!(records.iter().any(|r| r.is_err()));
    }

    #[test]
    fn a_batch_built_compressed_reads_back_as_built() {
        for codec in [Codec::Gzip, Codec::Lz4, Codec::Zstd] {
            let mut builder = RecordBatchBuilder::new(0).with_producer(9, 1, 30);
            for i in 0..50i64 {
                builder.push(i, 1_000 + i, None, Some(format!("value {i}").as_bytes()), &[]);
            }
            let bytes = builder.finish_compressed(codec).unwrap();
            let parsed = RecordBatchRef::parse(&bytes).unwrap();
            assert_eq!(parsed.codec(), Some(codec));
            assert_eq!((parsed.producer_id(), parsed.base_sequence()), (9, 30));
            let records = parsed.records(1 << 20).unwrap();
            let values: Vec<Vec<u8>> =
                records.iter().map(|r| r.unwrap().value.unwrap().to_vec()).collect();
            assert_eq!(values.len(), 50);
            assert_eq!(values[49], b"value 49");
        }
    }

    #[test]
    fn compressed_records_are_inflated() {
        let plain = batch();
        let parsed = RecordBatchRef::parse(&plain).unwrap();
        let records = &plain[RECORD_BATCH_HEADER_BYTES..];
        let packed = compression::compress(Codec::Lz4, records).unwrap();
        let mut bytes = plain[..RECORD_BATCH_HEADER_BYTES].to_vec();
        bytes.extend_from_slice(&packed);
        let length = (bytes.len() - LEADER_EPOCH_AT) as i32;
        bytes[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4].copy_from_slice(&length.to_be_bytes());
        bytes[ATTRIBUTES_AT..ATTRIBUTES_AT + 2]
            .copy_from_slice(&(Codec::Lz4.attributes() as i16).to_be_bytes());
        let crc = crc32c::crc32c(&bytes[ATTRIBUTES_AT..]);
        bytes[CRC_AT..ATTRIBUTES_AT].copy_from_slice(&crc.to_be_bytes());
        let compressed = RecordBatchRef::parse(&bytes).unwrap();
        assert_eq!(compressed.codec(), Some(Codec::Lz4));
        let inflated = compressed.records(1 << 20).unwrap();
        assert_eq!(inflated.bytes(), parsed.records(1 << 20).unwrap().bytes());
        assert!(compressed.records(10).is_err(), "bounded");
    }
}
