//! `trib groups list|describe`: consumer groups as the registry records them — who owns
//! which partition, how far the group has committed, and how far behind the log end it is.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use anyhow::Context;
use client::{OffsetTime, SimpleConsumer, SimpleConsumerConfig};
use serde_json::json;

use crate::cli::GroupsCommand;

pub async fn run(command: GroupsCommand, json: bool) -> anyhow::Result<()> {
    match command {
        GroupsCommand::List { brokers } => {
            let brokers = brokers.brokers().await?;
            let groups =
                brokers.registry()?.groups().await.context("cannot read the consumer registry")?;
            if json {
                println!("{}", json!(groups));
            } else if groups.is_empty() {
                eprintln!("trib: no consumer groups");
            } else {
                groups.iter().for_each(|g| println!("{g}"));
            }
            Ok(())
        }
        GroupsCommand::Describe { brokers, group } => {
            let brokers = brokers.brokers().await?;
            describe(brokers.registry()?, &group, json).await
        }
    }
}

struct Row {
    topic: String,
    partition: cluster::PartitionId,
    owner: Option<String>,
    committed: Option<i64>,
    log_end: Option<i64>,
}

async fn describe(registry: &cluster::Registry, group: &str, json: bool) -> anyhow::Result<()> {
    let topics = registry.group_topics(group).await.context("cannot read the consumer registry")?;
    if topics.is_empty() {
        anyhow::bail!("no consumer group {group}");
    }
    let brokers = registry.brokers().await?;
    let members = registry.consumers(group).await?;
    let mut consumers: BTreeMap<i32, SimpleConsumer> = BTreeMap::new();
    let mut rows = Vec::new();
    for topic in &topics {
        let owners = registry.owners(group, topic).await?;
        let offsets = registry.offsets(group, topic).await?;
        let mut partitions = registry.partitions(topic).await?;
        // Partitions of brokers that are down still show their committed offsets.
        partitions.extend(offsets.keys().copied());
        partitions.sort();
        partitions.dedup();
        for partition in partitions {
            let log_end = match brokers.get(&partition.broker) {
                Some(info) => {
                    let consumer = match consumers.entry(partition.broker) {
                        Entry::Occupied(entry) => entry.into_mut(),
                        Entry::Vacant(entry) => {
                            let config = SimpleConsumerConfig::default();
                            entry.insert(SimpleConsumer::connect(&info.addr(), config).await?)
                        }
                    };
                    let p = partition.partition as i32;
                    consumer
                        .offsets(topic, p, OffsetTime::Latest, 1)
                        .await
                        .ok()
                        .and_then(|o| o.first().copied())
                }
                None => None, // the broker is down
            };
            rows.push(Row {
                topic: topic.clone(),
                partition,
                owner: owners.get(&partition).cloned(),
                committed: offsets.get(&partition).copied(),
                log_end,
            });
        }
    }
    let lag = |r: &Row| Some(r.log_end? - r.committed?);
    if json {
        let partitions: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({
                    "topic": r.topic, "partition": r.partition.to_string(), "owner": r.owner,
                    "committed": r.committed, "log_end": r.log_end, "lag": lag(r),
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
        println!(
            "{:<20} {:>9} {:<28} {:>14} {:>14} {:>12}",
            r.topic,
            r.partition.to_string(),
            r.owner.as_deref().unwrap_or("-"),
            show(r.committed),
            show(r.log_end),
            show(lag(r))
        );
    }
    Ok(())
}
