//! `trib groups list|describe|reset|delete`: consumer groups as the registry records them —
//! who owns which partition, how far the group has committed, and how far behind the log end
//! it is — and the two changes an operator makes to a stopped group: moving its offsets and
//! deleting it.

use std::collections::BTreeMap;

use anyhow::Context as _;
use client::group::lag::{LogEnds, PartitionLag, group_lag_with};
use serde_json::json;

use client::{OffsetTime, SimpleConsumer};
use protocol::kafka::describe_groups;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::brokers::Brokers;
use crate::cli::{GroupsCommand, ResetTo};
use crate::context::Context;

/// A member's partitions, by topic.
type Assignment = Vec<(String, Vec<i32>)>;

/// How long a group's coordinator has to describe it.
const ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The largest answer read from it.
const ANSWER_BYTES_MAX: usize = 16 << 20;

pub async fn run(command: GroupsCommand, context: &Context, json: bool) -> anyhow::Result<()> {
    match command {
        GroupsCommand::List { brokers } => {
            let brokers = Brokers::find(&brokers, context).await?;
            let registry = brokers.registry()?;
            let native = registry.groups().await.context("cannot read the consumer registry")?;
            let kafka = registry.kafka_groups().await.context("cannot read the Kafka groups")?;
            if json {
                let all: std::collections::BTreeSet<&String> =
                    native.iter().chain(&kafka).collect();
                println!("{}", json!(all));
            } else if native.is_empty() && kafka.is_empty() {
                eprintln!("trib: no consumer groups");
            } else {
                native.iter().for_each(|g| println!("{g}"));
                kafka.iter().for_each(|g| println!("{g}  (Kafka protocol)"));
            }
            Ok(())
        }
        GroupsCommand::Describe { brokers, group } => {
            let brokers = Brokers::find(&brokers, context).await?;
            let registry = brokers.registry()?;
            let native =
                registry.group_topics(&group).await.context("cannot read the consumer registry")?;
            let kafka =
                registry.kafka_offsets(&group).await.context("cannot read the Kafka groups")?;
            if native.is_empty() && kafka.is_empty() {
                anyhow::bail!(crate::Refused(format!("no consumer group {group}")));
            }
            if !native.is_empty() {
                describe(registry, context, &group, json).await?;
            }
            if !kafka.is_empty() {
                describe_kafka(&brokers, context, &group, kafka, json).await?;
            }
            Ok(())
        }
        GroupsCommand::Reset { brokers, group, topic, to, execute } => {
            let brokers = Brokers::find(&brokers, context).await?;
            reset(&brokers, context, &group, &topic, to, execute, json).await
        }
        GroupsCommand::Delete { brokers, group, execute } => {
            let brokers = Brokers::find(&brokers, context).await?;
            delete(brokers.registry()?, &group, execute, json).await
        }
    }
}

/// One partition of a reset plan.
struct Move {
    partition: i32,
    committed: Option<i64>,
    target: i64,
    log_start: i64,
    log_end: i64,
}

async fn reset(
    brokers: &Brokers,
    context: &Context,
    group: &str,
    topic: &str,
    to: ResetTo,
    execute: bool,
    json: bool,
) -> anyhow::Result<()> {
    let registry = brokers.registry()?;
    let partitions = registry.partitions(topic).await.context("cannot read the topic")?;
    if partitions.is_empty() {
        anyhow::bail!(crate::Refused(format!("no topic {topic}")));
    }
    let mut plan = Vec::new();
    for partition in partitions {
        let conn = brokers.connect_for(topic, partition).await?;
        let consumer = SimpleConsumer::with_connection(conn, context.consumer_config())?;
        let log_start = consumer.earliest_offset(topic, partition).await?;
        let log_end = consumer.latest_offset(topic, partition).await?;
        let target = match to {
            ResetTo::Earliest => log_start,
            ResetTo::Latest => log_end,
            ResetTo::Time(ms) => {
                let starts = consumer.offsets(topic, partition, OffsetTime::Before(ms), 1).await?;
                starts.first().copied().unwrap_or(log_start).max(log_start)
            }
            ResetTo::Offset(offset) => {
                if !(log_start..=log_end).contains(&offset) {
                    anyhow::bail!(crate::Refused(format!(
                        "offset {offset} is outside {topic}-{partition}'s log ({log_start}..{log_end})"
                    )));
                }
                // Byte offsets: only a message's first byte is a place to resume from.
                if offset < log_end {
                    // What is read from a byte that does not begin a message is garbage: a
                    // bad frame, or a length no message has.
                    let begins = match consumer.fetch(topic, partition, offset).await {
                        Ok(fetched) => fetched.iter().next().is_some_and(|m| m.is_ok()),
                        Err(
                            e @ (client::ConsumerError::Connection { .. }
                            | client::ConsumerError::Request { .. }),
                        ) => return Err(e.into()),
                        Err(_) => false,
                    };
                    if !begins {
                        anyhow::bail!(crate::Refused(format!(
                            "offset {offset} of {topic}-{partition} is not where a message begins"
                        )));
                    }
                }
                offset
            }
        };
        let committed = registry.offset(group, topic, partition).await?;
        plan.push(Move { partition, committed, target, log_start, log_end });
    }
    if json {
        let rows: Vec<_> = plan
            .iter()
            .map(|m| {
                json!({"topic": topic, "partition": m.partition, "committed": m.committed,
                       "new": m.target, "log_start": m.log_start, "log_end": m.log_end})
            })
            .collect();
        println!("{}", json!({"group": group, "executed": execute, "partitions": rows}));
    } else {
        println!(
            "{:<20} {:>9} {:>14} {:>14} {:>14} {:>14}",
            "topic", "partition", "committed", "new", "log start", "log end"
        );
        for m in &plan {
            let committed = m.committed.map_or("-".to_owned(), |o| o.to_string());
            println!(
                "{:<20} {:>9} {:>14} {:>14} {:>14} {:>14}",
                topic, m.partition, committed, m.target, m.log_start, m.log_end
            );
        }
    }
    if !execute {
        eprintln!("trib: a plan only; --execute commits it");
        return Ok(());
    }
    let members: Vec<String> = registry.consumers(group).await?.into_keys().collect();
    if !members.is_empty() {
        Err(cluster::RegistryError::GroupActive { group: group.to_owned(), members })?;
    }
    for m in &plan {
        registry.commit_offset(group, topic, m.partition, m.target).await?;
    }
    eprintln!("trib: committed {} offsets of group {group}", plan.len());
    Ok(())
}

async fn delete(
    registry: &cluster::Registry,
    group: &str,
    execute: bool,
    json: bool,
) -> anyhow::Result<()> {
    let topics = registry.group_topics(group).await.context("cannot read the consumer registry")?;
    if topics.is_empty() && !registry.groups().await?.iter().any(|g| g == group) {
        anyhow::bail!(crate::Refused(format!("no consumer group {group}")));
    }
    let mut offsets = 0;
    for topic in &topics {
        offsets += registry.offsets(group, topic).await?.len();
    }
    if json {
        println!(
            "{}",
            json!({"group": group, "topics": topics, "offsets": offsets, "executed": execute})
        );
    } else {
        println!(
            "group {group}: committed offsets of {offsets} partitions of {}",
            topics.join(", ")
        );
    }
    if !execute {
        eprintln!("trib: a plan only; --execute deletes the group");
        return Ok(());
    }
    registry.delete_group(group).await?;
    eprintln!("trib: deleted group {group}");
    Ok(())
}

async fn describe(
    registry: &cluster::Registry,
    context: &Context,
    group: &str,
    json: bool,
) -> anyhow::Result<()> {
    let topics = registry.group_topics(group).await.context("cannot read the consumer registry")?;
    let members = registry.consumers(group).await?;
    let mut owners = BTreeMap::new();
    for topic in &topics {
        owners.insert(topic.clone(), registry.owners(group, topic).await?);
    }
    let mut ends = LogEnds::with_tls(context.tls());
    let rows = group_lag_with(&mut ends, registry, group, &topics).await?;
    let owner = |r: &PartitionLag| owners.get(&r.topic).and_then(|o| o.get(&r.partition)).cloned();
    if json {
        let partitions: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({
                    "topic": r.topic, "partition": r.partition, "owner": owner(r),
                    "committed": r.committed, "log_start": r.lag.map(|l| l.log_start),
                    "log_end": r.lag.map(|l| l.log_end), "lag": r.lag.map(|l| l.bytes()),
                    "lag_from_log_start": r.lag.map(|l| l.from_start()),
                })
            })
            .collect();
        let members: Vec<&String> = members.keys().collect();
        println!("{}", json!({"group": group, "members": members, "partitions": partitions}));
        return Ok(());
    }
    println!(
        "group {group}: {} member(s): {}",
        members.len(),
        members.keys().cloned().collect::<Vec<_>>().join(", ")
    );
    println!(
        "{:<20} {:>9} {:<28} {:>14} {:>14} {:>12}",
        "topic", "partition", "owner", "committed", "log end", "lag"
    );
    let show = |o: Option<i64>| o.map_or("-".to_owned(), |o| o.to_string());
    for r in &rows {
        // With nothing committed the lag counts from the log start: marked `*`.
        let lag = match r.lag {
            Some(lag) if lag.from_start() => format!("{}*", lag.bytes()),
            lag => show(lag.map(|l| l.bytes())),
        };
        println!(
            "{:<20} {:>9} {:<28} {:>14} {:>14} {:>12}",
            r.topic,
            r.partition.to_string(),
            owner(r).as_deref().unwrap_or("-"),
            show(r.committed),
            show(r.lag.map(|l| l.log_end)),
            lag
        );
    }
    if rows.iter().any(|r| r.lag.is_some_and(|l| l.from_start())) {
        println!("* nothing committed: the lag counts from the start of the log");
    }
    Ok(())
}

/// A Kafka-protocol group (docs/design.md, "Kafka consumer groups on the listener"): its
/// offsets are record numbers, and its members and their assignment live with its
/// coordinator, which this names and asks (DescribeGroups on its Kafka listener), as Kafka's
/// `kafka-consumer-groups --describe` does.
async fn describe_kafka(
    brokers: &Brokers,
    context: &Context,
    group: &str,
    offsets: BTreeMap<String, BTreeMap<i32, i64>>,
    json: bool,
) -> anyhow::Result<()> {
    let registry = brokers.registry()?;
    let live = registry.brokers().await.context("cannot read the live brokers")?;
    let with_listener = live.iter().filter(|(_, b)| b.kafka_port.is_some()).map(|(id, _)| *id);
    let coordinator = cluster::kafka_coordinator(group, with_listener);
    let described = match coordinator.and_then(|id| live.get(&id)) {
        Some(b) => {
            let addr = format!("{}:{}", b.host, b.kafka_port.expect("a Kafka listener"));
            ask_coordinator(&addr, context, group).await
        }
        None => Err(anyhow::anyhow!("no live broker coordinates it")),
    };
    let members: Vec<(describe_groups::Member, Assignment)> = match &described {
        Ok(g) => g
            .members
            .iter()
            .map(|m| {
                let assigned =
                    describe_groups::consumer_assignment(&m.assignment).unwrap_or_default();
                (m.clone(), assigned)
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    let owner = |topic: &str, partition: i32| {
        members.iter().find_map(|(m, assigned)| {
            let owns = assigned.iter().any(|(t, ps)| t == topic && ps.contains(&partition));
            owns.then_some(m)
        })
    };
    let mut rows = Vec::new();
    for (topic, partitions) in &offsets {
        for (&partition, &committed) in partitions {
            // The log end in records; `None` while the partition has no reachable leader.
            let end = async {
                let conn = brokers.connect_for(topic, partition).await?;
                let consumer = SimpleConsumer::with_connection(conn, context.consumer_config())?;
                let byte_end = consumer.latest_offset(topic, partition).await?;
                anyhow::Ok(consumer.record_number(topic, partition, byte_end).await?)
            };
            let end = end.await.ok();
            rows.push((topic, partition, committed, end, end.map(|end| (end - committed).max(0))));
        }
    }
    if json {
        let partitions: Vec<_> = rows
            .iter()
            .map(|(topic, partition, committed, end, lag)| {
                json!({"topic": topic, "partition": partition, "committed": committed,
                       "log_end": end, "lag": lag,
                       "owner": owner(topic, *partition).map(|m| &m.member_id)})
            })
            .collect();
        let member_values: Vec<_> = members
            .iter()
            .map(|(m, assigned)| {
                let assigned: BTreeMap<&String, &Vec<i32>> =
                    assigned.iter().map(|(t, ps)| (t, ps)).collect();
                json!({"member_id": m.member_id, "client_id": m.client_id,
                       "host": m.client_host, "assignment": assigned})
            })
            .collect();
        let mut value = json!({"group": group, "protocol": "kafka", "coordinator": coordinator,
                               "partitions": partitions, "members": member_values});
        match &described {
            Ok(g) => value["state"] = json!(g.state),
            Err(e) => value["members_unknown"] = json!(format!("{e:#}")),
        }
        println!("{value}");
        return Ok(());
    }
    let coordinator = coordinator.map_or("none live".to_owned(), |id| format!("broker {id}"));
    println!("group {group} (Kafka protocol): coordinator {coordinator}; offsets in records");
    match &described {
        Ok(g) => {
            println!("state {}, {} member(s)", g.state, g.members.len());
            for (m, assigned) in &members {
                let assigned: Vec<String> =
                    assigned.iter().map(|(t, ps)| format!("{t} {ps:?}")).collect();
                println!(
                    "  {}  client {}  host {}  assigned {}",
                    m.member_id,
                    m.client_id,
                    m.client_host,
                    assigned.join(", ")
                );
            }
        }
        Err(e) => println!("members unknown: {e:#}"),
    }
    println!(
        "{:<20} {:>9} {:>14} {:>14} {:>12}  {:<24}",
        "topic", "partition", "committed", "log end", "lag", "client (host)"
    );
    let show = |o: Option<i64>| o.map_or("-".to_owned(), |o| o.to_string());
    for (topic, partition, committed, end, lag) in &rows {
        let owner = owner(topic, *partition)
            .map_or("-".to_owned(), |m| format!("{} ({})", m.client_id, m.client_host));
        println!(
            "{:<20} {:>9} {:>14} {:>14} {:>12}  {:<24}",
            topic,
            partition.to_string(),
            committed,
            show(*end),
            show(*lag),
            owner
        );
    }
    Ok(())
}

/// Asks the group's coordinator for its members: DescribeGroups on its Kafka listener, with
/// trib's TLS settings.
async fn ask_coordinator(
    addr: &str,
    context: &Context,
    group: &str,
) -> anyhow::Result<describe_groups::Group> {
    let ask = async {
        let tls = context.tls();
        let mut stream = service::tls::ClientStream::connect(addr, tls.as_ref()).await?;
        stream.write_all(&describe_groups::request(1, "trib", group)?).await?;
        let mut size = [0u8; 4];
        stream.read_exact(&mut size).await?;
        let size = u32::from_be_bytes(size) as usize;
        anyhow::ensure!(size <= ANSWER_BYTES_MAX, "an answer of {size} bytes");
        let mut frame = vec![0; size];
        stream.read_exact(&mut frame).await?;
        let (_, described) = describe_groups::response(frame.into())?;
        match described.error {
            0 => Ok(described),
            30 => anyhow::bail!("the ACLs do not let {} describe the group", context.principal()),
            code => anyhow::bail!("the coordinator answered Kafka error {code}"),
        }
    };
    tokio::time::timeout(ASK_TIMEOUT, ask)
        .await
        .map_err(|_| anyhow::anyhow!("no answer in {ASK_TIMEOUT:?}"))?
        .with_context(|| format!("asking the coordinator at {addr}"))
}
