//! Big-endian primitives: a bounds-checked reader over a received body and the writers that
//! mirror it. Every length read from the wire is checked against the bytes actually present
//! before anything is allocated for it.

use bytes::{Buf, BufMut, Bytes};

use crate::DecodeError;

/// Bytes of the `u32 size` that starts every request and response frame.
pub const FRAME_SIZE_BYTES: usize = 4;

/// Reads primitives off a body, failing with [`DecodeError::Truncated`] instead of panicking.
pub(crate) struct Reader {
    buf: Bytes,
}

impl Reader {
    pub(crate) fn new(buf: Bytes) -> Reader {
        Reader { buf }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn need(&self, what: &'static str, n: usize) -> Result<(), DecodeError> {
        if self.buf.len() < n {
            Err(DecodeError::Truncated { what, needed: n - self.buf.len() })
        } else {
            Ok(())
        }
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        self.need(what, 1)?;
        Ok(self.buf.get_u8())
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        self.need(what, 2)?;
        Ok(self.buf.get_u16())
    }

    pub(crate) fn i16(&mut self, what: &'static str) -> Result<i16, DecodeError> {
        self.need(what, 2)?;
        Ok(self.buf.get_i16())
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        self.need(what, 4)?;
        Ok(self.buf.get_u32())
    }

    pub(crate) fn i32(&mut self, what: &'static str) -> Result<i32, DecodeError> {
        self.need(what, 4)?;
        Ok(self.buf.get_i32())
    }

    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64, DecodeError> {
        self.need(what, 8)?;
        Ok(self.buf.get_i64())
    }

    /// `n` bytes as a cheap slice of the received buffer (no copy).
    pub(crate) fn bytes(&mut self, what: &'static str, n: usize) -> Result<Bytes, DecodeError> {
        self.need(what, n)?;
        Ok(self.buf.split_to(n))
    }

    /// `str`: `u16` length, then that many bytes of UTF-8.
    pub(crate) fn str(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let len = usize::from(self.u16(what)?);
        let raw = self.bytes(what, len)?;
        String::from_utf8(raw.to_vec()).map_err(|_| DecodeError::InvalidUtf8 { what })
    }

    /// A capacity for `count` items of at least `item_bytes_min` each that the remaining bytes
    /// could actually hold, so a forged count cannot make us allocate.
    pub(crate) fn capacity_for(&self, count: usize, item_bytes_min: usize) -> usize {
        count.min(self.buf.len() / item_bytes_min.max(1))
    }

    /// Rest of the body, which must be empty.
    pub(crate) fn finish(self, what: &'static str) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes { what, extra: self.buf.len() })
        }
    }
}

/// The `N` bytes at `at` of `bytes`, if `bytes` holds them: how a fixed field is read out of a
/// borrowed buffer (a frame, a stored message, an index file) without a panic on a short one.
pub fn array_at<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at.checked_add(N)?)?.first_chunk::<N>().copied()
}

/// Big-endian integers at a byte position of a borrowed buffer; `None` past its end.
macro_rules! be_at {
    ($($name:ident: $int:ty),*) => {$(
        #[doc = concat!("The big-endian `", stringify!($int), "` at `at` of `bytes`, if it is there.")]
        pub fn $name(bytes: &[u8], at: usize) -> Option<$int> {
            array_at(bytes, at).map(<$int>::from_be_bytes)
        }
    )*};
}

be_at!(u16_at: u16, i16_at: i16, u32_at: u32, i32_at: i32, u64_at: u64, i64_at: i64);

/// Bytes a `str` takes on the wire.
pub(crate) fn str_len(s: &str) -> usize {
    2 + s.len()
}

/// Writes a `str`. Callers have checked that `s` fits in a `u16` length.
pub(crate) fn put_str(buf: &mut impl BufMut, s: &str) {
    debug_assert!(s.len() <= usize::from(u16::MAX));
    buf.put_u16(s.len() as u16);
    buf.put_slice(s.as_bytes());
}

/// Writes a frame's `u32 size`; `size` counts the bytes after it.
pub(crate) fn put_size(buf: &mut impl BufMut, size: usize) {
    debug_assert!(size <= u32::MAX as usize);
    buf.put_u32(size as u32);
}
