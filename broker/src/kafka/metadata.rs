//! ApiVersions, Metadata and CreateTopics over the Kafka listener. Metadata is the broker's own
//! (`Node::metadata`: leaders, leader epochs, replicas, ISRs from the cluster's registry) with
//! each broker's Kafka port; the leader epoch answered is −1, so that clients skip
//! OffsetForLeaderEpoch validation, which the listener does not serve.

use bytes::BytesMut;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, CreateTopicsResponse, MetadataResponse, TopicName,
};
use protocol::ErrorCode;

use super::client::Client;
use crate::acl::Operation;
use crate::config::topic_key;
use protocol::kafka::request::Malformed;
use protocol::kafka::request::{CreateTopicsRequest, Header, MetadataRequest};
use protocol::kafka::response::{code, encode, encode_version, kafka_error, str_bytes};
use protocol::kafka::versions;

/// The cluster id Kafka clients are told.
pub(super) const CLUSTER_ID: &str = "tributary";

fn api_keys() -> Vec<ApiVersion> {
    versions::SERVED
        .iter()
        .map(|s| {
            ApiVersion::default()
                .with_api_key(s.key as i16)
                .with_min_version(s.min)
                .with_max_version(s.max)
        })
        .collect()
}

pub fn api_versions(header: &Header) -> Result<BytesMut, Malformed> {
    let body = ApiVersionsResponse::default().with_api_keys(api_keys());
    encode(ApiKey::ApiVersions, header, &body)
}

/// The answer to an ApiVersions request of a version not served: version 0, with the error and
/// the versions served, which every client reads to pick one it and the broker share.
pub fn unsupported_api_versions(correlation_id: i32) -> Result<BytesMut, Malformed> {
    let body = ApiVersionsResponse::default()
        .with_error_code(code::UNSUPPORTED_VERSION)
        .with_api_keys(api_keys());
    encode_version(ApiKey::ApiVersions, 0, correlation_id, &body)
}

pub async fn metadata(
    client: &Client,
    header: &Header,
    request: MetadataRequest,
) -> Result<BytesMut, Malformed> {
    let node = &client.node;
    let authorizer = node.authorizer();
    let asked: Vec<String> = request.topics.clone().unwrap_or_default();
    // Unknown topics asked for are created, as a Kafka broker with auto.create.topics.enable
    // does, when the client allows it and the principal may create them.
    if request.allow_auto_topic_creation && node.config().auto_create_topics && !asked.is_empty() {
        let known = node.metadata(&asked);
        for topic in known.topics.iter().filter(|t| t.error == ErrorCode::UnknownTopic) {
            if protocol::validate_topic_name(&topic.name).is_ok()
                && authorizer.check(&client.principal, &topic.name, Operation::Create)
                && let Err(e) = node.auto_create_topic(&topic.name).await
            {
                tracing::debug!(topic = %topic.name, error = ?e, "auto-creating a topic for a Kafka client failed");
            }
        }
    }
    let native = node.metadata(&asked);
    let brokers = node
        .kafka_endpoints()
        .into_iter()
        .map(|(id, host, port)| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(id))
                .with_host(str_bytes(&host))
                .with_port(i32::from(port))
        })
        .collect();
    let mut topics = Vec::with_capacity(native.topics.len());
    for topic in &native.topics {
        let allowed = authorizer.check(&client.principal, &topic.name, Operation::Describe);
        if !allowed {
            if request.topics.is_some() {
                topics.push(topic_error(&topic.name, code::TOPIC_AUTHORIZATION_FAILED));
            }
            continue;
        }
        if topic.error != ErrorCode::None {
            // A name no topic can have is not worth a client's retries.
            let error = match protocol::validate_topic_name(&topic.name) {
                Err(_) => code::INVALID_TOPIC_EXCEPTION,
                Ok(()) => kafka_error(topic.error),
            };
            topics.push(topic_error(&topic.name, error));
            continue;
        }
        let partitions = topic
            .partitions
            .iter()
            .map(|p| {
                let error = match p.error {
                    ErrorCode::None => code::NONE,
                    ErrorCode::NotLeader => code::LEADER_NOT_AVAILABLE,
                    e => kafka_error(e),
                };
                MetadataResponsePartition::default()
                    .with_error_code(error)
                    .with_partition_index(p.partition)
                    .with_leader_id(BrokerId(p.leader))
                    .with_leader_epoch(-1)
                    .with_replica_nodes(p.replicas.iter().map(|&r| BrokerId(r)).collect())
                    .with_isr_nodes(p.isr.iter().map(|&r| BrokerId(r)).collect())
            })
            .collect();
        topics.push(
            MetadataResponseTopic::default()
                .with_name(Some(TopicName(str_bytes(&topic.name))))
                .with_is_internal(topic.name.starts_with('_'))
                .with_partitions(partitions),
        );
    }
    let body = MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(Some(str_bytes(CLUSTER_ID)))
        .with_controller_id(BrokerId(node.config().broker_id))
        .with_topics(topics);
    encode(ApiKey::Metadata, header, &body)
}

fn topic_error(name: &str, error: i16) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(error)
        .with_name(Some(TopicName(str_bytes(name))))
}

pub async fn create_topics(
    client: &Client,
    header: &Header,
    request: CreateTopicsRequest,
) -> Result<BytesMut, Malformed> {
    let node = &client.node;
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let result = |error: i16, message: Option<String>| {
            CreatableTopicResult::default()
                .with_name(TopicName(str_bytes(&topic.name)))
                .with_error_code(error)
                .with_error_message(message.map(|m| str_bytes(&m)))
        };
        if !node.authorizer().check(&client.principal, &topic.name, Operation::Create) {
            results.push(result(code::TOPIC_AUTHORIZATION_FAILED, None));
            continue;
        }
        if protocol::validate_topic_name(&topic.name).is_err() {
            results.push(result(code::INVALID_TOPIC_EXCEPTION, None));
            continue;
        }
        let existing = node.metadata(std::slice::from_ref(&topic.name));
        if existing.topics.iter().any(|t| t.error != ErrorCode::UnknownTopic) {
            let message = format!("topic {} already exists", topic.name);
            results.push(result(code::TOPIC_ALREADY_EXISTS, Some(message)));
            continue;
        }
        if !topic.assignments.is_empty() {
            let message = "replica assignments are made by the controller".to_owned();
            results.push(result(code::INVALID_REQUEST, Some(message)));
            continue;
        }
        if topic.num_partitions == 0 || topic.num_partitions < -1 {
            results.push(result(code::INVALID_PARTITIONS, None));
            continue;
        }
        if topic.replication_factor == 0 || topic.replication_factor < -1 {
            results.push(result(code::INVALID_REPLICATION_FACTOR, None));
            continue;
        }
        // Kafka's topic configs are dotted (`retention.ms`), Tributary's underscored.
        let mut configs: Vec<(String, String)> = Vec::new();
        for (name, value) in &topic.configs {
            if let Some(value) = value {
                configs.push((topic_key(name).to_owned(), value.clone()));
            }
        }
        if topic.replication_factor > 0 {
            configs.push(("replication_factor".into(), topic.replication_factor.to_string()));
        }
        if request.validate_only {
            results.push(result(code::NONE, None));
            continue;
        }
        let partitions = topic.num_partitions.max(0);
        match node.create_topic(&topic.name, partitions, &configs).await {
            Ok(()) => results.push(result(code::NONE, None)),
            Err(ErrorCode::InvalidConfig) => {
                let message = "a setting Tributary does not take, or a value it refuses";
                results.push(result(code::INVALID_CONFIG, Some(message.to_owned())));
            }
            Err(e) => results.push(result(kafka_error(e), None)),
        }
    }
    let body = CreateTopicsResponse::default().with_topics(results);
    encode(ApiKey::CreateTopics, header, &body)
}
