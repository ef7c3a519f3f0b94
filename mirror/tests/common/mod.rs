//! What the mirror's tests share: clusters (`testkit`'s, one ZooKeeper chroot each), events
//! with unique bodies, and helpers that read a whole topic back by content.

#![allow(dead_code)] // each test binary uses its own part of these helpers

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use events::audit::{AUDIT_TOPIC, AuditRecord, Tier};
use protocol::Codec;
use schema_registry::RegistryClient;
use testkit::broker::message_set;

pub const WAIT: Duration = Duration::from_secs(60);

pub use testkit::cluster::TestCluster as Cluster;
use testkit::events::raw_event;

/// `count` events of `topic` from `cluster`, each with a unique body.
pub fn events(cluster: &str, topic: &str, from: usize, count: usize, time_ms: i64) -> Vec<Bytes> {
    (from..from + count).map(|i| raw_event(time_ms, &format!("{cluster}/{topic}/{i}"))).collect()
}

/// One compressed wrapper holding `payloads`.
pub fn wrapper(codec: Codec, payloads: &[Bytes]) -> Bytes {
    let inner = message_set(payloads);
    let mut set = BytesMut::new();
    protocol::encode_message(&mut set, codec, &client::compress(codec, &inner).unwrap());
    set.freeze()
}

/// Waits until `cluster` holds every payload of `expected` in `topic` (duplicates allowed).
pub async fn wait_for_all(cluster: &Cluster, topic: &str, expected: &[Bytes], what: &str) {
    let expected: BTreeSet<Bytes> = expected.iter().cloned().collect();
    testkit::eventually(WAIT, what, || async {
        let got: BTreeSet<Bytes> = cluster.payloads(topic).await.into_iter().collect();
        let missing = expected.difference(&got).count();
        (missing == 0).then_some(())
    })
    .await;
}

/// The latest mirror-tier count per `(host, topic, window)` in the target's `_audit`.
pub async fn mirror_audit(
    cluster: &Cluster,
    registry: &RegistryClient,
) -> BTreeMap<(String, String, i64), AuditRecord> {
    let mut latest = BTreeMap::new();
    for payload in cluster.payloads(AUDIT_TOPIC).await {
        let Ok((_, value)) = events::envelope::decode_with(registry, &payload).await else {
            continue;
        };
        let record = AuditRecord::from_value(&value).unwrap();
        if record.tier != Tier::Mirror {
            continue;
        }
        let key = (record.host.clone(), record.topic.clone(), record.window_start);
        let newer = latest.get(&key).is_none_or(|r: &AuditRecord| r.count <= record.count);
        if newer {
            latest.insert(key, record);
        }
    }
    latest
}
