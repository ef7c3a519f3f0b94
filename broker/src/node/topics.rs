//! `CREATE_TOPIC` (and Kafka's CreateTopics): in the cluster's registry when the broker is in
//! one, in its own logs when it is alone.

use std::collections::BTreeMap;
use std::time::Duration;

use protocol::ErrorCode;

use super::Node;
use crate::config::{MIN_INSYNC_REPLICAS, REPLICATION_FACTOR, TopicOverrides, split_cluster_keys};

impl Node {
    /// A new topic, or new settings and more partitions for an existing one.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: &[(String, String)],
    ) -> Result<(), ErrorCode> {
        protocol::validate_topic_name(name).map_err(|_| ErrorCode::InvalidTopicName)?;
        if let Some(membership) = &self.membership {
            return membership.create_topic(name, partitions, configs).await;
        }
        let (replication, configs) = split_cluster_keys(configs);
        let one = |key| replication.get(key).is_none_or(|v: &String| v.trim() == "1");
        if !one(REPLICATION_FACTOR) || !one(MIN_INSYNC_REPLICAS) {
            tracing::debug!(topic = %name, "a broker alone keeps one replica");
            return Err(ErrorCode::InvalidConfig);
        }
        let overrides = TopicOverrides::parse(partitions, &configs, self.config().num_partitions)
            .map_err(|e| {
            tracing::debug!(topic = %name, error = %e, "rejected topic config");
            ErrorCode::InvalidConfig
        })?;
        self.replicas.create_alone(name, overrides).await.map(drop)
    }

    /// Creates a topic with the brokers' defaults unless it exists: what a Kafka client's
    /// Metadata for an unknown topic does.
    pub async fn auto_create_topic(&self, name: &str) -> Result<(), ErrorCode> {
        protocol::validate_topic_name(name).map_err(|_| ErrorCode::InvalidTopicName)?;
        match &self.membership {
            Some(membership) => membership.ensure_topic(name).await,
            None => self.replicas.ensure_alone(name).await.map(drop),
        }
    }

    /// Changes a topic's settings (see `membership::topics::alter`); a broker outside a
    /// cluster keeps its topics' settings in its logs, which `CREATE_TOPIC` changes.
    pub async fn alter_topic(
        &self,
        name: &str,
        changes: &[(String, Option<String>)],
        replace: bool,
        validate_only: bool,
    ) -> Result<(), (ErrorCode, String)> {
        match &self.membership {
            Some(membership) => membership.alter_topic(name, changes, replace, validate_only).await,
            None => Err((
                ErrorCode::InvalidRequest,
                "a broker outside a cluster changes topic settings by CREATE_TOPIC".to_owned(),
            )),
        }
    }

    /// Deletes a topic: from the cluster, waiting at most `timeout` for its replicas to go;
    /// from this broker's logs, if it is alone.
    pub async fn delete_topic(&self, name: &str, timeout: Duration) -> Result<(), ErrorCode> {
        if let Some(membership) = &self.membership {
            return membership.delete_topic(name, timeout).await;
        }
        let Some(topic) = self.replicas.logs().topic(name) else {
            return Err(ErrorCode::UnknownTopic);
        };
        let partitions = topic.partitions.keys().copied().collect();
        self.replicas.remove(name, partitions, true).await
    }

    /// A topic's own settings (Tributary's keys), if the topic exists: the registry's record
    /// in a cluster (read from it, so a change just made shows), the logs' overrides on a
    /// broker alone.
    pub async fn topic_config(
        &self,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, ErrorCode> {
        if let Some(membership) = &self.membership {
            if membership.view().deleting.contains(name) {
                return Ok(None);
            }
            return match membership.registry().topic_assignment(name).await {
                Ok(found) => Ok(found.map(|(assignment, _)| assignment.config)),
                Err(e) => {
                    tracing::warn!(topic = %name, error = %e, "cannot read a topic's settings");
                    Err(ErrorCode::Unknown)
                }
            };
        }
        let Some(topic) = self.replicas.logs().topic(name) else { return Ok(None) };
        let mut config: BTreeMap<String, String> =
            topic.overrides.values.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
        if let Some(visible) = topic.overrides.visible_after {
            config.insert("visible_after".into(), visible.to_string());
        }
        if let Some(timestamp_type) = topic.overrides.timestamp_type {
            config.insert(crate::config::TIMESTAMP_TYPE.into(), timestamp_type.to_string());
        }
        if let Some(remote_storage) = topic.overrides.remote_storage {
            config.insert(crate::config::REMOTE_STORAGE.into(), remote_storage.to_string());
        }
        if let Some(policy) = topic.overrides.cleanup_policy {
            config.insert(crate::config::CLEANUP_POLICY.into(), policy.to_string());
        }
        Ok(Some(config))
    }
}
