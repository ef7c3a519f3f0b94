//! `CREATE_TOPIC` in a cluster: the replicas of each new partition spread over the live
//! brokers and each partition's first state, written to the registry by whichever broker the
//! request reached; every broker then opens its replicas when it reads them back
//! ([`super::replica_manager`]). An existing topic gets its new settings and partitions.

use std::collections::{BTreeMap, BTreeSet};

use cluster::{PartitionState, Registry, TopicAssignment, Version};
use protocol::ErrorCode;

use crate::config::{
    BrokerConfig, MIN_INSYNC_REPLICAS, REPLICATION_FACTOR, TopicOverrides, split_cluster_keys,
};

/// What a topic's creation or change asks of the cluster, checked.
struct Settings {
    /// Partitions the topic has afterwards.
    partitions: i32,
    factor: u32,
    /// The topic's settings to record: its log keys as given, and its replication.
    config: BTreeMap<String, String>,
}

/// Writes the topic's assignment and its new partitions' states; the partitions the registry
/// holds afterwards that this call created. The topic's creator may be another broker, racing.
pub(super) async fn create(
    registry: &Registry,
    config: &BrokerConfig,
    name: &str,
    partitions: i32,
    configs: &[(String, String)],
) -> Result<(), ErrorCode> {
    let live: BTreeSet<i32> = registry.brokers().await.map_err(internal)?.into_keys().collect();
    let existing = registry.topic_assignment(name).await.map_err(internal)?;
    let settings = settings(config, name, partitions, configs, existing.as_ref())?;
    let added = assign(registry, name, &live, settings, existing).await?;
    if added.is_empty() {
        return Ok(());
    }
    let (assignment, _) =
        registry.topic_assignment(name).await.map_err(internal)?.ok_or(ErrorCode::Unknown)?;
    let controller_epoch = registry.controller_epoch().await.map_err(internal)?;
    for p in &added {
        let Some(partition_replicas) = assignment.replicas(*p) else { continue };
        let state = PartitionState::initial(partition_replicas, &live, controller_epoch);
        match registry.create_partition_state(name, *p, &state).await {
            Ok(_) | Err(cluster::RegistryError::Conflict { .. }) => {}
            Err(e) => return Err(internal(e)),
        }
    }
    tracing::info!(
        topic = %name, partitions = assignment.partitions.len(),
        replication_factor = assignment.replication_factor(), "created topic in the cluster"
    );
    Ok(())
}

/// The settings of a creation or change, checked against the topic as it is: its log keys
/// parse, `min_insync_replicas` is at most the replication factor, which cannot change.
fn settings(
    config: &BrokerConfig,
    name: &str,
    partitions: i32,
    configs: &[(String, String)],
    existing: Option<&(TopicAssignment, Version)>,
) -> Result<Settings, ErrorCode> {
    let invalid = |reason: String| {
        tracing::debug!(topic = %name, %reason, "rejected topic config");
        ErrorCode::InvalidConfig
    };
    let (cluster_keys, log_keys) = split_cluster_keys(configs);
    let overrides = TopicOverrides::parse(partitions, &log_keys, config.num_partitions)
        .map_err(|e| invalid(e.to_string()))?;
    let number = |key: &str, default: u32| -> Result<u32, ErrorCode> {
        match cluster_keys.get(key) {
            Some(v) => v
                .trim()
                .parse()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| invalid(format!("{key} must be a whole number, at least 1"))),
            None => Ok(default),
        }
    };
    let existing_factor = existing.map(|(a, _)| a.replication_factor() as u32);
    let factor =
        number(REPLICATION_FACTOR, existing_factor.unwrap_or(config.default_replication_factor))?;
    // A change of an existing topic's other settings keeps its own min_insync_replicas.
    let existing_min_insync = existing
        .and_then(|(a, _)| a.config.get(MIN_INSYNC_REPLICAS))
        .and_then(|v| v.trim().parse().ok());
    let min_insync =
        number(MIN_INSYNC_REPLICAS, existing_min_insync.unwrap_or(config.min_insync_replicas))?;
    if min_insync > factor {
        return Err(invalid(format!(
            "min_insync_replicas {min_insync} exceeds replication_factor {factor}"
        )));
    }
    if existing_factor.is_some_and(|f| f != factor) {
        return Err(invalid("replication_factor cannot change (a reassignment would)".into()));
    }
    let mut recorded: BTreeMap<String, String> = configs.iter().cloned().collect();
    recorded.remove("partitions");
    recorded.insert(REPLICATION_FACTOR.into(), factor.to_string());
    recorded.insert(MIN_INSYNC_REPLICAS.into(), min_insync.to_string());
    Ok(Settings { partitions: overrides.partitions as i32, factor, config: recorded })
}

/// Creates the topic's assignment, or merges the new settings and partitions into the one it
/// has; the partitions this added.
async fn assign(
    registry: &Registry,
    name: &str,
    live: &BTreeSet<i32>,
    settings: Settings,
    existing: Option<(TopicAssignment, Version)>,
) -> Result<Vec<i32>, ErrorCode> {
    let Settings { partitions: count, factor, config } = settings;
    let spread = |first: i32, n: i32| {
        let (start, shift) = (rand::random_range(0..1024usize), rand::random_range(0..1024usize));
        cluster::assign_replicas(live, first, n as u32, factor as usize, start, shift).map_err(
            |e| {
                tracing::debug!(topic = %name, reason = %e, "rejected topic config");
                ErrorCode::InvalidConfig
            },
        )
    };
    match existing {
        None => {
            let assignment = TopicAssignment { partitions: spread(0, count)?, config };
            match registry.create_topic(name, &assignment).await {
                Ok(()) => Ok((0..count).collect()),
                // Another broker created it first: its assignment stands.
                Err(cluster::RegistryError::TopicExists { .. }) => Ok(Vec::new()),
                Err(e) => Err(internal(e)),
            }
        }
        Some((mut assignment, version)) => {
            let have = assignment.partitions.len() as i32;
            if count < have {
                tracing::debug!(topic = %name, from = have, to = count, "rejected: partitions cannot shrink");
                return Err(ErrorCode::InvalidConfig);
            }
            assignment.config.extend(config);
            if count > have {
                assignment.partitions.extend(spread(have, count - have)?);
            }
            match registry.set_topic_assignment(name, &assignment, version).await {
                Ok(_) => Ok((have..count).collect()),
                Err(cluster::RegistryError::Conflict { .. }) => Err(ErrorCode::Unknown),
                Err(e) => Err(internal(e)),
            }
        }
    }
}

/// How many times a settings change is tried again when another change of the topic won
/// the race for its assignment.
const ALTER_ATTEMPTS: usize = 5;

/// Changes a topic's settings in the registry: `changes` sets (a value) or removes (`None`)
/// keys, and with `replace` every other key but the replication factor goes back to the
/// brokers' default. The result is checked as a creation's settings are; with
/// `validate_only` nothing is written. Brokers apply the change when they read it back.
pub(super) async fn alter(
    registry: &Registry,
    config: &BrokerConfig,
    name: &str,
    changes: &[(String, Option<String>)],
    replace: bool,
    validate_only: bool,
) -> Result<(), (ErrorCode, String)> {
    let registry_failed = |e| (internal(e), "the registry failed".to_owned());
    for _ in 0..ALTER_ATTEMPTS {
        let Some((mut assignment, version)) =
            registry.topic_assignment(name).await.map_err(registry_failed)?
        else {
            return Err((ErrorCode::UnknownTopic, format!("no topic {name}")));
        };
        if replace {
            assignment.config.retain(|k, _| k == REPLICATION_FACTOR);
        }
        for (key, value) in changes {
            match value {
                _ if key == REPLICATION_FACTOR => {
                    let reason = "replication_factor changes by a reassignment".to_owned();
                    return Err((ErrorCode::InvalidConfig, reason));
                }
                Some(value) => drop(assignment.config.insert(key.clone(), value.clone())),
                None => drop(assignment.config.remove(key)),
            }
        }
        if let Some(value) = assignment.config.get(cluster::UNCLEAN_LEADER_ELECTION)
            && !["true", "false"].contains(&value.trim().to_ascii_lowercase().as_str())
        {
            let reason = format!("{} is true or false", cluster::UNCLEAN_LEADER_ELECTION);
            return Err((ErrorCode::InvalidConfig, reason));
        }
        let count = assignment.partitions.len() as i32;
        let all: Vec<(String, String)> =
            assignment.config.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        settings(config, name, count, &all, None).map_err(|code| {
            (code, "a setting Tributary does not take, or a value it refuses".to_owned())
        })?;
        if validate_only {
            return Ok(());
        }
        match registry.set_topic_assignment(name, &assignment, version).await {
            Ok(_) => return Ok(()),
            Err(cluster::RegistryError::Conflict { .. }) => continue,
            Err(e) => return Err(registry_failed(e)),
        }
    }
    Err((ErrorCode::Unknown, "the topic kept changing under the request".to_owned()))
}

pub(super) fn internal(error: cluster::RegistryError) -> ErrorCode {
    tracing::error!(%error, "the registry failed");
    ErrorCode::Unknown
}
