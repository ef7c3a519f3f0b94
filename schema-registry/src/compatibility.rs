//! Compatibility levels: which earlier versions of a subject a new schema is checked against,
//! and in which direction the resolution rules are applied.

use std::fmt;
use std::str::FromStr;

use apache_avro::Schema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::resolution::incompatibilities;

/// A subject's (or the registry's global) compatibility level, spelled as Confluent spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CompatibilityLevel {
    /// No check.
    None,
    /// The new schema can read data written with the latest version (consumers upgrade first).
    #[default]
    Backward,
    /// … with every earlier version.
    BackwardTransitive,
    /// The latest version can read data written with the new schema (producers upgrade first).
    Forward,
    /// … every earlier version can.
    ForwardTransitive,
    /// Backward and forward against the latest version.
    Full,
    /// Backward and forward against every earlier version.
    FullTransitive,
}

impl CompatibilityLevel {
    pub const ALL: [CompatibilityLevel; 7] = [
        CompatibilityLevel::None,
        CompatibilityLevel::Backward,
        CompatibilityLevel::BackwardTransitive,
        CompatibilityLevel::Forward,
        CompatibilityLevel::ForwardTransitive,
        CompatibilityLevel::Full,
        CompatibilityLevel::FullTransitive,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CompatibilityLevel::None => "NONE",
            CompatibilityLevel::Backward => "BACKWARD",
            CompatibilityLevel::BackwardTransitive => "BACKWARD_TRANSITIVE",
            CompatibilityLevel::Forward => "FORWARD",
            CompatibilityLevel::ForwardTransitive => "FORWARD_TRANSITIVE",
            CompatibilityLevel::Full => "FULL",
            CompatibilityLevel::FullTransitive => "FULL_TRANSITIVE",
        }
    }

    /// Whether a new schema is checked against every live version, not only the latest.
    pub fn is_transitive(self) -> bool {
        matches!(
            self,
            CompatibilityLevel::BackwardTransitive
                | CompatibilityLevel::ForwardTransitive
                | CompatibilityLevel::FullTransitive
        )
    }

    fn checks_backward(self) -> bool {
        matches!(
            self,
            CompatibilityLevel::Backward
                | CompatibilityLevel::BackwardTransitive
                | CompatibilityLevel::Full
                | CompatibilityLevel::FullTransitive
        )
    }

    fn checks_forward(self) -> bool {
        matches!(
            self,
            CompatibilityLevel::Forward
                | CompatibilityLevel::ForwardTransitive
                | CompatibilityLevel::Full
                | CompatibilityLevel::FullTransitive
        )
    }
}

impl fmt::Display for CompatibilityLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A compatibility level name that is none of Confluent's; the registry answers it as
/// [`crate::RegistryError::InvalidCompatibilityLevel`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "Invalid compatibility level '{0}'. Valid values are none, backward, forward, full, backward_transitive, forward_transitive, and full_transitive"
)]
pub struct InvalidLevel(pub String);

impl FromStr for CompatibilityLevel {
    type Err = InvalidLevel;

    /// Case-insensitive, as Confluent accepts `backward` as well as `BACKWARD`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CompatibilityLevel::ALL
            .into_iter()
            .find(|level| level.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| InvalidLevel(s.to_owned()))
    }
}

impl<'de> Deserialize<'de> for CompatibilityLevel {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// An earlier version of a subject that a new schema is checked against.
pub struct Previous<'a> {
    pub version: i32,
    pub schema: &'a Schema,
    pub canonical: &'a str,
}

/// Checks `new` against `previous` (oldest first) under `level`: the latest version only, or
/// every one for a transitive level. Returns Confluent-style messages; empty means compatible.
pub fn check(level: CompatibilityLevel, new: &Schema, previous: &[Previous<'_>]) -> Vec<String> {
    let against = if level.is_transitive() {
        previous
    } else {
        previous.last().map(std::slice::from_ref).unwrap_or_default()
    };
    let mut messages = Vec::new();
    for old in against {
        let mut problems = Vec::new();
        if level.checks_backward() {
            problems.extend(incompatibilities(new, old.schema));
        }
        if level.checks_forward() {
            problems.extend(incompatibilities(old.schema, new));
        }
        if !problems.is_empty() {
            messages.extend(problems.iter().map(ToString::to_string));
            messages.push(format!("{{oldSchemaVersion: {}}}", old.version));
            messages.push(format!("{{oldSchema: '{}'}}", old.canonical));
            messages.push(format!("{{compatibility: '{level}'}}"));
        }
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_names_parse_in_any_case_and_round_trip() {
        for level in CompatibilityLevel::ALL {
            assert_eq!(level.as_str().parse::<CompatibilityLevel>().unwrap(), level);
            let lower = level.as_str().to_ascii_lowercase();
            assert_eq!(lower.parse::<CompatibilityLevel>().unwrap(), level);
            let json = serde_json::to_string(&level).unwrap();
            assert_eq!(json, format!("\"{}\"", level.as_str()));
        }
        assert!(matches!("SIDEWAYS".parse::<CompatibilityLevel>(), Err(InvalidLevel(_))));
    }
}
