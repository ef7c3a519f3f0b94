//! A schema as the registry keeps it: the parsed Avro schema and the canonical text that
//! decides whether two registrations are "the same schema" (and so share one global id).

use std::sync::Arc;

use apache_avro::Schema;

use crate::error::RegistryError;

/// A parsed, validated Avro schema and its canonical text.
#[derive(Debug, Clone)]
pub struct ParsedSchema {
    /// Compact JSON re-serialised from the parsed schema: names fully qualified, whitespace
    /// and attribute order normalised. Two texts with the same canonical form get one id.
    ///
    /// This is not Avro's Parsing Canonical Form, which strips field defaults, aliases and the
    /// enum default: those change schema resolution, so schemas that differ in them must not
    /// share an id (Confluent dedupes the same way).
    pub canonical: Arc<str>,
    pub schema: Arc<Schema>,
}

/// Parses `text` as an Avro schema. Every failure is an `InvalidSchema` (Confluent 42201).
pub fn parse(text: &str) -> Result<ParsedSchema, RegistryError> {
    if text.trim().is_empty() {
        return Err(RegistryError::InvalidSchema("empty schema".to_owned()));
    }
    let schema =
        Schema::parse_str(text).map_err(|e| RegistryError::InvalidSchema(e.to_string()))?;
    let canonical = canonical_text(&schema)?;
    // The log stores the canonical text and replays it on start: a schema whose canonical
    // text does not parse back to itself could be acknowledged and then fail the restart.
    let reparsed = Schema::parse_str(&canonical).map_err(|e| {
        RegistryError::InvalidSchema(format!("schema does not survive canonicalisation: {e}"))
    })?;
    if canonical_text(&reparsed)? != canonical {
        return Err(RegistryError::InvalidSchema(
            "schema does not survive canonicalisation".to_owned(),
        ));
    }
    Ok(ParsedSchema { canonical: canonical.into(), schema: Arc::new(schema) })
}

fn canonical_text(schema: &Schema) -> Result<String, RegistryError> {
    serde_json::to_string(schema)
        .map_err(|e| RegistryError::InvalidSchema(format!("cannot serialise schema: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_and_attribute_order_do_not_change_the_canonical_form() {
        let a = parse(
            r#"{"type":"record","name":"r","namespace":"n","fields":[{"name":"a","type":"long"}]}"#,
        )
        .unwrap();
        let b = parse(
            r#"{ "fields" : [ { "type" : "long", "name" : "a" } ],
                 "name" : "n.r", "type" : "record" }"#,
        )
        .unwrap();
        assert_eq!(a.canonical, b.canonical);
    }

    #[test]
    fn a_field_default_changes_the_canonical_form() {
        let a =
            parse(r#"{"type":"record","name":"r","fields":[{"name":"a","type":"long"}]}"#).unwrap();
        let b = parse(
            r#"{"type":"record","name":"r","fields":[{"name":"a","type":"long","default":1}]}"#,
        )
        .unwrap();
        assert_ne!(a.canonical, b.canonical);
    }

    #[test]
    fn rejects_what_is_not_avro() {
        for text in ["", "   ", "{", r#"{"type":"nope"}"#, r#""undefined.Name""#, "42"] {
            assert!(
                matches!(parse(text), Err(RegistryError::InvalidSchema(_))),
                "{text:?} was accepted"
            );
        }
    }
}
