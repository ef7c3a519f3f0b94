//! Any bytes as the schema text of a registration (`POST /subjects/{s}/versions`, the
//! `"schema"` of its body): parsing never panics; a schema that parses has a canonical text
//! that parses to the same canonical text (the log replays it on start), and a schema is
//! compatible with itself at every level.

use schema_registry::CompatibilityLevel;
use schema_registry::compatibility::{self, Previous};
use schema_registry::schema::parse;

/// One input.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(parsed) = parse(text) else { return };
    let again = parse(&parsed.canonical).expect("a canonical text parses");
    assert_eq!(again.canonical, parsed.canonical);
    let previous = [Previous { version: 1, schema: &parsed.schema, canonical: &parsed.canonical }];
    for level in CompatibilityLevel::ALL {
        let problems = compatibility::check(level, &parsed.schema, &previous);
        assert!(
            problems.is_empty(),
            "{level:?}: {} against itself: {problems:?}",
            parsed.canonical
        );
    }
}
