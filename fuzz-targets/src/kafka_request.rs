//! Any bytes as a request frame on a broker's Kafka listener (after the size field): decoding
//! its header and body, for whatever API and version it names, never panics and never
//! allocates more than the frame's bytes can hold (an array's count cannot outrun them).

use bytes::Bytes;
use protocol::kafka::request::decode_frame;

/// One input.
pub fn check(data: &[u8]) {
    let _ = decode_frame(Bytes::copy_from_slice(data));
}
