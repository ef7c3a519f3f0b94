//! `trib topics list|create|describe`: the cluster's topics, creating them, and each
//! partition's leader, replicas and in-sync replicas.

use anyhow::Context;
use client::{OffsetTime, SimpleConsumer, SimpleConsumerConfig};
use protocol::{MetadataResponse, TopicMetadata};
use serde_json::json;

use crate::cli::TopicsCommand;

pub async fn run(command: TopicsCommand, json: bool) -> anyhow::Result<()> {
    match command {
        TopicsCommand::List { brokers } => list(&brokers.brokers().await?, json).await,
        TopicsCommand::Create { brokers, topic, partitions, replication_factor, configs } => {
            let brokers = brokers.brokers().await?;
            let mut configs: Vec<(String, String)> = configs;
            if let Some(factor) = replication_factor {
                configs.push(("replication_factor".into(), factor.to_string()));
            }
            let configs: Vec<(&str, &str)> =
                configs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let addr = brokers.addrs().await?.into_iter().next().context("no broker address")?;
            let conn = client::Connection::connect(&addr).await?;
            conn.create_topic(&topic, partitions, &configs)
                .await
                .with_context(|| format!("cannot create {topic} through {addr}"))?;
            let metadata = brokers.metadata(&[&topic]).await?;
            let factor = metadata.topic(&topic).map_or(0, replication_factor_of);
            if json {
                println!(
                    "{}",
                    json!({"topic": topic, "partitions": partitions, "replication_factor": factor})
                );
            } else {
                println!(
                    "created {topic} with {partitions} partition(s), replication factor {factor}"
                );
            }
            Ok(())
        }
        TopicsCommand::Describe { brokers, topic } => {
            describe(&brokers.brokers().await?, &topic, json).await
        }
    }
}

fn replication_factor_of(topic: &TopicMetadata) -> usize {
    topic.partitions.first().map_or(0, |p| p.replicas.len())
}

async fn list(brokers: &crate::brokers::Brokers, json: bool) -> anyhow::Result<()> {
    let metadata = brokers.metadata(&[]).await?;
    if json {
        let list: Vec<_> = metadata
            .topics
            .iter()
            .map(|t| {
                json!({
                    "topic": t.name,
                    "partitions": t.partitions.len(),
                    "replication_factor": replication_factor_of(t),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(list));
        return Ok(());
    }
    if metadata.topics.is_empty() {
        eprintln!("trib: no topics");
    }
    for t in &metadata.topics {
        println!(
            "{}\t{} partition(s), replication factor {}",
            t.name,
            t.partitions.len(),
            replication_factor_of(t)
        );
    }
    Ok(())
}

/// One partition as `describe` shows it.
struct Row {
    partition: i32,
    leader: i32,
    leader_epoch: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
    earliest: Option<i64>,
    latest: Option<i64>,
}

async fn describe(
    brokers: &crate::brokers::Brokers,
    topic: &str,
    json: bool,
) -> anyhow::Result<()> {
    let metadata: MetadataResponse = brokers.metadata(&[topic]).await?;
    let Some(found) = metadata.topic(topic).filter(|t| t.error.is_ok()) else {
        anyhow::bail!("the cluster has no topic {topic}");
    };
    let mut rows = Vec::new();
    for p in &found.partitions {
        let (mut earliest, mut latest) = (None, None);
        if let Some(leader) = metadata.broker(p.leader) {
            let consumer =
                SimpleConsumer::connect(&leader.addr(), SimpleConsumerConfig::default()).await?;
            let first = consumer.offsets(topic, p.partition, OffsetTime::Earliest, 1).await?;
            let last = consumer.offsets(topic, p.partition, OffsetTime::Latest, 1).await?;
            (earliest, latest) = (first.first().copied(), last.first().copied());
        }
        rows.push(Row {
            partition: p.partition,
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            earliest,
            latest,
        });
    }
    if json {
        let partitions: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({
                    "partition": r.partition, "leader": r.leader, "leader_epoch": r.leader_epoch,
                    "replicas": r.replicas, "isr": r.isr, "earliest": r.earliest, "latest": r.latest,
                })
            })
            .collect();
        println!("{}", json!({"topic": topic, "partitions": partitions}));
        return Ok(());
    }
    let ids = |ids: &[i32]| ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
    println!(
        "{:>9} {:>7} {:>6} {:<12} {:<12} {:>14} {:>14}",
        "partition", "leader", "epoch", "replicas", "isr", "earliest", "latest"
    );
    for r in rows {
        let show = |o: Option<i64>| o.map_or("-".to_owned(), |o| o.to_string());
        let leader = if r.leader < 0 { "none".to_owned() } else { r.leader.to_string() };
        println!(
            "{:>9} {:>7} {:>6} {:<12} {:<12} {:>14} {:>14}",
            r.partition,
            leader,
            r.leader_epoch,
            ids(&r.replicas),
            ids(&r.isr),
            show(r.earliest),
            show(r.latest)
        );
    }
    Ok(())
}
