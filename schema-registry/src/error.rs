//! What can go wrong inside the registry, each case carrying the Confluent error code that
//! existing clients switch on.

use crate::compatibility::InvalidLevel;
use crate::store::StoreError;

/// A registry operation's failure. [`RegistryError::error_code`] is the Confluent code; the
/// HTTP layer maps it to a status and a `{"error_code", "message"}` body.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    #[error("Subject '{0}' not found.")]
    SubjectNotFound(String),
    #[error("Version {version} not found.")]
    VersionNotFound { subject: String, version: i32 },
    #[error("Schema {0} not found")]
    SchemaIdNotFound(i32),
    #[error("Schema not found")]
    SchemaNotFound,
    #[error("Subject '{0}' was soft deleted.Set permanent=true to delete permanently")]
    SubjectSoftDeleted(String),
    #[error("Subject '{0}' was not deleted first before being permanently deleted")]
    SubjectNotSoftDeleted(String),
    #[error(
        "Subject '{subject}' Version {version} was soft deleted.Set permanent=true to delete permanently"
    )]
    VersionSoftDeleted { subject: String, version: i32 },
    #[error(
        "Subject '{subject}' Version {version} was not deleted first before being permanently deleted"
    )]
    VersionNotSoftDeleted { subject: String, version: i32 },
    #[error("Subject '{0}' does not have subject-level compatibility configured")]
    SubjectLevelNotConfigured(String),
    #[error(
        "Schema being registered is incompatible with an earlier schema for subject \"{subject}\", details: [{}]",
        .messages.join(", ")
    )]
    Incompatible { subject: String, messages: Vec<String> },
    #[error("Invalid schema: {0}")]
    InvalidSchema(String),
    #[error(
        "The specified version '{0}' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\""
    )]
    InvalidVersion(String),
    #[error(transparent)]
    InvalidCompatibilityLevel(#[from] InvalidLevel),
    #[error("Invalid subject: {0}")]
    InvalidSubject(String),
    #[error("schema ids are exhausted: no id above {0} is left")]
    IdsExhausted(i32),
    #[error("subject '{0}' has used every version number")]
    VersionsExhausted(String),
    #[error("Error in the backend data store: {0}")]
    Store(#[from] StoreError),
}

impl RegistryError {
    /// Confluent's error code for this failure; its first three digits are the HTTP status.
    pub fn error_code(&self) -> u32 {
        match self {
            RegistryError::SubjectNotFound(_) => 40401,
            RegistryError::VersionNotFound { .. } => 40402,
            RegistryError::SchemaIdNotFound(_) | RegistryError::SchemaNotFound => 40403,
            RegistryError::SubjectSoftDeleted(_) => 40404,
            RegistryError::SubjectNotSoftDeleted(_) => 40405,
            RegistryError::VersionSoftDeleted { .. } => 40406,
            RegistryError::VersionNotSoftDeleted { .. } => 40407,
            RegistryError::SubjectLevelNotConfigured(_) => 40408,
            RegistryError::Incompatible { .. } => 409,
            RegistryError::InvalidSchema(_) => 42201,
            RegistryError::InvalidVersion(_) => 42202,
            RegistryError::InvalidCompatibilityLevel(_) => 42203,
            RegistryError::InvalidSubject(_) => 42208,
            RegistryError::IdsExhausted(_) | RegistryError::VersionsExhausted(_) => 50001,
            RegistryError::Store(_) => 50001,
        }
    }
}
