//! One spooled event on disk, big-endian like the rest of Tributary:
//!
//! ```text
//! u32 length   bytes after the crc
//! u32 crc      CRC-32 (IEEE) of every byte after this field
//! u64 seq      position in the spool, contiguous across segments
//! i64 time_ms  the event's header.time, for the audit
//! u16 topic_len, topic
//! payload      the event envelope as shipped
//! ```

use std::io::{self, Read};
use std::sync::Arc;

use bytes::Bytes;

/// Bytes before the payload besides the topic: length, crc, seq, time, topic length.
pub const RECORD_OVERHEAD_BYTES: usize = 4 + 4 + 8 + 8 + 2;
/// Largest `length` read back; anything larger is corruption, not an event.
pub const RECORD_BYTES_MAX: usize = 64 << 20;

/// A spooled event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoolRecord {
    pub seq: u64,
    pub time_ms: i64,
    pub topic: Arc<str>,
    pub payload: Bytes,
}

impl SpoolRecord {
    pub fn size_bytes(&self) -> usize {
        encoded_size(&self.topic, &self.payload)
    }
}

pub fn encoded_size(topic: &str, payload: &[u8]) -> usize {
    RECORD_OVERHEAD_BYTES + topic.len() + payload.len()
}

/// Appends one record to `out`.
pub fn encode(out: &mut Vec<u8>, seq: u64, time_ms: i64, topic: &str, payload: &[u8]) {
    let start = out.len();
    let length = encoded_size(topic, payload) - 8;
    out.extend_from_slice(&(length as u32).to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&time_ms.to_be_bytes());
    out.extend_from_slice(&(topic.len() as u16).to_be_bytes());
    out.extend_from_slice(topic.as_bytes());
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
}

/// What reading the next record found.
#[derive(Debug)]
pub enum Next {
    Record(SpoolRecord),
    /// Clean end: no byte of another record.
    End,
    /// A torn or corrupt record (a crash mid-write, or damage): what was wrong.
    Invalid(&'static str),
}

/// Reads the next record from `input`. `topics` interns topic names so that records of one
/// topic share one allocation.
pub fn read(input: &mut impl Read, topics: &mut Vec<Arc<str>>) -> io::Result<Next> {
    let mut head = [0u8; 8];
    match read_full(input, &mut head)? {
        0 => return Ok(Next::End),
        8 => {}
        _ => return Ok(Next::Invalid("truncated record header")),
    }
    let [l0, l1, l2, l3, c0, c1, c2, c3] = head;
    let length = u32::from_be_bytes([l0, l1, l2, l3]) as usize;
    let crc = u32::from_be_bytes([c0, c1, c2, c3]);
    if !(RECORD_OVERHEAD_BYTES - 8..=RECORD_BYTES_MAX).contains(&length) {
        return Ok(Next::Invalid("record length out of range"));
    }
    let mut body = vec![0u8; length];
    if read_full(input, &mut body)? != length {
        return Ok(Next::Invalid("truncated record"));
    }
    if crc32fast::hash(&body) != crc {
        return Ok(Next::Invalid("record checksum mismatch"));
    }
    let (Some(seq), Some(time_ms), Some(topic_len)) =
        (protocol::u64_at(&body, 0), protocol::i64_at(&body, 8), protocol::u16_at(&body, 16))
    else {
        return Ok(Next::Invalid("record shorter than its header"));
    };
    let topic_len = usize::from(topic_len);
    let Some(topic) = body.get(18..18 + topic_len) else {
        return Ok(Next::Invalid("topic longer than the record"));
    };
    let Ok(topic) = std::str::from_utf8(topic) else {
        return Ok(Next::Invalid("topic is not UTF-8"));
    };
    let topic = match topics.iter().find(|t| &***t == topic) {
        Some(t) => Arc::clone(t),
        None => {
            let t: Arc<str> = Arc::from(topic);
            if topics.len() < 1024 {
                topics.push(Arc::clone(&t));
            }
            t
        }
    };
    let payload = Bytes::from(body).slice(18 + topic_len..);
    Ok(Next::Record(SpoolRecord { seq, time_ms, topic, payload }))
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damage_is_detected() {
        let mut buf = Vec::new();
        encode(&mut buf, 7, 1_700, "page-view", b"abc");
        encode(&mut buf, 8, 1_701, "click", b"");
        let mut topics = Vec::new();
        let mut input = &buf[..];
        let Next::Record(first) = read(&mut input, &mut topics).unwrap() else { panic!() };
        assert_eq!(
            (first.seq, first.time_ms, &*first.topic, &first.payload[..]),
            (7, 1_700, "page-view", &b"abc"[..])
        );
        assert_eq!(first.size_bytes(), buf.len() - encoded_size("click", b""));
        let Next::Record(second) = read(&mut input, &mut topics).unwrap() else { panic!() };
        assert_eq!(second.seq, 8);
        assert!(matches!(read(&mut input, &mut topics).unwrap(), Next::End));

        let mut torn = &buf[..buf.len() - 1];
        read(&mut torn, &mut topics).unwrap();
        assert!(matches!(read(&mut torn, &mut topics).unwrap(), Next::Invalid("truncated record")));
        let mut flipped = buf.clone();
        flipped[20] ^= 1;
        assert!(matches!(
            read(&mut &flipped[..], &mut topics).unwrap(),
            Next::Invalid("record checksum mismatch")
        ));
    }
}
