//! `/schemas`: schemas by their global id, and the schema types served.

use std::sync::Arc;

use axum::extract::State;
use serde::Serialize;

use super::http::{ApiError, Flags, Path, RawJson, Reply};
use crate::error::RegistryError;
use crate::registry::Registry;

#[derive(Serialize)]
pub struct SchemaReply {
    schema: Arc<str>,
}

#[derive(Serialize)]
pub struct SubjectVersionReply {
    subject: String,
    version: i32,
}

/// An id that is not a number names no schema (Confluent answers the same 404).
fn parse_id(id: &str) -> Result<i32, RegistryError> {
    id.parse().map_err(|_| RegistryError::SchemaNotFound)
}

pub async fn by_id(
    State(registry): State<Arc<Registry>>,
    Path(id): Path<String>,
) -> Result<Reply<SchemaReply>, ApiError> {
    let schema = registry.schema_by_id(parse_id(&id)?)?;
    Ok(Reply(SchemaReply { schema }))
}

pub async fn by_id_schema(
    State(registry): State<Arc<Registry>>,
    Path(id): Path<String>,
) -> Result<RawJson, ApiError> {
    Ok(RawJson(registry.schema_by_id(parse_id(&id)?)?.to_string()))
}

pub async fn id_versions(
    State(registry): State<Arc<Registry>>,
    Path(id): Path<String>,
    flags: Flags,
) -> Result<Reply<Vec<SubjectVersionReply>>, ApiError> {
    let found = registry.versions_of_id(parse_id(&id)?, flags.deleted)?;
    Ok(Reply(
        found
            .into_iter()
            .map(|(subject, version)| SubjectVersionReply { subject, version })
            .collect(),
    ))
}

pub async fn id_subjects(
    State(registry): State<Arc<Registry>>,
    Path(id): Path<String>,
    flags: Flags,
) -> Result<Reply<Vec<String>>, ApiError> {
    let mut subjects: Vec<String> = registry
        .versions_of_id(parse_id(&id)?, flags.deleted)?
        .into_iter()
        .map(|(subject, _)| subject)
        .collect();
    subjects.dedup();
    Ok(Reply(subjects))
}

pub async fn types() -> Reply<[&'static str; 1]> {
    Reply(["AVRO"])
}
