//! The registry's operations: each read answers from memory; each change is validated against
//! the current state, appended to the durable log, and only then applied and acknowledged.

use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::compatibility::{self, CompatibilityLevel, Previous};
use crate::error::RegistryError;
use crate::schema::{self, ParsedSchema};
use crate::state::{State, Subject};
use crate::store::{Record, Store};

/// Longest subject name accepted. Kafka topic names stop at 249 bytes; record-name subject
/// strategies append a fully qualified record name, so leave room for that.
pub const SUBJECT_BYTES_MAX: usize = 1024;

/// One version of a subject, as the API answers it (and the client reads it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SubjectVersion {
    pub subject: String,
    pub version: i32,
    pub id: i32,
    /// Canonical schema text.
    pub schema: Arc<str>,
}

/// Which version of a subject a request means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionSelector {
    /// `latest` (or `-1`): the newest version visible to the request.
    Latest,
    Number(i32),
}

impl FromStr for VersionSelector {
    type Err = RegistryError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "latest" | "-1" => Ok(VersionSelector::Latest),
            _ => match s.parse::<i32>() {
                Ok(n) if n >= 1 => Ok(VersionSelector::Number(n)),
                _ => Err(RegistryError::InvalidVersion(s.to_owned())),
            },
        }
    }
}

/// The schema registry: state in memory, changes in the durable log.
#[derive(Debug)]
pub struct Registry {
    store: Store,
    state: RwLock<State>,
    /// Serialises changes: a change is decided on the state it was validated against, and the
    /// log's order is the order changes are applied in.
    writes: tokio::sync::Mutex<()>,
}

impl Registry {
    /// Opens the log in `data_dir` and replays it. `default_level` is the global level until a
    /// `PUT /config` changes it.
    pub async fn open(
        data_dir: &Path,
        default_level: CompatibilityLevel,
    ) -> Result<Registry, RegistryError> {
        let (store, records) = Store::open(data_dir).await?;
        let mut state = State::new(default_level);
        for record in records {
            state.apply(record)?;
        }
        Ok(Registry { store, state: RwLock::new(state), writes: tokio::sync::Mutex::new(()) })
    }

    /// Registers `schema` under `subject` and returns its global id. A schema already live in
    /// the subject returns its id unchanged; one known under another subject (or an earlier,
    /// deleted version) keeps its id; a new one gets the next id. The new version must be
    /// compatible with the subject's earlier versions under the subject's level.
    pub async fn register(&self, subject: &str, schema: &str) -> Result<i32, RegistryError> {
        validate_subject(subject)?;
        let parsed = schema::parse(schema)?;
        let _writing = self.writes.lock().await;
        let (record, id, new_id) = {
            let state = self.read();
            let existing = state.subject(subject);
            if let Some(found) = existing.and_then(|s| find_in_subject(&state, s, &parsed, false)) {
                return Ok(found.1);
            }
            let level = state.level_of(subject);
            let messages = {
                let previous = previous_versions(&state, existing);
                compatibility::check(level, &parsed.schema, &previous)
            };
            if !messages.is_empty() {
                return Err(RegistryError::Incompatible { subject: subject.to_owned(), messages });
            }
            let (id, new_id) = match state.id_of(&parsed.canonical) {
                Some(id) => (id, false),
                None if state.next_id() == i32::MAX => {
                    return Err(RegistryError::IdsExhausted(i32::MAX));
                }
                None => (state.next_id(), true),
            };
            let version = match existing.and_then(|s| s.versions.keys().next_back()) {
                None => 1,
                Some(&last) => last
                    .checked_add(1)
                    .ok_or_else(|| RegistryError::VersionsExhausted(subject.to_owned()))?,
            };
            let record = Record::Register {
                subject: subject.to_owned(),
                version,
                id,
                schema: parsed.canonical.to_string(),
            };
            (record, id, new_id)
        };
        self.store.append(&record).await?;
        let mut state = self.write();
        if new_id {
            state.insert_schema(id, parsed);
        }
        state.apply(record)?;
        tracing::info!(subject, id, "registered schema");
        Ok(id)
    }

    /// The version of `subject` whose schema is `schema`.
    pub fn lookup(
        &self,
        subject: &str,
        schema: &str,
        deleted: bool,
    ) -> Result<SubjectVersion, RegistryError> {
        let parsed = schema::parse(schema)?;
        let state = self.read();
        let s = visible_subject(&state, subject, deleted)?;
        let (version, id) =
            find_in_subject(&state, s, &parsed, deleted).ok_or(RegistryError::SchemaNotFound)?;
        Ok(SubjectVersion {
            subject: subject.to_owned(),
            version,
            id,
            schema: Arc::clone(&parsed.canonical),
        })
    }

    /// Subjects with a live version (or any version, with `deleted`), sorted.
    /// Schemas kept, and subjects with a live version: what `/metrics` shows.
    pub fn sizes(&self) -> (usize, usize) {
        self.read().sizes()
    }

    pub fn subjects(&self, deleted: bool, prefix: &str) -> Vec<String> {
        self.read()
            .subjects()
            .filter(|(name, s)| name.starts_with(prefix) && s.has_versions(deleted))
            .map(|(name, _)| name.to_owned())
            .collect()
    }

    pub fn versions(&self, subject: &str, deleted: bool) -> Result<Vec<i32>, RegistryError> {
        let state = self.read();
        let s = visible_subject(&state, subject, deleted)?;
        Ok(s.versions(deleted).map(|(n, _)| n).collect())
    }

    pub fn version(
        &self,
        subject: &str,
        selector: VersionSelector,
        deleted: bool,
    ) -> Result<SubjectVersion, RegistryError> {
        let state = self.read();
        let s = visible_subject(&state, subject, deleted)?;
        let (version, id) = select(s, subject, selector, deleted)?;
        Ok(SubjectVersion {
            subject: subject.to_owned(),
            version,
            id,
            schema: canonical(&state, id)?,
        })
    }

    /// Deletes every version of `subject`: softly (hidden, ids kept), or `permanent`ly after a
    /// soft delete. Returns the versions deleted.
    pub async fn delete_subject(
        &self,
        subject: &str,
        permanent: bool,
    ) -> Result<Vec<i32>, RegistryError> {
        let _writing = self.writes.lock().await;
        let deleted_versions = {
            let state = self.read();
            let s = visible_subject(&state, subject, true)?;
            if permanent {
                if s.has_versions(false) {
                    return Err(RegistryError::SubjectNotSoftDeleted(subject.to_owned()));
                }
                s.versions(true).map(|(n, _)| n).collect::<Vec<_>>()
            } else {
                if !s.has_versions(false) {
                    return Err(RegistryError::SubjectSoftDeleted(subject.to_owned()));
                }
                s.versions(false).map(|(n, _)| n).collect()
            }
        };
        self.commit(Record::DeleteSubject { subject: subject.to_owned(), permanent }).await?;
        tracing::info!(subject, permanent, "deleted subject");
        Ok(deleted_versions)
    }

    /// Deletes one version of `subject`, softly or (after a soft delete) `permanent`ly.
    pub async fn delete_version(
        &self,
        subject: &str,
        selector: VersionSelector,
        permanent: bool,
    ) -> Result<i32, RegistryError> {
        let _writing = self.writes.lock().await;
        let version = {
            let state = self.read();
            let s = visible_subject(&state, subject, true)?;
            // A numbered version is found even when soft-deleted (to answer 40406 rather than
            // 40402); `latest` means the newest live one, unless deleting permanently.
            let any = permanent || matches!(selector, VersionSelector::Number(_));
            let (version, _) = select(s, subject, selector, any)?;
            let found_deleted = s.versions.get(&version).is_some_and(|v| v.deleted);
            match (permanent, found_deleted) {
                (false, true) => {
                    return Err(RegistryError::VersionSoftDeleted {
                        subject: subject.to_owned(),
                        version,
                    });
                }
                (true, false) => {
                    return Err(RegistryError::VersionNotSoftDeleted {
                        subject: subject.to_owned(),
                        version,
                    });
                }
                _ => {}
            }
            version
        };
        self.commit(Record::DeleteVersion { subject: subject.to_owned(), version, permanent })
            .await?;
        tracing::info!(subject, version, permanent, "deleted version");
        Ok(version)
    }

    /// The canonical text of the schema with global id `id`.
    pub fn schema_by_id(&self, id: i32) -> Result<Arc<str>, RegistryError> {
        canonical(&self.read(), id)
    }

    /// Every (subject, version) whose schema has global id `id`.
    pub fn versions_of_id(
        &self,
        id: i32,
        deleted: bool,
    ) -> Result<Vec<(String, i32)>, RegistryError> {
        let state = self.read();
        canonical(&state, id)?;
        Ok(state
            .subjects()
            .flat_map(|(name, s)| {
                s.versions(deleted)
                    .filter(|(_, v)| v.id == id)
                    .map(move |(n, _)| (name.to_owned(), n))
            })
            .collect())
    }

    pub fn global_level(&self) -> CompatibilityLevel {
        self.read().global_level()
    }

    pub async fn set_global_level(&self, level: CompatibilityLevel) -> Result<(), RegistryError> {
        let _writing = self.writes.lock().await;
        self.commit(Record::SetGlobalLevel { level }).await
    }

    /// The level set on `subject` itself, if any.
    pub fn subject_level(&self, subject: &str) -> Option<CompatibilityLevel> {
        self.read().subject(subject).and_then(|s| s.level)
    }

    /// Sets (`Some`) or removes (`None`) `subject`'s own level; returns the level it had.
    pub async fn set_subject_level(
        &self,
        subject: &str,
        level: Option<CompatibilityLevel>,
    ) -> Result<Option<CompatibilityLevel>, RegistryError> {
        validate_subject(subject)?;
        let _writing = self.writes.lock().await;
        let before = self.subject_level(subject);
        self.commit(Record::SetSubjectLevel { subject: subject.to_owned(), level }).await?;
        Ok(before)
    }

    /// Checks `schema` against `subject` without registering it: against one version with
    /// `Some(selector)`, else against the versions the subject's level names. Returns
    /// Confluent-style messages; empty means compatible.
    pub fn check_compatibility(
        &self,
        subject: &str,
        schema: &str,
        against: Option<VersionSelector>,
    ) -> Result<Vec<String>, RegistryError> {
        let parsed = schema::parse(schema)?;
        let state = self.read();
        let level = state.level_of(subject);
        let Some(selector) = against else {
            let previous = previous_versions(&state, state.subject(subject));
            return Ok(compatibility::check(level, &parsed.schema, &previous));
        };
        let s = visible_subject(&state, subject, false)?;
        let (version, id) = select(s, subject, selector, false)?;
        let old = state.schema(id).ok_or(RegistryError::SchemaIdNotFound(id))?;
        let previous = [Previous { version, schema: &old.schema, canonical: &old.canonical }];
        Ok(compatibility::check(level, &parsed.schema, &previous))
    }

    /// Appends `record` and applies it. The caller holds `writes` and has validated it.
    async fn commit(&self, record: Record) -> Result<(), RegistryError> {
        self.store.append(&record).await?;
        self.write().apply(record)
    }

    // A panic while the lock was held cannot leave `State` half-changed: `apply` changes it
    // only after every check, so a poisoned lock's state is still consistent.
    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }
}

fn validate_subject(subject: &str) -> Result<(), RegistryError> {
    if subject.is_empty() {
        return Err(RegistryError::InvalidSubject("the subject name is empty".to_owned()));
    }
    if subject.len() > SUBJECT_BYTES_MAX {
        return Err(RegistryError::InvalidSubject(format!(
            "the subject name is longer than {SUBJECT_BYTES_MAX} bytes"
        )));
    }
    if subject.chars().any(char::is_control) {
        return Err(RegistryError::InvalidSubject(
            "the subject name contains a control character".to_owned(),
        ));
    }
    Ok(())
}

/// `subject`, if it has a version visible to the request.
fn visible_subject<'s>(
    state: &'s State,
    subject: &str,
    deleted: bool,
) -> Result<&'s Subject, RegistryError> {
    state
        .subject(subject)
        .filter(|s| s.has_versions(deleted))
        .ok_or_else(|| RegistryError::SubjectNotFound(subject.to_owned()))
}

/// (version, id) of the version `selector` names among those visible to the request.
fn select(
    s: &Subject,
    subject: &str,
    selector: VersionSelector,
    deleted: bool,
) -> Result<(i32, i32), RegistryError> {
    let not_found =
        |version| RegistryError::VersionNotFound { subject: subject.to_owned(), version };
    match selector {
        VersionSelector::Latest => {
            s.versions(deleted).next_back().map(|(n, v)| (n, v.id)).ok_or(not_found(-1))
        }
        VersionSelector::Number(n) => s
            .versions
            .get(&n)
            .filter(|v| deleted || !v.deleted)
            .map(|v| (n, v.id))
            .ok_or(not_found(n)),
    }
}

/// (version, id) of the newest version of `s` whose schema is `parsed`.
fn find_in_subject(
    state: &State,
    s: &Subject,
    parsed: &ParsedSchema,
    deleted: bool,
) -> Option<(i32, i32)> {
    let id = state.id_of(&parsed.canonical)?;
    s.versions(deleted).rev().find(|(_, v)| v.id == id).map(|(n, v)| (n, v.id))
}

/// The live versions of a subject, oldest first, as compatibility checks want them.
fn previous_versions<'s>(state: &'s State, s: Option<&'s Subject>) -> Vec<Previous<'s>> {
    s.into_iter()
        .flat_map(|s| s.versions(false))
        .filter_map(|(version, v)| {
            state.schema(v.id).map(|p| Previous {
                version,
                schema: &p.schema,
                canonical: &p.canonical,
            })
        })
        .collect()
}

fn canonical(state: &State, id: i32) -> Result<Arc<str>, RegistryError> {
    state.schema(id).map(|p| Arc::clone(&p.canonical)).ok_or(RegistryError::SchemaIdNotFound(id))
}
