//! Any bytes as the Avro datum of an event the loader reads (a message's payload after its
//! envelope) with each shipped event schema: checking it never panics, and a datum the check
//! accepts is one apache-avro decodes whole, whose columns appended straight from its bytes
//! are exactly the columns of its decoded value.

use std::sync::OnceLock;

use apache_avro::Schema;
use arrow_array::ArrayRef;
use hdfs_loader::columns::{Column, RecordShape};

fn schemas() -> &'static Vec<(Schema, RecordShape)> {
    static SCHEMAS: OnceLock<Vec<(Schema, RecordShape)>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        ["page-view", "click", "search", "_audit"]
            .iter()
            .map(|name| {
                let text = events::schemas::shipped(name).unwrap().text;
                let schema = Schema::parse_str(text).expect("a shipped schema parses");
                let shape = RecordShape::of(&schema).expect("a shipped schema has columns");
                (schema, shape)
            })
            .collect()
    })
}

fn finish(columns: &mut [Column]) -> Vec<ArrayRef> {
    columns.iter_mut().map(|c| c.finish().expect("columns of whole rows finish")).collect()
}

/// One input.
pub fn check(data: &[u8]) {
    for (schema, shape) in schemas() {
        if shape.check_datum(data).is_err() {
            continue;
        }
        let reader = apache_avro::reader::datum::GenericDatumReader::builder(schema)
            .build()
            .expect("a reader of a shipped schema");
        let mut datum = data;
        let value = reader.read_value(&mut datum).expect("what the check accepts decodes");
        assert!(datum.is_empty(), "and is exactly one datum");
        let mut direct = shape.builders(1);
        let mut through_value = shape.builders(1);
        shape.append_datum(&mut direct, data).expect("a checked datum appends");
        shape.append(&mut through_value, &value).expect("its value appends");
        assert_eq!(finish(&mut direct), finish(&mut through_value));
    }
}
