//! The registry's state in memory: schemas by global id, and each subject's versions. It
//! changes only by applying log records, so replaying the log on start rebuilds it exactly.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::compatibility::CompatibilityLevel;
use crate::error::RegistryError;
use crate::schema::{self, ParsedSchema};
use crate::store::Record;

#[derive(Debug)]
pub struct State {
    /// Schemas that some version (live or soft-deleted) still refers to.
    schemas: HashMap<i32, ParsedSchema>,
    /// Canonical text → id, for the same set of schemas.
    ids: HashMap<Arc<str>, i32>,
    subjects: BTreeMap<String, Subject>,
    global_level: CompatibilityLevel,
    /// One above the largest id ever assigned: ids of permanently deleted schemas stay used.
    next_id: i32,
}

#[derive(Debug, Default)]
pub struct Subject {
    pub versions: BTreeMap<i32, Version>,
    pub level: Option<CompatibilityLevel>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    pub id: i32,
    pub deleted: bool,
}

impl Subject {
    /// Versions a reader sees: all of them with `deleted`, else only the live ones.
    pub fn versions(&self, deleted: bool) -> impl DoubleEndedIterator<Item = (i32, Version)> + '_ {
        self.versions.iter().filter(move |(_, v)| deleted || !v.deleted).map(|(&n, &v)| (n, v))
    }

    pub fn has_versions(&self, deleted: bool) -> bool {
        self.versions(deleted).next().is_some()
    }
}

impl State {
    pub fn new(global_level: CompatibilityLevel) -> Self {
        State {
            schemas: HashMap::new(),
            ids: HashMap::new(),
            subjects: BTreeMap::new(),
            global_level,
            next_id: 1,
        }
    }

    /// Schemas kept, and subjects with a live version.
    pub fn sizes(&self) -> (usize, usize) {
        let live = self.subjects.values().filter(|s| s.has_versions(false)).count();
        (self.schemas.len(), live)
    }

    pub fn schema(&self, id: i32) -> Option<&ParsedSchema> {
        self.schemas.get(&id)
    }

    pub fn id_of(&self, canonical: &str) -> Option<i32> {
        self.ids.get(canonical).copied()
    }

    pub fn next_id(&self) -> i32 {
        self.next_id
    }

    pub fn subject(&self, name: &str) -> Option<&Subject> {
        self.subjects.get(name)
    }

    pub fn subjects(&self) -> impl Iterator<Item = (&str, &Subject)> {
        self.subjects.iter().map(|(name, s)| (name.as_str(), s))
    }

    pub fn global_level(&self) -> CompatibilityLevel {
        self.global_level
    }

    /// The level that governs `subject`: its own, else the global one.
    pub fn level_of(&self, subject: &str) -> CompatibilityLevel {
        self.subject(subject).and_then(|s| s.level).unwrap_or(self.global_level)
    }

    /// Makes `parsed` known under `id` before a `Register` record for it is applied, so the
    /// live path does not parse the schema a second time.
    pub fn insert_schema(&mut self, id: i32, parsed: ParsedSchema) {
        self.ids.insert(Arc::clone(&parsed.canonical), id);
        self.schemas.insert(id, parsed);
        self.next_id = self.next_id.max(id.saturating_add(1));
    }

    /// Applies one record. Fails only when a `Register` record's schema does not parse, which
    /// can happen in replay alone (the live path inserts the parsed schema first).
    pub fn apply(&mut self, record: Record) -> Result<(), RegistryError> {
        match record {
            Record::Register { subject, version, id, schema: text } => {
                if !self.schemas.contains_key(&id) {
                    self.insert_schema(id, schema::parse(&text)?);
                }
                self.subjects
                    .entry(subject)
                    .or_default()
                    .versions
                    .insert(version, Version { id, deleted: false });
            }
            Record::DeleteVersion { subject, version, permanent } => {
                if let Some(s) = self.subjects.get_mut(&subject) {
                    if permanent {
                        if let Some(removed) = s.versions.remove(&version) {
                            self.forget_unreferenced(&[removed.id]);
                        }
                    } else if let Some(v) = s.versions.get_mut(&version) {
                        v.deleted = true;
                    }
                }
                self.drop_if_empty(&subject);
            }
            Record::DeleteSubject { subject, permanent } => {
                if permanent {
                    if let Some(s) = self.subjects.remove(&subject) {
                        let ids: Vec<i32> = s.versions.values().map(|v| v.id).collect();
                        self.forget_unreferenced(&ids);
                    }
                } else if let Some(s) = self.subjects.get_mut(&subject) {
                    s.versions.values_mut().for_each(|v| v.deleted = true);
                }
            }
            Record::SetGlobalLevel { level } => self.global_level = level,
            Record::SetSubjectLevel { subject, level } => {
                self.subjects.entry(subject.clone()).or_default().level = level;
                self.drop_if_empty(&subject);
            }
        }
        Ok(())
    }

    /// Removes the schemas among `ids` that no version of any subject refers to any more.
    fn forget_unreferenced(&mut self, ids: &[i32]) {
        for &id in ids {
            let referenced =
                self.subjects.values().any(|s| s.versions.values().any(|v| v.id == id));
            if referenced {
                continue;
            }
            if let Some(parsed) = self.schemas.remove(&id) {
                self.ids.remove(&parsed.canonical);
            }
        }
    }

    fn drop_if_empty(&mut self, subject: &str) {
        if self.subjects.get(subject).is_some_and(|s| s.versions.is_empty() && s.level.is_none()) {
            self.subjects.remove(subject);
        }
    }
}
