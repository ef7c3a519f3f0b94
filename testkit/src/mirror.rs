//! What the mirror's tests check on the target cluster besides the copied events: the mirror
//! tier's `_audit` counts. (Its clusters are [`crate::cluster::TestCluster`]s, one ZooKeeper
//! chroot each; its events [`crate::events::raw_events`].)

use std::collections::BTreeMap;
use std::time::Duration;

use events::audit::{AUDIT_TOPIC, AuditRecord, Tier};
use schema_registry::RegistryClient;

use crate::cluster::TestCluster;

/// How long the mirror's tests wait for it to copy, commit or count.
pub const WAIT: Duration = Duration::from_secs(60);

/// The latest mirror-tier count per `(host, topic, window)` in the target's `_audit`.
pub async fn latest_audit(
    cluster: &TestCluster,
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
