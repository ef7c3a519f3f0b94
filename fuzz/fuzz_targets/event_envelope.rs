//! Any bytes as an event payload: splitting the envelope and reading the header without the
//! schema never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use schema_registry::envelope::{EventHeader, split};

fuzz_target!(|data: &[u8]| {
    if let Ok((_, datum)) = split(data) {
        assert!(datum.len() + 5 <= data.len());
    }
    let _ = EventHeader::read(data);
});
