//! How a producer picks the partition of each message (paper §3.2: "randomly or by a
//! partitioning key and function"). A topic's partitions are every `(broker, partition)`
//! pair its brokers hold, in a stable order, and a partitioner picks one of them.

use std::fmt;
use std::sync::Arc;

/// One partition a message can go to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// Address of the broker that holds it.
    pub addr: String,
    pub broker_id: i32,
    /// Index on that broker, or [`protocol::ANY_PARTITION`].
    pub partition: i32,
}

/// A caller's choice: `(topic, key, partitions)` → index into `partitions`. An index out of
/// range makes the send fail with [`crate::ProducerError::PartitionOutOfRange`].
pub type PartitionFn = Arc<dyn Fn(&str, Option<&[u8]>, &[TopicPartition]) -> usize + Send + Sync>;

/// The producer's partitioning rule.
#[derive(Clone, Default)]
pub enum Partitioner {
    /// A random partition per message.
    #[default]
    Random,
    /// A stable hash of the key (FNV-1a), so a key always lands on the same partition while
    /// the topic's partitions do not change. Messages without a key go to a random one.
    ByKey,
    /// The caller's function.
    Custom(PartitionFn),
    /// Partition −1 on a random broker address: the broker picks one of its partitions. For a
    /// producer behind a load balancer, which sees one address and no partitions.
    Any,
}

impl fmt::Debug for Partitioner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Partitioner::Random => "Random",
            Partitioner::ByKey => "ByKey",
            Partitioner::Custom(_) => "Custom",
            Partitioner::Any => "Any",
        })
    }
}

impl Partitioner {
    /// Index into `partitions` (which is not empty) for a message with `key`.
    pub(crate) fn pick(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        partitions: &[TopicPartition],
    ) -> usize {
        let random = || rand::random_range(0..partitions.len());
        match (self, key) {
            (Partitioner::ByKey, Some(key)) => (fnv1a(key) % partitions.len() as u64) as usize,
            (Partitioner::Custom(f), _) => f(topic, key, partitions),
            _ => random(),
        }
    }
}

/// 64-bit FNV-1a: stable across processes, versions and platforms, unlike `std`'s hasher.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partitions(n: i32) -> Vec<TopicPartition> {
        (0..n)
            .map(|partition| TopicPartition { addr: "b:1".into(), broker_id: 0, partition })
            .collect()
    }

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn same_key_same_partition_and_keys_spread() {
        let parts = partitions(8);
        let mut used = std::collections::HashSet::new();
        for i in 0..200 {
            let key = format!("user-{i}");
            let first = Partitioner::ByKey.pick("t", Some(key.as_bytes()), &parts);
            assert_eq!(first, Partitioner::ByKey.pick("t", Some(key.as_bytes()), &parts));
            used.insert(first);
        }
        assert_eq!(used.len(), 8, "200 keys reach every one of 8 partitions");
    }

    #[test]
    fn custom_function_decides() {
        let last: PartitionFn = Arc::new(|_, _, parts| parts.len() - 1);
        assert_eq!(Partitioner::Custom(last).pick("t", None, &partitions(5)), 4);
    }
}
