//! Topic names: the one rule that keeps every partition directory inside `data_dir`.

use thiserror::Error;

/// Longest topic name accepted.
pub const TOPIC_NAME_BYTES_MAX: usize = 249;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "invalid topic name {name:?}: topics match [A-Za-z0-9._-]{{1,249}} and are not '.' or '..'"
)]
pub struct InvalidTopicName {
    pub name: String,
}

/// Checks `name` against `[A-Za-z0-9._-]{1,249}`, excluding `.` and `..`.
pub fn validate_topic_name(name: &str) -> Result<(), InvalidTopicName> {
    let valid = !name.is_empty()
        && name.len() <= TOPIC_NAME_BYTES_MAX
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid { Ok(()) } else { Err(InvalidTopicName { name: name.to_owned() }) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_kafka_style_names() {
        for name in ["page-views", "a", "_audit", "x.y_z-1", &"t".repeat(249)] {
            assert!(validate_topic_name(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn rejects_paths_and_odd_characters() {
        for name in ["", ".", "..", "../etc", "a/b", "a b", "ü", "a\0", &"t".repeat(250)] {
            assert!(validate_topic_name(name).is_err(), "{name:?}");
        }
    }
}
