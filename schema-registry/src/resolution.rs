//! The Avro specification's schema-resolution rules: can data written with one schema be read
//! with another? This is the question every compatibility level asks, in one direction or both.
//!
//! Owned here rather than taken from `apache_avro::schema_compatibility` so that each rule of
//! the spec ("Schema Resolution") is visible next to the check that enforces it, and so that
//! every incompatibility is reported with a path, the way Confluent's `verbose` output does.

use std::collections::{HashMap, HashSet};
use std::fmt;

use apache_avro::Schema;
use apache_avro::schema::{
    EnumSchema, FixedSchema, InnerDecimalSchema, Name, RecordSchema, UuidSchema,
};

/// Resolution work allowed for one reader/writer pair. Named types referenced from many places
/// are re-checked at each place, so a crafted schema could otherwise cost exponential time.
pub const CHECK_STEPS_MAX: usize = 100_000;

/// Why data written with the writer's schema cannot be read with the reader's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncompatibilityKind {
    /// Named types (record, enum, fixed) whose names and aliases do not match.
    NameMismatch,
    /// Fixed types of different sizes.
    FixedSizeMismatch,
    /// Writer enum symbols the reader lacks, and the reader enum has no default symbol.
    MissingEnumSymbols,
    /// A reader field that the writer lacks and that has no default.
    ReaderFieldMissingDefaultValue,
    /// Types that do not resolve, not even by promotion.
    TypeMismatch,
    /// A writer type that no branch of the reader's union can read.
    MissingUnionBranch,
    /// The check gave up after [`CHECK_STEPS_MAX`] steps; the pair is treated as incompatible.
    TooComplex,
}

impl IncompatibilityKind {
    fn as_str(self) -> &'static str {
        match self {
            IncompatibilityKind::NameMismatch => "NAME_MISMATCH",
            IncompatibilityKind::FixedSizeMismatch => "FIXED_SIZE_MISMATCH",
            IncompatibilityKind::MissingEnumSymbols => "MISSING_ENUM_SYMBOLS",
            IncompatibilityKind::ReaderFieldMissingDefaultValue => {
                "READER_FIELD_MISSING_DEFAULT_VALUE"
            }
            IncompatibilityKind::TypeMismatch => "TYPE_MISMATCH",
            IncompatibilityKind::MissingUnionBranch => "MISSING_UNION_BRANCH",
            IncompatibilityKind::TooComplex => "TOO_COMPLEX",
        }
    }
}

/// One reason the reader cannot read the writer's data, at `path` in the reader's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incompatibility {
    pub kind: IncompatibilityKind,
    /// JSON-pointer-like location, e.g. `/fields/2/type/items`.
    pub path: String,
    pub description: String,
}

impl fmt::Display for Incompatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{errorType:'{}', description:'{}', path:'{}'}}",
            self.kind.as_str(),
            self.description,
            if self.path.is_empty() { "/" } else { &self.path }
        )
    }
}

/// Every reason data written with `writer` cannot be read with `reader`; empty when it can.
pub fn incompatibilities(reader: &Schema, writer: &Schema) -> Vec<Incompatibility> {
    let mut check = Check {
        reader_names: named_types(reader),
        writer_names: named_types(writer),
        records_assumed: HashSet::new(),
        steps: 0,
    };
    let mut found = Vec::new();
    check.pair(reader, writer, String::new(), &mut found);
    found
}

/// A schema with references and logical types resolved to the type the resolution rules see.
/// Logical types resolve as their underlying type, as the spec says.
enum Shape<'a> {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Array(&'a Schema),
    Map(&'a Schema),
    Union(&'a [Schema]),
    Record(&'a RecordSchema),
    Enum(&'a EnumSchema),
    Fixed(&'a FixedSchema),
    /// A reference to a name the schema does not define (the parser rejects these, so this
    /// only guards against a gap there).
    Unresolved(&'a Name),
}

impl Shape<'_> {
    fn type_name(&self) -> String {
        match self {
            Shape::Null => "null".to_owned(),
            Shape::Boolean => "boolean".to_owned(),
            Shape::Int => "int".to_owned(),
            Shape::Long => "long".to_owned(),
            Shape::Float => "float".to_owned(),
            Shape::Double => "double".to_owned(),
            Shape::Bytes => "bytes".to_owned(),
            Shape::String => "string".to_owned(),
            Shape::Array(_) => "array".to_owned(),
            Shape::Map(_) => "map".to_owned(),
            Shape::Union(_) => "union".to_owned(),
            Shape::Record(r) => format!("record {}", r.name.fullname(None)),
            Shape::Enum(e) => format!("enum {}", e.name.fullname(None)),
            Shape::Fixed(f) => format!("fixed {}", f.name.fullname(None)),
            Shape::Unresolved(n) => format!("undefined type {}", n.fullname(None)),
        }
    }
}

type NamedTypes<'a> = HashMap<String, &'a Schema>;

/// Every named type defined anywhere in `schema`, by full name, so references resolve.
fn named_types(schema: &Schema) -> NamedTypes<'_> {
    let mut names = HashMap::new();
    let mut pending = vec![schema];
    while let Some(s) = pending.pop() {
        match s {
            Schema::Record(r) => {
                names.insert(r.name.fullname(None), s);
                pending.extend(r.fields.iter().map(|f| &f.schema));
            }
            Schema::Enum(e) => {
                names.insert(e.name.fullname(None), s);
            }
            Schema::Fixed(f) => {
                names.insert(f.name.fullname(None), s);
            }
            Schema::Decimal(d) => {
                if let InnerDecimalSchema::Fixed(f) = &d.inner {
                    names.insert(f.name.fullname(None), s);
                }
            }
            Schema::Uuid(UuidSchema::Fixed(f)) | Schema::Duration(f) => {
                names.insert(f.name.fullname(None), s);
            }
            Schema::Array(a) => pending.push(&a.items),
            Schema::Map(m) => pending.push(&m.types),
            Schema::Union(u) => pending.extend(u.variants()),
            _ => {}
        }
    }
    names
}

fn shape<'a>(schema: &'a Schema, names: &NamedTypes<'a>) -> Shape<'a> {
    match schema {
        Schema::Null => Shape::Null,
        Schema::Boolean => Shape::Boolean,
        Schema::Int | Schema::Date | Schema::TimeMillis => Shape::Int,
        Schema::Long
        | Schema::TimeMicros
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => Shape::Long,
        Schema::Float => Shape::Float,
        Schema::Double => Shape::Double,
        Schema::Bytes | Schema::BigDecimal | Schema::Uuid(UuidSchema::Bytes) => Shape::Bytes,
        Schema::String | Schema::Uuid(UuidSchema::String) => Shape::String,
        Schema::Decimal(d) => match &d.inner {
            InnerDecimalSchema::Bytes => Shape::Bytes,
            InnerDecimalSchema::Fixed(f) => Shape::Fixed(f),
        },
        Schema::Uuid(UuidSchema::Fixed(f)) | Schema::Duration(f) => Shape::Fixed(f),
        Schema::Fixed(f) => Shape::Fixed(f),
        Schema::Array(a) => Shape::Array(&a.items),
        Schema::Map(m) => Shape::Map(&m.types),
        Schema::Union(u) => Shape::Union(u.variants()),
        Schema::Record(r) => Shape::Record(r),
        Schema::Enum(e) => Shape::Enum(e),
        Schema::Ref { name } => match names.get(&name.fullname(None)) {
            // A definition is never itself a reference, so this recursion is one level deep.
            Some(defined) if !matches!(defined, Schema::Ref { .. }) => shape(defined, names),
            _ => Shape::Unresolved(name),
        },
    }
}

struct Check<'a> {
    reader_names: NamedTypes<'a>,
    writer_names: NamedTypes<'a>,
    /// Record pairs being checked further up the stack: a recursive reference back to one of
    /// them is assumed compatible (the rest of that pair's check decides).
    records_assumed: HashSet<(String, String)>,
    steps: usize,
}

impl<'a> Check<'a> {
    fn pair(
        &mut self,
        reader: &'a Schema,
        writer: &'a Schema,
        path: String,
        found: &mut Vec<Incompatibility>,
    ) {
        self.steps += 1;
        if self.steps > CHECK_STEPS_MAX {
            if !found.iter().any(|i| i.kind == IncompatibilityKind::TooComplex) {
                found.push(Incompatibility {
                    kind: IncompatibilityKind::TooComplex,
                    path,
                    description: format!(
                        "the schemas need more than {CHECK_STEPS_MAX} resolution steps to compare"
                    ),
                });
            }
            return;
        }
        let r = shape(reader, &self.reader_names);
        let w = shape(writer, &self.writer_names);

        // "If the writer's is a union": each branch the writer may have written must be
        // readable, whatever the reader's schema is.
        if let Shape::Union(branches) = w {
            for branch in branches {
                self.pair(reader, branch, path.clone(), found);
            }
            return;
        }
        // "If reader's is a union, but writer's is not": the first reader branch that matches
        // is used, so some branch must resolve the writer's type.
        if let Shape::Union(branches) = r {
            let readable = branches.iter().any(|branch| {
                let mut trial = Vec::new();
                self.pair(branch, writer, path.clone(), &mut trial);
                trial.is_empty()
            });
            if !readable {
                found.push(Incompatibility {
                    kind: IncompatibilityKind::MissingUnionBranch,
                    description: format!(
                        "the reader's union has no branch that can read the writer's {}",
                        w.type_name()
                    ),
                    path,
                });
            }
            return;
        }

        match (&r, &w) {
            (Shape::Null, Shape::Null)
            | (Shape::Boolean, Shape::Boolean)
            | (Shape::Int, Shape::Int)
            | (Shape::Long, Shape::Long)
            | (Shape::Float, Shape::Float)
            | (Shape::Double, Shape::Double)
            | (Shape::Bytes, Shape::Bytes)
            | (Shape::String, Shape::String) => {}
            // The spec's promotions: int → long, float, double; long → float, double;
            // float → double; string ↔ bytes.
            (Shape::Long | Shape::Float | Shape::Double, Shape::Int)
            | (Shape::Float | Shape::Double, Shape::Long)
            | (Shape::Double, Shape::Float)
            | (Shape::Bytes, Shape::String)
            | (Shape::String, Shape::Bytes) => {}
            (Shape::Array(ri), Shape::Array(wi)) => self.pair(ri, wi, path + "/items", found),
            (Shape::Map(rv), Shape::Map(wv)) => self.pair(rv, wv, path + "/values", found),
            (Shape::Fixed(rf), Shape::Fixed(wf)) => {
                check_names(&rf.name, rf.aliases.as_deref(), &wf.name, &path, found);
                if rf.size != wf.size {
                    found.push(Incompatibility {
                        kind: IncompatibilityKind::FixedSizeMismatch,
                        description: format!("expected fixed size {}, found {}", rf.size, wf.size),
                        path: path + "/size",
                    });
                }
            }
            (Shape::Enum(re), Shape::Enum(we)) => {
                check_names(&re.name, re.aliases.as_deref(), &we.name, &path, found);
                // A writer symbol the reader lacks resolves to the reader's default, if any.
                let has_default = re.default.as_ref().is_some_and(|d| re.symbols.contains(d));
                let missing: Vec<&str> = we
                    .symbols
                    .iter()
                    .filter(|s| !re.symbols.contains(s))
                    .map(String::as_str)
                    .collect();
                if !missing.is_empty() && !has_default {
                    found.push(Incompatibility {
                        kind: IncompatibilityKind::MissingEnumSymbols,
                        description: format!(
                            "the reader's enum lacks the symbols [{}] and has no default",
                            missing.join(", ")
                        ),
                        path: path + "/symbols",
                    });
                }
            }
            (Shape::Record(rr), Shape::Record(wr)) => self.records(rr, wr, path, found),
            _ => found.push(Incompatibility {
                kind: IncompatibilityKind::TypeMismatch,
                description: format!(
                    "reader type {} does not match writer type {}",
                    r.type_name(),
                    w.type_name()
                ),
                path,
            }),
        }
    }

    fn records(
        &mut self,
        reader: &'a RecordSchema,
        writer: &'a RecordSchema,
        path: String,
        found: &mut Vec<Incompatibility>,
    ) {
        let key = (reader.name.fullname(None), writer.name.fullname(None));
        if !self.records_assumed.insert(key.clone()) {
            return;
        }
        check_names(&reader.name, reader.aliases.as_deref(), &writer.name, &path, found);
        for (i, field) in reader.fields.iter().enumerate() {
            // Writer fields are matched by the reader field's name, then by its aliases;
            // writer fields the reader does not name are skipped.
            let written = writer
                .fields
                .iter()
                .find(|w| w.name == field.name)
                .or_else(|| writer.fields.iter().find(|w| field.aliases.contains(&w.name)));
            match written {
                Some(w) => self.pair(&field.schema, &w.schema, format!("{path}/fields/{i}/type"), found),
                None if field.default.is_some() => {}
                None => found.push(Incompatibility {
                    kind: IncompatibilityKind::ReaderFieldMissingDefaultValue,
                    description: format!(
                        "the reader's field '{}' has no default value and is missing from the writer's record",
                        field.name
                    ),
                    path: format!("{path}/fields/{i}"),
                }),
            }
        }
        self.records_assumed.remove(&key);
    }
}

/// Named types match when their unqualified names are equal, or when one of the reader's
/// aliases is the writer's full name.
fn check_names(
    reader: &Name,
    reader_aliases: Option<&[apache_avro::schema::Alias]>,
    writer: &Name,
    path: &str,
    found: &mut Vec<Incompatibility>,
) {
    let writer_fullname = writer.fullname(None);
    let aliased =
        reader_aliases.unwrap_or_default().iter().any(|a| a.fullname(None) == writer_fullname);
    if reader.name() != writer.name() && !aliased {
        found.push(Incompatibility {
            kind: IncompatibilityKind::NameMismatch,
            description: format!(
                "expected name {}, found {writer_fullname}",
                reader.fullname(None)
            ),
            path: format!("{path}/name"),
        });
    }
}
