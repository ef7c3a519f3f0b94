//! `trib topics list|create|describe|delete|config`: the cluster's topics, creating and
//! deleting them, each partition's leader, replicas and in-sync replicas, and a topic's
//! settings.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use client::{OffsetTime, SimpleConsumer};
use protocol::{MetadataResponse, TopicMetadata};
use serde_json::json;

use crate::Refused;
use crate::brokers::Brokers;
use crate::cli::TopicsCommand;
use crate::context::Context;

pub async fn run(command: TopicsCommand, context: &Context, json: bool) -> anyhow::Result<()> {
    match command {
        TopicsCommand::List { brokers } => {
            list(&Brokers::find(&brokers, context).await?, json).await
        }
        TopicsCommand::Create { brokers, topic, partitions, replication_factor, configs } => {
            let brokers = Brokers::find(&brokers, context).await?;
            let mut configs: Vec<(String, String)> = configs;
            if let Some(factor) = replication_factor {
                configs.push(("replication_factor".into(), factor.to_string()));
            }
            let configs: Vec<(&str, &str)> =
                configs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let addr = brokers.addrs().await?.into_iter().next().context("no broker address")?;
            let conn = context.connect(&addr).await?;
            match conn.create_topic(&topic, partitions, &configs).await {
                Ok(()) => {}
                Err(e) if e.code() == Some(protocol::ErrorCode::InvalidConfig) => {
                    anyhow::bail!(Refused(format!("cannot create {topic} through {addr}: {e}")));
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot create {topic} through {addr}"));
                }
            }
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
            describe(&Brokers::find(&brokers, context).await?, context, &topic, json).await
        }
        TopicsCommand::Delete { brokers, topic, execute, timeout_ms } => {
            let brokers = Brokers::find(&brokers, context).await?;
            delete(brokers.registry()?, &topic, execute, Duration::from_millis(timeout_ms), json)
                .await
        }
        TopicsCommand::Config { brokers, topic, set, unset } => {
            config(&Brokers::find(&brokers, context).await?, context, &topic, set, unset, json)
                .await
        }
    }
}

/// A topic's assignment, or the refusal for a topic the cluster does not have.
async fn assignment(
    registry: &cluster::Registry,
    topic: &str,
) -> anyhow::Result<(cluster::TopicAssignment, cluster::Version)> {
    let found = registry.topic_assignment(topic).await.context("cannot read the topic")?;
    let deleting = registry.topics_being_deleted().await?.contains(topic);
    match found {
        Some(found) if !deleting => Ok(found),
        Some(_) => Err(Refused(format!("topic {topic} is being deleted")).into()),
        None => Err(Refused(format!("no topic {topic}")).into()),
    }
}

async fn delete(
    registry: &cluster::Registry,
    topic: &str,
    execute: bool,
    timeout: Duration,
    json: bool,
) -> anyhow::Result<()> {
    let already = registry.topics_being_deleted().await?.contains(topic);
    let found = registry.topic_assignment(topic).await.context("cannot read the topic")?;
    if found.is_none() && !already {
        anyhow::bail!(Refused(format!("no topic {topic}")));
    }
    let partitions = found.as_ref().map_or(0, |(a, _)| a.partitions.len());
    let replicas: std::collections::BTreeSet<i32> = found
        .as_ref()
        .map(|(a, _)| a.partitions.values().flatten().copied().collect())
        .unwrap_or_default();
    let mut groups = Vec::new();
    for group in registry.groups().await? {
        if registry.group_topics(&group).await?.iter().any(|t| t == topic) {
            groups.push(group);
        }
    }
    let show = |ids: &std::collections::BTreeSet<i32>| {
        ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
    };
    if !execute {
        if json {
            println!(
                "{}",
                json!({"topic": topic, "partitions": partitions, "brokers": replicas,
                       "groups": groups, "executed": false})
            );
        } else {
            println!(
                "topic {topic}: {partitions} partition(s) on brokers {}; offsets of groups: {}",
                show(&replicas),
                if groups.is_empty() { "none".to_owned() } else { groups.join(", ") }
            );
        }
        eprintln!("trib: a plan only; --execute deletes the topic");
        return Ok(());
    }
    match registry.delete_topic(topic, timeout).await? {
        Some(cluster::Deletion::Done) | None => {}
        Some(cluster::Deletion::Waiting(waiting)) => anyhow::bail!(
            "{topic} is marked for deletion, still waiting for brokers {} to remove their \
             replicas (a broker that is down finishes when it returns)",
            show(&waiting)
        ),
    }
    if json {
        println!(
            "{}",
            json!({"topic": topic, "partitions": partitions, "brokers": replicas,
                   "groups": groups, "executed": true})
        );
    } else {
        println!("deleted {topic}: {partitions} partition(s) from brokers {}", show(&replicas));
    }
    Ok(())
}

/// Settings no `--unset` may remove: the replication of a topic is changed by reassignment.
const FIXED_KEYS: [&str; 1] = ["replication_factor"];

async fn config(
    brokers: &Brokers,
    context: &Context,
    topic: &str,
    set: Vec<(String, String)>,
    unset: Vec<String>,
    json: bool,
) -> anyhow::Result<()> {
    let registry = brokers.registry()?;
    let (before, _) = assignment(registry, topic).await?;
    if let Some(key) = unset.iter().find(|k| FIXED_KEYS.contains(&k.as_str())) {
        anyhow::bail!(Refused(format!(
            "{key} cannot be unset (trib partitions reassign changes it)"
        )));
    }
    if let Some((key, _)) = set.iter().find(|(k, _)| unset.contains(k)) {
        anyhow::bail!(Refused(format!("{key} is both set and unset")));
    }
    if let Some((key, _)) = set.iter().find(|(k, _)| k == "partitions") {
        anyhow::bail!(Refused(format!(
            "{key} is not a setting: trib topics create adds partitions"
        )));
    }
    if !set.is_empty() {
        // The broker validates every setting as CREATE_TOPIC does, and merges them in.
        let configs: Vec<(&str, &str)> =
            set.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let count = before.partitions.len() as i32;
        let addr = brokers.addrs().await?.into_iter().next().context("no broker address")?;
        let conn = context.connect(&addr).await?;
        match conn.create_topic(topic, count, &configs).await {
            Ok(()) => {}
            Err(e) if e.code() == Some(protocol::ErrorCode::InvalidConfig) => {
                let shown: Vec<String> = set.iter().map(|(k, v)| format!("{k}={v}")).collect();
                anyhow::bail!(Refused(format!(
                    "the broker refused {}: an unknown key or a value out of range",
                    shown.join(" ")
                )));
            }
            Err(e) => {
                return Err(e).with_context(|| format!("cannot change {topic} through {addr}"));
            }
        }
    }
    if !unset.is_empty() {
        loop {
            let (mut changed, version) = assignment(registry, topic).await?;
            for key in &unset {
                changed.config.remove(key);
            }
            match registry.set_topic_assignment(topic, &changed, version).await {
                Ok(_) => break,
                Err(cluster::RegistryError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
    let (after, _) = assignment(registry, topic).await?;
    let changed = !set.is_empty() || !unset.is_empty();
    if json {
        println!("{}", json!({"topic": topic, "config": after.config, "changed": changed}));
        return Ok(());
    }
    print_config(&after.config, changed.then_some(&before.config));
    Ok(())
}

fn print_config(config: &BTreeMap<String, String>, before: Option<&BTreeMap<String, String>>) {
    if config.is_empty() {
        eprintln!("trib: no settings of its own: the brokers' defaults apply");
    }
    for (key, value) in config {
        let was = before.and_then(|b| b.get(key));
        match (before, was) {
            (Some(_), Some(was)) if was != value => println!("{key}={value}\t(was {was})"),
            (Some(_), None) => println!("{key}={value}\t(new)"),
            _ => println!("{key}={value}"),
        }
    }
    for key in before.into_iter().flat_map(|b| b.keys()).filter(|k| !config.contains_key(*k)) {
        println!("{key}\t(unset)");
    }
}

fn replication_factor_of(topic: &TopicMetadata) -> usize {
    topic.partitions.first().map_or(0, |p| p.replicas.len())
}

async fn list(brokers: &Brokers, json: bool) -> anyhow::Result<()> {
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

async fn leader_offsets(
    context: &Context,
    addr: &str,
    topic: &str,
    partition: i32,
) -> anyhow::Result<Offsets> {
    let consumer = SimpleConsumer::connect(addr, context.consumer_config()).await?;
    let first = consumer.offsets(topic, partition, OffsetTime::Earliest, 1).await?;
    let local = consumer.offsets(topic, partition, OffsetTime::EarliestLocal, 1).await?;
    let last = consumer.offsets(topic, partition, OffsetTime::Latest, 1).await?;
    Ok(Offsets {
        earliest: first.first().copied(),
        local: local.first().copied(),
        latest: last.first().copied(),
    })
}

/// A partition's log as its leader tells it: where it starts (in the object store, for a
/// tiered topic), where it starts on disk, and its visible end. Offsets are byte offsets, so
/// the differences are sizes.
#[derive(Debug, Default, Clone, Copy)]
struct Offsets {
    earliest: Option<i64>,
    local: Option<i64>,
    latest: Option<i64>,
}

impl Offsets {
    /// Bytes of the log in the object store, below the local log.
    fn remote_bytes(&self) -> Option<i64> {
        Some(self.local? - self.earliest?)
    }

    /// Bytes of the log on the leader's disk.
    fn local_bytes(&self) -> Option<i64> {
        Some(self.latest? - self.local?)
    }
}

/// One partition as `describe` shows it.
struct Row {
    partition: i32,
    leader: i32,
    leader_epoch: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
    offsets: Offsets,
}

async fn describe(
    brokers: &Brokers,
    context: &Context,
    topic: &str,
    json: bool,
) -> anyhow::Result<()> {
    let metadata: MetadataResponse = brokers.metadata(&[topic]).await?;
    let Some(found) = metadata.topic(topic).filter(|t| t.error.is_ok()) else {
        anyhow::bail!("the cluster has no topic {topic}");
    };
    let mut rows = Vec::new();
    for p in &found.partitions {
        let mut offsets = Offsets::default();
        // A leader that cannot answer (it just died; the controller has not moved its
        // partitions yet) leaves its offsets unknown: describe is for incidents too.
        if let Some(leader) = metadata.broker(p.leader) {
            match leader_offsets(context, &leader.addr(), topic, p.partition).await {
                Ok(found) => offsets = found,
                Err(e) => {
                    tracing::warn!(partition = p.partition, error = %e, "no offsets from the leader")
                }
            }
        }
        rows.push(Row {
            partition: p.partition,
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            offsets,
        });
    }
    if json {
        let partitions: Vec<_> = rows
            .iter()
            .map(|r| {
                let o = &r.offsets;
                json!({
                    "partition": r.partition, "leader": r.leader, "leader_epoch": r.leader_epoch,
                    "replicas": r.replicas, "isr": r.isr, "earliest": o.earliest,
                    "local_start": o.local, "latest": o.latest,
                    "remote_bytes": o.remote_bytes(), "local_bytes": o.local_bytes(),
                })
            })
            .collect();
        println!("{}", json!({"topic": topic, "partitions": partitions}));
        return Ok(());
    }
    let ids = |ids: &[i32]| ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
    println!(
        "{:>9} {:>7} {:>6} {:<12} {:<12} {:>14} {:>14} {:>14} {:>12} {:>12}",
        "partition",
        "leader",
        "epoch",
        "replicas",
        "isr",
        "earliest",
        "local start",
        "latest",
        "remote bytes",
        "local bytes"
    );
    for r in rows {
        let show = |o: Option<i64>| o.map_or("-".to_owned(), |o| o.to_string());
        let leader = if r.leader < 0 { "none".to_owned() } else { r.leader.to_string() };
        let o = r.offsets;
        println!(
            "{:>9} {:>7} {:>6} {:<12} {:<12} {:>14} {:>14} {:>14} {:>12} {:>12}",
            r.partition,
            leader,
            r.leader_epoch,
            ids(&r.replicas),
            ids(&r.isr),
            show(o.earliest),
            show(o.local),
            show(o.latest),
            show(o.remote_bytes()),
            show(o.local_bytes())
        );
    }
    Ok(())
}
