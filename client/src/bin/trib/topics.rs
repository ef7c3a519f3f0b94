//! `trib topics list|create|describe`: what each broker holds, and creating topics on them.

use std::collections::BTreeMap;

use anyhow::Context;
use client::{OffsetTime, SimpleConsumer, SimpleConsumerConfig};
use serde_json::json;

use crate::cli::TopicsCommand;

pub async fn run(command: TopicsCommand, json: bool) -> anyhow::Result<()> {
    match command {
        TopicsCommand::List { brokers } => list(&brokers.brokers().await?, json).await,
        TopicsCommand::Create { brokers, topic, partitions, configs } => {
            let brokers = brokers.brokers().await?;
            let configs: Vec<(&str, &str)> =
                configs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            for conn in brokers.connect_all().await? {
                conn.create_topic(&topic, partitions, &configs)
                    .await
                    .with_context(|| format!("cannot create {topic} on {}", conn.addr()))?;
            }
            let addrs = brokers.addrs().await?;
            if json {
                println!("{}", json!({"topic": topic, "partitions": partitions, "brokers": addrs}));
            } else {
                println!("created {topic} with {partitions} partition(s) on {}", addrs.join(", "));
            }
            Ok(())
        }
        TopicsCommand::Describe { brokers, topic } => {
            describe(&brokers.brokers().await?, &topic, json).await
        }
    }
}

async fn list(brokers: &crate::brokers::Brokers, json: bool) -> anyhow::Result<()> {
    // topic → [(broker id, address, partitions)]
    let mut topics: BTreeMap<String, Vec<(i32, String, i32)>> = BTreeMap::new();
    for conn in brokers.connect_all().await? {
        let metadata = conn.metadata(&[]).await?;
        for (topic, partitions) in metadata.topics {
            topics.entry(topic).or_default().push((
                metadata.broker_id,
                conn.addr().to_owned(),
                partitions,
            ));
        }
    }
    if json {
        let list: Vec<_> = topics
            .iter()
            .map(|(topic, on)| {
                let brokers: Vec<_> = on
                    .iter()
                    .map(|(id, addr, partitions)| json!({"broker_id": id, "addr": addr, "partitions": partitions}))
                    .collect();
                json!({"topic": topic, "brokers": brokers})
            })
            .collect();
        println!("{}", serde_json::Value::Array(list));
        return Ok(());
    }
    if topics.is_empty() {
        eprintln!("trib: no topics");
    }
    for (topic, on) in &topics {
        let total: i32 = on.iter().map(|(_, _, n)| n).sum();
        println!("{topic}\t{total} partition(s) on {} broker(s)", on.len());
    }
    Ok(())
}

async fn describe(
    brokers: &crate::brokers::Brokers,
    topic: &str,
    json: bool,
) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for broker in brokers.topic_brokers(topic).await? {
        let config = SimpleConsumerConfig::default();
        let consumer = SimpleConsumer::connect(&broker.addr, config).await?;
        for partition in 0..broker.partitions as i32 {
            let earliest = consumer.offsets(topic, partition, OffsetTime::Earliest, 1).await?;
            let latest = consumer.offsets(topic, partition, OffsetTime::Latest, 1).await?;
            let (earliest, latest) = (earliest.first().copied(), latest.first().copied());
            rows.push((broker.broker_id, broker.addr.clone(), partition, earliest, latest));
        }
    }
    if rows.is_empty() {
        anyhow::bail!("no broker has topic {topic}");
    }
    if json {
        let partitions: Vec<_> = rows
            .iter()
            .map(|(id, addr, partition, earliest, latest)| {
                json!({"broker_id": id, "addr": addr, "partition": partition, "earliest": earliest, "latest": latest})
            })
            .collect();
        println!("{}", json!({"topic": topic, "partitions": partitions}));
        return Ok(());
    }
    println!(
        "{:<10} {:<22} {:>9} {:>14} {:>14}",
        "broker", "addr", "partition", "earliest", "latest"
    );
    for (id, addr, partition, earliest, latest) in rows {
        let show = |o: Option<i64>| o.map_or("-".to_owned(), |o| o.to_string());
        println!("{id:<10} {addr:<22} {partition:>9} {:>14} {:>14}", show(earliest), show(latest));
    }
    Ok(())
}
