//! The pipeline's event schemas and the audit record's, shipped in `events/schemas/` and
//! compiled into every binary that needs them, so a launcher runs from anywhere. Each file
//! `{name}.avsc` is registered as subject `{name}-value`.

use std::path::{Path, PathBuf};

use schema_registry::{ClientError, RegistryClient};

/// One shipped schema.
#[derive(Debug, Clone, Copy)]
pub struct Shipped {
    /// The file's stem: `page-view`.
    pub name: &'static str,
    /// The registry subject: `page-view-value`.
    pub subject: &'static str,
    /// The Avro schema (JSON).
    pub text: &'static str,
}

/// Every shipped schema: the three event types and `_audit`.
pub const SHIPPED: [Shipped; 4] = [
    Shipped {
        name: "page-view",
        subject: "page-view-value",
        text: include_str!("../schemas/page-view.avsc"),
    },
    Shipped { name: "click", subject: "click-value", text: include_str!("../schemas/click.avsc") },
    Shipped {
        name: "search",
        subject: "search-value",
        text: include_str!("../schemas/search.avsc"),
    },
    Shipped {
        name: "_audit",
        subject: "_audit-value",
        text: include_str!("../schemas/_audit.avsc"),
    },
];

/// The shipped schema of `name` (`page-view`, `_audit`, …).
pub fn shipped(name: &str) -> Option<&'static Shipped> {
    SHIPPED.iter().find(|s| s.name == name)
}

/// The schemas' directory in the source tree, for tests and for the commands the READMEs
/// print (a deployed binary uses [`SHIPPED`] or [`write_dir`]).
pub fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas")
}

/// Writes every shipped schema as `{dir}/{name}.avsc`, for a registry started with
/// `register_schemas = dir`. Creates `dir`.
pub fn write_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for schema in &SHIPPED {
        service::durable::write(
            &dir.join(format!("{}.avsc", schema.name)),
            schema.text.as_bytes(),
        )?;
    }
    Ok(())
}

/// Registers every shipped schema with the registry (already registered ones keep their
/// ids); returns each subject with its id.
pub async fn register(registry: &RegistryClient) -> Result<Vec<(&'static str, i32)>, ClientError> {
    let mut ids = Vec::with_capacity(SHIPPED.len());
    for schema in &SHIPPED {
        ids.push((schema.subject, registry.register(schema.subject, schema.text).await?));
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiled_schemas_are_the_files_and_parse() {
        let mut files: Vec<String> = std::fs::read_dir(source_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let mut names: Vec<String> = SHIPPED.iter().map(|s| format!("{}.avsc", s.name)).collect();
        names.sort();
        assert_eq!(files, names, "every file in events/schemas is shipped");
        for schema in &SHIPPED {
            assert_eq!(schema.subject, format!("{}-value", schema.name));
            apache_avro::Schema::parse_str(schema.text).unwrap();
            let on_disk =
                std::fs::read_to_string(source_dir().join(format!("{}.avsc", schema.name)));
            assert_eq!(on_disk.unwrap(), schema.text);
        }
        assert!(shipped("_audit").is_some() && shipped("nope").is_none());
    }
}
