//! Kafka's partition administration: ElectLeaders, AlterPartitionReassignments and
//! ListPartitionReassignments, on the registry requests `trib partitions elect-preferred` and
//! `trib partitions reassign` write (`Registry::elect_preferred`, `start_reassignment`), which
//! the controller carries out. Authorised by `alter` on each topic (Kafka asks ALTER on the
//! cluster, a resource the ACL file does not have). And DeleteRecords, which moves log
//! starts through the registry to every replica (`Node::delete_records`, as the native
//! DELETE_RECORDS does), authorised by `delete` on the topic as Kafka authorises it.

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::BytesMut;
use cluster::{ElectionOutcome, PartitionMove, ReassignmentPlan, Registry, RegistryError};
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsResponse, ApiKey, BrokerId, DeleteRecordsResponse,
    ElectLeadersResponse, ListPartitionReassignmentsResponse, TopicName,
};
use protocol::kafka::request::{
    AlterReassignmentsRequest, DeleteRecordsRequest, ElectLeadersRequest, Header, Malformed,
    TopicPartitions,
};
use protocol::kafka::response::{code, encode, kafka_error, str_bytes};

use super::client::Client;
use crate::acl::Operation;
use crate::node::DeleteBefore;

/// The longest an ElectLeaders waits for the controller.
const ELECT_WAIT_MAX: Duration = Duration::from_secs(60);

/// A partition's answer: `(error, message)`.
type Answer = (i16, Option<String>);

fn allowed(client: &Client, topic: &str) -> bool {
    client.node.authorizer().check(&client.principal, topic, Operation::Alter)
}

/// Groups `(topic, partition, answer)`s by topic, in the order they come.
fn by_topic(answers: Vec<(String, i32, Answer)>) -> Vec<(String, Vec<(i32, Answer)>)> {
    let mut topics: Vec<(String, Vec<(i32, Answer)>)> = Vec::new();
    for (topic, partition, answer) in answers {
        match topics.last_mut() {
            Some((last, partitions)) if *last == topic => partitions.push((partition, answer)),
            _ => topics.push((topic, vec![(partition, answer)])),
        }
    }
    topics
}

pub async fn delete_records(
    client: &Client,
    header: &Header,
    request: DeleteRecordsRequest,
) -> Result<BytesMut, Malformed> {
    let mut topics = Vec::with_capacity(request.topics.len());
    for (topic, partitions) in request.topics {
        let permitted =
            client.node.authorizer().check(&client.principal, &topic, Operation::Delete);
        let mut answers = Vec::with_capacity(partitions.len());
        for (partition, offset) in partitions {
            let (error, low_watermark) = match permitted {
                true => delete_before(client, &topic, partition, offset).await,
                false => (code::TOPIC_AUTHORIZATION_FAILED, -1),
            };
            answers.push(
                DeleteRecordsPartitionResult::default()
                    .with_partition_index(partition)
                    .with_low_watermark(low_watermark)
                    .with_error_code(error),
            );
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(TopicName(str_bytes(&topic)))
                .with_partitions(answers),
        );
    }
    encode(ApiKey::DeleteRecords, header, &DeleteRecordsResponse::default().with_topics(topics))
}

/// Moves one partition's log start to record `offset` (−1: the high watermark) on its
/// leader: `(error, the log's start record now)`.
async fn delete_before(client: &Client, topic: &str, partition: i32, offset: i64) -> (i16, i64) {
    let before = match offset {
        -1 => DeleteBefore::HighWatermark,
        o if o >= 0 => DeleteBefore::Record(o as u64),
        _ => return (code::OFFSET_OUT_OF_RANGE, -1),
    };
    match client.node.delete_records(topic, partition, before).await {
        Ok(start) => (code::NONE, start.record as i64),
        Err(e) => (kafka_error(e), -1),
    }
}

pub async fn elect_leaders(
    client: &Client,
    header: &Header,
    request: ElectLeadersRequest,
) -> Result<BytesMut, Malformed> {
    let asked: Option<Vec<cluster::TopicPartition>> = request.partitions.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|(topic, ps)| {
                ps.iter().map(|&p| cluster::TopicPartition { topic: topic.clone(), partition: p })
            })
            .collect()
    });
    let mut answers: Vec<(String, i32, Answer)> = Vec::new();
    let refuse_all = |asked: &[cluster::TopicPartition], answer: Answer| {
        asked.iter().map(|tp| (tp.topic.clone(), tp.partition, answer.clone())).collect()
    };
    if request.election_type != 0 {
        let message = "only preferred elections: unclean.leader.election.enable decides the rest";
        answers = refuse_all(
            asked.as_deref().unwrap_or_default(),
            (code::INVALID_REQUEST, Some(message.into())),
        );
    } else if let Some(registry) = client.node.registry() {
        let (permitted, denied): (Vec<_>, Vec<_>) = match &asked {
            Some(asked) => asked.iter().cloned().partition(|tp| allowed(client, &tp.topic)),
            None => (Vec::new(), Vec::new()),
        };
        answers.extend(refuse_all(&denied, (code::TOPIC_AUTHORIZATION_FAILED, None)));
        let which = asked.as_ref().map(|_| permitted.as_slice());
        let wait = Duration::from_millis(request.timeout_ms.max(0) as u64).min(ELECT_WAIT_MAX);
        match registry.elect_preferred(which, wait).await {
            Ok(results) => {
                for r in results {
                    // Every partition was asked for: those not led elsewhere need no answer,
                    // nor those the principal may not alter.
                    let quiet = r.outcome == ElectionOutcome::NotNeeded
                        || !allowed(client, &r.partition.topic);
                    if asked.is_none() && quiet {
                        continue;
                    }
                    let answer = match r.outcome {
                        ElectionOutcome::Elected => (code::NONE, None),
                        ElectionOutcome::NotNeeded => (code::ELECTION_NOT_NEEDED, None),
                        ElectionOutcome::NotLive => (
                            code::PREFERRED_LEADER_NOT_AVAILABLE,
                            Some(format!("broker {} is not live", r.preferred)),
                        ),
                        ElectionOutcome::NotInSync => (
                            code::PREFERRED_LEADER_NOT_AVAILABLE,
                            Some(format!("broker {} is not in sync", r.preferred)),
                        ),
                        ElectionOutcome::Pending => (code::REQUEST_TIMED_OUT, None),
                        ElectionOutcome::NoPartition => (code::UNKNOWN_TOPIC_OR_PARTITION, None),
                    };
                    answers.push((r.partition.topic, r.partition.partition, answer));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot elect preferred leaders");
                let answer = (code::UNKNOWN_SERVER_ERROR, Some(e.to_string()));
                answers.extend(refuse_all(&permitted, answer));
            }
        }
    } else {
        // A broker alone leads every partition it has.
        answers =
            refuse_all(asked.as_deref().unwrap_or_default(), (code::ELECTION_NOT_NEEDED, None));
    }
    let results = by_topic(answers)
        .into_iter()
        .map(|(topic, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(p, (error, message))| {
                    PartitionResult::default()
                        .with_partition_id(p)
                        .with_error_code(error)
                        .with_error_message(message.map(|m| str_bytes(&m)))
                })
                .collect();
            ReplicaElectionResult::default()
                .with_topic(TopicName(str_bytes(&topic)))
                .with_partition_result(partitions)
        })
        .collect();
    let body = ElectLeadersResponse::default().with_replica_election_results(results);
    encode(ApiKey::ElectLeaders, header, &body)
}

/// Checks a move against the cluster: the partition exists, the replicas are distinct
/// registered brokers.
async fn check_move(
    registry: &Registry,
    live: &BTreeSet<i32>,
    topic: &str,
    partition: i32,
    replicas: &[i32],
) -> Result<(), Answer> {
    let found = registry
        .topic_assignment(topic)
        .await
        .map_err(|e| (code::UNKNOWN_SERVER_ERROR, Some(format!("cannot read the topic: {e}"))))?;
    if found.is_none_or(|(a, _)| a.replicas(partition).is_none()) {
        return Err((code::UNKNOWN_TOPIC_OR_PARTITION, None));
    }
    let distinct: BTreeSet<i32> = replicas.iter().copied().collect();
    if replicas.is_empty() || distinct.len() != replicas.len() {
        let message = "the replicas must be distinct, and at least one".to_owned();
        return Err((code::INVALID_REPLICA_ASSIGNMENT, Some(message)));
    }
    if let Some(unknown) = replicas.iter().find(|r| !live.contains(r)) {
        let message = format!("broker {unknown} is not registered");
        return Err((code::INVALID_REPLICA_ASSIGNMENT, Some(message)));
    }
    Ok(())
}

pub async fn alter_reassignments(
    client: &Client,
    header: &Header,
    request: AlterReassignmentsRequest,
) -> Result<BytesMut, Malformed> {
    let Some(registry) = client.node.registry() else {
        let body = AlterPartitionReassignmentsResponse::default()
            .with_error_code(code::INVALID_REQUEST)
            .with_error_message(Some(str_bytes("a broker alone has nothing to reassign")));
        return encode(ApiKey::AlterPartitionReassignments, header, &body);
    };
    let live: BTreeSet<i32> = match registry.brokers().await {
        Ok(brokers) => brokers.into_keys().collect(),
        Err(e) => {
            let body = AlterPartitionReassignmentsResponse::default()
                .with_error_code(code::UNKNOWN_SERVER_ERROR)
                .with_error_message(Some(str_bytes(&e.to_string())));
            return encode(ApiKey::AlterPartitionReassignments, header, &body);
        }
    };
    let running = registry.reassignment().await.ok().flatten().map(|(plan, _)| plan);
    let mut answers: Vec<(String, i32, Option<Answer>)> = Vec::new();
    let mut moves = Vec::new();
    for (topic, partitions) in &request.topics {
        for (partition, replicas) in partitions {
            let answer = if !allowed(client, topic) {
                Some((code::TOPIC_AUTHORIZATION_FAILED, None))
            } else if let Some(replicas) = replicas {
                match check_move(registry, &live, topic, *partition, replicas).await {
                    Ok(()) => {
                        moves.push(PartitionMove {
                            topic: topic.clone(),
                            partition: *partition,
                            replicas: replicas.clone(),
                        });
                        None
                    }
                    Err(answer) => Some(answer),
                }
            } else if running.as_ref().and_then(|p| p.target(topic, *partition)).is_some() {
                let message = "a move under way runs to its end: reassign the partition back";
                Some((code::INVALID_REQUEST, Some(message.into())))
            } else {
                Some((code::NO_REASSIGNMENT_IN_PROGRESS, None))
            };
            answers.push((topic.clone(), *partition, answer));
        }
    }
    let started: Answer = if moves.is_empty() {
        (code::NONE, None)
    } else {
        let plan = ReassignmentPlan { version: 1, partitions: moves, throttle_bytes_per_s: None };
        match registry.start_reassignment(&plan).await {
            Ok(()) => (code::NONE, None),
            Err(RegistryError::AdminInProgress { .. }) => {
                (code::REASSIGNMENT_IN_PROGRESS, Some("another reassignment is under way".into()))
            }
            Err(RegistryError::InvalidAssignment { reason }) => {
                (code::INVALID_REPLICA_ASSIGNMENT, Some(reason))
            }
            Err(e) => (code::UNKNOWN_SERVER_ERROR, Some(e.to_string())),
        }
    };
    let answers =
        answers.into_iter().map(|(t, p, a)| (t, p, a.unwrap_or_else(|| started.clone()))).collect();
    let responses = by_topic(answers)
        .into_iter()
        .map(|(topic, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(p, (error, message))| {
                    ReassignablePartitionResponse::default()
                        .with_partition_index(p)
                        .with_error_code(error)
                        .with_error_message(message.map(|m| str_bytes(&m)))
                })
                .collect();
            ReassignableTopicResponse::default()
                .with_name(TopicName(str_bytes(&topic)))
                .with_partitions(partitions)
        })
        .collect();
    let body = AlterPartitionReassignmentsResponse::default().with_responses(responses);
    encode(ApiKey::AlterPartitionReassignments, header, &body)
}

/// The moves under way, as Kafka lists them: each partition's replicas now, the targets not
/// yet in sync (adding) and the replicas that will go (removing).
pub async fn list_reassignments(
    client: &Client,
    header: &Header,
    asked: TopicPartitions,
) -> Result<BytesMut, Malformed> {
    let running = match client.node.registry() {
        Some(registry) => match registry.reassignment().await {
            Ok(running) => running.map(|(plan, _)| plan),
            Err(e) => {
                let body = ListPartitionReassignmentsResponse::default()
                    .with_error_code(code::UNKNOWN_SERVER_ERROR)
                    .with_error_message(Some(str_bytes(&e.to_string())));
                return encode(ApiKey::ListPartitionReassignments, header, &body);
            }
        },
        None => None,
    };
    let wanted = |topic: &str, partition: i32| match &asked {
        None => true,
        Some(topics) => topics.iter().any(|(t, ps)| t == topic && ps.contains(&partition)),
    };
    let metadata = client.node.metadata(&[]);
    let mut ongoing: Vec<OngoingTopicReassignment> = Vec::new();
    for m in running.iter().flat_map(|plan| &plan.partitions) {
        if !wanted(&m.topic, m.partition)
            || !client.node.authorizer().check(&client.principal, &m.topic, Operation::Describe)
        {
            continue;
        }
        let found = metadata
            .topics
            .iter()
            .find(|t| t.name == m.topic)
            .and_then(|t| t.partitions.iter().find(|p| p.partition == m.partition));
        let Some(now) = found else { continue };
        let ids = |ids: Vec<i32>| ids.into_iter().map(BrokerId).collect::<Vec<_>>();
        let adding = m.replicas.iter().copied().filter(|r| !now.isr.contains(r)).collect();
        let removing = now.replicas.iter().copied().filter(|r| !m.replicas.contains(r)).collect();
        let partition = OngoingPartitionReassignment::default()
            .with_partition_index(m.partition)
            .with_replicas(ids(now.replicas.clone()))
            .with_adding_replicas(ids(adding))
            .with_removing_replicas(ids(removing));
        match ongoing.iter_mut().find(|t| t.name.0.as_str() == m.topic) {
            Some(topic) => topic.partitions.push(partition),
            None => ongoing.push(
                OngoingTopicReassignment::default()
                    .with_name(TopicName(str_bytes(&m.topic)))
                    .with_partitions(vec![partition]),
            ),
        }
    }
    let body = ListPartitionReassignmentsResponse::default().with_topics(ongoing);
    encode(ApiKey::ListPartitionReassignments, header, &body)
}
