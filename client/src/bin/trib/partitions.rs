//! `trib partitions reassign|elect-preferred`: moving partitions to other brokers (from a
//! plan file in Kafka's JSON, or every replica off a broker being retired) and moving
//! leadership back to preferred replicas. Both leave a request for the controller under
//! `/admin` in the registry; the controller carries it out.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Context as _;
use cluster::{
    ElectionOutcome, PartitionMove, PartitionState, ReassignmentPlan, Registry, TopicPartition,
};
use serde_json::json;

use crate::Refused;
use crate::brokers::Brokers;
use crate::cli::PartitionsCommand;
use crate::context::Context;

pub async fn run(command: PartitionsCommand, context: &Context, json: bool) -> anyhow::Result<()> {
    match command {
        PartitionsCommand::Reassign {
            brokers,
            plan,
            decommission,
            execute,
            verify,
            throttle_bytes_per_s,
        } => {
            let brokers = Brokers::find(&brokers, context).await?;
            let registry = brokers.registry()?;
            let moves = match (&plan, decommission) {
                (Some(path), _) => read_plan(path)?,
                (None, Some(broker)) => decommission_plan(registry, broker).await?,
                (None, None) => anyhow::bail!(Refused("--plan or --decommission is needed".into())),
            };
            if verify {
                return verify_plan(registry, &moves, json).await;
            }
            reassign(registry, moves, execute, throttle_bytes_per_s, json).await
        }
        PartitionsCommand::ElectPreferred { brokers, topic, timeout_ms } => {
            let brokers = Brokers::find(&brokers, context).await?;
            elect_preferred(brokers.registry()?, topic.as_deref(), timeout_ms, json).await
        }
    }
}

fn read_plan(path: &std::path::Path) -> anyhow::Result<Vec<PartitionMove>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Refused(format!("cannot read {}: {e}", path.display())))?;
    let plan: ReassignmentPlan = serde_json::from_str(&text)
        .map_err(|e| Refused(format!("{}: not a reassignment plan: {e}", path.display())))?;
    plan.validate().map_err(|e| Refused(format!("{}: {e}", path.display())))?;
    Ok(plan.partitions)
}

/// A partition's replicas and its state (none before its first).
type Placement = (Vec<i32>, Option<PartitionState>);

/// Every topic's assignment and its partitions' states, as the registry has them now.
struct Cluster {
    live: BTreeSet<i32>,
    topics: BTreeMap<String, BTreeMap<i32, Placement>>,
}

async fn read_cluster(registry: &Registry) -> anyhow::Result<Cluster> {
    let live = registry.brokers().await.context("cannot read the broker registry")?;
    let deleting = registry.topics_being_deleted().await?;
    let mut topics = BTreeMap::new();
    for topic in registry.topics().await? {
        if deleting.contains(&topic) {
            continue;
        }
        let Some((assignment, _)) = registry.topic_assignment(&topic).await? else { continue };
        let states = registry.partition_states(&topic).await?;
        let partitions = assignment
            .partitions
            .into_iter()
            .map(|(p, replicas)| (p, (replicas, states.get(&p).map(|(s, _)| s.clone()))))
            .collect();
        topics.insert(topic, partitions);
    }
    Ok(Cluster { live: live.into_keys().collect(), topics })
}

/// Moves every replica off `broker`: each to the live broker, not already a replica of the
/// partition, that holds the fewest replicas (counting the moves planned so far), in the
/// retired broker's place in the list.
async fn decommission_plan(registry: &Registry, broker: i32) -> anyhow::Result<Vec<PartitionMove>> {
    let cluster = read_cluster(registry).await?;
    let mut load: BTreeMap<i32, usize> = cluster.live.iter().map(|&b| (b, 0)).collect();
    for partitions in cluster.topics.values() {
        for (replicas, _) in partitions.values() {
            for r in replicas {
                *load.entry(*r).or_default() += 1;
            }
        }
    }
    let mut moves = Vec::new();
    for (topic, partitions) in &cluster.topics {
        for (&partition, (replicas, _)) in partitions {
            let Some(at) = replicas.iter().position(|&r| r == broker) else { continue };
            let to = load
                .iter()
                .filter(|(b, _)| **b != broker && cluster.live.contains(b) && !replicas.contains(b))
                .min_by_key(|(b, n)| (**n, **b))
                .map(|(b, _)| *b)
                .ok_or_else(|| {
                    Refused(format!(
                        "cannot move {topic}-{partition} off broker {broker}: no other live broker \
                         lacks a replica of it"
                    ))
                })?;
            *load.entry(to).or_default() += 1;
            let mut target = replicas.clone();
            target[at] = to;
            moves.push(PartitionMove { topic: topic.clone(), partition, replicas: target });
        }
    }
    if moves.is_empty() {
        eprintln!("trib: broker {broker} holds no replica");
    }
    Ok(moves)
}

fn ids(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

async fn reassign(
    registry: &Registry,
    moves: Vec<PartitionMove>,
    execute: bool,
    throttle_bytes_per_s: Option<u64>,
    json: bool,
) -> anyhow::Result<()> {
    let cluster = read_cluster(registry).await?;
    let registered: BTreeSet<i32> = cluster.live.clone();
    let mut rows = Vec::new();
    for m in &moves {
        let Some((current, _)) = cluster.topics.get(&m.topic).and_then(|t| t.get(&m.partition))
        else {
            anyhow::bail!(Refused(format!("no partition {}-{}", m.topic, m.partition)));
        };
        if let Some(unknown) = m.replicas.iter().find(|r| !registered.contains(r)) {
            anyhow::bail!(Refused(format!(
                "broker {unknown} (in {}-{}'s replicas) is not registered",
                m.topic, m.partition
            )));
        }
        rows.push((m, current.clone()));
    }
    if json {
        let partitions: Vec<_> = rows
            .iter()
            .map(|(m, current)| {
                json!({"topic": m.topic, "partition": m.partition, "current": current,
                       "new": m.replicas})
            })
            .collect();
        println!("{}", json!({"partitions": partitions, "executed": execute}));
    } else if !rows.is_empty() {
        println!("{:<20} {:>9} {:<16} {:<16}", "topic", "partition", "replicas", "new replicas");
        for (m, current) in &rows {
            println!(
                "{:<20} {:>9} {:<16} {:<16}",
                m.topic,
                m.partition,
                ids(current),
                ids(&m.replicas)
            );
        }
    }
    if !execute {
        eprintln!("trib: a plan only; --execute starts it");
        return Ok(());
    }
    let moves: Vec<PartitionMove> = rows
        .into_iter()
        .filter(|(m, current)| *current != m.replicas)
        .map(|(m, _)| m.clone())
        .collect();
    if moves.is_empty() {
        eprintln!("trib: nothing to move");
        return Ok(());
    }
    let count = moves.len();
    let plan = ReassignmentPlan { version: 1, partitions: moves, throttle_bytes_per_s };
    registry.start_reassignment(&plan).await?;
    eprintln!("trib: started moving {count} partition(s); --verify reports how far it is");
    Ok(())
}

async fn verify_plan(
    registry: &Registry,
    moves: &[PartitionMove],
    json: bool,
) -> anyhow::Result<()> {
    let cluster = read_cluster(registry).await?;
    let running = registry.reassignment().await?.map(|(plan, _)| plan);
    let mut rows = Vec::new();
    for m in moves {
        let found = cluster.topics.get(&m.topic).and_then(|t| t.get(&m.partition));
        let Some((replicas, state)) = found else {
            anyhow::bail!(Refused(format!("no partition {}-{}", m.topic, m.partition)));
        };
        let pending = running.as_ref().and_then(|p| p.target(&m.topic, m.partition)).is_some();
        let isr = state.as_ref().map(|s| s.isr.clone()).unwrap_or_default();
        let done =
            !pending && *replicas == m.replicas && m.replicas.iter().all(|r| isr.contains(r));
        rows.push((m, replicas.clone(), isr, done));
    }
    let all_done = rows.iter().all(|r| r.3);
    if json {
        let partitions: Vec<_> = rows
            .iter()
            .map(|(m, replicas, isr, done)| {
                json!({"topic": m.topic, "partition": m.partition, "target": m.replicas,
                       "replicas": replicas, "isr": isr, "done": done})
            })
            .collect();
        println!("{}", json!({"partitions": partitions, "done": all_done}));
    } else {
        for (m, replicas, isr, done) in &rows {
            let status = if *done { "done" } else { "in progress" };
            println!(
                "{}-{}: {status} (replicas {}, in sync {}, target {})",
                m.topic,
                m.partition,
                ids(replicas),
                ids(isr),
                ids(&m.replicas)
            );
        }
    }
    Ok(())
}

async fn elect_preferred(
    registry: &Registry,
    topic: Option<&str>,
    timeout_ms: u64,
    json: bool,
) -> anyhow::Result<()> {
    let which = match topic {
        None => None,
        Some(topic) => {
            let deleting = registry.topics_being_deleted().await?.contains(topic);
            let found = registry.topic_assignment(topic).await?.filter(|_| !deleting);
            let Some((assignment, _)) = found else {
                anyhow::bail!(Refused(format!("no topic {topic}")));
            };
            let partitions = assignment.partitions.keys();
            Some(
                partitions
                    .map(|&p| TopicPartition { topic: topic.to_owned(), partition: p })
                    .collect::<Vec<_>>(),
            )
        }
    };
    let results =
        registry.elect_preferred(which.as_deref(), Duration::from_millis(timeout_ms)).await?;
    if results.iter().any(|r| r.outcome == ElectionOutcome::Pending) {
        anyhow::bail!("the controller has not carried out the election in {timeout_ms} ms");
    }
    let mut rows = Vec::new();
    for r in &results {
        let outcome = match r.outcome {
            ElectionOutcome::Elected => "elected",
            ElectionOutcome::NotLive => "preferred replica not live",
            ElectionOutcome::NotInSync => "preferred replica not in sync",
            // Led by its preferred replica already, or deleted meanwhile: nothing to report.
            ElectionOutcome::NotNeeded
            | ElectionOutcome::NoPartition
            | ElectionOutcome::Pending => {
                continue;
            }
        };
        rows.push((&r.partition, r.before, r.leader, r.preferred, outcome));
    }
    if json {
        let partitions: Vec<_> = rows
            .iter()
            .map(|(tp, before, leader, preferred, outcome)| {
                json!({"topic": tp.topic, "partition": tp.partition, "before": before,
                       "leader": leader, "preferred": preferred, "outcome": outcome})
            })
            .collect();
        println!("{}", json!({"partitions": partitions}));
        return Ok(());
    }
    if rows.is_empty() {
        println!("every partition is led by its preferred replica");
    }
    for (tp, before, leader, preferred, outcome) in rows {
        println!(
            "{}-{}: {outcome} (leader was {before}, is {leader}; preferred {preferred})",
            tp.topic, tp.partition
        );
    }
    Ok(())
}
