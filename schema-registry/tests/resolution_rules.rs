//! The Avro specification's schema-resolution rules, one by one, on the reader/writer check.

use apache_avro::Schema;
use schema_registry::resolution::{IncompatibilityKind, incompatibilities};
use serde_json::{Value, json};

fn schema(v: Value) -> Schema {
    Schema::parse_str(&v.to_string()).unwrap()
}

/// The kinds of incompatibility found when `reader` reads `writer`'s data.
fn kinds(reader: Value, writer: Value) -> Vec<IncompatibilityKind> {
    incompatibilities(&schema(reader), &schema(writer)).into_iter().map(|i| i.kind).collect()
}

fn can_read(reader: Value, writer: Value) -> bool {
    kinds(reader, writer).is_empty()
}

#[test]
fn primitives_read_themselves_and_promote_only_upwards() {
    let primitives = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"];
    let promotions = [
        ("long", "int"),
        ("float", "int"),
        ("double", "int"),
        ("float", "long"),
        ("double", "long"),
        ("double", "float"),
        ("bytes", "string"),
        ("string", "bytes"),
    ];
    for reader in primitives {
        for writer in primitives {
            let expected = reader == writer || promotions.contains(&(reader, writer));
            assert_eq!(can_read(json!(reader), json!(writer)), expected, "{reader} reads {writer}");
        }
    }
}

#[test]
fn logical_types_resolve_as_their_underlying_type() {
    let date = json!({ "type": "int", "logicalType": "date" });
    let ts = json!({ "type": "long", "logicalType": "timestamp-millis" });
    assert!(can_read(json!("int"), date.clone()));
    assert!(can_read(ts.clone(), date));
    assert!(can_read(json!("long"), ts.clone()));
    assert!(!can_read(json!("int"), ts));
}

#[test]
fn reader_fields_need_a_writer_field_or_a_default() {
    let writer =
        json!({ "type": "record", "name": "R", "fields": [{ "name": "a", "type": "int" }] });
    let reader = |extra: Value| json!({ "type": "record", "name": "R", "fields": [{ "name": "a", "type": "int" }, extra] });
    assert!(can_read(reader(json!({ "name": "b", "type": "int", "default": 1 })), writer.clone()));
    assert!(can_read(
        reader(json!({ "name": "b", "type": ["null", "int"], "default": null })),
        writer.clone()
    ));
    assert_eq!(
        kinds(reader(json!({ "name": "b", "type": "int" })), writer.clone()),
        [IncompatibilityKind::ReaderFieldMissingDefaultValue]
    );
    // A writer field the reader does not name is skipped.
    assert!(can_read(json!({ "type": "record", "name": "R", "fields": [] }), writer));
}

#[test]
fn field_aliases_match_renamed_writer_fields() {
    let writer =
        json!({ "type": "record", "name": "R", "fields": [{ "name": "old", "type": "int" }] });
    let renamed = json!({ "type": "record", "name": "R",
        "fields": [{ "name": "new", "type": "long", "aliases": ["old"] }] });
    assert!(can_read(renamed, writer.clone()));
    let unaliased =
        json!({ "type": "record", "name": "R", "fields": [{ "name": "new", "type": "long" }] });
    assert!(!can_read(unaliased, writer));
}

#[test]
fn named_types_match_by_unqualified_name_or_reader_alias() {
    let writer = json!({ "type": "fixed", "name": "a.F", "size": 4 });
    assert!(can_read(json!({ "type": "fixed", "name": "b.F", "size": 4 }), writer.clone()));
    assert_eq!(
        kinds(json!({ "type": "fixed", "name": "G", "size": 4 }), writer.clone()),
        [IncompatibilityKind::NameMismatch]
    );
    assert!(can_read(
        json!({ "type": "fixed", "name": "G", "size": 4, "aliases": ["a.F"] }),
        writer.clone()
    ));
    assert_eq!(
        kinds(json!({ "type": "fixed", "name": "F", "size": 8 }), writer),
        [IncompatibilityKind::FixedSizeMismatch]
    );
    let rec = |name: &str| json!({ "type": "record", "name": name, "fields": [] });
    assert!(!can_read(rec("A"), rec("B")));
    assert!(can_read(
        json!({ "type": "record", "name": "A", "aliases": ["B"], "fields": [] }),
        rec("B")
    ));
}

#[test]
fn enums_need_every_writer_symbol_unless_the_reader_has_a_default() {
    let e = |symbols: &[&str]| json!({ "type": "enum", "name": "E", "symbols": symbols });
    assert!(can_read(e(&["A", "B", "C"]), e(&["A", "B"])));
    assert_eq!(kinds(e(&["A"]), e(&["A", "B"])), [IncompatibilityKind::MissingEnumSymbols]);
    let with_default =
        json!({ "type": "enum", "name": "E", "symbols": ["A", "Z"], "default": "Z" });
    assert!(can_read(with_default, e(&["A", "B"])));
}

#[test]
fn unions_resolve_branch_by_branch() {
    // Reader union: some branch must read the writer's type (here by promotion).
    assert!(can_read(json!(["null", "long"]), json!("int")));
    assert_eq!(
        kinds(json!(["null", "string"]), json!("int")),
        [IncompatibilityKind::MissingUnionBranch]
    );
    // Writer union: every branch must be readable.
    assert!(can_read(json!(["null", "string", "int"]), json!(["null", "int"])));
    assert!(!can_read(json!(["null", "int"]), json!(["null", "int", "string"])));
    // Writer union, reader not a union: each writer branch must resolve to the reader.
    assert!(can_read(json!("long"), json!(["int", "long"])));
    assert!(!can_read(json!("long"), json!(["null", "long"])));
}

#[test]
fn arrays_and_maps_resolve_their_items_and_values() {
    let array = |items: &str| json!({ "type": "array", "items": items });
    let map = |values: &str| json!({ "type": "map", "values": values });
    assert!(can_read(array("long"), array("int")));
    assert!(!can_read(array("int"), array("long")));
    assert!(can_read(map("double"), map("float")));
    assert!(!can_read(map("string"), map("int")));
    assert!(!can_read(array("int"), map("int")));
}

#[test]
fn recursive_schemas_terminate_and_are_checked() {
    let list = |value_type: &str, extra: Option<Value>| {
        let mut fields = vec![
            json!({ "name": "value", "type": value_type }),
            json!({ "name": "next", "type": ["null", "Node"], "default": null }),
        ];
        fields.extend(extra);
        json!({ "type": "record", "name": "Node", "fields": fields })
    };
    assert!(can_read(list("long", None), list("int", None)));
    assert!(!can_read(list("int", None), list("long", None)));
    assert!(!can_read(
        list("int", Some(json!({ "name": "extra", "type": "int" }))),
        list("int", None)
    ));
}

#[test]
fn incompatibilities_name_their_path() {
    let writer = json!({ "type": "record", "name": "R", "fields": [
        { "name": "a", "type": "int" },
        { "name": "xs", "type": { "type": "array", "items": "string" } }
    ]});
    let reader = json!({ "type": "record", "name": "R", "fields": [
        { "name": "a", "type": "int" },
        { "name": "xs", "type": { "type": "array", "items": "int" } }
    ]});
    let found = incompatibilities(&schema(reader), &schema(writer));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].path, "/fields/1/type/items");
    assert!(found[0].to_string().contains("TYPE_MISMATCH"));
}

#[test]
fn a_crafted_exponential_schema_is_refused_not_computed() {
    // Each level references the one below twice, so a naive check visits 2^depth pairs.
    let depth = 40;
    let mut fields = json!([{ "name": "leaf", "type": "int" }]);
    let mut types = Vec::new();
    for level in 0..depth {
        let name = format!("L{level}");
        types.push(json!({ "type": "record", "name": name.clone(), "fields": fields }));
        fields = json!([{ "name": "l", "type": name.clone() }, { "name": "r", "type": name }]);
    }
    // Define every level inline, innermost first, through a wrapper record.
    let mut wrapper_fields = Vec::new();
    for (i, t) in types.into_iter().enumerate() {
        wrapper_fields.push(json!({ "name": format!("f{i}"), "type": t }));
    }
    let writer = json!({ "type": "record", "name": "W", "fields": wrapper_fields });
    let mut reader = writer.clone();
    // The reader's innermost record gains a required field: every path leads there.
    reader["fields"][0]["type"]["fields"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "name": "new", "type": "int" }));
    let started = std::time::Instant::now();
    let found = kinds(reader, writer);
    assert!(!found.is_empty());
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}
