//! `CREATE_TOPIC` (and Kafka's CreateTopics): in the cluster's registry when the broker is in
//! one, in its own logs when it is alone.

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
}
