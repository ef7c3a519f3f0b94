//! `/config`: the global compatibility level and each subject's own.

use std::sync::Arc;

use axum::extract::State;
use serde::{Deserialize, Serialize};

use super::http::{ApiError, Body, Flags, Path, Reply};
use crate::compatibility::{CompatibilityLevel, InvalidLevel};
use crate::error::RegistryError;
use crate::registry::Registry;

/// What `GET` answers (Confluent names the field `compatibilityLevel` here)…
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LevelReply {
    compatibility_level: CompatibilityLevel,
}

/// …and what `PUT` takes and answers (`compatibility` there).
#[derive(Serialize, Deserialize)]
pub struct LevelUpdate {
    compatibility: Option<String>,
}

impl LevelUpdate {
    fn level(&self) -> Result<CompatibilityLevel, RegistryError> {
        let name =
            self.compatibility.as_deref().ok_or_else(|| InvalidLevel("(missing)".to_owned()))?;
        Ok(name.parse()?)
    }
}

pub async fn get_global(State(registry): State<Arc<Registry>>) -> Reply<LevelReply> {
    Reply(LevelReply { compatibility_level: registry.global_level() })
}

pub async fn put_global(
    State(registry): State<Arc<Registry>>,
    Body(update): Body<LevelUpdate>,
) -> Result<Reply<LevelUpdate>, ApiError> {
    let level = update.level()?;
    registry.set_global_level(level).await?;
    Ok(Reply(LevelUpdate { compatibility: Some(level.to_string()) }))
}

pub async fn get_subject(
    State(registry): State<Arc<Registry>>,
    Path(subject): Path<String>,
    flags: Flags,
) -> Result<Reply<LevelReply>, ApiError> {
    let level = match registry.subject_level(&subject) {
        Some(level) => level,
        None if flags.default_to_global => registry.global_level(),
        None => return Err(RegistryError::SubjectLevelNotConfigured(subject).into()),
    };
    Ok(Reply(LevelReply { compatibility_level: level }))
}

pub async fn put_subject(
    State(registry): State<Arc<Registry>>,
    Path(subject): Path<String>,
    Body(update): Body<LevelUpdate>,
) -> Result<Reply<LevelUpdate>, ApiError> {
    let level = update.level()?;
    registry.set_subject_level(&subject, Some(level)).await?;
    Ok(Reply(LevelUpdate { compatibility: Some(level.to_string()) }))
}

/// Removes the subject's own level and answers the level it had.
pub async fn delete_subject(
    State(registry): State<Arc<Registry>>,
    Path(subject): Path<String>,
) -> Result<Reply<LevelReply>, ApiError> {
    if registry.subject_level(&subject).is_none() {
        return Err(RegistryError::SubjectLevelNotConfigured(subject).into());
    }
    let before = registry.set_subject_level(&subject, None).await?;
    let compatibility_level = before.ok_or(RegistryError::SubjectLevelNotConfigured(subject))?;
    Ok(Reply(LevelReply { compatibility_level }))
}
