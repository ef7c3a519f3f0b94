//! Kafka's topic and cluster administration: DeleteTopics, CreatePartitions, DescribeConfigs,
//! AlterConfigs, IncrementalAlterConfigs and DescribeCluster, on the mechanisms `trib` uses
//! (`Registry::delete_topic`, a topic's creation with more partitions, the topic's settings
//! in its registry record). Topic settings answer to Kafka's names (`retention.ms`) and to
//! Tributary's (`retention_ms`); each API is authorised by the ACL file with Kafka's
//! operation names.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::BytesMut;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{
    AlterConfigsResponse, ApiKey, BrokerId, CreatePartitionsResponse, DeleteTopicsResponse,
    DescribeClusterResponse, DescribeConfigsResponse, IncrementalAlterConfigsResponse, TopicName,
    alter_configs_response, incremental_alter_configs_response,
};
use protocol::ErrorCode;
use protocol::kafka::request::{
    AlterConfigsRequest, ConfigOp, CreatePartitionsRequest, DeleteTopicsRequest,
    DescribeConfigsRequest, Header, Malformed, resource_type,
};
use protocol::kafka::response::{code, encode, kafka_error, str_bytes};

use super::client::Client;
use super::metadata::CLUSTER_ID;
use crate::acl::Operation;
use crate::config::{KAFKA_TOPIC_KEYS, REPLICATION_FACTOR, kafka_topic_key, topic_key};

/// The longest a DeleteTopics waits for the replicas to go.
const DELETE_WAIT_MAX: Duration = Duration::from_secs(60);

/// Kafka's config sources (DescribeConfigs v1+).
mod source {
    pub const TOPIC_CONFIG: i8 = 1;
    pub const DEFAULT_CONFIG: i8 = 5;
}

pub async fn delete_topics(
    client: &Client,
    header: &Header,
    request: DeleteTopicsRequest,
) -> Result<BytesMut, Malformed> {
    let wait = Duration::from_millis(request.timeout_ms.max(0) as u64).min(DELETE_WAIT_MAX);
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let error = if !client.node.authorizer().check(&client.principal, &topic, Operation::Delete)
        {
            code::TOPIC_AUTHORIZATION_FAILED
        } else {
            match client.node.delete_topic(&topic, wait).await {
                Ok(()) => code::NONE,
                Err(e) => kafka_error(e),
            }
        };
        results.push(
            DeletableTopicResult::default()
                .with_name(Some(TopicName(str_bytes(&topic))))
                .with_error_code(error),
        );
    }
    encode(ApiKey::DeleteTopics, header, &DeleteTopicsResponse::default().with_responses(results))
}

/// How many partitions `topic` has, if the broker knows it.
fn partition_count(client: &Client, topic: &str) -> Option<i32> {
    let metadata = client.node.metadata(&[topic.to_owned()]);
    let topic = metadata.topics.into_iter().find(|t| t.name == topic)?;
    (topic.error != ErrorCode::UnknownTopic).then_some(topic.partitions.len() as i32)
}

pub async fn create_partitions(
    client: &Client,
    header: &Header,
    request: CreatePartitionsRequest,
) -> Result<BytesMut, Malformed> {
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let (error, message) = add_partitions(client, &topic, request.validate_only).await;
        results.push(
            CreatePartitionsTopicResult::default()
                .with_name(TopicName(str_bytes(&topic.name)))
                .with_error_code(error)
                .with_error_message(message.map(|m| str_bytes(&m))),
        );
    }
    let body = CreatePartitionsResponse::default().with_results(results);
    encode(ApiKey::CreatePartitions, header, &body)
}

async fn add_partitions(
    client: &Client,
    topic: &protocol::kafka::request::NewPartitions,
    validate_only: bool,
) -> (i16, Option<String>) {
    if !client.node.authorizer().check(&client.principal, &topic.name, Operation::Alter) {
        return (code::TOPIC_AUTHORIZATION_FAILED, None);
    }
    if topic.assignments.is_some() {
        return (code::INVALID_REQUEST, Some("replica assignments are made by the cluster".into()));
    }
    let Some(have) = partition_count(client, &topic.name) else {
        return (code::UNKNOWN_TOPIC_OR_PARTITION, Some(format!("no topic {}", topic.name)));
    };
    if topic.count <= have {
        let message = match topic.count == have {
            true => format!("topic already has {have} partitions"),
            false => format!("topic has {have} partitions, more than {}", topic.count),
        };
        return (code::INVALID_PARTITIONS, Some(message));
    }
    if validate_only {
        return (code::NONE, None);
    }
    match client.node.create_topic(&topic.name, topic.count, &[]).await {
        Ok(()) => (code::NONE, None),
        Err(ErrorCode::InvalidConfig) => {
            (code::INVALID_PARTITIONS, Some("more partitions than a topic may have".into()))
        }
        Err(e) => (kafka_error(e), None),
    }
}

/// Settings Kafka's tools expect on every topic that Tributary does not let one change:
/// `(name, value)`.
fn fixed_topic_configs(client: &Client) -> [(&'static str, String); 1] {
    [("max.message.bytes", client.node.config().max_message_bytes.to_string())]
}

pub async fn describe_configs(
    client: &Client,
    header: &Header,
    request: DescribeConfigsRequest,
) -> Result<BytesMut, Malformed> {
    let mut results = Vec::with_capacity(request.resources.len());
    for resource in request.resources {
        let answer = DescribeConfigsResult::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(str_bytes(&resource.name));
        let fail = |error: i16, message: &str| {
            answer.clone().with_error_code(error).with_error_message(Some(str_bytes(message)))
        };
        let entries = match resource.resource_type {
            resource_type::TOPIC => {
                let allowed = client.node.authorizer().check(
                    &client.principal,
                    &resource.name,
                    Operation::DescribeConfigs,
                );
                if !allowed {
                    results.push(fail(code::TOPIC_AUTHORIZATION_FAILED, "not allowed"));
                    continue;
                }
                match client.node.topic_config(&resource.name).await {
                    Ok(Some(own)) => topic_configs(client, &own),
                    Ok(None) => {
                        let message = format!("no topic {}", resource.name);
                        results.push(fail(code::UNKNOWN_TOPIC_OR_PARTITION, &message));
                        continue;
                    }
                    Err(e) => {
                        results.push(fail(kafka_error(e), "cannot read the topic's settings"));
                        continue;
                    }
                }
            }
            resource_type::BROKER => {
                if resource.name != client.node.config().broker_id.to_string() {
                    let message = "ask the broker itself for its configs";
                    results.push(fail(code::INVALID_REQUEST, message));
                    continue;
                }
                broker_configs(client)
            }
            _ => {
                results.push(fail(code::INVALID_REQUEST, "only topic and broker configs"));
                continue;
            }
        };
        let configs = entries
            .into_iter()
            .filter(|e| resource.keys.as_ref().is_none_or(|keys| keys.contains(&e.0)))
            .map(|(name, value, config_source, read_only)| {
                DescribeConfigsResourceResult::default()
                    .with_name(str_bytes(&name))
                    .with_value(Some(str_bytes(&value)))
                    .with_read_only(read_only)
                    .with_config_source(config_source)
            })
            .collect();
        results.push(answer.with_configs(configs));
    }
    encode(
        ApiKey::DescribeConfigs,
        header,
        &DescribeConfigsResponse::default().with_results(results),
    )
}

/// A config as DescribeConfigs answers it: `(name, value, source, read only)`.
type ConfigEntry = (String, String, i8, bool);

/// A topic's settings under Kafka's names: its own where it has one, the brokers' default
/// otherwise, then Tributary's own settings and the fixed ones.
fn topic_configs(client: &Client, own: &BTreeMap<String, String>) -> Vec<ConfigEntry> {
    let defaults = client.node.config();
    let mut entries = Vec::new();
    let ours = KAFKA_TOPIC_KEYS.iter().map(|(_, o)| *o).chain(["visible_after"]);
    for key in ours {
        let (value, source) = match own.get(key) {
            Some(value) => (value.clone(), source::TOPIC_CONFIG),
            None => match defaults.topic_default(key) {
                Some(value) => (value, source::DEFAULT_CONFIG),
                None => continue,
            },
        };
        entries.push((kafka_topic_key(key).to_owned(), value, source, false));
    }
    if let Some(factor) = own.get(REPLICATION_FACTOR) {
        entries.push((REPLICATION_FACTOR.into(), factor.clone(), source::TOPIC_CONFIG, true));
    }
    for (name, value) in fixed_topic_configs(client) {
        entries.push((name.into(), value, source::DEFAULT_CONFIG, true));
    }
    entries
}

/// The broker's settings that Kafka's tools know, under Kafka's names (read-only: they are
/// changed in the broker's config file).
fn broker_configs(client: &Client) -> Vec<ConfigEntry> {
    let config = client.node.config();
    let mut entries: Vec<ConfigEntry> = [
        ("broker.id", config.broker_id.to_string()),
        ("num.partitions", config.num_partitions.to_string()),
        ("default.replication.factor", config.default_replication_factor.to_string()),
        ("auto.create.topics.enable", config.auto_create_topics.to_string()),
        ("message.max.bytes", config.max_message_bytes.to_string()),
        ("socket.request.max.bytes", config.max_request_bytes.to_string()),
        ("replica.lag.time.max.ms", config.replica_lag_ms.to_string()),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value, source::DEFAULT_CONFIG, true))
    .collect();
    // The brokers' names of the topic defaults.
    for (kafka, ours) in [
        ("log.segment.bytes", "segment_bytes"),
        ("log.roll.ms", "segment_ms"),
        ("log.retention.ms", "retention_ms"),
        ("log.retention.bytes", "retention_bytes"),
        ("log.flush.interval.messages", "flush_messages"),
        ("log.flush.interval.ms", "flush_ms"),
        ("min.insync.replicas", "min_insync_replicas"),
        ("unclean.leader.election.enable", "unclean_leader_election"),
        ("log.message.timestamp.type", "message_timestamp_type"),
        ("log.cleanup.policy", "cleanup_policy"),
        ("log.cleaner.delete.retention.ms", "delete_retention_ms"),
    ] {
        if let Some(value) = config.topic_default(ours) {
            entries.push((kafka.to_owned(), value, source::DEFAULT_CONFIG, true));
        }
    }
    entries
}

/// What an AlterConfigs entry changes, in Tributary's keys: `Err` with the error to answer for
/// one that cannot be taken.
fn topic_change(
    name: &str,
    op: ConfigOp,
    value: Option<&str>,
) -> Result<(String, Option<String>), (i16, String)> {
    let invalid = |message: String| Err((code::INVALID_CONFIG, message));
    let key = topic_key(name);
    let known = KAFKA_TOPIC_KEYS.iter().any(|(_, o)| *o == key) || key == "visible_after";
    if !known {
        return invalid(format!("{name} is not a topic setting Tributary changes"));
    }
    match op {
        ConfigOp::Set => match value {
            Some(value) => Ok((key.to_owned(), Some(value.to_owned()))),
            None => invalid(format!("{name} set to null")),
        },
        ConfigOp::Delete => Ok((key.to_owned(), None)),
        ConfigOp::Append | ConfigOp::Subtract => {
            invalid(format!("{name} is not a list: it cannot be appended to or subtracted from"))
        }
    }
}

/// AlterConfigs (`incremental` false: the named settings replace every other) and
/// IncrementalAlterConfigs, on topics; a broker's settings are its config file's.
pub async fn alter_configs(
    client: &Client,
    header: &Header,
    request: AlterConfigsRequest,
    incremental: bool,
) -> Result<BytesMut, Malformed> {
    let mut answers: Vec<(i8, String, i16, Option<String>)> = Vec::new();
    for resource in request.resources {
        let (error, message) = match resource.resource_type {
            resource_type::TOPIC => {
                let allowed = client.node.authorizer().check(
                    &client.principal,
                    &resource.name,
                    Operation::AlterConfigs,
                );
                if !allowed {
                    (code::TOPIC_AUTHORIZATION_FAILED, None)
                } else {
                    let changes: Result<Vec<_>, _> = resource
                        .configs
                        .iter()
                        .map(|(name, op, value)| topic_change(name, *op, value.as_deref()))
                        .collect();
                    match changes {
                        Err((error, message)) => (error, Some(message)),
                        Ok(changes) => {
                            let changes: Vec<_> =
                                changes.into_iter().filter(|(k, _)| !k.is_empty()).collect();
                            let altered = client
                                .node
                                .alter_topic(
                                    &resource.name,
                                    &changes,
                                    !incremental,
                                    request.validate_only,
                                )
                                .await;
                            match altered {
                                Ok(()) => (code::NONE, None),
                                Err((e, message)) => (kafka_error(e), Some(message)),
                            }
                        }
                    }
                }
            }
            resource_type::BROKER => {
                (code::INVALID_REQUEST, Some("a broker's settings are in its config file".into()))
            }
            _ => (code::INVALID_REQUEST, Some("only topic configs change".into())),
        };
        answers.push((resource.resource_type, resource.name, error, message));
    }
    if incremental {
        let responses = answers
            .into_iter()
            .map(|(kind, name, error, message)| {
                incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_resource_type(kind)
                    .with_resource_name(str_bytes(&name))
                    .with_error_code(error)
                    .with_error_message(message.map(|m| str_bytes(&m)))
            })
            .collect();
        let body = IncrementalAlterConfigsResponse::default().with_responses(responses);
        return encode(ApiKey::IncrementalAlterConfigs, header, &body);
    }
    let responses = answers
        .into_iter()
        .map(|(kind, name, error, message)| {
            alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(kind)
                .with_resource_name(str_bytes(&name))
                .with_error_code(error)
                .with_error_message(message.map(|m| str_bytes(&m)))
        })
        .collect();
    encode(ApiKey::AlterConfigs, header, &AlterConfigsResponse::default().with_responses(responses))
}

pub fn describe_cluster(client: &Client, header: &Header) -> Result<BytesMut, Malformed> {
    let brokers = client
        .node
        .kafka_endpoints()
        .into_iter()
        .map(|(id, host, port)| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(id))
                .with_host(str_bytes(&host))
                .with_port(i32::from(port))
        })
        .collect();
    let body = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(CLUSTER_ID))
        .with_controller_id(BrokerId(client.node.config().broker_id))
        .with_brokers(brokers);
    encode(ApiKey::DescribeCluster, header, &body)
}
