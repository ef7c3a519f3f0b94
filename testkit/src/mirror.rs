//! What the mirror's tests share. (Its clusters are [`crate::cluster::TestCluster`]s, one
//! ZooKeeper chroot each; its events [`crate::events::raw_events`].)

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use crate::cluster::TestCluster;

/// How long the mirror's tests wait for it to copy or commit.
pub const WAIT: Duration = Duration::from_secs(60);

/// The payloads of `topic` in `cluster` held more than once, with how many times each is.
pub async fn held_twice(cluster: &TestCluster, topic: &str) -> BTreeMap<Bytes, usize> {
    let mut held: BTreeMap<Bytes, usize> = BTreeMap::new();
    for payload in cluster.payloads(topic).await {
        *held.entry(payload).or_default() += 1;
    }
    held.retain(|_, times| *times > 1);
    held
}
