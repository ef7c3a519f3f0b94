//! Wall-clock time as the pipeline counts it: milliseconds since the Unix epoch, and its UTC
//! calendar fields (through `chrono`, which the tree builds anyway for arrow).

use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Datelike, NaiveDate, Timelike};

/// A moment's UTC calendar fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Utc {
    pub year: i32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

impl Utc {
    /// The calendar fields of `ms` since the epoch (clamped to chrono's range, ±262,000 years).
    pub fn of_ms(ms: i64) -> Utc {
        let time = DateTime::from_timestamp_millis(ms).unwrap_or(if ms < 0 {
            DateTime::<chrono::Utc>::MIN_UTC
        } else {
            DateTime::<chrono::Utc>::MAX_UTC
        });
        Utc {
            year: time.year(),
            month: time.month(),
            day: time.day(),
            hour: time.hour(),
            minute: time.minute(),
            second: time.second(),
        }
    }

    /// Milliseconds since the epoch of a UTC date and hour; `None` if it is not a date.
    pub fn hour_start_ms(year: i32, month: u32, day: u32, hour: u32) -> Option<i64> {
        let time = NaiveDate::from_ymd_opt(year, month, day)?.and_hms_opt(hour, 0, 0)?;
        Some(time.and_utc().timestamp_millis())
    }
}

/// Milliseconds since the epoch of an RFC 3339 time such as `2026-12-01T10:00:00Z` (or with
/// an offset, `+02:00`).
pub fn parse_rfc3339_ms(text: &str) -> Result<i64, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|e| format!("{text:?} is not an RFC 3339 time (e.g. 2026-12-01T10:00:00Z): {e}"))
}

/// Milliseconds since the Unix epoch (0 for a clock set before it).
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_times_parse_to_ms_and_others_are_refused() {
        assert_eq!(super::parse_rfc3339_ms("1970-01-01T00:00:01Z"), Ok(1_000));
        assert_eq!(super::parse_rfc3339_ms("1970-01-01T01:00:00+01:00"), Ok(0));
        assert!(super::parse_rfc3339_ms("yesterday").unwrap_err().contains("RFC 3339"));
    }

    use super::*;

    #[test]
    fn now_is_after_2020() {
        assert!(now_ms() > 1_577_836_800_000);
    }

    #[test]
    fn calendar_fields_round_trip() {
        let t = Utc::of_ms(1_764_554_405_123); // 2025-12-01T02:00:05.123Z
        assert_eq!((t.year, t.month, t.day, t.hour, t.minute, t.second), (2025, 12, 1, 2, 0, 5));
        assert_eq!(Utc::hour_start_ms(2025, 12, 1, 2), Some(1_764_554_400_000));
        assert_eq!(Utc::of_ms(-1).year, 1969);
        assert_eq!(Utc::hour_start_ms(2025, 2, 30, 0), None, "not a date");
        assert_eq!(Utc::hour_start_ms(2025, 1, 1, 24), None);
    }
}
