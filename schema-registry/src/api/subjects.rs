//! `/subjects`: register, look up, list, fetch and delete the versions of a subject.

use std::sync::Arc;

use axum::extract::State;
use serde::{Deserialize, Serialize};

use super::http::{ApiError, Body, Flags, Path, RawJson, Reply};
use crate::error::RegistryError;
use crate::registry::{Registry, SubjectVersion, VersionSelector};

/// The body of register, look-up and compatibility requests.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaRequest {
    pub schema: String,
    pub schema_type: Option<String>,
    pub references: Option<Vec<serde_json::Value>>,
}

impl SchemaRequest {
    /// The schema text, if this registry can serve it: Avro, without references.
    pub fn avro_schema(&self) -> Result<&str, RegistryError> {
        let kind = self.schema_type.as_deref().unwrap_or("AVRO");
        if !kind.eq_ignore_ascii_case("AVRO") {
            return Err(RegistryError::InvalidSchema(format!(
                "schema type {kind} is not supported; this registry serves AVRO"
            )));
        }
        if self.references.as_ref().is_some_and(|r| !r.is_empty()) {
            return Err(RegistryError::InvalidSchema(
                "schema references are not supported".to_owned(),
            ));
        }
        Ok(&self.schema)
    }
}

#[derive(Serialize)]
pub struct IdReply {
    id: i32,
}

pub async fn list(State(registry): State<Arc<Registry>>, flags: Flags) -> Reply<Vec<String>> {
    let subjects = if flags.deleted_only {
        let live = registry.subjects(false, &flags.subject_prefix);
        registry
            .subjects(true, &flags.subject_prefix)
            .into_iter()
            .filter(|s| live.binary_search(s).is_err())
            .collect()
    } else {
        registry.subjects(flags.deleted, &flags.subject_prefix)
    };
    Reply(subjects.into_iter().skip(flags.offset).take(flags.limit).collect())
}

pub async fn versions(
    State(registry): State<Arc<Registry>>,
    Path(subject): Path<String>,
    flags: Flags,
) -> Result<Reply<Vec<i32>>, ApiError> {
    Ok(Reply(registry.versions(&subject, flags.deleted)?))
}

pub async fn register(
    State(registry): State<Arc<Registry>>,
    Path(subject): Path<String>,
    Body(request): Body<SchemaRequest>,
) -> Result<Reply<IdReply>, ApiError> {
    let id = registry.register(&subject, request.avro_schema()?).await?;
    Ok(Reply(IdReply { id }))
}

pub async fn lookup(
    State(registry): State<Arc<Registry>>,
    Path(subject): Path<String>,
    flags: Flags,
    Body(request): Body<SchemaRequest>,
) -> Result<Reply<SubjectVersion>, ApiError> {
    let found = registry.lookup(&subject, request.avro_schema()?, flags.deleted)?;
    Ok(Reply(found))
}

pub async fn version(
    State(registry): State<Arc<Registry>>,
    Path((subject, version)): Path<(String, String)>,
    flags: Flags,
) -> Result<Reply<SubjectVersion>, ApiError> {
    let selector = version.parse::<VersionSelector>()?;
    Ok(Reply(registry.version(&subject, selector, flags.deleted)?))
}

pub async fn version_schema(
    State(registry): State<Arc<Registry>>,
    Path((subject, version)): Path<(String, String)>,
    flags: Flags,
) -> Result<RawJson, ApiError> {
    let selector = version.parse::<VersionSelector>()?;
    let found = registry.version(&subject, selector, flags.deleted)?;
    Ok(RawJson(found.schema.to_string()))
}

/// Ids of schemas that reference this version: none, as references are not supported.
pub async fn referenced_by(
    State(registry): State<Arc<Registry>>,
    Path((subject, version)): Path<(String, String)>,
) -> Result<Reply<Vec<i32>>, ApiError> {
    let selector = version.parse::<VersionSelector>()?;
    registry.version(&subject, selector, true)?;
    Ok(Reply(Vec::new()))
}

pub async fn delete(
    State(registry): State<Arc<Registry>>,
    Path(subject): Path<String>,
    flags: Flags,
) -> Result<Reply<Vec<i32>>, ApiError> {
    Ok(Reply(registry.delete_subject(&subject, flags.permanent).await?))
}

pub async fn delete_version(
    State(registry): State<Arc<Registry>>,
    Path((subject, version)): Path<(String, String)>,
    flags: Flags,
) -> Result<Reply<i32>, ApiError> {
    let selector = version.parse::<VersionSelector>()?;
    Ok(Reply(registry.delete_version(&subject, selector, flags.permanent).await?))
}
