//! Any bytes as an event payload: splitting the envelope and reading the header without the
//! schema never panic.

use events::envelope::{EventHeader, header_time, split};

/// One input.
pub fn check(data: &[u8]) {
    if let Ok((_, datum)) = split(data) {
        assert!(datum.len() + 5 <= data.len());
    }
    let header = EventHeader::read(data);
    if let Ok((_, header)) = header {
        assert_eq!(header_time(data), Some(header.time));
    }
}
