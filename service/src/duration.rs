//! Durations written by people: a number **with a unit** — `500ms`, `30s`, `5m`, `1h`,
//! `1h 30m` (`humantime`'s forms). A bare number is an error that names the expected forms,
//! because `90` means seconds to one reader and milliseconds to the next. Settings whose
//! names end in `_ms` are whole milliseconds and do not use this.

use std::time::Duration;

/// Why a text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationError {
    #[error(
        "{text:?} is not a duration: {reason} (expected a number with a unit, e.g. 500ms, 30s, 5m, 1h)"
    )]
    Invalid { text: String, reason: String },
    #[error("{text:?}: the duration must be longer than zero")]
    Zero { text: String },
}

/// Parses a duration that carries its unit.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let trimmed = text.trim();
    humantime::parse_duration(trimmed)
        .map_err(|e| DurationError::Invalid { text: text.to_owned(), reason: e.to_string() })
}

/// [`parse`], refusing zero: for intervals and timeouts.
pub fn parse_positive(text: &str) -> Result<Duration, DurationError> {
    let duration = parse(text)?;
    if duration.is_zero() {
        return Err(DurationError::Zero { text: text.to_owned() });
    }
    Ok(duration)
}

/// The text itself, once checked to be a positive duration: for a flag passed on to a config
/// key that [`serde_text`] reads (`value_parser = service::duration::checked`).
pub fn checked(text: &str) -> Result<String, DurationError> {
    parse_positive(text).map(|_| text.to_owned())
}

/// A duration as [`parse`] reads it back: `1m 30s`, `250ms`.
pub fn format(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

/// `#[serde(with = "service::duration::serde_text")]` for a config key holding a duration with
/// its unit, e.g. `interval = "30s"`; zero is refused.
pub mod serde_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format(*duration))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(deserializer)?;
        super::parse_positive(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_is_required() {
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse(" 5m ").unwrap(), Duration::from_secs(300));
        assert_eq!(parse("1h 30m").unwrap(), Duration::from_secs(5400));
        let bare = parse("90").unwrap_err().to_string();
        assert!(bare.contains("\"90\"") && bare.contains("500ms, 30s, 5m, 1h"), "{bare}");
        assert!(parse("soon").is_err());
        assert!(parse("").is_err());
        assert!(parse("-5s").is_err());
    }

    #[test]
    fn zero_is_refused_where_a_positive_duration_is_needed() {
        assert_eq!(parse("0s").unwrap(), Duration::ZERO);
        assert!(matches!(parse_positive("0s"), Err(DurationError::Zero { .. })));
    }

    #[test]
    fn formatting_reads_back() {
        for d in [Duration::from_millis(250), Duration::from_secs(90), Duration::from_secs(7200)] {
            assert_eq!(parse(&format(d)).unwrap(), d);
        }
    }
}
