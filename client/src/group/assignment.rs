//! The paper's Algorithm 1: every consumer of a group computes the same assignment from the
//! same registry contents, so no master is needed.
//!
//! For one topic: sort the partitions `PT` and the consumer streams `CT`; with
//! `N = |PT| / |CT|`, stream `j` takes a contiguous range of `N` partitions, and the first
//! `|PT| mod |CT|` streams take one more each.

use std::collections::BTreeMap;

/// One stream of one consumer: `{consumer_id}-{stream}` is its name in the owner registry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    pub consumer: String,
    pub stream: u32,
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.consumer, self.stream)
    }
}

/// The partitions each stream owns. `partitions` and `streams` may come in any order and with
/// repeats; every partition goes to exactly one stream when there is at least one stream.
pub fn assign(partitions: &[i32], streams: &[StreamId]) -> BTreeMap<StreamId, Vec<i32>> {
    let mut partitions = partitions.to_vec();
    partitions.sort();
    partitions.dedup();
    let mut streams = streams.to_vec();
    streams.sort();
    streams.dedup();
    let mut assignment = BTreeMap::new();
    if streams.is_empty() {
        return assignment;
    }
    let per_stream = partitions.len() / streams.len();
    let extra = partitions.len() % streams.len();
    let mut start = 0;
    for (j, stream) in streams.into_iter().enumerate() {
        let count = per_stream + usize::from(j < extra);
        assignment.insert(stream, partitions[start..start + count].to_vec());
        start += count;
    }
    assignment
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Partition `4 × block + index`: the tests' partitions come in blocks of 4.
    fn pid(block: i32, index: u32) -> i32 {
        block * 16 + index as i32
    }

    fn sid(consumer: &str, stream: u32) -> StreamId {
        StreamId { consumer: consumer.into(), stream }
    }

    #[test]
    fn eight_partitions_over_three_streams() {
        let partitions: Vec<_> = (0..2).flat_map(|b| (0..4).map(move |p| pid(b, p))).collect();
        let streams = [sid("c3", 0), sid("c1", 0), sid("c2", 0)];
        let a = assign(&partitions, &streams);
        assert_eq!(a[&sid("c1", 0)], [pid(0, 0), pid(0, 1), pid(0, 2)]);
        assert_eq!(a[&sid("c2", 0)], [pid(0, 3), pid(1, 0), pid(1, 1)]);
        assert_eq!(a[&sid("c3", 0)], [pid(1, 2), pid(1, 3)]);
    }

    #[test]
    fn more_streams_than_partitions_leaves_some_idle() {
        let a = assign(&[pid(0, 0)], &[sid("a", 0), sid("a", 1)]);
        assert_eq!(a[&sid("a", 0)], [pid(0, 0)]);
        assert!(a[&sid("a", 1)].is_empty());
    }

    fn inputs() -> impl Strategy<Value = (Vec<i32>, Vec<StreamId>)> {
        let partitions =
            prop::collection::vec((0i32..4, 0u32..16).prop_map(|(b, p)| pid(b, p)), 0..40);
        let streams = prop::collection::vec(
            (0u8..6, 0u32..3).prop_map(|(c, s)| sid(&format!("c{c}"), s)),
            1..10,
        );
        (partitions, streams)
    }

    proptest! {
        #[test]
        fn every_partition_exactly_once_sizes_within_one_deterministic((partitions, streams) in inputs()) {
            let a = assign(&partitions, &streams);
            let mut owned: Vec<i32> = a.values().flatten().copied().collect();
            owned.sort();
            let mut expected = partitions.clone();
            expected.sort();
            expected.dedup();
            prop_assert_eq!(&owned, &expected, "every partition exactly once");
            let sizes: Vec<usize> = a.values().map(Vec::len).collect();
            prop_assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
            // Any order of the same inputs, on any consumer, gives the same answer.
            let mut reversed_p = partitions.clone();
            reversed_p.reverse();
            let mut reversed_s = streams.clone();
            reversed_s.reverse();
            prop_assert_eq!(assign(&reversed_p, &reversed_s), a.clone());
            // Ranges are contiguous in the sorted partition order.
            for owned in a.values() {
                for pair in owned.windows(2) {
                    let i = expected.binary_search(&pair[0]).unwrap();
                    prop_assert_eq!(expected[i + 1], pair[1]);
                }
            }
        }
    }
}
