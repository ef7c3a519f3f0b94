//! What the agent's tests share: a config for a test agent, events with known ids, and reading
//! back what reached a broker.

#![allow(dead_code)] // each test binary uses its own subset

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use client::{SimpleConsumer, SimpleConsumerConfig};
use events::envelope::EventHeader;
use frontend_agent::encode::encode_hex;
use frontend_agent::{Agent, Brokers, Config};
use schema_registry::RegistryClient;
use serde_json::{Value, json};

pub const DEADLINE: Duration = Duration::from_secs(60);

/// An agent config for tests: short intervals, host `test-host`.
pub fn config(registry: &str, spool_dir: &Path, brokers: &[&str]) -> Config {
    Config {
        registry: registry.to_owned(),
        brokers: brokers.iter().map(|b| (*b).to_owned()).collect(),
        spool_dir: spool_dir.to_owned(),
        host_name: Some("test-host".to_owned()),
        service: "test-service".to_owned(),
        audit_publish_ms: 200,
        spool_ack_sync_ms: 50,
        retry_backoff_max_ms: 500,
        drain_timeout_ms: 5_000,
        ..Config::default()
    }
}

pub async fn start(config: Config) -> Agent {
    testkit::broker::init_logging();
    let registry = Arc::new(RegistryClient::new(&config.registry).unwrap());
    let brokers = Brokers::Addrs(config.brokers.clone());
    Agent::start(config, brokers, registry).await.expect("agent starts")
}

/// A page view with header id `n` (as 16 bytes, big-endian) so the test can find it again.
pub fn page_view(n: u64) -> Value {
    json!({
        "header": {"id": id_hex(n)},
        "member_id": n,
        "page_key": "feed",
        "url": format!("https://example.com/{n}"),
        "duration_ms": 12,
    })
}

pub fn id_hex(n: u64) -> String {
    encode_hex(&id(n))
}

pub fn id(n: u64) -> [u8; 16] {
    let mut id = [0u8; 16];
    id[8..].copy_from_slice(&n.to_be_bytes());
    id
}

/// Every payload in partition 0 of `topic` on the broker at `addr` (empty if the topic is not
/// there yet).
pub async fn read_all(addr: &str, topic: &str) -> Vec<Vec<u8>> {
    read_all_with(addr, topic, SimpleConsumerConfig::default()).await
}

/// [`read_all`] with `config` (TLS, say).
pub async fn read_all_with(addr: &str, topic: &str, config: SimpleConsumerConfig) -> Vec<Vec<u8>> {
    let Ok(consumer) = SimpleConsumer::connect(addr, config).await else {
        return Vec::new();
    };
    let mut payloads = Vec::new();
    let mut offset = 0;
    loop {
        let Ok(fetched) = consumer.fetch(topic, 0, offset).await else {
            return payloads;
        };
        if fetched.is_empty() {
            return payloads;
        }
        let mut messages = fetched.iter();
        for message in messages.by_ref() {
            payloads.push(message.expect("valid message").payload.to_vec());
        }
        offset = messages.next_offset();
    }
}

/// How many times each header id occurs in `topic` on the broker.
pub async fn id_counts(addr: &str, topic: &str) -> HashMap<[u8; 16], usize> {
    let mut counts = HashMap::new();
    for payload in read_all(addr, topic).await {
        let (_, header) = EventHeader::read(&payload).expect("an event header");
        *counts.entry(header.id).or_default() += 1;
    }
    counts
}

/// Waits until every id of `expected` is in `topic`; returns the counts (duplicates show > 1).
pub async fn wait_for_ids(addr: &str, topic: &str, expected: &[u64]) -> HashMap<[u8; 16], usize> {
    testkit::eventually(DEADLINE, "every accepted event in the broker", || async {
        let counts = id_counts(addr, topic).await;
        expected.iter().all(|n| counts.contains_key(&id(*n))).then_some(counts)
    })
    .await
}
