//! `/compatibility`: would a schema be accepted by a subject, without registering it?

use std::sync::Arc;

use axum::extract::State;
use serde::Serialize;

use super::http::{ApiError, Body, Flags, Path, Reply};
use super::subjects::SchemaRequest;
use crate::registry::{Registry, VersionSelector};

#[derive(Serialize)]
pub struct CompatibilityReply {
    is_compatible: bool,
    /// Only with `?verbose=true`, as Confluent does.
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<Vec<String>>,
}

impl CompatibilityReply {
    fn new(messages: Vec<String>, verbose: bool) -> Self {
        CompatibilityReply {
            is_compatible: messages.is_empty(),
            messages: verbose.then_some(messages),
        }
    }
}

/// Checks against one version of the subject.
pub async fn against_version(
    State(registry): State<Arc<Registry>>,
    Path((subject, version)): Path<(String, String)>,
    flags: Flags,
    Body(request): Body<SchemaRequest>,
) -> Result<Reply<CompatibilityReply>, ApiError> {
    let selector = version.parse::<VersionSelector>()?;
    let messages =
        registry.check_compatibility(&subject, request.avro_schema()?, Some(selector))?;
    Ok(Reply(CompatibilityReply::new(messages, flags.verbose)))
}

/// Checks against the versions the subject's level names (all of them when transitive).
pub async fn against_subject(
    State(registry): State<Arc<Registry>>,
    Path(subject): Path<String>,
    flags: Flags,
    Body(request): Body<SchemaRequest>,
) -> Result<Reply<CompatibilityReply>, ApiError> {
    let messages = registry.check_compatibility(&subject, request.avro_schema()?, None)?;
    Ok(Reply(CompatibilityReply::new(messages, flags.verbose)))
}
