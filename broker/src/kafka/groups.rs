//! Kafka consumer groups: the group coordinator of the classic protocol (FindCoordinator,
//! JoinGroup, SyncGroup, Heartbeat, LeaveGroup) and committed offsets (OffsetCommit,
//! OffsetFetch), as `docs/design.md` ("Kafka protocol listener") lays them out.
//!
//! A group's coordinator is the live broker with a Kafka listener that the group id's hash
//! picks among them; another broker answers `NOT_COORDINATOR`. Membership lives in the
//! coordinator's memory: a member that joins starts a rebalance (the members that were in the
//! group learn of it from their heartbeats and join again); the rebalance completes once every
//! member has joined or the longest rebalance timeout has passed (those that did not join are
//! dropped); the leader's SyncGroup hands every member its assignment (the assignors — range,
//! round-robin, sticky — run in the clients). A member whose heartbeats stop for its session
//! timeout is dropped and the group rebalances. Committed offsets (record numbers) are kept in
//! ZooKeeper at `/kafka-groups/{group}/offsets/{topic}/{p}`, so a new coordinator finds them;
//! a broker without a cluster registry keeps them in memory.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FindCoordinatorResponse, HeartbeatResponse, JoinGroupResponse,
    LeaveGroupResponse, OffsetCommitResponse, OffsetFetchResponse, SyncGroupResponse, TopicName,
};
use tokio::sync::oneshot;

use super::client::Client;
use super::coordinator::{
    GROUPS_MAX, Group, Joined, MEMBERS_MAX, Member, Phase, SESSION_TIMEOUT_MS,
};
use crate::acl::Operation;
use protocol::kafka::request::Malformed;
use protocol::kafka::request::{
    FindCoordinatorRequest, Header, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest,
    OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest,
};
use protocol::kafka::response::{code, encode, str_bytes};

/// The broker that coordinates `group`: `(id, host, kafka port)`.
fn coordinator_of(client: &Client, group: &str) -> Option<(i32, String, u16)> {
    let brokers = client.node.kafka_endpoints();
    let id = cluster::kafka_coordinator(group, brokers.iter().map(|(id, _, _)| *id))?;
    brokers.into_iter().find(|(b, _, _)| *b == id)
}

/// Whether this broker coordinates `group`.
fn coordinates(client: &Client, group: &str) -> bool {
    coordinator_of(client, group).is_some_and(|(id, _, _)| id == client.node.config().broker_id)
}

pub fn find_coordinator(
    client: &Client,
    header: &Header,
    request: FindCoordinatorRequest,
) -> Result<BytesMut, Malformed> {
    let body = match (request.key_type, coordinator_of(client, &request.key)) {
        (0, Some((id, host, port))) => FindCoordinatorResponse::default()
            .with_node_id(BrokerId(id))
            .with_host(str_bytes(&host))
            .with_port(i32::from(port)),
        _ => FindCoordinatorResponse::default()
            .with_error_code(code::COORDINATOR_NOT_AVAILABLE)
            .with_node_id(BrokerId(-1))
            .with_port(-1),
    };
    encode(ApiKey::FindCoordinator, header, &body)
}

pub async fn join_group(
    client: &Client,
    header: &Header,
    request: JoinGroupRequest,
) -> Result<BytesMut, Malformed> {
    let answer = |joined: Joined| {
        let members = joined
            .members
            .into_iter()
            .map(|(id, metadata)| {
                JoinGroupResponseMember::default()
                    .with_member_id(str_bytes(&id))
                    .with_metadata(metadata)
            })
            .collect();
        JoinGroupResponse::default()
            .with_error_code(joined.error)
            .with_generation_id(joined.generation)
            .with_protocol_name(Some(str_bytes(&joined.protocol)))
            .with_leader(str_bytes(&joined.leader))
            .with_member_id(str_bytes(&joined.member_id))
            .with_members(members)
    };
    let refuse = |error: i16| {
        encode(ApiKey::JoinGroup, header, &answer(Joined::error(error, &request.member_id)))
    };
    if request.group_id.is_empty() {
        return refuse(code::INVALID_REQUEST);
    }
    if !coordinates(client, &request.group_id) {
        return refuse(code::NOT_COORDINATOR);
    }
    if !SESSION_TIMEOUT_MS.contains(&request.session_timeout_ms) {
        return refuse(code::INVALID_SESSION_TIMEOUT);
    }
    let waiting = {
        let coordinator = &client.state.groups;
        let mut groups = coordinator.groups();
        if !groups.contains_key(&request.group_id) && groups.len() >= GROUPS_MAX {
            return refuse(code::COORDINATOR_NOT_AVAILABLE);
        }
        let now = Instant::now();
        let group = groups.entry(request.group_id.clone()).or_insert_with(Group::new);
        if group.protocol_type.as_ref().is_some_and(|t| *t != request.protocol_type)
            && !group.members.is_empty()
        {
            return refuse(code::INCONSISTENT_GROUP_PROTOCOL);
        }
        let member_id = if request.member_id.is_empty() {
            group.next_member += 1;
            let client_id = header.client_id.as_deref().unwrap_or("consumer");
            let id = format!("{client_id}-{}-{}", group.generation, group.next_member);
            if header.version >= 4 {
                // The member joins again with its id (KIP-394).
                let joined = Joined::error(code::MEMBER_ID_REQUIRED, &id);
                drop(groups);
                return encode(ApiKey::JoinGroup, header, &answer(joined));
            }
            id
        } else if !group.members.contains_key(&request.member_id) && header.version < 4 {
            return refuse(code::UNKNOWN_MEMBER_ID);
        } else {
            request.member_id.clone()
        };
        if !group.members.contains_key(&member_id) && group.members.len() >= MEMBERS_MAX {
            return refuse(code::COORDINATOR_NOT_AVAILABLE);
        }
        let (sender, receiver) = oneshot::channel();
        // A member joining again keeps its assignment until the rebalance gives it another.
        let member = group.members.entry(member_id).or_insert_with(|| Member {
            session_timeout: Duration::ZERO,
            rebalance_timeout: Duration::ZERO,
            protocols: Vec::new(),
            assignment: Bytes::new(),
            last_seen: now,
            joining: None,
            syncing: None,
        });
        member.protocols = request.protocols.clone();
        member.session_timeout = Duration::from_millis(request.session_timeout_ms as u64);
        member.rebalance_timeout =
            Duration::from_millis(request.rebalance_timeout_ms.max(0) as u64);
        member.last_seen = now;
        member.joining = Some(sender);
        group.protocol_type = Some(request.protocol_type.clone());
        // A join outside a rebalance starts one; in one under way, it just joins it.
        if group.phase != Phase::Joining {
            group.rebalance(now);
        }
        group.try_complete(now);
        receiver
    };
    let joined = waiting
        .await
        .unwrap_or_else(|_| Joined::error(code::UNKNOWN_MEMBER_ID, &request.member_id));
    encode(ApiKey::JoinGroup, header, &answer(joined))
}

pub async fn sync_group(
    client: &Client,
    header: &Header,
    request: SyncGroupRequest,
) -> Result<BytesMut, Malformed> {
    let answer = |error: i16, assignment: Bytes| {
        SyncGroupResponse::default().with_error_code(error).with_assignment(assignment)
    };
    if !coordinates(client, &request.group_id) {
        return encode(ApiKey::SyncGroup, header, &answer(code::NOT_COORDINATOR, Bytes::new()));
    }
    let waiting = {
        let mut groups = client.state.groups.groups();
        let now = Instant::now();
        let Some(group) = groups.get_mut(&request.group_id) else {
            return encode(
                ApiKey::SyncGroup,
                header,
                &answer(code::UNKNOWN_MEMBER_ID, Bytes::new()),
            );
        };
        let error = match group.members.get(&request.member_id) {
            None => Some(code::UNKNOWN_MEMBER_ID),
            Some(_) if request.generation_id != group.generation => Some(code::ILLEGAL_GENERATION),
            Some(_) if group.phase == Phase::Joining => Some(code::REBALANCE_IN_PROGRESS),
            Some(_) => None,
        };
        if let Some(error) = error {
            return encode(ApiKey::SyncGroup, header, &answer(error, Bytes::new()));
        }
        if group.phase == Phase::Syncing && request.member_id == group.leader {
            let assignments: HashMap<&String, &Bytes> =
                request.assignments.iter().map(|(m, a)| (m, a)).collect();
            for (id, member) in &mut group.members {
                member.assignment = assignments.get(id).map(|a| (*a).clone()).unwrap_or_default();
                member.last_seen = now;
                if let Some(waiting) = member.syncing.take() {
                    let _ = waiting.send((code::NONE, member.assignment.clone()));
                }
            }
            group.phase = Phase::Stable;
        }
        let member = group.members.get_mut(&request.member_id).expect("checked above");
        member.last_seen = now;
        if group.phase == Phase::Stable {
            let assignment = member.assignment.clone();
            drop(groups);
            return encode(ApiKey::SyncGroup, header, &answer(code::NONE, assignment));
        }
        let (sender, receiver) = oneshot::channel();
        member.syncing = Some(sender);
        receiver
    };
    let (error, assignment) = waiting.await.unwrap_or((code::REBALANCE_IN_PROGRESS, Bytes::new()));
    encode(ApiKey::SyncGroup, header, &answer(error, assignment))
}

pub fn heartbeat(
    client: &Client,
    header: &Header,
    request: HeartbeatRequest,
) -> Result<BytesMut, Malformed> {
    let error = if !coordinates(client, &request.group_id) {
        code::NOT_COORDINATOR
    } else {
        let mut groups = client.state.groups.groups();
        match groups.get_mut(&request.group_id) {
            None => code::UNKNOWN_MEMBER_ID,
            Some(group) => {
                let (phase, generation) = (group.phase, group.generation);
                match group.members.get_mut(&request.member_id) {
                    None => code::UNKNOWN_MEMBER_ID,
                    Some(member) => {
                        member.last_seen = Instant::now();
                        if phase == Phase::Joining {
                            code::REBALANCE_IN_PROGRESS
                        } else if request.generation_id != generation {
                            code::ILLEGAL_GENERATION
                        } else {
                            code::NONE
                        }
                    }
                }
            }
        }
    };
    encode(ApiKey::Heartbeat, header, &HeartbeatResponse::default().with_error_code(error))
}

pub fn leave_group(
    client: &Client,
    header: &Header,
    request: LeaveGroupRequest,
) -> Result<BytesMut, Malformed> {
    let error = if !coordinates(client, &request.group_id) {
        code::NOT_COORDINATOR
    } else {
        let mut groups = client.state.groups.groups();
        match groups.get_mut(&request.group_id) {
            None => code::UNKNOWN_MEMBER_ID,
            Some(group) => {
                let mut left = false;
                for member in &request.members {
                    if let Some(gone) = group.members.remove(member) {
                        left = true;
                        if let Some(waiting) = gone.joining {
                            let _ = waiting.send(Joined::error(code::UNKNOWN_MEMBER_ID, member));
                        }
                    }
                }
                if left {
                    let now = Instant::now();
                    group.rebalance(now);
                    group.try_complete(now);
                    code::NONE
                } else {
                    code::UNKNOWN_MEMBER_ID
                }
            }
        }
    };
    encode(ApiKey::LeaveGroup, header, &LeaveGroupResponse::default().with_error_code(error))
}

pub async fn offset_commit(
    client: &Client,
    header: &Header,
    request: OffsetCommitRequest,
) -> Result<BytesMut, Malformed> {
    let group_error = if !coordinates(client, &request.group_id) {
        Some(code::NOT_COORDINATOR)
    } else if request.generation_id < 0 {
        // A consumer outside any group (assign, not subscribe) commits as it likes.
        None
    } else {
        let groups = client.state.groups.groups();
        match groups.get(&request.group_id) {
            None => Some(code::UNKNOWN_MEMBER_ID),
            Some(group) if !group.members.contains_key(&request.member_id) => {
                Some(code::UNKNOWN_MEMBER_ID)
            }
            Some(group) if group.phase == Phase::Joining => Some(code::REBALANCE_IN_PROGRESS),
            Some(group) if group.generation != request.generation_id => {
                Some(code::ILLEGAL_GENERATION)
            }
            Some(_) => None,
        }
    };
    let registry = client.node.registry();
    let mut topics = Vec::with_capacity(request.topics.len());
    for (topic, partitions) in request.topics {
        let allowed = client.node.authorizer().check(&client.principal, &topic, Operation::Consume);
        let mut answers = Vec::with_capacity(partitions.len());
        for (partition, offset, _metadata) in partitions {
            let error = match group_error {
                Some(error) => error,
                None if !allowed => code::TOPIC_AUTHORIZATION_FAILED,
                None => match &registry {
                    Some(registry) => {
                        match registry
                            .commit_kafka_offset(&request.group_id, &topic, partition, offset)
                            .await
                        {
                            Ok(()) => code::NONE,
                            Err(e) => {
                                tracing::warn!(group = %request.group_id, %topic, partition, error = %e, "cannot commit a Kafka group's offset");
                                code::COORDINATOR_NOT_AVAILABLE
                            }
                        }
                    }
                    None => {
                        let mut offsets =
                            client.state.groups.offsets.lock().unwrap_or_else(|p| p.into_inner());
                        offsets
                            .entry(request.group_id.clone())
                            .or_default()
                            .entry(topic.clone())
                            .or_default()
                            .insert(partition, offset);
                        code::NONE
                    }
                },
            };
            answers.push(
                OffsetCommitResponsePartition::default()
                    .with_partition_index(partition)
                    .with_error_code(error),
            );
        }
        topics.push(
            OffsetCommitResponseTopic::default()
                .with_name(TopicName(str_bytes(&topic)))
                .with_partitions(answers),
        );
    }
    encode(ApiKey::OffsetCommit, header, &OffsetCommitResponse::default().with_topics(topics))
}

pub async fn offset_fetch(
    client: &Client,
    header: &Header,
    request: OffsetFetchRequest,
) -> Result<BytesMut, Malformed> {
    let fail = |error: i16| {
        encode(ApiKey::OffsetFetch, header, &OffsetFetchResponse::default().with_error_code(error))
    };
    if !coordinates(client, &request.group_id) {
        return fail(code::NOT_COORDINATOR);
    }
    let committed = match client.node.registry() {
        Some(registry) => match registry.kafka_offsets(&request.group_id).await {
            Ok(committed) => committed,
            Err(e) => {
                tracing::warn!(group = %request.group_id, error = %e, "cannot read a Kafka group's offsets");
                return fail(code::COORDINATOR_NOT_AVAILABLE);
            }
        },
        None => {
            let offsets = client.state.groups.offsets.lock().unwrap_or_else(|p| p.into_inner());
            offsets.get(&request.group_id).cloned().unwrap_or_default()
        }
    };
    let asked: Vec<(String, Vec<i32>)> = match request.topics {
        Some(topics) => topics,
        None => committed.iter().map(|(t, ps)| (t.clone(), ps.keys().copied().collect())).collect(),
    };
    let topics = asked
        .into_iter()
        .map(|(topic, partitions)| {
            let allowed =
                client.node.authorizer().check(&client.principal, &topic, Operation::Consume);
            let answers = partitions
                .into_iter()
                .map(|partition| {
                    let offset = committed.get(&topic).and_then(|ps| ps.get(&partition)).copied();
                    let answer = OffsetFetchResponsePartition::default()
                        .with_partition_index(partition)
                        .with_metadata(Some(str_bytes("")));
                    match (allowed, offset) {
                        (false, _) => answer
                            .with_committed_offset(-1)
                            .with_error_code(code::TOPIC_AUTHORIZATION_FAILED),
                        (true, offset) => answer.with_committed_offset(offset.unwrap_or(-1)),
                    }
                })
                .collect();
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(str_bytes(&topic)))
                .with_partitions(answers)
        })
        .collect();
    encode(ApiKey::OffsetFetch, header, &OffsetFetchResponse::default().with_topics(topics))
}
