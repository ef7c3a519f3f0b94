//! All partitions of one broker: topics found in `data_dir` on start, topics created by
//! request or on first produce, and their per-topic settings, stored beside the data as
//! `{data_dir}/.topics/{topic}.toml`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use nix::fcntl::{Flock, FlockArg};
use thiserror::Error;

use super::error::{LogError, sync_dir};
use super::partition::Partition;
use crate::config::{BrokerConfig, ConfigError, LogConfig, TopicOverrides};

/// Folder of per-topic settings. A partition folder always ends in `-{digits}`, so no topic
/// can collide with it.
const TOPICS_DIR: &str = ".topics";
const LOCK_FILE: &str = ".lock";
/// Suffix of a partition folder being removed: renamed first, so that a crash in the middle
/// of the removal never leaves a partial partition behind (no partition folder ends so).
const REMOVED_SUFFIX: &str = ".removed";

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CreateError {
    #[error(transparent)]
    InvalidName(#[from] protocol::InvalidTopicName),
    #[error(transparent)]
    InvalidConfig(#[from] ConfigError),
    #[error("topic {topic} has {existing} partitions; they cannot shrink to {requested}")]
    CannotShrink { topic: String, existing: u32, requested: u32 },
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("{context} {path}: {source}")]
    Io { context: &'static str, path: PathBuf, source: std::io::Error },
}

/// A topic, and those of its partitions that a call created.
pub type Created = (Arc<Topic>, Vec<Arc<Partition>>);

/// A topic on this broker. Replaced whole when its settings change; partitions are shared.
/// `overrides.partitions` is the topic's partition count in its cluster; `partitions` holds
/// those this broker has a replica of (all of them on a broker alone).
#[derive(Debug)]
pub struct Topic {
    pub name: String,
    pub overrides: TopicOverrides,
    pub partitions: BTreeMap<u32, Arc<Partition>>,
}

pub struct LogManager {
    data_dir: PathBuf,
    defaults: LogConfig,
    /// The broker has a remote store: `remote_storage` topics are tiered. Without one they
    /// keep their setting (a restart with a store tiers them) but not tiered retention.
    tiering: bool,
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    /// Serializes topic creation so that two first produces create one topic.
    create: Mutex<()>,
    /// Held for the life of the broker: one broker per data directory.
    _lock: Flock<fs::File>,
}

fn io_error(context: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CreateError {
    let path = path.to_owned();
    move |source| CreateError::Io { context, path, source }
}

impl LogManager {
    /// Locks `data_dir`, finds its topics and recovers every partition. Blocking.
    pub fn open(config: &BrokerConfig) -> Result<LogManager, CreateError> {
        let data_dir = config.data_dir.clone();
        let topics_dir = data_dir.join(TOPICS_DIR);
        fs::create_dir_all(&topics_dir).map_err(io_error("creating", &topics_dir))?;
        let lock_path = data_dir.join(LOCK_FILE);
        let lock_file = fs::File::create(&lock_path).map_err(io_error("creating", &lock_path))?;
        let lock =
            Flock::lock(lock_file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
                let source = std::io::Error::other(format!(
                    "{errno}: is another broker using this data directory?"
                ));
                CreateError::Io { context: "locking", path: lock_path.clone(), source }
            })?;

        // Settings first, then partition folders (which may exist without settings).
        let mut found: BTreeMap<String, TopicOverrides> = BTreeMap::new();
        let mut hosted: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        for entry in fs::read_dir(&topics_dir).map_err(io_error("listing", &topics_dir))? {
            let path = entry.map_err(io_error("listing", &topics_dir))?.path();
            let Some(name) =
                path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".toml"))
            else {
                continue;
            };
            let text = fs::read_to_string(&path).map_err(io_error("reading", &path))?;
            let overrides: TopicOverrides = toml::from_str(&text).map_err(|e| CreateError::Io {
                context: "parsing",
                path: path.clone(),
                source: std::io::Error::other(e.message().to_owned()),
            })?;
            found.insert(name.to_owned(), overrides);
        }
        for entry in fs::read_dir(&data_dir).map_err(io_error("listing", &data_dir))? {
            let entry = entry.map_err(io_error("listing", &data_dir))?;
            let name = entry.file_name();
            if name.to_str().is_some_and(|n| n.ends_with(REMOVED_SUFFIX)) {
                // A removal that a crash interrupted: finish it.
                fs::remove_dir_all(entry.path()).map_err(io_error("removing", &entry.path()))?;
                continue;
            }
            let Some((topic, index)) = name.to_str().and_then(parse_partition_dir) else {
                continue;
            };
            let overrides = found.entry(topic.to_owned()).or_default();
            overrides.partitions = overrides.partitions.max(index + 1);
            hosted.entry(topic.to_owned()).or_default().insert(index);
        }

        let manager = LogManager {
            data_dir,
            defaults: config.log(),
            tiering: config.remote_store.is_some(),
            topics: RwLock::new(HashMap::new()),
            create: Mutex::new(()),
            _lock: lock,
        };
        for (name, overrides) in found {
            if protocol::validate_topic_name(&name).is_err() || overrides.partitions == 0 {
                tracing::warn!(topic = %name, "ignoring invalid topic settings");
                continue;
            }
            let here = hosted.remove(&name).unwrap_or_default();
            let topic = manager.build_topic(&name, overrides, &BTreeMap::new(), Some(&here))?;
            tracing::info!(topic = %name, partitions = topic.partitions.len(), "recovered topic");
            manager.topics_mut().insert(name, Arc::new(topic));
        }
        Ok(manager)
    }

    fn topics_mut(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<Topic>>> {
        self.topics.write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().unwrap_or_else(|p| p.into_inner()).get(name).cloned()
    }

    /// Every topic, sorted by name.
    pub fn topics(&self) -> Vec<Arc<Topic>> {
        let mut topics: Vec<_> =
            self.topics.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        topics
    }

    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        self.topics().iter().flat_map(|t| t.partitions.values().cloned()).collect()
    }

    /// The topic, created with the broker's defaults if it does not exist. Blocking.
    pub fn ensure_topic(
        &self,
        name: &str,
        default_partitions: u32,
    ) -> Result<Created, CreateError> {
        protocol::validate_topic_name(name)?;
        let creating = self.create.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(topic) = self.topic(name) {
            return Ok((topic, Vec::new()));
        }
        let overrides = TopicOverrides { partitions: default_partitions, ..Default::default() };
        self.create_locked(name, overrides, None, creating)
    }

    /// Creates a topic, or changes an existing one's settings and grows its partitions.
    /// Blocking. Returns the topic and the partitions that did not exist before.
    pub fn create_topic(
        &self,
        name: &str,
        overrides: TopicOverrides,
    ) -> Result<Created, CreateError> {
        protocol::validate_topic_name(name)?;
        let creating = self.create.lock().unwrap_or_else(|p| p.into_inner());
        self.create_locked(name, overrides, None, creating)
    }

    /// Like [`LogManager::create_topic`] for a topic of a cluster: opens only the `hosted`
    /// partitions (those this broker has a replica of), keeping any it has already.
    pub fn host_topic(
        &self,
        name: &str,
        overrides: TopicOverrides,
        hosted: &BTreeSet<u32>,
    ) -> Result<Created, CreateError> {
        protocol::validate_topic_name(name)?;
        let creating = self.create.lock().unwrap_or_else(|p| p.into_inner());
        self.create_locked(name, overrides, Some(hosted), creating)
    }

    fn create_locked(
        &self,
        name: &str,
        overrides: TopicOverrides,
        hosted: Option<&BTreeSet<u32>>,
        _creating: std::sync::MutexGuard<'_, ()>,
    ) -> Result<Created, CreateError> {
        let existing = self.topic(name);
        let none = BTreeMap::new();
        let kept: &BTreeMap<u32, Arc<Partition>> =
            existing.as_ref().map_or(&none, |t| &t.partitions);
        let existing_count = existing.as_ref().map_or(0, |t| t.overrides.partitions);
        if overrides.partitions < existing_count {
            return Err(CreateError::CannotShrink {
                topic: name.to_owned(),
                existing: existing_count,
                requested: overrides.partitions,
            });
        }
        let all_hosted = hosted.is_none_or(|h| h.iter().all(|p| kept.contains_key(p)));
        if existing.as_ref().is_some_and(|t| t.overrides == overrides)
            && all_hosted
            && hosted.is_some()
        {
            return Ok((existing.expect("checked"), Vec::new()));
        }
        if hosted.is_none()
            && existing.as_ref().is_some_and(|t| {
                t.overrides == overrides && t.partitions.len() as u32 == overrides.partitions
            })
        {
            return Ok((existing.expect("checked"), Vec::new()));
        }
        let settings = self.data_dir.join(TOPICS_DIR).join(format!("{name}.toml"));
        let text = toml::to_string(&overrides).expect("overrides serialize");
        service::durable::write(&settings, text.as_bytes())
            .map_err(io_error("writing", &settings))?;
        let topic = self.build_topic(name, overrides, kept, hosted)?;
        let added: Vec<Arc<Partition>> = topic
            .partitions
            .iter()
            .filter(|(p, _)| !kept.contains_key(p))
            .map(|(_, partition)| Arc::clone(partition))
            .collect();
        if !added.is_empty() {
            sync_dir(&self.data_dir)?;
        }
        let topic = Arc::new(topic);
        self.topics_mut().insert(name.to_owned(), Arc::clone(&topic));
        tracing::info!(topic = %name, partitions = topic.partitions.len(), settings = ?topic.overrides.values, "topic ready");
        Ok((topic, added))
    }

    /// A topic with `overrides`, reusing `kept` partitions and opening the `hosted` rest (all
    /// `0..partitions` when `None`).
    fn build_topic(
        &self,
        name: &str,
        overrides: TopicOverrides,
        kept: &BTreeMap<u32, Arc<Partition>>,
        hosted: Option<&BTreeSet<u32>>,
    ) -> Result<Topic, CreateError> {
        let mut config = self.defaults.with_overrides(&overrides);
        // A compacted topic is never tiered (its cleaned segments would not be the stored ones).
        config.remote_storage &= self.tiering && !config.cleanup_policy.compact;
        let mut partitions = kept.clone();
        for p in partitions.values() {
            p.set_config(config);
        }
        let all: BTreeSet<u32> = (0..overrides.partitions).collect();
        for &index in hosted.unwrap_or(&all) {
            if index >= overrides.partitions || partitions.contains_key(&index) {
                continue;
            }
            let dir = self.data_dir.join(format!("{name}-{index}"));
            partitions.insert(index, Arc::new(Partition::open(dir, name, index, config)?));
        }
        Ok(Topic { name: name.to_owned(), overrides, partitions })
    }

    /// Removes the `indexes` partitions of `name` from this broker, files and all, and the
    /// whole topic (its settings too) when `whole_topic`. Returns the partitions removed, whose
    /// tasks have been told to stop. Blocking.
    pub fn remove(
        &self,
        name: &str,
        indexes: &BTreeSet<u32>,
        whole_topic: bool,
    ) -> Result<Vec<Arc<Partition>>, CreateError> {
        let _creating = self.create.lock().unwrap_or_else(|p| p.into_inner());
        let Some(topic) = self.topic(name) else { return Ok(Vec::new()) };
        let (removed, kept): (BTreeMap<u32, Arc<Partition>>, BTreeMap<u32, Arc<Partition>>) = topic
            .partitions
            .iter()
            .map(|(&i, p)| (i, Arc::clone(p)))
            .partition(|(i, _)| whole_topic || indexes.contains(i));
        if whole_topic {
            self.topics_mut().remove(name);
        } else {
            let changed = Topic {
                name: name.to_owned(),
                overrides: topic.overrides.clone(),
                partitions: kept,
            };
            self.topics_mut().insert(name.to_owned(), Arc::new(changed));
        }
        for partition in removed.values() {
            partition.removed().cancel();
            let dir = partition.dir();
            let mut doomed = dir.as_os_str().to_owned();
            doomed.push(REMOVED_SUFFIX);
            let doomed = PathBuf::from(doomed);
            fs::rename(dir, &doomed).map_err(io_error("renaming", dir))?;
            sync_dir(&self.data_dir)?;
            fs::remove_dir_all(&doomed).map_err(io_error("removing", &doomed))?;
        }
        if whole_topic {
            let settings = self.data_dir.join(TOPICS_DIR).join(format!("{name}.toml"));
            match fs::remove_file(&settings) {
                Ok(()) => sync_dir(&self.data_dir.join(TOPICS_DIR))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error("removing", &settings)(e)),
            }
        }
        if !removed.is_empty() {
            sync_dir(&self.data_dir)?;
        }
        let indexes: Vec<u32> = removed.keys().copied().collect();
        tracing::info!(topic = %name, partitions = ?indexes, whole_topic, "removed from this broker");
        Ok(removed.into_values().collect())
    }

    /// Flushes every partition. Blocking; used at shutdown.
    pub fn flush_all(&self) -> Result<(), LogError> {
        self.partitions().iter().try_for_each(|p| p.flush())
    }
}

/// `{topic}-{partition}` → `(topic, partition)`; topics may contain `-` themselves.
fn parse_partition_dir(name: &str) -> Option<(&str, u32)> {
    let (topic, index) = name.rsplit_once('-')?;
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    protocol::validate_topic_name(topic).ok()?;
    Some((topic, index.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_dirs_split_at_the_last_dash() {
        assert_eq!(parse_partition_dir("page-views-12"), Some(("page-views", 12)));
        assert_eq!(parse_partition_dir("a-0"), Some(("a", 0)));
        assert_eq!(parse_partition_dir(".topics"), None);
        assert_eq!(parse_partition_dir("a-"), None);
        assert_eq!(parse_partition_dir("-3"), None);
        assert_eq!(parse_partition_dir("a-x"), None);
    }
}
