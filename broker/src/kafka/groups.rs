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
use kafka_protocol::messages::leave_group_response::MemberResponse;
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
use cluster::KafkaCommit;
use protocol::ErrorCode;
use protocol::kafka::request::Malformed;
use protocol::kafka::request::{
    FindCoordinatorRequest, Header, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest,
    OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest,
};
use protocol::kafka::response::{code, encode, str_bytes};

/// Whether this broker coordinates `group`.
pub(super) fn coordinates(client: &Client, group: &str) -> bool {
    super::coordinator::coordinates(&client.node, group)
}

pub fn find_coordinator(
    client: &Client,
    header: &Header,
    request: FindCoordinatorRequest,
) -> Result<BytesMut, Malformed> {
    // Groups (0) and transactional ids (1) are spread over the brokers alike.
    let body =
        match (request.key_type, super::coordinator::coordinator_of(&client.node, &request.key)) {
            (0 | 1, Some((id, host, port))) => FindCoordinatorResponse::default()
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
    let refuse = |error: i16| {
        encode(ApiKey::JoinGroup, header, &join_answer(Joined::error(error, &request.member_id)))
    };
    if request.group_id.is_empty() {
        return refuse(code::INVALID_GROUP_ID);
    }
    if !coordinates(client, &request.group_id) {
        return refuse(code::NOT_COORDINATOR);
    }
    if !SESSION_TIMEOUT_MS.contains(&request.session_timeout_ms) {
        return refuse(code::INVALID_SESSION_TIMEOUT);
    }
    let waiting = 'join: {
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
        let instance = request.group_instance_id.as_deref();
        let member_id = if request.member_id.is_empty() {
            group.next_member += 1;
            let prefix = instance.or(header.client_id.as_deref()).unwrap_or("consumer");
            let id = format!("{prefix}-{}-{}", group.generation, group.next_member);
            if let Some(instance) = instance {
                // A static member needs no second round trip for its id (KIP-345).
                if let Some(member) = group.replace_static(instance, &id) {
                    let (sender, receiver) = oneshot::channel();
                    refresh(member, &request, client, header, now);
                    member.joining = Some(sender);
                    rejoin_static(group, &id, now);
                    break 'join receiver;
                }
                group.instances.insert(instance.to_owned(), id.clone());
            } else if header.version >= 4 {
                // The member joins again with its id (KIP-394).
                let joined = Joined::error(code::MEMBER_ID_REQUIRED, &id);
                drop(groups);
                return encode(ApiKey::JoinGroup, header, &join_answer(joined));
            }
            id
        } else {
            match group.check_member(&request.member_id, instance) {
                Ok(()) => request.member_id.clone(),
                // A dynamic member of KIP-394 joins with the id it was given.
                Err(code::UNKNOWN_MEMBER_ID) if instance.is_none() && header.version >= 4 => {
                    request.member_id.clone()
                }
                Err(error) => return refuse(error),
            }
        };
        if !group.members.contains_key(&member_id) && group.members.len() >= MEMBERS_MAX {
            group.instances.retain(|_, m| *m != member_id);
            return refuse(code::COORDINATOR_NOT_AVAILABLE);
        }
        let (sender, receiver) = oneshot::channel();
        // A member joining again keeps its assignment until the rebalance gives it another.
        let member = group.members.entry(member_id).or_insert_with(|| Member {
            instance_id: request.group_instance_id.clone(),
            client_id: String::new(),
            client_host: String::new(),
            session_timeout: Duration::ZERO,
            rebalance_timeout: Duration::ZERO,
            protocols: Vec::new(),
            assignment: Bytes::new(),
            last_seen: now,
            joining: None,
            syncing: None,
        });
        refresh(member, &request, client, header, now);
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
    encode(ApiKey::JoinGroup, header, &join_answer(joined))
}

/// A JoinGroup answer: the member's id and generation, and to the leader every member's
/// subscription.
fn join_answer(joined: Joined) -> JoinGroupResponse {
    let members = joined
        .members
        .into_iter()
        .map(|(id, instance, metadata)| {
            JoinGroupResponseMember::default()
                .with_member_id(str_bytes(&id))
                .with_group_instance_id(instance.as_deref().map(str_bytes))
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
}

/// What a member's JoinGroup tells of it.
fn refresh(
    member: &mut Member,
    request: &JoinGroupRequest,
    client: &Client,
    header: &Header,
    now: Instant,
) {
    member.protocols = request.protocols.clone();
    member.session_timeout = Duration::from_millis(request.session_timeout_ms as u64);
    member.rebalance_timeout = Duration::from_millis(request.rebalance_timeout_ms.max(0) as u64);
    member.client_id = header.client_id.clone().unwrap_or_default();
    member.client_host = format!("/{}", client.host);
    member.last_seen = now;
}

/// A static member `id` that took its instance's place: in a stable group whose protocol
/// it still speaks it is answered at once with the current generation (the leader with
/// every member's metadata) and keeps its assignment; otherwise it joins a rebalance.
fn rejoin_static(group: &mut Group, id: &str, now: Instant) {
    let speaks = group.members[id].protocols.iter().any(|(name, _)| *name == group.protocol);
    match group.phase {
        Phase::Stable if speaks => {
            let members = if group.leader == id { group.metadata() } else { Vec::new() };
            let member = group.members.get_mut(id).expect("just put in");
            if let Some(waiting) = member.joining.take() {
                let _ = waiting.send(Joined {
                    error: code::NONE,
                    generation: group.generation,
                    protocol: group.protocol.clone(),
                    leader: group.leader.clone(),
                    member_id: id.to_owned(),
                    members,
                });
            }
        }
        Phase::Joining => group.try_complete(now),
        _ => {
            group.rebalance(now);
            group.try_complete(now);
        }
    }
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
        let error = match group
            .check_member(&request.member_id, request.group_instance_id.as_deref())
        {
            Err(error) => Some(error),
            Ok(()) if request.generation_id != group.generation => Some(code::ILLEGAL_GENERATION),
            Ok(()) if group.phase == Phase::Joining => Some(code::REBALANCE_IN_PROGRESS),
            Ok(()) => None,
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
                match group.check_member(&request.member_id, request.group_instance_id.as_deref()) {
                    Err(error) => error,
                    Ok(()) => {
                        let member = group.members.get_mut(&request.member_id).expect("checked");
                        member.last_seen = Instant::now();
                        if group.phase == Phase::Joining {
                            code::REBALANCE_IN_PROGRESS
                        } else if request.generation_id != group.generation {
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
    if !coordinates(client, &request.group_id) {
        let body = LeaveGroupResponse::default().with_error_code(code::NOT_COORDINATOR);
        return encode(ApiKey::LeaveGroup, header, &body);
    }
    let mut groups = client.state.groups.groups();
    let mut group = groups.get_mut(&request.group_id);
    let mut left = false;
    let mut answers = Vec::with_capacity(request.members.len());
    for (member_id, instance) in &request.members {
        // A static member may be named by its instance alone (an admin removing it).
        let error = match group.as_deref_mut() {
            None => code::UNKNOWN_MEMBER_ID,
            Some(group) => {
                let holder = match instance {
                    Some(instance) => match group.instances.get(instance) {
                        Some(holder) if member_id.is_empty() || holder == member_id => {
                            Ok(holder.clone())
                        }
                        Some(_) => Err(code::FENCED_INSTANCE_ID),
                        None => Err(code::UNKNOWN_MEMBER_ID),
                    },
                    None => Ok(member_id.clone()),
                };
                match holder.map(|id| group.remove(&id, code::UNKNOWN_MEMBER_ID)) {
                    Ok(Some(_)) => {
                        left = true;
                        code::NONE
                    }
                    Ok(None) => code::UNKNOWN_MEMBER_ID,
                    Err(error) => error,
                }
            }
        };
        answers.push(
            MemberResponse::default()
                .with_member_id(str_bytes(member_id))
                .with_group_instance_id(instance.as_deref().map(str_bytes))
                .with_error_code(error),
        );
    }
    if left && let Some(group) = group {
        let now = Instant::now();
        group.rebalance(now);
        group.try_complete(now);
    }
    drop(groups);
    let body = if header.version >= 3 {
        LeaveGroupResponse::default().with_members(answers)
    } else {
        let error = answers.first().map_or(code::UNKNOWN_MEMBER_ID, |a| a.error_code);
        LeaveGroupResponse::default().with_error_code(error)
    };
    encode(ApiKey::LeaveGroup, header, &body)
}

/// The longest metadata string a commit may carry (Kafka's `offset.metadata.max.bytes`).
const METADATA_MAX_BYTES: usize = 4096;

/// Whether a commit of `request`'s member may be taken, as Kafka's coordinator decides: a
/// member of the current generation may commit while the group prepares a rebalance (what
/// clients do in their revocation callbacks), not while it waits for the leader's SyncGroup.
fn commit_error(client: &Client, request: &OffsetCommitRequest) -> Option<i16> {
    if !coordinates(client, &request.group_id) {
        return Some(code::NOT_COORDINATOR);
    }
    if request.generation_id < 0 && request.member_id.is_empty() {
        // A consumer outside any group (assign, not subscribe) commits as it likes.
        return None;
    }
    let groups = client.state.groups.groups();
    let Some(group) = groups.get(&request.group_id) else {
        return Some(code::ILLEGAL_GENERATION);
    };
    if let Err(error) = group.check_member(&request.member_id, request.group_instance_id.as_deref())
    {
        return Some(error);
    }
    if group.generation != request.generation_id {
        return Some(code::ILLEGAL_GENERATION);
    }
    (group.phase == Phase::Syncing).then_some(code::REBALANCE_IN_PROGRESS)
}

pub async fn offset_commit(
    client: &Client,
    header: &Header,
    request: OffsetCommitRequest,
) -> Result<BytesMut, Malformed> {
    let group_error = commit_error(client, &request);
    let registry = client.node.registry();
    let mut topics = Vec::with_capacity(request.topics.len());
    for (topic, partitions) in request.topics {
        let allowed = client.node.authorizer().check(&client.principal, &topic, Operation::Consume);
        let known = partition_count(client, &topic);
        let mut answers = Vec::with_capacity(partitions.len());
        for (partition, offset, metadata) in partitions {
            let metadata = metadata.unwrap_or_default();
            let error = match group_error {
                Some(error) => error,
                None if !allowed => code::TOPIC_AUTHORIZATION_FAILED,
                None if !known.is_some_and(|n| (0..n).contains(&partition)) => {
                    code::UNKNOWN_TOPIC_OR_PARTITION
                }
                None if metadata.len() > METADATA_MAX_BYTES => code::OFFSET_METADATA_TOO_LARGE,
                None => match &registry {
                    Some(registry) => {
                        match registry
                            .commit_kafka_offset(
                                &request.group_id,
                                &topic,
                                partition,
                                offset,
                                &metadata,
                            )
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
                            .insert(partition, KafkaCommit { record: offset, metadata });
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

/// How many partitions `topic` has, if it exists.
pub(super) fn partition_count(client: &Client, topic: &str) -> Option<i32> {
    let metadata = client.node.metadata(&[topic.to_owned()]);
    let topic = metadata.topics.into_iter().find(|t| t.name == topic)?;
    (topic.error != ErrorCode::UnknownTopic)
        .then(|| topic.partitions.iter().map(|p| p.partition + 1).max().unwrap_or(0))
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
        Some(registry) => match registry.kafka_commits(&request.group_id).await {
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
                    let commit = committed.get(&topic).and_then(|ps| ps.get(&partition));
                    let answer =
                        OffsetFetchResponsePartition::default().with_partition_index(partition);
                    match (allowed, commit) {
                        (false, _) => answer
                            .with_committed_offset(-1)
                            .with_metadata(Some(str_bytes("")))
                            .with_error_code(code::TOPIC_AUTHORIZATION_FAILED),
                        (true, None) => {
                            answer.with_committed_offset(-1).with_metadata(Some(str_bytes("")))
                        }
                        (true, Some(commit)) => answer
                            .with_committed_offset(commit.record)
                            .with_metadata(Some(str_bytes(&commit.metadata))),
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
