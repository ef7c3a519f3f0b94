//! Any bytes as a MessageSet: validation and iteration never panic and agree with each other.

use protocol::{MessageSetIter, validate_message_set};

/// One input.
pub fn check(data: &[u8]) {
    let valid = validate_message_set(data, 1 << 20);
    let mut iter = MessageSetIter::new(data, 0);
    let mut count = 0;
    let mut clean = true;
    for item in iter.by_ref() {
        match item {
            Ok((offset, message)) => {
                assert!(offset >= 0 && (offset as usize) + message.size_bytes() <= data.len());
                count += 1;
            }
            Err(_) => clean = false,
        }
    }
    if let Ok(summary) = valid {
        assert!(clean && iter.remainder().is_empty());
        assert_eq!(summary.messages, count);
    }
}
