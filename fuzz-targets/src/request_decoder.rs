//! Any bytes after a frame's size field: decoding never panics, and what decodes re-encodes
//! to the same bytes.

use bytes::{Bytes, BytesMut};
use protocol::Request;

/// One input.
pub fn check(data: &[u8]) {
    let Ok(request) = Request::decode(Bytes::copy_from_slice(data)) else { return };
    let mut buf = BytesMut::new();
    request.encode(&mut buf).expect("a decoded request fits the wire");
    assert_eq!(&buf[4..], data, "decode then encode is the identity");
    if let Request::Produce(p) = &request {
        let _ = protocol::validate_message_set(&p.messages, 1 << 20);
    }
}
