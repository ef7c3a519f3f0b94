//! `trib brokers list`: every live broker of a cluster with what it carries — partitions it
//! leads and holds a replica of, the ones it leads short of in-sync replicas — and the bytes of
//! log it holds, all from METADATA and each partition leader's offsets.

use std::collections::BTreeMap;

use client::{OffsetTime, SimpleConsumer};
use serde::Serialize;

use crate::brokers::Brokers;
use crate::context::Context;

#[derive(Debug, Default, Serialize)]
struct BrokerRow {
    id: i32,
    addr: String,
    leaders: usize,
    replicas: usize,
    under_replicated: usize,
    /// Bytes of log of the partitions it has a replica of: a replica holds what its leader
    /// holds (log end − log start), once caught up.
    log_bytes: i64,
}

pub async fn list(brokers: &Brokers, context: &Context, json: bool) -> anyhow::Result<()> {
    let metadata = brokers.metadata(&[]).await?;
    let mut rows: BTreeMap<i32, BrokerRow> = metadata
        .brokers
        .iter()
        .map(|b| (b.id, BrokerRow { id: b.id, addr: b.addr(), ..BrokerRow::default() }))
        .collect();
    let mut offline = 0;
    for topic in metadata.topics.iter().filter(|t| t.error.is_ok()) {
        for p in &topic.partitions {
            let size = match metadata.broker(p.leader) {
                Some(leader) => {
                    let consumer =
                        SimpleConsumer::connect(&leader.addr(), context.consumer_config()).await?;
                    let start = consumer.offsets(&topic.name, p.partition, OffsetTime::Earliest, 1);
                    let start = start.await?.first().copied().unwrap_or(0);
                    let end = consumer.offsets(&topic.name, p.partition, OffsetTime::Latest, 1);
                    end.await?.first().copied().unwrap_or(start) - start
                }
                None => {
                    offline += 1;
                    0
                }
            };
            for replica in &p.replicas {
                if let Some(row) = rows.get_mut(replica) {
                    row.replicas += 1;
                    row.log_bytes += size;
                }
            }
            if let Some(row) = rows.get_mut(&p.leader) {
                row.leaders += 1;
                row.under_replicated += usize::from(p.isr.len() < p.replicas.len());
            }
        }
    }
    if json {
        let brokers: Vec<&BrokerRow> = rows.values().collect();
        println!("{}", serde_json::json!({"brokers": brokers, "offline_partitions": offline}));
        return Ok(());
    }
    println!(
        "{:>6} {:<24} {:>8} {:>9} {:>17} {:>14}",
        "broker", "address", "leaders", "replicas", "under-replicated", "log bytes"
    );
    for r in rows.values() {
        println!(
            "{:>6} {:<24} {:>8} {:>9} {:>17} {:>14}",
            r.id, r.addr, r.leaders, r.replicas, r.under_replicated, r.log_bytes
        );
    }
    if offline > 0 {
        println!("{offline} partitions offline (no live leader)");
    }
    Ok(())
}
