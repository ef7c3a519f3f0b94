//! One segment file, `{base_offset:020}.log`: a run of the partition's log starting at
//! `base_offset`. Only the last segment of a partition is written to.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use protocol::Codec;

/// Suffix of segment file names.
pub const SEGMENT_SUFFIX: &str = ".log";

/// An open segment. Readers hold an `Arc<Segment>`, so a fetch keeps reading a segment that
/// retention has just unlinked.
#[derive(Debug)]
pub struct Segment {
    pub base_offset: u64,
    pub path: PathBuf,
    pub file: File,
    /// When this process opened or created it, for `segment_ms`.
    pub opened_at: Instant,
}

impl Segment {
    pub fn file_name(base_offset: u64) -> String {
        format!("{base_offset:020}{SEGMENT_SUFFIX}")
    }

    /// The base offset named by a segment file name, if it is one.
    pub fn parse_file_name(name: &str) -> Option<u64> {
        let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
        if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    }

    /// Creates a new, empty segment; fails if the file exists.
    pub fn create(dir: &Path, base_offset: u64) -> io::Result<Segment> {
        let path = dir.join(Segment::file_name(base_offset));
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
        Ok(Segment { base_offset, path, file, opened_at: Instant::now() })
    }

    pub fn open(dir: &Path, base_offset: u64) -> io::Result<Segment> {
        let path = dir.join(Segment::file_name(base_offset));
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        Ok(Segment { base_offset, path, file, opened_at: Instant::now() })
    }

    pub fn file_len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    pub fn modified(&self) -> io::Result<SystemTime> {
        self.file.metadata()?.modified()
    }
}

/// What recovery found at the end of a segment's valid messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanResult {
    /// Bytes of whole, valid messages from the start of the file.
    pub valid_bytes: u64,
    pub messages: u64,
    /// Why scanning stopped before the end of the file, if it did.
    pub stopped_because: Option<String>,
}

/// Reads a segment from the start and finds where its valid messages end: the first partial
/// (torn) or invalid (bad length, CRC, magic or codec) message, or the end of the file.
///
/// The CRC is computed while streaming through a fixed buffer, so a corrupt length field
/// never makes this allocate; it is only trusted as far as the file actually reaches.
pub fn scan_valid_prefix(file: &File, file_len: u64) -> io::Result<ScanResult> {
    const HEADER_BYTES: u64 = 8;
    // Positional reads: the file's cursor is shared by every handle of an open segment.
    let mut reader = BufReader::with_capacity(1 << 20, PositionalReader { file, position: 0 });
    let mut chunk = vec![0u8; 64 << 10];
    let mut position = 0u64;
    let mut messages = 0u64;
    let stop = |reason: String, position, messages| {
        Ok(ScanResult { valid_bytes: position, messages, stopped_because: Some(reason) })
    };
    loop {
        let left = file_len - position;
        if left == 0 {
            return Ok(ScanResult { valid_bytes: position, messages, stopped_because: None });
        }
        if left < HEADER_BYTES {
            return stop(format!("partial message header ({left} bytes)"), position, messages);
        }
        let (mut length, mut stored_crc) = ([0u8; 4], [0u8; 4]);
        reader.read_exact(&mut length)?;
        reader.read_exact(&mut stored_crc)?;
        let (length, stored_crc) =
            (u64::from(u32::from_be_bytes(length)), u32::from_be_bytes(stored_crc));
        if length < 5 {
            return stop(format!("length {length} below the minimum of 5"), position, messages);
        }
        if length > left - 4 {
            let reason = format!("torn message: length {length} but {} bytes left", left - 4);
            return stop(reason, position, messages);
        }
        // The first chunk holds the magic byte and, for magic 1, the attributes byte.
        let mut crc = crc32fast::Hasher::new();
        let mut head: Option<(u8, Option<u8>)> = None;
        let mut body_left = length - 4;
        while body_left > 0 {
            let n = body_left.min(chunk.len() as u64) as usize;
            reader.read_exact(&mut chunk[..n])?;
            head.get_or_insert((chunk[0], chunk[..n].get(1).copied()));
            crc.update(&chunk[..n]);
            body_left -= n as u64;
        }
        let computed = crc.finalize();
        if computed != stored_crc {
            let reason =
                format!("CRC mismatch (stored {stored_crc:#010x}, computed {computed:#010x})");
            return stop(reason, position, messages);
        }
        let valid_head = match head {
            // A magic-2 message's batch was checked whole when it was appended; its CRC-32
            // above covers every byte of it since.
            Some((protocol::MAGIC_PLAIN | protocol::MAGIC_BATCH, _)) => true,
            Some((protocol::MAGIC_ATTRIBUTES, Some(attributes))) => {
                Codec::from_attributes(attributes).is_some()
            }
            // A gap the cleaner left: its flags byte, then its record count, then zeros.
            Some((protocol::MAGIC_GAP, Some(_))) => {
                length as usize + 4 >= protocol::GAP_HEADER_BYTES
            }
            _ => false,
        };
        if !valid_head {
            return stop(format!("invalid magic or attributes {head:?}"), position, messages);
        }
        position += 4 + length;
        messages += 1;
    }
}

/// Reads a file from a position of its own, never moving the file's shared cursor.
struct PositionalReader<'a> {
    file: &'a File,
    position: u64,
}

impl Read for PositionalReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = std::os::unix::fs::FileExt::read_at(self.file, buf, self.position)?;
        self.position += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn names_are_twenty_digit_base_offsets() {
        assert_eq!(Segment::file_name(48), "00000000000000000048.log");
        assert_eq!(Segment::parse_file_name("00000000000000000048.log"), Some(48));
        assert_eq!(Segment::parse_file_name("48.log"), None);
        assert_eq!(Segment::parse_file_name("0000000000000000004x.log"), None);
        assert_eq!(Segment::parse_file_name("00000000000000000048.idx"), None);
    }

    #[test]
    fn scan_stops_at_torn_and_corrupt_tails() {
        let mut set = Vec::new();
        for p in [&b"alpha"[..], b"beta", b"gamma"] {
            protocol::encode_message(&mut set, Codec::None, p);
        }
        let dir = tempfile::tempdir().unwrap();
        let scan = |bytes: &[u8]| {
            let path = dir.path().join("s.log");
            File::create(&path).unwrap().write_all(bytes).unwrap();
            let f = File::open(&path).unwrap();
            let first = scan_valid_prefix(&f, bytes.len() as u64).unwrap();
            assert_eq!(scan_valid_prefix(&f, bytes.len() as u64).unwrap(), first, "again");
            first
        };
        let whole = scan(&set);
        assert_eq!((whole.valid_bytes, whole.messages, whole.stopped_because), (41, 3, None));
        let torn = scan(&set[..40]);
        assert_eq!((torn.valid_bytes, torn.messages), (27, 2));
        assert!(torn.stopped_because.unwrap().contains("torn"));
        let mut corrupt = set.clone();
        corrupt[20] ^= 1;
        let bad = scan(&corrupt);
        assert_eq!((bad.valid_bytes, bad.messages), (14, 1));
        assert!(bad.stopped_because.unwrap().contains("CRC"));
    }
}
