//! `trib groups list|describe`: consumer groups as the registry records them — who owns
//! which partition, how far the group has committed, and how far behind the log end it is.

use std::collections::BTreeMap;

use anyhow::Context;
use client::group::lag::{PartitionLag, group_lag};
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

async fn describe(registry: &cluster::Registry, group: &str, json: bool) -> anyhow::Result<()> {
    let topics = registry.group_topics(group).await.context("cannot read the consumer registry")?;
    if topics.is_empty() {
        anyhow::bail!("no consumer group {group}");
    }
    let members = registry.consumers(group).await?;
    let mut owners = BTreeMap::new();
    for topic in &topics {
        owners.insert(topic.clone(), registry.owners(group, topic).await?);
    }
    let rows = group_lag(registry, group, &topics).await?;
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
