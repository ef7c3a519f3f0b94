//! Kafka's group administration: ListGroups, DescribeGroups, DeleteGroups and OffsetDelete,
//! what `kafka-consumer-groups` and the admin clients use. Each broker answers for the groups
//! it coordinates: those with members in its memory and those whose offsets the registry
//! holds (a group without members is `Empty`). Groups are authorised by the ACL file's
//! `groups` patterns: `describe` to list and describe one, `delete` to delete it or its
//! offsets.

use std::collections::BTreeMap;

use bytes::BytesMut;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, DeleteGroupsResponse, DescribeGroupsResponse, GroupId, ListGroupsResponse,
    OffsetDeleteResponse, TopicName,
};
use protocol::kafka::request::{Header, ListGroupsRequest, Malformed, OffsetDeleteRequest, Reader};
use protocol::kafka::response::{code, encode, str_bytes};

use super::client::Client;
use super::coordinator::{Group, Phase};
use super::groups::coordinates;
use crate::acl::Operation;

/// A group as the admin APIs show it: its state, protocol type and members.
struct Shown {
    state: &'static str,
    protocol_type: String,
    protocol: String,
    members: Vec<DescribedGroupMember>,
}

impl Shown {
    fn of(group: &Group) -> Shown {
        let members = group
            .members
            .iter()
            .map(|(id, m)| {
                DescribedGroupMember::default()
                    .with_member_id(str_bytes(id))
                    .with_group_instance_id(m.instance_id.as_deref().map(str_bytes))
                    .with_client_id(str_bytes(&m.client_id))
                    .with_client_host(str_bytes(&m.client_host))
                    .with_member_metadata(m.metadata(&group.protocol))
                    .with_member_assignment(m.assignment.clone())
            })
            .collect();
        Shown {
            state: group.phase.kafka_name(),
            protocol_type: group.protocol_type.clone().unwrap_or_default(),
            protocol: match group.phase {
                Phase::Syncing | Phase::Stable => group.protocol.clone(),
                Phase::Empty | Phase::Joining => String::new(),
            },
            members,
        }
    }

    /// A group known only by its committed offsets.
    fn empty() -> Shown {
        Shown {
            state: Phase::Empty.kafka_name(),
            protocol_type: "consumer".into(),
            protocol: String::new(),
            members: Vec::new(),
        }
    }
}

/// Whether `group` has committed offsets: in the registry, or this broker's memory without one.
async fn has_offsets(client: &Client, group: &str) -> Result<bool, i16> {
    match client.node.registry() {
        Some(registry) => match registry.kafka_commits(group).await {
            Ok(commits) => Ok(!commits.is_empty()),
            Err(e) => {
                tracing::warn!(%group, error = %e, "cannot read a Kafka group's offsets");
                Err(code::COORDINATOR_NOT_AVAILABLE)
            }
        },
        None => {
            let offsets = client.state.groups.offsets.lock().unwrap_or_else(|p| p.into_inner());
            Ok(offsets.get(group).is_some_and(|o| !o.is_empty()))
        }
    }
}

/// What this broker coordinates, by group id: the groups in its memory, then those the
/// registry (or its memory) holds offsets for.
async fn coordinated(client: &Client) -> Result<BTreeMap<String, Shown>, i16> {
    let mut shown: BTreeMap<String, Shown> = {
        let groups = client.state.groups.groups();
        groups.iter().map(|(id, g)| (id.clone(), Shown::of(g))).collect()
    };
    let with_offsets: Vec<String> = match client.node.registry() {
        Some(registry) => registry.kafka_groups().await.map_err(|e| {
            tracing::warn!(error = %e, "cannot list the Kafka groups");
            code::COORDINATOR_NOT_AVAILABLE
        })?,
        None => {
            let offsets = client.state.groups.offsets.lock().unwrap_or_else(|p| p.into_inner());
            offsets.keys().cloned().collect()
        }
    };
    for group in with_offsets {
        shown.entry(group).or_insert_with(Shown::empty);
    }
    shown.retain(|group, _| coordinates(client, group));
    Ok(shown)
}

pub async fn list_groups(
    client: &Client,
    header: &Header,
    request: ListGroupsRequest,
) -> Result<BytesMut, Malformed> {
    let groups = match coordinated(client).await {
        Ok(groups) => groups,
        Err(error) => {
            let body = ListGroupsResponse::default().with_error_code(error);
            return encode(ApiKey::ListGroups, header, &body);
        }
    };
    let authorizer = client.node.authorizer();
    let listed = groups
        .into_iter()
        .filter(|(_, g)| request.states.is_empty() || request.states.iter().any(|s| s == g.state))
        .filter(|(id, _)| authorizer.check_group(&client.principal, id, Operation::Describe))
        .map(|(id, g)| {
            ListedGroup::default()
                .with_group_id(GroupId(str_bytes(&id)))
                .with_protocol_type(str_bytes(&g.protocol_type))
                .with_group_state(str_bytes(g.state))
        })
        .collect();
    encode(ApiKey::ListGroups, header, &ListGroupsResponse::default().with_groups(listed))
}

pub async fn describe_groups(
    client: &Client,
    header: &Header,
    groups: Vec<String>,
) -> Result<BytesMut, Malformed> {
    let mut described = Vec::with_capacity(groups.len());
    for id in groups {
        let answer = DescribedGroup::default().with_group_id(GroupId(str_bytes(&id)));
        let error = |error: i16| answer.clone().with_error_code(error);
        if !client.node.authorizer().check_group(&client.principal, &id, Operation::Describe) {
            described.push(error(code::GROUP_AUTHORIZATION_FAILED));
            continue;
        }
        if !coordinates(client, &id) {
            described.push(error(code::NOT_COORDINATOR));
            continue;
        }
        let in_memory = client.state.groups.groups().get(&id).map(Shown::of);
        let shown = match in_memory {
            Some(shown) => Some(shown),
            None => match has_offsets(client, &id).await {
                Ok(true) => Some(Shown::empty()),
                Ok(false) => None,
                Err(e) => {
                    described.push(error(e));
                    continue;
                }
            },
        };
        // A group Kafka does not know is described as Dead, without an error.
        described.push(match shown {
            None => answer.with_group_state(str_bytes("Dead")),
            Some(shown) => answer
                .with_group_state(str_bytes(shown.state))
                .with_protocol_type(str_bytes(&shown.protocol_type))
                .with_protocol_data(str_bytes(&shown.protocol))
                .with_members(shown.members),
        });
    }
    let body = DescribeGroupsResponse::default().with_groups(described);
    encode(ApiKey::DescribeGroups, header, &body)
}

pub async fn delete_groups(
    client: &Client,
    header: &Header,
    groups: Vec<String>,
) -> Result<BytesMut, Malformed> {
    let mut results = Vec::with_capacity(groups.len());
    for id in groups {
        let error = delete_group(client, &id).await;
        results.push(
            DeletableGroupResult::default()
                .with_group_id(GroupId(str_bytes(&id)))
                .with_error_code(error),
        );
    }
    encode(ApiKey::DeleteGroups, header, &DeleteGroupsResponse::default().with_results(results))
}

/// Deletes group `id` and its offsets: refused while it has members.
async fn delete_group(client: &Client, id: &str) -> i16 {
    if !client.node.authorizer().check_group(&client.principal, id, Operation::Delete) {
        return code::GROUP_AUTHORIZATION_FAILED;
    }
    if !coordinates(client, id) {
        return code::NOT_COORDINATOR;
    }
    {
        let mut groups = client.state.groups.groups();
        if groups.get(id).is_some_and(|g| !g.members.is_empty()) {
            return code::NON_EMPTY_GROUP;
        }
        groups.remove(id);
    }
    match has_offsets(client, id).await {
        Ok(true) => {}
        Ok(false) => return code::GROUP_ID_NOT_FOUND,
        Err(error) => return error,
    }
    match client.node.registry() {
        Some(registry) => match registry.delete_kafka_group(id).await {
            Ok(()) => code::NONE,
            Err(e) => {
                tracing::warn!(group = %id, error = %e, "cannot delete a Kafka group");
                code::COORDINATOR_NOT_AVAILABLE
            }
        },
        None => {
            let mut offsets = client.state.groups.offsets.lock().unwrap_or_else(|p| p.into_inner());
            offsets.remove(id);
            code::NONE
        }
    }
}

/// The topics the members of a consumer group subscribe to, from the subscriptions they
/// joined with (Kafka's ConsumerProtocolSubscription: a version, then the topics).
fn subscribed_topics(group: &Group) -> Vec<String> {
    if group.protocol_type.as_deref() != Some("consumer") {
        return Vec::new();
    }
    let mut topics = Vec::new();
    for member in group.members.values() {
        let mut r = Reader::new(member.metadata(&group.protocol));
        if r.i16().is_err() {
            continue;
        }
        if let Ok(named) = r.vec(false, |r| r.string(false)) {
            topics.extend(named);
        }
    }
    topics
}

pub async fn offset_delete(
    client: &Client,
    header: &Header,
    request: OffsetDeleteRequest,
) -> Result<BytesMut, Malformed> {
    let fail = |error: i16| {
        encode(
            ApiKey::OffsetDelete,
            header,
            &OffsetDeleteResponse::default().with_error_code(error),
        )
    };
    let group = &request.group_id;
    if !client.node.authorizer().check_group(&client.principal, group, Operation::Delete) {
        return fail(code::GROUP_AUTHORIZATION_FAILED);
    }
    if !coordinates(client, group) {
        return fail(code::NOT_COORDINATOR);
    }
    let subscribed = client.state.groups.groups().get(group).map(subscribed_topics);
    if subscribed.is_none() {
        match has_offsets(client, group).await {
            Ok(true) => {}
            Ok(false) => return fail(code::GROUP_ID_NOT_FOUND),
            Err(error) => return fail(error),
        }
    }
    let subscribed = subscribed.unwrap_or_default();
    let mut topics = Vec::with_capacity(request.topics.len());
    for (topic, partitions) in request.topics {
        let allowed = client.node.authorizer().check(&client.principal, &topic, Operation::Consume);
        let mut answers = Vec::with_capacity(partitions.len());
        for partition in partitions {
            let error = if !allowed {
                code::TOPIC_AUTHORIZATION_FAILED
            } else if subscribed.contains(&topic) {
                code::GROUP_SUBSCRIBED_TO_TOPIC
            } else {
                forget_offset(client, group, &topic, partition).await
            };
            answers.push(
                OffsetDeleteResponsePartition::default()
                    .with_partition_index(partition)
                    .with_error_code(error),
            );
        }
        topics.push(
            OffsetDeleteResponseTopic::default()
                .with_name(TopicName(str_bytes(&topic)))
                .with_partitions(answers),
        );
    }
    encode(ApiKey::OffsetDelete, header, &OffsetDeleteResponse::default().with_topics(topics))
}

async fn forget_offset(client: &Client, group: &str, topic: &str, partition: i32) -> i16 {
    match client.node.registry() {
        Some(registry) => match registry.delete_kafka_offset(group, topic, partition).await {
            Ok(()) => code::NONE,
            Err(e) => {
                tracing::warn!(%group, %topic, partition, error = %e, "cannot delete a Kafka group's offset");
                code::COORDINATOR_NOT_AVAILABLE
            }
        },
        None => {
            let mut offsets = client.state.groups.offsets.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(partitions) = offsets.get_mut(group).and_then(|g| g.get_mut(topic)) {
                partitions.remove(&partition);
            }
            code::NONE
        }
    }
}
