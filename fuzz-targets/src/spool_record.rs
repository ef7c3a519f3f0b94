//! Any bytes as the agent's spool file: reading records never panics and ends at a clean end
//! or an invalid record; every record read encodes back to the bytes it was read from.

use std::sync::Arc;

use frontend_agent::spool::record::{Next, encode, encoded_size, read};

/// One input.
pub fn check(data: &[u8]) {
    let mut input = data;
    let mut topics: Vec<Arc<str>> = Vec::new();
    let mut consumed = 0;
    loop {
        let before = input.len();
        match read(&mut input, &mut topics) {
            Ok(Next::Record(record)) => {
                let size = before - input.len();
                let mut again = Vec::new();
                encode(&mut again, record.seq, record.time_ms, &record.topic, &record.payload);
                assert_eq!(again.len(), encoded_size(&record.topic, &record.payload));
                assert_eq!(&again[..], &data[consumed..consumed + size], "a record re-encodes");
                consumed += size;
            }
            Ok(Next::End | Next::Invalid(_)) | Err(_) => break,
        }
    }
}
